import DequeModule
import Logging
import Metrics
import NIOCore
import NIOPosix
import NIOSSL
import PushCore
import Synchronization

/// Something that happened to a pool's connections, kept (the last 10,000) for status, logs and tests.
public struct PoolEvent: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        /// A connection attempt starts.
        case attempt
        case ready
        /// A connection ended; `backoff` is how long the pool waits before the next attempt for that slot.
        case ended(reason: String, backoff: Duration)
    }

    public var slot: Int
    public var kind: Kind
    public var at: ContinuousClock.Instant
}

/// What a pool looks like now.
public struct PoolStatus: Sendable {
    public var readyConnections: Int
    public var pending: Int
    public var connectionAttempts: Int
    public var lastError: String?
    public var consecutiveFailures: Int
    /// Error responses that rejected a notification already counted accepted (answered after the acceptance window).
    public var lateErrorResponses: Int
    /// Notifications written to the gateway, resends included.
    public var written: Int
    public var events: [PoolEvent]
}

/// The connections to one gateway for one (app, environment): N long-lived connections pulling from one queue in
/// which resends stand before new notifications. New connections back off exponentially with full jitter after
/// status 10, refusals and failed handshakes, and never open faster than the rate cap allows.
final class ConnectionPool: Sendable {
    private enum Slot {
        case idle
        /// Waiting out backoff or the rate cap.
        case scheduled(Scheduled<Void>)
        /// Connecting or in the TLS handshake (bounded by the connect timeout).
        case connecting
        case ready(NIOLoopBound<GatewayConnectionHandler>)
        /// Stopped for good.
        case finished

        var isFinished: Bool {
            if case .finished = self { return true }
            return false
        }
    }

    private struct State {
        var pending = Deque<Delivery>()
        var slots: [Slot]
        /// Slots whose handler found the queue empty and waits to be told of new work.
        var waiting: Set<Int> = []
        var backoff: Backoff<ContinuousClock.Instant>
        var limiter: ConnectRateLimiter<ContinuousClock.Instant>
        var window: SendWindow
        var stopped = false
        var lastError: String?
        var attempts = 0
        var lateErrorResponses = 0
        var events = Deque<PoolEvent>()
        var stopWaiter: CheckedContinuation<Void, Never>?

    mutating func takeWaiting() -> [NIOLoopBound<GatewayConnectionHandler>] {
        guard !waiting.isEmpty else { return [] }
        var handlers: [NIOLoopBound<GatewayConnectionHandler>] = []
        for slot in waiting {
            if case .ready(let handler) = slots[slot] { handlers.append(handler) }
        }
        waiting.removeAll()
        return handlers
    }

        var readyCount: Int { slots.filter { if case .ready = $0 { true } else { false } }.count }

        mutating func log(_ slot: Int, _ kind: PoolEvent.Kind, _ at: ContinuousClock.Instant) {
            events.append(PoolEvent(slot: slot, kind: kind, at: at))
            if events.count > 10_000 { events.removeFirst() }
        }
    }

    let endpoint: AppEndpoint
    let configuration: DeliveryConfiguration
    let logger: Logger
    private let tls: NIOSSLContext
    private let group: any EventLoopGroup
    private let onOutcomes: @Sendable ([DeliveryOutcome]) -> Void
    private let state: Mutex<State>
    private let clock = ContinuousClock()
    private let sent: Counter
    private let writes = Atomic<Int>(0)
    private let down = Atomic<Bool>(false)
    private let attemptsCounter: Counter
    private let readyGauge: Gauge
    private let windowGauge: Gauge
    private let resends: [String: Counter]

