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
    /// Whether any connection was ever ready.
    public var everConnected: Bool
    /// The last attempt failed in the TLS handshake (a certificate refused, by either side) and none is ready since.
    public var credentialsRefused: Bool
    /// Why the last connection ended, if one did.
    public var lastEnd: String?
    public var events: [PoolEvent]
    /// HTTP/2: the provider API refused the app's credentials on a request (403 InvalidProviderToken, BadCertificate,
    /// …); cleared by the next success.
    public var refusedByAPI: String? = nil
}

/// The connections to one gateway for one (app, environment): N long-lived connections pulling from one queue in
/// which resends stand before new notifications. New connections back off exponentially with full jitter after
/// status 10, refusals and failed handshakes, and never open faster than the rate cap allows.
///
/// A shell over ``PoolStateMachine``, which decides everything under one lock; the pool carries out what it
/// returns (schedules attempts, opens and closes channels, wakes connections, reports outcomes) and keeps the
/// metrics.
final class ConnectionPool: GatewayConnectionOwner, Sendable {
    typealias Shell = PoolShell<NIOLoopBound<GatewayConnectionHandler>, Delivery, SendWindow, NoExtraState>
    typealias Machine = Shell.Machine

    /// The binary pool keeps nothing beside the machine.
    struct NoExtraState: Sendable {}

    let endpoint: AppEndpoint
    let configuration: DeliveryConfiguration
    let logger: Logger
    private let tls: NIOSSLContext
    private var group: any EventLoopGroup { shell.group }
    private let onOutcomes: @Sendable ([DeliveryOutcome]) -> Void
    private let sendCheck: SendCheck?
    private let shell: Shell
    private let sent: Counter
    private let writes = Atomic<Int>(0)
    private let down = Atomic<Bool>(false)
    private let windowGauge: Gauge
    private let resends: [String: Counter]

    init(
        endpoint: AppEndpoint, configuration: DeliveryConfiguration, group: any EventLoopGroup, logger: Logger,
        sendCheck: SendCheck? = nil, onOutcomes: @escaping @Sendable ([DeliveryOutcome]) -> Void
    ) throws {
        self.sendCheck = sendCheck
        self.endpoint = endpoint
        self.configuration = configuration
        self.logger = logger
        self.onOutcomes = onOutcomes
        self.tls = try endpoint.tlsContext()
        let app = "\(endpoint.key)"
        sent = Counter(label: "pushworker_notifications_sent_total", dimensions: [("app", app)])
        windowGauge = Gauge(label: "pushworker_send_window", dimensions: [("app", app)])
        resends = Dictionary(uniqueKeysWithValues: ["error_response", "shutdown", "connection_closed"].map {
            ($0, Counter(label: "pushworker_resends_total", dimensions: [("app", app), ("cause", $0)]))
        })
        let machine = Machine(
            connections: endpoint.connections,
            backoff: Backoff(
                initial: configuration.reconnectInitial, maximum: configuration.reconnectMaximum,
                resetAfter: configuration.reconnectResetAfter,
                seed: configuration.jitterSeed ^ UInt64(truncatingIfNeeded: endpoint.key.hashValue)),
            limiter: ConnectRateLimiter(
                perMinute: configuration.maxNewConnectionsPerMinute, burst: configuration.connectBurst, now: .now),
            rejectionLimiter: ConnectRateLimiter(
                perMinute: configuration.maxReconnectsAfterRejectionPerMinute, burst: configuration.rejectionConnectBurst,
                now: .now),
            window: SendWindow(
                initial: configuration.initialSendWindow ?? configuration.maxInFlight, maximum: configuration.maxInFlight),
            bisects: endpoint.format == .simple)
        windowGauge.record(machine.window.limit)
        shell = Shell(machine: machine, extra: NoExtraState(), group: group, app: app)
    }

    func start() {
        shell.start { [self] slot in open(slot: slot) }
    }

