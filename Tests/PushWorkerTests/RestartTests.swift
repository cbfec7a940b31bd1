import Foundation
import PushCore
import PushKafka
import PushTestSupport
import Testing

/// A broker, `pushworker simulate` and a worker configuration for runs of `pushworker run` as child processes.
final class RunHarness {
    /// noida-db (real groups, fast rebalances), or the mock cluster in a process of its own (it evicts a killed
    /// member, which noida-db never does).
    let broker: Broker?
    let mockCluster: Child?
    let servers: String
    let folder: String
    let simulator: Child
    let binary = BuiltExecutable.path("pushworker")
    let count: Int

    init(
        count: Int, simulatorFaults: [String] = [], mockCluster useMock: Bool = false, acceptanceWindowMs: Int = 1000,
        logLevel: String = "warning"
    ) async throws {
        self.count = count
        if useMock {
            let mock = try Child(BuiltExecutable.path("kafka-test-helper"), ["mock-cluster", "notifications:3", "notification-errors:1", "notification-feedback:1"])
            mockCluster = mock
            broker = nil
            servers = mock.readLine()
        } else {
            let b = try Broker()
            broker = b
            mockCluster = nil
            servers = b.bootstrapServers
            try KafkaAdmin.createTopics(bootstrapServers: servers, [("notifications", 3), ("notification-errors", 1), ("notification-feedback", 1)])
        }
        folder = NSTemporaryDirectory() + "run-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        simulator = try Child(binary, [
            "simulate", "--cert", TestPKI.path("server.pem"), "--key", TestPKI.path("server-key.pem"), "--ca", TestPKI.path("ca.pem"),
            "--gateway-port", "0", "--feedback-port", "0", "--record", "\(folder)/record.jsonl",
        ] + simulatorFaults)
        let listening = try JSONValue(parsing: simulator.readLine())
        let gateway = listening["gateway"]!.stringValue!
        let feedback = listening["feedback"]!.stringValue!
        try """
            kafka:
              brokers: "\(servers)"
              consumer_properties: {"session.timeout.ms": "6000", "receive.message.max.bytes": "1000000000"}
            apps: [{bundle_id: com.example.app, certificate: \(TestPKI.path("app.pem")), private_key: \(TestPKI.path("app-key.pem")), gateway: "\(gateway)", feedback: "\(feedback)"}]
            tls: {ca_file: \(TestPKI.path("ca.pem"))}
            delivery: {acceptance_window_ms: \(acceptanceWindowMs), max_in_flight: 2000, reconnect: {initial_ms: 10, max_ms: 100}}
            feedback: {spool_dir: \(folder)/spool}
            http: {listen: "127.0.0.1:0"}
            log: {level: \(logLevel)}
            """.write(toFile: "\(folder)/worker.yaml", atomically: true, encoding: .utf8)
        try await produceEvents(servers, (0..<count).map { i in
            #"{"id":"e\#(i)","app":"com.example.app","token":"\#(Self.token(i))","payload":{"aps":{"alert":"n\#(i)"}}}"#
        })
    }

    static func token(_ i: Int) -> String { String(format: "%064x", 0x7000_0000 + i) }

    func worker(_ arguments: [String] = [], standardError: String? = nil) throws -> Child {
        try Child(binary, ["run", "--config", "\(folder)/worker.yaml"] + arguments, standardError: standardError)
    }

    private lazy var record = RecordFile("\(folder)/record.jsonl")

    /// What the simulator recorded so far.
    func recorded() -> RecordFile { record.update() }

    /// Waits (polling the record file, with a deadline) until `condition` holds for the recorded tokens.
    func waitForRecords(within limit: Duration = .seconds(120), _ condition: (RecordFile) -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now.advanced(by: limit)
        while ContinuousClock.now < deadline {
            if condition(recorded()) { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// Committed offsets and partition ends, when they differ (nil when every partition is committed to its end).
    func uncommitted() throws -> String? {
        let partitions = (0..<3).map { TopicPartition(topic: "notifications", partition: Int32($0)) }
        let committed = try KafkaAdmin.committedOffsets(bootstrapServers: servers, group: "pushworker", partitions)
        let ends = try KafkaReplayReader(properties: ["bootstrap.servers": servers, "log_level": "3"], topic: "notifications", start: .earliest).ranges
        // An empty partition has nothing to commit.
        if partitions.allSatisfy({ committed[$0] == ends[$0.partition]?.upperBound || ends[$0.partition]?.isEmpty == true }) { return nil }
        return partitions.map { "\($0): committed \(committed[$0] ?? -1), end \(ends[$0.partition]?.upperBound ?? -1)" }.joined(separator: "; ")
    }

    func close() {
        simulator.killNow()
        mockCluster?.killNow()
        broker?.stop()
        try? FileManager.default.removeItem(atPath: folder)
    }

    var all: Set<String> { Set((0..<count).map(Self.token)) }
}

@Suite(.serialized) struct RestartTests {
    /// A slow gateway (4 KiB every 2 ms) makes "midway" observable.
    static let slow = ["--read-delay-ms", "2"]

    /// On the mock cluster in a process of its own: noida-db never evicts the killed member, so its partitions
    /// would never reach the restarted worker.
    @Test func sigkillMidwayThenRestartLosesNothing() async throws {
        let h = try await RunHarness(count: 20_000, simulatorFaults: Self.slow, mockCluster: true)
        defer { h.close() }
        let first = try h.worker()
        #expect(try await h.waitForRecords { $0.tokens.count >= 4_000 })
        first.signal(SIGKILL)
        first.wait()
        let second = try h.worker()
        defer { second.killNow() }
        #expect(try await h.waitForRecords { $0.distinct.count == h.count })
        second.signal(SIGTERM)
        #expect(second.wait() == 0)
        let recorded = h.recorded()
        #expect(recorded.distinct == h.all, "nothing missing")
        print("SIGKILL restart: \(recorded.tokens.count - h.count) duplicates of \(h.count)")
        let uncommitted = try h.uncommitted()
        #expect(uncommitted == nil, "\(uncommitted ?? "")")
    }

    @Test func sigtermMidwayThenRestartLosesNothingAndDuplicatesNothing() async throws {
        let h = try await RunHarness(count: 20_000, simulatorFaults: Self.slow)
        defer { h.close() }
        let first = try h.worker()
        #expect(try await h.waitForRecords { $0.tokens.count >= 4_000 })
        first.signal(SIGTERM)
        #expect(first.wait() == 0)
        let second = try h.worker()
        defer { second.killNow() }
        #expect(try await h.waitForRecords { $0.distinct.count == h.count })
        second.signal(SIGTERM)
        #expect(second.wait() == 0)
        let recorded = h.recorded()
        #expect(recorded.distinct == h.all, "nothing missing")
        #expect(recorded.tokens.count == h.count, "no duplicates after a graceful stop: \(recorded.tokens.count - h.count)")
        let uncommitted = try h.uncommitted()
        #expect(uncommitted == nil, "\(uncommitted ?? "")")
    }

    @Test func twoWorkersInOneGroupAndOneStopsMidway() async throws {
        let h = try await RunHarness(count: 20_000, simulatorFaults: Self.slow)
        defer { h.close() }
        let a = try h.worker()
        let b = try h.worker()
        defer { b.killNow() }
        #expect(try await h.waitForRecords { $0.tokens.count >= 4_000 })
        // Both had partitions: the events are keyed over all three.
        a.signal(SIGTERM)
        #expect(a.wait() == 0)
        #expect(try await h.waitForRecords { $0.distinct.count == h.count })
        b.signal(SIGTERM)
        #expect(b.wait() == 0)
        #expect(h.recorded().distinct == h.all, "nothing missing")
        let uncommitted = try h.uncommitted()
        #expect(uncommitted == nil, "\(uncommitted ?? "")")
    }

    @Test func shutdownsAndAbruptClosesOnTheGatewayLoseNothing() async throws {
        let h = try await RunHarness(count: 20_000, simulatorFaults: ["--shutdown-every", "101", "--close-every", "1000"])
        defer { h.close() }
        let worker = try h.worker()
        defer { worker.killNow() }
        #expect(try await h.waitForRecords { $0.distinct.count == h.count })
        worker.signal(SIGTERM)
        #expect(worker.wait() == 0)
        let recorded = h.recorded()
        #expect(recorded.distinct == h.all, "nothing missing")
        print("status 10 every 101 and a close every 1000: \(recorded.tokens.count - h.count) duplicates of \(h.count)")
        let uncommitted = try h.uncommitted()
        #expect(uncommitted == nil, "\(uncommitted ?? "")")
    }

    /// A second SIGTERM during the graceful shutdown stops the worker at once: the drain would wait out a
    /// minute-long acceptance window; nothing unsettled is committed (it is delivered again after a restart).
    @Test func aSecondSignalStopsAtOnceAndCommitsNothingUnsettled() async throws {
        let h = try await RunHarness(count: 100, acceptanceWindowMs: 60_000, logLevel: "info")
        defer { h.close() }
        let log = "\(h.folder)/worker.log"
        let worker = try h.worker(["--shutdown-deadline", "120"], standardError: log)
        defer { worker.killNow() }
        // Every notification is written and waits for its acceptance window.
        #expect(try await h.waitForRecords { $0.distinct.count == h.count })
        worker.signal(SIGTERM)
        #expect(await eventually(within: .seconds(30)) {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("shutting down")
        })
        let second = ContinuousClock.now
        worker.signal(SIGTERM)
        let status = worker.wait()
        let took = second.duration(to: .now)
        #expect(status == 0)
        #expect(took < .seconds(20), "the second signal cut the drain short: \(took)")
        #expect(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("second signal"))
        let partitions = (0..<3).map { TopicPartition(topic: "notifications", partition: Int32($0)) }
        let committed = try KafkaAdmin.committedOffsets(bootstrapServers: h.servers, group: "pushworker", partitions)
        #expect(partitions.allSatisfy { (committed[$0] ?? -1) < 0 }, "nothing settled, nothing committed: \(committed)")
    }
}
