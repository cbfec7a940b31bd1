import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import PushCore
import PushTestSupport
import Testing
@testable import PushSimulator

/// What an HTTP/2 test client saw on the connection itself: SETTINGS_MAX_CONCURRENT_STREAMS values and GOAWAY.
final class ConnectionFrames: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame
    private let state = NIOLockedValueBox<(limits: [Int], goaway: HTTP2StreamID?)>(([], nil))

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings(let settings)):
            for s in settings where s.parameter == .maxConcurrentStreams { state.withLockedValue { $0.limits.append(s.value) } }
        case .goAway(let last, _, _):
            state.withLockedValue { $0.goaway = last }
        default:
            break
        }
    }

    var limits: [Int] { state.withLockedValue { $0.limits } }
    var goaway: HTTP2StreamID? { state.withLockedValue { $0.goaway } }
}

/// One response as read off a stream; nil status when the stream ended without one.
struct H2Response: Sendable {
    var status: Int?
    var headers: [String: String] = [:]
    var body: [UInt8] = []
    var reason: String? { APNsResponse(status: status ?? 0, body: body).reason }
}

final class ResponseCollector: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    private var response = H2Response()
    private let promise: EventLoopPromise<H2Response>

    init(promise: EventLoopPromise<H2Response>) { self.promise = promise }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let h):
            for field in h.headers { response.headers[field.name] = field.value }
            response.status = response.headers[":status"].flatMap { Int($0) }
            if h.endStream { promise.succeed(response) }
        case .data(let d):
            if case .byteBuffer(let b) = d.data { response.body += b.readableBytesView }
            if d.endStream { promise.succeed(response) }
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.succeed(H2Response(status: nil))  // no-op when already answered
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        promise.succeed(H2Response(status: nil))  // a stream torn down before it was active
    }
}

/// An HTTP/2 client written on swift-nio-http2's client side, independently of the simulator's server code.
struct H2TestClient: Sendable {
    let channel: any Channel
    let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    let frames: ConnectionFrames

    static func connect(port: Int, certificate: String?) async throws -> H2TestClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(TestPKI.path("ca.pem"))
        tls.applicationProtocols = ["h2"]
        if let certificate {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(TestPKI.path("\(certificate).pem")).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: TestPKI.path("\(certificate)-key.pem"), format: .pem))
        }
        let context = try NIOSSLContext(configuration: tls)
        let frames = ConnectionFrames()
        let (channel, multiplexer) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    let multiplexer = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .client, connectionConfiguration: .init(), streamConfiguration: .init()
                    ) { $0.eventLoop.makeSucceededVoidFuture() }
                    try channel.pipeline.syncOperations.addHandler(frames)
                    return (channel, multiplexer)
                }
            }
        return H2TestClient(channel: channel, multiplexer: multiplexer, frames: frames)
    }

    func send(_ headers: [(String, String)], body: String = #"{"aps":{"alert":"hi"}}"#) async throws -> H2Response {
        let promise = channel.eventLoop.makePromise(of: H2Response.self)
        let stream: any Channel
        do {
            stream = try await multiplexer.createStreamChannel { stream in
                stream.eventLoop.makeCompletedFuture { try stream.pipeline.syncOperations.addHandler(ResponseCollector(promise: promise)) }
            }.get()
        } catch {
            promise.fail(error)  // the connection is gone: no stream, no answer
            throw error
        }
        var fields = HPACKHeaders([(":method", "POST"), (":scheme", "https"), (":authority", "localhost")])
        fields.add(contentsOf: headers)
        let bodyBytes = ByteBuffer(string: body)
        stream.write(HTTP2Frame.FramePayload.headers(.init(headers: fields, endStream: body.isEmpty)), promise: nil)
        if !body.isEmpty {
            stream.write(HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(bodyBytes), endStream: true)), promise: nil)
        }
        stream.flush()
        return try await promise.futureResult.get()
    }

    func close() async { try? await channel.close() }
}

private let token = "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"

private func alert(_ extra: [(String, String)] = []) -> [(String, String)] {
    [(":path", "/3/device/\(token)"), ("apns-topic", "com.example.app"), ("apns-push-type", "alert")] + extra
}

private func apiConfiguration(_ change: (inout SimulatorConfiguration) -> Void = { _ in }) -> SimulatorConfiguration {
    var c = TestPKI.simulatorConfiguration()
    c.apiPort = 0
    change(&c)
    return c
}

/// A token made with swift-crypto directly (not with the worker's signer).
private func providerToken(issuedAt: Int64, key: String = "AuthKey_KEY1234567.p8") throws -> String {
    let signing = try P256.Signing.PrivateKey(pemRepresentation: String(contentsOfFile: TestPKI.path(key), encoding: .utf8))
    let input = ProviderTokenFormat.signingInput(teamID: "TEAM123456", keyID: "KEY1234567", issuedAt: issuedAt)
    let signature = try signing.signature(for: Array(input.utf8))
    return ProviderTokenFormat.token(signingInput: input, signature: Array(signature.rawRepresentation))
}

