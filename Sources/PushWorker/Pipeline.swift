import Logging
import Metrics
import NIOCore
import PushCore
import PushGateway
import PushKafka
import Synchronization

/// Where the pipeline sends output events and how it delivers.
public struct PipelineConfiguration: Sendable {
    public var deliveryErrorTopic: String
    public var deliveryReportTopic: String?
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

    /// The endpoint an event goes to: its environment if named, else production if configured, else the app's only
    /// (or first) environment.
    func endpoint(app: String, environment: APNsEnvironment?) -> AppEndpoint? {
        let candidates = endpoints.filter { $0.app == app }
        if let environment { return candidates.first { $0.environment == environment } }
        return candidates.first { $0.environment == .production } ?? candidates.first
    }
}

/// Counts of what the pipeline did.
public struct PipelineCounts: Sendable, Hashable {
    public var consumed = 0
    public var submitted = 0
    public var accepted = 0
    public var errorsByReason: [DeliveryErrorReason: Int] = [:]
}

/// The worker's flow for each record: decode and validate, pick the app's connection pool, deliver, and turn the
/// outcome into output events; the record's offset moves once its outcome is known and its output events are
/// acknowledged by the broker (``OffsetBook``).
public final class Pipeline: Sendable {
    private struct Pending {
        var record: KafkaRecord
        var event: NotificationEvent
    }

    public let configuration: PipelineConfiguration
    private let records: AsyncStream<[KafkaRecord]>
    private let offsets: OffsetBook
    private let producer: KafkaProducer
    private let engineBox = Mutex<DeliveryEngine?>(nil)
    private let pending = Mutex<[UInt64: Pending]>([:])
    private let nextTicket = Atomic<UInt64>(1)
    private let counts = Mutex(PipelineCounts())
    private let decoders: [NotificationFormat: EventDecoder]
    private let logger: Logger
    private let wallClock: @Sendable () -> Int64
    private let consumedCounter = Counter(label: "pushworker_events_consumed_total")
    private let acceptedCounter = Counter(label: "pushworker_notifications_accepted_total")
    private let errorCounters = Dictionary(uniqueKeysWithValues: DeliveryErrorReason.allCases.map {
        ($0, Counter(label: "pushworker_delivery_errors_total", dimensions: [("reason", $0.rawValue)]))
    })
    /// From the Kafka record's timestamp to acceptance by the gateway.
    private let latency = Timer(label: "pushworker_delivery_latency_seconds")

    public init(
        configuration: PipelineConfiguration, records: AsyncStream<[KafkaRecord]>, offsets: OffsetBook, producer: KafkaProducer,
        delivery: DeliveryConfiguration, logger: Logger = Logger(label: "pushworker.pipeline"),
        wallClockMilliseconds: @escaping @Sendable () -> Int64
    ) throws {
        self.configuration = configuration
        self.records = records
        self.offsets = offsets
        self.producer = producer
        self.logger = logger
        self.wallClock = wallClockMilliseconds
        var decoders: [NotificationFormat: EventDecoder] = [:]
        for format in NotificationFormat.allCases { decoders[format] = EventDecoder(format: format) }
        self.decoders = decoders
        let engine = try DeliveryEngine(endpoints: configuration.endpoints, configuration: delivery, logger: logger) {
            [weak self] outcomes in self?.settle(outcomes)
        }
        engineBox.withLock { $0 = engine }
    }

    private var engine: DeliveryEngine { engineBox.withLock { $0! } }

    public var snapshot: PipelineCounts { counts.withLock { $0 } }

    /// Consumes until the record stream ends (the group consumer's at shutdown, a replay's at the end of its
    /// range).
    public func run() async throws {
        engine.start()
        for await batch in records {
            counts.withLock { $0.consumed += batch.count }
            consumedCounter.increment(by: Int64(batch.count))
            var byApp: [AppKey: [Delivery]] = [:]
            for record in batch {
                if let (key, delivery) = process(record) { byApp[key, default: []].append(delivery) }
            }
            for (key, deliveries) in byApp {
                counts.withLock { $0.submitted += deliveries.count }
                try await engine.submit(deliveries, to: key)
            }
        }
    }

    /// Stops delivering: what has no outcome is left uncommitted (delivered again after a restart).
    public func stop() async -> Int {
        await engine.stop().count
    }

    public func drain(timeout: Duration) async -> Bool { await engine.drain(timeout: timeout) }

