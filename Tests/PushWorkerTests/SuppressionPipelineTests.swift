import Foundation
import Logging
import PushCore
import PushGateway
import PushKafka
import PushSimulator
import PushTestSupport
import Testing
@testable import PushWorker

/// Token suppression through the pipeline (SPEC section 10; mock cluster, the simulator's gateway and API): what
/// the gateways report gone is written to the topic and never sent again, by this instance at once and by another
/// one reading the topic within seconds; a later registration lets a notification through and lifts the
/// suppression with a tombstone.
@Suite struct SuppressionPipelineTests {
    static func token(_ i: Int) -> String { String(format: "%064x", 0x5EED0000 + i) }

    @Test(.timeLimit(.minutes(2))) func tokensReportedGoneAreSuppressedAndARegistrationLiftsThem() async throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let cluster = try KafkaMockCluster()
        for topic in ["notifications", "notification-errors", "notification-feedback", "suppressed-tokens"] {
            try cluster.createTopic(topic, partitions: topic == "notifications" ? 2 : 1)
        }
        let properties = ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"]
        let unregistered = Self.token(1), badDeviceToken = Self.token(2), status8 = Self.token(3)
        let registeredAgain = Self.token(4), stillGone = Self.token(5)

        var simulatorConfiguration = SimulatorConfiguration.testPKI
        simulatorConfiguration.recordInMemory = true
        simulatorConfiguration.apiPort = 0
        simulatorConfiguration.unregistered[try DeviceToken(hex: unregistered).bytes] = 1_790_000_123_456
        simulatorConfiguration.invalidTokens = [try DeviceToken(hex: badDeviceToken).bytes, try DeviceToken(hex: status8).bytes]
        let simulator = try GatewaySimulator(configuration: simulatorConfiguration, logger: quiet)
        let addresses = try await simulator.start()
        let binary = AppEndpoint.testBinary(gatewayPort: addresses.gatewayPort, feedbackPort: addresses.feedbackPort, app: "com.example.binary")
        let http2 = AppEndpoint(
            app: "com.example.app", environment: .production, gatewayHost: "", gatewayPort: 0, feedbackHost: "", feedbackPort: 0,
            connections: 1, format: .frame, certificatePath: TestPKI.path("app.pem"), privateKeyPath: TestPKI.path("app-key.pem"),
            caPath: TestPKI.path("ca.pem"), http2: HTTP2Endpoint(host: "127.0.0.1", port: try #require(addresses.apiPort), authentication: .certificate))

        // Before the worker starts, the topic already holds two suppressions (another instance wrote them).
        let earlier = try KafkaProducer(properties: properties, logger: quiet)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await earlier.run() }
            for (app, token) in [("com.example.app", registeredAgain), ("com.example.binary", stillGone)] {
                let record = SuppressionRecord(
                    app: app, environment: .production, token: try! DeviceToken(hex: token), invalidatedAt: 1_790_000_000, reason: .feedback)
                earlier.produce(topic: "suppressed-tokens", key: record.key, value: record.json()) {}
            }
            earlier.stop()  // flushes
        }
        let worker = try Self.member(
            properties, endpoints: [binary, http2], group: "suppression-pipeline", feedbackTopic: "notification-feedback",
            logger: quiet)
        let (producer, pipeline, consumer, list) = (worker.producer, worker.pipeline, worker.consumer, worker.list)
        // This instance's reader, and another instance's (its table only).
        let other = SuppressionList()
        let readers = [
            worker.reader,
            try SuppressionService(properties: properties, topic: "suppressed-tokens", list: other, logger: quiet),
        ]

