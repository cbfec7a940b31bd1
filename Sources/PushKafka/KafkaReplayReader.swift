import Crdkafka
import Foundation
import Synchronization

/// Reads a range of a topic once, outside any consumer group: it starts at given offsets, at a time, or at the
/// earliest offsets, and stops at the end offsets the partitions had when it started. It commits nothing, so the
/// worker group's offsets never move (``KafkaAdmin/commitGroupOffsets(bootstrapServers:group:_:)`` moves them when an
/// operator asks).
public final class KafkaReplayReader: Sendable {
    public enum Start: Sendable {
        case earliest
        /// Per partition; partitions not named start at their earliest offset.
        case offsets([Int32: Int64])
        /// UNIX milliseconds: the first record at or after this time in each partition.
        case timestamp(Int64)
    }

    private nonisolated(unsafe) let client: OpaquePointer
    public let topic: String
    /// Where each partition starts and ends (end exclusive) for this replay.
    public let ranges: [Int32: Range<Int64>]
    public let records: AsyncStream<[KafkaRecord]>
    private let continuation: AsyncStream<[KafkaRecord]>.Continuation

    public init(properties: [String: String], topic: String, start: Start, timeoutMilliseconds: Int32 = 10_000) throws(KafkaError) {
        try LibRDKafka.checkVersion()
        var properties = properties
        properties["group.id"] = properties["group.id"] ?? "pushworker-replay"  // required by librdkafka; never committed
        properties["enable.auto.commit"] = "false"
        properties["enable.auto.offset.store"] = "false"
        let configuration = try KafkaConfigurationHandle(properties)
        client = try configuration.makeClient(RD_KAFKA_CONSUMER)
        self.topic = topic
        (records, continuation) = AsyncStream.makeStream(of: [KafkaRecord].self)
        do throws(KafkaError) {
            let partitions = try Self.partitions(client, topic, timeoutMilliseconds)
            var ends: [Int32: Int64] = [:]
            var lows: [Int32: Int64] = [:]
            for p in partitions {
                var low: Int64 = 0
                var high: Int64 = 0
                let error = rd_kafka_query_watermark_offsets(client, topic, p, &low, &high, timeoutMilliseconds)
                guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot read the end of \(topic)[\(p)]") }
                lows[p] = low
                ends[p] = high
            }
            var starts: [Int32: Int64] = lows
            switch start {
            case .earliest: break
            case .offsets(let given): for (p, o) in given where lows[p] != nil { starts[p] = max(o, lows[p]!) }
            case .timestamp(let ms):
                let list = PartitionList(partitions.map { (TopicPartition(topic: topic, partition: $0), ms) })
                let error = rd_kafka_offsets_for_times(client, list.pointer, timeoutMilliseconds)
                guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot look up offsets by time") }
                for (tp, offset) in list.pointer.pointee.entries {
                    // -1: no record at or after that time: nothing to replay in this partition.
                    starts[tp.partition] = offset < 0 ? ends[tp.partition]! : offset
                }
            }
            var ranges: [Int32: Range<Int64>] = [:]
            for p in partitions { ranges[p] = min(starts[p]!, ends[p]!)..<ends[p]! }
            self.ranges = ranges
            let assignment = PartitionList(ranges.filter { !$0.value.isEmpty }.map { (TopicPartition(topic: topic, partition: $0.key), $0.value.lowerBound) })
            let error = rd_kafka_assign(client, assignment.pointer)
            withExtendedLifetime(assignment) {}  // the list must outlive the call
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot assign the replay range") }
        } catch {
            rd_kafka_destroy(client)
            throw error
        }
    }

