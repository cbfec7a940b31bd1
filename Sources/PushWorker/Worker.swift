import Foundation
import Logging
import Metrics
import Prometheus
import PushCore
import PushGateway
import PushKafka
import ServiceLifecycle
import UnixSignals
import Synchronization

/// `pushworker run`: the worker as a ServiceLifecycle `Service`.
///
/// Graceful shutdown (SIGTERM/SIGINT through the `ServiceGroup`, SPEC section 4): fetching stops, in-flight
/// notifications get their outcomes within `shutdownDeadline`, pending output events are produced and
/// acknowledged, offsets are committed, connections close. What has no outcome by the deadline stays
/// uncommitted and is delivered again after a restart.
public final class Worker: Service, Sendable {
    public let configuration: WorkerConfiguration
    public let shutdownDeadline: Duration
    private let consumer: KafkaConsumer
    private let producer: KafkaProducer
    private let pipeline: Pipeline
    private let feedback: FeedbackPoller
    private let logger: Logger
    private let registry: PrometheusCollectorRegistry?
    private let http: HTTPEndpoints

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
        producer = try KafkaProducer(properties: properties.producerProperties, logger: logger)
        var pipelineConfiguration = PipelineConfiguration(
            deliveryErrorTopic: configuration.kafka.deliveryErrorTopic,
            deliveryReportTopic: configuration.kafka.deliveryReportTopic, endpoints: try configuration.endpointsWithSecrets())
        pipelineConfiguration.defaultTTLSeconds = Int64(configuration.delivery.defaultTTLSeconds)
        feedback = FeedbackPoller(
            endpoints: pipelineConfiguration.endpoints, topic: configuration.kafka.feedbackTopic,
            spoolDirectory: configuration.spoolDirectory, interval: .seconds(configuration.feedbackIntervalSeconds),
            producer: producer, logger: logger)
        pipeline = try Pipeline(
            configuration: pipelineConfiguration, producer: producer, delivery: configuration.deliveryConfiguration,
            logger: logger, wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
        consumer = try KafkaConsumer(
            properties: properties.consumerProperties(groupID: configuration.kafka.groupID),
            topics: configuration.kafka.inputTopics,
            // The pipeline's ledger holds at most max_in_flight records; records beyond that wait in Kafka.
            maxOutstanding: configuration.delivery.maxInFlight, sink: pipeline, logger: logger)
        let lag = Gauge(label: "pushworker_consumer_lag")
        http = HTTPEndpoints(
            metrics: { [consumer] in
                lag.record(consumer.lag)
                var out: [UInt8] = []
                registry?.emit(into: &out)
                return out
            },
            readiness: { [consumer, pipeline] in
                guard !consumer.assignment.isEmpty else { return (false, "no partitions assigned yet") }
                let statuses = pipeline.engineStatus
                for (app, status) in statuses.sorted(by: { $0.key.description < $1.key.description }) where status.readyConnections == 0 {
                    guard let error = status.lastError else { return (false, "\(app): connecting") }
                    return (true, "\(app): backing off after: \(error)")
                }
                return (true, "ready: \(consumer.assignment.count) partitions, every app connected")
            })
    }

    public var counts: PipelineCounts { pipeline.snapshot }

    public func run() async throws {
        logger.info("worker starting", metadata: [
            "brokers": "\(configuration.kafka.brokers)", "group": "\(configuration.kafka.groupID)",
            "topics": "\(configuration.kafka.inputTopics)", "apps": "\(configuration.apps.map { "\($0.bundleID)/\($0.environment.rawValue)" })",
        ])
        let (host, port) = WorkerConfiguration.split(configuration.httpListen)
        let bound = try await http.start(host: host, port: port)
        logger.info("http endpoints", metadata: ["listen": "\(host):\(bound)"])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [producer] in await producer.run(flushTimeout: .seconds(10)) }
            pipeline.start()
            group.addTask { [consumer] in await consumer.run() }
            // Wait for the signal (or cancellation), then shut down in order.
            await withTaskGroup(of: Void.self) { polling in
                polling.addTask { [feedback] in await feedback.run() }
                try? await gracefulShutdown()
                polling.cancelAll()  // a poll in progress ends; its spool file stays for the next start
            }
            // A second SIGTERM/SIGINT during the shutdown cuts its waits short.
            await withTaskGroup(of: Bool.self) { shutdown in
                shutdown.addTask { [self] in
                    await shutDown()
                    return true
                }
                shutdown.addTask {
                    for await _ in await UnixSignalsSequence(trapping: .sigterm, .sigint) { return false }
                    return false
                }
                if await shutdown.next() == false {
                    logger.warning("second signal: stopping now; what has no outcome stays uncommitted")
                    shutdown.cancelAll()
                    _ = await shutdown.next()
                } else {
                    shutdown.cancelAll()
                }
            }
            try await group.waitForAll()
        }
        await http.stop()
        let c = pipeline.snapshot
        logger.info("worker stopped", metadata: [
            "consumed": "\(c.consumed)", "accepted": "\(c.accepted)", "errors": "\(c.errorsByReason.values.reduce(0, +))",
        ])
    }

    private func shutDown() async {
        logger.info("shutting down: fetching stopped, finishing what is in flight", metadata: ["deadline": "\(shutdownDeadline)"])
        consumer.suspendFetching()
        let deadline = ContinuousClock.now.advanced(by: shutdownDeadline)
        let drained = await pipeline.drain(timeout: shutdownDeadline)
        // Output events of settled records must reach the broker before their offsets are committed.
        while producer.unacknowledged > 0 && ContinuousClock.now < deadline && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(10))
        }
        let unsettled = await pipeline.stop()
        consumer.stop()  // stores the settled offsets, commits them synchronously, leaves the group
        producer.stop()
        if !drained || unsettled > 0 {
            logger.warning("deadline reached: notifications without an outcome stay uncommitted", metadata: ["unsettled": "\(unsettled)"])
        }
    }
}
