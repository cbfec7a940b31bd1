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
/// once the broker has acknowledged every one (a read that cannot be spooled is produced at once instead). On start,
/// spool files left by an earlier run are produced first.
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
    /// Bounds a spool file's records queued and not yet acknowledged.
    private let spoolGate: CapacityGate

    /// `readTimeout` bounds a visit's wait for the feedback service to send something; `isPoller` says whether this member polls now;
    /// `spoolWindow` bounds the spool's records queued for the producer and not yet acknowledged.
    public init(
        endpoints: [AppEndpoint], topic: String, spoolDirectory: String, interval: Duration,
        readTimeout: Duration = .seconds(60), producer: KafkaProducer, logger: Logger,
        isPoller: @escaping @Sendable () -> Bool = { true }, suppression: (topic: String, list: SuppressionList)? = nil,
        spoolWindow: Int = 10_000
    ) {
        self.spoolGate = CapacityGate(capacity: max(2, spoolWindow))
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
    /// The most spool records queued and not yet acknowledged at once so far (at most `spoolWindow`).
    public var peakSpoolUnacknowledged: Int { spoolGate.peakHeld }

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

    /// The spool files left by an earlier run, oldest first. Progress files without their spool file (a removal
    /// cut short) and a progress write's temporary files (a write cut short) are removed.
    private func spoolFiles() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []
        let files = names.filter { $0.hasSuffix(".jsonl") }.sorted()
        for name in names where name.hasSuffix(".acked.new") || name.dropSuffix(".acked").map({ !files.contains($0) }) == true {
            try? FileManager.default.removeItem(atPath: "\(spool)/\(name)")
        }
        return files.map { "\(spool)/\($0)" }
    }

    /// Visits one app's feedback service; every tuple that arrived is spooled and produced, however the visit ends.
    /// A read whose tuples cannot be spooled (a full disk, say) is produced at once instead, and the visit goes on:
    /// the service has forgotten those tuples, and the broker is then their only keeper.
    func poll(_ endpoint: AppEndpoint) async {
        polls.add(1, ordering: .relaxed)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let name = "\(spool)/\(now)-\(endpoint.app)-\(endpoint.environment.rawValue).jsonl"
        let file = SpoolFile(path: name)
        let unspooled = SharedCount()
        do {
            var client = try FeedbackClient(endpoint: endpoint)
            client.timeout = readTimeout
            let report = try await client.fetch { [self] tuples in
                let events = tuples.map { tuple in
                    FeedbackEvent(
                        app: endpoint.app, environment: endpoint.environment, token: tuple.token,
                        timestamp: tuple.timestamp, receivedAt: now
                    ).json()
                }
                do {
                    var lines: [UInt8] = []
                    for event in events {
                        lines += event
                        lines.append(0x0A)
                    }
                    try await file.append(lines, count: tuples.count)
                } catch {
                    logger.error("cannot write the feedback spool: producing this read's events without it", metadata: [
                        "file": "\(name)", "error": "\(error)", "tuples": "\(tuples.count)",
                    ])
                    guard await produce(lines: events, queuing: { _ in }, acknowledged: {}) else { throw CancellationError() }
                    unspooled.add(tuples.count)
                }
            }
            if let problem = report.problem {
                logger.warning("feedback stream ended badly; the tuples before it are kept", metadata: ["app": "\(endpoint.key)", "problem": "\(problem)"])
            }
        } catch {
            logger.warning("feedback visit failed; the tuples read before are kept", metadata: [
                "app": "\(endpoint.key)", "error": "\(error)", "tuples": "\(file.count + unspooled.count)",
            ])
        }
        await file.close()
        let total = file.count + unspooled.count
        guard total > 0 else { return }
        tuplesCounter.increment(by: Int64(total))
        logger.info("feedback tuples", metadata: ["app": "\(endpoint.key)", "tuples": "\(total)", "unspooled": "\(unspooled.count)"])
        if file.count > 0 { await produce(file: name) }
    }

    /// Produces a spool file's events; removes the file once every one is acknowledged. The file is read a block at
    /// a time and at most `spoolWindow` records are unacknowledged at once, so a long file (a big list, or one
    /// spooled while the broker was away) takes a block's memory, not its size. A last line without its newline (a
    /// write cut short by a crash) is left out. Cancelled or failing part-way, the file stays for the next start,
    /// which goes on after the blocks whose records were all acknowledged (``SpoolProgress``): what it produces
    /// again is at most the blocks that were in flight.
    private func produce(file: String) async {
        let (start, problem) = (try? await NIOThreadPool.singleton.runIfActive { SpoolProgress.resumeOffset(for: file) }) ?? (0, nil)
        if let problem {
            logger.warning("feedback spool's progress is unusable: producing the file from its start", metadata: ["file": "\(file)", "problem": "\(problem)"])
        } else if start > 0 {
            logger.info("feedback spool: going on where an earlier run stopped", metadata: ["file": "\(file)", "offset": "\(start)"])
        }
        guard let reader = try? await SpoolReader(path: file, offset: start) else { return }
        let progress = SpoolProgress(spool: file, start: start)
        var lines = LineSplitter(maxLine: Self.maxSpoolLine, offset: start)
        var atEnd = false
        while !Task.isCancelled {
            let block: [UInt8]
            do {
                block = try await reader.read(upTo: Self.spoolBlock)
            } catch {
                logger.error("cannot read the feedback spool", metadata: ["file": "\(file)", "error": "\(error)"])
                break
            }
            if block.isEmpty {
                atEnd = true
                break
            }
            let blockLines = lines.split(block)
            let number = progress.begin(end: lines.lineEnd)
            // The block holds one count of its own until its records are queued; every record queued adds one.
            let unacknowledged = SharedCount(1)
            let queued = await produce(lines: blockLines, queuing: { unacknowledged.add($0) }) {
                if unacknowledged.tick() { progress.finish(number) }
            }
            guard queued else { break }
            if unacknowledged.tick() { _ = try? await NIOThreadPool.singleton.runIfActive { progress.finish(number) } }
        }
        await reader.close()
        if lines.dropped > 0 {
            logger.warning("feedback spool has lines too long to be feedback events; left out", metadata: ["file": "\(file)", "lines": "\(lines.dropped)"])
        }
        guard atEnd else { return }
        if lines.partial { logger.warning("feedback spool ends in a partial line; left out", metadata: ["file": "\(file)"]) }
        // The file goes once its last block finishes: here, on NIO's thread pool, when every block has finished
        // already; else by the last acknowledgement, on the producer's thread.
        _ = try? await NIOThreadPool.singleton.runIfActive { progress.endOfFile() }
    }

    /// Queues the records of `lines` (feedback events, with their suppression records when tuples suppress their
    /// tokens), at most the window's worth unacknowledged: `queuing` hears how many records are about to be queued,
    /// `acknowledged` runs once for each the broker acknowledges. False if cancelled while waiting for room.
    private func produce(
        lines: [[UInt8]], queuing: (Int) -> Void, acknowledged: @escaping @Sendable () -> Void
    ) async -> Bool {
        let groupSize = max(1, spoolGate.capacity / recordsPerLine)
        for start in stride(from: 0, to: lines.count, by: groupSize) {
            let messages = lines[start..<min(start + groupSize, lines.count)].map(spoolMessages)
            let count = messages.reduce(0) { $0 + ($1.suppression == nil ? 1 : 2) }
            do {
                try await spoolGate.acquire(count)
            } catch {
                return false
            }
            queuing(count)
            if let suppression { suppression.list.apply(messages.compactMap { $0.suppression.map { .suppress($0) } }) }
            for message in messages {
                producer.produce(topic: topic, key: message.key, value: message.value) { [self] in
                    tuplesProduced.add(1, ordering: .relaxed)
                    spoolGate.release(1)
                    acknowledged()
                }
                guard let suppression, let record = message.suppression else { continue }
                producer.produce(topic: suppression.topic, key: record.key, value: record.json()) { [self] in
                    spoolGate.release(1)
                    acknowledged()
                }
            }
        }
        return true
    }

    /// A spool line's feedback record and, with suppression, its token's suppression record. A line that is not a
    /// feedback event (only a damaged file has one) is produced as it is, without a key or a suppression.
    private func spoolMessages(_ line: [UInt8]) -> (key: [UInt8]?, value: [UInt8], suppression: SuppressionRecord?) {
        guard let json = try? JSONValue(parsing: line) else { return (nil, line, nil) }
        let key = json["token"]?.stringValue.map { Array($0.utf8) }
        guard suppression != nil, let event = try? FeedbackEvent(validating: json) else { return (key, line, nil) }
        let record = SuppressionRecord(
            app: event.app, environment: event.environment, token: event.token, invalidatedAt: Int64(event.timestamp), reason: .feedback)
        return (key, line, record)
    }

    /// Records per spool line: its feedback event, and its suppression record when tuples suppress their tokens.
    private var recordsPerLine: Int { suppression == nil ? 1 : 2 }
    /// How much of a spool file is read at once.
    static let spoolBlock = 1 << 20
    /// A spool line longer than this is not one the poller wrote (its events are a few hundred bytes).
    static let maxSpoolLine = 1 << 16
}

