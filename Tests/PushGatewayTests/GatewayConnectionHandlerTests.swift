import NIOCore
import NIOEmbedded
import NIOSSL
import NIOTLS
import PushCore
import Synchronization
import Testing
@testable import PushGateway

/// A clock the handler tests move by hand.
final class ManualClock: Sendable {
    private let instant = Mutex(ContinuousClock.now)
    var now: ContinuousClock.Instant { instant.withLock { $0 } }
    func advance(by duration: Duration) { instant.withLock { $0 = $0.advanced(by: duration) } }
}

/// Stands in for the connection pool: hands out a queue and records what the handler reports.
final class RecordingOwner: GatewayConnectionOwner {
    typealias Settlement = ConnectionStateMachine<ContinuousClock.Instant>.Settlement

    struct State {
        var queue: [Delivery] = []
        var takes = 0
        var written = 0
        var outcomes: [DeliveryOutcome] = []
        var answers: [(ErrorResponse, Settlement)] = []
        var ends: [(ConnectionEnd, Settlement)] = []
        var ready: NIOLoopBound<GatewayConnectionHandler>?
        var windowAccepted: [(count: Int, held: Int)] = []
    }

    let configuration: DeliveryConfiguration
    let state = Mutex(State())

    init(configuration: DeliveryConfiguration = DeliveryConfiguration()) {
        self.configuration = configuration
    }

    /// Reads the state (a copy, outside the lock).
    func read<T>(_ body: (State) -> T) -> T { body(state.withLock { $0 }) }

    func add(_ deliveries: [Delivery]) { state.withLock { $0.queue += deliveries } }

    func connectionReady(slot: Int, handler: NIOLoopBound<GatewayConnectionHandler>) {
        state.withLock { $0.ready = handler }
    }

    func take(max: Int, slot: Int, held: Int) -> [Delivery] {
        state.withLock { s in
            s.takes += 1
            let batch = Array(s.queue.prefix(max))
            s.queue.removeFirst(batch.count)
            return batch
        }
    }

    func wrote(_ count: Int) { state.withLock { $0.written += count } }
    func report(_ outcomes: [DeliveryOutcome]) { state.withLock { $0.outcomes += outcomes } }

    func errorResponse(_ response: ErrorResponse, settlement: Settlement, acceptedOnConnection accepted: Int) {
        state.withLock { $0.answers.append((response, settlement)) }
    }

    func windowBlamed(acceptedOnConnection accepted: Int) -> Bool { false }
    func windowAccepted(_ count: Int, held: Int, slot: Int) { state.withLock { $0.windowAccepted.append((count, held)) } }
    let bisectsSuspects = false
    func stillHealthy(at now: ContinuousClock.Instant) {}

    func connectionEnded(slot: Int, reason: ConnectionEnd, settlement: Settlement, accepted: Int) {
        state.withLock { $0.ends.append((reason, settlement)) }
    }
}

/// A delivery in the enhanced format, whose identifier and length are easy to read back.
func enhanced(_ ticket: UInt64, expiration: UInt32 = 0) -> Delivery {
    Delivery(
        ticket: ticket,
        notification: PushNotification(
            token: try! DeviceToken(bytes: Array(repeating: UInt8(ticket & 0xFF), count: 32)),
            payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), identifier: 0, expiration: expiration,
            priority: .immediate),
        format: .enhanced)
}

/// The identifiers of the enhanced-format frames written to `channel`, in order.
func writtenIdentifiers(_ channel: EmbeddedChannel) throws -> [UInt32] {
    var identifiers: [UInt32] = []
    while var buffer = try channel.readOutbound(as: ByteBuffer.self) {
        while buffer.readableBytes > 0 {
            #expect(buffer.readInteger(as: UInt8.self) == 1)
            identifiers.append(buffer.readInteger(as: UInt32.self)!)
            buffer.moveReaderIndex(forwardBy: 4)
            let tokenLength = Int(buffer.readInteger(as: UInt16.self)!)
            buffer.moveReaderIndex(forwardBy: tokenLength)
            let payloadLength = Int(buffer.readInteger(as: UInt16.self)!)
            buffer.moveReaderIndex(forwardBy: payloadLength)
        }
    }
    return identifiers
}

