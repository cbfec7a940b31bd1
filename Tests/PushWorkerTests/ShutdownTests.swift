import Logging
import PushKafka
import PushTestSupport
import ServiceLifecycle
import Testing
@testable import PushWorker

/// The worker's shutdown is bounded even when the Kafka group coordinator stops answering.
@Suite struct ShutdownTests {
    @Test(.timeLimit(.minutes(2))) func aSilentGroupCoordinatorDoesNotHoldTheShutdown() async throws {
        // The consumer service in a service group that allows itself 1 s of graceful shutdown (the worker allows
        // its deadline plus 10 s). The coordinator stops answering before the shutdown: the final commit and the
        // leave would wait without end; past the allowance the group is cancelled, and the consumer gives up
        // `cancelledShutdownGrace` later.
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("notifications", partitions: 1)
        let consumer = try KafkaConsumer(
            properties: [
                "bootstrap.servers": cluster.bootstrapServers, "group.id": "shutdown", "session.timeout.ms": "6000",
                "heartbeat.interval.ms": "500", "enable.auto.commit": "false", "log_level": "3",
            ],
            topics: ["notifications"], maxHeld: 100, logger: quiet)
        var configuration = ServiceGroupConfiguration(
            services: [.init(service: ConsumerService(consumer: consumer, suppression: nil))], logger: quiet)
        configuration.maximumGracefulShutdownDuration = .seconds(1)
        let group = ServiceGroup(configuration: configuration)
        #expect(try await produceAcknowledged(cluster.bootstrapServers, topic: "notifications", (0..<20).map { "r\($0)" }) == 20)
        let clock = ContinuousClock()
        let took: Duration = await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            // Records consumed and settled: the final commit has offsets to commit.
            await consumer.settleRecords(atLeast: 20)
            cluster.setRoundTrip(broker: 1, milliseconds: 100_000)
            let start = clock.now
            await group.triggerGracefulShutdown()
            // Cancelled past its allowance, the group may end with an error: how it ends is not the question here.
            _ = try? await tasks.next()
            return clock.now - start
        }
        #expect(took >= KafkaConsumer.cancelledShutdownGrace && took < .seconds(30), "\(took)")
    }
}
