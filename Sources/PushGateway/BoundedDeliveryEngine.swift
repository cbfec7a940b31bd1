import Logging
import NIOCore
import NIOPosix
import PushCore

/// A ``DeliveryEngine`` that bounds what it holds itself, for callers with no ledger of their own (tests and
/// benchmarks): ``submit(_:to:)`` waits while `maxInFlight` deliveries have no outcome, ``drain(timeout:)`` waits
/// until none is left. The worker bounds what it holds with its ``RecordLifecycle`` instead.
public final class BoundedDeliveryEngine: Sendable {
    public let engine: DeliveryEngine
    private let gate: CapacityGate
    private let idle = IdleSignal()

    public init(
        endpoints: [AppEndpoint], configuration: DeliveryConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "pushworker.gateway"), sendCheck: SendCheck? = nil,
        onOutcomes: @escaping @Sendable ([DeliveryOutcome]) -> Void
    ) throws {
        let gate = CapacityGate(capacity: configuration.maxInFlight)
        let idle = idle
        self.gate = gate
        engine = try DeliveryEngine(
            endpoints: endpoints, configuration: configuration, group: group, logger: logger, sendCheck: sendCheck
        ) { outcomes in
            onOutcomes(outcomes)
            gate.release(outcomes.count)
            if gate.held == 0 { idle.signal() }
        }
    }

    public func start() { engine.start() }

    /// Hands binary deliveries to the pool for `app`, waiting while `maxInFlight` are held.
    public func submit(_ deliveries: [Delivery], to app: AppKey) async throws {
        try await inChunks(deliveries) { engine.enqueue(.binary(Array($0)), to: app) }
    }

    /// Hands HTTP/2 deliveries to the pool for `app`, waiting while `maxInFlight` are held.
    public func submit(_ deliveries: [HTTP2Delivery], to app: AppKey) async throws {
        try await inChunks(deliveries) { engine.enqueue(.http2(Array($0)), to: app) }
    }

    /// Hands deliveries over at once, however many are held.
    public func enqueue(_ deliveries: Deliveries, to app: AppKey) {
        gate.take(deliveries.count)
        engine.enqueue(deliveries, to: app)
    }

    /// Hands `deliveries` over a quarter of the capacity at a time, each chunk once the gate admits it.
    private func inChunks<D>(_ deliveries: [D], _ submit: (ArraySlice<D>) -> Void) async throws {
        var rest = deliveries[...]
        while !rest.isEmpty {
            let chunk = rest.prefix(max(1, min(rest.count, gate.capacity / 4)))
            try await gate.acquire(chunk.count)
            submit(chunk)
            rest = rest.dropFirst(chunk.count)
        }
    }

    /// Waits until every delivery has its outcome, or until `timeout` has passed; returns whether all have one.
    public func drain(timeout: Duration) async -> Bool {
        await idle.wait(until: { [gate] in gate.held == 0 }, timeout: timeout)
    }

    /// Closes every connection and returns what got no outcome.
    public func stop() async -> Unsettled {
        let unsettled = await engine.stop()
        gate.release(unsettled.count)
        idle.signal()
        return unsettled
    }

    /// Deliveries handed over and without an outcome.
    public var held: Int { gate.held }
    /// The most ever held at once (never above `maxInFlight` through ``submit(_:to:)``).
    public var peakHeld: Int { gate.peakHeld }

    public func isDown(_ app: AppKey) -> Bool { engine.isDown(app) }
    public func status(of app: AppKey) -> PoolStatus? { engine.status(of: app) }
    public func providerTokens(of app: AppKey) -> ProviderTokenCache? { engine.providerTokens(of: app) }
}
