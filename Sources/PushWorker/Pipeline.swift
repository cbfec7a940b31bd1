import Logging
import PushCore
import PushGateway
import PushKafka
import Synchronization

/// Where the pipeline sends output events and how it delivers.
public struct PipelineConfiguration: Sendable {
    public var deliveryErrorTopic: String
    public var deliveryReportTopic: String?
    /// Where HTTP/2 410 answers go as feedback events (SPEC section 9: HTTP/2 has no feedback service); nil: none.
    public var feedbackTopic: String?
    /// The compacted topic of suppressed tokens (SPEC section 10); nil: no suppression.
    public var suppressionTopic: String?
    /// Added to the record's timestamp when an event names no expiration.
    public var defaultTTLSeconds: Int64 = 86400
    /// The configured apps: for each bundle id, its environments (the first is the default when the event names
    /// none and production is not configured).
    public var endpoints: [AppEndpoint]

    public init(deliveryErrorTopic: String, deliveryReportTopic: String? = nil, endpoints: [AppEndpoint]) {
        self.deliveryErrorTopic = deliveryErrorTopic
        self.deliveryReportTopic = deliveryReportTopic
        self.endpoints = endpoints
    }
}

/// The hooks a pipeline gives the engine it delivers through: the check just before a send, and where outcomes go.
public struct DeliveryHooks: Sendable {
    public let sendCheck: SendCheck?
    public let onOutcomes: @Sendable ([DeliveryOutcome]) -> Void
}

/// The worker's flow for each record: decode and validate (``EventAdmission``), admit into the record lifecycle
/// (``RecordKeeper``), encode and hand to the engine (``NotificationDelivery``), and turn each outcome into output
/// events. A record is held from its poll until its outcome is known and its output events are acknowledged; its
/// offset moves with the settled prefix.
///
/// Backpressure is the held count (``pressure``): fetching pauses at `max_in_flight`. An app whose gateway is down
/// counts with at most its share (`max_in_flight` / endpoints), so that its backlog does not stop the other apps;
/// what it holds beyond its share waits, and fetching pauses anyway once twice `max_in_flight` are held.
public final class Pipeline: RecordSink {
    public let configuration: PipelineConfiguration
    private let admission: EventAdmission
    private let keeper: RecordKeeper
    private let engine: any NotificationDelivery
    /// Per endpoint, whether it is an HTTP/2 one.
    private let isHTTP2: [Bool]
    private let maxInFlight: Int
    private let share: Int
    private let wallClock: @Sendable () -> Int64
    /// The poll thread's buffer for a poll's tokens and payloads (``DecodedBatch/staging``), kept between polls: a
    /// new one per poll would be allocated and faulted in afresh. Taken and given back once per poll.
    private let stagingBuffer = Mutex<[UInt8]>([])

    /// A pipeline delivering through a ``DeliveryEngine`` and producing to `producer`.
    public convenience init(
        configuration: PipelineConfiguration, producer: KafkaProducer, delivery: DeliveryConfiguration,
        suppression: SuppressionList? = nil,
        logger: Logger = Logger(label: "pushworker.pipeline"), wallClockMilliseconds: @escaping @Sendable () -> Int64
    ) throws {
        try self.init(
            configuration: configuration, output: producer, maxInFlight: delivery.maxInFlight, suppression: suppression,
            logger: logger, wallClockMilliseconds: wallClockMilliseconds
        ) { hooks in
            try DeliveryEngine(
                endpoints: configuration.endpoints, configuration: delivery, logger: logger, sendCheck: hooks.sendCheck,
                onOutcomes: hooks.onOutcomes)
        }
    }

    /// A pipeline delivering through the engine `makeEngine` builds with the pipeline's hooks, and producing to `output`.
    public init(
        configuration: PipelineConfiguration, output: any OutputSink, maxInFlight: Int, suppression: SuppressionList? = nil,
        logger: Logger = Logger(label: "pushworker.pipeline"), wallClockMilliseconds: @escaping @Sendable () -> Int64,
        engine makeEngine: (DeliveryHooks) throws -> any NotificationDelivery
    ) throws {
        self.configuration = configuration
        let suppression = configuration.suppressionTopic == nil ? nil : (suppression ?? SuppressionList())
        let admission = EventAdmission(configuration: configuration, suppression: suppression)
        let topics = OutputTopics(
            error: output.topic(configuration.deliveryErrorTopic), report: configuration.deliveryReportTopic.map { output.topic($0) },
            feedback: configuration.feedbackTopic.map { output.topic($0) },
            suppression: configuration.suppressionTopic.map { output.topic($0) })
        let keeper = RecordKeeper(
            lifecycle: RecordLifecycle(endpoints: admission.endpointKeys, topics: topics), sink: output, suppression: suppression, logger: logger, wallClock: wallClockMilliseconds)
        var sendCheck: SendCheck?
        if suppression != nil {
            sendCheck = { [weak keeper] _, candidates in
                guard let keeper else { return [] }
                return admission.suppressedBeforeSending(candidates, held: keeper.heldEvents)
            }
        }
        // Weakly: connections may outlive the pipeline briefly, and must not keep its producer open.
        engine = try makeEngine(DeliveryHooks(sendCheck: sendCheck, onOutcomes: { [weak keeper] in keeper?.settle($0) }))
        self.admission = admission
        self.keeper = keeper
        isHTTP2 = admission.http2Apps.map { $0 != nil }
        self.maxInFlight = maxInFlight
        share = max(1, maxInFlight / max(1, configuration.endpoints.count))
        wallClock = wallClockMilliseconds
    }

