import NIOCore
import NIOEmbedded
import PushTestSupport
import Testing
@testable import PushSimulator

/// Counts the reads that reach the socket.
final class ReadCounter: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    var reads = 0

    func read(context: ChannelHandlerContext) {
        reads += 1
        context.read()
    }
}

@Suite struct ReadPacerTests {
    @Test func readsOnlyAfterTheDelay() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let counter = ReadCounter()
        try channel.pipeline.syncOperations.addHandler(counter)
        try channel.pipeline.syncOperations.addHandler(ReadPacer(delay: .milliseconds(20)))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(counter.reads == 1)  // the first read, on activation
        channel.pipeline.fireChannelReadComplete()
        loop.advanceTime(by: .milliseconds(19))
        #expect(counter.reads == 1)
        loop.advanceTime(by: .milliseconds(1))
        #expect(counter.reads == 2)
        channel.pipeline.fireChannelReadComplete()
        channel.pipeline.fireChannelReadComplete()
        loop.advanceTime(by: .milliseconds(20))
        #expect(counter.reads == 4)
        _ = try channel.finish()
    }
}