    public var engineStatus: [AppKey: PoolStatus] {
        Dictionary(uniqueKeysWithValues: engine.apps.compactMap { k in engine.status(of: k).map { (k, $0) } })
    }

    /// Decodes one record; returns the delivery to submit, or settles the record with an error event.
    private func process(_ record: KafkaRecord) -> (AppKey, Delivery)? {
        let source = RecordSource(topic: record.topic, partition: record.partition, offset: record.offset)
        let now = wallClock()
        // Validation against the frame limit first; the app's own format limit is applied once the app is known.
        switch decoders[.frame]!.decode(record.value) {
        case .failure(let rejection):
            fail(record, DeliveryErrorEvent(rejected: rejection, rawMessage: record.value, source: source, occurredAt: now))
            return nil
        case .success(var event):
            guard let endpoint = configuration.endpoint(app: event.app, environment: event.environment) else {
                let env = event.environment.map { " (\($0.rawValue))" } ?? ""
                fail(record, DeliveryErrorEvent(
                    failed: event, reason: .unknownApp, status: nil, detail: "no configuration for app \(event.app)\(env)",
                    attempts: 0, source: source, occurredAt: now))
                return nil
            }
            if endpoint.format != .frame {
                switch decoders[endpoint.format]!.decode(record.value) {
                case .failure(let rejection):
                    fail(record, DeliveryErrorEvent(rejected: rejection, rawMessage: record.value, source: source, occurredAt: now))
                    return nil
                case .success(let legacy): event = legacy
                }
            }
            event.environment = endpoint.environment
            let recordSeconds = record.timestamp >= 0 ? record.timestamp / 1000 : now / 1000
            let ticket = nextTicket.add(1, ordering: .relaxed).oldValue
            let notification = event.notification(identifier: 0, recordTimestamp: recordSeconds, defaultTTL: configuration.defaultTTLSeconds)
            pending.withLock { $0[ticket] = Pending(record: record, event: event) }
            return (endpoint.key, Delivery(ticket: ticket, notification: notification, format: endpoint.format))
        }
    }

    /// Produces the error event; the record settles once the broker has it.
    private func fail(_ record: KafkaRecord, _ event: DeliveryErrorEvent) {
        counts.withLock { $0.errorsByReason[event.reason, default: 0] += 1 }
        errorCounters[event.reason]?.increment()
        offsets.outputPending(record)
        offsets.outcomeKnown(record)
        producer.produce(
            topic: configuration.deliveryErrorTopic, key: event.messageKey.map { Array($0.utf8) }, value: event.json()
        ) { [offsets] in offsets.outputAcknowledged(record) }
    }

    private func settle(_ outcomes: [DeliveryOutcome]) {
        let settled = pending.withLock { p in outcomes.map { ($0, p.removeValue(forKey: $0.ticket)) } }
        let now = wallClock()
        for (outcome, entry) in settled {
            guard let entry else { continue }
            let source = RecordSource(topic: entry.record.topic, partition: entry.record.partition, offset: entry.record.offset)
            switch outcome.result {
            case .accepted:
                counts.withLock { $0.accepted += 1 }
                acceptedCounter.increment()
                if entry.record.timestamp > 0 { latency.recordMilliseconds(max(0, now - entry.record.timestamp)) }
                if let reportTopic = configuration.deliveryReportTopic {
                    let report = DeliveryReport(event: entry.event, attempts: outcome.attempts, source: source, occurredAt: now)
                    offsets.outputPending(entry.record)
                    producer.produce(topic: reportTopic, key: Array(entry.event.token.hex.utf8), value: report.json()) {
                        [offsets] in offsets.outputAcknowledged(entry.record)
                    }
                }
                offsets.outcomeKnown(entry.record)
            case .failed(let reason, let status, let detail):
                fail(entry.record, DeliveryErrorEvent(
                    failed: entry.event, reason: reason, status: status, detail: detail, attempts: outcome.attempts,
                    source: source, occurredAt: now))
            }
        }
    }
}

/// The optional delivery-report event: one per accepted notification, for audit.
struct DeliveryReport {
    var event: NotificationEvent
    var attempts: Int
    var source: RecordSource
    var occurredAt: Int64

    func json() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.field("event_id", event.id)
        w.field("app", event.app)
        w.field("environment", event.environment?.rawValue)
        w.field("token", event.token.hex)
        w.field("attempts", Int64(attempts))
        source.write("source", into: &w)
        w.field("accepted_at", RFC3339.format(unixMilliseconds: occurredAt))
        w.endObject()
        return w.bytes
    }
}
