import Crdkafka

/// Screens polled records for ones fetched again: per partition, one past the last offset handed to the sink within
/// the current assignment. librdkafka 2.0 (Debian's) sometimes resumes a paused partition from its reset position
/// (the earliest offset) instead of where it paused, or, once the fetch the resume started is under way, from where
/// an earlier pause had left it (librdkafka#4686: the resume's fetch version outlives it); the records it then
/// hands over again are already in the in-flight ledger, which would otherwise see the partition go back and
/// restart it (every held record delivered twice). So in a partition resumed within the assignment, a run of
/// records that starts before the partition's position is such a re-fetch when the partition's log still reaches
/// that position (its high watermark is at or past it): the records before the position are dropped. Any other
/// rewind goes through and the ledger restarts the partition: one in a partition never resumed in the assignment
/// (an offset reset after the broker lost records, whose offsets may since hold new ones), or one whose log no
/// longer reaches the position (truncated). What this costs: in a resumed partition whose broker lost records and
/// has since been written past the position again, the new records at the lost offsets are dropped too (a plain
/// Kafka consumer fetching on at its position skips them the same way).
///
/// Kept on the consumer's poll thread; a new assignment forgets every position and resume (the partitions' next
/// owners start at the committed offsets). Updated once per run of records of one partition in a batch.
struct FetchPositions {
    /// A librdkafka topic handle (it lives as long as the client) and a partition.
    struct Key: Hashable {
        var topic: OpaquePointer
        var partition: Int32
    }

    /// A run of records that started before its partition's position.
    struct Rewind: Equatable {
        var key: Key
        /// The run's first offset.
        var offset: Int64
        /// The partition's position before the run.
        var expected: Int64
        /// Whether the records before `expected` were dropped as fetched again (false: the partition was not
        /// resumed in the assignment, or the log was truncated; the records went through).
        var dropped: Bool
    }

    private var generation = -1
    private var next: [Key: Int64] = [:]
    /// Partitions resumed within the assignment.
    private var resumed: Set<TopicPartition> = []

    /// The consumer resumed these partitions.
    mutating func resumed(_ partitions: [TopicPartition]) {
        resumed.formUnion(partitions)
    }

    /// Drops the records of `messages[..<count]` that were fetched again (destroying them) and compacts the rest to
    /// the front, in order. Returns how many are left and the rewinds seen.
    /// - Parameters:
    ///   - generation: the assignment the batch was polled in, read after the poll (a rebalance during the poll
    ///     makes the batch straddle two assignments: the positions then start over, and the batch goes through).
    ///   - highWatermark: the partition's high watermark as librdkafka last saw it (nil when unknown).
    ///   - topicName: the name of a topic handle (asked only for a run that starts before its position).
    ///   - destroy: frees a dropped message.
    mutating func screen(
        _ messages: UnsafeMutableBufferPointer<UnsafeMutablePointer<rd_kafka_message_t>>, count: Int, generation: Int,
        highWatermark: (Key) -> Int64?, topicName: (OpaquePointer) -> String,
        destroy: (UnsafeMutablePointer<rd_kafka_message_t>) -> Void
    ) -> (count: Int, rewinds: [Rewind]) {
        if generation != self.generation {
            self.generation = generation
            next.removeAll()
            resumed.removeAll()
            return (count, [])
        }
        var rewinds: [Rewind] = []
        var kept = 0
        var i = 0
        while i < count {
            let first = messages[i].pointee
            var end = i + 1
            while end < count, messages[end].pointee.rkt == first.rkt, messages[end].pointee.partition == first.partition { end += 1 }
            guard let topic = first.rkt else {
                while i < end { messages[kept] = messages[i]; kept += 1; i += 1 }
                continue
            }
            let key = Key(topic: topic, partition: first.partition)
            var dropBelow = Int64.min
            if let expected = next[key], first.offset < expected {
                let wasResumed = resumed.contains(TopicPartition(topic: topicName(topic), partition: first.partition))
                let dropped = wasResumed && (highWatermark(key) ?? -1) >= expected
                rewinds.append(Rewind(key: key, offset: first.offset, expected: expected, dropped: dropped))
                if dropped { dropBelow = expected }
            }
            if dropBelow == Int64.min {
                // The common case: the whole run goes through.
                while i < end { messages[kept] = messages[i]; kept += 1; i += 1 }
                next[key] = messages[kept - 1].pointee.offset + 1
                continue
            }
            var last: Int64?
            while i < end {
                let message = messages[i]
                if message.pointee.offset < dropBelow {
                    destroy(message)
                } else {
                    messages[kept] = message
                    kept += 1
                    last = message.pointee.offset
                }
                i += 1
            }
            if let last { next[key] = last + 1 }
        }
        return (kept, rewinds)
    }
}
