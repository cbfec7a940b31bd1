import Foundation
import Logging
import PushCore
import PushGateway
import PushKafka
import PushSimulator
import PushTestSupport
import Synchronization
import Testing
@testable import PushWorker

/// The feedback poller against the simulator's feedback service: no tuple that arrived is lost, whatever ends the
/// visit, and only the member chosen to poll visits the services.
@Suite struct FeedbackPollerTests {
    /// A logger that lets only critical lines through (the tests provoke errors on purpose).
    static var quiet: Logger {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        return logger
    }

    static func token(_ i: Int) -> String { String(format: "%064x", 0xFEED_0000 + i) }

    /// A mock cluster with the feedback topic, a producer to it and a poller that only produces `spool` (it never
    /// polls); the cluster is returned to be kept alive while they run.
    static func spoolProducer(_ spool: String, window: Int = 10_000, logger: Logger, cluster: KafkaMockCluster? = nil) throws
        -> (KafkaMockCluster, [String: String], KafkaProducer, FeedbackPoller) {
        let cluster = try cluster ?? {
            let cluster = try KafkaMockCluster()
            try cluster.createTopic("notification-feedback", partitions: 1)
            return cluster
        }()
        let properties = ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"]
        let producer = try KafkaProducer(properties: properties, logger: logger)
        let poller = FeedbackPoller(
            endpoints: [], topic: "notification-feedback", spoolDirectory: spool, interval: .seconds(3600),
            readTimeout: .milliseconds(500), producer: producer, logger: logger, isPoller: { false }, spoolWindow: window)
        return (cluster, properties, producer, poller)
    }

    /// A simulator whose feedback service lists tuples 0..<`tuples` (stalling after `stallAfter` of them, if given),
    /// and an app of `environment` pointed at it.
    static func feedbackService(
        tuples: Int, stallAfter: Int? = nil, environment: APNsEnvironment = .production, logger: Logger
    ) async throws -> (GatewaySimulator, AppEndpoint) {
        var configuration = SimulatorConfiguration.testPKI
        configuration.feedback = try FeedbackEntry.parseFile(
            (0..<tuples).map { "\(token($0)) \(1_700_000_000 + $0)" }.joined(separator: "\n"))
        configuration.feedbackStallAfter = stallAfter
        let simulator = try GatewaySimulator(configuration: configuration, logger: logger)
        let addresses = try await simulator.start()
        return (simulator, AppEndpoint.testBinary(
            gatewayPort: addresses.gatewayPort, feedbackPort: addresses.feedbackPort, environment: environment))
    }

    /// A new, empty spool directory.
    static func spoolDirectory() throws -> String {
        let spool = NSTemporaryDirectory() + "feedback-spool-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)
        return spool
    }

    /// Feedback event `i` as the poller spools it (without its newline).
    static func spoolLine(_ i: Int) throws -> [UInt8] {
        FeedbackEvent(app: "com.example.app", environment: .production, token: try DeviceToken(hex: token(i)),
                      timestamp: UInt32(1_700_000_000 + i), receivedAt: 1_700_000_000_000).json()
    }

    /// The spool lines of feedback events `range`, each with its newline, as one file's bytes.
    static func spoolBytes(_ range: Range<Int>) throws -> [UInt8] {
        var bytes: [UInt8] = []
        for i in range { bytes += try spoolLine(i) + [0x0A] }
        return bytes
    }

    /// The tokens of the feedback events on the topic, in order.
    static func producedTokens(_ properties: [String: String]) async throws -> [String] {
        try await KafkaReplayReader(properties: properties, topic: "notification-feedback", start: .earliest).readAll()
            .map { try JSONValue(parsing: $0.value)["token"]!.stringValue! }
    }

    /// Runs the poller and its producer until `count` feedback events are acknowledged and the spool is empty
    /// (false if that never comes), then stops both.
    static func run(_ poller: FeedbackPoller, _ producer: KafkaProducer, until count: Int, producedFrom spool: String) async -> Bool {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            group.addTask { await poller.run() }
            let done = await eventually {
                poller.produced == count && ((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? ["?"]).isEmpty
            }
            group.cancelAll()
            producer.stop()
            return done
        }
    }

