/// The APNs environment an app's certificate belongs to.
public enum APNsEnvironment: String, CaseIterable, Hashable, Sendable, Codable {
    case production
    case sandbox

    /// The environment `utf8` spells exactly, if any (no string made).
    init?(utf8: UnsafeRawBufferPointer) {
        if utf8.spells("production") { self = .production } else if utf8.spells("sandbox") { self = .sandbox } else { return nil }
    }
}

/// A notification's priority (frame item 5; `apns-priority` on HTTP/2).
public enum Priority: UInt8, Hashable, Sendable {
    /// HTTP/2 only: power considerations first; may be grouped and delivered in bursts, or throttled.
    case lowest = 1
    /// Sent at a time that conserves power on the device.
    case conservePower = 5
    /// Sent immediately; must trigger an alert, sound or badge.
    case immediate = 10
}

/// When a notification stops being worth delivering.
public enum Expiration: Hashable, Sendable {
    /// The event named none: the Kafka record's timestamp plus the configured default time-to-live.
    case unspecified
    /// UNIX seconds; 0 means "deliver now or never, do not store", and never expires before sending.
    case at(UInt32)

    /// The value sent on the wire, given the record's timestamp and the default time-to-live.
    public func resolved(recordTimestamp: Int64, defaultTTL: Int64) -> UInt32 {
        switch self {
        case .at(let t): return t
        case .unspecified:
            // Saturating: a record timestamp or a time-to-live near the limits must not trap.
            let (sum, overflow) = recordTimestamp.addingReportingOverflow(defaultTTL)
            return Expiration.clamp(overflow ? (defaultTTL < 0 ? .min : .max) : sum)
        }
    }

    static func clamp(_ v: Int64) -> UInt32 { UInt32(clamping: max(1, v)) }

    /// Whether a notification with this (resolved) expiration must not be sent at `now` (UNIX seconds).
    public static func hasPassed(_ expiration: UInt32, now: Int64) -> Bool {
        expiration != 0 && Int64(expiration) < now
    }

    /// The `detail` of an `expired` outcome: when the expiration was.
    public static func passedDetail(_ expiration: UInt32) -> String {
        "expiration \(RFC3339.format(unixSeconds: Int64(expiration))) passed before it could be sent"
    }
}

/// A notification event that passed validation (SPEC section 2): everything the worker needs to send it.
public struct NotificationEvent: Hashable, Sendable {
    /// The producer's id, echoed in every output event.
    public var id: String
    /// The app's bundle id (the APNs topic).
    public var app: String
    /// The environment the event names, or nil to use the app's default.
    public var environment: APNsEnvironment?
    public var token: DeviceToken
    /// The payload bytes to send: the producer's JSON with insignificant whitespace removed, nothing re-encoded,
    /// the alert text shortened when truncation was asked for and needed.
    public var payload: [UInt8]
    public var expiration: Expiration
    public var priority: Priority
    /// Whether the alert text was shortened to make the payload fit.
    public var alertTruncated: Bool
    /// The event's `push_type`, when it named one (HTTP/2 only; ``resolvedPushType`` gives the default).
    public var pushType: PushType?
    /// The event's `collapse_id` (HTTP/2 only), at most 64 bytes.
    public var collapseID: String?
    /// The event's `apns_id` (HTTP/2 only); when absent, ``APNsID/derived(app:eventID:)``.
    public var apnsID: APNsID?
    /// Whether the payload's `aps` holds only `content-available` (a background notification).
    public var contentAvailableOnly: Bool
    /// The event's `token_registered_at`, UNIX seconds: the device registered the token then, so a suppression from
    /// before it no longer holds (SPEC section 10).
    public var tokenRegisteredAt: Int64?

    public init(
        id: String, app: String, environment: APNsEnvironment?, token: DeviceToken, payload: [UInt8],
        expiration: Expiration, priority: Priority, alertTruncated: Bool = false, pushType: PushType? = nil,
        collapseID: String? = nil, apnsID: APNsID? = nil, contentAvailableOnly: Bool = false, tokenRegisteredAt: Int64? = nil
    ) {
        self.tokenRegisteredAt = tokenRegisteredAt
        self.pushType = pushType
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.contentAvailableOnly = contentAvailableOnly
        self.id = id
        self.app = app
        self.environment = environment
        self.token = token
        self.payload = payload
        self.expiration = expiration
        self.priority = priority
        self.alertTruncated = alertTruncated
    }

    /// The push type sent: the event's, else `background` when the `aps` holds only `content-available`, else
    /// `alert` (SPEC section 9).
    public var resolvedPushType: PushType { pushType ?? (contentAvailableOnly ? .background : .alert) }

    /// The notification to put on the wire, with its identifier and resolved expiration. Consuming: the token and
    /// payload move into it (an event used afterwards is copied first).
    public consuming func notification(identifier: UInt32, recordTimestamp: Int64, defaultTTL: Int64) -> PushNotification {
        PushNotification(
            token: token, payload: payload, identifier: identifier,
            expiration: expiration.resolved(recordTimestamp: recordTimestamp, defaultTTL: defaultTTL),
            priority: priority)
    }
}

/// Why an event was refused. Every case maps to one `reason` of SPEC section 3 and carries a readable detail.
public enum EventError: Error, Hashable, Sendable, CustomStringConvertible {
    case malformedEvent(String)
    case invalidTokenFormat(String)
    case invalidPayload(String)
    case payloadTooLarge(String)
    case invalidPriority(String)

    public var reason: DeliveryErrorReason {
        switch self {
        case .malformedEvent: .malformedEvent
        case .invalidTokenFormat: .invalidTokenFormat
        case .invalidPayload: .invalidPayload
        case .payloadTooLarge: .payloadTooLarge
        case .invalidPriority: .invalidPriority
        }
    }

    public var detail: String {
        switch self {
        case .malformedEvent(let d), .invalidTokenFormat(let d), .invalidPayload(let d), .payloadTooLarge(let d),
            .invalidPriority(let d):
            d
        }
    }

    public var description: String { "\(reason.rawValue): \(detail)" }
}

/// A refused event: the error, and whatever could be read of the event for the delivery-error event.
public struct EventRejection: Error, Hashable, Sendable, CustomStringConvertible {
    public var error: EventError
    /// The event's `id` when one could be read.
    public var eventID: String?
    /// The `app` when it was a string.
    public var app: String?
    /// The `environment` when it was a string.
    public var environment: String?
    /// The parsed token, when it parsed.
    public var token: DeviceToken?
    /// The `token` as written, when it was a string.
    public var rawToken: String?

    public init(
        error: EventError, eventID: String? = nil, app: String? = nil, environment: String? = nil,
        token: DeviceToken? = nil, rawToken: String? = nil
    ) {
        self.error = error
        self.eventID = eventID
        self.app = app
        self.environment = environment
        self.token = token
        self.rawToken = rawToken
    }

    public var reason: DeliveryErrorReason { error.reason }
    public var detail: String { error.detail }
    public var description: String { error.description }
}
