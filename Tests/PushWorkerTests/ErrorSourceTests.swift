import Foundation
import Logging
import PushCore
import PushGateway
@testable import PushKafka
import PushSimulator
import PushTestSupport
import PushWorker
import Testing

/// A poll's records come from several partitions, in runs, and are for several apps, interleaved: each error event
/// names its own record.
@Suite struct ErrorSourceTests {
    @Test(.timeLimit(.minutes(1))) func eachErrorEventNamesItsRecordInABatchOfSeveralPartitions() async throws {
        let kafka = try ErrorTopicCluster()
        let producer = try KafkaProducer(properties: kafka.properties, logger: kafka.quiet)
        // Nothing listens on port 1; no record here gets as far as the gateway.
        let pipeline = try Pipeline(
            configuration: PipelineConfiguration(
                deliveryErrorTopic: "notification-errors", endpoints: [.testBinary(gatewayPort: 1, feedbackPort: 1)]),
            producer: producer, delivery: DeliveryConfiguration(), logger: kafka.quiet,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })

        // One batch: runs of two records of partitions 0, 1, 2, 0, 1, 2, each record an error (an unknown app, or
        // malformed), at offsets that differ between partitions.
        var batch: [KafkaRecord] = []
        var expected: [String: (partition: Int64, offset: Int64)] = [:]
        for i in 0..<12 {
            let partition = Int32(i / 2 % 3)
            let offset = Int64(1000 * Int(partition) + i)
            let value = i % 2 == 0
                ? #"{"id":"e\#(i)","app":"com.example.nobody","token":"abcd","payload":{"aps":{}}}"#
                : #"{"id":"e\#(i)","app":"com.example.app""#
            batch.append(KafkaRecord(
                topic: "notifications", partition: partition, offset: offset, timestamp: -1, key: nil, value: Array(value.utf8)))
            expected["e\(i)"] = (Int64(partition), offset)
        }

        _ = await Self.settleOnePoll(batch, pipeline: pipeline, producer: producer)

