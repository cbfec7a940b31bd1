import Foundation
import Logging
import Metrics
import NIOCore
import NIOSSL
import PushCollections
import PushCore
import Synchronization

/// The HTTP/2 connections of one (app, environment) (SPEC section 9): `connections` long-lived connections pulling
/// from one queue, in which resends stand before new notifications. Each response is final for its notification
/// or sends it again (``HTTP2ResponsePolicy``); connections that fail or are refused reconnect with the binary
/// transport's backoff and connect cap; a GOAWAY or 503 Shutdown retires a connection and its replacement is opened.
final class HTTP2Pool: Sendable {
    let endpoint: AppEndpoint
    private let http2: HTTP2Endpoint
    private let configuration: DeliveryConfiguration
    private let policy: HTTP2ResponsePolicy
    private let tokens: ProviderTokenCache?
    private let tls: NIOSSLContext
    private let group: any EventLoopGroup
    private let logger: Logger
    private let onOutcomes: @Sendable ([DeliveryOutcome]) -> Void
    private let sendCheck: SendCheck?
    private let state: Mutex<State>
    private let down = Atomic<Bool>(false)
    private let metrics: HTTP2PoolMetrics

    private enum Slot {
        case idle
        case connecting
        case ready(NIOLoopBound<HTTP2ClientConnection>, any EventLoop)
        case draining
    }

    private struct State {
        var queue = ChunkedQueue<HTTP2Delivery>()
        var slots: [Slot]
        var backoff: Backoff<ContinuousClock.Instant>
        var limiter: ConnectRateLimiter<ContinuousClock.Instant>
        var stopped = false
        var attempts = 0
        var everConnected = false
        var lastError: String?
        var credentialsRefused: String?
        var written = 0
        /// Deliveries waiting for a delayed resend (429, 5xx): they count as held.
        var delayed = 0
        var channels: [ObjectIdentifier: any Channel] = [:]
        /// How many streams each connection may hold (AIMD): halved after a connection is lost with streams open,
        /// one more per success, up to `max_concurrent_streams`. Without it, the requests a cut connection held
        /// all go out again at once on the next one and meet its cut together again: a connection that fails
        /// every N requests would fail the same batch until `max_attempts` ran out.
        var streamWindow: Int
        /// Responses by status and reason (their counters, made on first use).
        var responseCounters: [ResponseKey: Counter] = [:]
        /// The retry delay of each device token that drew 429 TooManyRequests.
        var pacing: TooManyRequestsPacing

        mutating func responseCounter(_ key: ResponseKey, app: String) -> Counter {
            if let c = responseCounters[key] { return c }
            let c = Counter(label: "pushworker_http2_responses_total", dimensions: [
                ("app", app), ("status", String(key.status)), ("reason", key.reason ?? ""),
            ])
            responseCounters[key] = c
            return c
        }
    }

    /// A response's status and reason: what its counter is labelled with. A reason that is not one of Apple's is
    /// counted as `other` (the delivery error still carries it as sent), so a gateway that varies its reasons cannot
    /// make a counter, and a line of `/metrics`, per response.
    struct ResponseKey: Hashable {
        var status: Int
        var reason: String?

        init(status: Int, reason: String?) {
            self.status = status
            self.reason = reason
        }

        init(_ response: APNsResponse) {
            status = response.status
            reason = response.reason.map { APNsReason(rawValue: $0)?.rawValue ?? "other" }
        }
    }

