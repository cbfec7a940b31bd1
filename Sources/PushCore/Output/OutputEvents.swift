/// Where an input record came from.
public struct RecordSource: Hashable, Sendable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    /// Writes `"key":{"topic":..,"partition":..,"offset":..}`.
    public func write(_ key: String, into w: inout JSONWriter) {
        w.key(key)
        w.beginObject()
        w.field("topic", topic)
        w.field("partition", Int64(partition))
        w.field("offset", offset)
        w.endObject()
    }

    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
}

/// An event on the delivery-error topic (SPEC section 3): one per notification that did not reach the gateway or
/// was rejected by it.
public struct DeliveryErrorEvent: Hashable, Sendable {
    public static let maxRawDetailBytes = 1024

    public var eventID: String?
    public var app: String?
    public var environment: String?
    /// The normalised token when it parsed, else the token as written, else nil.
    public var token: String?
    public var reason: DeliveryErrorReason
    /// The gateway's status code (binary: 1...255; HTTP/2: the response's `:status`), when the gateway rejected it.
    public var status: UInt16?
    public var detail: String?
    /// How many times the notification was sent to the gateway.
    public var attempts: Int
    public var source: RecordSource
    /// UNIX milliseconds.
    public var occurredAt: Int64
    /// The message key: the normalised token when it parsed, else the event id, else none.
    public var messageKey: String?
    /// The ids a support engineer looks the notification up by (SPEC section 3): the request's `apns-id` (HTTP/2,
    /// once sent), Apple's `apns-unique-id` (its sandbox), a broadcast's channel.
    public var ids: NotificationIDs

    public init(
        eventID: String?, app: String?, environment: String?, token: String?, reason: DeliveryErrorReason,
        status: UInt16?, detail: String?, attempts: Int, source: RecordSource, occurredAt: Int64, messageKey: String?,
        ids: NotificationIDs = NotificationIDs()
    ) {
        self.ids = ids
        self.eventID = eventID
        self.app = app
        self.environment = environment
        self.token = token
        self.reason = reason
        self.status = status
        self.detail = detail
        self.attempts = attempts
        self.source = source
        self.occurredAt = occurredAt
        self.messageKey = messageKey
    }

    /// The event for a message that failed validation. For `malformed_event` the detail is the raw message, cut
    /// to 1 KiB on a character boundary (SPEC section 3); otherwise it says what is wrong. An environment that is
    /// not one of the two is written as null (the detail names it when it is the problem), so that the event
    /// keeps to its schema.
    public init(rejected rejection: EventRejection, rawMessage: [UInt8], source: RecordSource, occurredAt: Int64) {
        let detail: String
        if rejection.reason == .malformedEvent {
            detail = DeliveryErrorEvent.cut(rawMessage, to: DeliveryErrorEvent.maxRawDetailBytes)
        } else {
            detail = rejection.detail
        }
        self.init(
            eventID: rejection.eventID, app: rejection.app,
            environment: rejection.environment.flatMap { APNsEnvironment(rawValue: $0)?.rawValue },
            token: rejection.token?.hex ?? rejection.rawToken, reason: rejection.reason, status: nil, detail: detail,
            attempts: 0, source: source, occurredAt: occurredAt,
            messageKey: rejection.token?.hex ?? rejection.eventID)
    }

    /// The event for a valid notification that failed later (unknown app, expired, gateway status, retries).
    public init(
        failed event: NotificationEvent, reason: DeliveryErrorReason, status: GatewayStatus?, detail: String?,
        attempts: Int, source: RecordSource, occurredAt: Int64
    ) {
        self.init(
            eventID: event.id, app: event.app, environment: event.environment?.rawValue, token: event.token.hex,
            reason: reason, status: status.map { UInt16($0.code) }, detail: detail, attempts: attempts, source: source,
            occurredAt: occurredAt, messageKey: event.token.hex)
    }

    /// The first `limit` bytes of `raw` as text, not splitting a UTF-8 sequence; invalid bytes become U+FFFD.
    static func cut(_ raw: [UInt8], to limit: Int) -> String {
        guard raw.count > limit else { return String(decoding: raw, as: UTF8.self) }
        var end = limit
        while end > 0, raw[end] & 0xC0 == 0x80 { end -= 1 }
        return String(decoding: raw[..<end], as: UTF8.self)
    }