    @Test func tuplesReadBeforeAStreamIsCutOffAreSpooledAndProducedAfterARestart() async throws {
        let quiet = Self.quiet
        // Ten tuples in the list; the service sends four, then stalls until the client gives up.
        let (simulator, endpoint) = try await Self.feedbackService(tuples: 10, stallAfter: 4, logger: quiet)
        let spool = try Self.spoolDirectory()
        defer { try? FileManager.default.removeItem(atPath: spool) }
        func spoolLines() -> [String] {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []
            return files.flatMap { file in
                ((try? String(contentsOfFile: "\(spool)/\(file)", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            }
        }

        // The first run: its producer's broker never answers, and the run ends (as if killed) right after the visit.
        let unreachable = try KafkaProducer(
            properties: ["bootstrap.servers": "127.0.0.1:1", "log_level": "0"], logger: quiet)
        let first = FeedbackPoller(
            endpoints: [endpoint], topic: "notification-feedback", spoolDirectory: spool, interval: .seconds(3600),
            readTimeout: .milliseconds(500), producer: unreachable, logger: quiet)
        await first.poll(endpoint)
        #expect(first.pollCount == 1)
        let spooled = spoolLines()
        #expect(spooled.count == 4, "the four tuples that arrived are on disk: \(spooled)")
        #expect(try spooled.map { try JSONValue(parsing: $0)["token"]!.stringValue! } == (0..<4).map(Self.token))

        // The restart: a working broker; this member is not the poller at first, so it only produces the spool.
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("notification-feedback", partitions: 1)
        let producer = try KafkaProducer(properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"], logger: quiet)
        let poller = Atomic<Bool>(false)
        let second = FeedbackPoller(
            endpoints: [endpoint], topic: "notification-feedback", spoolDirectory: spool, interval: .seconds(3600),
            readTimeout: .milliseconds(500), producer: producer, logger: quiet, isPoller: { poller.load(ordering: .relaxed) })
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            group.addTask { await second.run() }
            #expect(await eventually { second.produced == 4 && spoolLines().isEmpty })
            #expect(second.pollCount == 0)
            // Becoming the poller, it visits the service at once (the list's file tuples were sent already).
            poller.store(true, ordering: .relaxed)
            #expect(await eventually { second.pollCount == 1 && simulator.summary.feedbackConnections == 2 })
            group.cancelAll()
            producer.stop()
        }
        let records = try await KafkaReplayReader(
            properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"], topic: "notification-feedback",
            start: .earliest
        ).readAll()
        #expect(try records.map { try JSONValue(parsing: $0.value)["token"]!.stringValue! } == (0..<4).map(Self.token))
        await simulator.stop()
    }

    /// A spool that cannot be written (here its directory's parent is a file: every open fails) does not cost the
    /// tuples the service sent and forgot: each read's events are produced at once instead, and the visit goes on.
    @Test func tuplesThatCannotBeSpooledAreProducedAtOnce() async throws {
        let quiet = Self.quiet
        let (simulator, endpoint) = try await Self.feedbackService(tuples: 10, logger: quiet)
        let blocker = try Self.spoolDirectory() + "/not-a-directory"
        try Data("x".utf8).write(to: URL(fileURLWithPath: blocker))
        defer { try? FileManager.default.removeItem(atPath: (blocker as NSString).deletingLastPathComponent) }
        let (cluster, properties, producer, poller) = try Self.spoolProducer("\(blocker)/spool", logger: quiet)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            await poller.poll(endpoint)
            #expect(await eventually { poller.produced == 10 })
            group.cancelAll()
            producer.stop()
        }
        let records = try await KafkaReplayReader(properties: properties, topic: "notification-feedback", start: .earliest).readAll()
        #expect(try records.map { try JSONValue(parsing: $0.value)["token"]!.stringValue! } == (0..<10).map(Self.token))
        #expect(records.map { $0.key.map { String(decoding: $0, as: UTF8.self) } } == (0..<10).map(Self.token))
        withExtendedLifetime(cluster) {}
        await simulator.stop()
    }

    /// A worker killed while it wrote a spool file leaves a last line without its newline (or an empty file): on
    /// the next start the whole lines are produced, the cut one is left out, and both files go (with what a
    /// progress write cut short left).
    @Test func aSpoolCutShortByACrashIsProducedWithoutItsPartialLine() async throws {
        let quiet = Self.quiet
        let spool = try Self.spoolDirectory()
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let lines = try (0..<3).map(Self.spoolLine)
        let cut = lines[0] + [0x0A] + lines[1] + [0x0A] + lines[2].prefix(20)
        try Data(cut).write(to: URL(fileURLWithPath: "\(spool)/1700000000000-com.example.app-production.jsonl"))
        try Data().write(to: URL(fileURLWithPath: "\(spool)/1700000000001-com.example.app-production.jsonl"))
        // The temporary file of a progress write cut short, beside a spool whose production writes no progress.
        let temporary = SpoolProgress.path(for: "\(spool)/1700000000001-com.example.app-production.jsonl") + ".new"
        try "12".write(toFile: temporary, atomically: true, encoding: .utf8)
        let (cluster, properties, producer, poller) = try Self.spoolProducer(spool, logger: quiet)
        #expect(await Self.run(poller, producer, until: 2, producedFrom: spool))
        let records = try await KafkaReplayReader(properties: properties, topic: "notification-feedback", start: .earliest).readAll()
        #expect(try records.map { try JSONValue(parsing: $0.value)["token"]!.stringValue! } == (0..<2).map(Self.token))
        #expect(poller.produced == 2)
        withExtendedLifetime(cluster) {}
    }

    /// A spool file far longer than the window is produced whole, block by block, with no more than the window's
    /// records unacknowledged at once; lines split across the reader's blocks arrive whole.
    @Test func aLongSpoolIsProducedWithinItsWindow() async throws {
        let quiet = Self.quiet
        let spool = try Self.spoolDirectory()
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let count = 12_000  // about 2.5 of the reader's 1 MiB blocks
        let bytes = try Self.spoolBytes(0..<count)
        #expect(bytes.count > 2 * FeedbackPoller.spoolBlock)
        try Data(bytes).write(to: URL(fileURLWithPath: "\(spool)/1700000000000-com.example.app-production.jsonl"))
        let (cluster, properties, producer, poller) = try Self.spoolProducer(spool, window: 500, logger: quiet)
        #expect(await Self.run(poller, producer, until: count, producedFrom: spool))
        #expect(poller.peakSpoolUnacknowledged == 500)
        let records = try await KafkaReplayReader(properties: properties, topic: "notification-feedback", start: .earliest).readAll()
        #expect(try await Self.producedTokens(properties) == (0..<count).map(Self.token))
        #expect(records.map { $0.key.map { String(decoding: $0, as: UTF8.self) } } == (0..<count).map(Self.token))
        withExtendedLifetime(cluster) {}
    }

    /// A spool file whose production an earlier run cut short goes on after the prefix its progress records:
    /// only the lines after it are produced, and the file and its progress both go.
    @Test func aSpoolGoesOnWhereItsRecordedProgressEnds() async throws {
        let quiet = Self.quiet
        let spool = try Self.spoolDirectory()
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let file = "\(spool)/1700000000000-com.example.app-production.jsonl"
        try Data(Self.spoolBytes(0..<10)).write(to: URL(fileURLWithPath: file))
        try "\(Self.spoolBytes(0..<6).count)\n".write(toFile: SpoolProgress.path(for: file), atomically: true, encoding: .utf8)
        // A progress file whose spool file is gone (a removal cut short) goes too.
        try "5\n".write(toFile: "\(spool)/1600000000000-com.example.app-production.jsonl.acked", atomically: true, encoding: .utf8)
        let (cluster, properties, producer, poller) = try Self.spoolProducer(spool, logger: quiet)
        #expect(await Self.run(poller, producer, until: 4, producedFrom: spool))
        #expect(try await Self.producedTokens(properties) == (6..<10).map(Self.token))
        withExtendedLifetime(cluster) {}
    }

    /// Production cut short part-way through a long spool (the run cancelled while the broker is slow) records
    /// its progress; the next run produces what is left, and again at most the blocks that were in flight, not
    /// the file from its start.
    @Test func aSpoolCutShortGoesOnAfterItsAcknowledgedBlocks() async throws {
        let quiet = Self.quiet
        let spool = try Self.spoolDirectory()
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let count = 12_000  // about 2.5 of the reader's 1 MiB blocks
        let bytes = try Self.spoolBytes(0..<count)
        let linesPerBlock = count * FeedbackPoller.spoolBlock / bytes.count + 1
        let file = "\(spool)/1700000000000-com.example.app-production.jsonl"
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        let window = 500
        let (cluster, properties, producer, poller) = try Self.spoolProducer(spool, window: window, logger: quiet)
        // At most a window of records per 100 ms round trip: the cut comes well before the end.
        cluster.setRoundTrip(broker: 1, milliseconds: 100)
        let cutAt = linesPerBlock + 2 * window
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            group.addTask { await poller.run() }
            #expect(await eventually { poller.produced >= cutAt })
            group.cancelAll()
            producer.stop()
        }
        let first = poller.produced
        #expect(first < count, "cut before the end")
        let recorded = SpoolProgress.resumeOffset(for: file)
        #expect(recorded.problem == nil)
        #expect(recorded.offset > 0 && recorded.offset <= Int64(bytes.count))
        #expect(FileManager.default.fileExists(atPath: file))

        cluster.setRoundTrip(broker: 1, milliseconds: 0)
        let (_, _, producer2, poller2) = try Self.spoolProducer(spool, window: window, logger: quiet, cluster: cluster)
        let before = bytes[..<Int(recorded.offset)].count { $0 == 0x0A }
        #expect(await Self.run(poller2, producer2, until: count - before, producedFrom: spool))
        let tokens = try await Self.producedTokens(properties)
        #expect(Set(tokens) == Set((0..<count).map(Self.token)), "every event produced")
        // Produced again: what the first run had acknowledged after the recorded prefix (and what the broker took
        // but could not acknowledge before the stop, at most a window).
        let again = tokens.count - count
        #expect(again >= first - before)
        #expect(again < linesPerBlock + 2 * window, "at most the block in flight, not the \(first) lines of the first run")
    }

    /// An append that fails part-way (a disk that fills up) leaves nothing of its lines behind: the next append
    /// starts on a line of its own, and what the file holds is exactly the appends that succeeded.
    @Test func aFailedAppendLeavesNoPartOfItsLinesInTheSpool() async throws {
        let spool = try Self.spoolDirectory()
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let path = "\(spool)/1700000000000-com.example.app-production.jsonl"
        let failNext = Atomic<Bool>(false)
        let file = SpoolFile(path: path) { fd, bytes in
            // When failing: half of the bytes go out, then the disk is full.
            if failNext.load(ordering: .relaxed) {
                if bytes.count > 1 { return Glibc.write(fd, bytes.baseAddress!, bytes.count / 2) }
                errno = ENOSPC
                return -1
            }
            return Glibc.write(fd, bytes.baseAddress!, bytes.count)
        }
        let lines = try (0..<6).map { try Self.spoolLine($0) + [0x0A] }
        try await file.append(lines[0] + lines[1], count: 2)
        failNext.store(true, ordering: .relaxed)
        await #expect(throws: SpoolError.self) { try await file.append(lines[2] + lines[3], count: 2) }
        failNext.store(false, ordering: .relaxed)
        try await file.append(lines[4] + lines[5], count: 2)
        await file.close()
        #expect(file.count == 4)
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == lines[0] + lines[1] + lines[4] + lines[5])
    }