        func event(_ id: String, _ app: String, _ token: String, registeredAt: Int64? = nil) -> String {
            let registration = registeredAt.map { #","token_registered_at":\#($0)"# } ?? ""
            return #"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","payload":{"aps":{"alert":"hi"}}\#(registration)}"#
        }
        func produce(_ events: [(key: String, json: String)]) {
            for e in events { producer.produce(topic: "notifications", key: Array(e.key.utf8), value: Array(e.json.utf8)) {} }
        }
        func settled(_ count: Int) async -> Bool {
            await eventually(within: .seconds(30)) {
                let s = pipeline.snapshot
                return s.accepted + s.errorsByReason.values.reduce(0, +) >= count && pipeline.held == 0
            }
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            for reader in readers { group.addTask { try await reader.run() } }
            #expect(await eventually(within: .seconds(10)) { list.isLoaded && other.isLoaded })
            #expect(list.count == 2)
            pipeline.start()
            group.addTask { await consumer.run() }

            // First round: three tokens reported gone by the gateways, one suppressed token sent without and then
            // with a later registration (one key: one partition, in this order), one still suppressed, six others.
            var first: [(String, String)] = (0..<6).map { ("n\($0)", event("n\($0)", $0 % 2 == 0 ? "com.example.app" : "com.example.binary", Self.token(100 + $0))) }
            first += [
                ("u", event("u1", "com.example.app", unregistered)), ("b", event("b1", "com.example.app", badDeviceToken)),
                ("s8", event("s1", "com.example.binary", status8)),
                ("r", event("r1", "com.example.app", registeredAgain)), ("r", event("r2", "com.example.app", registeredAgain, registeredAt: 1_790_000_001)),
                ("g", event("g1", "com.example.binary", stillGone, registeredAt: 1_790_000_000)),
            ]
            produce(first)
            #expect(await settled(first.count), "\(pipeline.snapshot)")
            var s = pipeline.snapshot
            #expect(s.accepted == 7)  // six others and the registered one
            #expect(s.errorsByReason == [.unregistered: 1, .invalidToken: 2, .tokenSuppressed: 2])

            // The other instance learns the three within seconds; the lifted one is gone from both tables.
            let gone = [("com.example.app", unregistered), ("com.example.app", badDeviceToken), ("com.example.binary", status8)]
            func suppressed(_ table: SuppressionList, _ app: String, _ token: String) -> Bool {
                let key = SuppressionKey(app: app, environment: .production, token: try! DeviceToken(hex: token))
                if case .suppressed = table.verdict(key, registeredAt: nil) { return true }
                return false
            }
            #expect(await eventually(within: .seconds(5)) {
                gone.allSatisfy { suppressed(other, $0.0, $0.1) } && !suppressed(other, "com.example.app", registeredAgain)
            })
            #expect(gone.allSatisfy { suppressed(list, $0.0, $0.1) } && !suppressed(list, "com.example.app", registeredAgain))

            // Second round: the three are not sent again; the lifted token goes out without a registration.
            produce([
                ("u", event("u2", "com.example.app", unregistered)), ("b", event("b2", "com.example.app", badDeviceToken)),
                ("s8", event("s2", "com.example.binary", status8)), ("r", event("r3", "com.example.app", registeredAgain)),
            ])
            #expect(await settled(first.count + 4), "\(pipeline.snapshot)")
            s = pipeline.snapshot
            #expect(s.accepted == 8)
            #expect(s.errorsByReason == [.unregistered: 1, .invalidToken: 2, .tokenSuppressed: 5])