    // MARK: Work

    /// Queues new deliveries and wakes connections that wait for work.
    func submit<C: Collection<Delivery> & Sendable>(_ deliveries: C) {
        wake(shell.withLock { $0.machine.submit(deliveries) })
    }

    /// The next notifications for a connection to write; those the send check stops end here with their outcome.
    func take(max: Int, slot: Int, held: Int) -> [Delivery] {
        while true {
            let batch = shell.withLock { $0.machine.take(max: max, slot: slot, held: held) }
            let (kept, stopped) = batch.passing(sendCheck, app: endpoint.key) {
                SendCandidate(ticket: $0.ticket, sends: $0.sends, tokenSource: $0.tokenSource)
            }
            report(stopped)
            // All stopped: take again, so the connection is not left idle with work queued.
            if !kept.isEmpty || batch.isEmpty { return kept }
        }
    }

    func wrote(_ count: Int) {
        sent.increment(by: Int64(count))
        writes.add(count, ordering: .relaxed)
    }

    func windowBlamed(acceptedOnConnection accepted: Int) -> Bool {
        shell.withLock { $0.machine.windowBlamed(acceptedOnConnection: accepted) }
    }

    func windowAccepted(_ count: Int, held: Int, slot: Int) {
        let (before, after, wake) = shell.withLock { s in
            let before = s.machine.window.limit
            let wake = s.machine.accepted(count, held: held, slot: slot)
            return (before, s.machine.window.limit, wake)
        }
        if after != before { windowGauge.record(after) }
        self.wake(wake)
    }

    var bisectsSuspects: Bool { endpoint.format == .simple }

    func errorResponse(
        _ response: ErrorResponse, settlement: ConnectionStateMachine<ContinuousClock.Instant>.Settlement,
        acceptedOnConnection accepted: Int
    ) {
        let unmatched = settlement.unmatchedIdentifier != nil
        let (wake, before, after) = shell.withLock { s in
            let before = s.machine.window.limit
            let wake = s.machine.errorResponse(
                response.status, resend: settlement.resend, unmatched: unmatched, acceptedOnConnection: accepted)
            return (wake, before, s.machine.window.limit)
        }
        if after != before { windowGauge.record(after) }
        if unmatched, let reason = response.status.deliveryErrorReason {
            // The answer came after the acceptance window: the notification already counted as accepted, and the
            // gateway discarded one that was reported delivered. Logged and counted so that operators raise the
            // window. (For status 10 that is ordinary: the last one processed was accepted by the window already.)
            Counter(label: "pushworker_late_error_responses_total", dimensions: [("app", "\(endpoint.key)"), ("reason", reason.rawValue)])
                .increment()
            logger.warning("error response names a notification no longer in flight (answered after the acceptance window?)", metadata: [
                "app": "\(endpoint.key)", "status": "\(response.status)", "identifier": "\(settlement.unmatchedIdentifier ?? 0)",
            ])
        }
        if !settlement.resend.isEmpty {
            resends[response.status == .shutdown ? "shutdown" : "error_response"]?.increment(by: Int64(settlement.resend.count))
        }
        report(settlement.outcomes)
        self.wake(wake)
    }

    func report(_ outcomes: [DeliveryOutcome]) {
        if !outcomes.isEmpty { onOutcomes(outcomes) }
    }

    private func wake(_ handlers: [NIOLoopBound<GatewayConnectionHandler>]) {
        for handler in handlers { handler.eventLoop.execute { handler.value.pump() } }
    }

    // MARK: Connections

    func connectionReady(slot: Int, handler: NIOLoopBound<GatewayConnectionHandler>) {
        let now = shell.clock.now
        let (proceed, ready) = shell.withLock { s in
            (s.machine.connectionReady(slot: slot, connection: handler, now: now), s.machine.readyConnections)
        }
        shell.recordReady(ready)
        down.store(false, ordering: .relaxed)
        if !proceed { handler.value.stop() }
    }

