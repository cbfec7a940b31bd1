import Foundation
import Logging
import PushCore
import PushTestSupport
import Synchronization
import Testing
@testable import PushGateway
@testable import PushSimulator

/// The engine delivering over the HTTP/2 provider API into the simulator (a separate process's worth of server:
/// its own TLS, HTTP/2 and checks), with SPEC section 9's outcomes under faults. Each test counts every outcome.
@Suite(.serialized) struct HTTP2EngineTests {
    struct Result {
        var outcomes: [DeliveryTicket: [DeliveryOutcome]]
        var recorded: [RecordedRequest]
        var summary: String
        var tokenRenewals = 0
        /// The simulator's answers by "STATUS Reason", and the API connections it accepted.
        var answers: [String: Int] = [:]
        var apiConnections = 0
    }

    static func run(
        count: Int, token: Bool = true, connections: Int = 2, maxAttempts: Int = 5, secondHalfAfter pause: Duration? = nil,
        retryDelays: (initial: Duration, maximum: Duration) = (.milliseconds(5), .milliseconds(50)), oneDeviceToken: Bool = false,
        expiredEvery: Int? = nil, paced: (batches: Int, every: Duration)? = nil, tokenRefresh: Int? = nil, simulator change: (inout SimulatorConfiguration) -> Void = { _ in }
    ) async throws -> Result {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        var configuration = HTTP2ClientConnectionTests.simulator {
            if token {
                $0.tokenKeyPath = TestPKI.path("token-key.pub.pem")
                $0.teamID = "TEAM123456"
                $0.keyID = "KEY1234567"
            }
        }
        change(&configuration)
        let simulator = try GatewaySimulator(configuration: configuration, logger: quiet)
        let addresses = try await simulator.start()
        let endpoint = AppEndpoint(
            app: "com.example.app", environment: .production, gatewayHost: "127.0.0.1", gatewayPort: 0, feedbackHost: "127.0.0.1",
            feedbackPort: 0, connections: connections, format: .frame, certificatePath: token ? nil : TestPKI.path("app.pem"),
            privateKeyPath: token ? nil : TestPKI.path("app-key.pem"), caPath: TestPKI.path("ca.pem"),
            http2: HTTP2Endpoint(
                host: "127.0.0.1", port: try #require(addresses.apiPort),
                authentication: token
                    ? .token(teamID: "TEAM123456", keyID: "KEY1234567", signingKeyPath: TestPKI.path("AuthKey_KEY1234567.p8"))
                    : .certificate))
        var delivery = DeliveryConfiguration()
        delivery.maxAttempts = maxAttempts
        delivery.reconnectInitial = retryDelays.initial
        delivery.reconnectMaximum = retryDelays.maximum
        delivery.jitterSeed = 7
        if let tokenRefresh { delivery.tokenRefreshSeconds = tokenRefresh }
        let outcomes = Mutex<[DeliveryTicket: [DeliveryOutcome]]>([:])
        let engine = try BoundedDeliveryEngine(endpoints: [endpoint], configuration: delivery, logger: quiet) { batch in
            outcomes.withLock { o in for outcome in batch { o[outcome.ticket, default: []].append(outcome) } }
        }
        engine.start()
        var deliveries = HTTP2ClientConnectionTests.deliveries(count, tokenOf: { oneDeviceToken ? 0 : $0 })
        if let expiredEvery {
            // A minute past their expiration as they are handed to the engine.
            let past = UInt32(Date().timeIntervalSince1970) - 60
            deliveries = deliveries.enumerated().map { i, delivery in
                guard i % expiredEvery == 0 else { return delivery }
                var request = delivery.request
                request.expiration = past
                return HTTP2Delivery(ticket: delivery.ticket, request: request)
            }
        }
        if let paced {
            // A steady flow: `batches` equal parts, one every `every` (the load's pace, not a wait for an event).
            let size = (count + paced.batches - 1) / paced.batches
            for start in stride(from: 0, to: count, by: size) {
                engine.enqueue(.http2(Array(deliveries[start..<min(count, start + size)])), to: endpoint.key)
                try await Task.sleep(for: paced.every)
            }
        } else if let pause {
            // The second half goes out once `pause` has passed on the clock (a token's lifetime, say).
            engine.enqueue(.http2(Array(deliveries.prefix(count / 2))), to: endpoint.key)
            #expect(await engine.drain(timeout: .seconds(60)))
            try await Task.sleep(for: pause)
            engine.enqueue(.http2(Array(deliveries.dropFirst(count / 2))), to: endpoint.key)
        } else {
            engine.enqueue(.http2(deliveries), to: endpoint.key)
        }
        let settled = await engine.drain(timeout: .seconds(60))
        #expect(settled, "\(engine.held) deliveries without an outcome")
        let renewals = engine.providerTokens(of: endpoint.key)?.renewalCount ?? 0
        _ = await engine.stop()
        let counts = simulator.summary
        let recorded = simulator.recordedRequests
        await simulator.stop()
        return Result(
            outcomes: outcomes.withLock { $0 }, recorded: recorded, summary: "\(counts)", tokenRenewals: renewals,
            answers: counts.apiAnswers, apiConnections: counts.apiConnections)
    }

