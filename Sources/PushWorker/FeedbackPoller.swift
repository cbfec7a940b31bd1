import Foundation
import Logging
import Metrics
import NIOPosix
import PushCore
import PushGateway
import PushKafka
import Synchronization

/// Polls each app's feedback service every `interval` (SPEC section 5). The service forgets what it sent, so every
/// read's tuples are appended to a spool file and synced before the next read (a timeout, an I/O error, a shutdown
/// or a crash mid-stream loses none that arrived); the file's events are then produced, and the file is removed
/// once the broker has acknowledged every one. On start, spool files left by an earlier run are produced first.
///
/// One member of the consumer group polls (`isPoller`: the worker's rule is the member that holds partition 0 of
/// the first input topic), so N replicas do not read the list N times; a member that becomes the poller polls at
/// once, later ones every `interval`.
public final class FeedbackPoller: Sendable {
    private let endpoints: [AppEndpoint]
    private let topic: String
    private let spool: String
    private let interval: Duration
    private let readTimeout: Duration
    private let producer: KafkaProducer
    private let isPoller: @Sendable () -> Bool
    /// SPEC section 10: each tuple also suppresses its token (a record on this topic, and at once in the list).
    private let suppression: (topic: String, list: SuppressionList)?
    private let logger: Logger
    private let tuplesProduced = Atomic<Int>(0)
    private let polls = Atomic<Int>(0)
    private let tuplesCounter = Counter(label: "pushworker_feedback_tuples_total")

    /// `readTimeout` bounds one visit to a feedback service; `isPoller` says whether this member polls now.
    public init(
        endpoints: [AppEndpoint], topic: String, spoolDirectory: String, interval: Duration,
        readTimeout: Duration = .seconds(60), producer: KafkaProducer, logger: Logger,
        isPoller: @escaping @Sendable () -> Bool = { true }, suppression: (topic: String, list: SuppressionList)? = nil
    ) {
        self.suppression = suppression
        self.endpoints = endpoints
        self.topic = topic
        self.spool = spoolDirectory
        self.interval = interval
        self.readTimeout = readTimeout
        self.producer = producer
        self.isPoller = isPoller
        self.logger = logger
    }

    /// Feedback events acknowledged by the broker so far.
    public var produced: Int { tuplesProduced.load(ordering: .relaxed) }
    /// Visits to feedback services so far (every app's, successful or not).
    public var pollCount: Int { polls.load(ordering: .relaxed) }

    /// How often a member that does not poll checks whether it has become the poller.
    static let pollerCheck: Duration = .seconds(1)