@Suite struct APISimulatorTests {
    @Test func aCertificateConnectionIsAcceptedAndRecorded() async throws {
        try await withSimulator(apiConfiguration { $0.maxConcurrentStreams = 9 }) { simulator, addresses in
            let client = try await H2TestClient.connect(port: try #require(addresses.apiPort), certificate: "app")
            let ok = try await client.send(alert([("apns-id", "123e4567-e89b-12d3-a456-426614174000"), ("apns-priority", "5")]))
            #expect(ok.status == 200)
            #expect(ok.headers["apns-id"] == "123e4567-e89b-12d3-a456-426614174000")
            #expect(ok.body.isEmpty)
            let other = try await client.send(alert([("apns-topic", "com.example.other")]).filter { $0.0 != "apns-topic" || $0.1 != "com.example.app" })
            #expect(other.status == 400 && other.reason == "TopicDisallowed")
            #expect(client.frames.limits.first == 9)
            await client.close()
            let records = simulator.recordedRequests
            #expect(records.count == 1)
            #expect(records.first?.priority == 5 && records.first?.topic == "com.example.app")
            #expect(simulator.summary.apiAnswers == ["200": 1, "400 TopicDisallowed": 1])
        }
    }

    /// A body larger than a stream's initial flow-control window (64 KiB) arrives only if the simulator gives the
    /// window back as it reads; it is then answered 413, and a normal request after it still succeeds.
    @Test(.timeLimit(.minutes(1))) func aBodyLargerThanTheStreamWindowIsReadAndAnswered413() async throws {
        try await withSimulator(apiConfiguration()) { simulator, addresses in
            let client = try await H2TestClient.connect(port: try #require(addresses.apiPort), certificate: "app")
            let large = #"{"aps":{"alert":""# + String(repeating: "x", count: 200_000) + #""}}"#
            let tooLarge = try await client.send(alert(), body: large)
            #expect(tooLarge.status == 413 && tooLarge.reason == "PayloadTooLarge")
            let ok = try await client.send(alert())
            #expect(ok.status == 200)
            await client.close()
            #expect(simulator.summary.apiAnswers == ["200": 1, "413 PayloadTooLarge": 1])
        }
    }

    @Test func withoutACertificateAndWithoutTokenKeyTheConnectionIsRefused() async throws {
        try await withSimulator(apiConfiguration()) { simulator, addresses in
            let client = try? await H2TestClient.connect(port: try #require(addresses.apiPort), certificate: nil)
            if let client {
                let answer = try? await client.send(alert())
                #expect(answer?.status == nil)
                await client.close()
            }
            #expect(simulator.summary.apiConnections == 0)
        }
    }

    @Test func aTokenConnectionStartsWithOneStreamAndIsRaisedAfterASuccess() async throws {
        let configuration = apiConfiguration {
            $0.tokenKeyPath = TestPKI.path("token-key.pub.pem")
            $0.teamID = "TEAM123456"
            $0.keyID = "KEY1234567"
            $0.maxConcurrentStreams = 40
        }
        try await withSimulator(configuration) { simulator, addresses in
            let client = try await H2TestClient.connect(port: try #require(addresses.apiPort), certificate: nil)
            let now = Int64(Date().timeIntervalSince1970)
            let auth = ("authorization", "bearer \(try providerToken(issuedAt: now))")
            let missing = try await client.send(alert())
            #expect(missing.status == 403 && missing.reason == "MissingProviderToken")
            #expect(client.frames.limits == [1])
            let ok = try await client.send(alert([auth]))
            #expect(ok.status == 200)
            let late = try await client.send(alert([("authorization", "bearer \(try providerToken(issuedAt: now - 3601))")]))
            #expect(late.status == 403 && late.reason == "ExpiredProviderToken")
            let foreign = try await client.send(alert([("authorization", "bearer \(try providerToken(issuedAt: now, key: "other-token-key.p8"))")]))
            #expect(foreign.status == 403 && foreign.reason == "InvalidProviderToken")
            // answers keep flowing, then the raised limit is seen
            _ = try await client.send(alert([auth]))
            #expect(client.frames.limits == [1, 40])
            await client.close()
            #expect(simulator.summary.apiAnswers["200"] == 2)
        }
    }

    @Test func delayedAnswersComeNoSoonerThanTheDelayAndAllArrive() async throws {
        let configuration = apiConfiguration { $0.responseDelayMilliseconds = 150 }
        try await withSimulator(configuration) { simulator, addresses in
            let client = try await H2TestClient.connect(port: try #require(addresses.apiPort), certificate: "app")
            let clock = ContinuousClock()
            let answers = try await withThrowingTaskGroup(of: (H2Response, Duration).self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        let start = clock.now
                        let answer = try await client.send(alert())
                        return (answer, clock.now - start)
                    }
                }
                var all: [(H2Response, Duration)] = []
                for try await answer in group { all.append(answer) }
                return all
            }
            #expect(answers.map(\.0.status) == Array(repeating: 200, count: 8))
            #expect(answers.allSatisfy { $0.1 >= .milliseconds(150) })
            await client.close()
            #expect(simulator.recordedRequests.count == 8)
        }
    }

    @Test func goawayNamesTheLastAnsweredStreamAndLaterStreamsGoUnanswered() async throws {
        let configuration = apiConfiguration {
            $0.goawayEvery = 3
            $0.responseDelayMilliseconds = 30
        }
        try await withSimulator(configuration) { simulator, addresses in
            let client = try await H2TestClient.connect(port: try #require(addresses.apiPort), certificate: "app")
            let answers = try await withThrowingTaskGroup(of: H2Response.self) { group in
                for _ in 0..<6 { group.addTask { try await client.send(alert()) } }
                var all: [H2Response] = []
                for try await answer in group { all.append(answer) }
                return all
            }
            #expect(answers.filter { $0.status == 200 }.count == 3)
            #expect(answers.filter { $0.status == nil }.count == 3)
            // client streams are odd: the third is stream 5
            #expect(client.frames.goaway == HTTP2StreamID(5))
            await client.close()
            #expect(simulator.summary.apiGoaways == 1)
            #expect(simulator.recordedRequests.count == 3)
        }
    }
}
