import NIOCore

/// What both ends of an HTTP/2 connection read and write the same way (RFC 9113 section 4, RFC 7541 section 5.1):
/// frame headers, padding, error codes, HPACK integers. The simulator's server session and the worker's client
/// session are built on it.
public enum HTTP2Wire {
    /// The client's connection preface.
    public static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    /// The largest frame payload either side accepts (the default SETTINGS_MAX_FRAME_SIZE; neither raises it).
    public static let maxFrameSize = 16_384
    /// The largest flow-control window (RFC 9113 section 6.9.1).
    public static let maxWindow = Int(Int32.max)
    public static let defaultWindow = 65_535

    /// RFC 9113 section 7's error codes.
    public enum ErrorCode: UInt32, Sendable, CaseIterable {
        case noError = 0x0, protocolError = 0x1, internalError = 0x2, flowControlError = 0x3, settingsTimeout = 0x4
        case streamClosed = 0x5, frameSizeError = 0x6, refusedStream = 0x7, cancel = 0x8, compressionError = 0x9
        case connectError = 0xA, enhanceYourCalm = 0xB, inadequateSecurity = 0xC, http11Required = 0xD

        /// RFC 9113's name: `ENHANCE_YOUR_CALM`.
        public var name: String {
            switch self {
            case .noError: "NO_ERROR"
            case .protocolError: "PROTOCOL_ERROR"
            case .internalError: "INTERNAL_ERROR"
            case .flowControlError: "FLOW_CONTROL_ERROR"
            case .settingsTimeout: "SETTINGS_TIMEOUT"
            case .streamClosed: "STREAM_CLOSED"
            case .frameSizeError: "FRAME_SIZE_ERROR"
            case .refusedStream: "REFUSED_STREAM"
            case .cancel: "CANCEL"
            case .compressionError: "COMPRESSION_ERROR"
            case .connectError: "CONNECT_ERROR"
            case .enhanceYourCalm: "ENHANCE_YOUR_CALM"
            case .inadequateSecurity: "INADEQUATE_SECURITY"
            case .http11Required: "HTTP_1_1_REQUIRED"
            }
        }
    }

    /// A connection error (RFC 9113 section 5.4.1): the session that throws it has queued its GOAWAY.
    public struct ConnectionError: Error, Equatable, Sendable {
        public var code: ErrorCode
        public var detail: String

        public init(code: ErrorCode, detail: String) {
            self.code = code
            self.detail = detail
        }
    }

    /// A frame's 9-byte header.
    public struct FrameHeader: Sendable {
        public var length: Int
        public var type: UInt8
        public var flags: UInt8
        public var stream: UInt32

        /// The header at the buffer's reader index, nil when fewer than 9 bytes are there.
        public init?(peekingAt buffer: ByteBuffer) {
            guard buffer.readableBytes >= 9 else { return nil }
            let start = buffer.readerIndex
            let word = buffer.getInteger(at: start, as: UInt32.self)!
            length = Int(word >> 8)
            type = UInt8(truncatingIfNeeded: word)
            flags = buffer.getInteger(at: start + 4, as: UInt8.self)!
            stream = buffer.getInteger(at: start + 5, as: UInt32.self)! & 0x7FFF_FFFF
        }
    }

    // Frame types and flags.
    public static let data: UInt8 = 0x0, headers: UInt8 = 0x1, priority: UInt8 = 0x2, rstStream: UInt8 = 0x3
    public static let settings: UInt8 = 0x4, pushPromise: UInt8 = 0x5, ping: UInt8 = 0x6, goAway: UInt8 = 0x7
    public static let windowUpdate: UInt8 = 0x8, continuation: UInt8 = 0x9
    public static let endStream: UInt8 = 0x1, ack: UInt8 = 0x1, endHeaders: UInt8 = 0x4, padded: UInt8 = 0x8
    public static let priorityFlag: UInt8 = 0x20

    /// SETTINGS parameters (RFC 9113 section 6.5.2).
    public enum Setting {
        public static let headerTableSize: UInt16 = 0x1, enablePush: UInt16 = 0x2, maxConcurrentStreams: UInt16 = 0x3
        public static let initialWindowSize: UInt16 = 0x4, maxFrameSize: UInt16 = 0x5, maxHeaderListSize: UInt16 = 0x6
    }

