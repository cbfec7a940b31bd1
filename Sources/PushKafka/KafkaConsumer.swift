import Crdkafka
import Foundation
import Logging
import Synchronization

/// A record from the input topics.
public struct KafkaRecord: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    /// The record's timestamp, UNIX milliseconds (-1 when the broker gave none).
    public var timestamp: Int64
    public var key: [UInt8]?
    /// Empty for a tombstone too (see ``isTombstone``).
    public var value: [UInt8]
    /// A record without a value: on a compacted topic, the key's deletion.
    public var isTombstone = false

    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }
}

/// A member of a consumer group over the input topics (librdkafka), polled on a thread of its own so that nothing
/// blocks the cooperative pool. Each poll's records go to the ``RecordSink`` (the worker's pipeline and its
/// in-flight ledger) on that thread, borrowed, without a copy. Offsets are stored only for the sink's settled
/// prefixes and committed by librdkafka's auto-commit, and synchronously when partitions are revoked and on close.
/// When the sink's ``RecordSink/pressure`` reaches `maxHeld`, the assigned partitions are paused: fetching
/// stops, nothing is dropped (``FetchThrottle`` decides when and which: a resume names every partition paused since
/// the last one, so that a rebalance while paused cannot leave partitions paused for good). Records librdkafka fetches
/// again in a resumed partition are dropped before the sink sees them (``FetchPositions``). On a broker that answers
/// an empty fetch at once, librdkafka's fetching is paced (each empty answer held for `idlePace`) while the consumer
/// is idle at the end of its partitions with nothing prefetched (``FetchAnswerWatch``).
public final class KafkaConsumer: Sendable {
    /// Who owns the polled records.
    public let sink: any RecordSink
    /// The default sink's record stream (when the consumer was made without a sink of its own).
    public var records: AsyncStream<[KafkaRecord]> { (sink as! RecordStream).records }
    /// The default sink, which settles by record.
    public var offsets: RecordStream { sink as! RecordStream }
    private nonisolated(unsafe) let client: OpaquePointer
    private let context: RebalanceContext
    private let maxHeld: Int
    private let holdBeforePause: Duration
    private let maxBatch: Int
    private let watch: FetchAnswerWatch
    private let stopRequested = Atomic<Bool>(false)
    private let pausedFlag = Atomic<Bool>(false)
    /// The poll loop's ``FetchThrottle`` counts, published for ``fetchHolds`` and ``fetchPauses``.
    private let holdCount = Atomic<Int>(0)
    private let pauseCount = Atomic<Int>(0)
    private let suspended = Atomic<Bool>(false)
    private let logger: Logger