            _ = await pipeline.stop()
            consumer.stop()
            for reader in readers { reader.reader.stop() }
            producer.stop()
            try await group.waitForAll()
        }
        await simulator.stop()

        // The topic: the two written before, the three reported gone with SPEC section 10's times and reasons, and
        // the tombstone of the registered token.
        let records = try await KafkaReplayReader(properties: properties, topic: "suppressed-tokens", start: .earliest).readAll()
        let entries = try records.map { try SuppressionEntry(key: $0.key ?? [], value: $0.isTombstone ? nil : $0.value) }
        let written = entries.dropFirst(2)
        #expect(written.count == 4)
        let suppressions = written.compactMap { if case .suppress(let r) = $0 { r } else { nil } }
        #expect(Set(suppressions.map { "\($0.token.hex) \($0.reason.rawValue)" })
            == ["\(unregistered) unregistered", "\(badDeviceToken) bad_device_token", "\(status8) invalid_token"])
        #expect(suppressions.first { $0.reason == .unregistered }?.invalidatedAt == 1_790_000_124)  // the 410's milliseconds, rounded up
        #expect(written.contains(.lift(SuppressionKey(app: "com.example.app", environment: .production, token: try DeviceToken(hex: registeredAgain)))))

        // The suppressed events' error events say when and why.
        let errors = try await KafkaReplayReader(properties: properties, topic: "notification-errors", start: .earliest).readAll()
            .map { try JSONValue(parsing: $0.value) }.filter { $0["reason"]?.stringValue == "token_suppressed" }
        #expect(errors.count == 5)
        #expect(errors.contains { $0["event_id"]?.stringValue == "g1" && $0["detail"]?.stringValue == "token invalidated at 2026-09-21T14:13:20Z (feedback), not registered again since" && $0["status"] == .null })
    }

    /// One worker of a group: its producer (acknowledgements go to one pipeline's ledger), pipeline, consumer,
    /// suppression table and reader.
    struct Member {
        let producer: KafkaProducer
        let pipeline: Pipeline
        let consumer: KafkaConsumer
        let list: SuppressionList
        let reader: SuppressionService
    }

    /// - Parameter consumerProperties: added to `properties` for the consumer (with `group`).
    static func member(
        _ properties: [String: String], endpoints: [AppEndpoint], group: String, feedbackTopic: String? = nil,
        consumerProperties: [String: String] = [:], logger: Logger
    ) throws -> Member {
        let producer = try KafkaProducer(properties: properties, logger: logger)
        var delivery = DeliveryConfiguration()
        delivery.acceptanceWindow = .seconds(1)  // the product's: a busy machine answers status 8 late
        var configuration = PipelineConfiguration(deliveryErrorTopic: "notification-errors", endpoints: endpoints)
        configuration.feedbackTopic = feedbackTopic
        configuration.suppressionTopic = "suppressed-tokens"
        let list = SuppressionList()
        let pipeline = try Pipeline(
            configuration: configuration, producer: producer, delivery: delivery, suppression: list, logger: logger,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
        let consumer = try KafkaConsumer(
            properties: properties.merging(consumerProperties.merging(["group.id": group]) { $1 }) { $1 },
            topics: ["notifications"], maxHeld: delivery.maxInFlight, sink: pipeline, logger: logger)
        let reader = try SuppressionService(properties: properties, topic: "suppressed-tokens", list: list, logger: logger)
        return Member(producer: producer, pipeline: pipeline, consumer: consumer, list: list, reader: reader)
    }

    @Test(.timeLimit(.minutes(2))) func aTokenOneWorkerLearnsIsGoneIsSuppressedByTheOtherWithinSeconds() async throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let cluster = try KafkaMockCluster()
        for topic in ["notifications", "notification-errors", "suppressed-tokens"] {
            try cluster.createTopic(topic, partitions: topic == "notifications" ? 2 : 1)
        }
        let properties = ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"]
        let gone = Self.token(7)
        var simulatorConfiguration = SimulatorConfiguration.testPKI
        simulatorConfiguration.recordInMemory = true
        simulatorConfiguration.invalidTokens = [try DeviceToken(hex: gone).bytes]
        let simulator = try GatewaySimulator(configuration: simulatorConfiguration, logger: quiet)
        let addresses = try await simulator.start()
        let endpoint = AppEndpoint.testBinary(gatewayPort: addresses.gatewayPort, feedbackPort: addresses.feedbackPort, environment: .production)
        let producer = try KafkaProducer(properties: properties, logger: quiet)  // the events'
        // Quick rebalances and commits: the two share the input's partitions.
        let sharing = ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500", "auto.commit.interval.ms": "200"]
        let members = [
            try Self.member(properties, endpoints: [endpoint], group: "two-workers", consumerProperties: sharing, logger: quiet),
            try Self.member(properties, endpoints: [endpoint], group: "two-workers", consumerProperties: sharing, logger: quiet),
        ]
        func event(_ id: String, _ token: String) -> [UInt8] {
            Array(#"{"id":"\#(id)","app":"com.example.app","token":"\#(token)","payload":{"aps":{"alert":"hi"}}}"#.utf8)
        }
        func total(_ reason: DeliveryErrorReason) -> Int { members.reduce(0) { $0 + ($1.pipeline.snapshot.errorsByReason[reason] ?? 0) } }
        func suppressed(_ list: SuppressionList) -> Bool {
            let key = SuppressionKey(app: "com.example.app", environment: .production, token: try! DeviceToken(hex: gone))
            if case .suppressed = list.verdict(key, registeredAt: nil) { return true }
            return false
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            for m in members {
                group.addTask { await m.producer.run() }
                group.addTask { try await m.reader.run() }
                m.pipeline.start()
                group.addTask { await m.consumer.run() }
            }
            // Both members hold a partition.
            #expect(await eventually(within: .seconds(60)) { members.allSatisfy { $0.consumer.assignment.count == 1 } })

            // One event to the token: whichever member gets it hears status 8 from the gateway.
            producer.produce(topic: "notifications", key: Array("first".utf8), value: event("first", gone)) {}
            #expect(await eventually(within: .seconds(30)) { total(.invalidToken) == 1 })
            let learnt = ContinuousClock.now
            // The other member suppresses it within 5 s of the answer.
            #expect(await eventually(within: .seconds(5)) { members.allSatisfy { suppressed($0.list) } })
            #expect(ContinuousClock.now - learnt < .seconds(5))

            // Twenty more, spread over both partitions (both members): none reaches the gateway.
            for i in 0..<20 { producer.produce(topic: "notifications", key: Array("again-\(i)".utf8), value: event("again-\(i)", gone)) {} }
            #expect(await eventually(within: .seconds(30)) { total(.tokenSuppressed) == 20 && members.allSatisfy { $0.pipeline.held == 0 } },
                    "\(members.map { "\($0.pipeline.snapshot) held \($0.pipeline.held)" })")
            #expect(members.allSatisfy { ($0.pipeline.snapshot.errorsByReason[.tokenSuppressed] ?? 0) > 0 }, "both members suppressed some")
            #expect(total(.invalidToken) == 1)
            #expect(simulator.summary.errorResponses[8] == 1)

            for m in members {
                _ = await m.pipeline.stop()
                m.consumer.stop()
                m.reader.reader.stop()
                m.producer.stop()
            }
            producer.stop()
            try await group.waitForAll()
        }
        await simulator.stop()
    }
}

