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
        if pushType == .mdm {
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
        var fields: [(name: String, value: String)] = [
            (":method", "POST"), (":scheme", "https"), (":path", path),
            ("apns-topic", topic), ("apns-push-type", pushType.rawValue),
            ("apns-priority", Self.priorityText(priority)), ("apns-expiration", String(expiration)),
            ("apns-id", apnsID.description),
        ]
        if let collapseID { fields.append(("apns-collapse-id", collapseID)) }
        if let authorization { fields.append(("authorization", "bearer " + authorization)) }
        return fields
    }

    static func priorityText(_ priority: Priority) -> String {
        switch priority {
        case .lowest: "1"
        case .conservePower: "5"
        case .immediate: "10"
        }
    }

    /// Writes the header fields as `name: value` lines (what an HPACK encoder consumes, in this order) and then the
    /// body, without building a string. The shape of the request's wire image before header compression; used by
    /// the encoding benchmark and the simulator's record.
    public func writeFields(into buffer: inout ByteBuffer) {
        buffer.writeStaticString(":method: POST\n:scheme: https\n:path: /3/device/")
        let tokenBytes = token.bytes
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: tokenBytes.count * 2) { out in
            for (i, byte) in tokenBytes.enumerated() {
                let high = byte >> 4, low = byte & 0xF
                out[2 * i] = high < 10 ? UInt8(ascii: "0") + high : UInt8(ascii: "a") - 10 + high
                out[2 * i + 1] = low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") - 10 + low
            }
            return tokenBytes.count * 2
        }
        buffer.writeStaticString("\napns-topic: ")
        buffer.writeString(topic)
        buffer.writeStaticString("\napns-push-type: ")
        buffer.writeString(pushType.rawValue)
        buffer.writeStaticString("\napns-priority: ")
        buffer.writeString(Self.priorityText(priority))
        buffer.writeStaticString("\napns-expiration: ")
        Self.writeDecimal(expiration, into: &buffer)
        buffer.writeStaticString("\napns-id: ")
        apnsID.write(into: &buffer)
        if let collapseID {
            buffer.writeStaticString("\napns-collapse-id: ")
            buffer.writeString(collapseID)
        }
        buffer.writeStaticString("\n\n")
        buffer.writeBytes(body)
    }

    private static func writeDecimal(_ value: UInt32, into buffer: inout ByteBuffer) {
        if value >= 10 { writeDecimal(value / 10, into: &buffer) }
        buffer.writeInteger(UInt8(ascii: "0") + UInt8(value % 10))
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
