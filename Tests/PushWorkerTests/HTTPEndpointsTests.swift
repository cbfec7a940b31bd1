import NIOCore
import NIOEmbedded
import NIOPosix
import Synchronization
import Testing
@testable import PushWorker

/// `/metrics`, `/healthz` and `/readyz` as HTTP clients other than Prometheus and kubelet reach them: HTTP/1.0
/// tools, `HEAD` probes, connections left open, and more connections than a scrape needs.
@Suite(.timeLimit(.minutes(1))) struct HTTPEndpointsTests {
    static let metricsText = "pushworker_events_consumed_total 7\n"

    func withEndpoints(
        idleTimeout: TimeAmount = .seconds(60), requestTimeout: TimeAmount = .seconds(60), maxConnections: Int = 64,
        metrics: @escaping @Sendable () -> [UInt8] = { Array(Self.metricsText.utf8) },
        _ body: (Int) async throws -> Void
    ) async throws {
        let endpoints = HTTPEndpoints(
            metrics: metrics, readiness: { (false, "no partitions assigned") },
            idleTimeout: idleTimeout, requestTimeout: requestTimeout, maxConnections: maxConnections)
        let port = try await endpoints.start(host: "127.0.0.1", port: 0)
        do {
            try await body(port)
        } catch {
            await endpoints.stop()
            throw error
        }
        await endpoints.stop()
    }

    /// A connection to `port` that keeps what the server sends and notes when the server closes it.
    final class RawClient: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        private let received = Mutex<[UInt8]>([])
        private let channel = Mutex<(any Channel)?>(nil)

        static func connect(port: Int) async throws -> RawClient {
            let client = RawClient()
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelInitializer { $0.pipeline.addHandler(client) }
                .connect(host: "127.0.0.1", port: port).get()
            client.channel.withLock { $0 = channel }
            return client
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = unwrapInboundIn(data)
            received.withLock { $0 += buffer.readBytes(length: buffer.readableBytes) ?? [] }
        }

        func send(_ text: String) async throws {
            let channel = channel.withLock { $0 }!
            try await channel.writeAndFlush(channel.allocator.buffer(string: text)).get()
        }

        /// Waits until the server closes the connection and returns everything it sent.
        func untilClosed() async throws -> String {
            try await channel.withLock { $0 }!.closeFuture.get()
            return String(decoding: received.withLock { $0 }, as: UTF8.self)
        }

        func close() async { try? await channel.withLock { $0 }!.close() }
    }

    func responses(in text: String) -> [Substring] {
        text.split(separator: "HTTP/1.", omittingEmptySubsequences: true)
    }

    @Test func anHTTP10RequestIsAnsweredAndTheConnectionClosed() async throws {
        try await withEndpoints { port in
            let client = try await RawClient.connect(port: port)
            try await client.send("GET /metrics HTTP/1.0\r\n\r\n")
            let text = try await client.untilClosed()
            #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n") || text.hasPrefix("HTTP/1.0 200 OK\r\n"), "\(text)")
            #expect(text.hasSuffix("\r\n\r\n" + Self.metricsText), "\(text)")
            #expect(text.lowercased().contains("connection: close"), "\(text)")
            #expect(text.lowercased().contains("content-type: text/plain; version=0.0.4\r\n"), "\(text)")
        }
    }

    @Test func requestsOnOneConnectionAreEachAnsweredUntilOneAsksToClose() async throws {
        try await withEndpoints { port in
            let client = try await RawClient.connect(port: port)
            try await client.send(
                "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
                    + "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let answers = responses(in: try await client.untilClosed())
            #expect(answers.count == 3)
            guard answers.count == 3 else { return }
            #expect(answers[0].hasPrefix("1 200 OK") && answers[0].hasSuffix("\r\n\r\nok\n"))
            #expect(answers[0].lowercased().contains("content-type: text/plain\r\n"))
            #expect(answers[1].hasPrefix("1 503 Service Unavailable") && answers[1].hasSuffix("\r\n\r\nno partitions assigned\n"))
            #expect(answers[2].hasPrefix("1 200 OK") && answers[2].hasSuffix("\r\n\r\n" + Self.metricsText))
            #expect(answers[2].lowercased().contains("connection: close"))
        }
    }

    @Test func aHEADRequestGetsTheHeadersOfItsGETAndNoBody() async throws {
        try await withEndpoints { port in
            let client = try await RawClient.connect(port: port)
            try await client.send(
                "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let answers = responses(in: try await client.untilClosed())
            #expect(answers.count == 2)
            guard answers.count == 2 else { return }
            #expect(answers[0].hasPrefix("1 200 OK"))
            #expect(answers[0].lowercased().contains("content-length: \(Self.metricsText.utf8.count)\r\n"))
            #expect(answers[0].hasSuffix("\r\n\r\n"), "the HEAD answer carries no body: \(answers[0])")
            #expect(answers[1].hasSuffix("\r\n\r\nok\n"))
        }
    }

    @Test func aMethodOtherThanGETOrHEADIsRefusedNamingTheAllowedOnes() async throws {
        try await withEndpoints { port in
            let client = try await RawClient.connect(port: port)
            try await client.send("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
            let text = try await client.untilClosed()
            #expect(text.hasPrefix("HTTP/1.1 405 Method Not Allowed\r\n"), "\(text)")
            #expect(text.lowercased().contains("allow: get, head\r\n"), "\(text)")
        }
    }

    /// A client that sends requests and reads no answers: each answer waits until the ones before it are read (the
    /// channel writable again), so the worker holds one answer per connection, not one per request it was sent.
    @Test func anAnswerWaitsUntilTheClientHasReadTheOnesBefore() throws {
        final class Calls: Sendable { let count = Atomic<Int>(0) }
        /// Next to the socket: any answer written fills the client's buffers, as when it reads nothing.
        final class ClientReadsNothing: ChannelOutboundHandler {
            typealias OutboundIn = ByteBuffer
            func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
                (context.channel as! EmbeddedChannel).isWritable = false
                context.write(data, promise: promise)
            }
        }
        let calls = Calls()
        let channel = EmbeddedChannel()
        try HTTPEndpoints.configureConnection(
            channel, metrics: { calls.count.add(1, ordering: .relaxed); return Array(Self.metricsText.utf8) },
            readiness: { (true, "ready") }, idleTimeout: .seconds(60), requestTimeout: .seconds(60))
        try channel.pipeline.syncOperations.addHandler(ClientReadsNothing(), position: .first)
        channel.isWritable = false
        try channel.writeInbound(ByteBuffer(string: String(repeating: "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", count: 3)))
        #expect(calls.count.load(ordering: .relaxed) == 0)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)
        for answered in 1...3 {
            channel.isWritable = true
            channel.pipeline.fireChannelWritabilityChanged()
            #expect(calls.count.load(ordering: .relaxed) == answered)
            var written = ""
            while let part = try channel.readOutbound(as: ByteBuffer.self) { written += String(buffer: part) }
            #expect(responses(in: written).count == 1 && written.hasSuffix(Self.metricsText), "\(written)")
        }
        #expect(try channel.finish().isClean)
    }

    /// Answers larger than the socket's buffers to requests sent together: each waits for the one before to be
    /// read, and all arrive.
    @Test func largeAnswersToRequestsSentTogetherAllArrive() async throws {
        let large = (0..<(4 << 20)).map { UInt8(ascii: "a") &+ UInt8(truncatingIfNeeded: $0 % 26) }
        try await withEndpoints(metrics: { large }) { port in
            let client = try await RawClient.connect(port: port)
            try await client.send(
                String(repeating: "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", count: 3)
                    + "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let answers = responses(in: try await client.untilClosed())
            #expect(answers.count == 4)
            let end = String(decoding: large.suffix(64), as: UTF8.self)
            #expect(answers.prefix(3).allSatisfy { $0.hasPrefix("1 200 OK") && $0.hasSuffix(end) })
            #expect(answers.prefix(3).map(\.utf8.count) == Array(repeating: answers[0].utf8.count, count: 3))
            #expect(answers.last?.hasSuffix("\r\n\r\nok\n") == true)
        }
    }

    /// A connection that sends nothing is closed once the idle time has passed. (NIO's idle timer reads the real
    /// clock, so this runs on a real socket with a short timeout.)
    @Test func aConnectionLeftIdleIsClosed() async throws {
        try await withEndpoints(idleTimeout: .milliseconds(200)) { port in
            let quiet = try await RawClient.connect(port: port)
            #expect(try await quiet.untilClosed() == "")
        }
    }

    /// A client that trickles its request a header line at a time never lets the idle timer run out; its request
    /// must be whole within the request time, or the connection closes. (The trickle is the fault: a line every
    /// 50 ms for up to 20 s, against a request time of 300 ms.)
    @Test func aRequestTrickledInSlowerThanTheRequestTimeIsCutOff() async throws {
        try await withEndpoints(idleTimeout: .seconds(60), requestTimeout: .milliseconds(300)) { port in
            let slow = try await RawClient.connect(port: port)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await slow.send("GET /metrics HTTP/1.1\r\n")
                    for line in 0..<400 {
                        try await Task.sleep(for: .milliseconds(50))
                        try? await slow.send("X-Line-\(line): x\r\n")
                    }
                    Issue.record("the connection was still open after 20 s of trickling")
                    await slow.close()
                }
                let received = try await slow.untilClosed()
                group.cancelAll()
                #expect(received == "")
            }
        }
    }

    /// The request time counts from a request's first byte: a keep-alive connection quiet between requests for
    /// longer than it is still served (the quiet is the idle timer's).
    @Test func aConnectionQuietBetweenRequestsOutlastsTheRequestTime() async throws {
        try await withEndpoints(idleTimeout: .seconds(60), requestTimeout: .milliseconds(200)) { port in
            let client = try await RawClient.connect(port: port)
            try await client.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            try await Task.sleep(for: .milliseconds(600))  // three request times of quiet: the fault under test
            try await client.send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let answers = responses(in: try await client.untilClosed())
            #expect(answers.count == 2)
            #expect(answers.last?.hasSuffix(Self.metricsText) == true)
        }
    }

    @Test func connectionsBeyondTheLimitAreClosedAndTheOpenOnesStillServed() async throws {
        try await withEndpoints(maxConnections: 2) { port in
            let first = try await RawClient.connect(port: port)
            let second = try await RawClient.connect(port: port)
            // The server has taken both once each has answered a request.
            try await first.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            try await second.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            let third = try await RawClient.connect(port: port)
            try? await third.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await third.untilClosed() == "")
            try await first.send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let answers = responses(in: try await first.untilClosed())
            #expect(answers.count == 2)
            #expect(answers.last?.hasSuffix(Self.metricsText) == true)
            await second.close()
        }
    }
}
