import NIOCore

/// One record of the feedback service: when the gateway found the app gone from a device, and the device's token.
public struct FeedbackTuple: Hashable, Sendable {
    /// UNIX seconds (a 4-byte `time_t`, network order).
    public var timestamp: UInt32
    public var token: DeviceToken

    public init(timestamp: UInt32, token: DeviceToken) {
        self.timestamp = timestamp
        self.token = token
    }

    public func write(into buffer: inout ByteBuffer) {
        buffer.writeInteger(timestamp)
        buffer.writeInteger(UInt16(token.bytes.count))
        buffer.writeBytes(token.bytes)
    }

    /// Reads one tuple from the front of `buffer`: nil (consuming nothing) when it is not all there yet.
    /// Throws, consuming nothing, when the token length is 0 or over 100: such a stream cannot be re-synchronised.
    public static func decode(from buffer: inout ByteBuffer) throws(WireDecodingError) -> FeedbackTuple? {
        let start = buffer.readerIndex
        guard let length = buffer.getInteger(at: start + 4, as: UInt16.self) else { return nil }
        guard length >= 1, length <= UInt16(NotificationFormat.maxTokenSize) else {
            throw WireDecodingError(
                .invalidTokenLength(Int(length)), bytes: buffer.getSlice(at: start, length: min(buffer.readableBytes, 64))!)
        }
        guard buffer.readableBytes >= 6 + Int(length) else { return nil }
        let timestamp = buffer.readInteger(as: UInt32.self)!
        buffer.moveReaderIndex(forwardBy: 2)
        let bytes = buffer.readBytes(length: Int(length))!
        return FeedbackTuple(timestamp: timestamp, token: try! DeviceToken(bytes: bytes))
    }

    /// The error for bytes left over at the end of the stream (a partial trailing tuple), if any.
    public static func trailingBytesError(_ buffer: ByteBuffer) -> WireDecodingError? {
        guard buffer.readableBytes > 0 else { return nil }
        return WireDecodingError(
            .truncated(buffer.readableBytes), bytes: buffer.getSlice(at: buffer.readerIndex, length: min(buffer.readableBytes, 64))!)
    }
}
