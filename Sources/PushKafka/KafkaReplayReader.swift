import Crdkafka
import Foundation
import Synchronization

/// Reads a range of a topic once, outside any consumer group: it starts at given offsets, at a time, or at the
/// earliest offsets, and stops at the end offsets the partitions had when it started (a partition is done when its
/// position reaches its end, so a range that ends in a transaction marker or in records compacted away ends too).
/// It commits nothing, so the worker group's offsets never move
/// (``KafkaAdmin/commitGroupOffsets(bootstrapServers:group:_:properties:)`` moves them when an operator asks).
/// It reads at most `readAhead` records ahead of whoever iterates ``records``, so a large range keeps memory bounded.
public final class KafkaReplayReader: Sendable {
    public enum Start: Sendable {
        case earliest
        /// Per partition; partitions not named are not read (a replay does only what it is asked).
        case offsets([Int32: Int64])
        /// UNIX milliseconds: the first record at or after this time in each partition.
        case timestamp(Int64)
    }

    private nonisolated(unsafe) let client: OpaquePointer
    public let topic: String
    /// Where each partition starts and ends (end exclusive) for this replay.
    public let ranges: [Int32: Range<Int64>]
    /// The range's records in batches; each batch taken lets the reader read that many more.
    public let records: Batches
    private let continuation: AsyncStream<[KafkaRecord]>.Continuation
    private let budget: ReadAheadBudget
    private let follow: Bool
    /// Paces fetching while a following reader is idle at the end (nil for a reader that does not follow).
    private let watch: FetchAnswerWatch?

    /// Records read and not yet taken from ``records``, at most (a batch of up to 1,000 may pass it when nothing is
    /// outstanding).
    public var readAhead: Int { budget.limit }
    /// The most records ever read and not yet taken.
    public var peakReadAhead: Int { budget.peak }
    /// Records read and not yet taken now.
    public var outstandingRecords: Int { budget.outstandingNow }
    /// Whether the reader's thread waits for the consumer to take what it read.
    public var isWaitingForConsumer: Bool { budget.isWaiting }

    /// - Parameters:
    ///   - follow: the reader does not stop at the end offsets: once every partition has reached them it yields an
    ///     empty batch (the range is read; what comes after was written since), and then follows the topic, until
    ///     ``records`` is no longer iterated.
    ///   - idlePace: for a reader that follows, how long each empty fetch answer at once is held while it is idle on
    ///     a broker that answers empty fetches at once (``FetchAnswerWatch``; zero: never).
    public init(
        properties: [String: String], topic: String, start: Start, readAhead: Int = 10_000,
        timeoutMilliseconds: Int32 = 10_000, follow: Bool = false, idlePace: Duration = .zero
    ) throws(KafkaError) {
        self.follow = follow
        try LibRDKafka.checkVersion()
        var properties = properties
        properties["group.id"] = properties["group.id"] ?? "pushworker-replay"  // required by librdkafka; never committed
        properties["enable.auto.commit"] = "false"
        properties["enable.auto.offset.store"] = "false"
        // The end of a partition is seen as its position, not as the last record's offset + 1.
        properties["enable.partition.eof"] = "true"
        let configuration = try KafkaConfigurationHandle(properties)
        let watch = follow
            ? FetchAnswerWatch(fetchWaitMaxMilliseconds: FetchAnswerWatch.fetchWaitMaxMilliseconds(properties), pace: idlePace)
            : nil
        try watch?.install(on: configuration.pointer)
        client = try configuration.makeClient(RD_KAFKA_CONSUMER)
        self.watch = watch
        self.topic = topic
        let budget = ReadAheadBudget(limit: max(1, readAhead))
        self.budget = budget
        let (stream, continuation) = AsyncStream.makeStream(of: [KafkaRecord].self)
        continuation.onTermination = { _ in budget.cancel() }
        self.continuation = continuation
        records = Batches(stream: stream, budget: budget)
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
            case .offsets(let given):
                for p in partitions { starts[p] = given[p].map { max($0, lows[p]!) } ?? ends[p]! }
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

    /// Ends ``run()`` (within a poll's 100 ms) and the batches; for a reader that follows the topic.
    public func stop() {
        watch?.setIdle(false)
        budget.cancel()
    }

    /// For a reader that follows: how many empty fetch answers at once were held while idle, since the start.
    public var idlePaces: Int { watch?.paces ?? 0 }

    /// For a reader that follows: how many fetch answers came back faster than a broker that holds empty fetches
    /// answers, since the start.
    public var fetchAnswersAtOnce: Int { watch?.answers ?? 0 }

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
        var followed = false
        if follow {
            // Every partition from its start, including those empty now: what is written later is followed.
            let all = PartitionList(ranges.map { (TopicPartition(topic: topic, partition: $0.key), $0.value.lowerBound) })
            _ = rd_kafka_assign(client, all.pointer)
            withExtendedLifetime(all) {}
            if remaining.isEmpty {
                followed = true
                continuation.yield([])
            }
        }
        while (!remaining.isEmpty || followed) && !budget.isCancelled {
            var batch: [KafkaRecord] = []
            var timeout: Int32 = 100
            while batch.count < 1000, let message = rd_kafka_consumer_poll(client, timeout) {
                timeout = 0
                defer { rd_kafka_message_destroy(message) }
                let m = message.pointee
                if followed {
                    if m.err == RD_KAFKA_RESP_ERR_NO_ERROR { batch.append(KafkaRecord(message: message)) }
                    continue
                }
                guard let end = remaining[m.partition] else {
                    // Following: a record past its partition's end, while others catch up.
                    if follow, m.err == RD_KAFKA_RESP_ERR_NO_ERROR { batch.append(KafkaRecord(message: message)) }
                    continue
                }
                if m.err == RD_KAFKA_RESP_ERR__PARTITION_EOF {
                    // The position reached the high watermark: past the end when the range ends in a transaction
                    // marker or in records compacted away.
                    if m.offset >= end { remaining[m.partition] = nil }
                    continue
                }
                guard m.err == RD_KAFKA_RESP_ERR_NO_ERROR, m.offset < end else { continue }
                batch.append(KafkaRecord(message: message))
                if m.offset + 1 >= end { remaining[m.partition] = nil }
            }
            if let watch, followed {
                // Idle: a poll's wait with no record (so nothing is prefetched), on a broker that answered fetches
                // at once meanwhile.
                if batch.isEmpty { watch.setIdle(watch.idleAfterEmptyPoll { true }) } else { watch.reset() }
            }
            if !batch.isEmpty {
                budget.acquire(batch.count)  // waits while the consumer is readAhead behind
                continuation.yield(batch)
            }
            if follow, !followed, remaining.isEmpty {
                followed = true
                continuation.yield([])
            }
        }
        watch?.setIdle(false)
        continuation.finish()
    }

