#if canImport(Glibc)
import Glibc
#endif
import Logging
import Metrics
import PushCore
import PushKafka
import ServiceLifecycle
import Synchronization

/// The tokens suppressed for every app (SPEC section 10), shared by the pipeline (which checks events against it
/// and adds what its gateways answer at once) and ``SuppressionService`` (which loads the topic at start and then
/// follows what every instance writes to it).
public final class SuppressionList: Sendable {
    private let table = Mutex(SuppressionTable())
    private let gate = Mutex<(loaded: Bool, waiting: [Int: CheckedContinuation<Void, Never>], next: Int)>((false, [:], 0))
    private let size = Gauge(label: "pushworker_suppressed_tokens")

    public init() {}

    /// Whether the topic has been read up to the end offsets it had at start.
    public var isLoaded: Bool { gate.withLock { $0.loaded } }

    /// Suppressed tokens now.
    public var count: Int { table.withLock { $0.count } }

    /// What SPEC section 10 says of a notification to `token`.
    public func verdict(_ key: SuppressionKey, registeredAt: Int64?) -> SuppressionTable.Verdict {
        table.withLock { $0.verdict(key, registeredAt: registeredAt) }
    }

    /// Applies records of the topic (or the pipeline's own answers) in order.
    public func apply(_ entries: [SuppressionEntry]) {
        guard !entries.isEmpty else { return }
        let count = table.withLock { t in
            for entry in entries { t.apply(entry) }
            return t.count
        }
        size.record(count)
    }

    /// The topic is read up to where it ended at start: checks may rely on the table.
    public func markLoaded() {
        let waiting = gate.withLock { g in
            g.loaded = true
            defer { g.waiting = [:] }
            return g.waiting.values
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Returns once the topic is loaded (at once if it is), or when the task is cancelled.
    public func waitUntilLoaded() async {
        let id = gate.withLock { g in
            defer { g.next += 1 }
            return g.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Under the lock that the cancellation handler takes too: a cancellation is seen here or there.
                let now = gate.withLock { g in
                    if g.loaded || Task.isCancelled { return true }
                    g.waiting[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            gate.withLock { $0.waiting.removeValue(forKey: id) }?.resume()
        }
    }
}

/// Reads the suppression topic outside the consumer group: whole at start (then ``SuppressionList/markLoaded()``)
/// and followed afterwards, until graceful shutdown. A record that is not SPEC section 10's is skipped, counted
/// (`pushworker_suppression_records_skipped_total`) and logged.
public struct SuppressionService: Service {
    let reader: KafkaReplayReader
    let list: SuppressionList
    let logger: Logger
    private let skipped = Counter(label: "pushworker_suppression_records_skipped_total")

    private let properties: [String: String]

    /// Opens the topic (its partitions and end offsets are looked up now: a missing topic is an error here).
    /// - Parameter idlePace: how long an empty fetch answer at once is held while the reader is idle
    ///   (`kafka.idle_fetch_pace_ms`, ``KafkaReplayReader``).
    public init(
        properties: [String: String], topic: String, list: SuppressionList, logger: Logger,
        idlePace: Duration = KafkaConsumer.defaultIdlePace
    ) throws(KafkaError) {
        var properties = properties
        properties["enable.auto.commit"] = nil
        reader = try KafkaReplayReader(
            properties: properties, topic: topic, start: .earliest, readAhead: 10_000, follow: true, idlePace: idlePace)
        self.properties = properties
        self.list = list
        self.logger = logger
    }

    /// The list and its reader for a configuration with `suppression.topic` (nil without); a topic that cannot be
    /// read is an error naming the key.
    static func open(
        _ configuration: WorkerConfiguration, properties: KafkaClientProperties, logger: Logger
    ) throws(ConfigurationError) -> (list: SuppressionList, service: SuppressionService)? {
        guard let topic = configuration.suppressionTopic else { return nil }
        let list = SuppressionList()
        let readerProperties = properties.consumerProperties(groupID: "\(configuration.kafka.groupID)-suppression")
        do {
            return (list, try SuppressionService(
                properties: readerProperties, topic: topic, list: list, logger: logger,
                idlePace: .milliseconds(configuration.kafka.idleFetchPaceMilliseconds)))
        } catch {
            throw ConfigurationError(key: "suppression.topic", "cannot read topic \(topic): \(error)")
        }
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskCancellationHandler {
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { await reader.run() }
                    group.addTask { await follow() }
                    group.addTask { await checkCleanupPolicy() }
                }
            } onCancel: {
                reader.stop()
            }
        }
    }

    /// Stops following the topic: ``run()`` returns (for callers that run the service outside a service group).
    public func stop() {
        reader.stop()
    }

    /// A topic that is not compacted keeps every record it ever had (or drops suppressions with its retention):
    /// worth a warning, not a refusal.
    private func checkCleanupPolicy() async {
        switch await KafkaAdmin.topicSetting("cleanup.policy", of: reader.topic, properties: properties) {
        case nil:
            logger.debug("the broker did not report the suppression topic's cleanup.policy", metadata: ["topic": "\(reader.topic)"])
        case let policy? where policy.split(separator: ",").contains("compact"):
            break
        case let policy?:
            logger.warning("the suppression topic is not compacted: it grows with every record, or loses suppressions to its retention", metadata: [
                "topic": "\(reader.topic)", "cleanup.policy": "\(policy)",
            ])
        }
    }

    /// glibc's `malloc_trim(0)` (not in the Glibc module's headers: looked up by name; a no-op elsewhere).
    static func trimHeap() {
        #if canImport(Glibc)
        typealias Trim = @convention(c) (Int) -> Int32
        if let symbol = dlsym(nil, "malloc_trim") { _ = unsafeBitCast(symbol, to: Trim.self)(0) }
        #endif
    }

    private func follow() async {
        let started = ContinuousClock.now
        for await batch in reader.records {
            if batch.isEmpty {
                list.markLoaded()
                // Reading the topic passed every record through the heap once (and a broker may have answered with
                // a partition's whole backlog): give what is free back to the system.
                Self.trimHeap()
                logger.info("suppression topic loaded", metadata: [
                    "topic": "\(reader.topic)", "tokens": "\(list.count)", "took": "\(ContinuousClock.now - started)",
                ])
                continue
            }
            var entries: [SuppressionEntry] = []
            entries.reserveCapacity(batch.count)
            // One line per batch, naming the first: a topic of foreign records (the wrong topic configured) would
            // otherwise log each of its records.
            var skips = 0
            var first: (record: KafkaRecord, error: any Error)?
            for record in batch {
                do {
                    entries.append(try SuppressionEntry(key: record.key ?? [], value: record.isTombstone ? nil : record.value))
                } catch {
                    skips += 1
                    if first == nil { first = (record, error) }
                }
            }
            list.apply(entries)
            if let first {
                skipped.increment(by: Int64(skips))
                logger.warning("suppression records skipped", metadata: [
                    "topic": "\(reader.topic)", "records": "\(skips)", "partition": "\(first.record.partition)",
                    "offset": "\(first.record.offset)", "error": "\(first.error)",
                ])
            }
        }
    }
}