    public func json() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.field("event_id", eventID)
        w.field("app", app)
        w.field("environment", environment)
        w.field("token", token)
        w.field("reason", reason.rawValue)
        w.field("status", status.map(Int64.init))
        w.field("detail", detail)
        w.field("attempts", Int64(attempts))
        ids.write(into: &w)
        source.write("source", into: &w)
        w.field("occurred_at", RFC3339.format(unixMilliseconds: occurredAt))
        w.endObject()
        return w.bytes
    }

    static let keys = ["event_id", "app", "environment", "token", "reason", "status", "detail", "attempts"]
        + NotificationIDs.keys + ["source", "occurred_at"]

    /// Reads a delivery-error event strictly, as a consumer may rely on it: every field present, of its type.
    public init(validating json: JSONValue) throws(OutputEventError) {
        let r = OutputEventReader(json: json, kind: "delivery-error event")
        try r.requireExactly(DeliveryErrorEvent.keys)
        guard let reason = DeliveryErrorReason(rawValue: try r.string("reason")) else {
            throw OutputEventError("delivery-error event: 'reason' is not a known reason")
        }
        let status = try r.optionalInteger("status", in: 0...599)
        let env = try r.optionalString("environment")
        if let env, APNsEnvironment(rawValue: env) == nil {
            throw OutputEventError("delivery-error event: 'environment' must be production, sandbox or null")
        }
        guard let sourceJSON = json["source"] else { throw OutputEventError("delivery-error event: 'source' is missing") }
        let s = OutputEventReader(json: sourceJSON, kind: "delivery-error event source")
        try s.requireExactly(["topic", "partition", "offset"])
        let source = RecordSource(
            topic: try s.string("topic"), partition: Int32(try s.integer("partition", in: 0...Int64(Int32.max))),
            offset: try s.integer("offset", in: 0...Int64.max))
        self.init(
            eventID: try r.optionalString("event_id"), app: try r.optionalString("app"), environment: env,
            token: try r.optionalString("token"), reason: reason, status: status.map { UInt16($0) },
            detail: try r.optionalString("detail"), attempts: Int(try r.integer("attempts", in: 0...Int64(Int32.max))),
            source: source, occurredAt: try r.timestamp("occurred_at"), messageKey: nil, ids: try NotificationIDs(reading: r))
    }
}

/// An event on the feedback topic (SPEC section 3): the feedback service reported that `app` is gone from the
/// device with `token` at `timestamp`.
public struct FeedbackEvent: Hashable, Sendable {
    public var app: String
    public var environment: APNsEnvironment
    public var token: DeviceToken
    /// UNIX seconds, as the feedback service sent it.
    public var timestamp: UInt32
    /// UNIX milliseconds.
    public var receivedAt: Int64

    public init(app: String, environment: APNsEnvironment, token: DeviceToken, timestamp: UInt32, receivedAt: Int64) {
        self.app = app
        self.environment = environment
        self.token = token
        self.timestamp = timestamp
        self.receivedAt = receivedAt
    }

    public var messageKey: String { token.hex }

    public func json() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.field("app", app)
        w.field("environment", environment.rawValue)
        w.field("token", token.hex)
        w.field("timestamp", RFC3339.format(unixSeconds: Int64(timestamp)))
        w.field("timestamp_unix", Int64(timestamp))
        w.field("received_at", RFC3339.format(unixMilliseconds: receivedAt))
        w.endObject()
        return w.bytes
    }

    /// Reads a feedback event strictly.
    public init(validating json: JSONValue) throws(OutputEventError) {
        let r = OutputEventReader(json: json, kind: "feedback event")
        try r.requireExactly(["app", "environment", "token", "timestamp", "timestamp_unix", "received_at"])
        guard let env = APNsEnvironment(rawValue: try r.string("environment")) else {
            throw OutputEventError("feedback event: 'environment' must be production or sandbox")
        }
        let tokenText = try r.string("token")
        guard let bytes = Hex.decode(tokenText), tokenText == tokenText.lowercased(), let token = try? DeviceToken(bytes: bytes)
        else { throw OutputEventError("feedback event: 'token' must be 2-200 lowercase hex digits") }
        let unix = try r.integer("timestamp_unix", in: 0...Int64(UInt32.max))
        guard try r.timestamp("timestamp") == unix * 1000 else {
            throw OutputEventError("feedback event: 'timestamp' and 'timestamp_unix' disagree")
        }
        let app = try r.string("app")
        guard !app.isEmpty else { throw OutputEventError("feedback event: 'app' is empty") }
        self.init(app: app, environment: env, token: token, timestamp: UInt32(unix), receivedAt: try r.timestamp("received_at"))
    }
}