    public var snapshot: PipelineCounts { keeper.counts }

    /// Records held: admitted and not yet settled (outcome known and output events acknowledged).
    public var held: Int { keeper.held }

    /// Opens the gateway connections.
    public func start() { engine.start() }

    /// Consumes a stream of copied records until it ends (a replay's range), a quarter of `max_in_flight` at a time,
    /// each once fewer than `max_in_flight` records are held.
    public func run(records: some AsyncSequence<[KafkaRecord], Never>) async throws {
        engine.start()
        let chunkSize = max(1, maxInFlight / 4)
        for await batch in records {
            for start in stride(from: 0, to: batch.count, by: chunkSize) {
                await keeper.waitUntilHeld(below: maxInFlight)
                try Task.checkCancellation()
                let chunk = batch[start..<min(batch.count, start + chunkSize)]
                var decoded = DecodedBatch(now: wallClock(), capacity: chunk.count)
                for r in chunk {
                    if decoded.admission.runs.last?.partition != r.topicPartition { decoded.startRun(r.topicPartition) }
                    r.value.withUnsafeBytes { decoded.add(offset: r.offset, timestamp: r.timestamp, value: $0, admission) }
                }
                deliver(decoded)
            }
        }
    }

    /// Stops delivering: what has no outcome is left uncommitted (delivered again after a restart).
    public func stop() async -> Int {
        await engine.stop().count
    }

    /// Waits until every held record is settled (its outcome known and counted, its output events acknowledged), or
    /// until `timeout`; returns whether all of them are.
    public func drain(timeout: Duration) async -> Bool {
        await keeper.waitUntilSettled(timeout: timeout)
    }

    /// Output batches still being built.
    public var pendingOutputs: Int { keeper.pendingOutputs }

    public var engineStatus: [AppKey: PoolStatus] {
        Dictionary(uniqueKeysWithValues: engine.apps.compactMap { k in engine.status(of: k).map { (k, $0) } })
    }

    // MARK: RecordSink (the consumer's poll thread)

    public func consume(_ batch: PolledBatch) {
        var staging = stagingBuffer.withLock { buffer in
            var taken = [UInt8]()
            swap(&taken, &buffer)
            return taken
        }
        staging.removeAll(keepingCapacity: true)
        var decoded = DecodedBatch(now: wallClock(), capacity: batch.count, staging: staging)
        var run: (topic: PolledTopic, partition: Int32)?
        for i in 0..<batch.count {
            let r = batch[i]
            if run == nil || run!.topic != r.polledTopic || run!.partition != r.partition {
                run = (r.polledTopic, r.partition)
                decoded.startRun(r.topicPartition)
            }
            decoded.add(offset: r.offset, timestamp: r.timestamp, value: r.value, admission)
        }
        deliver(decoded)
        stagingBuffer.withLock { $0 = decoded.takeStaging() }
    }

    /// Admits a decoded batch and hands its deliveries to the engine.
    private func deliver(_ decoded: DecodedBatch) {
        let admitted = keeper.admit(decoded, formats: admission.endpointFormats, http2: isHTTP2)
        for (index, deliveries) in admitted.binary.enumerated() where !deliveries.isEmpty {
            engine.enqueue(.binary(deliveries), to: admission.endpointKeys[index])
        }
        for (index, deliveries) in admitted.http2.enumerated() where !deliveries.isEmpty {
            engine.enqueue(.http2(deliveries), to: admission.endpointKeys[index])
        }
    }

    public func assigned(_ partitions: [TopicPartition]) { keeper.assigned(partitions) }

    public func revoked(_ partitions: [TopicPartition]) -> [(TopicPartition, Int64)] { keeper.revoked(partitions) }

    public func takeCommittable() -> [(TopicPartition, Int64)] { keeper.takeCommittable() }

    /// The held count, an app whose gateway is down counting with at most its share; at least `max_in_flight` once
    /// twice that are held.
    public var pressure: Int {
        let keys = admission.endpointKeys
        return keeper.pressure(maxInFlight: maxInFlight, share: share) { engine.isDown(keys[$0]) }
    }
}
