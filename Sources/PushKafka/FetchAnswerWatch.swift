import Crdkafka
import Glibc
import Synchronization

/// Paces librdkafka's fetching while the consumer is idle at the end of its partitions on a broker that answers an
/// empty fetch at once.
///
/// A broker that holds an empty fetch (Apache Kafka, librdkafka's mock cluster) answers it after `fetch.wait.max.ms`
/// unless records arrive. Some Kafka-protocol brokers (noida-db among them) answer it at once, and librdkafka 2.0
/// then fetches again with no pause (it backs off only after errors): half a core spent while the consumer waits.
///
/// librdkafka calls the watch for every answer it receives (an `on_response_received` interceptor, on its broker
/// threads, before the answer is parsed). A fetch answer counts as "at once" when its round trip was shorter than
/// half of `fetch.wait.max.ms` (at least 10 ms, so a loaded machine still sees it): on a broker that holds empty fetches only answers that carry
/// records come that fast, and the consumer polls their records and starts the count again. At ``wakeAt`` answers
/// at once since the consumer's last records, the watch wakes the consumer's poll (`rd_kafka_queue_yield`, the one
/// librdkafka call it makes, under a lock that the consumer takes to detach the queue before destroying it). The
/// consumer then reports itself idle (``setIdle(_:)``) if nothing is prefetched, and while it is, each empty answer
/// at once holds its broker thread for the pace before librdkafka parses it and fetches again: what a broker that
/// holds empty fetches does, done on this side. A record that arrives meanwhile waits at most the pace, and the
/// answer that carries it is not held (``IdleFetchPacing``). The broker thread holds only this consumer's fetches
/// and other requests to that broker for that time; the group's heartbeats and commits go through the coordinator's
/// own thread.
final class FetchAnswerWatch: Sendable {
    /// The count at which the consumer may call itself idle: two answers in a row at once, with no record polled
    /// between them, cannot come from a broker that holds empty fetches.
    static let wakeAt = 2

    /// The fastest answer of a broker that holds empty fetches, in microseconds.
    let holdMicroseconds: Int64
    /// How long an empty answer at once is held while idle (zero: never).
    let pace: Duration
    private let sinceReset = Atomic<Int>(0)
    private let total = Atomic<Int>(0)
    private let held = Atomic<Int>(0)
    private let idle = Atomic<Bool>(false)
    private let pacing = Mutex(IdleFetchPacing())
    private let queue = Mutex<QueueHandle?>(nil)

    /// A consumer queue handle, owned by the consumer's poll loop.
    struct QueueHandle: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// - Parameters:
    ///   - fetchWaitMaxMilliseconds: the consumer's `fetch.wait.max.ms` (librdkafka's default 500).
    ///   - pace: how long an empty answer at once is held while idle (zero: never).
    init(fetchWaitMaxMilliseconds: Int64, pace: Duration) {
        holdMicroseconds = max(10_000, fetchWaitMaxMilliseconds * 1_000 / 2)
        self.pace = pace
    }

    /// Fetch answers at once since the last ``reset()``.
    var answersSinceReset: Int { sinceReset.load(ordering: .relaxed) }

    /// Fetch answers at once since the start.
    var answers: Int { total.load(ordering: .relaxed) }

    /// How many answers were held for the pace, since the start.
    var paces: Int { held.load(ordering: .relaxed) }

    /// Whether the consumer reported itself idle.
    var isIdle: Bool { idle.load(ordering: .relaxed) }

    /// The consumer polled records, or its assignment or fetching changed: the count starts again, and it is not
    /// idle.
    func reset() {
        sinceReset.store(0, ordering: .relaxed)
        setIdle(false)
    }

    /// Whether a reader whose poll found no record is idle at the end of its partitions, for the pacing: the watch
    /// paces, the broker answered fetches at once ``wakeAt`` times since the reader's last records (or the last
    /// ``reset()``), and nothing is prefetched (`nothingPrefetched` is asked only when the rest holds: for the group
    /// consumer it is a look at librdkafka's queue). The reader reports the answer with ``setIdle(_:)``.
    func idleAfterEmptyPoll(nothingPrefetched: () -> Bool) -> Bool {
        pace > .zero && answersSinceReset >= Self.wakeAt && nothingPrefetched()
    }

    /// The consumer is idle at the end of its partitions with nothing prefetched (or no longer is).
    func setIdle(_ value: Bool) {
        guard idle.exchange(value, ordering: .relaxed) != value else { return }
        // Each idle stretch learns the empty answer's size anew (the assignment may have changed).
        if value { pacing.withLock { $0.restart() } }
    }

