import Logging
import Metrics
import NIOCore
import NIOPosix
import PushCore
import Synchronization

/// Turns deliveries into terminal outcomes against the binary gateway (SPEC section 4) or the HTTP/2 provider API
/// (SPEC section 9).
///
/// Asked just before notifications are written (token suppression, SPEC section 10): which of them must not go out
/// after all, each with its outcome. `candidates` are the tickets, the times each was sent before and the tokens.
public typealias SendCheck = @Sendable (_ app: AppKey, _ candidates: [SendCandidate]) -> [(index: Int, outcome: DeliveryOutcome)]

/// A notification about to be written, as a ``SendCheck`` sees it.
public struct SendCandidate: Sendable {
    public var ticket: DeliveryTicket
    /// Times it was sent before.
    public var sends: Int
    public var tokenSource: DeliveryTokenSource

    public init(ticket: DeliveryTicket, sends: Int, tokenSource: DeliveryTokenSource) {
        self.ticket = ticket
        self.sends = sends
        self.tokenSource = tokenSource
    }
}

extension Array {
    /// A batch about to be written, split by the send check: what goes out, and the outcomes of what it stopped.
    func passing(
        _ check: SendCheck?, app: AppKey, _ candidate: (Element) -> SendCandidate
    ) -> (kept: [Element], stopped: [DeliveryOutcome]) {
        guard let check, !isEmpty else { return (self, []) }
        let stopped = check(app, map(candidate))
        guard !stopped.isEmpty else { return (self, []) }
        let dropped = Set(stopped.map(\.index))
        return (enumerated().filter { !dropped.contains($0.offset) }.map(\.element), stopped.map(\.outcome))
    }
}

/// One ``ConnectionPool`` per binary (app, environment), one ``HTTP2Pool`` per HTTP/2 one. ``submit(_:to:)`` waits while `maxInFlight` deliveries are held
/// (backpressure: nothing is dropped, nothing grows without bound). Every submitted delivery ends in exactly one
/// outcome passed to `onOutcomes` (from event-loop threads, in batches; keep the handler quick), unless the engine
/// is stopped first, in which case ``stop()`` hands it back unsettled.
public final class DeliveryEngine: Sendable {
    public let configuration: DeliveryConfiguration
    private let pools: [AppKey: ConnectionPool]
    private let http2Pools: [AppKey: HTTP2Pool]
    private let gate: CapacityGate
    private let idle: IdleSignal
    private let inFlight: Gauge