/// Splits a byte stream into its newline-ended lines across reads: what follows the last newline waits for the next
/// read. Empty lines are skipped; a line longer than `maxLine` is dropped whole and counted, so bytes without a
/// newline cannot grow what waits. Pure.
struct LineSplitter {
    let maxLine: Int
    /// The start of a line whose newline has not come yet.
    private var pending: [UInt8] = []
    /// The line being read is over `maxLine`: its bytes are skipped up to its newline.
    private var overlong = false
    /// Lines dropped for their length.
    private(set) var dropped = 0
    /// The stream's byte offset just after the last newline split so far: where the lines given out end.
    private(set) var lineEnd: Int64
    /// The stream's byte offset of the next block.
    private var position: Int64

    /// - Parameter offset: the stream's byte offset of the first block (a line's start).
    init(maxLine: Int, offset: Int64 = 0) {
        self.maxLine = maxLine
        lineEnd = offset
        position = offset
    }

    /// The lines that `block` completes, in order.
    mutating func split(_ block: [UInt8]) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        var start = block.startIndex
        while let newline = block[start...].firstIndex(of: 0x0A) {
            if overlong {
                overlong = false
                dropped += 1
            } else if pending.count + (newline - start) > maxLine {
                dropped += 1
            } else if !pending.isEmpty {
                lines.append(pending + block[start..<newline])
            } else if newline > start {
                lines.append(Array(block[start..<newline]))
            }
            pending.removeAll()
            start = newline + 1
        }
        if start > block.startIndex { lineEnd = position + Int64(start - block.startIndex) }
        position += Int64(block.count)
        if !overlong {
            pending += block[start...]
            if pending.count > maxLine {
                overlong = true
                pending = []
            }
        }
        return lines
    }

    /// At the end of the stream: bytes after the last newline, a line cut short.
    var partial: Bool { overlong || !pending.isEmpty }
}