    /// - Parameter tokens: the provider token of the app's (team, key), shared with the other apps it signs
    ///   (token authentication; nil with certificates).
    init(
        endpoint: AppEndpoint, configuration: DeliveryConfiguration, group: any EventLoopGroup, logger: Logger,
        tokens: ProviderTokenCache?, sendCheck: SendCheck? = nil, onOutcomes: @escaping @Sendable ([DeliveryOutcome]) -> Void
    ) throws {
        guard let http2 = endpoint.http2 else { preconditionFailure("not an http2 endpoint") }
        self.sendCheck = sendCheck
        self.endpoint = endpoint
        self.http2 = http2
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.onOutcomes = onOutcomes
        policy = HTTP2ResponsePolicy(
            maxAttempts: configuration.maxAttempts, initialDelay: configuration.reconnectInitial, maximumDelay: configuration.reconnectMaximum)
        tls = try endpoint.tlsContext()
        metrics = HTTP2PoolMetrics(app: "\(endpoint.key)", connections: endpoint.connections)
        self.tokens = tokens
        let now = ContinuousClock.now
        state = Mutex(State(
            slots: Array(repeating: .idle, count: endpoint.connections),
            backoff: Backoff(
                initial: configuration.reconnectInitial, maximum: configuration.reconnectMaximum,
                resetAfter: configuration.reconnectResetAfter, seed: configuration.jitterSeed),
            limiter: ConnectRateLimiter(perMinute: configuration.maxNewConnectionsPerMinute, burst: configuration.connectBurst, now: now),
            streamWindow: http2.maxConcurrentStreams,
            pacing: TooManyRequestsPacing(initialDelay: configuration.reconnectInitial, maximumDelay: configuration.reconnectMaximum)))
    }

    /// Opens every connection.
    func start() {
        for slot in 0..<endpoint.connections { connect(slot: slot, after: .zero) }
    }

    var isDown: Bool { down.load(ordering: .relaxed) }

    /// The provider token cache (token authentication), for its metrics.
    var tokenCache: ProviderTokenCache? { tokens }

    var status: PoolStatus {
        state.withLock { s in
            let ready = s.slots.filter { if case .ready = $0 { true } else { false } }.count
            return PoolStatus(
                readyConnections: ready, pending: s.queue.count + s.delayed, connectionAttempts: s.attempts,
                lastError: s.lastError, consecutiveFailures: s.backoff.consecutiveFailures,
                lateErrorResponses: 0, written: s.written, everConnected: s.everConnected,
                credentialsRefused: false, lastEnd: nil, events: [], refusedByAPI: s.credentialsRefused)
        }
    }

    // MARK: Submitting

    func submit<C: Collection<HTTP2Delivery>>(_ deliveries: C) {
        state.withLock { $0.queue.append(contentsOf: deliveries) }
        pumpAll()
    }

    /// Asks every ready connection to take what it can (on its event loop).
    private func pumpAll() {
        let ready: [(Int, NIOLoopBound<HTTP2ClientConnection>, any EventLoop)] = state.withLock { s in
            s.slots.enumerated().compactMap { index, slot in
                if case .ready(let handler, let loop) = slot { (index, handler, loop) } else { nil }
            }
        }
        for (slot, handler, loop) in ready {
            loop.execute { [self] in pump(handler.value, slot: slot) }
        }
    }

    /// On the connection's event loop: hands it as many queued deliveries as it has streams for.
    private func pump(_ connection: HTTP2ClientConnection, slot: Int) {
        defer {
            metrics.streams[slot].record(connection.openStreams)
            if let limit = connection.serverStreamLimit { metrics.streamLimit[slot].record(min(limit, Int(Int32.max))) }
        }
        // One lock: the stream window applied, then as many queued deliveries as the connection has streams for.
        var batch: [HTTP2Delivery] = []
        repeat {
            batch = state.withLock { s in
                connection.streamCap = s.streamWindow
                let n = min(connection.available, s.queue.count)
                guard n > 0 else { return [] }
                s.written += n
                return s.queue.takeFirst(n)
            }
            guard !batch.isEmpty else { return }
            // Those expired meanwhile and those the send check stops (token suppression) end here; the rest go out.
            let unixNow = Int64(Date().timeIntervalSince1970)
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
            if !stopped.isEmpty {
                state.withLock { $0.written -= stopped.count }
                onOutcomes(stopped)
            }
            batch = kept
        } while batch.isEmpty
        let rest = connection.submit(batch)
        if !rest.isEmpty {
            state.withLock { s in
                s.written -= rest.count
                s.queue.prepend(contentsOf: rest)
            }
        }
    }