    /// What the peer's SETTINGS say of this side's sending, the same for either end: the initial window of new
    /// streams (a change adjusts the open ones) and the largest frame it takes.
    public struct PeerSettings: Sendable {
        public private(set) var initialWindow = HTTP2Wire.defaultWindow
        public private(set) var maxFrameSize = HTTP2Wire.maxFrameSize

        public init() {}

        /// Applies a SETTINGS frame's parameters in one pass: the last SETTINGS_INITIAL_WINDOW_SIZE and
        /// SETTINGS_MAX_FRAME_SIZE of the frame win, and the open streams' windows move once, by the difference (a
        /// frame that repeats the parameter costs no more than one that names it once). Other parameters change
        /// nothing here.
        public mutating func apply<Stream>(
            _ parameters: [(UInt16, UInt32)], to streams: inout [UInt32: Stream], _ window: WritableKeyPath<Stream, Int>
        ) throws(ConnectionError) {
            var newWindow: Int?
            for (parameter, value) in parameters {
                switch parameter {
                case Setting.initialWindowSize: newWindow = Int(value)
                case Setting.maxFrameSize: maxFrameSize = Int(value)
                default: break
                }
            }
            guard let newWindow else { return }
            try adjustSendWindows(&streams, by: newWindow - initialWindow, window)
            initialWindow = newWindow
        }
    }

    /// The payload without its padding (PADDED flag: the pad length byte, the content, the padding), `skipping`
    /// bytes after the pad length (a HEADERS frame's priority fields).
    public static func unpadded(_ payload: ByteBuffer, flags: UInt8, skipping: Int = 0) throws(ConnectionError) -> ByteBuffer {
        var payload = payload
        var padding = 0
        if flags & padded != 0 {
            guard let length = payload.readInteger(as: UInt8.self) else {
                throw ConnectionError(code: .frameSizeError, detail: "padded frame without its pad length")
            }
            padding = Int(length)
        }
        guard payload.readableBytes >= padding + skipping else {
            throw ConnectionError(code: .protocolError, detail: "padding longer than the frame")
        }
        payload.moveReaderIndex(forwardBy: skipping)
        return payload.getSlice(at: payload.readerIndex, length: payload.readableBytes - padding)!
    }

