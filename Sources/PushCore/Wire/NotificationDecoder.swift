import NIOCore

/// A notification as read off the wire by the gateway side (the simulator), in any of the three formats.
public struct DecodedNotification: Hashable, Sendable {
    public var format: NotificationFormat
    public var token: [UInt8]
    public var payload: [UInt8]
    /// The identifier, or 0 when the notification carries none (simple format, or a frame without item 3).
    public var identifier: UInt32
    /// The expiration, or 0 when the notification carries none.
    public var expiration: UInt32
    /// The priority: 10 when the notification carries none.
    public var priority: UInt8

    public init(
        format: NotificationFormat, token: [UInt8], payload: [UInt8], identifier: UInt32, expiration: UInt32,
        priority: UInt8
    ) {
        self.format = format
        self.token = token
        self.payload = payload
        self.identifier = identifier
        self.expiration = expiration
        self.priority = priority
    }
}

/// What the gateway makes of the next notification in its input.
public enum NotificationDecodingResult: Hashable, Sendable {
    case notification(DecodedNotification)
    /// The input breaks the protocol: the gateway answers with `response`, closes the connection, and discards
    /// everything after. `detail` says what was wrong; `command` is the first byte of what was rejected (for
    /// command 0, the simple format, the gateway closes without answering).
    case rejected(ErrorResponse, detail: String, command: UInt8)
}

/// Reads notifications strictly, as Apple's gateway does, and says which error response each violation earns.
///
/// Statuses: unknown command, a frame that does not parse into items, an unknown or repeated item, or an item of
/// the wrong size: 128 (protocol error). No token or an empty one: 2. Token over 100 bytes: 5. No payload or an
/// empty one: 4. Payload over the format's limit: 7. Rejections name the notification's identifier when it could
/// be read, else 0. The decoder never traps and never waits for more than one notification's worth of bytes.
public enum NotificationDecoder {
    /// A frame holds at most five items of at most 65535 bytes each; a longer frame length is refused at once.
    public static let maxFrameLength = 5 * (3 + Int(UInt16.max))

    /// Decodes the notification at the front of `buffer`. Returns nil, consuming nothing, when it is not all there.
    /// A notification is consumed; after a rejection the caller stops reading (what was consumed is unspecified).
    public static func decode(from buffer: inout ByteBuffer) -> NotificationDecodingResult? {
        guard let command = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
        let result: NotificationDecodingResult?
        switch NotificationFormat(command: command) {
        case .frame: result = decodeFrame(&buffer)
        case .enhanced: result = decodeLegacy(&buffer, format: .enhanced)
        case .simple: result = decodeLegacy(&buffer, format: .simple)
        case nil: result = reject(.protocolError, 0, "unknown command \(command)")
        }
        guard case .rejected(let response, let detail, _) = result else { return result }
        return .rejected(response, detail: detail, command: command)
    }

    private static func reject(_ status: GatewayStatus, _ identifier: UInt32, _ detail: String) -> NotificationDecodingResult {
        .rejected(ErrorResponse(status: status, identifier: identifier), detail: detail, command: 0xFF)
    }

    private static func decodeLegacy(_ buffer: inout ByteBuffer, format: NotificationFormat) -> NotificationDecodingResult? {
        let start = buffer.readerIndex
        let header = format == .enhanced ? 9 : 1
        guard buffer.readableBytes >= header + 2 else { return nil }
        let identifier = format == .enhanced ? buffer.getInteger(at: start + 1, as: UInt32.self)! : 0
        let expiration = format == .enhanced ? buffer.getInteger(at: start + 5, as: UInt32.self)! : 0
        let tokenLength = Int(buffer.getInteger(at: start + header, as: UInt16.self)!)
        if tokenLength == 0 { return reject(.missingDeviceToken, identifier, "token length is 0") }
        if tokenLength > NotificationFormat.maxTokenSize {
            return reject(.invalidTokenSize, identifier, "token length \(tokenLength) is over \(NotificationFormat.maxTokenSize)")
        }
        let payloadLengthAt = start + header + 2 + tokenLength
        guard buffer.readableBytes >= payloadLengthAt - start + 2 else { return nil }
        let payloadLength = Int(buffer.getInteger(at: payloadLengthAt, as: UInt16.self)!)
        if payloadLength == 0 { return reject(.missingPayload, identifier, "payload length is 0") }
        if payloadLength > format.maxPayloadSize {
            return reject(.invalidPayloadSize, identifier, "payload length \(payloadLength) is over \(format.maxPayloadSize)")
        }
        let total = payloadLengthAt - start + 2 + payloadLength
        guard buffer.readableBytes >= total else { return nil }
        let token = buffer.getBytes(at: start + header + 2, length: tokenLength)!
        let payload = buffer.getBytes(at: payloadLengthAt + 2, length: payloadLength)!
        buffer.moveReaderIndex(forwardBy: total)
        return .notification(DecodedNotification(
            format: format, token: token, payload: payload, identifier: identifier, expiration: expiration, priority: 10))
    }