    // MARK: Connections

    private func connect(slot: Int, after delay: Duration) {
        let wait: Duration? = state.withLock { s in
            guard !s.stopped else { return nil }
            s.slots[slot] = .connecting
            return max(delay, s.limiter.acquire(now: .now))
        }
        guard let wait else { return }
        let loop = group.next()
        loop.scheduleTask(in: .nanoseconds(wait.nanoseconds)) { [self] in
            open(slot: slot)
        }
    }

    private func open(slot: Int) {
        let stopped = state.withLock { s in
            if !s.stopped { s.attempts += 1 }
            return s.stopped
        }
        guard !stopped else { return }
        var settings = HTTP2ClientConnection.Settings(
            maxConcurrentStreams: http2.maxConcurrentStreams, oneStreamUntilSuccess: tokens != nil,
            requestTimeout: .nanoseconds(configuration.requestTimeout.nanoseconds))
        settings.authority = http2.authority
        let tokens = self.tokens
        let metrics = self.metrics
        let timeout = configuration.connectTimeout
        HTTP2ClientConnection.connect(
            host: http2.host, port: http2.port, tls: tls, group: group,
            connectTimeout: .nanoseconds(timeout.nanoseconds), settings: settings,
            authorization: {
                guard let tokens else { return nil }
                let now = Int64(Date().timeIntervalSince1970)
                let token = try? tokens.token(now: now)
                metrics.tokenUsed(tokens, now: now)
                return token
            },
            onEvent: { [self] event in handle(event, slot: slot) }
        ).whenComplete { [self] result in
            switch result {
            case .success(let (channel, handler)):
                let proceed = state.withLock { s in
                    guard !s.stopped else { return false }
                    s.slots[slot] = .ready(handler, channel.eventLoop)
                    s.channels[ObjectIdentifier(channel)] = channel
                    s.everConnected = true
                    s.lastError = nil
                    s.backoff.connected(at: .now)
                    return true
                }
                down.store(false, ordering: .relaxed)
                guard proceed else {
                    channel.close(promise: nil)
                    return
                }
                // The server's SETTINGS may have come before the slot was ready: take what waits now.
                pump(handler.value, slot: slot)
                // Closing removes the channel from the list.
                channel.closeFuture.whenComplete { [self] _ in
                    _ = state.withLock { $0.channels.removeValue(forKey: ObjectIdentifier(channel)) }
                }
            case .failure(let error):
                let delay: Duration = state.withLock { s in
                    s.lastError = "\(error)"
                    return s.backoff.failed()
                }
                down.store(true, ordering: .relaxed)
                logger.warning("http2 connection failed", metadata: ["app": "\(endpoint.key)", "error": "\(error)"])
                connect(slot: slot, after: delay)
            }
        }
    }

