import PushCore
import Testing
@testable import PushGateway

/// SPEC section 9's table as the pool applies it, one response at a time.
@Suite struct HTTP2ResponsePolicyTests {
    let policy = HTTP2ResponsePolicy(maxAttempts: 3, initialDelay: .milliseconds(100), maximumDelay: .milliseconds(250))

    /// The samples' token: every outcome carries it back.
    static let token = DeliveryTokenSource(try! DeviceToken(hex: "abcd"))

    static func delivery(expiration: UInt32 = 0) -> HTTP2Delivery {
        let json = #"{"id":"e1","app":"a","token":"abcd","payload":{"aps":{"alert":"x"}}"# + (expiration > 0 ? #","expiration":\#(expiration)}"# : "}")
        guard case .success(let event) = EventDecoder.http2.decode(json),
              let request = try? APNsRequest(event: event, app: HTTP2AppSettings(bundleID: "a"), recordTimestamp: 1000, defaultTTL: 1_000_000)
        else { fatalError("sample") }
        var d = HTTP2Delivery(ticket: 7, request: request)
        d.sends = 1
        return d
    }

    /// The sample's outcome: once sent, it carries its request's apns-id.
    static func outcome(
        ticket: DeliveryTicket = 7, tokenSource: DeliveryTokenSource = token, result: DeliveryOutcome.Result, attempts: Int,
        httpStatus: UInt16? = nil, unregisteredAt: Int64? = nil
    ) -> DeliveryOutcome {
        var outcome = DeliveryOutcome(
            ticket: ticket, tokenSource: tokenSource, result: result, attempts: attempts, httpStatus: httpStatus,
            unregisteredAt: unregisteredAt)
        outcome.apnsID = delivery().request.apnsID
        return outcome
    }

    func decide(_ status: Int, _ reason: String?, timestamp: Int64? = nil, _ d: inout HTTP2Delivery, now: Int64 = 2000)
        -> (HTTP2ResponsePolicy.Decision, HTTP2ResponsePolicy.Effects)
    {
        policy.decide(APNsResponse(status: status, reason: reason, timestampMilliseconds: timestamp), for: &d, now: now, nowMilliseconds: now * 1000)
    }

    /// The response counter's labels: Apple's reasons as they are, any other reason as `other`, so the number of
    /// counters stays bounded whatever the gateway sends; the delivery error keeps the reason as sent.
    @Test func aReasonOutsideApplesListIsCountedAsOther() {
        #expect(HTTP2PoolMetrics.ResponseKey(APNsResponse(status: 200)) == .init(status: 200, reason: nil))
        #expect(HTTP2PoolMetrics.ResponseKey(APNsResponse(status: 400, reason: "BadDeviceToken")) == .init(status: 400, reason: "BadDeviceToken"))
        for reason in ["BadDeviceToken ", "baddevicetoken", "request 81f3", String(repeating: "x", count: 4000), ""] {
            #expect(HTTP2PoolMetrics.ResponseKey(APNsResponse(status: 400, reason: reason)) == .init(status: 400, reason: "other"))
            var d = Self.delivery()
            guard case .final(let outcome) = decide(400, reason, &d).0, case .failed(_, _, let detail) = outcome.result else {
                Issue.record("\(reason.prefix(20)): not a final failure")
                continue
            }
            #expect(detail == reason)
        }
    }

    @Test func aFinalAnswerCarriesApplesUniqueIDAndANeverSentNotificationNoApnsID() {
        var d = Self.delivery()
        var sandbox = APNsResponse(status: 400, reason: "BadTopic")
        sandbox.uniqueID = "5c8f2d1e-3b4a-4c6d-9e8f-7a6b5c4d3e2f"
        guard case .final(let rejected) = policy.decide(sandbox, for: &d, now: 2000, nowMilliseconds: 2_000_000).0 else {
            Issue.record("not final")
            return
        }
        #expect(rejected.apnsUniqueID == "5c8f2d1e-3b4a-4c6d-9e8f-7a6b5c4d3e2f")
        #expect(rejected.apnsID == d.request.apnsID)
        var unavailable = APNsResponse(status: 503, reason: "ServiceUnavailable")
        unavailable.uniqueID = "6d9f3e2f-4c5b-4d7e-8f9a-8b7c6d5e4f3a"
        #expect(policy.decide(unavailable, for: &d, now: 2000, nowMilliseconds: 2_000_000).0 == .resend(delay: .milliseconds(100)))
        var unsent = Self.delivery(expiration: 1000)
        unsent.sends = 0
        #expect(policy.expiredBeforeSending(unsent, now: 2000)?.apnsID == nil)
    }

