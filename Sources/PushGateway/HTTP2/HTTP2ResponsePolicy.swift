import PushCore

/// What the pool does with a request's fate (SPEC section 9's table), pure: a final outcome, or a resend (counted
/// or not, at once or after a delay), and what else the response asks of the pool.
public struct HTTP2ResponsePolicy: Sendable {
    public let maxAttempts: Int
    /// The first delay of a 5xx retry; it doubles per counted failure of the notification, up to `maximumDelay`. (A
    /// 429's delay is its device token's: ``Effects/tooManyRequests``.)
    public let initialDelay: Duration
    public let maximumDelay: Duration
    /// Requests the server did not process go again uncounted at most this many times in a row; the next one counts
    /// like any failure and waits its delay (SPEC section 13).
    public static let maxUncountedInARow: UInt8 = 3

    public init(maxAttempts: Int, initialDelay: Duration, maximumDelay: Duration) {
        self.maxAttempts = maxAttempts
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
    }

    public enum Decision: Sendable, Equatable {
        /// The notification ends.
        case final(DeliveryOutcome)
        /// Send it again after `delay` (zero: at once).
        case resend(delay: Duration)
    }

    /// What else a response means for the pool.
    public struct Effects: Sendable, Equatable {
        /// 403 ExpiredProviderToken: renew the provider token now.
        public var renewToken = false
        /// 503 Shutdown, or 429 TooManyProviderTokenUpdates: the connection takes no new streams. (A connection
        /// refused a new token may not switch yet, and every request on it with that token would draw the same
        /// answer; its replacement starts with the current token, which a new connection may always do.)
        public var retireConnection = false
        /// Another 403: the app's credentials are refused; its connections back off, the reason goes to `/readyz`.
        public var credentialsRefused: String?
        /// 429 TooManyRequests: a strike against the device token; a resend waits the token's delay
        /// (``TooManyRequestsPacing``), not the notification's own. (Not for 429 TooManyProviderTokenUpdates.)
        public var tooManyRequests = false
    }

    /// A response arrived for `delivery` (its counters are updated). `now` is UNIX seconds, `nowMilliseconds` the
    /// time of the response for a 410 without a timestamp.
    public func decide(
        _ response: APNsResponse, for delivery: inout HTTP2Delivery, now: Int64, nowMilliseconds: Int64
    ) -> (Decision, Effects) {
        var (decision, effects) = decideByStatus(response, for: &delivery, now: now, nowMilliseconds: nowMilliseconds)
        if case .final(var outcome) = decision, let uniqueID = response.uniqueID {
            outcome.apnsUniqueID = uniqueID
            decision = .final(outcome)
        }
        return (decision, effects)
    }

    private func decideByStatus(
        _ response: APNsResponse, for delivery: inout HTTP2Delivery, now: Int64, nowMilliseconds: Int64
    ) -> (Decision, Effects) {
        var effects = Effects()
        delivery.unprocessedInARow = 0
        let outcome = response.outcome
        let status = UInt16(clamping: response.status)
        let detail = response.reason ?? "status \(response.status)"
        switch outcome {
        case .accepted:
            return (.final(delivery.outcome(.accepted)), effects)
        case .invalidToken, .payloadTooLarge, .rejected:
            let reason = outcome.deliveryErrorReason ?? .rejected
            return (.final(failure(delivery, reason, detail, status: status)), effects)
        case .unregistered:
            var final = failure(delivery, .unregistered, detail, status: status)
            final.unregisteredAt = response.timestampMilliseconds ?? nowMilliseconds
            return (.final(final), effects)
        case .renewProviderToken:
            effects.renewToken = true
            guard delivery.tokenRenewalResends > 0 else {
                delivery.tokenRenewalResends += 1
                return (resendUncounted(delivery, now: now), effects)
            }
            // Expired again with a renewed token: the clock or the key is wrong; count it.
            return (counted(&delivery, detail, status: status, now: now), effects)
        case .credentialsRefused:
            effects.credentialsRefused = detail
            return (counted(&delivery, detail, status: status, now: now), effects)
        case .tooManyRequests:
            // TooManyProviderTokenUpdates is about the provider token, not the device's: paced per notification.
            let providerToken = response.knownReason == .tooManyProviderTokenUpdates
            effects.tooManyRequests = !providerToken
            effects.retireConnection = providerToken
            return (counted(&delivery, detail, status: status, now: now), effects)
        case .serverError(let retire):
            effects.retireConnection = retire
            return (counted(&delivery, detail, status: status, now: now), effects)
        }
    }

    /// A request was sent and not answered (connection lost, deadline, reset): a counted retry, at once.
    public func lost(_ delivery: inout HTTP2Delivery, reason: String, now: Int64) -> Decision {
        delivery.unprocessedInARow = 0
        delivery.transientFailures += 1
        if delivery.transientFailures >= maxAttempts {
            return .final(failure(delivery, .retriesExhausted, reason, status: nil))
        }
        return expiredOutcome(delivery, now: now).map(Decision.final) ?? .resend(delay: .zero)
    }

    /// A request the server did not process (GOAWAY, REFUSED_STREAM): resent at once, uncounted (unless expired), at
    /// most ``maxUncountedInARow`` times in a row; after that each one counts and waits, as a 5xx does.
    public func unprocessed(_ delivery: inout HTTP2Delivery, reason: String, now: Int64) -> Decision {
        guard delivery.unprocessedInARow >= Self.maxUncountedInARow else {
            delivery.unprocessedInARow += 1
            return resendUncounted(delivery, now: now)
        }
        return counted(&delivery, reason, status: nil, now: now)
    }

    private func resendUncounted(_ delivery: HTTP2Delivery, now: Int64) -> Decision {
        expiredOutcome(delivery, now: now).map(Decision.final) ?? .resend(delay: .zero)
    }

    private func counted(_ delivery: inout HTTP2Delivery, _ detail: String, status: UInt16?, now: Int64) -> Decision {
        delivery.transientFailures += 1
        if delivery.transientFailures >= maxAttempts {
            return .final(failure(delivery, .retriesExhausted, detail, status: status))
        }
        if let expired = expiredOutcome(delivery, now: now) { return .final(expired) }
        return .resend(delay: initialDelay.doubled(delivery.transientFailures - 1, atMost: maximumDelay))
    }

    /// The outcome of a notification whose expiration has passed by `now` (UNIX seconds) as it is about to be sent:
    /// it is not sent (SPEC section 2); nil for one that may go.
    public func expiredBeforeSending(_ delivery: HTTP2Delivery, now: Int64) -> DeliveryOutcome? {
        guard Expiration.hasPassed(delivery.expiration, now: now) else { return nil }
        return failure(delivery, .expired, Expiration.passedDetail(delivery.expiration), status: nil)
    }

    /// No retry after the notification's expiration.
    private func expiredOutcome(_ delivery: HTTP2Delivery, now: Int64) -> DeliveryOutcome? {
        guard delivery.expiration != 0, now > Int64(delivery.expiration) else { return nil }
        return failure(delivery, .expired, "expired before it could be delivered", status: nil)
    }

    private func failure(_ delivery: HTTP2Delivery, _ reason: DeliveryErrorReason, _ detail: String, status: UInt16?) -> DeliveryOutcome {
        delivery.outcome(.failed(reason, status: nil, detail: detail), httpStatus: status)
    }
}