        let errors = try await kafka.errorEvents()
        var named: [String: (partition: Int64, offset: Int64)] = [:]
        for e in errors {
            #expect(e["source"]?["topic"]?.stringValue == "notifications")
            named[e["event_id"]?.stringValue ?? "?"] = (e["source"]?["partition"]?.integerValue ?? -1, e["source"]?["offset"]?.integerValue ?? -1)
        }
        #expect(errors.count == expected.count)
        for (id, place) in expected {
            #expect(named[id]?.partition == place.partition && named[id]?.offset == place.offset,
                    "\(id): expected \(place), named \(String(describing: named[id]))")
        }
    }

    /// One poll interleaves the records of two apps, and the gateway refuses some tokens of each: every
    /// `invalid_token` event pairs its record's id and offset with the token that record carried (each app's
    /// deliveries are made apart, in record order, and given their records' tickets in place).
    @Test(.timeLimit(.minutes(1))) func eachErrorEventNamesItsRecordWhenAppsInterleaveInABatch() async throws {
        let kafka = try ErrorTopicCluster()
        func token(_ i: Int) -> String { String(format: "%064x", 0xA11CE000 + i) }
        // Apps a, b, b, a, b, a, a, b, ... (a pattern with runs of either); every third record's token refused.
        let pattern = [0, 1, 1, 0, 1, 0, 0, 1]
        let count = 48
        let refused = Set((0..<count).filter { $0 % 3 == 1 })
        var simulatorConfiguration = SimulatorConfiguration.testPKI
        simulatorConfiguration.recordInMemory = true
        simulatorConfiguration.invalidTokens = Set(try refused.map { try DeviceToken(hex: token($0)).bytes })
        let simulator = try GatewaySimulator(configuration: simulatorConfiguration, logger: kafka.quiet)
        let addresses = try await simulator.start()
        let apps = ["com.example.a", "com.example.b"]
        let producer = try KafkaProducer(properties: kafka.properties, logger: kafka.quiet)
        // Every status 8 must arrive within the window, or the notifications behind it count accepted (SPEC section
        // 4). The simulator shares this process and two cores with the whole test pass: under it, this test took
        // 32 s instead of 3 and seven answers came after the product's 1 s.
        var delivery = DeliveryConfiguration()
        delivery.acceptanceWindow = .seconds(3)
        let pipeline = try Pipeline(
            configuration: PipelineConfiguration(
                deliveryErrorTopic: "notification-errors",
                endpoints: apps.map { .testBinary(gatewayPort: addresses.gatewayPort, feedbackPort: addresses.feedbackPort, app: $0) }),
            producer: producer, delivery: delivery, logger: kafka.quiet,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })

        var batch: [KafkaRecord] = []
        var expected: [String: (token: String, offset: Int64)] = [:]
        for i in 0..<count {
            let app = apps[pattern[i % pattern.count]]
            let value = #"{"id":"r\#(i)","app":"\#(app)","token":"\#(token(i))","payload":{"aps":{"alert":"n"}}}"#
            batch.append(KafkaRecord(
                topic: "notifications", partition: 0, offset: Int64(500 + i), timestamp: -1, key: nil, value: Array(value.utf8)))
            if refused.contains(i) { expected["r\(i)"] = (token(i), Int64(500 + i)) }
        }

        let accepted = await Self.settleOnePoll(batch, pipeline: pipeline, producer: producer)
        #expect(accepted == count - refused.count)
        await simulator.stop()

        let errors = try await kafka.errorEvents()
        #expect(errors.count == refused.count)
        for e in errors {
            let id = e["event_id"]?.stringValue ?? "?"
            #expect(e["reason"]?.stringValue == "invalid_token", "\(id)")
            #expect(e["token"]?.stringValue == expected[id]?.token, "\(id) names token \(e["token"]?.stringValue ?? "none")")
            #expect(e["source"]?["offset"]?.integerValue == expected[id]?.offset, "\(id)")
        }
    }

    /// One poll's notifications are staged in one buffer, and a record that ends otherwise (an unknown app, a
    /// malformed event, an app of a legacy format that refuses what the frame format allows) leaves nothing there:
    /// every frame the gateway receives carries its own record's token and payload.
    @Test(.timeLimit(.minutes(1))) func eachFrameCarriesItsRecordsTokenAndPayloadWhenAPollMixesOutcomes() async throws {
        let kafka = try ErrorTopicCluster()
        var simulatorConfiguration = SimulatorConfiguration.testPKI
        simulatorConfiguration.recordInMemory = true
        let simulator = try GatewaySimulator(configuration: simulatorConfiguration, logger: kafka.quiet)
        let addresses = try await simulator.start()
        var legacy = AppEndpoint.testBinary(gatewayPort: addresses.gatewayPort, feedbackPort: addresses.feedbackPort, app: "com.example.legacy")
        legacy.format = .enhanced
        let producer = try KafkaProducer(properties: kafka.properties, logger: kafka.quiet)
        let pipeline = try Pipeline(
            configuration: PipelineConfiguration(
                deliveryErrorTopic: "notification-errors",
                endpoints: [.testBinary(gatewayPort: addresses.gatewayPort, feedbackPort: addresses.feedbackPort), legacy]),
            producer: producer, delivery: DeliveryConfiguration(), logger: kafka.quiet,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })

        func token(_ i: Int) -> String { String(format: "%064x", 0xB0B000 + i) }
        let long = String(repeating: "x", count: 300)  // over the enhanced format's 256 bytes, within the frame's
        var batch: [KafkaRecord] = []
        var sent: [[UInt8]: [UInt8]] = [:]  // token: payload
        var refused: [String: String] = [:]  // event id: reason
        for i in 0..<42 {
            let id = "m\(i)", t = token(i)
            let value: String
            switch i % 7 {
            case 0: value = #"{"id":"\#(id)","app":"com.example.app","token":"\#(t)","payload":{"aps":{"alert":"a\#(i)"}}}"#
            case 1: value = #"{"id":"\#(id)","app":"com.example.nobody","token":"\#(t)","payload":{"aps":{"alert":"u\#(i)"}}}"#
            case 2: value = #"{"id":"\#(id)","app":"com.example.legacy","token":"\#(t)","payload":{"aps":{"alert":"l\#(i)"}}}"#
            case 3: value = #"{"id":"\#(id)","app":"com.example.app","token":"\#(t)","payload":{"aps":{"alert":5}}}"#
            case 4: value = #"{"id":"\#(id)","app":"com.example.app","token":"\#(t)","payload":{ "aps" : { "alert" : "w\#(i)" } }}"#
            case 5: value = #"{"id":"\#(id)","app":"com.example.legacy","token":"\#(t)","payload":{"aps":{"alert":"\#(long)"}}}"#
            default: value = #"{"id":"\#(id)","app":"com.example.app","token":"<\#(t.prefix(8)) \#(t.dropFirst(8))>","payload":{"aps":{"badge":\#(i)}}}"#
            }
            switch i % 7 {
            case 0: sent[try DeviceToken(hex: t).bytes] = Array(#"{"aps":{"alert":"a\#(i)"}}"#.utf8)
            case 2: sent[try DeviceToken(hex: t).bytes] = Array(#"{"aps":{"alert":"l\#(i)"}}"#.utf8)
            case 4: sent[try DeviceToken(hex: t).bytes] = Array(#"{"aps":{"alert":"w\#(i)"}}"#.utf8)
            case 6: sent[try DeviceToken(hex: t).bytes] = Array(#"{"aps":{"badge":\#(i)}}"#.utf8)
            case 1: refused[id] = "unknown_app"
            case 3: refused[id] = "invalid_payload"
            default: refused[id] = "payload_too_large"
            }
            batch.append(KafkaRecord(
                topic: "notifications", partition: 0, offset: Int64(i), timestamp: -1, key: nil, value: Array(value.utf8)))
        }

        let accepted = await Self.settleOnePoll(batch, pipeline: pipeline, producer: producer)
        #expect(accepted == sent.count)
        let received = simulator.recorded
        await simulator.stop()
        #expect(received.count == sent.count)
        for notification in received {
            #expect(sent[notification.token] == notification.payload,
                    "\(Hex.encode(notification.token)): \(String(decoding: notification.payload, as: UTF8.self))")
        }
        #expect(Set(received.map(\.token)) == Set(sent.keys))
        let errors = try await kafka.errorEvents()
        #expect(errors.count == refused.count)
        for e in errors {
            let id = e["event_id"]?.stringValue ?? "?"
            #expect(e["reason"]?.stringValue == refused[id], "\(id)")
        }
    }

    /// SPEC section 2: an event already past its expiration when it is read is reported `expired` at once, on both
    /// transports, without waiting for a connection (both gateways are down here): an explicit time an hour ago,
    /// RFC 3339 a minute ago, and no expiration on a record two time-to-lives old.
    @Test(.timeLimit(.minutes(1))) func eventsExpiredWhenReadAreReportedAtOnceOnBothTransports() async throws {
        let kafka = try ErrorTopicCluster()
        let producer = try KafkaProducer(properties: kafka.properties, logger: kafka.quiet)
        let http2 = AppEndpoint(
            app: "com.example.h2", environment: .production, gatewayHost: "", gatewayPort: 0, feedbackHost: "", feedbackPort: 0,
            connections: 1, format: .frame, certificatePath: TestPKI.path("app.pem"), privateKeyPath: TestPKI.path("app-key.pem"),
            caPath: TestPKI.path("ca.pem"), http2: HTTP2Endpoint(host: "127.0.0.1", port: 1, authentication: .certificate))
        var configuration = PipelineConfiguration(
            deliveryErrorTopic: "notification-errors", endpoints: [.testBinary(gatewayPort: 1, feedbackPort: 1), http2])
        configuration.defaultTTLSeconds = 600
        let pipeline = try Pipeline(
            configuration: configuration, producer: producer, delivery: DeliveryConfiguration(), logger: kafka.quiet,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
        let now = Int64(Date().timeIntervalSince1970)
        let minuteAgo = RFC3339.format(unixSeconds: now - 60)
        var batch: [KafkaRecord] = []
        for (i, app) in ["com.example.app", "com.example.h2"].enumerated() {
            for (j, (expiration, timestamp)) in [(#","expiration":\#(now - 3600)"#, -1), (#","expiration":"\#(minuteAgo)""#, -1), ("", (now - 1200) * 1000)].enumerated() {
                let value = #"{"id":"e\#(i)\#(j)","app":"\#(app)","token":"abcd","payload":{"aps":{"alert":"x"}}\#(expiration)}"#
                batch.append(KafkaRecord(
                    topic: "notifications", partition: 0, offset: Int64(batch.count), timestamp: Int64(timestamp), key: nil, value: Array(value.utf8)))
            }
        }
        #expect(await Self.settleOnePoll(batch, pipeline: pipeline, producer: producer) == 0)
        #expect(pipeline.snapshot.errorsByReason == [.expired: 6])
        let errors = try await kafka.errorEvents()
        #expect(errors.count == 6)
        #expect(errors.allSatisfy { $0["reason"]?.stringValue == "expired" && $0["attempts"]?.integerValue == 0 })
        // The events name no environment: their error events carry the one their app resolved to.
        #expect(errors.allSatisfy { $0["environment"]?.stringValue == "production" })
    }

    /// Puts `batch` through `pipeline` as one poll, waits until all of it is settled, then stops both; returns how
    /// many notifications were accepted.
    static func settleOnePoll(_ batch: [KafkaRecord], pipeline: Pipeline, producer: KafkaProducer) async -> Int {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            let (records, continuation) = AsyncStream.makeStream(of: [KafkaRecord].self)
            continuation.yield(batch)
            continuation.finish()
            try? await pipeline.run(records: records)
            #expect(await pipeline.drain(timeout: .seconds(30)))
            let accepted = pipeline.snapshot.accepted
            _ = await pipeline.stop()
            producer.stop()
            return accepted
        }
    }
}

/// A mock cluster with the delivery-error topic, the client properties for it, and a logger that stays quiet.
private struct ErrorTopicCluster {
    let quiet: Logger
    let properties: [String: String]
    private let cluster: KafkaMockCluster

    init() throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        self.quiet = quiet
        cluster = try KafkaMockCluster()
        try cluster.createTopic("notification-errors", partitions: 1)
        properties = ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"]
    }

    /// Every delivery-error event produced so far, parsed.
    func errorEvents() async throws -> [JSONValue] {
        try await KafkaReplayReader(properties: properties, topic: "notification-errors", start: .earliest).readAll()
            .map { try JSONValue(parsing: $0.value) }
    }
}
