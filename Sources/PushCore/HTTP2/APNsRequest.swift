import NIOCore

/// What the request builder needs to know of an http2 app entry.
public struct HTTP2AppSettings: Hashable, Sendable {
    /// The app's bundle id: `apns-topic` before the push type's suffix.
    public var bundleID: String
    /// The app entry's `topic`, which mdm notifications are sent to.
    public var mdmTopic: String?

    public init(bundleID: String, mdmTopic: String? = nil) {
        self.bundleID = bundleID
        self.mdmTopic = mdmTopic
    }
}

/// One notification request of the HTTP/2 provider API (SPEC section 9): `POST /3/device/<token>`, its `apns-*`
/// headers and the payload as body. Built by ``init(event:app:recordTimestamp:defaultTTL:)``, pure.
///
/// The header values are kept in their binary form; ``headerFields`` spells them, ``writeFields(into:)`` writes them
/// into a buffer without building strings.
public struct APNsRequest: Hashable, Sendable {
    public var token: DeviceToken
    /// `apns-topic`: the bundle id with the push type's suffix, or the app's mdm topic.
    public var topic: String
    public var pushType: PushType
    public var priority: Priority
    /// `apns-expiration`: UNIX seconds, 0 = now or never.
    public var expiration: UInt32
    public var collapseID: String?
    public var apnsID: APNsID
    /// The payload bytes (shared with the event, not copied).
    public var body: [UInt8]

    /// Why an event cannot become a request for its app.
    public enum BuildError: Error, Hashable, Sendable {
        /// Push type mdm on an app entry without a `topic`.
        case mdmTopicMissing
    }

    /// The request for a validated event (decoded by ``EventDecoder/http2``), with the expiration resolved as
    /// section 2 says.
    public init(
        event: NotificationEvent, app: HTTP2AppSettings, recordTimestamp: Int64, defaultTTL: Int64
    ) throws(BuildError) {
        let pushType = event.resolvedPushType
        if case .mdm = pushType {
            guard let topic = app.mdmTopic else { throw .mdmTopicMissing }
            self.topic = topic
        } else {
            let suffix = pushType.topicSuffix
            self.topic = suffix.isEmpty ? app.bundleID : app.bundleID + suffix
        }
        self.token = event.token
        self.pushType = pushType
        self.priority = event.priority
        self.expiration = event.expiration.resolved(recordTimestamp: recordTimestamp, defaultTTL: defaultTTL)
        self.collapseID = event.collapseID
        self.apnsID = event.apnsID ?? APNsID.derived(app: event.app, eventID: event.id)
        self.body = event.payload
    }

    /// `:path`.
    public var path: String { "/3/device/" + token.hex }

    /// The request's headers in the order they are sent, pseudo-headers first; `authorization` when a provider
    /// token is given.
    public func headerFields(authorization: String? = nil) -> [(name: String, value: String)] {
        var fields: [(name: String, value: String)] = []
        fields.reserveCapacity(10)
        forEachHeaderField(bearer: authorization.map { "bearer " + $0 }) { name, value, _ in fields.append((name, value)) }
        return fields
    }

    /// Calls `body` with each header field in the order they are sent, and whether its value is this request's
    /// own (`:path`, `apns-id`, `apns-collapse-id`: not worth a place in an HPACK table) or shared by many requests
    /// (an expiration is shared by the events of one second). `authority` is the connection's `:authority` (the
    /// API's host), `bearer` the whole `authorization` value ("bearer " and the provider token).
    @inline(__always)
    public func forEachHeaderField(
        authority: String? = nil, bearer: String?, _ body: (_ name: String, _ value: String, _ perRequest: Bool) -> Void
    ) {
        body(":method", "POST", false)
        body(":scheme", "https", false)
        body(":path", path, true)
        if let authority { body(":authority", authority, false) }
        body("apns-topic", topic, false)
        body("apns-push-type", pushType.rawValue, false)
        body("apns-priority", Self.priorityText(priority), false)
        body("apns-expiration", String(expiration), false)
        body("apns-id", apnsID.description, true)
        if let collapseID { body("apns-collapse-id", collapseID, true) }
        if let bearer { body("authorization", bearer, false) }
    }

