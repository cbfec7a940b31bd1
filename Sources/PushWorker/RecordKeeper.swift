import Logging
import Metrics
import NIOPosix
import PushCore
import PushGateway
import PushKafka
import Synchronization

/// Where the pipeline's output events go: the Kafka producer, or a test's fake.
public protocol OutputSink: AnyObject, Sendable {
    /// The number of an output topic (the same name gives the same topic).
    func topic(_ name: String) -> ProducerTopic
    /// Queues messages; each acknowledgement hands its message's tag back to the acknowledgement handler.
    func produce(_ messages: [OutgoingMessage])
    /// Sets who hears of acknowledged messages.
    func onAcknowledged(_ handler: @escaping @Sendable ([UInt64]) -> Void)
}

extension KafkaProducer: OutputSink {}

/// Runs the ``RecordLifecycle`` behind one lock and does what it asks: produces the output events (built on NIO's
/// thread pool, off the event loops that report outcomes), applies suppressions, counts, and wakes whoever waits
/// for the held count to fall.
final class RecordKeeper: Sendable {
    private let lifecycle: Mutex<RecordLifecycle>
    private let builder: OutputBuilder
    private let sink: any OutputSink
    private let suppression: SuppressionList?
    private let metrics = PipelineMetrics()
    private let logger: Logger
    private let wallClock: @Sendable () -> Int64
    /// Signalled whenever the held count falls or an output batch is handed over.
    private let released = IdleSignal()
    /// Outcome batches whose output events are being built.
    private let outputsPending = Atomic<Int>(0)

    init(
        lifecycle: RecordLifecycle, sink: any OutputSink, suppression: SuppressionList?, logger: Logger,
        wallClock: @escaping @Sendable () -> Int64
    ) {
        builder = OutputBuilder(topics: lifecycle.topics, endpoints: lifecycle.endpoints)
        self.lifecycle = Mutex(lifecycle)
        self.sink = sink
        self.suppression = suppression
        self.logger = logger
        self.wallClock = wallClock
        sink.onAcknowledged { [weak self] tags in self?.acknowledged(tags.map(LedgerTicket.init(rawValue:))) }
    }

    var counts: PipelineCounts { metrics.counts }
    var held: Int { lifecycle.withLock { $0.held } }
    var pendingOutputs: Int { outputsPending.load(ordering: .relaxed) }

    /// Admits a decoded batch: returns its deliveries by endpoint, with their tickets, and produces the rejected
    /// records' error events.
    func admit(
        _ batch: DecodedBatch, formats: [NotificationFormat], http2: [Bool]
    ) -> (binary: [[Delivery]], http2: [[HTTP2Delivery]]) {
        let (admitted, held) = lifecycle.withLock { l in (l.admit(batch.admission), l.held) }
        metrics.held.record(held)
        for (partition, forgotten) in admitted.restarts {
            logger.warning("a partition went back to an earlier offset: its ledger restarts", metadata: [
                "partition": "\(partition)", "forgotten": "\(forgotten)",
            ])
        }
        let deliveries = batch.deliveries(tickets: admitted.tickets, formats: formats, http2: http2)
        let rejected = batch.rejected(tickets: admitted.tickets)
        sink.produce(rejected.map { builder.rejected($0.event, ticket: $0.ticket) })
        let submitted = deliveries.binary.reduce(0) { $0 + $1.count } + deliveries.http2.reduce(0) { $0 + $1.count }
        metrics.record(consumed: batch.admission.records.count, submitted: submitted, errors: rejected.map(\.event.reason))
        return deliveries
    }