    func stillHealthy(at now: ContinuousClock.Instant) {
        shell.withLock { $0.machine.stillHealthy(at: now) }
    }

    func connectionEnded(
        slot: Int, reason: ConnectionEnd, settlement: ConnectionStateMachine<ContinuousClock.Instant>.Settlement, accepted: Int
    ) {
        let now = shell.clock.now
        let lostUnaccepted = !settlement.resend.isEmpty || settlement.outcomes.contains { $0.result != .accepted }
        let (action, window, waiter) = shell.withLock { s in
            let action = s.machine.connectionEnded(
                slot: slot, reason: reason, resend: settlement.resend, lostUnaccepted: lostUnaccepted,
                accepted: accepted, now: now)
            if let next = action.next { schedule(next, in: &s) }
            // Under the lock: whoever reads the status (refused credentials, say) then sees the pool down too.
            if action.down { down.store(true, ordering: .relaxed) }
            return (action, s.machine.window.limit, s.takeStopWaiter())
        }
        shell.recordReady(action.readyConnections)
        windowGauge.record(window)
        if case .failedBeforeReady(let why) = reason {
            logger.warning("gateway connection failed", metadata: [
                "app": "\(endpoint.key)", "gateway": "\(endpoint.gatewayHost):\(endpoint.gatewayPort)", "error": "\(why)",
                "retry_in_ms": "\(action.backoff.nanoseconds / 1_000_000)",
            ])
        } else if case .handshakeRefused(let why) = reason {
            logger.error("gateway refused the TLS handshake (check the app's certificate, key and the CA file)", metadata: [
                "app": "\(endpoint.key)", "gateway": "\(endpoint.gatewayHost):\(endpoint.gatewayPort)", "error": "\(why)",
                "retry_in_ms": "\(action.backoff.nanoseconds / 1_000_000)",
            ])
        }
        if reason != .stopped, !settlement.resend.isEmpty {
            resends["connection_closed"]?.increment(by: Int64(settlement.resend.count))
        }
        report(settlement.outcomes + action.outcomes)
        wake(action.wake)
        waiter?.resume()
    }

    private func schedule(_ timer: Machine.ConnectTimer, in s: inout Shell.State) {
        shell.schedule(timer, in: &s) { [self] slot in open(slot: slot) }
    }

    private func open(slot: Int) {
        let host = endpoint.gatewayHost
        ClientBootstrap.gateway(
            group: group, connectTimeout: .nanoseconds(configuration.connectTimeout.nanoseconds), tls: tls, host: host
        ) { sync in
            try sync.addHandler(ByteToMessageHandler(ErrorResponseDecoder()))
            try sync.addHandler(GatewayConnectionHandler(owner: self, slot: slot))
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
        await shell.stop { handlers in
            for handler in handlers { handler.eventLoop.execute { handler.value.stop() } }
        }
    }

    /// No connection is ready and the last attempt failed.
    var isDown: Bool { down.load(ordering: .relaxed) }

    var status: PoolStatus { shell.status(written: writes.load(ordering: .relaxed)) }
}

extension ClientBootstrap {
    /// A gateway connection's bootstrap (both transports): the connect timeout, TCP keepalive, no Nagle, TLS first
    /// in the pipeline (the host as server name unless it is an IP address), then what `handlers` adds.
    static func gateway(
        group: any EventLoopGroup, connectTimeout: TimeAmount, tls: NIOSSLContext, host: String,
        handlers: @escaping @Sendable (ChannelPipeline.SynchronousOperations) throws -> Void
    ) -> ClientBootstrap {
        let serverName = (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
        return ClientBootstrap(group: group)
            .connectTimeout(connectTimeout)
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(try NIOSSLClientHandler(context: tls, serverHostname: serverName))
                    try handlers(sync)
                }
            }
    }
}
