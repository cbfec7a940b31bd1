import Foundation
import Logging
import PushCore
import PushGateway
import PushKafka

/// `pushworker replay`: re-sends a range of the input topics through the same pipeline, outside the worker's
/// consumer group. Expired events are reported (error events), not sent. The group's committed offsets do not
/// move, unless ``resetGroup(configuration:start:)`` is asked for instead.
/// Where a replay starts, for each input topic.
public enum ReplayStart: Sendable, Equatable {
    case earliest
    /// UNIX milliseconds.
    case timestamp(Int64)
    /// Offsets per partition; a nil topic means every input topic. Partitions not named are not replayed.
    case offsets([ReplayOffset])

    public struct ReplayOffset: Sendable, Equatable {
        public var topic: String?
        public var partition: Int32
        public var offset: Int64

        public init(topic: String?, partition: Int32, offset: Int64) {
            self.topic = topic
            self.partition = partition
            self.offset = offset
        }
    }

    /// The reader's start for `topic`.
    public func start(for topic: String) -> KafkaReplayReader.Start {
        switch self {
        case .earliest: return .earliest
        case .timestamp(let ms): return .timestamp(ms)
        case .offsets(let offsets):
            var byPartition: [Int32: Int64] = [:]
            // A topic's own offsets win over those given for every topic.
            for o in offsets where o.topic == nil { byPartition[o.partition] = o.offset }
            for o in offsets where o.topic == topic { byPartition[o.partition] = o.offset }
            return .offsets(byPartition)
        }
    }

    /// Throws, naming `--from-offset`, when a topic named is not among `inputTopics`.
    public func requireInputTopics(_ inputTopics: [String]) throws(ConfigurationError) {
        if let unknown = unknownTopics(inputTopics).first {
            throw ConfigurationError(
                key: "--from-offset", "\(unknown) is not an input topic (\(inputTopics.joined(separator: ", ")))")
        }
    }

    /// Topics named that are not among `inputTopics`.
    public func unknownTopics(_ inputTopics: [String]) -> [String] {
        guard case .offsets(let offsets) = self else { return [] }
        return Array(Set(offsets.compactMap(\.topic)).subtracting(inputTopics)).sorted()
    }
}

public enum Replay {
    /// How long a replay waits by default, after reading a topic's range, for what it sent to get an outcome; what
    /// has none then is reported and left (the worker group's offsets never moved).
    public static let drainDeadline: Duration = .seconds(120)

    /// What a replay did: the pipeline's counts over every topic, how many notifications got no outcome within the
    /// drain deadline (no accepted, no error event), and how many records of the range were never read because the
    /// replay stopped making progress. A replay with either is not complete.
    public struct Result: Sendable {
        public var counts = PipelineCounts()
        public var withoutOutcome = 0
        public var unread: Int64 = 0
    }

