import Foundation
import NIOCore
import PushCore
import PushSimulator
import PushTestSupport
import Synchronization
import Testing
@testable import PushGateway

/// The test PKI (shared with the simulator tests).
typealias PKI = TestPKI

/// Collects outcomes from the engine's threads.
final class OutcomeLog: Sendable {
    private let outcomes = Mutex<[DeliveryOutcome]>([])
    func add(_ batch: [DeliveryOutcome]) { outcomes.withLock { $0 += batch } }
    var all: [DeliveryOutcome] { outcomes.withLock { $0 } }
    var count: Int { outcomes.withLock { $0.count } }
}

struct Harness {
    var simulator = SimulatorConfiguration(
        certificatePath: PKI.path("server.pem"), privateKeyPath: PKI.path("server-key.pem"), caPath: PKI.path("ca.pem"))
    var delivery = DeliveryConfiguration()
    var connections = 2
    var serverCA = "ca.pem"
    var clientCertificate = "app"
    var format = NotificationFormat.frame

    /// For tests whose every error response must arrive within the window: it must outlast the gateway's slowest
    /// answer, as in production. The simulator runs in this process, and with the whole test pass sharing two cores
    /// it has answered status 10 and status 8 more than 500 ms late, after the notifications behind them had been
    /// counted accepted.
    static let loadedGatewayWindow: Duration = .seconds(2)

    init() {
        simulator.recordInMemory = true
        delivery.acceptanceWindow = .milliseconds(500)
        delivery.reconnectInitial = .milliseconds(2)
        delivery.reconnectMaximum = .milliseconds(20)
        delivery.reconnectResetAfter = .seconds(10)
        delivery.maxNewConnectionsPerMinute = 60_000
        delivery.connectBurst = 100
        delivery.jitterSeed = 7
    }

    static let app = AppKey(app: "com.example.app", environment: .production)

    func endpoint(_ addresses: SimulatorAddresses) -> AppEndpoint {
        AppEndpoint(
            app: "com.example.app", environment: .production, gatewayHost: "127.0.0.1",
            gatewayPort: addresses.gatewayPort, feedbackHost: "127.0.0.1", feedbackPort: addresses.feedbackPort,
            connections: connections, format: format, certificatePath: PKI.path("\(clientCertificate).pem"),
            privateKeyPath: PKI.path("\(clientCertificate)-key.pem"), caPath: PKI.path(serverCA))
    }

    /// Starts a simulator and an engine, runs `body`, stops both.
    func run<T: Sendable>(_ body: (GatewaySimulator, BoundedDeliveryEngine, OutcomeLog, SimulatorAddresses) async throws -> T) async throws -> T {
        let simulator = try GatewaySimulator(configuration: simulator)
        let addresses = try await simulator.start()
        let log = OutcomeLog()
        let engine = try BoundedDeliveryEngine(endpoints: [endpoint(addresses)], configuration: delivery) { log.add($0) }
        engine.start()
        do {
            let result = try await body(simulator, engine, log, addresses)
            _ = await engine.stop()
            await simulator.stop()
            return result
        } catch {
            _ = await engine.stop()
            await simulator.stop()
            throw error
        }
    }
}