    static func token(_ i: Int) -> [UInt8] {
        (try? DeviceToken(hex: String(format: "%064x", i + 1)))!.bytes
    }

    @Test(.timeLimit(.minutes(2))) func everyNotificationIsAcceptedOnceOverTokenConnections() async throws {
        let r = try await Self.run(count: 800)
        #expect(r.outcomes.count == 800)
        #expect(r.outcomes.values.allSatisfy { $0.count == 1 && $0[0].result == .accepted && $0[0].attempts == 1 })
        #expect(r.recorded.count == 800)
        #expect(Set(r.recorded.map(\.token)).count == 800)
    }

    /// Each outcome carries its request's apns-id, and in the sandbox Apple's apns-unique-id (SPEC section 3).
    @Test(.timeLimit(.minutes(1))) func outcomesCarryTheRequestsApnsIDAndTheSandboxsUniqueID() async throws {
        let sandbox = try await Self.run(count: 50, token: false, maxAttempts: 20) {
            $0.sandbox = true
            $0.rate503 = 0.2
            $0.seed = 5
        }
        let outcomes = sandbox.outcomes.values.map { $0[0] }
        #expect(outcomes.count == 50)
        let expected = Dictionary(uniqueKeysWithValues: HTTP2ClientConnectionTests.deliveries(50).map { ($0.ticket, $0.request.apnsID) })
        #expect(outcomes.allSatisfy { $0.apnsID != nil && $0.apnsID == expected[$0.ticket] })
        let unique = outcomes.compactMap(\.apnsUniqueID)
        #expect(unique.count == 50)
        #expect(Set(unique).count == 50)
        #expect(unique.allSatisfy { APNsID($0) != nil })
        #expect(outcomes.contains { $0.attempts > 1 })  // retried ones carry their last answer's id

        let production = try await Self.run(count: 5, token: false)
        #expect(production.outcomes.values.allSatisfy { $0[0].apnsUniqueID == nil && $0[0].apnsID != nil })
    }