    /// A connection's event, on its event loop.
    private func handle(_ event: HTTP2ConnectionEvent, slot: Int) {
        let now = Int64(Date().timeIntervalSince1970)
        switch event {
        case .capacity:
            let handler: NIOLoopBound<HTTP2ClientConnection>? = state.withLock { s in
                if case .ready(let handler, _) = s.slots[slot] { handler } else { nil }
            }
            if let handler { pump(handler.value, slot: slot) }
        case .answered(let answers):
            var decisions: [(HTTP2Delivery, HTTP2ResponsePolicy.Decision)] = []
            decisions.reserveCapacity(answers.count)
            var counts: [ResponseKey: Int] = [:]
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
                    counts[ResponseKey(response), default: 0] += 1
                }
                if let r = effects.credentialsRefused { refused = r } else if response.status == 200 { successes += 1 }
                if effects.renewToken, let tokens, let rejected = delivery.authorization {
                    _ = try? tokens.renew(rejected: rejected, now: now)
                }
                retire = retire || effects.retireConnection
                if effects.tooManyRequests { tooManyRequests.append(decisions.count) }
                decisions.append((delivery, decision))
            }
            // One lock per batch: the counters, what the responses say of the credentials and the stream window, and
            // the 429s' device tokens.
            let maximum = http2.maxConcurrentStreams
            let counters: [(Counter, Int)] = state.withLock { s in
                if let refused {
                    s.credentialsRefused = refused
                } else if successes > 0 {
                    s.credentialsRefused = nil
                    s.streamWindow = min(maximum, s.streamWindow + successes)
                }
                if !tooManyRequests.isEmpty {
                    let instant = ContinuousClock.now
                    for i in tooManyRequests {
                        let delay = s.pacing.tooManyRequests(for: decisions[i].0.request.token, now: instant)
                        if case .resend = decisions[i].1 { decisions[i].1 = .resend(delay: delay) }
                    }
                }
                if plainSuccesses > 0 { counts[ResponseKey(status: 200, reason: nil), default: 0] += plainSuccesses }
                return counts.map { key, n in (s.responseCounter(key, app: metrics.app), n) }
            }
            for (counter, n) in counters { counter.increment(by: Int64(n)) }
            metrics.latency.record(latencies)
            if let refused {
                logger.error("the provider API refused the app's credentials", metadata: ["app": "\(endpoint.key)", "reason": "\(refused)"])
            }
            if retire || refused != nil { self.retire(slot: slot) }
            apply(decisions)
        case .unprocessed(let deliveries, let reason):
            apply(deliveries.map { d in
                var d = d
                let decision = policy.unprocessed(&d, reason: reason, now: now)
                return (d, decision)
            })
        case .lost(let deliveries, let reason):
            if deliveries.count > 1 {
                state.withLock { s in s.streamWindow = max(1, min(s.streamWindow, deliveries.count) / 2) }
            }
            apply(deliveries.map { d in
                var d = d
                let decision = policy.lost(&d, reason: reason, now: now)
                return (d, decision)
            })
        case .draining:
            state.withLock { s in if case .ready = s.slots[slot] { s.slots[slot] = .draining } }
            pumpAll()
        case .connectionError(let error):
            metrics.connectionErrors(error.code).increment()
            logger.warning("the provider API broke HTTP/2; the connection is closed", metadata: [
                "app": "\(endpoint.key)", "code": "\(error.code.name)", "detail": "\(error.detail)",
            ])
        case .closed:
            metrics.streams[slot].record(0)
            let (reconnect, delay): (Bool, Duration) = state.withLock { s in
                s.slots[slot] = .idle
                guard !s.stopped else { return (false, .zero) }
                // Refused credentials back the connection off; a retired or drained one is replaced at once (the
                // connect cap still applies).
                return (true, s.credentialsRefused != nil ? s.backoff.failed() : .zero)
            }
            if reconnect { connect(slot: slot, after: delay) }
        }
    }

    private func retire(slot: Int) {
        let handler: NIOLoopBound<HTTP2ClientConnection>? = state.withLock { s in
            guard case .ready(let handler, _) = s.slots[slot] else { return nil }
            s.slots[slot] = .draining
            return handler
        }
        handler?.value.retire()
    }

    /// Carries out decisions: outcomes to the engine, resends to the queue's front (delayed ones later).
    private func apply(_ decisions: [(HTTP2Delivery, HTTP2ResponsePolicy.Decision)]) {
        // Once stopped, nothing has an outcome any more: `stop` counted it unsettled.
        guard !state.withLock({ $0.stopped }) else { return }
        var outcomes: [DeliveryOutcome] = []
        var now: [HTTP2Delivery] = []
        var later: [(HTTP2Delivery, Duration)] = []
        for (delivery, decision) in decisions {
            switch decision {
            case .final(let outcome): outcomes.append(outcome)
            case .resend(let delay) where delay == .zero: now.append(delivery)
            case .resend(let delay): later.append((delivery, delay))
            }
        }
        if !outcomes.isEmpty { onOutcomes(outcomes) }
        if !now.isEmpty {
            state.withLock { $0.queue.prepend(contentsOf: now) }
            pumpAll()
        }
        guard !later.isEmpty else { return }
        state.withLock { $0.delayed += later.count }
        for (delivery, delay) in later {
            group.next().scheduleTask(in: .nanoseconds(delay.nanoseconds)) { [self] in
                let stopped = state.withLock { s in
                    s.delayed -= 1
                    if !s.stopped { s.queue.prepend(delivery) }
                    return s.stopped
                }
                if !stopped { pumpAll() }
            }
        }
    }

    /// Closes every connection; returns how many deliveries had no outcome (queued, delayed or on open streams:
    /// their streams' losses are reported by the closing connections and dropped here).
    func stop() async -> Int {
        let (queued, channels) = state.withLock { s in
            s.stopped = true
            let queued = s.queue.count + s.delayed
            s.queue.removeAll()
            return (queued, Array(s.channels.values))
        }
        var open = 0
        for channel in channels {
            open += (try? await channel.eventLoop.submit {
                (try? channel.pipeline.syncOperations.handler(type: HTTP2ClientConnection.self))?.openStreams ?? 0
            }.get()) ?? 0
            try? await channel.close()
        }
        return queued + open
    }
}