/// Notifications with distinct tokens: ticket i has token bytes (i >> 8, i & 0xFF) plus 30 bytes of `fill`.
func deliveries(
    _ range: ClosedRange<Int>, fill: UInt8 = 0x11, expiration: UInt32 = 0, format: NotificationFormat = .frame
) -> [Delivery] {
    range.map { i in
        let token = [UInt8(i >> 8), UInt8(i & 0xFF)] + Array(repeating: fill, count: 30)
        return Delivery(
            ticket: UInt64(i),
            notification: PushNotification(
                token: try! DeviceToken(bytes: token), payload: Array(#"{"aps":{"alert":"n\#(i)"}}"#.utf8),
                identifier: 0, expiration: expiration, priority: .immediate),
            format: format)
    }
}

func ticket(ofToken token: [UInt8]) -> Int { Int(token[0]) << 8 | Int(token[1]) }

extension BoundedDeliveryEngine {
    /// Waits for every outcome (the test fails rather than hangs if that takes over a minute).
    func settle() async {
        let drained = await drain(timeout: .seconds(60))
        #expect(drained, "not every delivery was settled within a minute")
    }
}

@Suite(.serialized) struct EngineIntegrationTests {
    @Test func shutdownEvery97DeliversEachOnceAndBacksOff() async throws {
        var h = Harness()
        h.delivery.acceptanceWindow = Harness.loadedGatewayWindow
        h.simulator.shutdownEvery = 97
        h.connections = 1
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...10_000), to: Harness.app)
            await engine.settle()
            let outcomes = log.all
            #expect(outcomes.count == 10_000)
            #expect(outcomes.allSatisfy { $0.result == .accepted })
            #expect(Set(outcomes.map(\.ticket)).count == 10_000)
            let recorded = simulator.recorded
            #expect(recorded.count == 10_000)
            #expect(Set(recorded.map { ticket(ofToken: $0.token) }) == Set(1...10_000))
            #expect(simulator.summary.errorResponses[10] == 103)
            // Each status 10 makes the engine write again what followed the one it named; the send window halves
            // while that is more than the connection delivered (down to four connections' worth), so this stays
            // bounded: about 87,000 writes, most of them while the window comes down from 100,000. Without the
            // rule each of the 103 connections rewrote most of what was pending: about 520,000.
            let written = engine.status(of: Harness.app)!.written
            #expect(written <= 11 * 10_000, "\(written) writes for 10,000 notifications")

            // Each reconnect waited out the backoff the pool chose: on the pool's own monotonic clock, the attempt
            // after a status-10 end comes no sooner than that end plus its backoff.
            let status = engine.status(of: Harness.app)!
            var waits: [(backoff: Duration, waited: Duration)] = []
            var pending: (at: ContinuousClock.Instant, backoff: Duration)?
            for event in status.events {
                switch event.kind {
                case .ended(let reason, let backoff) where reason.contains("shutdown"): pending = (event.at, backoff)
                case .attempt:
                    if let p = pending { waits.append((p.backoff, p.at.duration(to: event.at))) }
                    pending = nil
                default: break
                }
            }
            #expect(waits.count == 103)
            #expect(waits.filter { $0.backoff > .milliseconds(1) }.count > 50, "the backoff grew past its first step")
            for (index, wait) in waits.enumerated() {
                #expect(wait.waited >= wait.backoff, "reconnect \(index + 1) came \(wait.waited) after, backoff \(wait.backoff)")
            }
            #expect(Set(recorded.map(\.connection)).count == 104)
            // The failures are still counted, unless the last connection has been up for the reset period (a
            // slow run: the suite's other tests share the machine).
            let lastReady = status.events.last { $0.kind == .ready }!.at
            #expect(status.consecutiveFailures >= 1 || lastReady.duration(to: .now) >= h.delivery.reconnectResetAfter)
        }
    }

    @Test func invalidTokensFailWithStatusEightAndTheRestArriveOnce() async throws {
        var h = Harness()
        h.delivery.acceptanceWindow = Harness.loadedGatewayWindow
        let all = deliveries(1...10_000)
        let invalid = Set(stride(from: 7, through: 10_000, by: 33))  // 3%
        h.simulator.invalidTokens = Set(invalid.map { i in [UInt8(i >> 8), UInt8(i & 0xFF)] + Array(repeating: 0x11, count: 30) })
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(all, to: Harness.app)
            await engine.settle()
            let outcomes = log.all
            #expect(outcomes.count == 10_000)
            let failed = outcomes.filter { $0.result != .accepted }
            #expect(Set(failed.map { Int($0.ticket.value) }) == invalid)
            #expect(failed.allSatisfy {
                if case .failed(.invalidToken, .invalidToken, _) = $0.result { true } else { false }
            })
            let recorded = simulator.recorded.map { ticket(ofToken: $0.token) }
            #expect(recorded.count == 10_000 - invalid.count)
            #expect(Set(recorded) == Set(1...10_000).subtracting(invalid))
            #expect(simulator.summary.errorResponses[8] == invalid.count)
        }
    }

    /// The legacy formats through the engine and the simulator. Enhanced: status 8 names the culprit. Simple: the
    /// gateway closes without a word, and the pool finds each culprit by halving the suspects; no neighbour fails.
    @Test(arguments: [NotificationFormat.enhanced, .simple])
    func invalidTokensInTheLegacyFormatsFailAloneAndTheRestArrive(format: NotificationFormat) async throws {
        var h = Harness()
        h.format = format
        h.delivery.acceptanceWindow = .milliseconds(200)
        h.delivery.maxReconnectsAfterRejectionPerMinute = 60_000
        h.delivery.rejectionConnectBurst = 100
        let count = 1_000
        let invalid = Set(stride(from: 13, through: count, by: 97))  // about 1%
        h.simulator.invalidTokens = Set(invalid.map { i in [UInt8(i >> 8), UInt8(i & 0xFF)] + Array(repeating: 0x11, count: 30) })
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...count, format: format), to: Harness.app)
            await engine.settle()
            let outcomes = log.all
            #expect(outcomes.count == count)
            #expect(Set(outcomes.map(\.ticket.value)).count == count)
            let failed = outcomes.filter { $0.result != .accepted }
            #expect(Set(failed.map { Int($0.ticket.value) }) == invalid)
            #expect(failed.allSatisfy {
                if case .failed(.invalidToken, _, _) = $0.result { true } else { false }
            })
            let recorded = Set(simulator.recorded.map { ticket(ofToken: $0.token) })
            #expect(recorded == Set(1...count).subtracting(invalid))
            if format == .simple {
                #expect(simulator.summary.errorResponses.isEmpty)
                #expect(simulator.summary.silentCloses[8, default: 0] >= invalid.count)
            } else {
                #expect(simulator.summary.errorResponses[8] == invalid.count)
            }
        }
    }

    /// The gateway answers status 8 for notification 5 a second late. With a 200 ms acceptance window, 1 to 10
    /// were all accepted by then (SPEC section 4 defines acceptance by the window) although the gateway rejected 5
    /// and discarded 6 to 10: the protocol's blind spot. The pool counts the late answer (`lateErrorResponses`,
    /// the metric `pushworker_late_error_responses_total`) so that it is seen. With a window longer than the delay,
    /// the same answer fails 5 and 6 to 10 are sent again: nothing lost, nothing counted late.
    @Test(arguments: [(windowMs: 200, late: true), (windowMs: 3000, late: false)])
    func anErrorResponseLaterThanTheWindowIsCounted(windowMs: Int, late: Bool) async throws {
        var h = Harness()
        h.connections = 1
        h.delivery.acceptanceWindow = .milliseconds(windowMs)
        h.simulator.errorResponseDelayMilliseconds = 1000
        h.simulator.invalidTokens = [[0, 5] + Array(repeating: 0x11, count: 30)]
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...10), to: Harness.app)
            await engine.settle()
            // Late, every outcome is known before the answer arrives: wait for the pool to have counted it.
            let answered = await eventually(within: .seconds(30)) {
                simulator.summary.errorResponses[8] == 1 && engine.status(of: Harness.app)?.lateErrorResponses == (late ? 1 : 0)
            }
            #expect(answered)
            #expect(log.count == 10)
            let recorded = Set(simulator.recorded.map { ticket(ofToken: $0.token) })
            let failed = log.all.filter { $0.result != .accepted }.map(\.ticket)
            if late {
                #expect(log.all.allSatisfy { $0.result == .accepted })
                #expect(recorded == Set(1...4))
            } else {
                #expect(failed == [5])
                #expect(recorded == Set(1...10).subtracting([5]))
            }
        }
    }

    @Test func closeEvery500LosesNothingAndDuplicatesStayWithinWhatWasInFlight() async throws {
        var h = Harness()
        h.simulator.closeEvery = 500
        h.delivery.maxInFlight = 300
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...10_000), to: Harness.app)
            await engine.settle()
            #expect(log.count == 10_000)
            #expect(log.all.allSatisfy { $0.result == .accepted })
            let recorded = simulator.recorded.map { ticket(ofToken: $0.token) }
            #expect(Set(recorded) == Set(1...10_000))
            let duplicates = recorded.count - 10_000
            let closes = simulator.summary.abruptCloses
            #expect(closes >= 10_000 / 500)
            // Only what was in flight when a connection dropped can arrive twice.
            #expect(duplicates <= closes * h.delivery.maxInFlight)
            #expect(engine.peakHeld <= h.delivery.maxInFlight)
        }
    }

    /// The gateway closes every connection after 500 notifications, within the acceptance window, with the
    /// default `maxInFlight`: without a send window nothing would ever pass the window (each connection carries
    /// thousands before the close, all resent). The window halves on every close until a connection's first
    /// window's worth fits its lifetime; everything arrives, nothing fails, and each close resends at most what
    /// the gateway had taken since the window began.
    @Test func closesSoonerThanTheAcceptanceWindowStillDeliverEverything() async throws {
        var h = Harness()
        h.simulator.closeEvery = 500
        // The close must be noticed within the window, as every error response must (`loadedGatewayWindow`). The
        // simulator shares this process and two cores with the whole test pass, and a close of a connection that had
        // just taken a turn's worth of writes (2,048) was noticed after the window had accepted them: at 200 ms in
        // 1 run in 8 before the in-flight ledger and 3 in 8 after; at 500 ms once in a fresh-clone CI run. That is
        // the acceptance window's blind spot, by which SPEC section 4 defines acceptance. Once the send window fits
        // a connection's 500, each connection passes a few hundred per window: 4,000 take about 20 s at 2 s.
        h.delivery.acceptanceWindow = Harness.loadedGatewayWindow
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...4_000), to: Harness.app)
            await engine.settle()
            #expect(log.count == 4_000)
            #expect(log.all.allSatisfy { $0.result == .accepted })
            let recorded = simulator.recorded.map { ticket(ofToken: $0.token) }
            #expect(Set(recorded) == Set(1...4_000))
            let closes = simulator.summary.abruptCloses
            #expect(recorded.count - 4_000 <= closes * 500)
        }
    }

    @Test func aSlowReaderBackpressuresTheCallerWithBoundedMemory() async throws {
        var h = Harness()
        h.simulator.readDelayMilliseconds = 2
        h.delivery.maxInFlight = 500
        h.connections = 1
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...5_000), to: Harness.app)
            // submit returns only once all but the last maxInFlight have outcomes: the caller was held back.
            #expect(log.count >= 5_000 - 500)
            #expect(engine.peakHeld <= 500)
            await engine.settle()
            #expect(log.count == 5_000)
            #expect(Set(simulator.recorded.map { ticket(ofToken: $0.token) }) == Set(1...5_000))
        }
    }

    @Test func aGatewayDownAtStartIsWaitedOutUnderTheConnectionCap() async throws {
        var h = Harness()
        h.simulator.refuseConnections = 8
        h.connections = 1
        h.delivery.maxNewConnectionsPerMinute = 600  // 10/s
        h.delivery.connectBurst = 3
        h.delivery.reconnectInitial = .milliseconds(20)
        h.delivery.reconnectMaximum = .milliseconds(200)
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...500), to: Harness.app)
            await engine.settle()
            #expect(log.all.allSatisfy { $0.result == .accepted } && log.count == 500)
            #expect(Set(simulator.recorded.map { ticket(ofToken: $0.token) }) == Set(1...500))
            let status = engine.status(of: Harness.app)!
            #expect(simulator.summary.refusedConnections == 8)
            #expect(status.connectionAttempts == 9)
            // The cap: any run of attempts from i to j fits burst + rate × (t_j - t_i). The times are those the
            // attempts' timers fired at, which under load is up to a few milliseconds after they were due (a CI run
            // saw 4 attempts in 97 ms): 20 ms of slack.
            let attempts = status.events.filter { $0.kind == .attempt }.map(\.at)
            for i in attempts.indices {
                for j in attempts.indices where j > i {
                    let span = attempts[i].duration(to: attempts[j])
                    let seconds = Double(span.components.seconds) + Double(span.components.attoseconds) * 1e-18
                    #expect(Double(j - i + 1) <= 3 + 10 * (seconds + 0.020), "attempts \(i)...\(j) in \(span)")
                }
            }
            // And the backoff grew between refusals.
            let backoffs = status.events.compactMap { e -> Duration? in
                if case .ended(_, let b) = e.kind { b } else { nil }
            }
            #expect(backoffs.count == 8)
            #expect(status.lastError != nil)
        }
    }

    @Test func expiredNotificationsAreNeverSent() async throws {
        let h = Harness()
        try await h.run { simulator, engine, log, _ in
            let past = UInt32(Date().timeIntervalSince1970) - 60
            try await engine.submit(deliveries(1...50, expiration: past) + deliveries(51...60), to: Harness.app)
            await engine.settle()
            let expired = log.all.filter {
                if case .failed(.expired, nil, _) = $0.result { true } else { false }
            }
            #expect(Set(expired.map(\.ticket.value)) == Set(1...50))
            #expect(expired.allSatisfy { $0.attempts == 0 })
            #expect(Set(simulator.recorded.map { ticket(ofToken: $0.token) }) == Set(51...60))
        }
    }

    @Test func aGatewayWithAnUntrustedCertificateIsRefusedWithAClearError() async throws {
        var h = Harness()
        h.simulator.certificatePath = PKI.path("rogue-server.pem")
        h.simulator.privateKeyPath = PKI.path("rogue-server-key.pem")
        h.connections = 1
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...5), to: Harness.app)
            // Wait until the pool has tried and failed (its state, not time).
            #expect(await eventually { engine.status(of: Harness.app)!.lastError != nil })
            let status = engine.status(of: Harness.app)!
            #expect(status.lastError!.contains("CERTIFICATE_VERIFY_FAILED"), "\(status.lastError!)")
            #expect(status.credentialsRefused)
            #expect(!status.everConnected)
            #expect(simulator.recorded.isEmpty)
            #expect(log.count == 0)
            let unsettled = await engine.stop()
            #expect(unsettled.binary.map(\.ticket.value) == Array(1...5))
        }
    }

    @Test func aClientCertificateTheGatewayRefusesIsReportedAsRefusedCredentials() async throws {
        var h = Harness()
        h.clientCertificate = "rogue-client"
        h.connections = 1
        try await h.run { simulator, engine, log, _ in
            try await engine.submit(deliveries(1...5), to: Harness.app)
            #expect(await eventually { engine.status(of: Harness.app)!.credentialsRefused })
            let status = engine.status(of: Harness.app)!
            #expect(status.readyConnections == 0)
            #expect(engine.isDown(Harness.app))
            #expect(simulator.recorded.isEmpty)
            #expect(log.count == 0)
            let unsettled = await engine.stop()
            #expect(unsettled.binary.map(\.ticket.value) == Array(1...5))
        }
    }

    @Test func feedbackTuplesArriveThroughTheClient() async throws {
        var h = Harness()
        h.simulator.feedback = try FeedbackEntry.parseFile("aabbccdd 1700000000\n0011 1700000001\n")
        try await h.run { _, _, _, addresses in
            let client = try FeedbackClient(endpoint: h.endpoint(addresses))
            let first = try await client.fetch()
            #expect(first.tuples.map(\.token.hex) == ["aabbccdd", "0011"])
            #expect(first.tuples.map(\.timestamp) == [1_700_000_000, 1_700_000_001])
            #expect(first.problem == nil)
            let second = try await client.fetch()
            #expect(second.tuples.isEmpty)
        }
    }

    /// The visit's timeout is for the service's silence, not for the whole list: a long list read by a slow spool
    /// (each read's tuples taking 100 ms to keep, against a 300 ms timeout) is read whole, one read at a time.
    @Test func aLongListKeptSlowlyIsReadWholeWithinAShortTimeout() async throws {
        var h = Harness()
        let count = 20_000  // 760,000 bytes: a dozen reads at least
        h.simulator.feedback = try FeedbackEntry.parseFile(
            (0..<count).map { String(format: "%064x %d", 0xF00D_0000 + $0, 1_700_000_000 + $0) }.joined(separator: "\n"))
        try await h.run { _, _, _, addresses in
            var client = try FeedbackClient(endpoint: h.endpoint(addresses))
            client.timeout = .milliseconds(300)
            let reads = Mutex<[Int]>([])
            let report = try await client.fetch { tuples in
                reads.withLock { $0.append(tuples.count) }
                try await Task.sleep(for: .milliseconds(100))  // the slow disk: the fault under test
            }
            #expect(report.count == count)
            #expect(report.problem == nil)
            let sizes = reads.withLock { $0 }
            #expect(sizes.reduce(0, +) == count)
            #expect(sizes.count > 3, "more reads than the timeout holds of the spool's time: \(sizes.count)")
        }
    }
}