    /// Outcomes from the engine (an event-loop thread, a batch at a time): resolved under one lock, then their
    /// output events are built and produced on NIO's thread pool.
    func settle(_ outcomes: [DeliveryOutcome]) {
        let now = wallClock()
        let (resolution, held) = lifecycle.withLock { l in (l.resolve(outcomes, now: now), l.held) }
        changed(held)
        guard !resolution.isEmpty else { return }
        // This instance suppresses what its gateways reported gone at once, before any resend can be taken (the
        // other instances when they read the records).
        suppression?.apply(resolution.suppressions)
        outputsPending.add(1, ordering: .relaxed)
        NIOThreadPool.singleton.submit { [self] _ in
            let now = wallClock()
            let built = builder.build(resolution.planned, now: now)
            var latencies = built.latencies
            for timestamp in resolution.acceptedTimestamps where timestamp > 0 { latencies.record(milliseconds: now - timestamp) }
            suppression?.apply(built.lifted)
            metrics.latency.record(latencies)
            metrics.record(accepted: built.accepted + resolution.acceptedTimestamps.count, errors: built.reasons)
            sink.produce(built.messages)
            outputsPending.subtract(1, ordering: .releasing)
            released.signal()
        }
    }

    /// The broker acknowledged output events (the producer thread, one batch per poll).
    private func acknowledged(_ tickets: [LedgerTicket]) {
        changed(lifecycle.withLock { l in
            l.acknowledged(tickets)
            return l.held
        })
    }

    private func changed(_ held: Int) {
        metrics.held.record(held)
        released.signal()
    }

    func heldEvents(_ tickets: [DeliveryTicket]) -> [HeldEvent?] { lifecycle.withLock { $0.heldEvents(tickets) } }

    func assigned(_ partitions: [TopicPartition]) { lifecycle.withLock { $0.assigned(partitions) } }

    func revoked(_ partitions: [TopicPartition]) -> [(TopicPartition, Int64)] { lifecycle.withLock { $0.revoked(partitions) } }

    func takeCommittable() -> [(TopicPartition, Int64)] { lifecycle.withLock { $0.takeCommittable() } }

    func pressure(maxInFlight: Int, share: Int, isDown: (Int) -> Bool) -> Int {
        lifecycle.withLock { $0.pressure(maxInFlight: maxInFlight, share: share, isDown: isDown) }
    }

    /// Waits until no record is held and every outcome is counted, or `timeout` has passed; returns whether that
    /// holds.
    func waitUntilSettled(timeout: Duration) async -> Bool {
        await released.wait(until: { [self] in held == 0 && pendingOutputs == 0 }, timeout: timeout)
    }

    /// Waits until fewer than `count` records are held (or the task is cancelled).
    func waitUntilHeld(below count: Int) async {
        await released.wait { [self] in held < count }
    }
}

/// Counts of what the pipeline did.
public struct PipelineCounts: Sendable, Hashable {
    public var consumed = 0
    public var submitted = 0
    public var accepted = 0
    public var errorsByReason: [DeliveryErrorReason: Int] = [:]
}

/// The pipeline's counts and metrics.
final class PipelineMetrics: Sendable {
    private let state = Mutex(PipelineCounts())
    private let consumed = Counter(label: "pushworker_events_consumed_total")
    private let accepted = Counter(label: "pushworker_notifications_accepted_total")
    private let errors = Dictionary(uniqueKeysWithValues: DeliveryErrorReason.allCases.map {
        ($0, Counter(label: "pushworker_delivery_errors_total", dimensions: [("reason", $0.rawValue)]))
    })
    /// Records held: admitted and not yet settled.
    let held = Gauge(label: "pushworker_held_records")
    /// From the Kafka record's timestamp to acceptance by the gateway.
    let latency = LatencyHistograms.process.histogram("pushworker_delivery_latency_seconds")

    var counts: PipelineCounts { state.withLock { $0 } }

    /// Adds a batch's figures to the counts (one lock) and the metrics.
    func record(consumed: Int = 0, submitted: Int = 0, accepted: Int = 0, errors: [DeliveryErrorReason]) {
        state.withLock { c in
            c.consumed += consumed
            c.submitted += submitted
            c.accepted += accepted
            for reason in errors { c.errorsByReason[reason, default: 0] += 1 }
        }
        if consumed > 0 { self.consumed.increment(by: Int64(consumed)) }
        if accepted > 0 { self.accepted.increment(by: Int64(accepted)) }
        for reason in errors { self.errors[reason]?.increment() }
    }
}