/// A handler on an embedded channel, connected, with its owner and clock.
struct Connection {
    let channel = EmbeddedChannel()
    let clock = ManualClock()
    let owner: RecordingOwner
    let handler: GatewayConnectionHandler

    /// `nearer`: a handler between it and the socket (what TLS is in the product).
    init(
        configuration: DeliveryConfiguration = DeliveryConfiguration(), queued: [Delivery] = [],
        nearer: (any ChannelHandler)? = nil
    ) throws {
        owner = RecordingOwner(configuration: configuration)
        owner.add(queued)
        let clock = self.clock
        handler = GatewayConnectionHandler(owner: owner, slot: 0, now: { clock.now })
        if let nearer { try channel.pipeline.syncOperations.addHandler(nearer) }
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 2195)).wait()
    }

    func handshake() {
        channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
    }

    var ends: [(ConnectionEnd, RecordingOwner.Settlement)] { owner.read { $0.ends } }
    var outcomes: [DeliveryOutcome] { owner.read { $0.outcomes } }
}

@Suite struct GatewayConnectionHandlerTests {
    @Test func writesNothingBeforeTheHandshakeThenWhatItTakesWithIncreasingIdentifiers() throws {
        let c = try Connection(queued: (1...3).map { enhanced($0) })
        #expect(try writtenIdentifiers(c.channel).isEmpty)
        #expect(c.owner.read { $0.takes } == 0)
        c.handshake()
        #expect(try writtenIdentifiers(c.channel) == [1, 2, 3])
        #expect(c.owner.read { $0.written } == 3)
        #expect(c.owner.read { $0.ready } != nil)
        // Woken with more work, it goes on numbering.
        c.owner.add([enhanced(4)])
        c.handler.pump()
        #expect(try writtenIdentifiers(c.channel) == [4])
    }

    @Test func writesAtMostAFewBatchesPerTurnOfTheLoop() throws {
        let total = GatewayConnectionHandler.batchSize * GatewayConnectionHandler.batchesPerTurn + 10
        let c = try Connection(queued: (1...UInt64(total)).map { enhanced($0) })
        c.handshake()
        #expect(try writtenIdentifiers(c.channel).count == total - 10)
        c.channel.embeddedEventLoop.run()
        #expect(try writtenIdentifiers(c.channel) == (UInt32(total - 9)...UInt32(total)).map { $0 })
    }

    @Test func waitsWhileTheChannelIsNotWritable() throws {
        let c = try Connection(queued: (1...2).map { enhanced($0) })
        c.channel.isWritable = false
        c.handshake()
        #expect(try writtenIdentifiers(c.channel).isEmpty)
        c.channel.isWritable = true
        c.channel.pipeline.fireChannelWritabilityChanged()
        #expect(try writtenIdentifiers(c.channel) == [1, 2])
    }

    @Test func anErrorResponseSettlesWhatIsInFlightAndClosesTheConnection() throws {
        let c = try Connection(queued: (1...4).map { enhanced($0) })
        c.handshake()
        _ = try writtenIdentifiers(c.channel)
        try c.channel.writeInbound(ErrorResponse(status: .invalidToken, identifier: 2))
        let answers = c.owner.read { $0.answers }
        #expect(answers.count == 1)
        let settlement = answers[0].1
        #expect(settlement.outcomes.map(\.ticket) == [1, 2])
        #expect(settlement.outcomes[0].result == .accepted)
        #expect(settlement.outcomes[1].result == .failed(.invalidToken, status: .invalidToken, detail: "the gateway answered invalid_token(8)"))
        #expect(settlement.resend.map(\.ticket) == [3, 4])
        #expect(!c.channel.isActive)
        #expect(c.ends.count == 1)
        #expect(c.ends[0].0 == .errorResponse(.invalidToken))
        #expect(c.ends[0].1.outcomes.isEmpty && c.ends[0].1.resend.isEmpty)  // settled once, by the answer
    }