    init(
        endpoint: AppEndpoint, configuration: DeliveryConfiguration, group: any EventLoopGroup, logger: Logger,
        onOutcomes: @escaping @Sendable ([DeliveryOutcome]) -> Void
    ) throws {
        self.endpoint = endpoint
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.onOutcomes = onOutcomes
        self.tls = try endpoint.tlsContext()
        let app = "\(endpoint.key)"
        sent = Counter(label: "pushworker_notifications_sent_total", dimensions: [("app", app)])
        attemptsCounter = Counter(label: "pushworker_connection_attempts_total", dimensions: [("app", app)])
        readyGauge = Gauge(label: "pushworker_connections_ready", dimensions: [("app", app)])
        windowGauge = Gauge(label: "pushworker_send_window", dimensions: [("app", app)])
        resends = Dictionary(uniqueKeysWithValues: ["error_response", "shutdown", "connection_closed"].map {
            ($0, Counter(label: "pushworker_resends_total", dimensions: [("app", app), ("cause", $0)]))
        })
        let now = ContinuousClock().now
        state = Mutex(State(
            slots: Array(repeating: .idle, count: max(1, endpoint.connections)),
            backoff: Backoff(
                initial: configuration.reconnectInitial, maximum: configuration.reconnectMaximum,
                resetAfter: configuration.reconnectResetAfter,
                seed: configuration.jitterSeed ^ UInt64(truncatingIfNeeded: endpoint.key.hashValue)),
            limiter: ConnectRateLimiter(
                perMinute: configuration.maxNewConnectionsPerMinute, burst: configuration.connectBurst, now: now),
            window: SendWindow(
                initial: configuration.initialSendWindow ?? configuration.maxInFlight, maximum: configuration.maxInFlight)))
        windowGauge.record(state.withLock { $0.window.limit })
    }

    func start() {
        let count = state.withLock { $0.slots.count }
        for slot in 0..<count { scheduleConnect(slot: slot, after: .zero) }
    }

    // MARK: Work

    /// Queues new deliveries and wakes connections that wait for work.
    func submit(_ deliveries: [Delivery]) {
        let wake = state.withLock { s -> [NIOLoopBound<GatewayConnectionHandler>] in
            s.pending.append(contentsOf: deliveries)
            return s.takeWaiting()
        }
        for handler in wake { handler.eventLoop.execute { handler.value.pump() } }
    }

    /// Up to `max` deliveries for `slot` to send, and no more than the send window leaves room for beside the
    /// `held` unaccepted ones it has (empty when it is full: its acceptance tick pumps again). When there are none,
    /// the slot is woken by the next submit.
    func take(max: Int, slot: Int, held: Int) -> [Delivery] {
        state.withLock { s in
            let room = s.window.limit - held
            guard room > 0 else { return [] }
            if s.pending.isEmpty {
                s.waiting.insert(slot)
                return []
            }
            let count = Swift.min(max, room, s.pending.count)
            let batch = Array(s.pending.prefix(count))
            s.pending.removeFirst(count)
            return batch
        }
    }

    /// `count` notifications were written to the gateway.
    func wrote(_ count: Int) {
        sent.increment(by: Int64(count))
        writes.add(count, ordering: .relaxed)
    }

    /// Whether a connection ending now, after `accepted` were accepted on it, is the send window's doing.
    func windowBlamed(acceptedOnConnection accepted: Int) -> Bool {
        state.withLock { $0.window.blamesWindow(acceptedOnConnection: accepted) }
    }

    /// An error response of the gateway's own ended a connection on which `accepted` were accepted, and `resent`
    /// written after the one it named go again (``SendWindow/gatewayAnswered(resent:acceptedOnConnection:)``).
    func windowAnswered(resent: Int, acceptedOnConnection accepted: Int) {
        updateWindow { $0.gatewayAnswered(resent: resent, acceptedOnConnection: accepted) }
    }

    /// `count` notifications passed the acceptance window on a connection that held `held`.
    func windowAccepted(_ count: Int, held: Int) {
        updateWindow { $0.accepted(count, held: held) }
    }

    /// Changes the send window under the lock; the gauge follows when its limit moved.
    private func updateWindow(_ change: (inout SendWindow) -> Void) {
        let (before, after) = state.withLock { s in
            let before = s.window.limit
            change(&s.window)
            return (before, s.window.limit)
        }
        if after != before { windowGauge.record(after) }
    }

