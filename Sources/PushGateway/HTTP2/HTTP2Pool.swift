import Foundation
import Logging
import NIOCore
import NIOSSL
import PushCore
import Synchronization

/// The HTTP/2 connections of one (app, environment) (SPEC section 9): `connections` long-lived connections pulling
/// from one queue, in which resends stand before new notifications. Each response is final for its notification
/// or sends it again (``HTTP2ResponsePolicy``), at once or after a delay; connections that fail, are refused or close
/// having carried nothing reconnect with the binary transport's backoff and connect cap; a GOAWAY or 503 Shutdown
/// retires a connection, and its replacement opens once it has closed.
///
/// A shell over ``PoolStateMachine`` (with ``StreamWindow`` as each connection's capacity), like ``ConnectionPool``:
/// the machine decides under one lock; the pool opens and closes channels, schedules attempts and delayed resends,
/// hands requests to connections on their event loops, applies the response policy and keeps the metrics.
final class HTTP2Pool: Sendable {
    typealias Shell = PoolShell<Connection, HTTP2Delivery, StreamWindow, Extra>
    typealias Machine = Shell.Machine

    /// A connection the machine holds: its slot, its handler on its event loop, and its channel (closed on stop).
    struct Connection: Sendable {
        let slot: Int
        let handler: NIOLoopBound<HTTP2ClientConnection>
        let channel: any Channel
    }

    /// What the HTTP/2 pool keeps beside the machine, under its lock.
    struct Extra: Sendable {
        /// The retry delay of each device token that drew 429 TooManyRequests.
        var pacing: TooManyRequestsPacing
        /// Per slot: whether its connection was handed requests (one that closes having carried none backs off).
        var carried: [Bool]
        /// Connections whose TLS handshake is under way, by slot (closed on stop).
        var opening: [Int: Connection] = [:]
    }

    let endpoint: AppEndpoint
    private let http2: HTTP2Endpoint
    private let configuration: DeliveryConfiguration
    private let policy: HTTP2ResponsePolicy
    private let tokens: ProviderTokenCache?
    private let tls: NIOSSLContext
    private var group: any EventLoopGroup { shell.group }
    private let logger: Logger
    private let onOutcomes: @Sendable ([DeliveryOutcome]) -> Void
    private let sendCheck: SendCheck?
    private let shell: Shell
    /// UNIX seconds: expirations, token ages.
    private let wallClock: @Sendable () -> Int64
    private let down = Atomic<Bool>(false)
    private let written = Atomic<Int>(0)
    private let metrics: HTTP2PoolMetrics

