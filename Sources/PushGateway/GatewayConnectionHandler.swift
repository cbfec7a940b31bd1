import Logging
import NIOCore
import NIOSSL
import NIOTLS
import PushCore

#if canImport(Glibc)
import Glibc
#endif

/// UNIX seconds, from the wall clock.
func unixSeconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec)
}

/// Why a gateway connection ended, which decides how soon the pool opens the next one.
enum ConnectionEnd: Sendable, Equatable {
    /// It never became usable: refused, reset, or timed out. Backs off.
    case failedBeforeReady(String)
    /// The TLS handshake failed: a certificate was refused, by the gateway or by us (credentials that will not work
    /// until someone changes them). Backs off like any failure; the app is not ready until a handshake succeeds.
    case handshakeRefused(String)
    /// The gateway answered with an error response and closed. Status 10 backs off; others reconnect at once.
    case errorResponse(GatewayStatus)
    /// It closed or broke with no error response after carrying notifications; reconnects at once.
    case dropped(carriedNotifications: Bool)
    /// Renewed because it had been idle too long.
    case idleRenewal
    /// HTTP/2: it took no new streams (GOAWAY, or retired by this side) and closed once its streams finished;
    /// replaced at once (the connect cap still applies).
    case retired
    /// HTTP/2: the provider API refused the app's credentials on a request (403 InvalidProviderToken,
    /// BadCertificate, …); the connection was retired and its replacement backs off.
    case refusedByAPI(String)
    /// The engine is stopping.
    case stopped

    /// Whether what was in flight goes back uncounted: stopping, or refused credentials, are not the notifications'
    /// fault.
    var handsBackUncounted: Bool {
        switch self {
        case .stopped, .handshakeRefused: true
        default: false
        }
    }

    /// Whether it ended before the connection was ever usable.
    var failedBeforeReady: Bool {
        switch self {
        case .failedBeforeReady, .handshakeRefused: true
        default: false
        }
    }

    /// Which connect cap the next connection is under. An error response about one notification's data (status
    /// 2 to 8: a missing or invalid token, topic or payload) comes from a gateway that works and read what it was
    /// sent: reconnecting after it is under a cap of its own, generous enough that 5% invalid tokens do not
    /// throttle everything behind them, yet a bound on how fast the gateway sees connections come and go. Every end
    /// that may mean the gateway is in trouble (refusals, failed handshakes, drops, status 1, 10, 128, 255) is under
    /// the gateway cap.
    var connectCap: ConnectCap {
        guard case .errorResponse(let status) = self, (2...8).contains(status.code) else { return .gateway }
        return .afterRejection
    }
}

/// The two token buckets new connections to one gateway take from.
enum ConnectCap: String, Sendable, CaseIterable {
    /// Every first connection and every reconnect after a failure, a drop or a shutdown.
    case gateway
    /// Reconnects after an error response about one notification's data (status 2 to 8).
    case afterRejection = "after_rejection"
}

/// What a gateway connection reports to, and takes its work from: its ``ConnectionPool`` (tests put a recorder in
/// its place).
protocol GatewayConnectionOwner: AnyObject, Sendable {
    var configuration: DeliveryConfiguration { get }
    /// The TLS handshake finished: `handler` is ready for work.
    func connectionReady(slot: Int, handler: NIOLoopBound<GatewayConnectionHandler>)
    /// Up to `max` deliveries to send, within the send window beside the `held` unaccepted ones the connection has;
    /// when there are none, the connection is woken (``GatewayConnectionHandler/pump()``) once there are.
    func take(max: Int, slot: Int, held: Int) -> [Delivery]
    /// `count` notifications were written.
    func wrote(_ count: Int)
    /// Terminal outcomes.
    func report(_ outcomes: [DeliveryOutcome])
    /// An error response settled what was in flight; `accepted` were accepted on the connection in its life.
    func errorResponse(
        _ response: ErrorResponse, settlement: ConnectionStateMachine<ContinuousClock.Instant>.Settlement,
        acceptedOnConnection accepted: Int)
    /// Whether a connection ending now, after `accepted` were accepted on it, is the send window's doing.
    func windowBlamed(acceptedOnConnection accepted: Int) -> Bool
    /// `count` notifications passed the acceptance window on `slot`'s connection, which held `held`.
    func windowAccepted(_ count: Int, held: Int, slot: Int)
    /// Whether the owner finds culprits by halving (the simple format, which has no identifiers): a close or an
    /// error response then blames nothing on this connection, and what was in flight goes back to the owner.
    var bisectsSuspects: Bool { get }
    /// A ready connection is still healthy at `now`.
    func stillHealthy(at now: ContinuousClock.Instant)
    /// The connection ended; `settlement` is what was still in flight.
    func connectionEnded(
        slot: Int, reason: ConnectionEnd, settlement: ConnectionStateMachine<ContinuousClock.Instant>.Settlement,
        accepted: Int)
}

