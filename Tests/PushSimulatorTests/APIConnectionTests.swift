import Logging
import NIOCore
import NIOEmbedded
import NIOHPACK
import Testing
@testable import PushSimulator

/// The API's connection handler (as behind TLS) on an EmbeddedChannel, with a client that sends requests and leaves
/// the answers unread.
@Suite struct APIConnectionBackPressureTests {
    @Test func framesWaitWhileTheClientLeavesTheAnswersUnread() throws {
        let configuration = SimulatorConfiguration(certificatePath: "", privateKeyPath: "", caPath: "")
        let context = APIServerContext(
            check: APIRequestCheck(verifier: nil, invalidTokens: [], unregistered: [:]), configuration: configuration,
            state: SimulatorState(configuration: configuration), recorder: try Recorder(path: nil, keepInMemory: false),
            logger: Logger(label: "test"))
        let channel = EmbeddedChannel(handler: APIConnection(number: 1, authentication: .certificate(app: "t"), context: context))
        func written() throws -> [ServerFrame] {
            var frames: [ServerFrame] = []
            while let output = try channel.readOutbound(as: ByteBuffer.self) { frames += ServerFrame.all(in: output) }
            return frames
        }
        #expect(try written().first?.type == 0x4, "the server's preface")
        var client = ClientFrames.opened()
        for stream: UInt32 in [1, 3, 5] {
            client.headers(stream)
            client.data(stream)
        }
        channel.isWritable = false
        try channel.writeInbound(client.bytes)
        #expect(try written().isEmpty, "nothing read, nothing answered while the answers before are unread")
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        let frames = try written()
        #expect(frames.filter { $0.type == 0x1 }.map(\.stream) == [1, 3, 5], "\(frames.map { ($0.type, $0.stream) })")
        _ = try channel.finish(acceptAlreadyClosed: true)
    }
}

/// SPEC section 13 on the API's connection handler: what a client can make it keep or wait for is bounded.
@Suite struct APIConnectionLimitsTests {
    static func connection() throws -> (EmbeddedChannel, APIConnection, SimulatorState) {
        let configuration = SimulatorConfiguration(certificatePath: "", privateKeyPath: "", caPath: "")
        let state = SimulatorState(configuration: configuration)
        let context = APIServerContext(
            check: APIRequestCheck(verifier: nil, invalidTokens: [], unregistered: [:]), configuration: configuration,
            state: state, recorder: try Recorder(path: nil, keepInMemory: false), logger: Logger(label: "test"))
        let handler = APIConnection(number: 1, authentication: .certificate(app: "t"), context: context)
        let channel = EmbeddedChannel(handler: handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 50000)).wait()
        _ = try channel.readOutbound(as: ByteBuffer.self)  // the server's preface
        return (channel, handler, state)
    }

    /// 4 MB of frames of an unknown type, in reads that never end on a frame boundary: the input buffer holds at
    /// most one frame and one read.
    @Test func inputThatNeverEndsOnAFrameBoundaryIsNotKept() throws {
        let (channel, handler, _) = try Self.connection()
        var stream = ClientFrames.opened().bytes
        for _ in 0..<256 {
            stream.writeBytes([0x00, 0x40, 0x00, 0xFA, 0, 0, 0, 0, 0])
            stream.writeRepeatingByte(0, count: 16_384)
        }
        var largest = 0
        while stream.readableBytes > 0 {
            try channel.writeInbound(stream.readSlice(length: min(4_000, stream.readableBytes))!)
            largest = max(largest, handler.inboundCapacity)
        }
        #expect(channel.isActive)
        #expect(largest <= 64 * 1024, "largest input buffer: \(largest) bytes")
    }

    /// A client that never acknowledges the server's SETTINGS: GOAWAY SETTINGS_TIMEOUT after 10 s, counted in the
    /// summary. One that does keeps its connection.
    @Test func aClientThatNeverAcknowledgesTheSettingsIsLeftAfter10Seconds() throws {
        let (channel, _, state) = try Self.connection()
        try channel.writeInbound(ClientFrames.opened(acknowledged: false).bytes)
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive)
        var written: [ServerFrame] = []
        while let output = try channel.readOutbound(as: ByteBuffer.self) { written += ServerFrame.all(in: output) }
        #expect(written.last?.type == 0x7 && written.last?.words.last == ErrorCode.settingsTimeout.rawValue)
        #expect(state.summary.apiConnectionErrors == ["SETTINGS_TIMEOUT": 1])

        let (kept, _, _) = try Self.connection()
        try kept.writeInbound(ClientFrames.opened().bytes)
        kept.embeddedEventLoop.advanceTime(by: .seconds(25))
        #expect(kept.isActive)
    }
}