    /// - Parameters:
    ///   - properties: librdkafka properties (bootstrap.servers, group.id, security, ...). The consumer sets
    ///     `enable.auto.offset.store=false` and `auto.offset.reset=earliest` unless given.
    ///   - sink: who takes the records; by default a ``RecordStream``.
    ///   - holdBeforePause: how long the consumer stops polling at `maxHeld` before it pauses fetching
    ///     (``FetchThrottle``): a pipeline that drains within it keeps librdkafka's prefetched records.
    ///   - idlePace: how long each empty fetch answer at once is held while idle on a broker that answers empty
    ///     fetches at once (zero: never; a record that arrives meanwhile waits at most this long).
    public init(
        properties: [String: String], topics: [String], maxHeld: Int, maxBatch: Int = 1000,
        holdBeforePause: Duration = .seconds(1), idlePace: Duration = KafkaConsumer.defaultIdlePace,
        sink: (any RecordSink)? = nil, logger: Logger = Logger(label: "pushworker.kafka.consumer")
    ) throws(KafkaError) {
        self.sink = sink ?? RecordStream()
        try LibRDKafka.checkVersion()
        var properties = properties
        properties["enable.auto.offset.store"] = "false"
        properties["enable.auto.commit"] = properties["enable.auto.commit"] ?? "true"
        properties["auto.offset.reset"] = properties["auto.offset.reset"] ?? "earliest"
        // Commit what is settled every second (librdkafka's default is 5 s): fewer duplicates after a crash.
        properties["auto.commit.interval.ms"] = properties["auto.commit.interval.ms"] ?? "1000"
        let configuration = try KafkaConfigurationHandle(properties)
        let context = RebalanceContext(sink: self.sink, logger: logger)
        rd_kafka_conf_set_opaque(configuration.pointer, Unmanaged.passUnretained(context).toOpaque())
        rd_kafka_conf_set_rebalance_cb(configuration.pointer, rebalanceCallback)
        let watch = FetchAnswerWatch(
            fetchWaitMaxMilliseconds: FetchAnswerWatch.fetchWaitMaxMilliseconds(properties), pace: idlePace)
        try watch.install(on: configuration.pointer)
        client = try configuration.makeClient(RD_KAFKA_CONSUMER)
        self.watch = watch
        self.context = context
        self.maxHeld = maxHeld
        self.holdBeforePause = holdBeforePause
        self.maxBatch = maxBatch
        self.logger = logger
        rd_kafka_poll_set_consumer(client)
        let list = PartitionList(topics.map { (TopicPartition(topic: $0, partition: -1), 0) })
        let error = withExtendedLifetime(list) { rd_kafka_subscribe(client, list.pointer) }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            rd_kafka_destroy(client)
            throw KafkaError(error, "cannot subscribe to \(topics)")
        }
    }

    /// Polls on a dedicated thread until ``stop()`` or cancellation, then stores the settled offsets, commits them
    /// synchronously, leaves the group and finishes ``records``.
    ///
    /// After cancellation (the worker's shutdown allowance has run out, or a second signal), it returns at the
    /// latest ``cancelledShutdownGrace`` later: a group coordinator that takes a commit or a leave and stops
    /// answering would hold them without end (with librdkafka's mock broker answering after 100 s, `rd_kafka_commit`
    /// was still waiting 17 minutes later). The thread is then left to itself, holding this consumer, until the
    /// process exits; what it did not commit is delivered again.
    public func run() async {
        let finished = await runOnDedicatedThread(
            name: "kafka-consumer", onCancel: { [self] in stop() }, abandonAfterCancel: Self.cancelledShutdownGrace
        ) { [self] in pollLoop() }
        if !finished {
            logger.warning("the consumer did not commit and leave the group in time: going on without it (the group coordinator does not answer); what it did not commit is delivered again", metadata: [
                "waited": "\(Self.cancelledShutdownGrace)",
            ])
        }
    }

    /// How long a cancelled ``run()`` waits for the final commit and the leave.
    public static let cancelledShutdownGrace: Duration = .seconds(5)

    /// Stops fetching new records while staying in the group (graceful shutdown: what is in flight settles and
    /// is committed before ``stop()``).
    public func suspendFetching() {
        suspended.store(true, ordering: .relaxed)
        context.stopping.store(true, ordering: .relaxed)
    }

    /// Asks the poll loop to finish.
    public func stop() {
        watch.setIdle(false)
        context.stopping.store(true, ordering: .relaxed)
        stopRequested.store(true, ordering: .relaxed)
    }

    /// Records behind the end of the assigned partitions (from librdkafka's cached watermarks; no broker call).
    public var lag: Int64 {
        var list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        guard rd_kafka_assignment(client, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list else { return 0 }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        guard list.pointee.cnt > 0, rd_kafka_position(client, list) == RD_KAFKA_RESP_ERR_NO_ERROR else { return 0 }
        var total: Int64 = 0
        for (tp, position) in list.pointee.entries where position >= 0 {
            var low: Int64 = 0
            var high: Int64 = 0
            if rd_kafka_get_watermark_offsets(client, tp.topic, tp.partition, &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR, high >= position {
                total += high - position
            }
        }
        return total
    }

    /// Whether fetching is paused because the sink holds `maxHeld` records.
    public var isPaused: Bool { pausedFlag.load(ordering: .relaxed) }

    /// How many times polling was held at `maxHeld` (``FetchThrottle``), since the start.
    public var fetchHolds: Int { holdCount.load(ordering: .relaxed) }

    /// How many times fetching paused at `maxHeld` (a hold that did not drain in time, or a new assignment
    /// while full; not the pause of a graceful shutdown), since the start. Each pause drops what librdkafka
    /// prefetched, to be fetched again on resume.
    public var fetchPauses: Int { pauseCount.load(ordering: .relaxed) }

    /// The partitions assigned now.
    public var assignment: [TopicPartition] { context.assignment }

    /// How long an empty fetch answer at once is held while idle, by default.
    public static let defaultIdlePace: Duration = .milliseconds(10)

    /// How many empty fetch answers at once were held for `idlePace` while idle, since the start.
    public var idlePaces: Int { watch.paces }

    /// How many fetch answers came back faster than a broker that holds empty fetches answers, since the start
    /// (``FetchAnswerWatch``).
    public var fetchAnswersAtOnce: Int { watch.answers }

    private func pollLoop() {
        var throttle = FetchThrottle(limit: maxHeld, holdLimit: holdBeforePause)
        var positions = FetchPositions()
        var watchedGeneration = -1
        let messages = UnsafeMutableBufferPointer<UnsafeMutablePointer<rd_kafka_message_t>>.allocate(capacity: maxBatch)
        defer { messages.deallocate() }
        // The consumer queue (rd_kafka_poll_set_consumer), for draining what is already fetched a batch at a time;
        // this loop owns the handle and gives it back before the consumer closes.
        let queue = rd_kafka_queue_get_consumer(client)
        // The watch wakes the poll only to pace.
        if watch.pace > .zero { watch.attach(queue) }
        while !stopRequested.load(ordering: .relaxed) {
            // Suspended (graceful shutdown) counts as full: fetching stops, the group membership and commits go on.
            let held = suspended.load(ordering: .relaxed) ? Int.max : sink.pressure
            // The rebalance callback runs inside rd_kafka_consumer_poll on this thread: the assignment read here
            // is the one the action applies to.
            let assignment = context.assignmentAndGeneration
            if assignment.generation != watchedGeneration {
                // A new assignment: its fetches are not yet known to be empty.
                watchedGeneration = assignment.generation
                watch.reset()
            }
            if let action = throttle.next(held: held, assignment: assignment.partitions, generation: assignment.generation) {
                holdCount.store(throttle.holds, ordering: .relaxed)
                pauseCount.store(throttle.pauses, ordering: .relaxed)
                if action == .hold {
                    // Full: nothing is polled until the pipeline drains or the hold ends (a dedicated thread, so it
                    // may block). Settled offsets are still stored for the next commit.
                    watch.setIdle(isIdle(queue: queue))
                    storeSettledOffsets()
                    Thread.sleep(forTimeInterval: Self.holdTick)
                    continue
                }
                apply(action)
                if case .resume(let partitions) = action {
                    positions.resumed(partitions)
                    watch.reset()
                }
            }
            var count = polled(into: messages, queue: queue)
            if count > 0 {
                watch.reset()
                let screened = positions.screen(
                    messages, count: count, generation: context.generation,
                    highWatermark: highWatermark, topicName: { String(cString: rd_kafka_topic_name($0)) },
                    destroy: { rd_kafka_message_destroy($0) })
                for rewind in screened.rewinds { report(rewind) }
                count = screened.count
                if count > 0 {
                    sink.consume(PolledBatch(messages: UnsafeBufferPointer(rebasing: messages[..<count])))
                    for i in 0..<count { rd_kafka_message_destroy(messages[i]) }
                }
            } else {
                watch.setIdle(isIdle(queue: queue))
            }
            storeSettledOffsets()
        }
        watch.setIdle(false)
        watch.attach(nil)
        if let queue { rd_kafka_queue_destroy(queue) }
        commitFinally(within: .seconds(10))
        rd_kafka_consumer_close(client)
        (sink as? RecordStream)?.finish()
    }

    /// Whether the consumer is idle at the end of its partitions for the watch's pacing
    /// (``FetchAnswerWatch/idleAfterEmptyPoll(nothingPrefetched:)``): nothing prefetched is an empty consumer queue.
    private func isIdle(queue: OpaquePointer?) -> Bool {
        watch.idleAfterEmptyPoll { queue.map { rd_kafka_queue_length($0) == 0 } ?? false }
    }

    /// Waits up to 100 ms for one record, then takes what else is already fetched, up to `messages.count` in all,
    /// without waiting: the records' count at the start of `messages`. Error messages (end of partition, consumer
    /// errors) are logged, destroyed and left out.
    ///
    /// The rest come through `rd_kafka_consume_batch_queue` on the consumer queue: one call, and one reading of
    /// the clock for `max.poll.interval.ms`, for the batch, where `rd_kafka_consumer_poll` takes both for every
    /// record. Both serve the rebalance callback on this thread between records.
    private func polled(
        into messages: UnsafeMutableBufferPointer<UnsafeMutablePointer<rd_kafka_message_t>>,
        queue: OpaquePointer?
    ) -> Int {
        guard let first = rd_kafka_consumer_poll(client, 100) else { return 0 }
        messages[0] = first
        var count = 1
        if let queue, messages.count > 1, let base = messages.baseAddress {
            // librdkafka's array holds optional pointers: the same layout, filled only with records.
            let taken = (base + 1).withMemoryRebound(to: UnsafeMutablePointer<rd_kafka_message_t>?.self, capacity: messages.count - 1) {
                rd_kafka_consume_batch_queue(queue, 0, $0, messages.count - 1)
            }
            if taken > 0 { count += taken }
        }
        var kept = 0
        for i in 0..<count {
            let message = messages[i]
            let error = message.pointee.err
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
                if error != RD_KAFKA_RESP_ERR__PARTITION_EOF {
                    logger.warning("kafka consumer error", metadata: ["error": "\(String(cString: rd_kafka_err2str(error)))"])
                }
                rd_kafka_message_destroy(message)
                continue
            }
            messages[kept] = message
            kept += 1
        }
        return kept
    }

    /// The high watermark librdkafka last saw for the partition (no broker call).
    private func highWatermark(_ key: FetchPositions.Key) -> Int64? {
        var low: Int64 = 0
        var high: Int64 = 0
        let error = rd_kafka_get_watermark_offsets(client, rd_kafka_topic_name(key.topic), key.partition, &low, &high)
        return error == RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0 ? high : nil
    }

    private func report(_ rewind: FetchPositions.Rewind) {
        let partition = TopicPartition(topic: String(cString: rd_kafka_topic_name(rewind.key.topic)), partition: rewind.key.partition)
        let metadata: Logger.Metadata = ["partition": "\(partition)", "offset": "\(rewind.offset)", "position": "\(rewind.expected)"]
        if rewind.dropped {
            logger.info("librdkafka fetched records before the partition's position again: dropped", metadata: metadata)
        } else {
            // A partition not resumed in this assignment, or a log that no longer reaches the position: followed.
            logger.warning("librdkafka fetched from before the partition's position: delivering from there again", metadata: metadata)
        }
    }

    /// How often a hold looks at the pipeline's count again: a millisecond, a lock each.
    private static let holdTick = 0.001

    private func apply(_ action: FetchThrottle.Action) {
        let pause: Bool, partitions: [TopicPartition]
        switch action {
        case .pause(let p): (pause, partitions) = (true, p)
        case .resume(let p): (pause, partitions) = (false, p)
        case .hold: return  // nothing to tell librdkafka
        }
        pausedFlag.store(pause, ordering: .relaxed)
        guard !partitions.isEmpty else { return }
        let list = PartitionList(partitions.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) })
        // The list must outlive the call: a class whose last use is reading `pointer` may be freed before the call.
        _ = withExtendedLifetime(list) {
            if pause { rd_kafka_pause_partitions(client, list.pointer) } else { rd_kafka_resume_partitions(client, list.pointer) }
        }
        logger.debug(pause ? "paused fetching: the pipeline is full" : "resumed fetching", metadata: ["partitions": "\(partitions)"])
    }

    /// Commits the settled offsets before leaving the group. When members stop together (a rollout), the group is
    /// rebalancing by then and the broker refuses the commit of the old generation ("Specified group generation id
    /// is not valid"): the consumer serves the rebalance (records it polls meanwhile are dropped, uncommitted) and
    /// commits its settled offsets again in the new generation, for up to `limit` after the first refusal. (The
    /// limit starts there, not before the first commit: a coordinator that leaves the commit unanswered until the
    /// socket timeout, 60 s, and then refuses it must still leave time to commit in the new generation.)
    private func commitFinally(within limit: Duration) {
        storeSettledOffsets()
        var deadline: ContinuousClock.Instant?
        while true {
            let offsets = finalOffsets()
            let list = offsets.isEmpty ? nil : PartitionList(offsets)
            let error = withExtendedLifetime(list) { rd_kafka_commit(client, list?.pointer, 0) }
            if error == RD_KAFKA_RESP_ERR_NO_ERROR || error == RD_KAFKA_RESP_ERR__NO_OFFSET { return }
            let now = ContinuousClock.now
            if deadline == nil { deadline = now.advanced(by: limit) }
            guard KafkaConsumer.isGenerationError(error), let deadline, now < deadline else {
                logger.warning("final commit failed", metadata: ["error": "\(String(cString: rd_kafka_err2str(error)))"])
                return
            }
            logger.info("final commit refused while the group rebalances; committing again in the new generation", metadata: [
                "error": "\(String(cString: rd_kafka_err2str(error)))",
            ])
            let served = ContinuousClock.now.advanced(by: .milliseconds(300))
            while ContinuousClock.now < served, !Task.isCancelled {
                if let message = rd_kafka_consumer_poll(client, 50) { rd_kafka_message_destroy(message) }
            }
        }
    }

    /// The offsets the final commit commits: those of the partitions assigned now, and those kept from a failed
    /// revoke where the group's committed offset (asked for here) is not beyond them.
    private func finalOffsets() -> [(TopicPartition, Int64)] {
        let unconfirmed = context.unconfirmed
        let assignment = context.assignment
        let kept = unconfirmed.kept(assignment: assignment)
        var groupCommitted: [TopicPartition: Int64] = [:]
        if !kept.isEmpty {
            do {
                groupCommitted = try committed(kept, timeoutMilliseconds: 2_000)
            } catch {
                logger.info("cannot read the group's committed offsets; committing the kept ones", metadata: ["error": "\(error)"])
            }
        }
        return unconfirmed.finalCommit(assignment: assignment, groupCommitted: groupCommitted)
    }

    /// Errors that mean "this member's generation is over": a commit can succeed once the member has rejoined.
    static func isGenerationError(_ error: rd_kafka_resp_err_t) -> Bool {
        [RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID,
         RD_KAFKA_RESP_ERR__STATE, RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE].contains(error)
    }

    /// Stores (for auto-commit) the offsets past each partition's settled prefix.
    func storeSettledOffsets() {
        let moved = sink.takeCommittable()
        guard !moved.isEmpty else { return }
        context.stored(moved)
        let list = PartitionList(moved)
        let error = withExtendedLifetime(list) { rd_kafka_offsets_store(client, list.pointer) }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            // A partition revoked meanwhile cannot be stored: its records are redelivered to its next owner.
            logger.debug("offset store", metadata: ["error": "\(String(cString: rd_kafka_err2str(error)))"])
        }
    }

    /// Commits the stored offsets now and waits for the broker (tests use it).
    public func commitStoredOffsets() throws(KafkaError) {
        storeSettledOffsets()
        let error = rd_kafka_commit(client, nil, 0)
        if error != RD_KAFKA_RESP_ERR_NO_ERROR && error != RD_KAFKA_RESP_ERR__NO_OFFSET {
            throw KafkaError(error, "commit failed")
        }
    }

    /// The committed offsets of the group for `partitions` (asks the broker).
    public func committed(_ partitions: [TopicPartition], timeoutMilliseconds: Int32 = 10_000) throws(KafkaError) -> [TopicPartition: Int64] {
        let list = PartitionList(partitions.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) })
        let error = withExtendedLifetime(list) { rd_kafka_committed(client, list.pointer, timeoutMilliseconds) }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot read committed offsets") }
        return Dictionary(uniqueKeysWithValues: list.pointer.pointee.entries)
    }

    deinit {
        rd_kafka_destroy(client)
    }
}

extension KafkaRecord {
    /// Copies a polled message. It takes librdkafka's pointer, not a copy of the struct: the timestamp is read from
    /// librdkafka's larger message object that the struct is the head of.
    init(message pointer: UnsafeMutablePointer<rd_kafka_message_t>) {
        let m = pointer.pointee
        let topic = String(cString: rd_kafka_topic_name(m.rkt))
        var type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(pointer, &type)
        let value = m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: m.len)) } ?? []
        let key = m.key.map { Array(UnsafeRawBufferPointer(start: $0, count: m.key_len)) }
        self.init(topic: topic, partition: m.partition, offset: m.offset, timestamp: timestamp, key: key, value: value)
        isTombstone = m.payload == nil
    }
}