    /// Replays every input topic's range; returns what the pipeline did.
    public static func run(
        configuration: WorkerConfiguration, start: ReplayStart, drainDeadline: Duration = drainDeadline, logger: Logger
    ) async throws -> Result {
        try start.requireInputTopics(configuration.kafka.inputTopics)
        let properties = KafkaClientProperties(
            brokers: configuration.kafka.brokers, common: configuration.kafka.properties,
            consumer: configuration.kafka.consumerProperties, producer: configuration.kafka.producerProperties)
        // Every certificate and key loads before anything touches Kafka; a failure names its key.
        let endpoints = try configuration.loadCredentials().map(\.endpoint)
        let producer = try KafkaProducer(properties: properties.producerProperties, logger: logger)
        var result = Result()
        // Suppression applies to a replay as to the worker: the topic is read whole first, then followed.
        let suppression = try await onOwnThread("kafka-open") { () throws(ConfigurationError) in
            try SuppressionService.open(configuration, properties: properties, logger: logger)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run(flushTimeout: .seconds(30)) }
            defer { producer.stop() }
            if let suppression {
                group.addTask { try await suppression.service.run() }
                await suppression.list.waitUntilLoaded()
            }
            defer { suppression?.service.reader.stop() }
            for topic in configuration.kafka.inputTopics {
                var consumerProperties = properties.consumerProperties(groupID: "\(configuration.kafka.groupID)-replay")
                consumerProperties["enable.auto.commit"] = nil
                // Reading stays at most max_in_flight records ahead of the pipeline.
                let (topicStart, readAhead) = (start.start(for: topic), configuration.delivery.maxInFlight)
                let reader = try await onOwnThread("kafka-open") { [consumerProperties] in
                    try KafkaReplayReader(properties: consumerProperties, topic: topic, start: topicStart, readAhead: readAhead)
                }
                logger.info("replaying", metadata: ["topic": "\(topic)", "ranges": "\(reader.ranges.sorted { $0.key < $1.key }.map { "[\($0.key)] \($0.value.lowerBound)..<\($0.value.upperBound)" })"])
                let pipelineConfiguration = configuration.pipelineConfiguration(endpoints: endpoints)
                let pipeline = try Pipeline(
                    configuration: pipelineConfiguration, producer: producer, delivery: configuration.deliveryConfiguration,
                    suppression: suppression?.list, logger: logger, wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
                let stalled = try await readUnlessStalled(reader, into: pipeline, deadline: drainDeadline)
                let settled = stalled ? false : await pipeline.drain(timeout: drainDeadline)
                _ = await pipeline.stop()
                let c = pipeline.snapshot
                // Read and without an outcome: held by the engine, or waiting for room when the replay stalled.
                let unsettled = c.consumed - c.accepted - c.errorsByReason.values.reduce(0, +)
                let unread = reader.ranges.values.reduce(0) { $0 + Int64($1.count) } - Int64(c.consumed)
                if !settled || unsettled > 0 {
                    logger.warning("replay: not every notification got an outcome in time", metadata: [
                        "topic": "\(topic)", "without_outcome": "\(unsettled)", "unread": "\(max(0, unread))",
                        "deadline": "\(drainDeadline)",
                    ])
                }
                result.counts.consumed += c.consumed
                result.counts.submitted += c.submitted
                result.counts.accepted += c.accepted
                result.counts.errorsByReason.merge(c.errorsByReason, uniquingKeysWith: +)
                result.withoutOutcome += unsettled
                if stalled { result.unread += max(0, unread) }
            }
        }
        return result
    }

    /// Reads the range into the pipeline; returns true when it stopped because nothing progressed (no record read, no
    /// outcome) for `deadline`: with the gateway down and a range larger than `max_in_flight`, reading waits for room
    /// that never comes, and the deadline must bound the whole replay, not only the drain after reading.
    static func readUnlessStalled(_ reader: KafkaReplayReader, into pipeline: Pipeline, deadline: Duration) async throws -> Bool {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                async let reading: Void = reader.run()
                try await pipeline.run(records: reader.records)
                await reading
                return false
            }
            group.addTask {
                await ProgressWatch(deadline: deadline) { pipeline.snapshot.progress }.waitForStall()
                return true
            }
            let stalled = try await group.next()!
            if stalled { reader.stop() }  // its thread may wait for room; the pipeline's wait is cancelled below
            group.cancelAll()
            return stalled
        }
    }

    /// Moves the worker group's committed offsets to where the range starts, so that the (stopped) workers consume
    /// it again when they start. Returns the offsets set.
    public static func resetGroup(configuration: WorkerConfiguration, start: ReplayStart) throws -> [TopicPartition: Int64] {
        try start.requireInputTopics(configuration.kafka.inputTopics)
        var offsets: [TopicPartition: Int64] = [:]
        let properties = ["log_level": "3"].merging(configuration.kafka.properties) { $1 }
        for topic in configuration.kafka.inputTopics {
            let reader = try KafkaReplayReader(
                properties: properties.merging(["bootstrap.servers": configuration.kafka.brokers]) { $1 },
                topic: topic, start: start.start(for: topic))
            for (partition, range) in reader.ranges { offsets[TopicPartition(topic: topic, partition: partition)] = range.lowerBound }
        }
        try KafkaAdmin.commitGroupOffsets(
            bootstrapServers: configuration.kafka.brokers, group: configuration.kafka.groupID, offsets,
            properties: configuration.kafka.properties)
        return offsets
    }
}

/// Waits until a count stops moving for `deadline` (checked four times a second); returns at once when cancelled.
struct ProgressWatch {
    let deadline: Duration
    let progress: @Sendable () -> Int

    func waitForStall() async {
        var last = progress()
        var since = ContinuousClock.now
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(250))
            let now = progress()
            if now != last {
                last = now
                since = .now
            } else if ContinuousClock.now - since >= deadline {
                return
            }
        }
    }
}

extension PipelineCounts {
    /// Records read plus outcomes known: it moves while a replay makes progress.
    var progress: Int { consumed + accepted + errorsByReason.values.reduce(0, +) }
}