    @Test func theAcceptanceWindowAcceptsOnTheTurnAfterItsTick() throws {
        var configuration = DeliveryConfiguration()
        configuration.acceptanceWindow = .seconds(1)
        let c = try Connection(configuration: configuration, queued: (1...3).map { enhanced($0) })
        c.handshake()
        c.clock.advance(by: .milliseconds(900))
        c.channel.embeddedEventLoop.advanceTime(by: .milliseconds(900))
        #expect(c.outcomes.isEmpty)
        c.clock.advance(by: .milliseconds(100))
        c.channel.embeddedEventLoop.advanceTime(by: .milliseconds(100))
        c.channel.embeddedEventLoop.run()
        #expect(c.outcomes.map(\.ticket) == [1, 2, 3])
        #expect(c.outcomes.allSatisfy { $0.result == .accepted && $0.attempts == 1 })
        #expect(c.owner.read { $0.windowAccepted.map(\.count) } == [3])
        #expect(c.channel.isActive)
    }

    @Test func aCloseWithNoAnswerResendsEverythingCountingTheOldest() throws {
        let c = try Connection(queued: (1...3).map { enhanced($0) })
        c.handshake()
        try c.channel.close().wait()
        #expect(c.ends.count == 1)
        #expect(c.ends[0].0 == .dropped(carriedNotifications: true))
        #expect(c.ends[0].1.resend.map(\.ticket) == [1, 2, 3])
        #expect(c.ends[0].1.resend.map(\.transientFailures) == [1, 0, 0])
    }

    /// TLS 1.3 ends the client's handshake before the gateway has checked its certificate: a TLS error on the
    /// first read, with nothing accepted yet, is the refusal; any other error is a dropped connection.
    @Test(arguments: [true, false]) func aTLSErrorBeforeTheFirstAcceptanceIsARefusal(tlsError: Bool) throws {
        let c = try Connection(queued: [])
        c.handshake()
        let error: any Error = tlsError ? BoringSSLError.sslError([]) : ChannelError.ioOnClosedChannel
        c.channel.pipeline.fireErrorCaught(error)
        c.channel.embeddedEventLoop.run()
        #expect(c.ends.count == 1)
        if case .handshakeRefused = c.ends[0].0 {
            #expect(tlsError)
        } else {
            #expect(!tlsError, "\(c.ends[0].0)")
        }
    }

    @Test func stoppingHandsBackWhatIsInFlightUncounted() throws {
        let c = try Connection(queued: (1...3).map { enhanced($0) })
        c.handshake()
        c.handler.stop()
        c.channel.embeddedEventLoop.run()
        #expect(c.ends.count == 1)
        #expect(c.ends[0].0 == .stopped)
        #expect(c.ends[0].1.resend.map(\.ticket) == [1, 2, 3])
        #expect(c.ends[0].1.resend.map(\.transientFailures) == [0, 0, 0])
        #expect(c.outcomes.isEmpty)
    }

    @Test func aHandshakeThatNeverFinishesFailsAfterTheConnectTimeout() throws {
        var configuration = DeliveryConfiguration()
        configuration.connectTimeout = .seconds(10)
        let c = try Connection(configuration: configuration)
        c.channel.embeddedEventLoop.advanceTime(by: .milliseconds(9_999))
        #expect(c.channel.isActive)
        c.channel.embeddedEventLoop.advanceTime(by: .milliseconds(1))
        #expect(!c.channel.isActive)
        #expect(c.ends.count == 1)
        #expect(c.ends[0].0 == .failedBeforeReady("the TLS handshake did not finish within 10.0 seconds"))
    }

