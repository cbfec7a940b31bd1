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

/// Deliveries for one app, in its transport.
public enum Deliveries: Sendable {
    case binary([Delivery])
    case http2([HTTP2Delivery])

    public var count: Int {
        switch self {
        case .binary(let deliveries): deliveries.count
        case .http2(let deliveries): deliveries.count
        }
    }
}

/// What a stopped engine hands back: the deliveries that have no outcome, for the caller to leave uncommitted.
public struct Unsettled: Sendable {
    public var binary: [Delivery] = []
    public var http2: [HTTP2Delivery] = []

    public init(binary: [Delivery] = [], http2: [HTTP2Delivery] = []) {
        self.binary = binary
        self.http2 = http2
    }

    public var count: Int { binary.count + http2.count }
}

/// What the worker's pipeline delivers through: a ``DeliveryEngine``, or a test's fake that answers with outcomes
/// of its own.
public protocol NotificationDelivery: AnyObject, Sendable {
    /// Opens the gateway connections.
    func start()
    /// Hands deliveries to the app's connections.
    func enqueue(_ deliveries: Deliveries, to app: AppKey)
    /// Whether the app's gateway is down: no connection ready and the last attempt failed.
    func isDown(_ app: AppKey) -> Bool
    func status(of app: AppKey) -> PoolStatus?
    /// The apps it can deliver to.
    var apps: [AppKey] { get }
    /// Stops delivering: what has no outcome.
    func stop() async -> Unsettled
}

/// One ``ConnectionPool`` per binary (app, environment), one ``HTTP2Pool`` per HTTP/2 one. Every enqueued delivery
/// ends in exactly one outcome passed to `onOutcomes` (from event-loop threads, in batches; keep the handler quick),
/// unless the engine is stopped first, in which case ``stopAll()`` hands it back unsettled. The engine does not
/// bound what it holds: its caller does (the worker's ``RecordLifecycle`` pauses fetching; ``BoundedDeliveryEngine``
/// for callers with no ledger of their own).
public final class DeliveryEngine: NotificationDelivery {
    public let configuration: DeliveryConfiguration
    private let pools: [AppKey: ConnectionPool]
    private let http2Pools: [AppKey: HTTP2Pool]

    public init(
        endpoints: [AppEndpoint], configuration: DeliveryConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "pushworker.gateway"), sendCheck: SendCheck? = nil,
        onOutcomes: @escaping @Sendable ([DeliveryOutcome]) -> Void
    ) throws {
        self.configuration = configuration
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
                    sendCheck: sendCheck, onOutcomes: onOutcomes)
            } else {
                // The simple format's bisection probes groups of suspects; it gets no check (a probe emptied by one
                // would wait for a verdict that never comes).
                pools[endpoint.key] = try ConnectionPool(
                    endpoint: endpoint, configuration: configuration, group: group, logger: logger,
                    sendCheck: endpoint.format == .simple ? nil : sendCheck, onOutcomes: onOutcomes)
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

    /// Hands deliveries to the pool for `app` at once, one lock for the batch. The app's transport must be theirs.
    public func enqueue(_ deliveries: Deliveries, to app: AppKey) {
        switch deliveries {
        case .binary(let deliveries):
            guard let pool = pools[app] else { preconditionFailure("no binary pool for \(app)") }
            pool.submit(deliveries)
        case .http2(let deliveries):
            guard let pool = http2Pools[app] else { preconditionFailure("no http2 pool for \(app)") }
            pool.submit(deliveries)
        }
    }

    /// The provider-token cache of an HTTP/2 app with token authentication (its age and renewals are metrics).
    public func providerTokens(of app: AppKey) -> ProviderTokenCache? { http2Pools[app]?.tokenCache }

    /// Whether the app's gateway is down: no connection ready and the last attempt failed.
    public func isDown(_ app: AppKey) -> Bool { pools[app]?.isDown ?? http2Pools[app]?.isDown ?? false }

    /// Stops every pool: what has no outcome (queued, waiting to be resent, or cut off on a closed connection).
    public func stop() async -> Unsettled {
        var unsettled = Unsettled()
        for pool in pools.values { unsettled.binary += await pool.stop() }
        for pool in http2Pools.values { unsettled.http2 += await pool.stop() }
        return unsettled
    }

    public func status(of app: AppKey) -> PoolStatus? { pools[app]?.status ?? http2Pools[app]?.status }
}