    public init(
        endpoints: [AppEndpoint], configuration: DeliveryConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "pushworker.gateway"), sendCheck: SendCheck? = nil,
        onOutcomes: @escaping @Sendable ([DeliveryOutcome]) -> Void
    ) throws {
        self.configuration = configuration
        let gate = CapacityGate(capacity: configuration.maxInFlight)
        let idle = IdleSignal()
        let inFlight = Gauge(label: "pushworker_in_flight")
        self.inFlight = inFlight
        self.gate = gate
        self.idle = idle
        let settle: @Sendable ([DeliveryOutcome]) -> Void = { outcomes in
            onOutcomes(outcomes)
            gate.release(outcomes.count)
            let held = gate.held
            inFlight.record(held)
            if held == 0 { idle.signal() }
        }
        var pools: [AppKey: ConnectionPool] = [:]
        var http2Pools: [AppKey: HTTP2Pool] = [:]
        // One provider token per (team, key) for the whole process (SPEC section 9): apps signed by the same key
        // share it, so an expiry renews it once and Apple sees one token, not one per app.
        var tokens: [ProviderTokenCache.Identity: ProviderTokenCache] = [:]
        for endpoint in endpoints {
            if let http2 = endpoint.http2 {
                var cache: ProviderTokenCache?
                if case .token(let teamID, let keyID, let path) = http2.authentication {
                    let identity = ProviderTokenCache.Identity(teamID: teamID, keyID: keyID, signingKeyPath: path)
                    if tokens[identity] == nil {
                        let pem = try String(contentsOfFile: path, encoding: .utf8)
                        tokens[identity] = ProviderTokenCache(
                            key: try ProviderTokenKey(teamID: teamID, keyID: keyID, pem: pem),
                            refreshInterval: Int64(configuration.tokenRefreshSeconds))
                    }
                    cache = tokens[identity]
                }
                http2Pools[endpoint.key] = try HTTP2Pool(
                    endpoint: endpoint, configuration: configuration, group: group, logger: logger, tokens: cache,
                    sendCheck: sendCheck, onOutcomes: settle)
            } else {
                // The simple format's bisection probes groups of suspects; it gets no check (a probe emptied by one
                // would wait for a verdict that never comes).
                pools[endpoint.key] = try ConnectionPool(
                    endpoint: endpoint, configuration: configuration, group: group, logger: logger,
                    sendCheck: endpoint.format == .simple ? nil : sendCheck, onOutcomes: settle)
            }
        }
        self.pools = pools
        self.http2Pools = http2Pools
    }

    /// Opens every pool's connections.
    public func start() {
        for pool in pools.values { pool.start() }
        for pool in http2Pools.values { pool.start() }
    }

    /// The apps this engine can deliver to.
    public var apps: [AppKey] { Array(pools.keys) + Array(http2Pools.keys) }

    /// Hands deliveries to the HTTP/2 pool for `app` at once (see ``enqueue(_:to:)``).
    public func enqueue(_ deliveries: [HTTP2Delivery], to app: AppKey) {
        guard let pool = http2Pools[app] else { preconditionFailure("no http2 pool for \(app)") }
        gate.take(deliveries.count)
        pool.submit(deliveries)
    }

    /// Hands HTTP/2 deliveries to the pool for `app`, waiting while the engine holds `maxInFlight` of them.
    public func submit(_ deliveries: [HTTP2Delivery], to app: AppKey) async throws {
        guard let pool = http2Pools[app] else { preconditionFailure("no http2 pool for \(app)") }
        try await inChunks(deliveries) { pool.submit($0) }
    }

    /// Hands `deliveries` over a quarter of the capacity at a time, each chunk once the gate admits it.
    private func inChunks<D>(_ deliveries: [D], _ submit: (ArraySlice<D>) -> Void) async throws {
        var rest = deliveries[...]
        while !rest.isEmpty {
            let chunk = rest.prefix(max(1, min(rest.count, gate.capacity / 4)))
            try await gate.acquire(chunk.count)
            inFlight.record(gate.held)
            submit(chunk)
            rest = rest.dropFirst(chunk.count)
        }
    }

    /// The provider-token cache of an HTTP/2 app with token authentication (its age and renewals are metrics).
    public func providerTokens(of app: AppKey) -> ProviderTokenCache? { http2Pools[app]?.tokenCache }

    /// Hands deliveries to the pool for `app` at once, however many the engine holds: for a caller that bounds what
    /// it holds itself (the worker's in-flight ledger pauses fetching). One lock for the batch.
    public func enqueue(_ deliveries: [Delivery], to app: AppKey) {
        guard let pool = pools[app] else { preconditionFailure("no pool for \(app)") }
        gate.take(deliveries.count)
        pool.submit(deliveries)
    }

    /// Whether the app's gateway is down: no connection ready and the last attempt failed.
    public func isDown(_ app: AppKey) -> Bool { pools[app]?.isDown ?? http2Pools[app]?.isDown ?? false }

    /// Hands deliveries to the pool for `app`, waiting while the engine holds `maxInFlight` of them.
    /// The app must be one the engine was made with.
    public func submit(_ deliveries: [Delivery], to app: AppKey) async throws {
        guard let pool = pools[app] else { preconditionFailure("no pool for \(app)") }
        try await inChunks(deliveries) { pool.submit($0) }
    }

    /// Waits until every submitted delivery has its outcome, or until `timeout` has passed. Returns whether
    /// everything was settled.
    public func drain(timeout: Duration) async -> Bool {
        if gate.held == 0 { return true }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { [idle, gate] in
                await idle.wait { gate.held == 0 }
                return true
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let first = await group.next()!
            group.cancelAll()
            return first && gate.held == 0
        }
    }

    /// Closes every connection and returns the deliveries that got no outcome (pending or in flight), to be left
    /// uncommitted: they are delivered after a restart.
    public func stop() async -> [Delivery] {
        await stopAll().binary
    }

    /// Stops every pool: the binary deliveries without an outcome, and how many HTTP/2 ones had none.
    public func stopAll() async -> (binary: [Delivery], http2: Int) {
        var unsettled: [Delivery] = []
        for pool in pools.values { unsettled += await pool.stop() }
        var http2 = 0
        for pool in http2Pools.values { http2 += await pool.stop() }
        gate.release(unsettled.count + http2)
        idle.signal()
        return (unsettled, http2)
    }

    /// Deliveries submitted and not yet settled.
    public var held: Int { gate.held }
    /// The most ever held at once (never above `maxInFlight`).
    public var peakHeld: Int { gate.peakHeld }

    public func status(of app: AppKey) -> PoolStatus? { pools[app]?.status ?? http2Pools[app]?.status }
}

/// Wakes waiters when a condition may have become true.
final class IdleSignal: Sendable {
    private let waiters = Mutex<[CheckedContinuation<Void, Never>]>([])

    func signal() {
        let ready = waiters.withLock { w in
            defer { w = [] }
            return w
        }
        for continuation in ready { continuation.resume() }
    }

    /// Returns once `condition` holds, checking it again after every signal.
    func wait(until condition: @Sendable () -> Bool) async {
        while !condition() && !Task.isCancelled {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    waiters.withLock { $0.append(continuation) }
                    // Cancelled before it was queued (the handler's signal found nothing), or the condition came
                    // true meanwhile: wake it now.
                    if Task.isCancelled || condition() { signal() }
                }
            } onCancel: {
                signal()
            }
        }
    }
}