/// One gateway connection: a thin shell over ``ConnectionStateMachine`` that writes what the pool hands it, in
/// batches of frames per flush and only while the channel is writable, reads error responses, and ticks the
/// acceptance window.
final class GatewayConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ErrorResponse
    typealias OutboundOut = ByteBuffer

    static let batchSize = 256
    /// Batches written per turn of the event loop; then the loop polls the socket (an error response may be
    /// waiting) before the next turn writes more.
    static let batchesPerTurn = 8

    private let pool: any GatewayConnectionOwner
    private let slot: Int
    private let now: @Sendable () -> ContinuousClock.Instant
    private var machine: ConnectionStateMachine<ContinuousClock.Instant>
    private var context: ChannelHandlerContext?
    private var ready = false
    private var end: ConnectionEnd?
    private var failure: String?
    private var handshakeRefused = false
    private var carried = false
    private var lastActivity: ContinuousClock.Instant
    private var timer: RepeatedTask?
    private var pumpScheduled = false

    /// `now` reads the clock (tests move it by hand).
    init(owner: any GatewayConnectionOwner, slot: Int, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.pool = owner
        self.slot = slot
        self.now = now
        self.machine = ConnectionStateMachine(
            acceptanceWindow: owner.configuration.acceptanceWindow, maxAttempts: owner.configuration.maxAttempts)
        self.lastActivity = now()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // NIOSSL has no handshake timeout of its own: a gateway that accepts and then says nothing must not hold
        // the slot for ever.
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: .nanoseconds(pool.configuration.connectTimeout.nanoseconds)) {
            let handler = loopBound.value
            guard !handler.ready, let context = handler.context else { return }
            handler.failure = "the TLS handshake did not finish within \(handler.pool.configuration.connectTimeout)"
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted = event {
            ready = true
            lastActivity = now()
            let window = pool.configuration.acceptanceWindow
            let tick = TimeAmount.nanoseconds(Int64(max(5_000_000, min(100_000_000, window.nanoseconds / 8))))
            let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
            timer = context.eventLoop.scheduleRepeatedTask(initialDelay: tick, delay: tick) { _ in loopBound.value.tick() }
            pool.connectionReady(slot: slot, handler: loopBound)
            pump()
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let response = unwrapInboundIn(data)
        guard machine.isOpen else { return }
        end = .errorResponse(response.status)
        if pool.bisectsSuspects {
            // Nothing in flight can be named: settled as a close (channelInactive), the owner halves the suspects.
            context.close(promise: nil)
            return
        }
        let settlement = machine.receive(response)
        pool.errorResponse(response, settlement: settlement, acceptedOnConnection: machine.acceptedCount)
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { pump() }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if failure == nil {
            let description = String(describing: error)
            failure = description
            if !ready, case NIOSSLError.handshakeFailed = error {
                handshakeRefused = true
            } else if ready, machine.acceptedCount == 0, case BoringSSLError.sslError = error {
                // TLS 1.3: the client's side of the handshake ends before the gateway has checked its certificate,
                // so a refusal arrives as a TLS alert on the first read (swift-nio-ssl keeps the alert's code
                // private: any TLS error before the first acceptance counts as the refusal). Nothing was
                // delivered on this connection.
                handshakeRefused = true
            }
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        let reason: ConnectionEnd
        if let end {
            reason = end
        } else if handshakeRefused, let failure {
            reason = .handshakeRefused(failure)
        } else if ready {
            reason = .dropped(carriedNotifications: carried)
        } else {
            reason = .failedBeforeReady(failure ?? "the connection closed during the TLS handshake")
        }
        let settlement: ConnectionStateMachine<ContinuousClock.Instant>.Settlement
        if !machine.isOpen {
            settlement = .init()
        } else if reason.handsBackUncounted {
            settlement = machine.abandon()
        } else {
            let early = carried && pool.windowBlamed(acceptedOnConnection: machine.acceptedCount)
            settlement = machine.closed(blameTheOldest: !early && !pool.bisectsSuspects)
        }
        ready = false
        pool.connectionEnded(slot: slot, reason: reason, settlement: settlement, accepted: machine.acceptedCount)
        context.fireChannelInactive()
    }

    /// Closes the connection because the engine is stopping: what is in flight goes back unsettled.
    func stop() {
        guard let context else { return }
        if end == nil { end = .stopped }
        context.close(promise: nil)
    }

    /// Writes what the pool has, batch by batch, while the channel can take it: a few batches per turn of the
    /// event loop, so that an error response is read between turns rather than after everything was written.
    func pump() {
        guard ready, machine.isOpen, let context else { return }
        let now = self.now()
        if lastActivity.advanced(by: pool.configuration.idleRenewal) < now && machine.inFlight.isEmpty {
            // Idle too long: a firewall may have dropped it silently. Renew it before use.
            end = .idleRenewal
            context.close(promise: nil)
            return
        }
        let sendTime = machine.sendTime(at: now)
        var batches = 0
        // A failed write (the gateway reset the connection) closes the channel within the flush, and an ended
        // channel may still say it is writable: `ready` and the machine are asked again before every batch.
        while ready, machine.isOpen, context.channel.isWritable {
            if batches == Self.batchesPerTurn {
                continueNextTurn(context)
                return
            }
            // The send window caps what this connection holds unaccepted (one lock with the queue); the
            // acceptance tick pumps again once notifications leave it.
            let batch = pool.take(max: Self.batchSize, slot: slot, held: machine.inFlight.count)
            if batch.isEmpty { break }
            batches += 1
            let unixNow = unixSeconds()
            let size = batch.reduce(0) { $0 + $1.frameSize }
            var buffer = context.channel.allocator.buffer(capacity: size)
            var expired: [DeliveryOutcome] = []
            // The frames copied into the buffer in one write: one access to its storage for the batch, where a
            // write per frame checked it each time.
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { out in
                var written = 0
                machine.send(batch, at: sendTime, unixNow: unixNow) { delivery, decision in
                    switch decision {
                    case .send(let identifier): written += delivery.write(identifier: identifier, to: out.baseAddress! + written)
                    case .expired(let outcome): expired.append(outcome)
                    }
                }
                // Each frame sent is one of those summed (`write` copies `frameSize` bytes).
                assert(written <= size, "a batch's frames outgrew their sizes")
                return written
            }
            if !expired.isEmpty { pool.report(expired) }
            if buffer.readableBytes > 0 {
                // Counted before the write: a write that fails ends the connection within it.
                pool.wrote(batch.count - expired.count)
                carried = true
                lastActivity = now
                // One flush per batch: the TLS handler encrypts on flush, so writability tracks what is queued.
                context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
            }
        }
    }

    /// Pumps again on the next turn of the event loop, after it has polled the sockets.
    private func continueNextTurn(_ context: ChannelHandlerContext) {
        guard !pumpScheduled else { return }
        pumpScheduled = true
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: .zero) {
            loopBound.value.pumpScheduled = false
            loopBound.value.pump()
        }
    }

    /// The acceptance window: what passed it by now is accepted on the next turn of the event loop, after the
    /// loop has polled the socket, so that an error response already received is read first (it settles those
    /// notifications instead). Deciding and accepting in one turn would accept notifications whose error response
    /// sat unread behind a long write.
    private func tick() {
        let now = self.now()
        if ready { pool.stillHealthy(at: now) }
        guard let context, machine.hasDue(now: now) else { return }
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: .zero) {
            let handler = loopBound.value
            guard handler.machine.isOpen else { return }
            let held = handler.machine.inFlight.count
            var total = 0
            // Reported in batches of at most `acceptedBatch`: one array of all that is due (tens of thousands at
            // full speed) would be larger than glibc's mmap threshold, mapped and faulted in afresh on every tick.
            while true {
                let accepted = handler.machine.acceptDue(now: now, limit: Self.acceptedBatch)
                guard !accepted.isEmpty else { break }
                total += accepted.count
                handler.pool.report(accepted)
            }
            guard total > 0 else { return }
            handler.pool.windowAccepted(total, held: held, slot: handler.slot)
            handler.pump()
        }
    }

    /// The most accepted notifications reported at once: their outcomes stay under glibc's mmap threshold (128 KiB).
    static let acceptedBatch = 1024
}

extension Duration {
    var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}