    @Test(.timeLimit(.minutes(2))) func goAwayAnd503AndTooManyRequestsLoseAndDuplicateNothing() async throws {
        let r = try await Self.run(count: 600, maxAttempts: 20) {
            $0.goawayEvery = 50
            $0.rate503 = 0.05
            $0.rate429 = 0.05
            $0.seed = 11
        }
        #expect(r.outcomes.count == 600)
        #expect(r.outcomes.values.allSatisfy { $0.count == 1 && $0[0].result == .accepted },
                "\(r.outcomes.values.first { $0[0].result != .accepted }.map { "\($0)" } ?? "")")
        // Nothing the simulator accepted was sent again.
        #expect(r.recorded.count == 600, "\(r.summary)")
        #expect(Set(r.recorded.map(\.token)).count == 600)
        #expect(r.outcomes.values.contains { $0[0].attempts > 1 })  // the faults did happen
    }

    @Test(.timeLimit(.minutes(1))) func tooManyRequestsPacesTheDeviceTokensRetriesApart() async throws {
        // Eight notifications to one device token, every request answered 429. Each 429 doubles the token's delay
        // (20, 40, 80 ... ms, at most 2 s), so the eight first retries go out apart and the last one no sooner than
        // 2 s after the first answers; paced per notification, all eight would have gone again after 20 ms.
        let clock = ContinuousClock()
        let start = clock.now
        let r = try await Self.run(
            count: 8, token: false, maxAttempts: 2, retryDelays: (.milliseconds(20), .seconds(2)), oneDeviceToken: true
        ) { $0.rate429 = 1 }
        let elapsed = clock.now - start
        #expect(r.outcomes.count == 8)
        #expect(r.outcomes.values.allSatisfy {
            $0.count == 1 && $0[0].result == .failed(.retriesExhausted, status: nil, detail: "TooManyRequests") && $0[0].attempts == 2
        })
        #expect(r.summary.contains("\"429 TooManyRequests\": 16"), "\(r.summary)")
        #expect(elapsed >= .seconds(2))
    }

    @Test(.timeLimit(.minutes(1))) func aDeviceTokensRateIsWaitedOutWithoutLossOrDuplicates() async throws {
        // Thirty notifications to one device token, which the API accepts ten a second (as Apple limits requests to
        // one device): the others draw 429 TooManyRequests and wait their token's growing delay; each arrives once.
        let r = try await Self.run(
            count: 30, token: false, maxAttempts: 10, retryDelays: (.milliseconds(100), .seconds(1)), oneDeviceToken: true
        ) { $0.tokenRate = 10 }
        #expect(r.outcomes.count == 30)
        #expect(r.outcomes.values.allSatisfy { $0.count == 1 && $0[0].result == .accepted }, "\(r.summary)")
        #expect(r.recorded.count == 30)
        #expect(r.summary.contains("\"429 TooManyRequests\""), "\(r.summary)")  // the limit did bite
    }

    @Test(.timeLimit(.minutes(2))) func finalAnswersEndTheirNotifications() async throws {
        let unregistered = Set([3, 50, 400].map(Self.token))
        let invalid = Set([7, 99].map(Self.token))
        let r = try await Self.run(count: 500, token: false) {
            for t in unregistered { $0.unregistered[t] = 1_790_000_000_123 }
            $0.invalidTokens = invalid
        }
        #expect(r.outcomes.count == 500)
        for (ticket, outcomes) in r.outcomes {
            #expect(outcomes.count == 1)
            let token = Self.token(Int(ticket.value))
            let outcome = outcomes[0]
            if unregistered.contains(token) {
                #expect(outcome.result == .failed(.unregistered, status: nil, detail: "Unregistered"))
                #expect(outcome.httpStatus == 410)
                #expect(outcome.unregisteredAt == 1_790_000_000_123)
            } else if invalid.contains(token) {
                #expect(outcome.result == .failed(.invalidToken, status: nil, detail: "BadDeviceToken"))
                #expect(outcome.httpStatus == 400)
            } else {
                #expect(outcome.result == .accepted)
            }
        }
        #expect(r.recorded.count == 495)
    }

    /// The simulator's tokens live 3 s: the second half finds the worker's token expired (403 ExpiredProviderToken),
    /// which is renewed once, and everything goes out again uncounted.
    @Test(.timeLimit(.minutes(2))) func anExpiredProviderTokenIsRenewedOnceAndNothingIsLost() async throws {
        let r = try await Self.run(count: 100, maxAttempts: 1, secondHalfAfter: .seconds(4)) { $0.tokenLifetimeSeconds = 3 }
        #expect(r.outcomes.count == 100)
        // max_attempts 1: a counted retry would have failed the notification; the renewal's resend is not counted.
        #expect(r.outcomes.values.allSatisfy { $0.count == 1 && $0[0].result == .accepted }, "\(r.summary)")
        #expect(r.outcomes.values.contains { $0[0].attempts == 2 })
        #expect(r.tokenRenewals == 1)
        #expect(r.recorded.count == 100)
        #expect(r.summary.contains("403 ExpiredProviderToken"))
    }

    /// SPEC section 2 before every send: a notification whose expiration passed while it waited is not sent, its
    /// outcome `expired` with no attempt.
    @Test(.timeLimit(.minutes(2))) func notificationsPastTheirExpirationAreNotSent() async throws {
        let r = try await Self.run(count: 100, expiredEvery: 4)
        #expect(r.outcomes.count == 100)
        let expired = r.outcomes.values.filter { outcomes in
            guard outcomes.count == 1, outcomes[0].attempts == 0, case .failed(.expired, _, _) = outcomes[0].result else { return false }
            return true
        }
        #expect(expired.count == 25)
        #expect(r.outcomes.values.filter { $0.count == 1 && $0[0].result == .accepted }.count == 75)
        #expect(r.recorded.count == 75)
    }

    /// Apple's two token rules scaled down (tokens live 3 s; a connection takes a new one at most once a second)
    /// under a steady flow over 8 s on 3 connections: each expired token is renewed once for every connection (1 to
    /// 3 renewals, as whole seconds fall), no connection is refused a renewal (TooManyProviderTokenUpdates), and every notification is
    /// accepted once.
    @Test(.timeLimit(.minutes(2))) func providerTokenRenewalsConvergeUnderASteadyFlow() async throws {
        let r = try await Self.run(count: 800, connections: 3, paced: (batches: 32, every: .milliseconds(250))) { $0.tokenLifetimeSeconds = 3 }
        #expect(r.outcomes.count == 800)
        #expect(r.outcomes.values.allSatisfy { $0.count == 1 && $0[0].result == .accepted }, "\(r.summary)")
        #expect(r.recorded.count == 800)
        #expect((1...3).contains(r.tokenRenewals), "\(r.tokenRenewals) renewals: \(r.summary)")
        #expect(!r.summary.contains("TooManyProviderTokenUpdates"), "\(r.summary)")
    }

    /// A gateway on which no connection may switch tokens (renewal interval past the lifetime): each connection
    /// refused a new token is replaced, so TooManyProviderTokenUpdates answers only the requests it had open then.
    @Test(.timeLimit(.minutes(2))) func aConnectionRefusedANewTokenIsReplacedNotAskedAgain() async throws {
        let batch = 25
        let r = try await Self.run(count: 32 * batch, connections: 3, paced: (batches: 32, every: .milliseconds(250))) {
            $0.tokenLifetimeSeconds = 3
            $0.tokenRenewalIntervalSeconds = 3600
        }
        #expect(r.outcomes.count == 800)
        #expect(r.outcomes.values.allSatisfy { $0.count == 1 && $0[0].result == .accepted }, "\(r.summary)")
        #expect(r.recorded.count == 800)
        #expect((1...3).contains(r.tokenRenewals), "\(r.tokenRenewals) renewals: \(r.summary)")
        // Each renewal reaches the connections open then; each refuses at most the batch it had in flight.
        let refused = r.answers["429 TooManyProviderTokenUpdates", default: 0]
        #expect(refused <= r.tokenRenewals * 3 * batch, "\(refused) refusals: \(r.summary)")
        // Each renewal went into use on new connections.
        #expect(r.apiConnections > 3, "\(r.summary)")
    }

    @Test(.timeLimit(.minutes(2))) func retriesEndAsRetriesExhaustedWithTheLastReason() async throws {
        let r = try await Self.run(count: 20, maxAttempts: 3) { $0.rate503 = 1.0 }
        #expect(r.outcomes.count == 20)
        #expect(r.outcomes.values.allSatisfy {
            $0.count == 1 && $0[0].result == .failed(.retriesExhausted, status: nil, detail: "ServiceUnavailable") && $0[0].attempts == 3
        })
        #expect(r.recorded.isEmpty)
    }

    @Test(.timeLimit(.minutes(2))) func shutdownAndAbruptClosesRetireConnectionsWithoutLoss() async throws {
        let r = try await Self.run(count: 500, maxAttempts: 20) {
            $0.shutdownEvery = 60
            $0.closeEvery = 97
        }
        #expect(r.outcomes.count == 500)
        #expect(r.outcomes.values.allSatisfy { $0.count == 1 && $0[0].result == .accepted })
        #expect(Set(r.recorded.map(\.token)).count == 500)
    }

    /// A client certificate the API refuses in the TLS handshake: the pool reports refused credentials and the
    /// connection's end, counts as down, sends nothing, and hands every request back unsettled at stop.
    @Test(.timeLimit(.minutes(1))) func aRefusedClientCertificateIsReportedAndEveryRequestHandedBack() async throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let simulator = try GatewaySimulator(configuration: HTTP2ClientConnectionTests.simulator { _ in }, logger: quiet)
        let addresses = try await simulator.start()
        let endpoint = AppEndpoint(
            app: "com.example.app", environment: .production, gatewayHost: "127.0.0.1", gatewayPort: 0,
            feedbackHost: "127.0.0.1", feedbackPort: 0, connections: 1, format: .frame,
            certificatePath: TestPKI.path("rogue-client.pem"), privateKeyPath: TestPKI.path("rogue-client-key.pem"),
            caPath: TestPKI.path("ca.pem"),
            http2: HTTP2Endpoint(host: "127.0.0.1", port: try #require(addresses.apiPort), authentication: .certificate))
        var delivery = DeliveryConfiguration()
        delivery.reconnectInitial = .milliseconds(5)
        delivery.reconnectMaximum = .milliseconds(50)
        let outcomes = Atomic<Int>(0)
        let engine = try BoundedDeliveryEngine(endpoints: [endpoint], configuration: delivery, logger: quiet) { batch in
            outcomes.add(batch.count, ordering: .relaxed)
        }
        engine.start()
        engine.enqueue(.http2(HTTP2ClientConnectionTests.deliveries(5, tokenOf: { $0 })), to: endpoint.key)
        // Each attempt is refused the same way: down and refused hold together between attempts.
        #expect(await eventually { engine.isDown(endpoint.key) && engine.status(of: endpoint.key)!.credentialsRefused })
        let status = try #require(engine.status(of: endpoint.key))
        #expect(status.lastEnd?.hasPrefix("handshakeRefused") == true, "\(status.lastEnd ?? "none")")
        #expect(status.events.contains { $0.kind == .attempt })
        #expect(status.pending == 5)
        let unsettled = await engine.stop()
        #expect(unsettled.http2.map(\.ticket) == HTTP2ClientConnectionTests.deliveries(5, tokenOf: { $0 }).map(\.ticket))
        #expect(outcomes.load(ordering: .relaxed) == 0)
        #expect(simulator.recordedRequests.isEmpty)
        await simulator.stop()
    }
}
