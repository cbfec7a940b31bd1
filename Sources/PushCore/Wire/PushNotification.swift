import NIOCore

/// One notification as it goes on the wire: the values of the frame's five items.
public struct PushNotification: Hashable, Sendable {
    public var token: DeviceToken
    public var payload: [UInt8]
    /// Names the notification in error responses (frame item 3; enhanced format).
    public var identifier: UInt32
    /// UNIX seconds; 0 means "do not store" (frame item 4; enhanced format).
    public var expiration: UInt32
    /// Frame item 5; the legacy formats carry none (10 is assumed).
    public var priority: Priority

    public init(token: DeviceToken, payload: [UInt8], identifier: UInt32, expiration: UInt32, priority: Priority) {
        self.token = token
        self.payload = payload
        self.identifier = identifier
        self.expiration = expiration
        self.priority = priority
    }

    /// The number of bytes this notification takes in `format`.
    public func encodedSize(_ format: NotificationFormat) -> Int {
        Self.encodedSize(format, tokenCount: token.bytes.count, payloadCount: payload.count)
    }

    /// The number of bytes a notification with a token and a payload of these sizes takes in `format`.
    @inlinable
    public static func encodedSize(_ format: NotificationFormat, tokenCount: Int, payloadCount: Int) -> Int {
        switch format {
        case .frame: 5 + 3 + tokenCount + 3 + payloadCount + 7 + 7 + 4
        case .enhanced: 1 + 4 + 4 + 2 + tokenCount + 2 + payloadCount
        case .simple: 1 + 2 + tokenCount + 2 + payloadCount
        }
    }
}

/// Writes notifications in the binary formats, big-endian throughout (the identifier of the enhanced format too:
/// the seeds' Listing A-2 copies it in host order, which is a bug in the listing, not the protocol).
public enum NotificationEncoder {
    /// Frame item identifiers (Table A-3).
    public enum Item: UInt8, Sendable {
        case deviceToken = 1, payload = 2, identifier = 3, expiration = 4, priority = 5
    }

    /// Appends `notification` to `buffer` in `format`. The payload must fit the format's limit and the token
    /// 1...100 bytes; the event decoder guarantees both.
    @inlinable
    public static func encode(_ notification: PushNotification, format: NotificationFormat, into buffer: inout ByteBuffer) {
        let size = notification.encodedSize(format)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { out in
            var w = RawWriter(out)
            write(notification, format: format, size: size, to: &w)
            return w.offset
        }
    }

    /// Writes `notification` in `format` at the start of `out`, which has room for its `encodedSize(format)` bytes;
    /// returns how many it wrote.
    @inlinable
    public static func encode(_ notification: PushNotification, format: NotificationFormat, into out: UnsafeMutableRawBufferPointer) -> Int {
        notification.token.bytes.withUnsafeBytes { token in
            notification.payload.withUnsafeBytes { payload in
                encode(
                    token: token, payload: payload, identifier: notification.identifier, expiration: notification.expiration,
                    priority: notification.priority, format: format, into: out)
            }
        }
    }

    /// The encoded bytes of one notification.
    public static func encode(_ notification: PushNotification, format: NotificationFormat) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: notification.encodedSize(format))
        encode(notification, format: format, into: &buffer)
        return buffer
    }

    /// The encoded bytes of one notification in an array of exactly their size.
    public static func encodeBytes(_ notification: PushNotification, format: NotificationFormat) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: notification.encodedSize(format)) { out, count in
            count = encode(notification, format: format, into: UnsafeMutableRawBufferPointer(out))
        }
    }

    /// Writes a notification given by its parts (a token and a payload where they already are, as the worker's
    /// staged notifications) in `format` at the start of `out`, which has room for
    /// ``PushNotification/encodedSize(_:tokenCount:payloadCount:)`` bytes; returns how many it wrote.
    @inlinable
    public static func encode(
        token: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, identifier: UInt32, expiration: UInt32,
        priority: Priority, format: NotificationFormat, into out: UnsafeMutableRawBufferPointer
    ) -> Int {
        let size = PushNotification.encodedSize(format, tokenCount: token.count, payloadCount: payload.count)
        precondition(out.count >= size, "no room for the notification")
        var w = RawWriter(out)
        write(token: token, payload: payload, identifier: identifier, expiration: expiration, priority: priority, format: format, size: size, to: &w)
        return w.offset
    }

    @inlinable
    static func write(_ notification: PushNotification, format: NotificationFormat, size: Int, to w: inout RawWriter) {
        notification.token.bytes.withUnsafeBytes { token in
            notification.payload.withUnsafeBytes { payload in
                write(
                    token: token, payload: payload, identifier: notification.identifier, expiration: notification.expiration,
                    priority: notification.priority, format: format, size: size, to: &w)
            }
        }
    }

    @inlinable
    static func write(
        token: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, identifier: UInt32, expiration: UInt32,
        priority: Priority, format: NotificationFormat, size: Int, to w: inout RawWriter
    ) {
        switch format {
        case .frame:
            w.u8(2)
            w.u32(UInt32(size - 5))
            w.u8(Item.deviceToken.rawValue); w.u16(UInt16(token.count)); w.bytes(token)
            w.u8(Item.payload.rawValue); w.u16(UInt16(payload.count)); w.bytes(payload)
            w.u8(Item.identifier.rawValue); w.u16(4); w.u32(identifier)
            w.u8(Item.expiration.rawValue); w.u16(4); w.u32(expiration)
            w.u8(Item.priority.rawValue); w.u16(1); w.u8(priority.rawValue)
        case .enhanced:
            w.u8(1)
            w.u32(identifier)
            w.u32(expiration)
            w.u16(UInt16(token.count)); w.bytes(token)
            w.u16(UInt16(payload.count)); w.bytes(payload)
        case .simple:
            w.u8(0)
            w.u16(UInt16(token.count)); w.bytes(token)
            w.u16(UInt16(payload.count)); w.bytes(payload)
        }
    }
}

/// Big-endian stores into raw memory whose size the caller has checked.
@usableFromInline
struct RawWriter {
    @usableFromInline let base: UnsafeMutableRawBufferPointer
    @usableFromInline var offset = 0

    @inlinable init(_ base: UnsafeMutableRawBufferPointer) { self.base = base }

    @inlinable mutating func u8(_ v: UInt8) {
        base[offset] = v
        offset += 1
    }

    @inlinable mutating func u16(_ v: UInt16) {
        base.storeBytes(of: v.bigEndian, toByteOffset: offset, as: UInt16.self)
        offset += 2
    }

    @inlinable mutating func u32(_ v: UInt32) {
        base.storeBytes(of: v.bigEndian, toByteOffset: offset, as: UInt32.self)
        offset += 4
    }

    @inlinable mutating func bytes(_ v: UnsafeRawBufferPointer) {
        if let s = v.baseAddress { (base.baseAddress! + offset).copyMemory(from: s, byteCount: v.count) }
        offset += v.count
    }
}