    private static func partitions(_ client: OpaquePointer, _ topic: String, _ timeout: Int32) throws(KafkaError) -> [Int32] {
        guard let handle = rd_kafka_topic_new(client, topic, nil) else { throw KafkaError("cannot open topic \(topic)") }
        defer { rd_kafka_topic_destroy(handle) }
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let error = rd_kafka_metadata(client, 0, handle, &metadata, timeout)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else { throw KafkaError(error, "no metadata for \(topic)") }
        defer { rd_kafka_metadata_destroy(metadata) }
        guard metadata.pointee.topic_cnt == 1 else { throw KafkaError("topic \(topic) not found") }
        let t = metadata.pointee.topics[0]
        if t.err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(t.err, "topic \(topic)") }
        return (0..<Int(t.partition_cnt)).map { t.partitions[$0].id }.sorted()
    }

    /// Records of the range, in batches, until every partition reached its end; runs on a thread of its own.
    public func run() async {
        await runOnDedicatedThread(name: "kafka-replay") { [self] in readRange() }
    }

    /// Reads the whole range and returns its records.
    public func readAll() async -> [KafkaRecord] {
        await withTaskGroup(of: [KafkaRecord].self) { group in
            group.addTask {
                await self.run()
                return []
            }
            group.addTask {
                var all: [KafkaRecord] = []
                for await batch in self.records { all += batch }
                return all
            }
            var out: [KafkaRecord] = []
            for await part in group { out += part }
            return out
        }
    }

    private func readRange() {
        var remaining = ranges.filter { !$0.value.isEmpty }.mapValues(\.upperBound)
        while !remaining.isEmpty {
            var batch: [KafkaRecord] = []
            var timeout: Int32 = 100
            while batch.count < 1000, let message = rd_kafka_consumer_poll(client, timeout) {
                timeout = 0
                defer { rd_kafka_message_destroy(message) }
                let m = message.pointee
                guard m.err == RD_KAFKA_RESP_ERR_NO_ERROR, let end = remaining[m.partition], m.offset < end else { continue }
                batch.append(KafkaRecord(message: message))
                if m.offset + 1 >= end { remaining[m.partition] = nil }
            }
            if !batch.isEmpty { continuation.yield(batch) }
        }
        continuation.finish()
    }

    deinit {
        rd_kafka_consumer_close(client)
        rd_kafka_destroy(client)
    }
}

extension KafkaAdmin {
    /// Sets a consumer group's committed offsets (an operator's explicit reset). The group should have no active
    /// members while this runs.
    public static func commitGroupOffsets(
        bootstrapServers: String, group: String, _ offsets: [TopicPartition: Int64]
    ) throws(KafkaError) {
        let client = try groupClient(bootstrapServers, group)
        defer { closeGroupClient(client) }
        let list = PartitionList(offsets.map { ($0.key, $0.value) })
        let error = withExtendedLifetime(list) { rd_kafka_commit(client, list.pointer, 0) }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot reset the offsets of group \(group)") }
    }
}

extension KafkaAdmin {
    /// A group's committed offsets for `partitions` (-1001 where it has none), without joining the group.
    public static func committedOffsets(
        bootstrapServers: String, group: String, _ partitions: [TopicPartition], timeoutMilliseconds: Int32 = 10_000
    ) throws(KafkaError) -> [TopicPartition: Int64] {
        let client = try groupClient(bootstrapServers, group)
        defer { closeGroupClient(client) }
        let list = PartitionList(partitions.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) })
        let error = withExtendedLifetime(list) { rd_kafka_committed(client, list.pointer, timeoutMilliseconds) }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot read the committed offsets of \(group)") }
        return Dictionary(uniqueKeysWithValues: list.pointer.pointee.entries)
    }
}

extension KafkaAdmin {
    /// A consumer handle in `group` that neither subscribes nor auto-commits: for reading and setting offsets.
    fileprivate static func groupClient(_ bootstrapServers: String, _ group: String) throws(KafkaError) -> OpaquePointer {
        let configuration = try KafkaConfigurationHandle([
            "bootstrap.servers": bootstrapServers, "group.id": group, "enable.auto.commit": "false", "log_level": "3",
        ])
        return try configuration.makeClient(RD_KAFKA_CONSUMER)
    }

    fileprivate static func closeGroupClient(_ client: OpaquePointer) {
        rd_kafka_consumer_close(client)
        rd_kafka_destroy(client)
    }
}
