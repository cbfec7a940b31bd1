import Foundation
import Logging
import Metrics
import Prometheus
import PushCore
import PushGateway
import PushKafka
import ServiceLifecycle
import UnixSignals

/// `pushworker run`: the worker's consumer, pipeline, producer, feedback poller and HTTP endpoints, run as the
/// ServiceLifecycle services of ``services`` in one `ServiceGroup`.
///
/// Graceful shutdown (SIGTERM/SIGINT through the `ServiceGroup`, SPEC section 4): fetching stops, in-flight
/// notifications get their outcomes within `shutdownDeadline`, pending output events are produced and
/// acknowledged, offsets are committed, connections close. What has no outcome by the deadline stays
/// uncommitted and is delivered again after a restart. A second signal cancels the group.
public final class Worker: Sendable {
    public let configuration: WorkerConfiguration
    public let shutdownDeadline: Duration
    let consumer: KafkaConsumer
    let producer: KafkaProducer
    let pipeline: Pipeline
    let feedback: FeedbackPoller
    /// Suppressed tokens and the reader of their topic (`suppression.topic`).
    let suppression: (list: SuppressionList, service: SuppressionService)?
    let logger: Logger
    private let registry: PrometheusCollectorRegistry?
    let http: HTTPEndpoints
    /// The client certificates' ends, one per app with certificate authentication.
    let certificateExpiries: [CertificateExpiry]

    /// - Parameter registry: the Prometheus registry the process's metrics go to (`MetricsSystem` bootstrapped with
    ///   it), served on `/metrics`.
    public init(
        configuration: WorkerConfiguration, shutdownDeadline: Duration = .seconds(25), logger: Logger,
        registry: PrometheusCollectorRegistry? = nil
    ) throws {
        self.configuration = configuration
        self.registry = registry
        self.shutdownDeadline = shutdownDeadline
        self.logger = logger
        let properties = KafkaClientProperties(
            brokers: configuration.kafka.brokers, common: configuration.kafka.properties,
            consumer: configuration.kafka.consumerProperties, producer: configuration.kafka.producerProperties)
        // Every certificate and key loads before anything touches Kafka; a failure names its key.
        let credentials = try configuration.loadCredentials()
        let endpoints = credentials.map(\.endpoint)
        certificateExpiries = credentials.compactMap { CertificateExpiry(app: $0.endpoint.key, certificates: $0.certificates) }
        let expiryMetric = MetricNameDescriptor(
            namespace: "pushworker", metricName: "certificate_expiry_timestamp", unitName: "seconds",
            helpText: "When the app's client certificate stops being valid (UNIX seconds)")
        for expiry in certificateExpiries {
            registry?.makeGauge(descriptor: expiryMetric, labels: [("app", "\(expiry.app)")]).set(to: Double(expiry.notAfter))
        }
        producer = try KafkaProducer(properties: properties.producerProperties, logger: logger)
        let pipelineConfiguration = configuration.pipelineConfiguration(endpoints: endpoints)
        suppression = try SuppressionService.open(configuration, properties: properties, logger: logger)
        pipeline = try Pipeline(
            configuration: pipelineConfiguration, producer: producer, delivery: configuration.deliveryConfiguration,
            suppression: suppression?.list, logger: logger, wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
        consumer = try KafkaConsumer(
            properties: properties.consumerProperties(groupID: configuration.kafka.groupID),
            topics: configuration.kafka.inputTopics,
            // The pipeline's ledger holds at most max_in_flight records; records beyond that wait in Kafka.
            maxHeld: configuration.delivery.maxInFlight,
            idlePace: .milliseconds(configuration.kafka.idleFetchPaceMilliseconds), sink: pipeline, logger: logger)
        // One member of the group polls the feedback services: the one holding partition 0 of the first input topic
        // (it moves with rebalances and always has exactly one holder while the group consumes).
        let pollerPartition = TopicPartition(topic: configuration.kafka.inputTopics[0], partition: 0)
        feedback = FeedbackPoller(
            endpoints: pipelineConfiguration.endpoints, topic: configuration.kafka.feedbackTopic,
            spoolDirectory: configuration.spoolDirectory, interval: .seconds(configuration.feedbackIntervalSeconds),
            producer: producer, logger: logger, isPoller: { [consumer] in consumer.assignment.contains(pollerPartition) },
            suppression: suppression.map { (configuration.suppressionTopic!, $0.list) })
        let lag = Gauge(label: "pushworker_consumer_lag")
        let holds = FollowingCounter(CoreMetrics.Counter(label: "pushworker_fetch_holds_total"))
        let pauses = FollowingCounter(CoreMetrics.Counter(label: "pushworker_fetch_pauses_total"))
        let paces = FollowingCounter(CoreMetrics.Counter(label: "pushworker_fetch_idle_paces_total"))
        http = HTTPEndpoints(
            metrics: { [consumer] in
                lag.record(consumer.lag)
                holds.follow(consumer.fetchHolds)
                pauses.follow(consumer.fetchPauses)
                paces.follow(consumer.idlePaces)
                var out: [UInt8] = []
                registry?.emit(into: &out)
                LatencyHistograms.process.emit(into: &out)
                return out
            },
            readiness: { [consumer, pipeline, suppression] in
                Readiness.evaluate(
                    assignedPartitions: consumer.assignment.count, apps: pipeline.engineStatus,
                    suppressionLoaded: suppression.map { $0.list.isLoaded })
            })
    }

    public var counts: PipelineCounts { pipeline.snapshot }

    /// Runs the services in a group of their own, without signal handling (`pushworker run` adds the signals).
    public func run() async throws {
        logStart()
        try await ServiceGroup(configuration: ServiceGroupConfiguration(services: services, logger: logger)).run()
        logStop()
    }

    public func logStart() {
        logger.info("worker starting", metadata: [
            "brokers": "\(configuration.kafka.brokers)", "group": "\(configuration.kafka.groupID)",
            "topics": "\(configuration.kafka.inputTopics)", "apps": "\(configuration.apps.map { "\($0.bundleID)/\($0.environment.rawValue)" })",
        ])
        let now = Int64(Date().timeIntervalSince1970)
        for expiry in certificateExpiries {
            guard let notice = expiry.notice(now: now) else { continue }
            logger.log(level: notice.level, notice.message, metadata: ["app": "\(expiry.app)", "not_after": "\(expiry.notAfterText)"])
        }
    }

    public func logStop() {
        let c = pipeline.snapshot
        logger.info("worker stopped", metadata: [
            "consumed": "\(c.consumed)", "accepted": "\(c.accepted)", "errors": "\(c.errorsByReason.values.reduce(0, +))",
        ])
    }

    /// The pipeline's part of the graceful shutdown: fetching stops, what is in flight gets its outcome within the
    /// deadline and its output events are acknowledged, then the engine stops (the consumer commits after).
    func shutDown() async {
        logger.info("shutting down: fetching stopped, settling what is held", metadata: ["deadline": "\(shutdownDeadline)"])
        consumer.suspendFetching()
        let deadline = ContinuousClock.now.advanced(by: shutdownDeadline)
        // Held records settle: their outcomes come in and their output events are acknowledged.
        let drained = await pipeline.drain(timeout: shutdownDeadline)
        // Other output events (the feedback poller's) reach the broker too before offsets are committed.
        while (producer.unacknowledged > 0 || pipeline.pendingOutputs > 0) && ContinuousClock.now < deadline && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(10))
        }
        let unsettled = await pipeline.stop()
        if !drained || unsettled > 0 {
            logger.warning("deadline reached: records not settled stay uncommitted", metadata: ["unsettled": "\(unsettled)"])
        }
    }
}