    @Test func feedbackTuplesSuppressTheirTokens() async throws {
        let quiet = Self.quiet
        let (simulator, endpoint) = try await Self.feedbackService(tuples: 3, environment: .sandbox, logger: quiet)
        let spool = NSTemporaryDirectory() + "feedback-spool-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let cluster = try KafkaMockCluster()
        for topic in ["notification-feedback", "suppressed-tokens"] { try cluster.createTopic(topic, partitions: 1) }
        let properties = ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"]
        let producer = try KafkaProducer(properties: properties, logger: quiet)
        let list = SuppressionList()
        let poller = FeedbackPoller(
            endpoints: [endpoint], topic: "notification-feedback", spoolDirectory: spool, interval: .seconds(3600),
            readTimeout: .seconds(5), producer: producer, logger: quiet, suppression: ("suppressed-tokens", list))
        // The spool file goes once the feedback events and the suppression records are all acknowledged.
        #expect(await Self.run(poller, producer, until: 3, producedFrom: spool))
        let records = try await KafkaReplayReader(properties: properties, topic: "suppressed-tokens", start: .earliest).readAll()
        let entries = try records.map { try SuppressionEntry(key: $0.key ?? [], value: $0.value) }
        #expect(entries == (0..<3).map { i in
            .suppress(SuppressionRecord(
                app: "com.example.app", environment: .sandbox, token: try! DeviceToken(hex: Self.token(i)),
                invalidatedAt: Int64(1_700_000_000 + i), reason: .feedback))
        })
        for i in 0..<3 {
            let key = SuppressionKey(app: "com.example.app", environment: .sandbox, token: try DeviceToken(hex: Self.token(i)))
            #expect(list.verdict(key, registeredAt: nil) == .suppressed(invalidatedAt: Int64(1_700_000_000 + i), reason: .feedback))
        }
        await simulator.stop()
    }
}

