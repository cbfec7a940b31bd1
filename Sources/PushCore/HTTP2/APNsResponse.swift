/// The `reason` strings of Apple's error responses ("Handling notification responses from APNs").
/// An `Error` too: the refusal a check returns (the simulator's token verifier).
public enum APNsReason: String, CaseIterable, Hashable, Sendable, Error {
    // 400
    case badCollapseId = "BadCollapseId"
    case badDeviceToken = "BadDeviceToken"
    case badExpirationDate = "BadExpirationDate"
    case badMessageId = "BadMessageId"
    case badPriority = "BadPriority"
    case badTopic = "BadTopic"
    case deviceTokenNotForTopic = "DeviceTokenNotForTopic"
    case duplicateHeaders = "DuplicateHeaders"
    case idleTimeout = "IdleTimeout"
    case invalidPushType = "InvalidPushType"
    case missingDeviceToken = "MissingDeviceToken"
    case missingTopic = "MissingTopic"
    case payloadEmpty = "PayloadEmpty"
    case topicDisallowed = "TopicDisallowed"
    // 403
    case badCertificate = "BadCertificate"
    case badCertificateEnvironment = "BadCertificateEnvironment"
    case expiredProviderToken = "ExpiredProviderToken"
    case forbidden = "Forbidden"
    case invalidProviderToken = "InvalidProviderToken"
    case missingProviderToken = "MissingProviderToken"
    case unrelatedKeyIdInToken = "UnrelatedKeyIdInToken"
    case badEnvironmentKeyIdInToken = "BadEnvironmentKeyIdInToken"
    // 404, 405
    case badPath = "BadPath"
    case methodNotAllowed = "MethodNotAllowed"
    // 410
    case expiredToken = "ExpiredToken"
    case unregistered = "Unregistered"
    // 413
    case payloadTooLarge = "PayloadTooLarge"
    // 429
    case tooManyProviderTokenUpdates = "TooManyProviderTokenUpdates"
    case tooManyRequests = "TooManyRequests"
    // 500, 503
    case internalServerError = "InternalServerError"
    case serviceUnavailable = "ServiceUnavailable"
    case shutdown = "Shutdown"

    /// The status Apple answers this reason with.
    public var status: Int {
        switch self {
        case .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
            .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
            .missingTopic, .payloadEmpty, .topicDisallowed:
            400
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden, .invalidProviderToken,
            .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken:
            403
        case .badPath: 404
        case .methodNotAllowed: 405
        case .expiredToken, .unregistered: 410
        case .payloadTooLarge: 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: 429
        case .internalServerError: 500
        case .serviceUnavailable, .shutdown: 503
        }
    }
}

/// A response of the provider API as read off a stream: `:status`, and from the JSON body the `reason` and, for
/// 410, the `timestamp` (milliseconds since the epoch).
public struct APNsResponse: Hashable, Sendable {
    public var status: Int
    /// The `reason` as Apple spelled it; nil when the body held none (every 200).
    public var reason: String?
    /// 410 only: when Apple determined the token was no longer valid, in milliseconds since the epoch.
    public var timestampMilliseconds: Int64?
    /// The `apns-unique-id` header Apple sends in the sandbox: what its Push Notifications Console finds the
    /// notification by (SPEC section 3).
    public var uniqueID: String?

    public init(status: Int, reason: String? = nil, timestampMilliseconds: Int64? = nil) {
        self.status = status
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
    }

    /// Reads a response from its status and body. A body that is not the JSON object Apple sends leaves `reason`
    /// nil: the status alone decides the outcome then.
    public init(status: Int, body: [UInt8]) {
        self.init(status: status)
        guard !body.isEmpty else { return }
        body.withUnsafeBytes { raw in
            var reader = JSONReader(raw)
            try? readBody(&reader)
        }
    }

    private mutating func readBody(_ reader: inout JSONReader) throws(JSONSyntaxError) {
        reader.skipWhitespace()
        guard reader.kindOfNextValue() == .object else { return }
        reader.position += 1
        guard try !reader.objectIsEmpty() else { return }
        repeat {
            let key = try reader.readKey()
            if reader.string(key, equals: "reason"), reader.kindOfNextValue() == .string {
                reason = reader.string(try reader.readString())
            } else if reader.string(key, equals: "timestamp"), reader.kindOfNextValue() == .number {
                let value = reader.value(try reader.readNumber())
                if value.isFinite, value >= 0, value < 9.2e18 { timestampMilliseconds = Int64(value) }
            } else {
                try reader.skipValue(depth: 1)
            }
        } while try reader.nextMember(close: UInt8(ascii: "}"))
    }

    /// Apple's reason as a known case, when it is one.
    public var knownReason: APNsReason? { reason.flatMap(APNsReason.init(rawValue:)) }

    /// What the worker does with this response: SPEC section 9's table, in ``APNsOutcome/classify(_:)``.
    public var outcome: APNsOutcome { APNsOutcome.classify(self) }
}

/// What a response means for its notification (SPEC section 9). Final outcomes end the notification with an
/// outcome event; the others send it again, counted against `max_attempts` or not.
public enum APNsOutcome: Hashable, Sendable {
    /// 200: delivered to Apple.
    case accepted
    /// 400 BadDeviceToken or DeviceTokenNotForTopic: final, delivery error `invalid_token` (status 400).
    case invalidToken
    /// 410 Unregistered or ExpiredToken: final, delivery error `unregistered` and a feedback event.
    case unregistered
    /// 413: final, `payload_too_large`.
    case payloadTooLarge
    /// Any other 400, 404 or 405, and any other 4xx not named here: the request was wrong; final, `rejected`.
    case rejected
    /// 403 ExpiredProviderToken: renew the token at once and resend, uncounted.
    case renewProviderToken
    /// Any other 403: the app's credentials are refused; back the app off as after status 10, retry counted.
    case credentialsRefused
    /// 429: retry after a delay that grows per device token (TooManyRequests), or per provider token
    /// (TooManyProviderTokenUpdates); counted.
    case tooManyRequests
    /// 500, 503 and any other 5xx: retry with backoff, counted. `retireConnection` for 503 Shutdown.
    case serverError(retireConnection: Bool)

    /// Whether the notification ends with this response.
    public var isFinal: Bool {
        switch self {
        case .accepted, .invalidToken, .unregistered, .payloadTooLarge, .rejected: true
        case .renewProviderToken, .credentialsRefused, .tooManyRequests, .serverError: false
        }
    }

    /// Whether a resend counts against `max_attempts`.
    public var countsAttempt: Bool { self != .renewProviderToken }

    /// The delivery-error reason of a final failure.
    public var deliveryErrorReason: DeliveryErrorReason? {
        switch self {
        case .invalidToken: .invalidToken
        case .unregistered: .unregistered
        case .payloadTooLarge: .payloadTooLarge
        case .rejected: .rejected
        default: nil
        }
    }

    /// The table of SPEC section 9: status first, then Apple's reason where the status alone does not decide.
    public static func classify(_ response: APNsResponse) -> APNsOutcome {
        let reason = response.knownReason
        switch response.status {
        case 200: return .accepted
        case 400 where reason == .badDeviceToken || reason == .deviceTokenNotForTopic: return .invalidToken
        case 410: return .unregistered
        case 413: return .payloadTooLarge
        case 403 where reason == .expiredProviderToken: return .renewProviderToken
        case 403: return .credentialsRefused
        case 429: return .tooManyRequests
        case 503: return .serverError(retireConnection: reason == .shutdown)
        case 500...599: return .serverError(retireConnection: false)
        default: return .rejected
        }
    }
}