    static func priorityText(_ priority: Priority) -> String {
        switch priority {
        case .lowest: "1"
        case .conservePower: "5"
        case .immediate: "10"
        }
    }

    /// Writes the header fields as `name: value` lines (what an HPACK encoder consumes, in this order) and then the
    /// body, without building a string: the request's wire image before header compression, in one reservation of
    /// the buffer. Used by the encoding benchmark and the tests.
    public func writeFields(into buffer: inout ByteBuffer) {
        let tokenBytes = token.bytes
        let priority = Self.priorityText(priority)
        let pushType = self.pushType.rawValue
        var digits = 1
        var rest = expiration
        while rest >= 10 { rest /= 10; digits += 1 }
        let fixed = 46 + 13 + 17 + 16 + 18 + 10 + 2  // the static parts below, counted
        let total = fixed + tokenBytes.count * 2 + topic.utf8.count + pushType.utf8.count + priority.utf8.count + digits
            + 36 + (collapseID.map { 19 + $0.utf8.count } ?? 0) + body.count
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { out in
            var w = RawWriter(out)
            w.put(":method: POST\n:scheme: https\n:path: /3/device/")  // 46
            Self.hexPairs.withUnsafeBufferPointer { pairs in
                for byte in tokenBytes {
                    w.base.storeBytes(of: pairs[Int(byte)], toByteOffset: w.offset, as: UInt16.self)
                    w.offset += 2
                }
            }
            w.put("\napns-topic: ")  // 13
            w.put(topic)
            w.put("\napns-push-type: ")  // 17
            w.put(pushType)
            w.put("\napns-priority: ")  // 16
            w.put(priority)
            w.put("\napns-expiration: ")  // 18
            w.decimal(expiration, digits: digits)
            w.put("\napns-id: ")  // 10
            w.offset += apnsID.write(into: UnsafeMutableRawBufferPointer(rebasing: out[w.offset..<w.offset + 36]))
            if let collapseID {
                w.put("\napns-collapse-id: ")  // 19
                w.put(collapseID)
            }
            w.put("\n\n")  // 2
            body.withUnsafeBytes { w.put($0) }
            precondition(w.offset == total, "writeFields counted \(total) bytes and wrote \(w.offset)")
            return w.offset
        }
    }

    /// The two lowercase hex digits of each byte value, as stored in memory (first digit at the lower address).
    static let hexPairs: [UInt16] = (0..<256).map { value in
        let digits = Array("0123456789abcdef".utf8)
        return UInt16(digits[value >> 4]) | UInt16(digits[value & 0xF]) << 8
    }

    /// The `encode --format http2` object: `{"path", "headers": {...}, "body"}` with the body as a string.
    public func json(authorization: String? = nil) -> String {
        var writer = JSONWriter(capacity: 256 + body.count)
        writer.beginObject()
        writer.key("path")
        writer.value(path)
        writer.key("headers")
        writer.beginObject()
        for field in headerFields(authorization: authorization) where !field.name.hasPrefix(":") {
            writer.key(field.name)
            writer.value(field.value)
        }
        writer.endObject()
        writer.key("body")
        writer.value(String(decoding: body, as: UTF8.self))
        writer.endObject()
        return writer.string
    }
}

/// Text for the HTTP/2 request's wire image (``APNsRequest/writeFields(into:)``), into memory already reserved.
extension RawWriter {
    @inline(__always) mutating func put(_ text: StaticString) {
        (base.baseAddress! + offset).copyMemory(from: text.utf8Start, byteCount: text.utf8CodeUnitCount)
        offset += text.utf8CodeUnitCount
    }

    @inline(__always) mutating func put(_ bytes: UnsafeRawBufferPointer) {
        if let source = bytes.baseAddress { (base.baseAddress! + offset).copyMemory(from: source, byteCount: bytes.count) }
        offset += bytes.count
    }

    @inline(__always) mutating func put(_ text: String) {
        var text = text
        text.withUTF8 { put(UnsafeRawBufferPointer($0)) }
    }

    @inline(__always) mutating func decimal(_ value: UInt32, digits: Int) {
        var value = value
        for i in stride(from: digits - 1, through: 0, by: -1) {
            base.storeBytes(of: 0x30 + UInt8(value % 10), toByteOffset: offset + i, as: UInt8.self)
            value /= 10
        }
        offset += digits
    }
}