@Suite struct LineSplitterTests {
    func split(_ blocks: [String], maxLine: Int = 8) -> (lines: [String], dropped: Int, partial: Bool) {
        var splitter = LineSplitter(maxLine: maxLine)
        let lines = blocks.flatMap { splitter.split(Array($0.utf8)) }.map { String(decoding: $0, as: UTF8.self) }
        return (lines, splitter.dropped, splitter.partial)
    }

    @Test func linesAcrossBlocksArriveWholeAndEmptyOnesAreSkipped() {
        let result = split(["ab\ncd", "e\n\nf", "", "gh\n", "\nij\n"])
        #expect(result.lines == ["ab", "cde", "fgh", "ij"])
        #expect(result.dropped == 0)
        #expect(!result.partial)
    }

    @Test func aLineLongerThanTheLimitIsDroppedWholeWithoutGrowingWhatWaits() {
        // Nine bytes before the newline, one block; then twenty over three blocks; lines at the limit stay.
        let result = split(["123456789\nshort\n12345", "67890123", "4567890\n12345678\n"])
        #expect(result.lines == ["short", "12345678"])
        #expect(result.dropped == 2)
        #expect(!result.partial)
    }

    /// However a stream is cut into reads, the lines are the stream's own: its newline-separated pieces that are
    /// neither empty nor over the limit, in order (checked over seeded random streams and cuts).
    @Test(arguments: 0..<20 as Range<UInt64>) func anyCutIntoReadsGivesTheStreamsOwnLines(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let alphabet = Array("abcdefgh\n\n".utf8)  // lines of 4 bytes on average, one in eight over the limit
        let stream = (0..<Int.random(in: 0...400, using: &random)).map { _ in alphabet.randomElement(using: &random)! }
        var expected = stream.split(separator: 0x0A, omittingEmptySubsequences: false).map(Array.init)
        let partial = !(expected.last ?? []).isEmpty
        expected.removeLast()  // what follows the last newline (empty when the stream ends in one)
        expected = expected.filter { !$0.isEmpty && $0.count <= 8 }
        let offset = Int64.random(in: 0...1_000_000, using: &random)
        var splitter = LineSplitter(maxLine: 8, offset: offset)
        var lines: [[UInt8]] = []
        var rest = stream[...]
        while !rest.isEmpty {
            let n = Int.random(in: 1...max(1, min(rest.count, 20)), using: &random)
            lines += splitter.split(Array(rest.prefix(n)))
            rest = rest.dropFirst(n)
            // Where the lines given out end: just after the last newline read so far.
            let read = stream[..<(stream.count - rest.count)]
            #expect(splitter.lineEnd == offset + Int64(read.lastIndex(of: 0x0A).map { $0 + 1 } ?? 0))
        }
        #expect(lines == expected)
        #expect(splitter.partial == partial)
    }