    /// Produces what an earlier run left in the spool, then polls every interval while this member is the poller,
    /// until cancelled.
    public func run() async {
        // File system calls block: they run on NIO's thread pool, never on the caller's.
        let leftOver = (try? await NIOThreadPool.singleton.runIfActive { [self] () -> [String] in
            try? FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)
            return spoolFiles()
        }) ?? []
        for file in leftOver { await produce(file: file) }
        var lastPoll: ContinuousClock.Instant?
        var wasPoller = false
        while !Task.isCancelled {
            let poller = isPoller()
            if poller != wasPoller {
                logger.info(poller ? "this member polls the feedback services" : "another member polls the feedback services")
                wasPoller = poller
                if !poller { lastPoll = nil }
            }
            if poller, lastPoll.map({ $0.advanced(by: interval) <= .now }) ?? true {
                lastPoll = .now
                for endpoint in endpoints where !Task.isCancelled { await poll(endpoint) }
            }
            try? await Task.sleep(for: min(interval, Self.pollerCheck))
        }
    }

    private func spoolFiles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []).filter { $0.hasSuffix(".jsonl") }.sorted()
            .map { "\(spool)/\($0)" }
    }

    /// Visits one app's feedback service; every tuple that arrived is spooled and produced, however the visit ends.
    func poll(_ endpoint: AppEndpoint) async {
        polls.add(1, ordering: .relaxed)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let name = "\(spool)/\(now)-\(endpoint.app)-\(endpoint.environment.rawValue).jsonl"
        let file = SpoolFile(path: name)
        do {
            var client = try FeedbackClient(endpoint: endpoint)
            client.timeout = readTimeout
            let report = try await client.fetch { [logger] tuples in
                var lines: [UInt8] = []
                for tuple in tuples {
                    let event = FeedbackEvent(
                        app: endpoint.app, environment: endpoint.environment, token: tuple.token,
                        timestamp: tuple.timestamp, receivedAt: now)
                    lines += event.json()
                    lines.append(0x0A)
                }
                do {
                    try await file.append(lines, count: tuples.count)
                } catch {
                    logger.error("cannot write the feedback spool", metadata: ["file": "\(name)", "error": "\(error)"])
                    throw error
                }
            }
            if let problem = report.problem {
                logger.warning("feedback stream ended badly; the tuples before it are kept", metadata: ["app": "\(endpoint.key)", "problem": "\(problem)"])
            }
        } catch {
            logger.warning("feedback visit failed; the tuples read before are kept", metadata: [
                "app": "\(endpoint.key)", "error": "\(error)", "tuples": "\(file.count)",
            ])
        }
        await file.close()
        guard file.count > 0 else { return }
        tuplesCounter.increment(by: Int64(file.count))
        logger.info("feedback tuples", metadata: ["app": "\(endpoint.key)", "tuples": "\(file.count)"])
        await produce(file: name)
    }

    /// Produces a spool file's events; removes the file once every one is acknowledged. A last line without its
    /// newline (a write cut short by a crash) is left out.
    private func produce(file: String) async {
        // Read (and an empty file removed) on NIO's thread pool.
        let read = try? await NIOThreadPool.singleton.runIfActive { () -> (lines: [Data], partial: Bool)? in
            guard let data = FileManager.default.contents(atPath: file) else { return nil }
            var lines = data.split(separator: 0x0A, omittingEmptySubsequences: false)
            let partial = data.last.map { $0 != 0x0A } ?? false
            if partial { lines.removeLast() }
            lines.removeAll { $0.isEmpty }
            if lines.isEmpty { try? FileManager.default.removeItem(atPath: file) }
            return (lines, partial)
        }
        guard let (lines, partial) = read else { return }
        if partial { logger.warning("feedback spool ends in a partial line; left out", metadata: ["file": "\(file)"]) }
        guard !lines.isEmpty else { return }
        // With suppression, each tuple's record too: the file goes once both are acknowledged.
        let records: [SuppressionRecord?] = lines.map { line in
            guard suppression != nil, let json = try? JSONValue(parsing: Array(line)), let event = try? FeedbackEvent(validating: json) else { return nil }
            return SuppressionRecord(
                app: event.app, environment: event.environment, token: event.token, invalidatedAt: Int64(event.timestamp), reason: .feedback)
        }
        let remaining = Countdown(lines.count + records.count { $0 != nil })
        for line in lines {
            let bytes = Array(line)
            let key = (try? JSONValue(parsing: bytes))?["token"]?.stringValue.map { Array($0.utf8) }
            producer.produce(topic: topic, key: key, value: bytes) { [self] in
                tuplesProduced.add(1, ordering: .relaxed)
                if remaining.tick() { try? FileManager.default.removeItem(atPath: file) }
            }
        }
        guard let suppression else { return }
        let entries = records.compactMap { $0 }
        suppression.list.apply(entries.map { .suppress($0) })
        for record in entries {
            producer.produce(topic: suppression.topic, key: record.key, value: record.json()) {
                if remaining.tick() { try? FileManager.default.removeItem(atPath: file) }
            }
        }
    }
}

/// One visit's spool file: created on the first append; every append is written and synced (on NIO's thread
/// pool, never on the caller's) before it returns.
final class SpoolFile: Sendable {
    let path: String
    private let state = Mutex<(descriptor: Int32, count: Int)>((-1, 0))

    init(path: String) { self.path = path }

    /// Tuples appended so far.
    var count: Int { state.withLock { $0.count } }

    func append(_ bytes: [UInt8], count: Int) async throws {
        try await NIOThreadPool.singleton.runIfActive { [self] in
            try state.withLock { s in
                if s.descriptor < 0 {
                    let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
                    guard fd >= 0 else { throw SpoolError(path: path, errno: errno) }
                    s.descriptor = fd
                }
                var offset = 0
                while offset < bytes.count {
                    let n = bytes.withUnsafeBytes { write(s.descriptor, $0.baseAddress! + offset, bytes.count - offset) }
                    guard n > 0 else { throw SpoolError(path: path, errno: errno) }
                    offset += n
                }
                guard fsync(s.descriptor) == 0 else { throw SpoolError(path: path, errno: errno) }
                s.count += count
            }
        }
    }

    func close() async {
        let fd = state.withLock { s -> Int32 in
            defer { s.descriptor = -1 }
            return s.descriptor
        }
        guard fd >= 0 else { return }
        _ = try? await NIOThreadPool.singleton.runIfActive { _ = Glibc.close(fd) }
    }
}

struct SpoolError: Error, CustomStringConvertible {
    var path: String
    var errno: Int32
    var description: String { "\(path): \(String(cString: strerror(errno)))" }
}

/// Counts down to zero from several threads; `tick` says when it got there.
final class Countdown: Sendable {
    private let value: Atomic<Int>
    init(_ count: Int) { value = Atomic(count) }
    func tick() -> Bool { value.subtract(1, ordering: .relaxed).newValue == 0 }
}
