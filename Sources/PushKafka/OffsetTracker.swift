import DequeModule

/// A Kafka partition of a topic.
public struct TopicPartition: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }

    public static func < (a: TopicPartition, b: TopicPartition) -> Bool {
        (a.topic, a.partition) < (b.topic, b.partition)
    }
}

/// Which offsets may be committed: per partition, the contiguous prefix of records that are settled.
///
/// A record is settled when its outcome is known *and* every output event about it has been acknowledged by the
/// broker. Records settle out of order (gateway outcomes, producer acknowledgements); the committable offset only
/// moves past a record once it and everything before it in its partition are settled. Pure: no I/O, no locks.
public struct OffsetTracker: Sendable {
    private struct Record {
        var offset: Int64
        var outcomeKnown = false
        var pendingOutputs = 0
        var isSettled: Bool { outcomeKnown && pendingOutputs == 0 }
    }

    private struct Partition {
        var records = Deque<Record>()
        /// The offset after the last settled record of the prefix: what a commit would store.
        var committable: Int64?
        var dirty = false

        func index(of offset: Int64) -> Int? {
            // Offsets arrive in increasing order (with possible gaps): binary search.
            var low = 0
            var high = records.count - 1
            while low <= high {
                let mid = (low + high) / 2
                let value = records[mid].offset
                if value == offset { return mid }
                if value < offset { low = mid + 1 } else { high = mid - 1 }
            }
            return nil
        }

        /// Appends a record; offsets must increase.
        mutating func append(_ offset: Int64, of partition: TopicPartition) {
            if let last = records.last?.offset { precondition(offset > last, "offsets of \(partition) out of order") }
            records.append(Record(offset: offset))
        }

        /// Changes the record at `offset`, if it is held; returns whether that settled it.
        mutating func update(_ offset: Int64, _ change: (inout Record) -> Void) -> Bool {
            guard let index = index(of: offset) else { return false }
            let wasSettled = records[index].isSettled
            change(&records[index])
            let settled = !wasSettled && records[index].isSettled
            if index == 0 { advance() }
            return settled
        }

        mutating func advance() {
            while let first = records.first, first.isSettled {
                committable = first.offset + 1
                records.removeFirst()
                dirty = true
            }
        }
    }

    private var partitions: [TopicPartition: Partition] = [:]
    /// Records received and not yet settled, across partitions.
    public private(set) var outstanding = 0

    public init() {}

    /// A record was handed to the pipeline. Offsets of one partition must arrive in increasing order.
    public mutating func received(_ partition: TopicPartition, offset: Int64) {
        // Mutated in place through the dictionary: a copy taken out and written back would share the records'
        // storage with the dictionary's and copy all of it on every change (quadratic in the records held).
        partitions[partition, default: Partition()].append(offset, of: partition)
        outstanding += 1
    }

    /// An output event about the record was handed to the producer; it holds the offset until acknowledged.
    public mutating func outputPending(_ partition: TopicPartition, offset: Int64) {
        update(partition, offset) { $0.pendingOutputs += 1 }
    }

    /// The broker acknowledged an output event about the record.
    public mutating func outputAcknowledged(_ partition: TopicPartition, offset: Int64) {
        update(partition, offset) { $0.pendingOutputs -= 1 }
    }

    /// The record's terminal outcome is known (accepted, or failed with its error event handed to the producer).
    public mutating func outcomeKnown(_ partition: TopicPartition, offset: Int64) {
        update(partition, offset) { $0.outcomeKnown = true }
    }

    private mutating func update(_ partition: TopicPartition, _ offset: Int64, _ change: (inout Record) -> Void) {
        if partitions[partition]?.update(offset, change) == true { outstanding -= 1 }
    }

    /// The offset a commit may store for the partition (one past the settled prefix), if it moved at all.
    public func committable(_ partition: TopicPartition) -> Int64? {
        partitions[partition]?.committable
    }

    /// The partitions whose committable offset moved since the last call, with that offset; clears the marks.
    public mutating func takeCommittable() -> [(TopicPartition, Int64)] {
        var result: [(TopicPartition, Int64)] = []
        for key in Array(partitions.keys) where partitions[key]!.dirty {
            if let offset = partitions[key]!.committable { result.append((key, offset)) }
            partitions[key]!.dirty = false
        }
        return result
    }

    /// Forgets revoked partitions: what was not settled stays uncommitted and is delivered again to the partitions'
    /// next owner.
    public mutating func revoke(_ revoked: [TopicPartition]) {
        for partition in revoked {
            if let p = partitions.removeValue(forKey: partition) {
                outstanding -= p.records.filter { !$0.isSettled }.count
            }
        }
    }

    /// Records of the partition received and not yet settled.
    public func unsettled(_ partition: TopicPartition) -> Int {
        partitions[partition]?.records.filter { !$0.isSettled }.count ?? 0
    }
}