    /// The queue to wake (the consumer queue its poll loop waits on), or nil before that loop destroys it.
    func attach(_ pointer: OpaquePointer?) {
        queue.withLock { $0 = pointer.map(QueueHandle.init) }
    }

    /// One answer (the interceptor's work, on a librdkafka broker thread). Returns once any hold is over.
    func answered(apiKey: Int16, size: Int, roundTripMicroseconds: Int64, error: rd_kafka_resp_err_t) {
        guard apiKey == Self.fetchKey, error == RD_KAFKA_RESP_ERR_NO_ERROR, roundTripMicroseconds >= 0,
              roundTripMicroseconds < holdMicroseconds else { return }
        total.wrappingAdd(1, ordering: .relaxed)
        if sinceReset.wrappingAdd(1, ordering: .relaxed).newValue == Self.wakeAt {
            queue.withLock { handle in
                if let handle { rd_kafka_queue_yield(handle.pointer) }
            }
        }
        guard pace > .zero, idle.load(ordering: .relaxed), pacing.withLock({ $0.holds(answerSize: size) }) else { return }
        held.wrappingAdd(1, ordering: .relaxed)
        Self.sleep(pace)
    }

    private static func sleep(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        var left = timespec()
        while nanosleep(&request, &left) != 0 && errno == EINTR { request = left }
    }

    /// Installs the watch on a configuration; the client made from it calls
    /// ``answered(apiKey:size:roundTripMicroseconds:error:)`` for every answer. The watch must outlive the client.
    func install(on configuration: OpaquePointer?) throws(KafkaError) {
        let error = rd_kafka_conf_interceptor_add_on_new(
            configuration, Self.interceptorName, onNew, Unmanaged.passUnretained(self).toOpaque())
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot watch the fetch answers") }
    }

    /// Kafka's ApiKey of Fetch.
    static let fetchKey: Int16 = 1
    static let interceptorName = "pushworker-fetch-answers"

    /// The consumer's `fetch.wait.max.ms`, librdkafka's default when not given.
    static func fetchWaitMaxMilliseconds(_ properties: [String: String]) -> Int64 {
        properties["fetch.wait.max.ms"].flatMap { Int64($0) } ?? 500
    }
}

/// Which empty fetch answers at once an idle consumer's broker thread holds for the pace. Pure.
///
/// librdkafka 2.0 fetches without sessions: every fetch to a broker names the same partitions while nothing
/// changes, so its empty answers are all of one size, and one that carries records is larger. An idle stretch
/// holds every answer no larger than the last one held, and lets a larger one go through at once: it likely carries
/// the records that end the stretch. Two larger answers in a row mean the request grew (a partition came back
/// into it); the second is held and its size becomes the empty one.
struct IdleFetchPacing: Sendable, Equatable {
    /// The size of the last answer held (`Int.max` before the first of an idle stretch).
    private(set) var emptySize = Int.max
    private var largerInARow = 0

    /// A new idle stretch: the empty answer's size is learned anew.
    mutating func restart() {
        emptySize = .max
        largerInARow = 0
    }

    /// Whether to hold an answer of `size` bytes.
    mutating func holds(answerSize size: Int) -> Bool {
        if size <= emptySize || largerInARow >= 1 {
            emptySize = size
            largerInARow = 0
            return true
        }
        largerInARow += 1
        return false
    }
}

private let onNew: @convention(c) (
    OpaquePointer?, OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutablePointer<CChar>?, Int
) -> rd_kafka_resp_err_t = { client, _, opaque, _, _ in
    rd_kafka_interceptor_add_on_response_received(client, FetchAnswerWatch.interceptorName, onResponse, opaque)
}

private let onResponse: @convention(c) (
    OpaquePointer?, Int32, UnsafePointer<CChar>?, Int32, Int16, Int16, Int32, Int, Int64, rd_kafka_resp_err_t,
    UnsafeMutableRawPointer?
) -> rd_kafka_resp_err_t = { _, _, _, _, apiKey, _, _, size, rtt, error, opaque in
    if let opaque {
        Unmanaged<FetchAnswerWatch>.fromOpaque(opaque).takeUnretainedValue()
            .answered(apiKey: apiKey, size: size, roundTripMicroseconds: rtt, error: error)
    }
    return RD_KAFKA_RESP_ERR_NO_ERROR
}
