import Foundation
import Logging
import PushCore
import PushGateway
import PushKafka
import PushSimulator
import PushTestSupport
import PushWorker
import Testing

/// A binary app and an HTTP/2 app side by side through the pipeline (mock cluster, the simulator's gateway and
/// API): every event accepted or reported, a 410 giving a delivery error and a feedback event, the HTTP/2 limits
/// applied to the HTTP/2 app's events only.
@Suite struct HTTP2PipelineTests {
    @Test(.timeLimit(.minutes(2))) func aBinaryAndAnHTTP2AppDeliverSideBySide() async throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let cluster = try KafkaMockCluster()
        for topic in ["notifications", "notification-errors", "notification-feedback"] {
            try cluster.createTopic(topic, partitions: topic == "notifications" ? 2 : 1)
        }
        func token(_ i: Int) -> String { String(format: "%064x", 0xB0B00000 + i) }
        let unregistered = [3, 70, 201].map(token)
        let invalid = [9, 150].map(token)
        var simulatorConfiguration = SimulatorConfiguration.testPKI
        simulatorConfiguration.recordInMemory = true
        simulatorConfiguration.apiPort = 0
        simulatorConfiguration.tokenKeyPath = TestPKI.path("token-key.pub.pem")
        simulatorConfiguration.teamID = "TEAM123456"
        simulatorConfiguration.keyID = "KEY1234567"
        for t in unregistered { simulatorConfiguration.unregistered[try DeviceToken(hex: t).bytes] = 1_790_000_123_456 }
        simulatorConfiguration.invalidTokens = Set(try invalid.map { try DeviceToken(hex: $0).bytes })
        let simulator = try GatewaySimulator(configuration: simulatorConfiguration, logger: quiet)
        let addresses = try await simulator.start()

        let binary = AppEndpoint.testBinary(gatewayPort: addresses.gatewayPort, feedbackPort: addresses.feedbackPort, app: "com.example.binary")
        let http2 = AppEndpoint(
            app: "com.example.app", environment: .production, gatewayHost: "", gatewayPort: 0, feedbackHost: "", feedbackPort: 0,
            connections: 2, format: .frame, certificatePath: nil, privateKeyPath: nil, caPath: TestPKI.path("ca.pem"),
            http2: HTTP2Endpoint(
                host: "127.0.0.1", port: try #require(addresses.apiPort),
                authentication: .token(teamID: "TEAM123456", keyID: "KEY1234567", signingKeyPath: TestPKI.path("AuthKey_KEY1234567.p8"))))
        var delivery = DeliveryConfiguration()
        delivery.acceptanceWindow = .milliseconds(200)
        var configuration = PipelineConfiguration(deliveryErrorTopic: "notification-errors", endpoints: [binary, http2])
        configuration.feedbackTopic = "notification-feedback"
        let producer = try KafkaProducer(properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"], logger: quiet)
        let pipeline = try Pipeline(
            configuration: configuration, producer: producer, delivery: delivery, logger: quiet,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
        let consumer = try KafkaConsumer(
            properties: ["bootstrap.servers": cluster.bootstrapServers, "group.id": "http2-pipeline", "log_level": "3"],
            topics: ["notifications"], maxHeld: delivery.maxInFlight, sink: pipeline, logger: quiet)

        // 300 for the HTTP/2 app (one with a 3000-byte payload and one with priority 1: both allowed there), 100 for
        // the binary app (the same two are refused there).
        let big = String(repeating: "x", count: 3000)
        var events: [String] = []
        for i in 0..<300 {
            let alert = i == 10 ? big : "n\(i)"
            let priority = i == 11 ? #","priority":1"# : ""
            events.append(#"{"id":"h\#(i)","app":"com.example.app","token":"\#(token(i))","payload":{"aps":{"alert":"\#(alert)"}}\#(priority)}"#)
        }
        for i in 0..<100 {
            let alert = i == 10 ? big : "n\(i)"
            let priority = i == 11 ? #","priority":1"# : ""
            events.append(#"{"id":"b\#(i)","app":"com.example.binary","token":"\#(token(1000 + i))","payload":{"aps":{"alert":"\#(alert)"}}\#(priority)}"#)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            pipeline.start()
            group.addTask { await consumer.run() }
            for (i, json) in events.enumerated() {
                producer.produce(topic: "notifications", key: Array("k\(i)".utf8), value: Array(json.utf8)) {}
            }
            let done = await eventually(within: .seconds(60)) {
                let s = pipeline.snapshot
                return s.accepted + s.errorsByReason.values.reduce(0, +) >= 400
            }
            #expect(done, "\(pipeline.snapshot)")
            let s = pipeline.snapshot
            #expect(s.accepted == 295 + 98)
            #expect(s.errorsByReason == [.unregistered: 3, .invalidToken: 2, .payloadTooLarge: 1, .invalidPriority: 1])
            #expect(await eventually(within: .seconds(30)) { pipeline.held == 0 })
            _ = await pipeline.stop()
            consumer.stop()
            producer.stop()
            try await group.waitForAll()
        }
        #expect(Set(simulator.recordedRequests.map(\.token)).count == 295)
        #expect(simulator.recordedRequests.count == 295)
        #expect(simulator.recorded.count == 98)

        let errors = try await KafkaReplayReader(
            properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"], topic: "notification-errors", start: .earliest
        ).readAll()
        let parsed = try errors.map { try JSONValue(parsing: $0.value) }
        let gone = parsed.filter { $0["reason"]?.stringValue == "unregistered" }
        #expect(Set(gone.compactMap { $0["token"]?.stringValue }) == Set(unregistered))
        #expect(gone.allSatisfy { $0["status"]?.numberValue == 410 && $0["detail"]?.stringValue == "Unregistered" })
        let bad = parsed.filter { $0["reason"]?.stringValue == "invalid_token" }
        #expect(Set(bad.compactMap { $0["token"]?.stringValue }) == Set(invalid))
        #expect(bad.allSatisfy { $0["status"]?.numberValue == 400 && $0["detail"]?.stringValue == "BadDeviceToken" })

        let feedback = try await KafkaReplayReader(
            properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"], topic: "notification-feedback", start: .earliest
        ).readAll().map { try JSONValue(parsing: $0.value) }
        #expect(Set(feedback.compactMap { $0["token"]?.stringValue }) == Set(unregistered))
        #expect(feedback.allSatisfy { $0["timestamp_unix"]?.numberValue == 1_790_000_123 && (try? FeedbackEvent(validating: $0)) != nil && $0["app"]?.stringValue == "com.example.app" })
        await simulator.stop()
    }
}
