import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PushCore
import PushTestSupport
import Synchronization
import Testing
@testable import PushGateway
@testable import PushSimulator

/// One HTTP/2 client connection against the simulator's API (a separate implementation of the server side):
/// token and certificate authentication, the stream limit, GOAWAY, deadlines.
@Suite(.serialized) struct HTTP2ClientConnectionTests {
    /// What came back, counted.
    struct Tally: Sendable {
        var answered: [Int: Int] = [:]
        var unprocessed = 0
        var lost: [String] = []
        var closed = false
        var draining = false
        var maxOpen = 0
        var firstBatchTaken = 0
    }

    /// Feeds the connection from a queue whenever it reports capacity; counts what comes back. Used on the
    /// channel's event loop only (the events come there).
    final class Driver: @unchecked Sendable {
        var queue: [HTTP2Delivery]
        var connection: NIOLoopBound<HTTP2ClientConnection>?
        let tally = Mutex(Tally())
        let total: Int
        let finished: AsyncStream<Void>.Continuation
        let done: AsyncStream<Void>

        init(_ deliveries: [HTTP2Delivery]) {
            queue = deliveries
            total = deliveries.count
            (done, finished) = AsyncStream.makeStream(of: Void.self)
        }

        func pump() {
            guard let handler = connection?.value, !queue.isEmpty else { return }
            queue = handler.submit(queue)
            let open = handler.openStreams
            tally.withLock { $0.maxOpen = max($0.maxOpen, open) }
        }

        func event(_ event: HTTP2ConnectionEvent) {
            switch event {
            case .capacity: pump()
            case .answered(let answers):
                tally.withLock { t in for a in answers { t.answered[a.response.status, default: 0] += 1 } }
            case .unprocessed(let d, _): tally.withLock { $0.unprocessed += d.count }
            case .lost(let d, let reason): tally.withLock { $0.lost += Array(repeating: reason, count: d.count) }
            case .draining: tally.withLock { $0.draining = true }
            case .ready, .connectionError: break
            case .closed: tally.withLock { $0.closed = true }
            }
            let t = tally.withLock { $0 }
            if t.answered.values.reduce(0, +) + t.unprocessed + t.lost.count == total || t.closed { finished.yield() }
        }
    }

    /// `count` notifications; the i-th goes to token `tokenOf(i) + 1`.
    static func deliveries(_ count: Int, tokenOf: (Int) -> Int = { $0 }) -> [HTTP2Delivery] {
        (0..<count).map { i in
            let json = #"{"id":"e\#(i)","app":"com.example.app","token":"\#(String(format: "%064x", tokenOf(i) + 1))","payload":{"aps":{"alert":"hi \#(i)"}}}"#
            guard case .success(let event) = EventDecoder.http2.decode(json),
                  let request = try? APNsRequest(event: event, app: HTTP2AppSettings(bundleID: "com.example.app"), recordTimestamp: Int64(Date().timeIntervalSince1970), defaultTTL: 86400)
            else { fatalError("sample event") }
            return HTTP2Delivery(ticket: DeliveryTicket(UInt64(i)), request: request)
        }
    }

    static func simulator(_ change: (inout SimulatorConfiguration) -> Void) -> SimulatorConfiguration {
        var c = SimulatorConfiguration(
            certificatePath: TestPKI.path("server.pem"), privateKeyPath: TestPKI.path("server-key.pem"), caPath: TestPKI.path("ca.pem"))
        c.recordInMemory = true
        c.apiPort = 0
        change(&c)
        return c
    }

    static func tokenSimulator(_ change: (inout SimulatorConfiguration) -> Void = { _ in }) -> SimulatorConfiguration {
        simulator {
            $0.tokenKeyPath = TestPKI.path("token-key.pub.pem")
            $0.teamID = "TEAM123456"
            $0.keyID = "KEY1234567"
            change(&$0)
        }
    }