/// A spool file open for reading a block at a time, on NIO's thread pool (never on the caller's thread).
final class SpoolReader: Sendable {
    let path: String
    private let descriptor: Mutex<Int32>

    /// Opens `path` for reading from byte `offset` on.
    init(path: String, offset: Int64 = 0) async throws {
        let fd = try await NIOThreadPool.singleton.runIfActive { () throws -> Int32 in
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw SpoolError(path: path, errno: errno) }
            guard offset == 0 || lseek(fd, off_t(offset), SEEK_SET) == off_t(offset) else {
                let error = errno
                Glibc.close(fd)
                throw SpoolError(path: path, errno: error)
            }
            return fd
        }
        self.path = path
        descriptor = Mutex(fd)
    }

    /// Up to `count` bytes; none at the end of the file.
    func read(upTo count: Int) async throws -> [UInt8] {
        try await NIOThreadPool.singleton.runIfActive { [self] in
            try descriptor.withLock { fd in
                var bytes = [UInt8](repeating: 0, count: count)
                while true {
                    let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, count) }
                    if n >= 0 {
                        bytes.removeLast(count - n)
                        return bytes
                    }
                    guard errno == EINTR else { throw SpoolError(path: path, errno: errno) }
                }
            }
        }
    }

    func close() async {
        let fd = descriptor.withLock { fd -> Int32 in
            defer { fd = -1 }
            return fd
        }
        guard fd >= 0 else { return }
        _ = try? await NIOThreadPool.singleton.runIfActive { _ = Glibc.close(fd) }
    }
}

/// One visit's spool file: created on the first append; every append is written and synced (on NIO's thread
/// pool, never on the caller's) before it returns. An append that fails is undone: the file is cut back to its
/// length before it, so no part of that read's lines stays behind (its events are produced at once instead, and a
/// line cut short would join the next read's first line into one that is not an event). When it cannot be undone,
/// the file takes no more appends.
final class SpoolFile: Sendable {
    /// Writes from a buffer as `write(2)` does (a test's stand-in fails part-way).
    typealias Write = @Sendable (Int32, UnsafeRawBufferPointer) -> Int

    private struct State {
        var descriptor: Int32 = -1
        var count = 0
        /// The file's length after the last whole append.
        var length: off_t = 0
        /// A failed append could not be undone: the file's end is not a line's end.
        var broken = false
    }

    let path: String
    private let state = Mutex(State())
    private let write: Write

    init(path: String, write: @escaping Write = { fd, bytes in Glibc.write(fd, bytes.baseAddress!, bytes.count) }) {
        self.path = path
        self.write = write
    }

    /// Tuples appended so far.
    var count: Int { state.withLock { $0.count } }

    func append(_ bytes: [UInt8], count: Int) async throws {
        try await NIOThreadPool.singleton.runIfActive { [self] in
            try state.withLock { s in
                guard !s.broken else { throw SpoolError(path: path, errno: EIO) }
                if s.descriptor < 0 {
                    let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
                    guard fd >= 0 else { throw SpoolError(path: path, errno: errno) }
                    s.descriptor = fd
                    s.length = lseek(fd, 0, SEEK_END)
                }
                let fd = s.descriptor
                let written = bytes.withUnsafeBytes { WholeWrite.write($0) { write(fd, $0) } }
                if let failure = written?.error ?? (fsync(fd) == 0 ? nil : errno) {
                    if ftruncate(s.descriptor, s.length) != 0 { s.broken = true }
                    throw SpoolError(path: path, errno: failure)
                }
                s.length += off_t(bytes.count)
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

/// A count shared by several threads: added to, and counted down to zero (`tick` says when it got there).
final class SharedCount: Sendable {
    private let value: Atomic<Int>
    init(_ count: Int = 0) { value = Atomic(count) }
    var count: Int { value.load(ordering: .relaxed) }
    func add(_ count: Int) { value.add(count, ordering: .relaxed) }
    func tick() -> Bool { value.subtract(1, ordering: .relaxed).newValue == 0 }
}

private extension String {
    /// The string without `suffix`, or nil when it does not end with it.
    func dropSuffix(_ suffix: String) -> String? { hasSuffix(suffix) ? String(dropLast(suffix.count)) : nil }
}