/// The suppression topic read at start when it holds records that are not SPEC section 10's (another topic's, say):
/// they are skipped and counted, the suppressions among them apply, and the log says so a batch at a time.
@Suite struct SuppressionTopicSkipTests {
    @Test(.timeLimit(.minutes(1))) func foreignRecordsAreSkippedAndLoggedABatchAtATime() async throws {
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("suppressed-tokens", partitions: 1)
        let properties = ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"]
        let producer = try KafkaProducer(properties: properties)
        let foreign = 40
        let records = try (0..<2).map { i in
            SuppressionRecord(app: "com.example.app", environment: .production, token: try DeviceToken(hex: String(format: "%064x", 0xAB00 + i)),
                              invalidatedAt: 1_700_000_000, reason: .unregistered)
        }
        let acknowledged = CapacityGate(capacity: foreign + records.count)
        try await acknowledged.acquire(foreign + records.count)
        let capture = CapturingLogHandler()
        let list = SuppressionList()
        let service = try SuppressionService(
            properties: properties, topic: "suppressed-tokens", list: list, logger: Logger(label: "test") { _ in capture })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            producer.produce(topic: "suppressed-tokens", key: records[0].key, value: records[0].json()) { acknowledged.release(1) }
            for i in 0..<foreign {
                producer.produce(topic: "suppressed-tokens", key: Array("event-\(i)".utf8), value: Array(#"{"id":"\#(i)"}"#.utf8)) {
                    acknowledged.release(1)
                }
            }
            producer.produce(topic: "suppressed-tokens", key: records[1].key, value: records[1].json()) { acknowledged.release(1) }
            try await acknowledged.acquire(foreign + records.count)  // every record is on the topic
            group.addTask { try await service.run() }
            await list.waitUntilLoaded()
            service.reader.stop()
            producer.stop()
            try await group.waitForAll()
        }
        #expect(list.count == 2)
        let lines = capture.lines.withLock { $0 }.filter { $0.message == "suppression records skipped" }
        #expect(lines.reduce(0) { $0 + (Int($1.metadata["records"] ?? "") ?? 0) } == foreign)
        #expect(!lines.isEmpty && lines.count < foreign, "a line per batch, not per record: \(lines.count)")
        #expect(lines.first?.metadata["offset"] == "1", "the first skipped record is named")
    }
}