    /// Settles what an error response or a close decided: outcomes out, resends to the front of the queue.
    /// `cause` labels the resends in the metrics (`error_response`, `shutdown`, `connection_closed`).
    func settle(_ settlement: ConnectionStateMachine<ContinuousClock.Instant>.Settlement, cause: String? = nil) {
        var wake: [NIOLoopBound<GatewayConnectionHandler>] = []
        if let cause, !settlement.resend.isEmpty { resends[cause]?.increment(by: Int64(settlement.resend.count)) }
        if !settlement.resend.isEmpty {
            wake = state.withLock { s in
                s.pending.insert(contentsOf: settlement.resend, at: 0)
                return s.takeWaiting()
            }
        }
        report(settlement.outcomes)
        for handler in wake { handler.eventLoop.execute { handler.value.pump() } }
    }

    /// An error response named a notification this connection no longer holds. For status 10 that is ordinary (the
    /// last notification the gateway processed was accepted by the window already). For a status that rejects, the
    /// answer came after the acceptance window and the notification already counted as accepted: the gateway
    /// discarded one that was reported delivered. Logged and counted so that operators raise the window.
    func unmatchedErrorResponse(status: GatewayStatus, identifier: UInt32) {
        guard let reason = status.deliveryErrorReason else { return }
        state.withLock { $0.lateErrorResponses += 1 }
        Counter(label: "pushworker_late_error_responses_total", dimensions: [("app", "\(endpoint.key)"), ("reason", reason.rawValue)])
            .increment()
        logger.warning("error response names a notification no longer in flight (answered after the acceptance window?)", metadata: [
            "app": "\(endpoint.key)", "status": "\(status)", "identifier": "\(identifier)",
        ])
    }

    func report(_ outcomes: [DeliveryOutcome]) {
        if !outcomes.isEmpty { onOutcomes(outcomes) }
    }

    // MARK: Connections

    func connectionReady(slot: Int, handler: NIOLoopBound<GatewayConnectionHandler>) {
        let now = clock.now
        let (stopped, ready) = state.withLock { s -> (Bool, Int) in
            s.slots[slot] = .ready(handler)
            s.backoff.connected(at: now)
            s.log(slot, .ready, now)
            return (s.stopped, s.readyCount)
        }
        readyGauge.record(ready)
        down.store(false, ordering: .relaxed)
        if stopped { handler.value.stop() }
    }

    func stillHealthy(at now: ContinuousClock.Instant) {
        state.withLock { $0.backoff.stillHealthy(at: now) }
    }

    /// A connection ended; `accepted` notifications were accepted on it in its life.
    func connectionEnded(
        slot: Int, reason: ConnectionEnd, settlement: ConnectionStateMachine<ContinuousClock.Instant>.Settlement, accepted: Int
    ) {
        let now = clock.now
        let lostUnaccepted = !settlement.resend.isEmpty || settlement.outcomes.contains { $0.result != .accepted }
        let (delay, stopped, window) = state.withLock { s -> (Duration, Bool, Int) in
            s.slots[slot] = .idle
            s.waiting.remove(slot)
            var delay = Duration.zero
            switch reason {
            case .failedBeforeReady(let why):
                s.lastError = why
                delay = s.backoff.failed()
            case .errorResponse(let status):
                // What the answer settled, and its weight on the send window, went through settle(_:cause:) when it
                // was read: the settlement here is empty.
                if status == .shutdown { delay = s.backoff.failed() }
            case .dropped(let carried):
                if !carried {
                    delay = s.backoff.failed()
                } else if lostUnaccepted {
                    s.window.lost(acceptedOnConnection: accepted)
                }
            case .idleRenewal, .stopped:
                break
            }
            s.log(slot, .ended(reason: "\(reason)", backoff: delay), now)
            if s.stopped { s.slots[slot] = .finished }
            return (delay, s.stopped, s.window.limit)
        }
        let ready = state.withLock { $0.readyCount }
        readyGauge.record(ready)
        if case .failedBeforeReady = reason, ready == 0 { down.store(true, ordering: .relaxed) }
        windowGauge.record(window)
        if case .failedBeforeReady(let why) = reason {
            logger.warning("gateway connection failed", metadata: [
                "app": "\(endpoint.key)", "gateway": "\(endpoint.gatewayHost):\(endpoint.gatewayPort)", "error": "\(why)",
                "retry_in_ms": "\(delay.nanoseconds / 1_000_000)",
            ])
        }
        settle(settlement, cause: reason == .stopped ? nil : "connection_closed")
        if stopped {
            resumeStopWaiterIfDone()
        } else {
            scheduleConnect(slot: slot, after: delay, capped: reason.countsTowardConnectCap)
        }
    }