    @Test func finalAnswers() {
        var d = Self.delivery()
        #expect(decide(200, nil, &d).0 == .final(Self.outcome(result: .accepted, attempts: 1)))
        #expect(decide(400, "BadDeviceToken", &d).0
            == .final(Self.outcome(result: .failed(.invalidToken, status: nil, detail: "BadDeviceToken"), attempts: 1, httpStatus: 400)))
        #expect(decide(410, "Unregistered", timestamp: 1_700_000_000_123, &d).0
            == .final(Self.outcome(
                ticket: 7, tokenSource: Self.token, result: .failed(.unregistered, status: nil, detail: "Unregistered"), attempts: 1, httpStatus: 410,
                unregisteredAt: 1_700_000_000_123)))
        // A 410 without a timestamp takes the time of the response.
        if case .final(let o) = decide(410, "ExpiredToken", &d, now: 5000).0 { #expect(o.unregisteredAt == 5_000_000) } else { Issue.record("not final") }
        #expect(decide(413, "PayloadTooLarge", &d).0
            == .final(Self.outcome(result: .failed(.payloadTooLarge, status: nil, detail: "PayloadTooLarge"), attempts: 1, httpStatus: 413)))
        #expect(decide(400, "BadCollapseId", &d).0
            == .final(Self.outcome(result: .failed(.rejected, status: nil, detail: "BadCollapseId"), attempts: 1, httpStatus: 400)))
        #expect(d.transientFailures == 0)
    }

    @Test func retriesAreCountedDelayedAndBounded() {
        var d = Self.delivery()
        #expect(decide(503, "ServiceUnavailable", &d).0 == .resend(delay: .milliseconds(100)))
        let (second, effects) = decide(429, "TooManyRequests", &d)
        #expect(second == .resend(delay: .milliseconds(200)))
        #expect(effects == .init(tooManyRequests: true))  // the pool makes the delay the device token's
        var e = Self.delivery()
        let (providerTokens, retired) = decide(429, "TooManyProviderTokenUpdates", &e)
        #expect(providerTokens == .resend(delay: .milliseconds(100)))
        // Not paced per device token; the connection that may not switch tokens yet takes no more requests.
        #expect(retired == .init(retireConnection: true))
        #expect(decide(500, "InternalServerError", &d).0
            == .final(Self.outcome(result: .failed(.retriesExhausted, status: nil, detail: "InternalServerError"), attempts: 1, httpStatus: 500)))
    }

    @Test func shutdownRetiresTheConnectionAndRefusedCredentialsBackTheAppOff() {
        var d = Self.delivery()
        #expect(decide(503, "Shutdown", &d).1.retireConnection)
        var e = Self.delivery()
        let (decision, effects) = decide(403, "InvalidProviderToken", &e)
        #expect(decision == .resend(delay: .milliseconds(100)))
        #expect(effects.credentialsRefused == "InvalidProviderToken")
    }

    @Test func anExpiredProviderTokenIsResentFreeOnceThenCounted() {
        var d = Self.delivery()
        let (first, effects) = decide(403, "ExpiredProviderToken", &d)
        #expect(first == .resend(delay: .zero))
        #expect(effects.renewToken)
        #expect(d.transientFailures == 0)
        let (second, again) = decide(403, "ExpiredProviderToken", &d)
        #expect(second == .resend(delay: .milliseconds(100)))
        #expect(again.renewToken)
        #expect(d.transientFailures == 1)
    }

    @Test func nothingIsRetriedAfterTheExpiration() {
        var d = Self.delivery(expiration: 1500)
        #expect(decide(503, "ServiceUnavailable", &d, now: 1501).0
            == .final(Self.outcome(result: .failed(.expired, status: nil, detail: "expired before it could be delivered"), attempts: 1)))
        var lost = Self.delivery(expiration: 1500)
        #expect(policy.lost(&lost, reason: "connection lost", now: 1400) == .resend(delay: .zero))
        #expect(policy.unprocessed(&lost, reason: "refused", now: 1600)
            == .final(Self.outcome(result: .failed(.expired, status: nil, detail: "expired before it could be delivered"), attempts: 1)))
    }

    /// A server that refuses every stream: three resends go free, then each refusal counts and waits, so the
    /// notification ends as retries_exhausted after `max_attempts` counted ones (3 + 3 sends here, not forever).
    @Test func refusedRequestsGoFreeThreeTimesInARowThenCount() {
        var d = Self.delivery()
        var decisions: [HTTP2ResponsePolicy.Decision] = []
        for _ in 0..<6 { decisions.append(policy.unprocessed(&d, reason: "refused", now: 0)) }
        #expect(decisions == [
            .resend(delay: .zero), .resend(delay: .zero), .resend(delay: .zero),
            .resend(delay: .milliseconds(100)), .resend(delay: .milliseconds(200)),
            .final(Self.outcome(result: .failed(.retriesExhausted, status: nil, detail: "refused"), attempts: 1)),
        ])
    }

    /// An answer breaks the row: a notification refused now and then, answered between, never counts a refusal.
    @Test func anAnswerBetweenRefusalsStartsTheRowAgain() {
        var d = Self.delivery()
        for _ in 0..<4 {
            for _ in 0..<3 { #expect(policy.unprocessed(&d, reason: "refused", now: 0) == .resend(delay: .zero)) }
            _ = decide(429, "TooManyRequests", &d)
            d.transientFailures = 0
        }
        #expect(policy.unprocessed(&d, reason: "refused", now: 0) == .resend(delay: .zero))
    }

    @Test func lostRequestsCountUntilMaxAttempts() {
        var d = Self.delivery()
        #expect(policy.lost(&d, reason: "no response within 10000 ms", now: 0) == .resend(delay: .zero))
        #expect(policy.lost(&d, reason: "no response within 10000 ms", now: 0) == .resend(delay: .zero))
        #expect(policy.lost(&d, reason: "connection lost", now: 0)
            == .final(Self.outcome(result: .failed(.retriesExhausted, status: nil, detail: "connection lost"), attempts: 1)))
    }
}