    @Test func bytesAfterTheLastNewlineAreAPartialLine() {
        #expect(split(["ab\ncd"]).partial)
        #expect(split(["ab\ncd"]).lines == ["ab"])
        #expect(split(["ab\n1234567890"]).partial, "an overlong line cut short is partial too")
        #expect(!split([]).partial)
    }
}

@Suite struct SpoolProgressTests {
    /// Blocks finish in any order; the prefix grows only over blocks that all finished, to the last one's end.
    @Test func thePrefixGrowsOnlyOverFinishedBlocksInOrder() {
        var prefix = AcknowledgedPrefix(start: 100)
        let blocks = [150, 200, 260, 300].map { prefix.begin(end: $0) }
        #expect(blocks == [0, 1, 2, 3])
        #expect(prefix.finish(1) == nil)
        #expect(prefix.finish(2) == nil)
        #expect(prefix.end == 100)
        #expect(prefix.finish(0) == 260)
        #expect(prefix.finish(1) == nil, "finished already")
        #expect(prefix.finish(9) == nil, "never begun")
        #expect(prefix.begin(end: 330) == 4)
        #expect(prefix.finish(4) == nil)
        #expect(prefix.finish(3) == 330)
        #expect(prefix.end == 330)
        // A block without a line's end (one long line read in parts) does not move the prefix.
        let empty = prefix.begin(end: 330)
        #expect(prefix.finish(empty) == nil)
        #expect(prefix.end == 330)
    }