    public static func writeFrameHeader(length: Int, type: UInt8, flags: UInt8, stream: UInt32, to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt32(truncatingIfNeeded: length) << 8 | UInt32(type))
        buffer.writeInteger(flags)
        buffer.writeInteger(stream)
    }

    /// Sets the length of a frame whose header starts at `start`, once its payload is written after it.
    public static func patchLength(ofFrameAt start: Int, in buffer: inout ByteBuffer) {
        let length = buffer.writerIndex - start - 9
        buffer.setInteger(UInt8(truncatingIfNeeded: length >> 16), at: start)
        buffer.setInteger(UInt16(truncatingIfNeeded: length), at: start + 1)
    }

    public static func writeSettings(_ parameters: [(UInt16, UInt32)], to buffer: inout ByteBuffer) {
        writeFrameHeader(length: 6 * parameters.count, type: settings, flags: 0, stream: 0, to: &buffer)
        for (parameter, value) in parameters {
            buffer.writeInteger(parameter)
            buffer.writeInteger(value)
        }
    }

    public static func writeWindowUpdate(stream: UInt32, increment: Int, to buffer: inout ByteBuffer) {
        writeFrameHeader(length: 4, type: windowUpdate, flags: 0, stream: stream, to: &buffer)
        buffer.writeInteger(UInt32(increment))
    }

    public static func writeReset(stream: UInt32, code: ErrorCode, to buffer: inout ByteBuffer) {
        writeFrameHeader(length: 4, type: rstStream, flags: 0, stream: stream, to: &buffer)
        buffer.writeInteger(code.rawValue)
    }

    public static func writeGoAway(lastStream: UInt32, code: ErrorCode, to buffer: inout ByteBuffer) {
        writeFrameHeader(length: 8, type: goAway, flags: 0, stream: 0, to: &buffer)
        buffer.writeInteger(lastStream)
        buffer.writeInteger(code.rawValue)
    }

    /// RFC 7541 section 5.1's integer: `prefixBits` bits in the first byte (whose other bits are `pattern`), then
    /// 7 bits a byte.
    public static func writeHPACKInteger(_ value: Int, prefixBits: Int, pattern: UInt8, to buffer: inout ByteBuffer) {
        // At most 1 + 10 bytes for any Int.
        _ = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: 11) { out in
            var writer = RawWriter(out)
            writer.hpackInteger(value, prefixBits: prefixBits, pattern: pattern)
            return writer.offset
        }
    }

    /// The most parameters one SETTINGS frame may carry (nghttp2's default): RFC 9113 defines six, and a frame that
    /// names thousands is only work for the receiver.
    public static let maxSettingsParameters = 32

    /// A SETTINGS frame's parameters, checked as RFC 9113 section 6.5.2 has it for either side (SETTINGS_ENABLE_PUSH
    /// 0 or 1, SETTINGS_INITIAL_WINDOW_SIZE at most 2^31-1, SETTINGS_MAX_FRAME_SIZE within 2^14...2^24-1), after the
    /// frame's own checks (stream 0, a whole number of parameters, at most ``maxSettingsParameters``, an ACK empty).
    /// Nil for an ACK.
    public static func settingsParameters(flags: UInt8, stream: UInt32, payload: ByteBuffer) throws(ConnectionError) -> [(UInt16, UInt32)]? {
        guard stream == 0 else { throw ConnectionError(code: .protocolError, detail: "SETTINGS on stream \(stream)") }
        if flags & ack != 0 {
            guard payload.readableBytes == 0 else { throw ConnectionError(code: .frameSizeError, detail: "SETTINGS ACK with a payload") }
            return nil
        }
        guard payload.readableBytes % 6 == 0 else { throw ConnectionError(code: .frameSizeError, detail: "SETTINGS of \(payload.readableBytes) bytes") }
        guard payload.readableBytes <= 6 * maxSettingsParameters else {
            throw ConnectionError(code: .enhanceYourCalm, detail: "SETTINGS with more than \(maxSettingsParameters) parameters")
        }
        var payload = payload
        var parameters: [(UInt16, UInt32)] = []
        while let parameter = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            switch parameter {
            case Setting.enablePush where value > 1:
                throw ConnectionError(code: .protocolError, detail: "SETTINGS_ENABLE_PUSH \(value)")
            case Setting.initialWindowSize where value > maxWindow:
                throw ConnectionError(code: .flowControlError, detail: "SETTINGS_INITIAL_WINDOW_SIZE \(value)")
            case Setting.maxFrameSize where !(UInt32(maxFrameSize)...16_777_215).contains(value):
                throw ConnectionError(code: .protocolError, detail: "SETTINGS_MAX_FRAME_SIZE \(value)")
            default:
                parameters.append((parameter, value))
            }
        }
        return parameters
    }

    /// A WINDOW_UPDATE frame's increment, after its length check; 0 is left to the caller (a stream error on a
    /// stream, a connection error on the connection).
    public static func windowIncrement(_ payload: ByteBuffer) throws(ConnectionError) -> Int {
        guard payload.readableBytes == 4 else { throw ConnectionError(code: .frameSizeError, detail: "WINDOW_UPDATE of \(payload.readableBytes) bytes") }
        return Int(payload.getInteger(at: payload.readerIndex, as: UInt32.self)! & 0x7FFF_FFFF)
    }

    /// A WINDOW_UPDATE on stream 0 credited to the connection's send window: an increment of 0, or a window over
    /// 2^31-1, is a connection error (RFC 9113 section 6.9).
    public static func creditConnection(_ window: inout Int, by increment: Int) throws(ConnectionError) {
        guard increment > 0 else { throw ConnectionError(code: .protocolError, detail: "WINDOW_UPDATE of 0 on the connection") }
        window += increment
        guard window <= maxWindow else { throw ConnectionError(code: .flowControlError, detail: "the connection's window over 2^31-1") }
    }

    /// The most a header block may take across its frames.
    public static let headerBlockLimit = 256 * 1024

    /// A header block arriving in pieces: HEADERS without END_HEADERS, then CONTINUATION frames on its stream (no
    /// other frame may come between them).
    public struct HeaderBlockInPieces: Sendable {
        public let stream: UInt32
        public let endStream: Bool
        public private(set) var block: ByteBuffer

        public init(stream: UInt32, endStream: Bool, first: ByteBuffer) {
            self.stream = stream
            self.endStream = endStream
            self.block = first
        }

        /// Takes a CONTINUATION frame's payload: the whole block once END_HEADERS comes (`pending` is then nil).
        public static func take(
            _ pending: inout HeaderBlockInPieces?, flags: UInt8, payload: ByteBuffer
        ) throws(ConnectionError) -> HeaderBlockInPieces? {
            guard var pieces = pending else { throw ConnectionError(code: .protocolError, detail: "CONTINUATION without HEADERS") }
            pending = nil  // the block appended to in place, not copied
            var payload = payload
            pieces.block.writeBuffer(&payload)
            guard pieces.block.readableBytes <= headerBlockLimit else {
                throw ConnectionError(code: .protocolError, detail: "header block over \(headerBlockLimit) bytes")
            }
            guard flags & endHeaders != 0 else {
                pending = pieces
                return nil
            }
            return pieces
        }
    }

    /// A PING frame checked (stream 0, 8 bytes) and, unless it is an acknowledgement, acknowledged.
    public static func answerPing(flags: UInt8, stream: UInt32, payload: ByteBuffer, to buffer: inout ByteBuffer) throws(ConnectionError) {
        guard stream == 0 else { throw ConnectionError(code: .protocolError, detail: "PING on stream \(stream)") }
        guard payload.readableBytes == 8 else { throw ConnectionError(code: .frameSizeError, detail: "PING of \(payload.readableBytes) bytes") }
        guard flags & ack == 0 else { return }
        writeFrameHeader(length: 8, type: ping, flags: ack, stream: 0, to: &buffer)
        var payload = payload
        buffer.writeBuffer(&payload)
    }

    /// A GOAWAY frame checked (stream 0, at least 8 bytes): its last stream id.
    public static func goAwayLastStream(stream: UInt32, payload: ByteBuffer) throws(ConnectionError) -> UInt32 {
        guard stream == 0 else { throw ConnectionError(code: .protocolError, detail: "GOAWAY on stream \(stream)") }
        guard payload.readableBytes >= 8 else { throw ConnectionError(code: .frameSizeError, detail: "GOAWAY of \(payload.readableBytes) bytes") }
        return payload.getInteger(at: payload.readerIndex, as: UInt32.self)! & 0x7FFF_FFFF
    }

    /// A new SETTINGS_INITIAL_WINDOW_SIZE applied to the open streams' send windows (RFC 9113 section 6.9.2: by the
    /// difference, which may leave a window negative; one over 2^31-1 is a connection error).
    static func adjustSendWindows<Stream>(
        _ streams: inout [UInt32: Stream], by delta: Int, _ window: WritableKeyPath<Stream, Int>
    ) throws(ConnectionError) {
        guard delta != 0 else { return }
        var over = false
        for index in streams.values.indices {
            streams.values[index][keyPath: window] += delta
            over = over || streams.values[index][keyPath: window] > maxWindow
        }
        guard !over else { throw ConnectionError(code: .flowControlError, detail: "a stream's window over 2^31-1") }
    }
}

extension RawWriter {
    /// An HPACK integer (RFC 7541 section 5.1) with `pattern` in the first byte's bits above the prefix.
    @inline(__always) mutating func hpackInteger(_ value: Int, prefixBits: Int, pattern: UInt8) {
        let limit = (1 << prefixBits) - 1
        guard value >= limit else {
            u8(pattern | UInt8(value))
            return
        }
        u8(pattern | UInt8(limit))
        var rest = value - limit
        while rest >= 128 {
            u8(UInt8(rest & 0x7F | 0x80))
            rest >>= 7
        }
        u8(UInt8(rest))
    }
}
