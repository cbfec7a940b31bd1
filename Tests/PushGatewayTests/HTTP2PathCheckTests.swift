import NIOCore
import NIOEmbedded
import NIOHPACK
import PushCore
import Synchronization
import Testing
@testable import PushGateway

/// A connection idle for long is checked with PING before it takes new streams, and closed if the PING goes
/// unanswered (the connection handler alone on an embedded channel, its clock advanced by hand).
struct HTTP2PathCheckTests {
    /// What the connection reported.
    final class Seen: Sendable {
        private let state = Mutex((capacity: 0, closed: false))
        var capacity: Int { state.withLock { $0.capacity } }
        var closed: Bool { state.withLock { $0.closed } }
        func sawCapacity() { state.withLock { $0.capacity += 1 } }
        func sawClose() { state.withLock { $0.closed = true } }
    }

    /// A connection past the server's preface: its SETTINGS and, unless `acknowledged` is false, the
    /// acknowledgement of this side's.
    static func connection(_ seen: Seen, authority: String? = nil, acknowledged: Bool = true) throws -> (EmbeddedChannel, HTTP2ClientConnection) {
        var settings = HTTP2ClientConnection.Settings(maxConcurrentStreams: 10, oneStreamUntilSuccess: false, requestTimeout: .seconds(60))
        settings.authority = authority
        settings.reuseCheckAfter = .seconds(30)
        settings.pingInterval = .seconds(3600)
        let handler = HTTP2ClientConnection(settings: settings, authorization: { nil }) { event in
            switch event {
            case .capacity: seen.sawCapacity()
            case .closed: seen.sawClose()
            default: break
            }
        }
        let channel = EmbeddedChannel(handler: handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        var serverPreface = ByteBuffer()
        HTTP2Wire.writeSettings([(0x3, 10)], to: &serverPreface)
        if acknowledged { HTTP2Wire.writeFrameHeader(length: 0, type: HTTP2Wire.settings, flags: HTTP2Wire.ack, stream: 0, to: &serverPreface) }
        try channel.writeInbound(serverPreface)
        _ = try outbound(channel)  // the preface and the SETTINGS ACK
        return (channel, handler)
    }

    /// A frame the connection wrote.
    struct Frame {
        var type: UInt8
        var stream: UInt32 = 0
        var flags: UInt8
        var payload: ByteBuffer
    }

    /// The frames written since the last call, without the connection's housekeeping (SETTINGS, WINDOW_UPDATE).
    static func outbound(_ channel: EmbeddedChannel) throws -> [Frame] {
        var bytes = ByteBuffer()
        while var buffer = try channel.readOutbound(as: ByteBuffer.self) { bytes.writeBuffer(&buffer) }
        if bytes.readableBytesView.starts(with: HTTP2Wire.preface) { bytes.moveReaderIndex(forwardBy: HTTP2Wire.preface.count) }
        var frames: [Frame] = []
        while let header = HTTP2Wire.FrameHeader(peekingAt: bytes) {
            bytes.moveReaderIndex(forwardBy: 9)
            let payload = bytes.readSlice(length: header.length)!
            if header.type != HTTP2Wire.settings && header.type != HTTP2Wire.windowUpdate {
                frames.append(Frame(type: header.type, stream: header.stream, flags: header.flags, payload: payload))
            }
        }
        #expect(bytes.readableBytes == 0)
        return frames
    }

    static func isPing(_ frame: Frame) -> Bool { frame.type == HTTP2Wire.ping && frame.flags & HTTP2Wire.ack == 0 }

    @Test func aRecentlyActiveConnectionTakesStreamsAtOnce() throws {
        let seen = Seen()
        let (channel, handler) = try Self.connection(seen)
        channel.embeddedEventLoop.advanceTime(by: .seconds(29))
        let rest = handler.submit(HTTP2ClientConnectionTests.deliveries(3))
        #expect(rest.isEmpty)
        let frames = try Self.outbound(channel)
        #expect(frames.count == 6 && !frames.contains(where: Self.isPing))  // HEADERS and DATA for each
    }

    @Test func requestsNameTheAuthorityAfterThePath() throws {
        let (channel, handler) = try Self.connection(Seen(), authority: "api.push.apple.com:2197")
        #expect(handler.submit(HTTP2ClientConnectionTests.deliveries(1)).isEmpty)
        guard var block = try Self.outbound(channel).first(where: { $0.type == HTTP2Wire.headers })?.payload else {
            Issue.record("no HEADERS frame")
            return
        }
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        let headers = try decoder.decodeHeaders(from: &block)
        let names = headers.map(\.name)
        #expect(Array(names.prefix(5)) == [":method", ":scheme", ":path", ":authority", "apns-topic"])
        #expect(headers.first(name: ":authority") == "api.push.apple.com:2197")
    }

    @Test func theAuthorityOmitsPort443AndBracketsAnIPv6Literal() {
        func authority(_ host: String, _ port: Int) -> String {
            HTTP2Endpoint(host: host, port: port, authentication: .certificate).authority
        }
        #expect(authority("api.push.apple.com", 443) == "api.push.apple.com")
        #expect(authority("api.sandbox.push.apple.com", 2197) == "api.sandbox.push.apple.com:2197")
        #expect(authority("::1", 8443) == "[::1]:8443")
        #expect(authority("127.0.0.1", 8443) == "127.0.0.1:8443")
    }

    @Test func aLongIdleConnectionIsCheckedWithPingBeforeItTakesStreams() throws {
        let seen = Seen()
        let (channel, handler) = try Self.connection(seen)
        channel.embeddedEventLoop.advanceTime(by: .seconds(31))
        let capacityBefore = seen.capacity
        // Nothing opens: the requests go back to the pool (for other connections) and a PING goes out alone.
        #expect(handler.submit(HTTP2ClientConnectionTests.deliveries(3)).count == 3)
        #expect(handler.available == 0)
        let frames = try Self.outbound(channel)
        #expect(frames.count == 1 && Self.isPing(frames[0]))
        // The answer re-opens the connection and says so.
        var pingAck = ByteBuffer()
        HTTP2Wire.writeFrameHeader(length: 8, type: HTTP2Wire.ping, flags: HTTP2Wire.ack, stream: 0, to: &pingAck)
        pingAck.writeInteger(UInt64(2))
        try channel.writeInbound(pingAck)
        #expect(handler.available == 10)
        #expect(seen.capacity == capacityBefore + 1)
        #expect(handler.submit(HTTP2ClientConnectionTests.deliveries(3)).isEmpty)
        #expect(try Self.outbound(channel).count == 6)
        // Its timeout has been cancelled: the connection stays.
        channel.embeddedEventLoop.advanceTime(by: .seconds(20))
        #expect(channel.isActive && !seen.closed)
    }

    @Test func aConnectionWhosePingGoesUnansweredIsClosedWithNothingOnIt() throws {
        let seen = Seen()
        let (channel, handler) = try Self.connection(seen)
        channel.embeddedEventLoop.advanceTime(by: .seconds(31))
        #expect(handler.submit(HTTP2ClientConnectionTests.deliveries(3)).count == 3)
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive)
        #expect(seen.closed)
    }
}
