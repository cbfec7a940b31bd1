import NIOCore
import NIOEmbedded
import PushCore
import Testing
@testable import PushGateway

/// SPEC section 13 on the worker's connection handler: what a server can make it keep or wait for is bounded (the
/// handler alone on an embedded channel, its clock advanced by hand).
struct HTTP2ClientLimitsTests {
    typealias PathCheck = HTTP2PathCheckTests

    /// A server that never acknowledges this side's SETTINGS: the connection ends with GOAWAY SETTINGS_TIMEOUT after
    /// 10 s. One that acknowledges keeps it.
    @Test func aServerThatNeverAcknowledgesTheSettingsIsLeftAfter10Seconds() throws {
        let seen = PathCheck.Seen()
        let (channel, _) = try PathCheck.connection(seen, acknowledged: false)
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive && seen.closed)
        let goAway = try PathCheck.outbound(channel).last
        #expect(goAway?.type == HTTP2Wire.goAway)
        #expect(goAway.map { $0.payload.getInteger(at: $0.payload.readerIndex + 4, as: UInt32.self) } == HTTP2Wire.ErrorCode.settingsTimeout.rawValue)

        let (kept, _) = try PathCheck.connection(PathCheck.Seen())
        kept.embeddedEventLoop.advanceTime(by: .seconds(25))
        #expect(kept.isActive)
    }

    /// 4 MB of frames of an unknown type, in reads that never end on a frame boundary: the input buffer holds at
    /// most one frame and one read, not everything since the last read that happened to end on a boundary.
    @Test func inputThatNeverEndsOnAFrameBoundaryIsNotKept() throws {
        let (channel, handler) = try PathCheck.connection(PathCheck.Seen())
        var stream = ByteBuffer()
        for _ in 0..<256 {
            HTTP2Wire.writeFrameHeader(length: 16_384, type: 0xFA, flags: 0, stream: 0, to: &stream)
            stream.writeRepeatingByte(0, count: 16_384)
        }
        var largest = 0
        while stream.readableBytes > 0 {
            let read = stream.readSlice(length: min(4_000, stream.readableBytes))!
            try channel.writeInbound(read)
            largest = max(largest, handler.inboundCapacity)
        }
        #expect(channel.isActive)
        #expect(largest <= 64 * 1024, "largest input buffer: \(largest) bytes")
    }
}
