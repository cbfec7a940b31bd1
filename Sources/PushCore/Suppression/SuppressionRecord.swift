/// Why a token is suppressed (SPEC section 10): which answer said it is gone.
public enum SuppressionReason: String, CaseIterable, Hashable, Sendable {
    /// A feedback-service tuple.
    case feedback
    /// Binary status 8.
    case invalidToken = "invalid_token"
    /// HTTP/2 410 Unregistered.
    case unregistered
    /// HTTP/2 400 BadDeviceToken.
    case badDeviceToken = "bad_device_token"
    /// Written by another service with a reason of its own (an uninstall, a deleted account): SPEC section 10 fixes
    /// the entry's fields, not the values of `reason`. The record keeps the text (``SuppressionRecord/reasonText``);
    /// the table, which holds no text, keeps this class.
    case other

    /// The bits of a table slot that hold the reason.
    static let codeMask: UInt64 = 7

    /// Three bits, for ``SuppressionTable``.
    var code: UInt64 {
        switch self {
        case .feedback: 0
        case .invalidToken: 1
        case .unregistered: 2
        case .badDeviceToken: 3
        case .other: 4
        }
    }

    init(code: UInt64) {
        switch code & Self.codeMask {
        case 0: self = .feedback
        case 1: self = .invalidToken
        case 2: self = .unregistered
        case 3: self = .badDeviceToken
        default: self = .other
        }
    }
}

/// One entry of the suppression topic (SPEC section 10): key `APP/ENVIRONMENT/HEXTOKEN`, value
/// `{"app", "environment", "token", "invalidated_at", "reason"}`; a tombstone (no value) lifts the suppression.
public struct SuppressionRecord: Hashable, Sendable {
    public var app: String
    public var environment: APNsEnvironment
    public var token: DeviceToken
    /// UNIX seconds. A time with a fraction (an HTTP/2 410's milliseconds) is rounded up, so that a registration
    /// in the same second is not taken for a later one.
    public var invalidatedAt: Int64
    public var reason: SuppressionReason
    /// The `reason` as written on the topic: the class's own name, or another service's text for ``SuppressionReason/other``.
    public var reasonText: String

    public init(
        app: String, environment: APNsEnvironment, token: DeviceToken, invalidatedAt: Int64, reason: SuppressionReason,
        reasonText: String? = nil
    ) {
        self.app = app
        self.environment = environment
        self.token = token
        self.invalidatedAt = invalidatedAt
        self.reason = reason
        self.reasonText = reasonText ?? reason.rawValue
    }

    /// An invalidation at a time in milliseconds (rounded up to the second).
    public init(app: String, environment: APNsEnvironment, token: DeviceToken, invalidatedAtMilliseconds ms: Int64, reason: SuppressionReason) {
        self.init(app: app, environment: environment, token: token, invalidatedAt: ms / 1000 + (ms % 1000 > 0 ? 1 : 0), reason: reason)
    }

    /// The record's key on the topic.
    public var key: [UInt8] { Self.key(app: app, environment: environment, token: token) }

    /// `APP/ENVIRONMENT/HEXTOKEN`.
    public static func key(app: String, environment: APNsEnvironment, token: DeviceToken) -> [UInt8] {
        Array("\(app)/\(environment.rawValue)/\(token.hex)".utf8)
    }

    /// The record's value on the topic.
    public func json() -> [UInt8] {
        var w = JSONWriter(capacity: 160 + token.bytes.count * 2)
        w.beginObject()
        w.field("app", app)
        w.field("environment", environment.rawValue)
        w.field("token", token.hex)
        w.field("invalidated_at", RFC3339.format(unixSeconds: invalidatedAt))
        w.field("reason", reasonText)
        w.endObject()
        return w.bytes
    }

    /// The table's key for this record.
    public var tableKey: SuppressionKey { SuppressionKey(app: app, environment: environment, token: token) }
}

/// What one record of the suppression topic says.
public enum SuppressionEntry: Hashable, Sendable {
    /// The token is suppressed.
    case suppress(SuppressionRecord)
    /// A tombstone: the token was registered again.
    case lift(SuppressionKey)

    /// Reads a record of the topic. The key decides which token it is about (a tombstone has only the key); a value
    /// must name the same app, environment and token. Anything else is an error (the caller skips and counts it).
    public init(key: [UInt8], value: [UInt8]?) throws(SuppressionRecordError) {
        let parts = key.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        // The app (a bundle id) has no "/"; the last two parts are environment and token.
        guard parts.count == 3, !parts[0].isEmpty, let environment = APNsEnvironment(rawValue: String(decoding: parts[1], as: UTF8.self)),
            let token = try? DeviceToken(hex: String(decoding: parts[2], as: UTF8.self))
        else { throw SuppressionRecordError("key is not APP/ENVIRONMENT/HEXTOKEN: \(String(decoding: key.prefix(120), as: UTF8.self))") }
        let app = String(decoding: parts[0], as: UTF8.self)
        // What an error names: the app and environment, the app cut short (the message goes to a log line).
        let subject = "\(String(decoding: parts[0].prefix(120), as: UTF8.self))/\(environment.rawValue)"
        guard let value else {
            self = .lift(SuppressionKey(app: app, environment: environment, token: token))
            return
        }
        guard let json = try? JSONValue(parsing: value), case .object = json else {
            throw SuppressionRecordError("value of \(subject) is not a JSON object")
        }
        guard case .string(let valueApp)? = json["app"], valueApp == app,
            case .string(let valueEnvironment)? = json["environment"], valueEnvironment == environment.rawValue,
            case .string(let valueToken)? = json["token"], (try? DeviceToken(hex: valueToken)) == token
        else { throw SuppressionRecordError("value of \(subject) names another app, environment or token than its key") }
        guard case .string(let time)? = json["invalidated_at"], let invalidatedAt = RFC3339.parse(time) else {
            throw SuppressionRecordError("value of \(subject): 'invalidated_at' is not an RFC 3339 time")
        }
        guard case .string(let reasonText)? = json["reason"], !reasonText.isEmpty else {
            throw SuppressionRecordError("value of \(subject): 'reason' is not a non-empty string")
        }
        // A reason this worker does not write is another service's (SPEC section 10): applied all the same.
        let reason = SuppressionReason(rawValue: reasonText) ?? .other
        self = .suppress(SuppressionRecord(
            app: app, environment: environment, token: token, invalidatedAt: invalidatedAt, reason: reason, reasonText: reasonText))
    }
}

/// A record of the suppression topic that is not what SPEC section 10 describes.
public struct SuppressionRecordError: Error, Hashable, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
