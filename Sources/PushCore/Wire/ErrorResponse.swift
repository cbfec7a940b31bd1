import NIOCore

/// The gateway's error-response packet: command 8, a status byte, and the identifier of the notification it names.
public struct ErrorResponse: Hashable, Sendable {
    public static let command: UInt8 = 8
    public static let size = 6

    public var status: GatewayStatus
    public var identifier: UInt32

    public init(status: GatewayStatus, identifier: UInt32) {
        self.status = status
        self.identifier = identifier
    }

    public func write(into buffer: inout ByteBuffer) {
        buffer.writeInteger(ErrorResponse.command)
        buffer.writeInteger(status.code)
        buffer.writeInteger(identifier)
    }

    /// Reads one error response from the front of `buffer`.
    ///
    /// Returns nil and consumes nothing when fewer than 6 bytes are there. Throws, consuming nothing, when the first
    /// byte is not command 8: the gateway sends nothing else, so the stream cannot be trusted after that.
    public static func decode(from buffer: inout ByteBuffer) throws(WireDecodingError) -> ErrorResponse? {
        guard let command = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
        guard command == ErrorResponse.command else {
            throw WireDecodingError(
                .unexpectedCommand(command), bytes: buffer.getSlice(at: buffer.readerIndex, length: min(buffer.readableBytes, 64))!)
        }
        guard buffer.readableBytes >= size else { return nil }
        let status = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self)!
        buffer.moveReaderIndex(forwardBy: 2)
        let identifier = buffer.readInteger(as: UInt32.self)!
        return ErrorResponse(status: GatewayStatus(code: status), identifier: identifier)
    }
}

/// Bytes off the wire that do not follow the protocol, with (the start of) the bytes themselves.
public struct WireDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        case unexpectedCommand(UInt8)
        case invalidTokenLength(Int)
        case truncated(Int)
    }

    public var kind: Kind
    /// At most the first 64 bytes of what could not be decoded.
    public var bytes: ByteBuffer

    public init(_ kind: Kind, bytes: ByteBuffer) {
        self.kind = kind
        self.bytes = bytes
    }

    /// The bytes for a log: the first six (a record's header: an error response, or a feedback tuple's time and
    /// token length) whole, the rest, which can hold a device token, shortened as tokens are everywhere in logs.
    var shownBytes: String {
        let view = bytes.readableBytesView
        let head = Hex.encode(view.prefix(6))
        let rest = view.dropFirst(6)
        guard !rest.isEmpty else { return head }
        let tail = Hex.encode(rest)
        let shown = tail.count > 12 ? "\(tail.prefix(4))…\(tail.suffix(4)), \(rest.count) bytes" : tail
        return "\(head) \(shown)"
    }

    public var description: String {
        let hex = shownBytes
        switch kind {
        case .unexpectedCommand(let c): return "unexpected command byte \(c) (bytes: \(hex))"
        case .invalidTokenLength(let n): return "token length \(n) is outside 1...100 (bytes: \(hex))"
        case .truncated(let n): return "\(n) trailing bytes do not make a whole record (bytes: \(hex))"
        }
    }
}