    /// The file is done when it has been read to its end and every block begun has finished, in either order.
    @Test func theFileIsDoneOnlyWhenReadToItsEndWithEveryBlockFinished() {
        var prefix = AcknowledgedPrefix(start: 0)
        let blocks = [40, 80].map { prefix.begin(end: $0) }
        _ = prefix.finish(blocks[1])
        prefix.endOfFile()
        #expect(!prefix.isComplete, "block 0 is still in flight")
        _ = prefix.finish(blocks[0])
        #expect(prefix.isComplete)

        var unread = AcknowledgedPrefix(start: 0)
        _ = unread.finish(unread.begin(end: 40))
        #expect(!unread.isComplete, "every block finished, but more of the file may follow")
        unread.endOfFile()
        #expect(unread.isComplete)

        var empty = AcknowledgedPrefix(start: 0)
        empty.endOfFile()
        #expect(empty.isComplete, "nothing read, nothing to wait for")
    }

    /// The last block to finish removes the spool file and its progress, whether it finishes before or after the
    /// end of the file is reached; until then a grown prefix is recorded beside the file.
    @Test(arguments: [false, true]) func theLastBlockToFinishRemovesTheFile(endFirst: Bool) throws {
        let spool = try FeedbackPollerTests.spoolDirectory()
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let file = "\(spool)/1700000000000-com.example.app-production.jsonl"
        try "ab\ncd\n".write(toFile: file, atomically: true, encoding: .utf8)
        let progress = SpoolProgress(spool: file, start: 0)
        let first = progress.begin(end: 3)
        let second = progress.begin(end: 6)
        progress.finish(first)
        #expect(SpoolProgress.resumeOffset(for: file) == (3, nil))
        if endFirst { progress.endOfFile() }
        #expect(FileManager.default.fileExists(atPath: file))
        progress.finish(second)
        if !endFirst {
            #expect(FileManager.default.fileExists(atPath: file), "the end of the file not reached yet")
            #expect(SpoolProgress.resumeOffset(for: file) == (6, nil))
            progress.endOfFile()
        }
        #expect(!FileManager.default.fileExists(atPath: file))
        #expect(!FileManager.default.fileExists(atPath: SpoolProgress.path(for: file)))
    }

    /// A recorded offset is used only when it ends a line of the spool file; anything else means the beginning.
    @Test func aRecordedOffsetCountsOnlyAtTheEndOfALine() throws {
        let spool = try FeedbackPollerTests.spoolDirectory()
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let file = "\(spool)/1700000000000-com.example.app-production.jsonl"
        try "ab\ncd\nef".write(toFile: file, atomically: true, encoding: .utf8)
        func resume(_ recorded: String?) throws -> (offset: Int64, problem: String?) {
            let progress = SpoolProgress.path(for: file)
            if let recorded { try recorded.write(toFile: progress, atomically: true, encoding: .utf8) } else { try? FileManager.default.removeItem(atPath: progress) }
            return SpoolProgress.resumeOffset(for: file)
        }
        #expect(try resume(nil) == (0, nil))
        #expect(try resume("3\n") == (3, nil))
        #expect(try resume("6") == (6, nil))
        #expect(try resume("0\n") == (0, nil))
        #expect(try resume("4\n").problem?.contains("not the end of a line") == true)
        #expect(try resume("4\n").offset == 0)
        #expect(try resume("99\n").offset == 0, "beyond the file")
        #expect(try resume("").problem?.contains("does not hold an offset") == true)
        #expect(try resume("-3").offset == 0)
        #expect(try resume("x").offset == 0)
    }
}
