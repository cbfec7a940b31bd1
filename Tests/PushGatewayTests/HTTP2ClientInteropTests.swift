import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import PushCore
import Synchronization
import Testing
@testable import PushGateway

/// The worker's HTTP/2 client against a server written independently of it: swift-nio-http2's `NIOHTTP2Handler` in
/// server mode (its own HPACK with Huffman coding and indexing, flow control, settings, stream state), the bytes
/// shuttled between two embedded channels.
struct HTTP2ClientInteropTests {
    /// Answers each request at END_STREAM: 200, or 400 BadTopic for the topic `bad`; keeps what it received.
    final class Answerer: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTP2Frame
        typealias OutboundOut = HTTP2Frame
        var requests: [UInt32: (headers: HPACKHeaders, body: [UInt8])] = [:]
        var completed: [(headers: HPACKHeaders, body: [UInt8])] = []

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = unwrapInboundIn(data)
            let id = UInt32(Int32(frame.streamID))
            let end: Bool
            switch frame.payload {
            case .headers(let headers):
                requests[id, default: (HPACKHeaders(), [])].headers.add(contentsOf: headers.headers)
                end = headers.endStream
            case .data(let data):
                if case .byteBuffer(let buffer) = data.data {
                    requests[id, default: (HPACKHeaders(), [])].body += buffer.readableBytesView
                    // Frame-level users of NIOHTTP2Handler give the windows back themselves.
                    let increment = buffer.readableBytes
                    if increment > 0 {
                        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
                        if !data.endStream {
                            context.write(wrapOutboundOut(HTTP2Frame(streamID: frame.streamID, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
                        }
                        context.flush()
                    }
                }
                end = data.endStream
            default:
                return
            }
            guard end, let request = requests.removeValue(forKey: id) else { return }
            completed.append(request)
            let bad = request.headers.first(name: "apns-topic") == "bad"
            let headers = HPACKHeaders([(":status", bad ? "400" : "200"), ("apns-id", "00000000-0000-4000-8000-00000000000\(id % 10)")])
            context.write(wrapOutboundOut(HTTP2Frame(streamID: frame.streamID, payload: .headers(.init(headers: headers, endStream: !bad)))), promise: nil)
            if bad {
                let body = ByteBuffer(string: #"{"reason":"BadTopic"}"#)
                context.write(wrapOutboundOut(HTTP2Frame(streamID: frame.streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))), promise: nil)
            }
            context.flush()
        }
    }

    final class Events: Sendable {
        let state = Mutex((statuses: [Int: Int](), reasons: [String](), capacity: 0, lost: 0))
    }

    /// Moves bytes between the two channels until neither has anything to send.
    static func pump(_ client: EmbeddedChannel, _ server: EmbeddedChannel) throws {
        var moved = true
        while moved {
            moved = false
            while let bytes = try client.readOutbound(as: ByteBuffer.self) {
                try server.writeInbound(bytes)
                moved = true
            }
            while let bytes = try server.readOutbound(as: ByteBuffer.self) {
                try client.writeInbound(bytes)
                moved = true
            }
        }
    }

    static func deliveries(_ count: Int, from start: Int, body: Int, topic: (Int) -> String) -> [HTTP2Delivery] {
        HTTP2ClientConnectionTests.deliveries(count, tokenOf: { $0 + start }).enumerated().map { index, delivery in
            var request = delivery.request
            request.topic = topic(start + index)
            request.body = Array(repeating: UInt8(ascii: "x"), count: body)
            return HTTP2Delivery(ticket: delivery.ticket, request: request)
        }
    }

    /// 600 requests through a server that allows 100 streams and windows of 1,000 bytes a stream (a body of 4 KiB
    /// takes several WINDOW_UPDATEs): every one answered once, with its fields as sent, and the 400s' reasons read from their bodies.
    @Test func requestsReachSwiftNIOHTTP2sServerAndItsAnswersAreRead() throws {
        let answerer = Answerer()
        let server = EmbeddedChannel()
        var configuration = NIOHTTP2Handler.ConnectionConfiguration()
        configuration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
            HTTP2Setting(parameter: .initialWindowSize, value: 1000),
            HTTP2Setting(parameter: .headerTableSize, value: 256),
        ]
        try server.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: configuration))
        try server.pipeline.syncOperations.addHandler(answerer)

        let events = Events()
        let settings = HTTP2ClientConnection.Settings(maxConcurrentStreams: 1000, oneStreamUntilSuccess: false, requestTimeout: .seconds(60))
        let connection = HTTP2ClientConnection(settings: settings, authorization: { "token" }) { event in
            events.state.withLock { (state: inout (statuses: [Int: Int], reasons: [String], capacity: Int, lost: Int)) in
                switch event {
                case .answered(let answers):
                    for answer in answers {
                        state.statuses[answer.response.status, default: 0] += 1
                        if let reason = answer.response.reason { state.reasons.append(reason) }
                    }
                case .capacity(let n): state.capacity = n
                case .lost(let lost, _): state.lost += lost.count
                default: break
                }
            }
        }
        let client = EmbeddedChannel(handler: connection)
        try client.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        try server.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 50000)).wait()
        try Self.pump(client, server)
        #expect(connection.serverStreamLimit == 100)

        var sent = 0
        var rounds = 0
        while sent < 600 && rounds < 100 {
            rounds += 1
            let batch = Self.deliveries(min(connection.available, 600 - sent), from: sent, body: sent % 200 == 0 ? 4096 : 40) {
                $0 % 10 == 0 ? "bad" : "com.example.app"
            }
            #expect(connection.submit(batch).isEmpty)
            #expect(connection.openStreams <= 100)
            sent += batch.count
            try Self.pump(client, server)
        }
        let state = events.state.withLock { $0 }
        #expect(state.statuses == [200: 540, 400: 60] && state.lost == 0)
        #expect(state.reasons.count == 60 && state.reasons.allSatisfy { $0 == "BadTopic" })
        #expect(answerer.completed.count == 600)
        let first = try #require(answerer.completed.first)
        #expect(first.headers.first(name: ":method") == "POST" && first.headers.first(name: ":scheme") == "https")
        #expect(first.headers.first(name: ":path")?.hasPrefix("/3/device/") == true)
        #expect(first.headers.first(name: "authorization") == "bearer token")
        #expect(answerer.completed.map(\.body.count).max() == 4096)
        let paths = Set(answerer.completed.compactMap { $0.headers.first(name: ":path") })
        #expect(paths.count == 600)
    }
}