    private static func decodeFrame(_ buffer: inout ByteBuffer) -> NotificationDecodingResult? {
        let start = buffer.readerIndex
        guard let frameLength32 = buffer.getInteger(at: start + 1, as: UInt32.self) else { return nil }
        guard frameLength32 <= UInt32(maxFrameLength) else {
            return reject(.protocolError, 0, "frame length \(frameLength32) is over \(maxFrameLength)")
        }
        let frameLength = Int(frameLength32)
        guard buffer.readableBytes >= 5 + frameLength else { return nil }

        var token: [UInt8]?
        var payload: [UInt8]?
        var identifier: UInt32?
        var expiration: UInt32?
        var priority: UInt8?
        var problem: String?
        var offset = start + 5
        let end = start + 5 + frameLength
        // Every item is read, even after a problem, so that a rejection can name the identifier wherever it stands.
        while offset < end {
            guard end - offset >= 3 else {
                problem = problem ?? "frame ends inside an item header"
                break
            }
            let item = buffer.getInteger(at: offset, as: UInt8.self)!
            let length = Int(buffer.getInteger(at: offset + 1, as: UInt16.self)!)
            offset += 3
            guard end - offset >= length else {
                problem = problem ?? "item \(item) of \(length) bytes overruns the frame"
                break
            }
            if let itemProblem = readItem(item, length: length, at: offset) { problem = problem ?? itemProblem }
            offset += length
        }

        /// Stores one item's value; returns what is wrong with it, if anything.
        func readItem(_ item: UInt8, length: Int, at offset: Int) -> String? {
            let repeated: Bool
            switch NotificationEncoder.Item(rawValue: item) {
            case .deviceToken:
                repeated = token != nil
                token = buffer.getBytes(at: offset, length: length)!
            case .payload:
                repeated = payload != nil
                payload = buffer.getBytes(at: offset, length: length)!
            case .identifier:
                guard length == 4 else { return "identifier item is \(length) bytes, not 4" }
                repeated = identifier != nil
                identifier = buffer.getInteger(at: offset, as: UInt32.self)!
            case .expiration:
                guard length == 4 else { return "expiration item is \(length) bytes, not 4" }
                repeated = expiration != nil
                expiration = buffer.getInteger(at: offset, as: UInt32.self)!
            case .priority:
                guard length == 1 else { return "priority item is \(length) bytes, not 1" }
                repeated = priority != nil
                let value = buffer.getInteger(at: offset, as: UInt8.self)!
                guard value == 5 || value == 10 else { return "priority \(value) is not 5 or 10" }
                priority = value
            case nil:
                return "unknown item \(item)"
            }
            return repeated ? "item \(item) appears more than once" : nil
        }
        buffer.moveReaderIndex(forwardBy: 5 + frameLength)
        let id = identifier ?? 0
        if let problem { return reject(.protocolError, id, problem) }
        guard let token, !token.isEmpty else { return reject(.missingDeviceToken, id, "frame has no device token") }
        guard token.count <= NotificationFormat.maxTokenSize else {
            return reject(.invalidTokenSize, id, "token is \(token.count) bytes, over \(NotificationFormat.maxTokenSize)")
        }
        guard let payload, !payload.isEmpty else { return reject(.missingPayload, id, "frame has no payload") }
        guard payload.count <= NotificationFormat.frame.maxPayloadSize else {
            return reject(.invalidPayloadSize, id, "payload is \(payload.count) bytes, over \(NotificationFormat.frame.maxPayloadSize)")
        }
        return .notification(DecodedNotification(
            format: .frame, token: token, payload: payload, identifier: id, expiration: expiration ?? 0,
            priority: priority ?? 10))
    }
}

// MARK: - Channel decoders

/// The gateway side's inbound decoder: notifications until the first rejection, then nothing more.
public struct NotificationStreamDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = NotificationDecodingResult
    private var rejected = false

    public init() {}

    public mutating func decode(buffer: inout ByteBuffer) throws -> NotificationDecodingResult? {
        guard !rejected else {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return nil
        }
        let result = NotificationDecoder.decode(from: &buffer)
        if case .rejected = result {
            rejected = true
            buffer.moveReaderIndex(to: buffer.writerIndex)
        }
        return result
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> NotificationDecodingResult? {
        try decode(buffer: &buffer)
    }
}

/// The provider side's decoder for what the gateway sends back: error responses.
public struct ErrorResponseDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = ErrorResponse

    public init() {}

    public mutating func decode(buffer: inout ByteBuffer) throws -> ErrorResponse? {
        try ErrorResponse.decode(from: &buffer)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> ErrorResponse? {
        try ErrorResponse.decode(from: &buffer)
    }
}

/// The feedback client's decoder. At EOF, bytes that do not make a whole tuple are reported as an error.
public struct FeedbackTupleDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = FeedbackTuple

    public init() {}

    public mutating func decode(buffer: inout ByteBuffer) throws -> FeedbackTuple? {
        try FeedbackTuple.decode(from: &buffer)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> FeedbackTuple? {
        if let tuple = try FeedbackTuple.decode(from: &buffer) { return tuple }
        if seenEOF, let error = FeedbackTuple.trailingBytesError(buffer) {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            throw error
        }
        return nil
    }
}