    /// Opens the slot's next connection after `backoff`, and after the connect cap allows when `capped`.
    private func scheduleConnect(slot: Int, after backoff: Duration, capped: Bool = true) {
        let now = clock.now
        let loop = group.next()
        state.withLock { s in
            guard !s.stopped else {
                s.slots[slot] = .finished
                return
            }
            // The rate cap holds whatever the backoff says.
            let delay = backoff + (capped ? s.limiter.acquire(now: now.advanced(by: backoff)) : .zero)
            let task = loop.scheduleTask(in: .nanoseconds(max(0, delay.nanoseconds))) { self.open(slot: slot) }
            s.slots[slot] = .scheduled(task)
        }
        resumeStopWaiterIfDone()
    }

    private func open(slot: Int) {
        let now = clock.now
        let proceed = state.withLock { s -> Bool in
            guard !s.stopped else {
                s.slots[slot] = .finished
                return false
            }
            s.slots[slot] = .connecting
            s.attempts += 1
            s.log(slot, .attempt, now)
            return true
        }
        if proceed { attemptsCounter.increment() }
        guard proceed else {
            resumeStopWaiterIfDone()
            return
        }
        let host = endpoint.gatewayHost
        let serverName = (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
        let tls = self.tls
        ClientBootstrap(group: group)
            .connectTimeout(.nanoseconds(configuration.connectTimeout.nanoseconds))
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(try NIOSSLClientHandler(context: tls, serverHostname: serverName))
                    try sync.addHandler(ByteToMessageHandler(ErrorResponseDecoder()))
                    try sync.addHandler(GatewayConnectionHandler(pool: self, slot: slot))
                }
            }
            .connect(host: host, port: endpoint.gatewayPort)
            .whenFailure { error in
                self.connectionEnded(
                    slot: slot, reason: .failedBeforeReady(String(describing: error)), settlement: .init(), accepted: 0)
            }
    }

    // MARK: Stopping

    /// Stops opening connections, closes the open ones, and returns what was never settled (pending and in flight),
    /// in order, for the caller to leave uncommitted.
    func stop() async -> [Delivery] {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { s -> [NIOLoopBound<GatewayConnectionHandler>] in
                s.stopped = true
                s.stopWaiter = continuation
                var ready: [NIOLoopBound<GatewayConnectionHandler>] = []
                for slot in s.slots.indices {
                    switch s.slots[slot] {
                    case .ready(let handler): ready.append(handler)
                    case .scheduled(let task):
                        task.cancel()
                        s.slots[slot] = .finished
                    case .idle: s.slots[slot] = .finished
                    case .connecting, .finished: break
                    }
                }
                return ready
            }
            for handler in ready { handler.eventLoop.execute { handler.value.stop() } }
            resumeStopWaiterIfDone()
        }
        return state.withLock { s in
            defer { s.pending.removeAll() }
            return Array(s.pending)
        }
    }

    private func resumeStopWaiterIfDone() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard s.stopped, s.slots.allSatisfy(\.isFinished), let w = s.stopWaiter else { return nil }
            s.stopWaiter = nil
            return w
        }
        waiter?.resume()
    }

    /// No connection is ready and the last attempt failed.
    var isDown: Bool { down.load(ordering: .relaxed) }

    var status: PoolStatus {
        state.withLock { s in
            PoolStatus(
                readyConnections: s.slots.filter { if case .ready = $0 { true } else { false } }.count,
                pending: s.pending.count, connectionAttempts: s.attempts, lastError: s.lastError,
                consecutiveFailures: s.backoff.consecutiveFailures, lateErrorResponses: s.lateErrorResponses,
                written: writes.load(ordering: .relaxed),
                events: Array(s.events))
        }
    }
}