    /// - Parameter tokens: the provider token of the app's (team, key), shared with the other apps it signs
    ///   (token authentication; nil with certificates).
    init(
        endpoint: AppEndpoint, configuration: DeliveryConfiguration, group: any EventLoopGroup, logger: Logger,
        tokens: ProviderTokenCache?, sendCheck: SendCheck? = nil,
        wallClock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) },
        onOutcomes: @escaping @Sendable ([DeliveryOutcome]) -> Void
    ) throws {
        guard let http2 = endpoint.http2 else { preconditionFailure("not an http2 endpoint") }
        self.sendCheck = sendCheck
        self.endpoint = endpoint
        self.http2 = http2
        self.configuration = configuration
        self.logger = logger
        self.onOutcomes = onOutcomes
        self.wallClock = wallClock
        policy = HTTP2ResponsePolicy(
            maxAttempts: configuration.maxAttempts, initialDelay: configuration.reconnectInitial,
            maximumDelay: configuration.reconnectMaximum)
        tls = try endpoint.tlsContext()
        metrics = HTTP2PoolMetrics(app: "\(endpoint.key)", connections: endpoint.connections)
        self.tokens = tokens
        let now = ContinuousClock.now
        let machine = Machine(
            connections: endpoint.connections,
            backoff: Backoff(
                initial: configuration.reconnectInitial, maximum: configuration.reconnectMaximum,
                resetAfter: configuration.reconnectResetAfter, seed: configuration.jitterSeed),
            limiter: ConnectRateLimiter(
                perMinute: configuration.maxNewConnectionsPerMinute, burst: configuration.connectBurst, now: now),
            rejectionLimiter: ConnectRateLimiter(
                perMinute: configuration.maxReconnectsAfterRejectionPerMinute, burst: configuration.rejectionConnectBurst,
                now: now),
            window: StreamWindow(maximum: http2.maxConcurrentStreams))
        let extra = Extra(
            pacing: TooManyRequestsPacing(initialDelay: configuration.reconnectInitial, maximumDelay: configuration.reconnectMaximum),
            carried: Array(repeating: false, count: machine.slots.count))
        shell = Shell(machine: machine, extra: extra, group: group, app: "\(endpoint.key)")
    }

    /// Opens every connection (under the connect cap).
    func start() {
        shell.start { [self] slot in open(slot: slot) }
    }

    /// No connection is ready and the last attempt failed.
    var isDown: Bool { down.load(ordering: .relaxed) }

    /// The provider token cache (token authentication), for its metrics.
    var tokenCache: ProviderTokenCache? { tokens }

    var status: PoolStatus { shell.status(written: written.load(ordering: .relaxed)) }

    // MARK: Work

    /// Queues new deliveries and wakes connections that wait for work.
    func submit<C: Collection<HTTP2Delivery> & Sendable>(_ deliveries: C) {
        wake(shell.withLock { $0.machine.submit(deliveries) })
    }

    private func wake(_ connections: [Connection]) {
        for connection in connections {
            connection.handler.eventLoop.execute { [self] in pump(connection.handler.value, slot: connection.slot) }
        }
    }

    /// On the connection's event loop: hands it queued deliveries while it has streams for them. Those expired
    /// meanwhile and those the send check stops (token suppression) end here.
    private func pump(_ connection: HTTP2ClientConnection, slot: Int) {
        defer {
            metrics.streams[slot].record(connection.openStreams)
            if let limit = connection.serverStreamLimit { metrics.streamLimit[slot].record(min(limit, Int(Int32.max))) }
        }
        while true {
            // Taking nothing (an empty queue) leaves the slot waiting to be woken by the next submit.
            var batch = shell.withLock { s in
                let batch = s.machine.take(max: connection.available, slot: slot, held: connection.openStreams)
                if !batch.isEmpty { s.extra.carried[slot] = true }
                return batch
            }
            guard !batch.isEmpty else { return }
            let unixNow = wallClock()
            var stopped: [DeliveryOutcome] = []
            batch.removeAll { delivery in
                guard let expired = policy.expiredBeforeSending(delivery, now: unixNow) else { return false }
                stopped.append(expired)
                return true
            }
            let (kept, suppressed) = batch.passing(sendCheck, app: endpoint.key) {
                SendCandidate(ticket: $0.ticket, sends: $0.sends, tokenSource: $0.tokenSource)
            }
            stopped += suppressed
            if !stopped.isEmpty { onOutcomes(stopped) }
            guard !kept.isEmpty else { continue }
            let rest = connection.submit(kept)
            written.add(kept.count - rest.count, ordering: .relaxed)
            if !rest.isEmpty {
                // The connection took fewer than it had room for (a path check before reuse): the rest goes back.
                wake(shell.withLock { $0.machine.requeue(rest) })
                return
            }
        }
    }

    // MARK: Responses

    /// A connection's event, on its event loop.
    private func handle(_ event: HTTP2ConnectionEvent, slot: Int) {
        let now = wallClock()
        switch event {
        case .ready:
            connectionReady(slot: slot)
        case .capacity:
            if let connection = shell.withLock({ $0.machine.connection(in: slot) }) {
                pump(connection.handler.value, slot: slot)
            }
        case .answered(let answers):
            answered(answers, slot: slot, now: now)
        case .unprocessed(let deliveries, let reason):
            if requeueIfStopped(deliveries) { return }
            apply(deliveries.map { d in
                var d = d
                let decision = policy.unprocessed(&d, reason: reason, now: now)
                return (d, decision)
            })
        case .lost(let deliveries, let reason):
            if requeueIfStopped(deliveries) { return }
            if deliveries.count > 1 { shell.withLock { $0.machine.streamsLost(deliveries.count) } }
            apply(deliveries.map { d in
                var d = d
                let decision = policy.lost(&d, reason: reason, now: now)
                return (d, decision)
            })
        case .draining:
            shell.withLock { $0.machine.connectionDraining(slot: slot) }
        case .connectionError(let error):
            metrics.connectionErrors(error.code).increment()
            logger.warning("the provider API broke HTTP/2; the connection is closed", metadata: [
                "app": "\(endpoint.key)", "code": "\(error.code.name)", "detail": "\(error.detail)",
            ])
        case .closed(let tlsRefusal):
            connectionEnded(slot: slot, failure: tlsRefusal.map { .handshakeRefused($0) })
        }
    }

    /// Responses from one read: each one's decision, and in one lock what they say of the credentials, the stream
    /// window and the 429s' device tokens.
    private func answered(_ answers: [HTTP2Answer], slot: Int, now: Int64) {
        var decisions: [(HTTP2Delivery, HTTP2ResponsePolicy.Decision)] = []
        decisions.reserveCapacity(answers.count)
        var counts: [HTTP2PoolMetrics.ResponseKey: Int] = [:]
        var successes = 0
        var plainSuccesses = 0
        var refused: String?
        var retire = false
        /// Answers 429, by their index in `decisions`: their resends wait their token's delay.
        var tooManyRequests: [Int] = []
        var latencies = LatencyHistogram.Batch()
        for answer in answers {
            var delivery = answer.delivery
            let response = answer.response
            latencies.record(nanoseconds: answer.latency)
            let (decision, effects) = policy.decide(response, for: &delivery, now: now, nowMilliseconds: now * 1000)
            if response.status == 200 && response.reason == nil {
                plainSuccesses += 1  // most answers: counted apart, without a lookup each
            } else {
                counts[HTTP2PoolMetrics.ResponseKey(response), default: 0] += 1
            }
            if let r = effects.credentialsRefused { refused = r } else if response.status == 200 { successes += 1 }
            if effects.renewToken, let tokens, let rejected = delivery.authorization {
                _ = try? tokens.renew(rejected: rejected, now: now)
            }
            retire = retire || effects.retireConnection
            if effects.tooManyRequests { tooManyRequests.append(decisions.count) }
            decisions.append((delivery, decision))
        }
        let instant = shell.clock.now
        shell.withLock { s in
            s.machine.answered(successes: successes, refused: refused)
            if successes > 0 { s.machine.stillHealthy(at: instant) }
            for i in tooManyRequests {
                let delay = s.extra.pacing.tooManyRequests(for: decisions[i].0.request.token, now: instant)
                if case .resend = decisions[i].1 { decisions[i].1 = .resend(delay: delay) }
            }
        }
        if plainSuccesses > 0 { counts[HTTP2PoolMetrics.ResponseKey(status: 200, reason: nil), default: 0] += plainSuccesses }
        metrics.countResponses(counts)
        metrics.latency.record(latencies)
        if let refused {
            logger.error("the provider API refused the app's credentials", metadata: ["app": "\(endpoint.key)", "reason": "\(refused)"])
        }
        if retire || refused != nil { self.retire(slot: slot) }
        apply(decisions)
    }

    /// Once stopping, what a closing connection hands back goes to the queue as it is, to be returned unsent: the
    /// stop is not the notifications' failure. Returns whether it did.
    private func requeueIfStopped(_ deliveries: [HTTP2Delivery]) -> Bool {
        shell.withLock { s in
            guard s.machine.stopped else { return false }
            _ = s.machine.requeue(deliveries)
            return true
        }
    }

    /// On the slot's event loop: its connection takes no new streams and closes once its open ones finish.
    private func retire(slot: Int) {
        let connection: Connection? = shell.withLock { s in
            defer { s.machine.connectionDraining(slot: slot) }
            return s.machine.connection(in: slot)
        }
        connection?.handler.value.retire()
    }

    /// Carries out decisions: outcomes to the engine, resends to the queue's front (delayed ones when their delay is
    /// over).
    private func apply(_ decisions: [(HTTP2Delivery, HTTP2ResponsePolicy.Decision)]) {
        var outcomes: [DeliveryOutcome] = []
        var now: [HTTP2Delivery] = []
        var later: [Duration: [HTTP2Delivery]] = [:]
        for (delivery, decision) in decisions {
            switch decision {
            case .final(let outcome): outcomes.append(outcome)
            case .resend(let delay) where delay == .zero: now.append(delivery)
            case .resend(let delay): later[delay, default: []].append(delivery)
            }
        }
        if !outcomes.isEmpty { onOutcomes(outcomes) }
        guard !now.isEmpty || !later.isEmpty else { return }
        wake(shell.withLock { s in
            for (delay, deliveries) in later {
                if let timer = s.machine.resendLater(deliveries, after: delay) { schedule(timer, in: &s) }
            }
            return s.machine.requeue(now)
        })
    }

    private func schedule(_ resend: Machine.ResendTimer, in s: inout Shell.State) {
        s.timers[resend.timer] = group.next().scheduleTask(in: .nanoseconds(resend.after.nanoseconds)) {
            self.wake(self.shell.withLock { s in
                s.timers[resend.timer] = nil
                return s.machine.resendDue(timer: resend.timer)
            })
        }
    }

    // MARK: Connections

    private func schedule(_ timer: Machine.ConnectTimer, in s: inout Shell.State) {
        shell.schedule(timer, in: &s) { [self] slot in open(slot: slot) }
    }

    private func open(slot: Int) {
        var settings = HTTP2ClientConnection.Settings(
            maxConcurrentStreams: http2.maxConcurrentStreams, oneStreamUntilSuccess: tokens != nil,
            requestTimeout: .nanoseconds(configuration.requestTimeout.nanoseconds))
        settings.authority = http2.authority
        let tokens = self.tokens
        let metrics = self.metrics
        let wallClock = self.wallClock
        HTTP2ClientConnection.connect(
            host: http2.host, port: http2.port, tls: tls, group: group,
            connectTimeout: .nanoseconds(configuration.connectTimeout.nanoseconds), settings: settings,
            authorization: {
                guard let tokens else { return nil }
                let now = wallClock()
                let token = try? tokens.token(now: now)
                metrics.tokenUsed(tokens, now: now)
                return token
            },
            onEvent: { [self] event in handle(event, slot: slot) }
        ).whenComplete { [self] result in
            switch result {
            case .success(let (channel, handler)):
                // Ready once its TLS handshake completes (`.ready`); closed at once if the pool stopped meanwhile.
                let opening = shell.withLock { s in
                    guard !s.machine.stopped else { return false }
                    s.extra.opening[slot] = Connection(slot: slot, handler: handler, channel: channel)
                    return true
                }
                if !opening { channel.close(promise: nil) }
            case .failure(let error):
                connectionEnded(slot: slot, failure: .failedBeforeReady(String(describing: error)))
            }
        }
    }

    /// On the slot's event loop: its connection's TLS handshake completed.
    private func connectionReady(slot: Int) {
        let now = shell.clock.now
        let (connection, proceed, ready): (Connection?, Bool, Int) = shell.withLock { s in
            guard let connection = s.extra.opening.removeValue(forKey: slot) else { return (nil, false, 0) }
            s.extra.carried[slot] = false
            let proceed = s.machine.connectionReady(slot: slot, connection: connection, now: now)
            return (connection, proceed, s.machine.readyConnections)
        }
        guard let connection else { return }
        shell.recordReady(ready)
        down.store(false, ordering: .relaxed)
        guard proceed else {
            connection.channel.close(promise: nil)  // stopping: its close ends the slot
            return
        }
        // The server's SETTINGS may have come already: take what waits now.
        pump(connection.handler.value, slot: slot)
    }

    /// The slot's connection ended: for `failure` when known (a failed connect, a refused certificate), otherwise
    /// for what the pool knows of it (stopping, closed before its handshake completed, refused credentials,
    /// retired, or dropped).
    private func connectionEnded(slot: Int, failure: ConnectionEnd?) {
        let now = shell.clock.now
        let (reason, action, waiter) = shell.withLock { s in
            let wasOpening = s.extra.opening.removeValue(forKey: slot) != nil
            let reason: ConnectionEnd
            if let failure {
                reason = failure
            } else if s.machine.stopped {
                reason = .stopped
            } else if wasOpening {
                reason = .failedBeforeReady("closed before the TLS handshake completed")
            } else if let why = s.machine.refusedByAPI {
                reason = .refusedByAPI(why)
            } else if case .draining = s.machine.slots[slot] {
                reason = .retired
            } else {
                reason = .dropped(carriedNotifications: s.extra.carried[slot])
            }
            s.extra.carried[slot] = false
            let action = s.machine.connectionEnded(
                slot: slot, reason: reason, resend: [], lostUnaccepted: false, accepted: 0, now: now)
            if let next = action.next { schedule(next, in: &s) }
            // Under the lock: whoever reads the status then sees the pool down too.
            if action.down { down.store(true, ordering: .relaxed) }
            return (reason, action, s.takeStopWaiter())
        }
        metrics.streams[slot].record(0)
        shell.recordReady(action.readyConnections)
        switch reason {
        case .failedBeforeReady(let why):
            logger.warning("http2 connection failed", metadata: [
                "app": "\(endpoint.key)", "error": "\(why)", "retry_in_ms": "\(action.backoff.nanoseconds / 1_000_000)",
            ])
        case .handshakeRefused(let why):
            logger.error("the provider API refused the TLS handshake (check the app's certificate, key and the CA file)", metadata: [
                "app": "\(endpoint.key)", "error": "\(why)", "retry_in_ms": "\(action.backoff.nanoseconds / 1_000_000)",
            ])
        default:
            break
        }
        wake(action.wake)
        waiter?.resume()
    }

    // MARK: Stopping

    /// Stops opening connections, closes the open ones (and those still in their TLS handshake), and returns what
    /// has no outcome (queued, waiting for a delayed resend, or on a stream the close cut), for the caller to leave
    /// uncommitted.
    func stop() async -> [HTTP2Delivery] {
        await shell.stop(alsoClosing: { Array($0.opening.values) }) { connections in
            for connection in connections { connection.channel.close(promise: nil) }
        }
    }
}