/// An output event that does not have the documented shape.
public struct OutputEventError: Error, Hashable, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// Typed, strict access to the fields of an output event.
private struct OutputEventReader {
    let json: JSONValue
    let kind: String

    func requireExactly(_ keys: [String]) throws(OutputEventError) {
        guard case .object = json else { throw OutputEventError("\(kind): not an object") }
        let present = json.keys
        for key in keys where !present.contains(key) { throw OutputEventError("\(kind): '\(key)' is missing") }
        for key in present where !keys.contains(key) { throw OutputEventError("\(kind): unexpected field '\(key)'") }
        guard Set(present).count == present.count else { throw OutputEventError("\(kind): a field appears twice") }
    }

    func string(_ key: String) throws(OutputEventError) -> String {
        guard let s = json[key]?.stringValue else { throw OutputEventError("\(kind): '\(key)' must be a string") }
        return s
    }

    func optionalString(_ key: String) throws(OutputEventError) -> String? {
        if json[key] == .null { return nil }
        return try string(key)
    }

    func integer(_ key: String, in range: ClosedRange<Int64>) throws(OutputEventError) -> Int64 {
        guard let n = json[key]?.integerValue, range.contains(n) else {
            throw OutputEventError("\(kind): '\(key)' must be an integer in \(range)")
        }
        return n
    }

    func optionalInteger(_ key: String, in range: ClosedRange<Int64>) throws(OutputEventError) -> Int64? {
        if json[key] == .null { return nil }
        return try integer(key, in: range)
    }

    /// An RFC 3339 UTC (`Z`) timestamp, as UNIX milliseconds.
    func timestamp(_ key: String) throws(OutputEventError) -> Int64 {
        let text = try string(key)
        guard text.hasSuffix("Z"), let seconds = RFC3339.parse(text) else {
            throw OutputEventError("\(kind): '\(key)' must be an RFC 3339 UTC timestamp")
        }
        var millis: Int64 = 0
        if let dot = text.firstIndex(of: ".") {
            let fraction = text[text.index(after: dot)...].prefix { $0.isASCII && $0.isNumber }
            millis = Int64(String((fraction + "000").prefix(3)))!
        }
        return seconds * 1000 + millis
    }
}

/// The ids an output event carries so that a notification can be found in Apple's delivery log (SPEC section 3);
/// each null when unknown.
public struct NotificationIDs: Hashable, Sendable {
    /// The request's `apns-id` (HTTP/2, once sent).
    public var apnsID: String?
    /// Apple's `apns-unique-id` response header (its sandbox environment).
    public var apnsUniqueID: String?
    /// A broadcast's channel (SPEC section 11).
    public var channelID: String?

    public init(apnsID: String? = nil, apnsUniqueID: String? = nil, channelID: String? = nil) {
        self.apnsID = apnsID
        self.apnsUniqueID = apnsUniqueID
        self.channelID = channelID
    }

    static let keys = ["apns_id", "apns_unique_id", "channel_id"]

    public func write(into w: inout JSONWriter) {
        w.field("apns_id", apnsID)
        w.field("apns_unique_id", apnsUniqueID)
        w.field("channel_id", channelID)
    }

    fileprivate init(reading r: OutputEventReader) throws(OutputEventError) {
        apnsID = try r.optionalString("apns_id")
        apnsUniqueID = try r.optionalString("apns_unique_id")
        channelID = try r.optionalString("channel_id")
        if let apnsID, APNsID(apnsID) == nil {
            throw OutputEventError("\(r.kind): 'apns_id' must be a UUID or null")
        }
    }
}
