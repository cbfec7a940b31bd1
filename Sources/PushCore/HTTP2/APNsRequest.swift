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

    /// `apns-topic` for a push type: the bundle id with the type's suffix, or the app's mdm topic.
    static func topic(of pushType: PushType, app: borrowing HTTP2AppSettings) throws(BuildError) -> String {
        if case .mdm = pushType {
            guard let mdmTopic = app.mdmTopic else { throw .mdmTopicMissing }
            return mdmTopic
        }
        let suffix = pushType.topicSuffix
        return suffix.isEmpty ? app.bundleID : app.bundleID + suffix
    }

    /// `:path`, built in one allocation.
    public var path: String {
        token.bytes.withUnsafeBytes { token in
            String(unsafeUninitializedCapacity: 10 + 2 * token.count) { out in
                var w = RawWriter(UnsafeMutableRawBufferPointer(out))
                w.put("/3/device/")
                Hex.write(token, to: out.baseAddress! + w.offset)
                return w.offset + 2 * token.count
            }
        }
    }

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
        body("apns-priority", Self.priorityField(priority).description, false)
        body("apns-expiration", String(expiration), false)
        body("apns-id", apnsID.description, true)
        if let collapseID { body("apns-collapse-id", collapseID, true) }
        if let bearer { body("authorization", bearer, false) }
    }

    /// Writes the header fields as `name: value` lines (what an HPACK encoder consumes, in this order) and then the
    /// body, without building a string: the request's wire image before header compression, in one reservation of
    /// the buffer. Used by the encoding benchmark and the tests.
    public func writeFields(into buffer: inout ByteBuffer) {
        let pushType = self.pushType.staticName
        let priority = Self.priorityField(priority)
        let expiration = self.expiration
        let apnsID = self.apnsID
        let digits = Self.decimalDigitCount(expiration)
        let fixed = 46 + 13 + 17 + 16 + 18 + 10 + 2  // the static parts below, counted
        let total = fixed + token.bytes.count * 2 + topic.utf8.count + pushType.utf8CodeUnitCount
            + priority.utf8CodeUnitCount + digits + 36 + (collapseID.map { 19 + $0.utf8.count } ?? 0) + body.count
        _ = token.bytes.withUnsafeBytes { token in
            body.withUnsafeBytes { body in
                buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { out in
                    var w = RawWriter(out)
                    w.put(":method: POST\n:scheme: https\n:path: /3/device/")  // 46
                    Hex.write(token, to: out.baseAddress! + w.offset)
                    w.offset += token.count * 2
                    w.put("\napns-topic: ")  // 13
                    w.put(topic)
                    w.put("\napns-push-type: ")  // 17
                    w.put(pushType)
                    w.put("\napns-priority: ")  // 16
                    w.put(priority)
                    w.put("\napns-expiration: ")  // 18
                    w.decimal(expiration, digits: digits)
                    w.put("\napns-id: ")  // 10
                    apnsID.write(to: out.baseAddress! + w.offset)
                    w.offset += 36
                    if let collapseID {
                        w.put("\napns-collapse-id: ")  // 19
                        w.put(collapseID)
                    }
                    w.put("\n\n")  // 2
                    w.put(body)
                    precondition(w.offset == total, "writeFields counted \(total) bytes and wrote \(w.offset)")
                    return w.offset
                }
            }
        }
    }

    /// `apns-priority`'s value.
    static func priorityField(_ priority: Priority) -> StaticString {
        switch priority {
        case .lowest: "1"
        case .conservePower: "5"
        case .immediate: "10"
        }
    }

    /// How many decimal digits `value` has.
    @inline(__always)
    static func decimalDigitCount(_ value: UInt32) -> Int {
        var digits = 1
        var rest = value
        while rest >= 10 { rest /= 10; digits += 1 }
        return digits
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

// In an extension, so that the struct keeps its synthesized memberwise initializer: it builds the value at once,
// where an initializer that assigns `self.x = ...` had the optimizer build the request in a temporary and copy it
// out (a retain and a release of each of its buffers per request).
extension APNsRequest {
    /// The request for a validated event (decoded by ``EventDecoder/http2``), with the expiration resolved as
    /// section 2 says.
    public init(
        event: borrowing NotificationEvent, app: borrowing HTTP2AppSettings, recordTimestamp: Int64, defaultTTL: Int64
    ) throws(BuildError) {
        let pushType = event.resolvedPushType
        let topic = try Self.topic(of: pushType, app: app)
        self.init(
            token: event.token, topic: topic, pushType: pushType,
            priority: event.priority,
            expiration: event.expiration.resolved(recordTimestamp: recordTimestamp, defaultTTL: defaultTTL),
            collapseID: event.collapseID,
            apnsID: event.apnsID ?? APNsID.derived(app: event.app, eventID: event.id), body: event.payload)
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
        text.withBorrowedUTF8 { put($0) }
    }

    @inline(__always) mutating func decimal(_ value: UInt32, digits: Int) {
        var value = value
        var i = offset + digits
        while i > offset {
            i -= 1
            base.storeBytes(of: 0x30 + UInt8(truncatingIfNeeded: value % 10), toByteOffset: i, as: UInt8.self)
            value /= 10
        }
        offset += digits
    }
}