    /// Runs `count` deliveries through one connection to a simulator; returns the tally and what it recorded.
    static func run(
        _ configuration: SimulatorConfiguration, count: Int, token: Bool, cap: Int = 1000,
        timeout: TimeAmount = .seconds(10)
    ) async throws -> (Tally, [RecordedRequest]) {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let simulator = try GatewaySimulator(configuration: configuration, logger: quiet)
        let addresses = try await simulator.start()
        var endpoint = AppEndpoint(
            app: "com.example.app", environment: .production, gatewayHost: "127.0.0.1", gatewayPort: 0, feedbackHost: "127.0.0.1",
            feedbackPort: 0, connections: 1, format: .frame, certificatePath: token ? nil : TestPKI.path("app.pem"),
            privateKeyPath: token ? nil : TestPKI.path("app-key.pem"), caPath: TestPKI.path("ca.pem"))
        let port = try #require(addresses.apiPort)
        endpoint.http2 = HTTP2Endpoint(
            host: "127.0.0.1", port: port,
            authentication: token ? .token(teamID: "TEAM123456", keyID: "KEY1234567", signingKeyPath: "") : .certificate)
        let tokens = ProviderTokenCache(key: try ProviderTokenTests.key())
        let driver = Driver(deliveries(count))
        let settings = HTTP2ClientConnection.Settings(maxConcurrentStreams: cap, oneStreamUntilSuccess: token, requestTimeout: timeout)
        let (channel, handler) = try await HTTP2ClientConnection.connect(
            host: "127.0.0.1", port: port, tls: try endpoint.tlsContext(),
            group: MultiThreadedEventLoopGroup.singleton, connectTimeout: .seconds(5), settings: settings,
            authorization: { token ? try? tokens.token(now: Int64(Date().timeIntervalSince1970)) : nil },
            onEvent: { driver.event($0) }
        ).get()
        try await channel.eventLoop.submit {
            driver.connection = handler
            // The first submission: before the server's SETTINGS only one stream may open.
            let before = driver.queue.count
            driver.pump()
            driver.tally.withLock { $0.firstBatchTaken = before - driver.queue.count }
        }.get()
        var iterator = driver.done.makeAsyncIterator()
        _ = await iterator.next()
        try? await channel.close()
        let tally = driver.tally.withLock { $0 }
        let recorded = simulator.recordedRequests
        await simulator.stop()
        return (tally, recorded)
    }

    @Test(.timeLimit(.minutes(1))) func aTokenConnectionOpensUpAfterItsFirstSuccessAndDeliversEverything() async throws {
        let (tally, recorded) = try await Self.run(Self.tokenSimulator { $0.maxConcurrentStreams = 40 }, count: 200, token: true)
        #expect(tally.firstBatchTaken == 1)
        #expect(tally.answered == [200: 200])
        #expect(tally.lost.isEmpty && tally.unprocessed == 0)
        #expect(tally.maxOpen == 40)  // the server's limit, once the first request succeeded
        #expect(Set(recorded.map(\.token)).count == 200)
    }

    @Test(.timeLimit(.minutes(1))) func requestsReachTheServerInTheOrderOfTheirStreams() async throws {
        // A batch's bodies in hash order would have the server finish (and both sides close) streams out of order.
        let (tally, recorded) = try await Self.run(Self.simulator { $0.maxConcurrentStreams = 1000 }, count: 600, token: false)
        #expect(tally.answered == [200: 600])
        let expected = Self.deliveries(600).map { Array($0.request.token.bytes) }
        #expect(recorded.count == 600)
        let firstOutOfOrder = zip(recorded.map(\.token), expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        #expect(firstOutOfOrder == nil)
    }

    @Test(.timeLimit(.minutes(1))) func ourCapHoldsBelowTheServersLimit() async throws {
        let (tally, _) = try await Self.run(Self.simulator { $0.maxConcurrentStreams = 1000 }, count: 300, token: false, cap: 25)
        #expect(tally.answered == [200: 300])
        #expect(tally.maxOpen == 25)
    }

    @Test(.timeLimit(.minutes(1))) func goAwayHandsBackTheStreamsTheServerDidNotProcess() async throws {
        let (tally, recorded) = try await Self.run(
            Self.simulator { $0.goawayEvery = 10; $0.maxConcurrentStreams = 100 }, count: 30, token: false)
        // After its 10th answer the server sends GOAWAY naming the highest stream answered; streams up to it are
        // still answered (streams finish out of order, so how many varies), the ones above come back unprocessed
        // (to be resent uncounted), and nothing is lost.
        let answered = tally.answered[200] ?? 0
        #expect(answered >= 10 && tally.answered.count == 1)
        #expect(answered + tally.unprocessed == 30)
        #expect(tally.lost.isEmpty)
        #expect(tally.draining)
        #expect(recorded.count == answered)
    }

    @Test(.timeLimit(.minutes(1))) func anUnansweredRequestIsLostAtItsDeadline() async throws {
        let (tally, recorded) = try await Self.run(
            Self.simulator { $0.responseDelayMilliseconds = 2000 }, count: 5, token: false, timeout: .milliseconds(200))
        #expect(tally.answered.isEmpty)
        #expect(tally.lost == Array(repeating: "no response within 200 ms", count: 5))
        #expect(recorded.count <= 5)
    }

    @Test(.timeLimit(.minutes(1))) func anAbruptCloseLosesWhatWasOpen() async throws {
        let (tally, _) = try await Self.run(Self.simulator { $0.closeEvery = 4; $0.maxConcurrentStreams = 1 }, count: 6, token: false)
        // One stream at a time: three answered, the fourth cut with the connection, the last two never sent.
        #expect(tally.answered == [200: 3])
        #expect(tally.lost == ["connection lost"])
        #expect(tally.closed)
    }
}
