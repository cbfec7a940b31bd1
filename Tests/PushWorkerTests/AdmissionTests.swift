import Foundation
import Logging
import PushCore
import PushGateway
import PushKafka
import PushSimulator
import PushTestSupport
import PushWorker
import Testing

/// Per-app admission: an app whose gateway is down counts towards pausing with at most its share of
/// `max_in_flight`, so the other apps keep delivering (in process: the mock cluster, the simulator for one app and a
/// closed port for the other).
@Suite struct AdmissionTests {
    @Test func anAppWhoseGatewayIsDownDoesNotStopTheOthers() async throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("notifications", partitions: 3)
        try cluster.createTopic("notification-errors", partitions: 1)

        var simulatorConfiguration = SimulatorConfiguration.testPKI
        simulatorConfiguration.recordInMemory = true
        let simulator = try GatewaySimulator(configuration: simulatorConfiguration, logger: quiet)
        let addresses = try await simulator.start()
        func endpoint(_ app: String, port: Int) -> AppEndpoint {
            AppEndpoint(
                app: app, environment: .production, gatewayHost: "127.0.0.1", gatewayPort: port, feedbackHost: "127.0.0.1",
                feedbackPort: addresses.feedbackPort, connections: 2, format: .frame, certificatePath: TestPKI.path("app.pem"),
                privateKeyPath: TestPKI.path("app-key.pem"), caPath: TestPKI.path("ca.pem"))
        }
        // Nothing listens on `refused`: every connection attempt of app "down" is refused.
        // (Port 1: privileged and outside the ephemeral range, so no other test's server is given it while this
        // app keeps reconnecting.)
        let refused = 1
        var delivery = DeliveryConfiguration()
        delivery.maxInFlight = 1000
        delivery.acceptanceWindow = .milliseconds(200)
        delivery.reconnectInitial = .milliseconds(20)
        delivery.reconnectMaximum = .milliseconds(200)

        // What the consumer logs (assignments, rebalances) and the pipeline's warnings (a partition's ledger
        // restarting) explain a failure: a record consumed twice comes from one of them.
        let capture = CapturingLogHandler()
        let producer = try KafkaProducer(properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"], logger: quiet)
        let pipeline = try Pipeline(
            configuration: PipelineConfiguration(
                deliveryErrorTopic: "notification-errors", endpoints: [endpoint("down", port: refused), endpoint("up", port: addresses.gatewayPort)]),
            producer: producer, delivery: delivery, logger: Logger(label: "pipeline") { _ in capture }, wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
        let consumer = try KafkaConsumer(
            properties: ["bootstrap.servers": cluster.bootstrapServers, "group.id": "admission", "log_level": "3"],
            topics: ["notifications"], maxHeld: delivery.maxInFlight, sink: pipeline,
            logger: Logger(label: "consumer") { _ in capture })

        // More for the app that is down than all of max_in_flight, interleaved with three times as many for the other.
        let down = 1200
        let up = 3600
        var events: [String] = []
        for i in 0..<(down + up) {
            let app = i % 4 == 0 ? "down" : "up"
            events.append(#"{"id":"\#(app)-\#(i)","app":"\#(app)","token":"\#(String(format: "%064x", i))","payload":{"aps":{"alert":"n"}}}"#)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            pipeline.start()
            group.addTask { await consumer.run() }
            for (i, json) in events.enumerated() {
                producer.produce(topic: "notifications", key: Array("k\(i)".utf8), value: Array(json.utf8)) {}
            }
            let delivered = await eventually(within: .seconds(60)) { pipeline.snapshot.accepted >= up }
            #expect(delivered, "accepted \(pipeline.snapshot.accepted) of \(up) while the other app's gateway is down")
            #expect(pipeline.snapshot.accepted == up)
            let log = capture.lines.withLock { lines in
                lines.filter { $0.level >= .warning && !$0.message.contains("connect") || $0.message.contains("assign") || $0.message.contains("revoke") }
                    .prefix(20).map { "\($0.level) \($0.message) \($0.metadata)" }
            }
            #expect(pipeline.snapshot.consumed == down + up, "consumer and pipeline log: \(log)")
            #expect(pipeline.held == down)  // the app that is down keeps its notifications, none lost, none failed
            #expect(pipeline.snapshot.errorsByReason.isEmpty)
            // Accepted means the acceptance window passed with no error response, not that the simulator (in this
            // process, among the other tests' work) has read them all yet: wait for its record before counting it.
            _ = await eventually(within: .seconds(30)) { simulator.recorded.count >= up }
            #expect(simulator.recorded.count == up)
            #expect(Set(simulator.recorded.map(\.token)).count == up)
            _ = await pipeline.stop()
            consumer.stop()
            producer.stop()
            try await group.waitForAll()
        }
        await simulator.stop()
    }
}
