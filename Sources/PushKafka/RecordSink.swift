import Crdkafka
import DequeModule
import Synchronization

/// Identifies a polled record's topic without naming it: equal for records of one topic (a name is a string made
/// on each call).
public struct PolledTopic: Hashable {
    let handle: UnsafeRawPointer
}

/// A record as polled, valid only during ``RecordSink/consume(_:)``: its bytes are librdkafka's, not a copy.
public struct PolledRecord {
    public var polledTopic: PolledTopic { PolledTopic(handle: topicHandle) }
    /// librdkafka's topic handle.
    let topicHandle: UnsafeRawPointer
    public let partition: Int32
    public let offset: Int64
    /// UNIX milliseconds, -1 when the broker gave none.
    public let timestamp: Int64
    public let value: UnsafeRawBufferPointer
    public let key: UnsafeRawBufferPointer?

    /// The topic's name (a string made on each call: ask once per run of records of one partition).
    public var topic: String { String(cString: rd_kafka_topic_name(OpaquePointer(topicHandle))) }

    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }

    /// A copy that outlives the poll.
    public var copy: KafkaRecord {
        KafkaRecord(
            topic: topic, partition: partition, offset: offset, timestamp: timestamp, key: key.map { Array($0) },
            value: Array(value))
    }
}

/// One poll's records, in partition order, borrowed from librdkafka for the length of ``RecordSink/consume(_:)``.
public struct PolledBatch {
    let messages: UnsafeBufferPointer<UnsafeMutablePointer<rd_kafka_message_t>>

    public var count: Int { messages.count }

    public subscript(index: Int) -> PolledRecord {
        let pointer = messages[index]
        let m = pointer.pointee
        var type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        // The timestamp is read from librdkafka's larger message object that the struct is the head of.
        let timestamp = rd_kafka_message_timestamp(pointer, &type)
        return PolledRecord(
            topicHandle: UnsafeRawPointer(m.rkt), partition: m.partition, offset: m.offset, timestamp: timestamp,
            value: UnsafeRawBufferPointer(start: m.payload, count: m.payload == nil ? 0 : m.len),
            key: m.key.map { UnsafeRawBufferPointer(start: $0, count: m.key_len) })
    }
}

/// Where a group consumer hands its records, and who owns them until their offsets may be committed: the worker's
/// pipeline (its in-flight ledger) or, for tests and tools, a ``RecordStream``. Every method but ``pressure`` and
/// ``takeCommittable()`` is called on the consumer's poll thread.
public protocol RecordSink: AnyObject, Sendable {
    /// Takes one poll's records (at most the consumer's batch size), without blocking.
    func consume(_ batch: PolledBatch)
    /// Partitions were assigned.
    func assigned(_ partitions: [TopicPartition])
    /// Partitions are being revoked: returns the committable offsets that moved (of every partition), then forgets
    /// the revoked partitions' unsettled records (settlements for them are ignored from now on).
    func revoked(_ partitions: [TopicPartition]) -> [(TopicPartition, Int64)]
    /// The partitions whose committable offsets moved since the last call, with those offsets.
    func takeCommittable() -> [(TopicPartition, Int64)]
    /// How full the sink is, compared with the consumer's `maxHeld`: fetching pauses at that number.
    var pressure: Int { get }
}

/// A sink that copies records into an `AsyncStream` of batches and settles them by record: the consumer's default,
/// for tests and tools that handle records themselves.
public final class RecordStream: RecordSink {
    public let records: AsyncStream<[KafkaRecord]>
    private let continuation: AsyncStream<[KafkaRecord]>.Continuation
    private let ledger = Mutex(HeldLedger<Int64>())

    public init() {
        (records, continuation) = AsyncStream.makeStream(of: [KafkaRecord].self)
    }

    public func consume(_ batch: PolledBatch) {
        var copies: [KafkaRecord] = []
        copies.reserveCapacity(batch.count)
        for i in 0..<batch.count { copies.append(batch[i].copy) }
        ledger.withLock { l in
            for r in copies {
                _ = l.admit(slot: l.slot(for: r.topicPartition), offset: r.offset, group: HeldLedger<Int64>.noGroup, entry: r.offset)
            }
        }
        continuation.yield(copies)
    }

    public func assigned(_ partitions: [TopicPartition]) { ledger.withLock { $0.assign(partitions) } }
    public func revoked(_ partitions: [TopicPartition]) -> [(TopicPartition, Int64)] { ledger.withLock { $0.revoke(partitions) } }
    public func takeCommittable() -> [(TopicPartition, Int64)] { ledger.withLock { $0.takeCommittable() } }
    public var pressure: Int { held }

    /// Records held: consumed and not yet settled.
    public var held: Int { ledger.withLock { $0.count } }

    /// Settles a record (its offset may be committed once every record before it is settled too).
    public func outcomeKnown(_ record: KafkaRecord) {
        ledger.withLock { l in
            let slot = l.slot(for: record.topicPartition)
            // The record's ticket is found by its offset: this sink is for tests and tools, not the hot path.
            if let ticket = l.ticket(slot: slot, offset: record.offset) { _ = l.resolve(ticket, outputs: 0) }
        }
    }

    /// Ends the stream (the consumer calls it when it stops).
    func finish() { continuation.finish() }
}
