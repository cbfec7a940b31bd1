import Foundation
import PushCore
import PushKafka
import PushTestSupport
import Synchronization
import Testing

/// `pushworker run` and `pushworker simulate` as real child processes, against a separately started broker
/// (noida-db: real consumer group and commits).
@Suite(.serialized) struct EndToEndTests {
    static func token(_ i: Int) -> String { String(format: "%064x", 0xE2E00000 + i) }

    /// Valid events, and one of each invalid kind with the reason it must get.
    static func events(valid: Int) -> (events: [String], invalid: [String: DeliveryErrorReason]) {
        var events = (0..<valid).map { i in
            #"{"id":"v\#(i)","app":"com.example.app","token":"\#(token(i))","payload":{"aps":{"alert":"n\#(i)"}}}"#
        }
        let now = Int(Date().timeIntervalSince1970)
        let invalid: [String: (String, DeliveryErrorReason)] = [
            "x-malformed": (#"{"id":"x-malformed","app":"com.example.app""#, .malformedEvent),
            "x-token": (#"{"id":"x-token","app":"com.example.app","token":"xyz","payload":{"aps":{}}}"#, .invalidTokenFormat),
            "x-payload": (#"{"id":"x-payload","app":"com.example.app","token":"abcd","payload":{"aps":5}}"#, .invalidPayload),
            "x-large": (#"{"id":"x-large","app":"com.example.app","token":"abcd","payload":{"aps":{"alert":"\#(String(repeating: "L", count: 2100))"}}}"#, .payloadTooLarge),
            "x-priority": (#"{"id":"x-priority","app":"com.example.app","token":"abcd","payload":{"aps":{}},"priority":7}"#, .invalidPriority),
            "x-app": (#"{"id":"x-app","app":"com.example.nobody","token":"abcd","payload":{"aps":{}}}"#, .unknownApp),
            "x-expired": (#"{"id":"x-expired","app":"com.example.app","token":"abcd","payload":{"aps":{}},"expiration":\#(now - 60)}"#, .expired),
        ]
        for (offset, (_, entry)) in invalid.sorted(by: { $0.key < $1.key }).enumerated() {
            events.insert(entry.0, at: (offset + 1) * valid / (invalid.count + 1))
        }
        return (events, invalid.mapValues(\.1))
    }

    static func readAll(_ servers: String, _ topic: String) async throws -> [KafkaRecord] {
        try await KafkaReplayReader(properties: ["bootstrap.servers": servers, "log_level": "3"], topic: topic, start: .earliest).readAll()
    }

    @Test func mixedEventsAreDeliveredOrReportedAndEveryOffsetIsCommitted() async throws {
        let broker = try Broker()
        defer { broker.stop() }
        let servers = broker.bootstrapServers
        try KafkaAdmin.createTopics(bootstrapServers: servers, [("notifications", 3), ("notification-errors", 1), ("notification-feedback", 1), ("notification-reports", 1)])
        let folder = NSTemporaryDirectory() + "e2e-\(getpid())"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }

        let binary = BuiltExecutable.path("pushworker")
        let simulator = try Child(binary, [
            "simulate", "--cert", TestPKI.path("server.pem"), "--key", TestPKI.path("server-key.pem"), "--ca", TestPKI.path("ca.pem"),
            "--gateway-port", "0", "--feedback-port", "0", "--record", "\(folder)/record.jsonl", "--shutdown-every", "101", "--close-every", "1000",
        ])
        defer { simulator.killNow() }
        let listening = try JSONValue(parsing: simulator.readLine())
        let gateway = listening["gateway"]!.stringValue!
        let feedback = listening["feedback"]!.stringValue!

        let config = """
            kafka:
              brokers: "\(servers)"
              delivery_report_topic: notification-reports
              consumer_properties: {"session.timeout.ms": "6000", "receive.message.max.bytes": "1000000000"}
            apps:
              - bundle_id: com.example.app
                certificate: \(TestPKI.path("app.pem"))
                private_key: \(TestPKI.path("app-key.pem"))
                gateway: "\(gateway)"
                feedback: "\(feedback)"
            tls: {ca_file: \(TestPKI.path("ca.pem"))}
            delivery: {acceptance_window_ms: 1000, reconnect: {initial_ms: 10, max_ms: 100}}
            http: {listen: "127.0.0.1:0"}
            log: {level: info, format: json}
            """
        try config.write(toFile: "\(folder)/worker.yaml", atomically: true, encoding: .utf8)

        let valid = 20_000
        let (events, invalid) = Self.events(valid: valid)
        try await produceEvents(servers, events)
        let workerLog = "\(folder)/worker.log"
        let worker = try Child(binary, ["run", "--config", "\(folder)/worker.yaml"], standardError: workerLog)
        defer { worker.killNow() }
        let httpPort = try await workerHTTPPort(fromLog: workerLog, of: worker)

        // Wait (polling the other processes' output, with a deadline) until the simulator recorded every valid
        // notification and every invalid event has its error event.
        let recordFile = RecordFile("\(folder)/record.jsonl")
        let deadline = ContinuousClock.now.advanced(by: .seconds(120))
        var errors: [KafkaRecord] = []
        while ContinuousClock.now < deadline {
            errors = try await Self.readAll(servers, "notification-errors")
            if recordFile.update().distinct.count >= valid && errors.count >= invalid.count { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        // The HTTP endpoints while it runs. The last notifications are accepted a window after they were written.
        var metrics = try httpGet(port: httpPort, "/metrics")
        let metricsDeadline = ContinuousClock.now.advanced(by: .seconds(30))
        while !metrics.body.contains("pushworker_notifications_accepted_total \(valid)") && ContinuousClock.now < metricsDeadline {
            try await Task.sleep(for: .milliseconds(200))
            metrics = try httpGet(port: httpPort, "/metrics")
        }
        #expect(metrics.status == 200)
        #expect(metrics.body.contains("pushworker_notifications_accepted_total \(valid)"), "\(metrics.body.prefix(2000))")
        #expect(metrics.body.contains("pushworker_delivery_errors_total{reason=\"malformed_event\"} 1"))
        #expect(metrics.body.contains("pushworker_resends_total"))
        // Every accepted notification's latency, counted a batch at a time, once in the exposition.
        #expect(metrics.body.contains("# TYPE pushworker_delivery_latency_seconds histogram\n"))
        #expect(metrics.body.contains("pushworker_delivery_latency_seconds_bucket{le=\"+Inf\"} \(valid)\n"))
        #expect(metrics.body.contains("pushworker_delivery_latency_seconds_count \(valid)\n"))
        #expect(metrics.body.components(separatedBy: "# TYPE pushworker_delivery_latency_seconds ").count == 2)
        #expect(metrics.body.contains("pushworker_consumer_lag 0"))
        // 20,000 events never fill the default max_in_flight: fetching was neither held nor paused.
        #expect(metrics.body.contains("pushworker_fetch_holds_total 0\n"))
        #expect(metrics.body.contains("pushworker_fetch_pauses_total 0\n"))
        #expect(try httpGet(port: httpPort, "/healthz").status == 200)
        let ready = try httpGet(port: httpPort, "/readyz")
        #expect(ready.status == 200, "\(ready.body)")

        worker.signal(SIGTERM)
        #expect(worker.wait() == 0, "the worker exits 0 after SIGTERM")

        let tokens = recordFile.update().tokens
        #expect(Set(tokens) == Set((0..<valid).map(Self.token)), "every valid notification reached the gateway")
        #expect(tokens.count - valid >= 0)
        errors = try await Self.readAll(servers, "notification-errors")
        var reasons: [String: String] = [:]
        var environments: [String: String] = [:]
        for record in errors {
            let e = try JSONValue(parsing: record.value)
            reasons[e["event_id"]?.stringValue ?? "?", default: ""] += e["reason"]!.stringValue!
            environments[e["event_id"]?.stringValue ?? "?"] = e["environment"]?.stringValue ?? "null"
        }
        #expect(reasons == invalid.mapValues(\.rawValue), "exactly one error event per invalid event, with its reason")
        // Each error event names the record it came from (polls mix the three partitions' records).
        let consumed = try await Self.readAll(servers, "notifications")
        let byPlace = Dictionary(uniqueKeysWithValues: consumed.map { ("\($0.partition)/\($0.offset)", $0.value) })
        for record in errors {
            let e = try JSONValue(parsing: record.value)
            let id = e["event_id"]?.stringValue ?? "?"
            let source = e["source"]
            #expect(source?["topic"]?.stringValue == "notifications", "\(id)")
            let place = "\(source?["partition"]?.integerValue ?? -1)/\(source?["offset"]?.integerValue ?? -1)"
            let value = byPlace[place].map { String(decoding: $0, as: UTF8.self) } ?? ""
            #expect(value.contains(#""id":"\#(id)""#), "\(id): its source \(place) holds \(value.prefix(80))")
        }
        // Rejected before routing or not, an event of a configured app carries the environment it resolves to.
        for id in ["x-token", "x-payload", "x-large", "x-priority", "x-expired"] {
            #expect(environments[id] == "production", "\(id): \(environments[id] ?? "no event")")
        }
        #expect(environments["x-app"] == "null")
        // The delivery-report topic: one event per accepted notification.
        let reports = try await Self.readAll(servers, "notification-reports")
        let reportIDs = try reports.map { try JSONValue(parsing: $0.value)["event_id"]!.stringValue! }
        #expect(Set(reportIDs) == Set((0..<valid).map { "v\($0)" }))
        #expect(reportIDs.count == valid)

        // Offsets committed at the end of every partition.
        let partitions = (0..<3).map { TopicPartition(topic: "notifications", partition: Int32($0)) }
        let committed = try KafkaAdmin.committedOffsets(bootstrapServers: servers, group: "pushworker", partitions)
        let ends = try KafkaReplayReader(properties: ["bootstrap.servers": servers, "log_level": "3"], topic: "notifications", start: .earliest).ranges
        for p in partitions where ends[p.partition]?.isEmpty == false {
            #expect(committed[p] == ends[p.partition]?.upperBound, "\(p): committed \(committed[p] ?? -1)")
        }
    }
}

/// Produces the events, keyed by their position so that they spread over the partitions.
func produceEvents(_ servers: String, _ values: [String]) async throws {
    let producer = try KafkaProducer(properties: ["bootstrap.servers": servers, "log_level": "3"])
    let acknowledged = Atomic<Int>(0)
    await withTaskGroup(of: Void.self) { group in
        group.addTask { await producer.run(flushTimeout: .seconds(60)) }
        for (index, value) in values.enumerated() {
            producer.produce(topic: "notifications", key: Array("k\(index)".utf8), value: Array(value.utf8)) { acknowledged.add(1, ordering: .relaxed) }
        }
        producer.stop()
    }
    #expect(acknowledged.load(ordering: .relaxed) == values.count)
}

@Suite(.serialized) struct ReplayEndToEndTests {
    /// What each replay test starts from: a broker with `notifications` (`partitions`) and `notification-errors`, and
    /// an empty folder. `remove()` stops the broker and deletes the folder.
    struct Stage {
        let broker: Broker
        let folder: String
        var servers: String { broker.bootstrapServers }

        init(_ name: String, partitions: Int32 = 1) throws {
            broker = try Broker()
            folder = NSTemporaryDirectory() + "replay-\(name)-\(getpid())"
            do {
                try KafkaAdmin.createTopics(bootstrapServers: broker.bootstrapServers, [("notifications", partitions), ("notification-errors", 1)])
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            } catch {
                broker.stop()
                throw error
            }
        }

        func remove() {
            broker.stop()
            try? FileManager.default.removeItem(atPath: folder)
        }
    }

    /// An event for the one app, to the device token numbered `token`.
    static func event(_ id: String, token: Int) -> String {
        #"{"id":"\#(id)","app":"com.example.app","token":"\#(String(format: "%064x", token))","payload":{"aps":{"alert":"x"}}}"#
    }

    /// `pushworker simulate` recording to `folder`, and `folder/worker.yaml` for one app delivered to it, with
    /// `extra` (a YAML line) added.
    static func simulatorAndConfiguration(folder: String, servers: String, extra: String) throws -> Child {
        let simulator = try Child(BuiltExecutable.path("pushworker"), [
            "simulate", "--cert", TestPKI.path("server.pem"), "--key", TestPKI.path("server-key.pem"), "--ca", TestPKI.path("ca.pem"),
            "--gateway-port", "0", "--feedback-port", "0", "--record", "\(folder)/record.jsonl",
        ])
        do {
            let gateway = try JSONValue(parsing: simulator.readLine())["gateway"]!.stringValue!
            try """
                kafka: {brokers: "\(servers)"}
                apps: [{bundle_id: com.example.app, certificate: \(TestPKI.path("app.pem")), private_key: \(TestPKI.path("app-key.pem")), gateway: "\(gateway)"}]
                tls: {ca_file: \(TestPKI.path("ca.pem"))}
                \(extra)
                http: {listen: "127.0.0.1:0"}
                log: {level: warning}
                """.write(toFile: "\(folder)/worker.yaml", atomically: true, encoding: .utf8)
        } catch {
            simulator.killNow()
            throw error
        }
        return simulator
    }

    @Test func aReplayAppliesTokenSuppression() async throws {
        let stage = try Stage("suppression")
        defer { stage.remove() }
        let servers = stage.servers, folder = stage.folder
        try KafkaAdmin.createTopics(bootstrapServers: servers, [("suppressed-tokens", 1)], config: ["cleanup.policy": "compact"])
        let binary = BuiltExecutable.path("pushworker")
        let simulator = try Self.simulatorAndConfiguration(folder: folder, servers: servers, extra: "suppression: {topic: suppressed-tokens}")
        defer { simulator.killNow() }
        let gone = String(format: "%064x", 0x3001), fine = String(format: "%064x", 0x3002)
        let record = SuppressionRecord(
            app: "com.example.app", environment: .production, token: try DeviceToken(hex: gone), invalidatedAt: 1_790_000_000, reason: .feedback)
        let producer = try KafkaProducer(properties: ["bootstrap.servers": servers, "log_level": "3"])
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            producer.produce(topic: "suppressed-tokens", key: record.key, value: record.json()) {}
            producer.stop()
        }
        try await produceEvents(servers, [gone, fine].map {
            #"{"id":"r-\#($0.suffix(4))","app":"com.example.app","token":"\#($0)","payload":{"aps":{"alert":"x"}}}"#
        })

        let replay = try Child(binary, ["replay", "--config", "\(folder)/worker.yaml", "--to-earliest"])
        let summary = try JSONValue(parsing: replay.readLine())
        #expect(replay.wait() == 0)
        #expect(summary["replayed"] == JSONValue.number(2))
        #expect(summary["accepted"] == JSONValue.number(1))
        #expect(summary["errors"]?["token_suppressed"] == JSONValue.number(1))
        simulator.signal(SIGTERM)
        simulator.wait()
        let recorded = try String(contentsOfFile: "\(folder)/record.jsonl", encoding: .utf8).split(separator: "\n")
            .map { try! JSONValue(parsing: String($0))["token"]!.stringValue! }
        #expect(recorded == [fine])
    }

    /// A replay whose notifications cannot get an outcome (the gateway is gone) says how many in its summary and
    /// exits 1 once its drain deadline has passed: it is not complete, and whoever runs it must know.
    @Test func aReplayLeavingNotificationsWithoutAnOutcomeSaysSoAndExitsOne() async throws {
        let stage = try Stage("incomplete")
        defer { stage.remove() }
        let servers = stage.servers, folder = stage.folder
        // The configuration names the simulator's gateway; the simulator is then gone: every connection is refused.
        let simulator = try Self.simulatorAndConfiguration(folder: folder, servers: servers, extra: "")
        simulator.killNow()
        try await produceEvents(servers, (0..<5).map {
            Self.event("gone-\($0)", token: 0x4000 + $0)
        })
        let replay = try Child(
            BuiltExecutable.path("pushworker"), ["replay", "--config", "\(folder)/worker.yaml", "--to-earliest", "--drain-deadline", "2"])
        let summary = try JSONValue(parsing: replay.readLine())
        #expect(replay.wait() == 1)
        #expect(summary["replayed"] == JSONValue.number(5))
        #expect(summary["accepted"] == JSONValue.number(0))
        #expect(summary["without_outcome"] == JSONValue.number(5))
    }

    /// The drain deadline bounds the whole replay once progress stops: with an HTTP/2 app's API gone and a range of
    /// 300 records past `max_in_flight` (100), the pipeline waits for room before the drain begins, and the replay
    /// still ends within the deadline, saying what got no outcome and what was not read (together the whole range).
    @Test(.timeLimit(.minutes(1))) func aReplayThatStallsBeforeItsDrainEndsAtTheDeadline() async throws {
        let stage = try Stage("stalled")
        defer { stage.remove() }
        let servers = stage.servers, folder = stage.folder
        // An HTTP/2 app whose API is gone: nothing admitted gets an outcome, so reading waits for room.
        try """
            kafka: {brokers: "\(servers)"}
            apps: [{bundle_id: com.example.app, transport: http2, certificate: \(TestPKI.path("app.pem")), private_key: \(TestPKI.path("app-key.pem")), api: "127.0.0.1:1"}]
            tls: {ca_file: \(TestPKI.path("ca.pem"))}
            delivery: {max_in_flight: 100}
            http: {listen: "127.0.0.1:0"}
            log: {level: warning}
            """.write(toFile: "\(folder)/worker.yaml", atomically: true, encoding: .utf8)
        try await produceEvents(servers, (0..<300).map {
            Self.event("stall-\($0)", token: 0x5000 + $0)
        })
        let replay = try Child(
            BuiltExecutable.path("pushworker"), ["replay", "--config", "\(folder)/worker.yaml", "--to-earliest", "--drain-deadline", "2"])
        let ended = await eventually(within: .seconds(30)) { !replay.process.isRunning }
        #expect(ended, "the replay was still running 30 s after its start with a deadline of 2 s")
        replay.killNow()
        let summary = try JSONValue(parsing: replay.readLine())
        #expect(replay.wait() == 1)
        #expect(summary["accepted"] == JSONValue.number(0), "\(summary)")
        let withoutOutcome = summary["without_outcome"]?.integerValue ?? -1, unread = summary["unread"]?.integerValue ?? -1
        #expect(withoutOutcome >= 100 && unread >= 0 && withoutOutcome + unread == 300, "\(summary)")
        #expect(summary["replayed"]?.integerValue == withoutOutcome)
    }

    /// `--from-offset P:O` replays partition P from O and nothing of the partitions it does not name.
    @Test func aReplayFromOffsetsReplaysOnlyThePartitionsItNames() async throws {
        let stage = try Stage("partitions", partitions: 3)
        defer { stage.remove() }
        let servers = stage.servers, folder = stage.folder
        let simulator = try Self.simulatorAndConfiguration(folder: folder, servers: servers, extra: "")
        defer { simulator.killNow() }
        try await produceEvents(servers, (0..<90).map {
            Self.event("p-\($0)", token: 0x6000 + $0)
        })
        let all = try await KafkaReplayReader(properties: ["bootstrap.servers": servers, "log_level": "3"], topic: "notifications", start: .earliest).readAll()
        let inZero = all.filter { $0.partition == 0 }
        #expect(inZero.count >= 5 && inZero.count < 90, "partition 0 holds \(inZero.count) of 90")
        let replay = try Child(BuiltExecutable.path("pushworker"), ["replay", "--config", "\(folder)/worker.yaml", "--from-offset", "0:3"])
        let summary = try JSONValue(parsing: replay.readLine())
        #expect(replay.wait() == 0)
        #expect(summary["replayed"]?.integerValue == Int64(inZero.count - 3), "\(summary)")
        #expect(summary["accepted"]?.integerValue == Int64(inZero.count - 3))
    }

    @Test func aTimeRangeIsResentExactlyAndTheGroupsOffsetsStay() async throws {
        let stage = try Stage("range", partitions: 2)
        defer { stage.remove() }
        let servers = stage.servers, folder = stage.folder
        let binary = BuiltExecutable.path("pushworker")
        let simulator = try Self.simulatorAndConfiguration(folder: folder, servers: servers, extra: "delivery: {acceptance_window_ms: 1000}")
        defer { simulator.killNow() }

        func event(_ name: String, _ i: Int) -> String {
            Self.event("\(name)\(i)", token: (name == "early" ? 0x1000 : 0x2000) + i)
        }
        try await produceEvents(servers, (0..<100).map { event("early", $0) })
        // The range starts at the next whole second after the early events.
        let boundary = Int(Date().timeIntervalSince1970) + 1
        while Date().timeIntervalSince1970 < Double(boundary) { await Task.yield() }
        try await produceEvents(servers, (0..<100).map { event("late", $0) })

        let replay = try Child(binary, ["replay", "--config", "\(folder)/worker.yaml", "--from-timestamp", String(boundary)])
        let summary = try JSONValue(parsing: replay.readLine())
        #expect(replay.wait() == 0)
        #expect(summary["replayed"] == JSONValue.number(100))
        #expect(summary["accepted"] == JSONValue.number(100))
        simulator.signal(SIGTERM)
        simulator.wait()
        let recorded = try String(contentsOfFile: "\(folder)/record.jsonl", encoding: .utf8).split(separator: "\n")
            .map { try! JSONValue(parsing: String($0))["token"]!.stringValue! }
        #expect(Set(recorded) == Set((0..<100).map { String(format: "%064x", 0x2000 + $0) }))
        #expect(recorded.count == 100)
        let partitions = (0..<2).map { TopicPartition(topic: "notifications", partition: Int32($0)) }
        let committed = try KafkaAdmin.committedOffsets(bootstrapServers: servers, group: "pushworker", partitions)
        #expect(committed.values.allSatisfy { $0 < 0 }, "the worker group has no committed offsets: \(committed)")

        // --reset-group moves them to the start of the range instead.
        let reset = try Child(binary, ["replay", "--config", "\(folder)/worker.yaml", "--to-earliest", "--reset-group"])
        _ = reset.readLine()
        #expect(reset.wait() == 0)
        let after = try KafkaAdmin.committedOffsets(bootstrapServers: servers, group: "pushworker", partitions)
        #expect(after.values.allSatisfy { $0 == 0 }, "\(after)")
    }
}

@Suite(.serialized) struct FeedbackEndToEndTests {
    @Test func feedbackTuplesArriveAndASpoolLeftByACrashIsProducedOnStart() async throws {
        let broker = try Broker()
        defer { broker.stop() }
        let servers = broker.bootstrapServers
        try KafkaAdmin.createTopics(bootstrapServers: servers, [("notifications", 1), ("notification-errors", 1), ("notification-feedback", 1)])
        let folder = NSTemporaryDirectory() + "feedback-\(getpid())"
        try FileManager.default.createDirectory(atPath: "\(folder)/spool", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try "aa11 1700000000 com.example.app\nbb22 1700000001\n".write(toFile: "\(folder)/feedback.txt", atomically: true, encoding: .utf8)
        // What a worker killed after reading the feedback service, before producing, leaves behind.
        let leftover = FeedbackEvent(app: "com.example.app", environment: .production, token: try DeviceToken(hex: "cc33"), timestamp: 1_699_999_999, receivedAt: 1_700_000_000_000)
        try Data(leftover.json() + [0x0A]).write(to: URL(fileURLWithPath: "\(folder)/spool/1700000000000-com.example.app-production.jsonl"))

        let binary = BuiltExecutable.path("pushworker")
        let simulator = try Child(binary, [
            "simulate", "--cert", TestPKI.path("server.pem"), "--key", TestPKI.path("server-key.pem"), "--ca", TestPKI.path("ca.pem"),
            "--gateway-port", "0", "--feedback-port", "0", "--feedback", "\(folder)/feedback.txt",
        ])
        defer { simulator.killNow() }
        let listening = try JSONValue(parsing: simulator.readLine())
        try """
            kafka: {brokers: "\(servers)"}
            apps: [{bundle_id: com.example.app, certificate: \(TestPKI.path("app.pem")), private_key: \(TestPKI.path("app-key.pem")), gateway: "\(listening["gateway"]!.stringValue!)", feedback: "\(listening["feedback"]!.stringValue!)"}]
            tls: {ca_file: \(TestPKI.path("ca.pem"))}
            feedback: {interval_s: 3600, spool_dir: \(folder)/spool}
            http: {listen: "127.0.0.1:0"}
            log: {level: warning}
            """.write(toFile: "\(folder)/worker.yaml", atomically: true, encoding: .utf8)
        let worker = try Child(binary, ["run", "--config", "\(folder)/worker.yaml"])
        defer { worker.killNow() }

        var events: [KafkaRecord] = []
        let deadline = ContinuousClock.now.advanced(by: .seconds(60))
        func spoolEmpty() -> Bool { ((try? FileManager.default.contentsOfDirectory(atPath: "\(folder)/spool")) ?? ["?"]).isEmpty }
        while ContinuousClock.now < deadline {
            events = try await EndToEndTests.readAll(servers, "notification-feedback")
            if events.count >= 3 && spoolEmpty() { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        worker.signal(SIGTERM)
        #expect(worker.wait() == 0)
        let parsed = try events.map { try FeedbackEvent(validating: try JSONValue(parsing: $0.value)) }
        #expect(Set(parsed.map(\.token.hex)) == ["aa11", "bb22", "cc33"])
        #expect(parsed.count == 3)
        #expect(Set(events.compactMap { $0.key.map { String(decoding: $0, as: UTF8.self) } }) == ["aa11", "bb22", "cc33"])
        #expect(spoolEmpty(), "the spool is removed once the broker acknowledged its events")
    }
}

/// A plain HTTP/1.1 GET on loopback (curl-like, for the endpoint checks).
func httpGet(port: Int, _ path: String) throws -> (status: Int, body: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", """
        import sys, urllib.request, urllib.error
        try:
            r = urllib.request.urlopen("http://127.0.0.1:\(port)\(path)", timeout=10); print(r.status); print(r.read().decode())
        except urllib.error.HTTPError as e:
            print(e.code); print(e.read().decode())
        """]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let text = String(decoding: data, as: UTF8.self)
    let lines = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
    return (Int(lines.first ?? "") ?? -1, lines.count > 1 ? String(lines[1]) : "")
}
