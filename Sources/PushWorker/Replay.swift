import Foundation
import Logging
import PushCore
import PushGateway
import PushKafka

/// `pushworker replay`: re-sends a range of the input topics through the same pipeline, outside the worker's
/// consumer group. Expired events are reported (error events), not sent. The group's committed offsets do not
/// move, unless ``resetGroup(configuration:start:)`` is asked for instead.
public enum Replay {
    /// Replays every input topic's range; returns what the pipeline did.
    public static func run(
        configuration: WorkerConfiguration, start: KafkaReplayReader.Start, logger: Logger
    ) async throws -> PipelineCounts {
        let properties = KafkaClientProperties(
            brokers: configuration.kafka.brokers, common: configuration.kafka.properties,
            consumer: configuration.kafka.consumerProperties, producer: configuration.kafka.producerProperties)
        // Every certificate and key loads before anything touches Kafka; a failure names its key.
        let endpoints = try configuration.loadCredentials().map(\.endpoint)
        let producer = try KafkaProducer(properties: properties.producerProperties, logger: logger)
        var total = PipelineCounts()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run(flushTimeout: .seconds(30)) }
            defer { producer.stop() }
            for topic in configuration.kafka.inputTopics {
                var consumerProperties = properties.consumerProperties(groupID: "\(configuration.kafka.groupID)-replay")
                consumerProperties["enable.auto.commit"] = nil
                let reader = try KafkaReplayReader(properties: consumerProperties, topic: topic, start: start)
                logger.info("replaying", metadata: ["topic": "\(topic)", "ranges": "\(reader.ranges.sorted { $0.key < $1.key }.map { "[\($0.key)] \($0.value.lowerBound)..<\($0.value.upperBound)" })"])
                var pipelineConfiguration = PipelineConfiguration(
                    deliveryErrorTopic: configuration.kafka.deliveryErrorTopic,
                    deliveryReportTopic: configuration.kafka.deliveryReportTopic, endpoints: endpoints)
                pipelineConfiguration.defaultTTLSeconds = Int64(configuration.delivery.defaultTTLSeconds)
                let pipeline = try Pipeline(
                    configuration: pipelineConfiguration, producer: producer, delivery: configuration.deliveryConfiguration, logger: logger,
                    wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
                async let reading: Void = reader.run()
                try await pipeline.run(records: reader.records)
                await reading
                let settled = await pipeline.drain(timeout: .seconds(120))
                while pipeline.held > 0 { try await Task.sleep(for: .milliseconds(10)) }
                _ = await pipeline.stop()
                if !settled { logger.warning("replay: not every notification got an outcome in time", metadata: ["topic": "\(topic)"]) }
                let c = pipeline.snapshot
                total.consumed += c.consumed
                total.submitted += c.submitted
                total.accepted += c.accepted
                total.errorsByReason.merge(c.errorsByReason, uniquingKeysWith: +)
            }
        }
        return total
    }

    /// Moves the worker group's committed offsets to where the range starts, so that the (stopped) workers consume
    /// it again when they start. Returns the offsets set.
    public static func resetGroup(configuration: WorkerConfiguration, start: KafkaReplayReader.Start) throws -> [TopicPartition: Int64] {
        var offsets: [TopicPartition: Int64] = [:]
        for topic in configuration.kafka.inputTopics {
            let reader = try KafkaReplayReader(
                properties: ["bootstrap.servers": configuration.kafka.brokers, "log_level": "3"].merging(configuration.kafka.properties) { $1 },
                topic: topic, start: start)
            for (partition, range) in reader.ranges { offsets[TopicPartition(topic: topic, partition: partition)] = range.lowerBound }
        }
        try KafkaAdmin.commitGroupOffsets(bootstrapServers: configuration.kafka.brokers, group: configuration.kafka.groupID, offsets)
        return offsets
    }
}