/// The HTTP/2 pool's metrics (docs/monitoring.md): responses by status and reason are made as they come.
final class HTTP2PoolMetrics: Sendable {
    /// Streams open per connection slot.
    let streams: [Gauge]
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS per connection slot.
    let streamLimit: [Gauge]
    /// Seconds since the provider token in use was issued.
    let tokenAge: Gauge
    /// Follows the token cache's renewal count.
    let tokenRenewals: FollowingCounter
    /// From a stream's opening to its response.
    let latency: LatencyHistogram
    /// The app's label value.
    let app: String
    /// Connections this side ended for a broken rule or limit (SPEC section 13), by GOAWAY code.
    private let errorCounters: [HTTP2Wire.ErrorCode: Counter]

    func connectionErrors(_ code: HTTP2Wire.ErrorCode) -> Counter { errorCounters[code]! }

    /// A token was taken for a batch of requests: its age, and the renewals since the last look.
    func tokenUsed(_ tokens: ProviderTokenCache, now: Int64) {
        if let age = tokens.age(now: now) { tokenAge.record(age) }
        tokenRenewals.follow(tokens.renewalCount)
    }

    init(app: String, connections: Int) {
        self.app = app
        streams = (0..<connections).map {
            Gauge(label: "pushworker_http2_streams_open", dimensions: [("app", app), ("connection", String($0))])
        }
        streamLimit = (0..<connections).map {
            Gauge(label: "pushworker_http2_server_stream_limit", dimensions: [("app", app), ("connection", String($0))])
        }
        tokenAge = Gauge(label: "pushworker_provider_token_age_seconds", dimensions: [("app", app)])
        tokenRenewals = FollowingCounter(Counter(label: "pushworker_provider_token_renewals_total", dimensions: [("app", app)]))
        latency = LatencyHistograms.process.histogram("pushworker_http2_response_latency_seconds", labels: [("app", app)])
        var errorCounters: [HTTP2Wire.ErrorCode: Counter] = [:]
        for code in HTTP2Wire.ErrorCode.allCases {
            errorCounters[code] = Counter(label: "pushworker_http2_connection_errors_total", dimensions: [("app", app), ("code", code.name)])
        }
        self.errorCounters = errorCounters
    }
}