    deinit {
        rd_kafka_consumer_close(client)
        rd_kafka_destroy(client)
    }
}

extension KafkaReplayReader {
    /// The range's batches, in order; taking one lets the reader read that many records more.
    public struct Batches: AsyncSequence, Sendable {
        public typealias Element = [KafkaRecord]
        public typealias Failure = Never
        let stream: AsyncStream<[KafkaRecord]>
        let budget: ReadAheadBudget

        public struct AsyncIterator: AsyncIteratorProtocol {
            public typealias Element = [KafkaRecord]
            public typealias Failure = Never
            var base: AsyncStream<[KafkaRecord]>.AsyncIterator
            let budget: ReadAheadBudget

            public mutating func next() async -> [KafkaRecord]? {
                let batch = await base.next()
                if let batch { budget.release(batch.count) }
                return batch
            }
        }

        public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: stream.makeAsyncIterator(), budget: budget) }
    }
}

/// How many records the reader's thread may read ahead of the consumer: it blocks (on its own thread) while that
/// many are outstanding, until the consumer takes some or stops listening.
final class ReadAheadBudget: @unchecked Sendable {  // every field is guarded by `condition`
    let limit: Int
    private let condition = NSCondition()
    private var outstanding = 0
    private var peakValue = 0
    private var cancelled = false
    private var waiting = false

    init(limit: Int) { self.limit = limit }

    var outstandingNow: Int { locked { outstanding } }
    var isWaiting: Bool { locked { waiting } }
    var peak: Int { locked { peakValue } }
    var isCancelled: Bool { locked { cancelled } }

    private func locked<T>(_ body: () -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body()
    }

    /// Blocks while `count` more would pass the limit (a batch always passes when nothing is outstanding).
    func acquire(_ count: Int) {
        condition.lock()
        defer { condition.unlock() }
        while !cancelled && outstanding > 0 && outstanding + count > limit {
            waiting = true
            condition.wait()
        }
        waiting = false
        outstanding += count
        peakValue = max(peakValue, outstanding)
    }

    func release(_ count: Int) {
        condition.lock()
        outstanding -= count
        condition.broadcast()
        condition.unlock()
    }

    /// Nobody listens any more: nothing waits again.
    func cancel() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        condition.unlock()
    }
}

extension KafkaAdmin {
    /// Sets a consumer group's committed offsets (an operator's explicit reset). The group should have no active
    /// members while this runs. `properties` (security settings, say) go to the client it makes.
    public static func commitGroupOffsets(
        bootstrapServers: String, group: String, _ offsets: [TopicPartition: Int64], properties: [String: String] = [:]
    ) throws(KafkaError) {
        let client = try groupClient(bootstrapServers, group, properties)
        defer { closeGroupClient(client) }
        let list = PartitionList(offsets.map { ($0.key, $0.value) })
        let error = withExtendedLifetime(list) { rd_kafka_commit(client, list.pointer, 0) }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot reset the offsets of group \(group)") }
    }
}

extension KafkaAdmin {
    /// A group's committed offsets for `partitions` (-1001 where it has none), without joining the group.
    public static func committedOffsets(
        bootstrapServers: String, group: String, _ partitions: [TopicPartition], timeoutMilliseconds: Int32 = 10_000,
        properties: [String: String] = [:]
    ) throws(KafkaError) -> [TopicPartition: Int64] {
        let client = try groupClient(bootstrapServers, group, properties)
        defer { closeGroupClient(client) }
        let list = PartitionList(partitions.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) })
        let error = withExtendedLifetime(list) { rd_kafka_committed(client, list.pointer, timeoutMilliseconds) }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot read the committed offsets of \(group)") }
        return Dictionary(uniqueKeysWithValues: list.pointer.pointee.entries)
    }
}

extension KafkaAdmin {
    /// A consumer handle in `group` that neither subscribes nor auto-commits: for reading and setting offsets.
    fileprivate static func groupClient(
        _ bootstrapServers: String, _ group: String, _ properties: [String: String]
    ) throws(KafkaError) -> OpaquePointer {
        let configuration = try KafkaConfigurationHandle(
            ["log_level": "3"].merging(properties) { $1 }.merging([
                "bootstrap.servers": bootstrapServers, "group.id": group, "enable.auto.commit": "false",
            ]) { $1 })
        return try configuration.makeClient(RD_KAFKA_CONSUMER)
    }

    fileprivate static func closeGroupClient(_ client: OpaquePointer) {
        rd_kafka_consumer_close(client)
        rd_kafka_destroy(client)
    }
}