    @Test func anIdleConnectionIsRenewedBeforeItIsUsedAgain() throws {
        var configuration = DeliveryConfiguration()
        configuration.idleRenewal = .seconds(300)
        let c = try Connection(configuration: configuration, queued: [enhanced(1)])
        c.handshake()
        #expect(try writtenIdentifiers(c.channel) == [1])
        c.clock.advance(by: .seconds(200))
        c.owner.add([enhanced(2)])
        c.handler.pump()  // not idle long enough (its last write was 200 s ago)
        #expect(try writtenIdentifiers(c.channel) == [2])
        c.clock.advance(by: .seconds(1))
        c.channel.embeddedEventLoop.advanceTime(by: .seconds(1))  // the window accepts both
        c.channel.embeddedEventLoop.run()
        #expect(c.outcomes.count == 2)
        c.clock.advance(by: .seconds(301))
        c.owner.add([enhanced(3)])
        c.handler.pump()
        #expect(try writtenIdentifiers(c.channel).isEmpty)
        #expect(!c.channel.isActive)
        #expect(c.ends.map(\.0) == [.idleRenewal])
        #expect(c.ends[0].1.resend.isEmpty)
        #expect(c.owner.read { $0.queue.map(\.ticket) } == [3])  // left for the next connection
    }

    /// A write that fails (the gateway reset the connection) closes the channel within the flush, and the channel
    /// can still claim to be writable: the handler must not take another batch for a connection that has ended.
    @Test func aConnectionThatClosesDuringAWriteTakesNothingMore() throws {
        let batch = GatewayConnectionHandler.batchSize
        let c = try Connection(queued: (1...UInt64(3 * batch)).map { enhanced($0) }, nearer: CloseOnFirstFlush())
        c.handshake()
        #expect(!c.channel.isActive)
        #expect(c.owner.read { $0.takes } == 1)
        #expect(c.ends.count == 1)
        #expect(c.ends[0].0 == .dropped(carriedNotifications: true))
        #expect(c.ends[0].1.resend.map(\.ticket.value) == Array(1...UInt64(batch)))  // the batch written, to resend
        #expect(c.owner.read { $0.queue.count } == 2 * batch)  // the rest, left for another connection
        #expect(c.outcomes.isEmpty)
    }

    @Test func anExpiredNotificationFailsWithoutBeingWritten() throws {
        let c = try Connection(queued: [enhanced(1, expiration: 1), enhanced(2)])
        c.handshake()
        #expect(try writtenIdentifiers(c.channel) == [1])
        #expect(c.outcomes.map(\.ticket) == [1])
        if case .failed(.expired, nil, _) = c.outcomes[0].result {} else { Issue.record("\(c.outcomes[0])") }
        #expect(c.owner.read { $0.written } == 1)
    }

    /// A batch's frames go into one buffer: of any sizes, with expired ones among them left out, each frame as the
    /// encoder writes it with its identifier, and nothing after the last.
    @Test(arguments: [NotificationFormat.frame, .enhanced, .simple])
    func aBatchOfFramesOfManySizesIsWrittenExactly(format: NotificationFormat) throws {
        var deliveries: [Delivery] = []
        var expected: [UInt8] = []
        var identifier: UInt32 = 0
        for i in 0..<40 {
            let expired = i % 7 == 3
            var notification = PushNotification(
                token: try DeviceToken(bytes: Array(repeating: UInt8(i), count: 32 + i % 3 * 16)),
                payload: Array(#"{"aps":{"alert":"\#(String(repeating: "x", count: i * 37))"}}"#.utf8), identifier: 0,
                expiration: expired ? 1 : 0, priority: i % 2 == 0 ? .immediate : .conservePower)
            deliveries.append(Delivery(ticket: DeliveryTicket(UInt64(i)), notification: notification, format: format))
            guard !expired else { continue }
            identifier += 1
            notification.identifier = identifier
            expected += NotificationEncoder.encodeBytes(notification, format: format)
        }
        let c = try Connection(queued: deliveries)
        c.handshake()
        var written: [UInt8] = []
        while let buffer = try c.channel.readOutbound(as: ByteBuffer.self) { written += buffer.readableBytesView }
        #expect(written.count == expected.count)
        let same = written == expected  // not the bytes themselves in a failure's message: 30 KB of them
        #expect(same)
        #expect(c.outcomes.count == 6)  // the expired ones
        #expect(c.owner.read { $0.written } == 34)
    }
}

/// Closes the channel when the first flush reaches it, as a write error on the socket does.
final class CloseOnFirstFlush: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    private var flushed = false

    func flush(context: ChannelHandlerContext) {
        context.flush()
        guard !flushed else { return }
        flushed = true
        context.close(promise: nil)
    }
}
