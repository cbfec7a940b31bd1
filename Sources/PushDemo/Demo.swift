import Foundation
import Logging
import PushCore
import PushGateway
import PushKafka
import PushSimulator
import PushWorker
import Synchronization

/// `pushworker demo`: the whole flow on an embedded default — librdkafka's in-process mock cluster as Kafka, the
/// gateway simulator in-process — with a sample stream of events, live progress, and a readable summary.
public enum Demo {
    static let app = "com.example.app"
    /// The app delivered over the HTTP/2 API (token authentication).
    static let http2App = "com.example.news"
    static func http2Token(_ i: Int) -> String { String(format: "%064x", 0xB0B0B000 + i) }
    /// The token the API answers 410 Unregistered for, and the time it gives.
    static let unregisteredToken = http2Token(99)
    static let unregisteredAt: Int64 = 1_795_100_000_000
    static let inputTopic = "notifications"
    static let errorTopic = "notification-errors"
    static let feedbackTopic = "notification-feedback"
    static let suppressionTopic = "suppressed-tokens"
    /// The binary token the gateway rejects with status 8.
    static let rejectedToken = String(repeating: "de", count: 32)

    /// The sample stream: valid notifications and one of each kind of trouble.
    static func sampleEvents(now: Int64) -> [(String, String)] {
        func token(_ i: Int) -> String { String(format: "%064x", 0xA11CE000 + i) }
        var events: [(String, String)] = (1...120).map { i in
            let payload = i % 3 == 0
                ? #"{"aps":{"alert":{"title":"Order \#(i)","body":"Your order has shipped"},"badge":\#(i % 9)},"order":\#(i)}"#
                : #"{"aps":{"alert":"Hello #\#(i)","sound":"default"}}"#
            return ("valid", #"{"id":"order-\#(i)","app":"\#(app)","token":"\#(token(i))","payload":\#(payload)}"#)
        }
        events.insert(("token the gateway rejects (status 8)", #"{"id":"gone-device","app":"\#(app)","token":"\#(rejectedToken)","payload":{"aps":{"alert":"Anyone there?"}}}"#), at: 30)
        events.insert(("malformed", #"{"id":"broken-1","app":"\#(app)","token":"abcd","payload":"#), at: 45)
        events.insert(("bad token format", #"{"id":"typo-1","app":"\#(app)","token":"not-hex","payload":{"aps":{"alert":"x"}}}"#), at: 50)
        events.insert(("expired", #"{"id":"too-late-1","app":"\#(app)","token":"\#(token(999))","payload":{"aps":{"alert":"Sale ends now"}},"expiration":\#(now - 3600)}"#), at: 60)
        events.insert(("payload too large", #"{"id":"huge-1","app":"\#(app)","token":"\#(token(998))","payload":{"aps":{"alert":"\#(String(repeating: "A", count: 2100))"}}}"#), at: 70)
        events.insert(("unknown app", #"{"id":"stranger-1","app":"com.example.unknown","token":"\#(token(997))","payload":{"aps":{"alert":"hi"}}}"#), at: 80)
        // The HTTP/2 app: its own limits (a 3000-byte payload, priority 1) and a token Apple says is gone.
        for i in 1...40 {
            events.append(("http2", #"{"id":"news-\#(i)","app":"\#(http2App)","token":"\#(http2Token(i))","payload":{"aps":{"alert":"Headline \#(i)"}}}"#))
        }
        events.append(("http2", #"{"id":"news-long","app":"\#(http2App)","token":"\#(http2Token(41))","payload":{"aps":{"alert":"\#(String(repeating: "B", count: 3000))"}}}"#))
        events.append(("http2", #"{"id":"news-quiet","app":"\#(http2App)","token":"\#(http2Token(42))","priority":1,"payload":{"aps":{"alert":"Whenever"}}}"#))
        // Today's APNs on the HTTP/2 app: a critical alert, and a Live Activity update (a match's score).
        events.append(("http2 critical alert", #"{"id":"flood-warning","app":"\#(http2App)","token":"\#(http2Token(43))","payload":{"aps":{"alert":{"title":"Flood warning","subtitle":"River Thames","body":"Move to higher ground"},"sound":{"critical":1,"name":"siren.caf","volume":1.0},"interruption-level":"critical"}}}"#))
        events.append(("http2 live activity", #"{"id":"match-goal","app":"\#(http2App)","token":"\#(http2Token(44))","push_type":"liveactivity","payload":{"aps":{"event":"update","timestamp":\#(now),"content-state":{"home":1,"away":0,"minute":23},"alert":{"title":"Goal!","body":"Arsenal 1-0"}}}}"#))
        events.append(("http2 unregistered", #"{"id":"news-gone","app":"\#(http2App)","token":"\#(unregisteredToken)","payload":{"aps":{"alert":"Still there?"}}}"#))
        events.append(("a long alert to shorten", #"{"id":"long-1","app":"\#(app)","token":"\#(token(996))","truncate_alert":true,"payload":{"aps":{"alert":"\#(String(repeating: "Long story… ", count: 250))"}}}"#))
        return events
    }

    public static func run(pkiDirectory pki: String, print say: @escaping @Sendable (String) -> Void) async throws {
        let started = ContinuousClock.now
        var quiet = Logger(label: "pushworker.demo")
        quiet.logLevel = .error
        say("pushworker demo: Kafka = librdkafka's in-process mock cluster, gateway = pushworker's simulator (TLS, client certificates and a provider-token key from \(pki)); \(app) over the binary interface, \(http2App) over the HTTP/2 API")

        // Kafka
        let cluster = try KafkaMockCluster()
        try cluster.createTopic(inputTopic, partitions: 3)
        try cluster.createTopic(errorTopic, partitions: 1)
        try cluster.createTopic(feedbackTopic, partitions: 1)
        try cluster.createTopic(suppressionTopic, partitions: 1)

        // The gateway: a status-10 shutdown every 50 notifications on a connection, one token it calls invalid,
        // and a feedback list.
        var simulatorConfiguration = SimulatorConfiguration(
            certificatePath: "\(pki)/server.pem", privateKeyPath: "\(pki)/server-key.pem", caPath: "\(pki)/ca.pem")
        simulatorConfiguration.recordInMemory = true
        simulatorConfiguration.shutdownEvery = 50
        simulatorConfiguration.invalidTokens = [Array(repeating: 0xDE, count: 32)]
        simulatorConfiguration.apiPort = 0
        // The HTTP/2 app is a sandbox app: the API answers with Apple's apns-unique-id, which its error events carry.
        simulatorConfiguration.sandbox = true
        simulatorConfiguration.tokenKeyPath = "\(pki)/token-key.pub.pem"
        simulatorConfiguration.teamID = ThrowawayPKI.teamID
        simulatorConfiguration.keyID = ThrowawayPKI.keyID
        simulatorConfiguration.unregistered = [try DeviceToken(hex: unregisteredToken).bytes: unregisteredAt]
        simulatorConfiguration.feedback = [FeedbackEntry(
            tuple: FeedbackTuple(timestamp: 1_795_000_000, token: try DeviceToken(hex: String(repeating: "fe", count: 32))), app: app)]
        let simulator = try GatewaySimulator(configuration: simulatorConfiguration, logger: quiet)
        let addresses = try await simulator.start()
        say("gateway simulator listening: \(addresses.json)")

        let endpoint = AppEndpoint(
            app: app, environment: .production, gatewayHost: "127.0.0.1", gatewayPort: addresses.gatewayPort,
            feedbackHost: "127.0.0.1", feedbackPort: addresses.feedbackPort, connections: 2, format: .frame,
            certificatePath: "\(pki)/app.pem", privateKeyPath: "\(pki)/app-key.pem", caPath: "\(pki)/ca.pem")
        let http2Endpoint = AppEndpoint(
            app: http2App, environment: .sandbox, gatewayHost: "", gatewayPort: 0, feedbackHost: "", feedbackPort: 0,
            connections: 2, format: .frame, certificatePath: nil, privateKeyPath: nil, caPath: "\(pki)/ca.pem",
            http2: HTTP2Endpoint(
                host: "127.0.0.1", port: addresses.apiPort ?? 0,
                authentication: .token(teamID: ThrowawayPKI.teamID, keyID: ThrowawayPKI.keyID, signingKeyPath: "\(pki)/AuthKey_\(ThrowawayPKI.keyID).p8")))
        var delivery = DeliveryConfiguration()
        // Twice the product's default (1 s). A window must outlast the gateway's slowest answer: after it, an error
        // response comes too late to count, and what the gateway discarded behind it counts accepted. This gateway
        // shares the process and its cores with the worker, and on a loaded machine it has answered the status-10
        // shutdown more than a second late.
        delivery.acceptanceWindow = .seconds(2)
        delivery.reconnectInitial = .milliseconds(20)
        delivery.reconnectMaximum = .milliseconds(200)

        try await deliverSamples(
            cluster: cluster, simulator: simulator, endpoint: endpoint, http2Endpoint: http2Endpoint, delivery: delivery,
            quiet: quiet, started: started, say: say)
        // Every Kafka client of the flow is gone with it: the cluster goes last, so that no client is left to log
        // its brokers down after the summary.
        withExtendedLifetime(cluster) {}
    }

    /// The flow on the cluster and the simulator: samples produced, delivered, settled and summarised. Its Kafka
    /// clients live in here only.
    private static func deliverSamples(
        cluster: KafkaMockCluster, simulator: GatewaySimulator, endpoint: AppEndpoint, http2Endpoint: AppEndpoint,
        delivery: DeliveryConfiguration, quiet: Logger, started: ContinuousClock.Instant, say: @escaping @Sendable (String) -> Void
    ) async throws {
        let producer = try KafkaProducer(properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"], logger: quiet)
        var pipelineConfiguration = PipelineConfiguration(deliveryErrorTopic: errorTopic, endpoints: [endpoint, http2Endpoint])
        pipelineConfiguration.feedbackTopic = feedbackTopic
        pipelineConfiguration.suppressionTopic = suppressionTopic
        // Token suppression (SPEC section 10): the topic read whole, then followed.
        let suppression = SuppressionList()
        let suppressionReader = try SuppressionService(
            properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"], topic: suppressionTopic, list: suppression, logger: quiet)
        let pipeline = try Pipeline(
            configuration: pipelineConfiguration,
            producer: producer, delivery: delivery, suppression: suppression, logger: quiet,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })
        let consumer = try KafkaConsumer(
            properties: ["bootstrap.servers": cluster.bootstrapServers, "group.id": "pushworker-demo", "log_level": "3",
                         "session.timeout.ms": "6000", "auto.commit.interval.ms": "200"],
            topics: [inputTopic], maxHeld: 10_000, sink: pipeline, logger: quiet)

        let samples = sampleEvents(now: Int64(Date().timeIntervalSince1970))
        // Sent once the first round has settled: to the two tokens the gateways reported gone.
        let again = [
            #"{"id":"gone-device-again","app":"\#(app)","token":"\#(rejectedToken)","payload":{"aps":{"alert":"Anyone there now?"}}}"#,
            #"{"id":"news-gone-again","app":"\#(http2App)","token":"\#(unregisteredToken)","payload":{"aps":{"alert":"And now?"}}}"#,
        ]
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            group.addTask { try await suppressionReader.run() }
            await suppression.waitUntilLoaded()
            pipeline.start()
            group.addTask { await consumer.run() }

            for (index, (_, json)) in samples.enumerated() {
                producer.produce(topic: inputTopic, key: Array("sample-\(index)".utf8), value: Array(json.utf8)) {}
            }
            let binarySamples = samples.filter { !$0.0.hasPrefix("http2") }
            let http2Samples = samples.count - binarySamples.count
            say("produced \(samples.count) events to '\(inputTopic)' (3 partitions): for \(app), \(binarySamples.count - 6) valid (one with a long alert to shorten) and one each of: " +
                binarySamples.map(\.0).filter { $0 != "valid" && $0 != "a long alert to shorten" }.joined(separator: ", ") +
                "; for \(http2App), \(http2Samples - 1) valid (one with a 3000-byte payload, one with priority 1, a critical alert, a Live Activity update) and one to a token Apple says is gone (410)")

            // Live progress until every record is settled (outcome known, output events acknowledged).
            var lastLine = ""
            let deadline = ContinuousClock.now.advanced(by: .seconds(60))
            func settle(_ total: Int) async throws {
                while true {
                    let c = pipeline.snapshot
                    let line = "  consumed \(c.consumed)/\(total) · accepted \(c.accepted) · error events \(c.errorsByReason.values.reduce(0, +)) · unsettled \(pipeline.held)"
                    if line != lastLine {
                        say(line)
                        lastLine = line
                    }
                    if c.consumed == total && pipeline.held == 0 { break }
                    guard ContinuousClock.now < deadline else { throw DemoError("the demo did not settle within a minute") }
                    try await Task.sleep(for: .milliseconds(100))  // progress display cadence, not synchronisation
                }
            }
            try await settle(samples.count)

            // The tokens reported gone are suppressed now: notifications to them end as delivery errors without
            // reaching Apple.
            say("suppressed now: \(suppression.count) tokens; sending to the status-8 token and the 410 token again")
            for (index, json) in again.enumerated() {
                producer.produce(topic: inputTopic, key: Array("again-\(index)".utf8), value: Array(json.utf8)) {}
            }
            try await settle(samples.count + again.count)

            // Feedback: read the service once and produce one event per tuple.
            let feedback = try await FeedbackClient(endpoint: endpoint).fetch()
            // Each acknowledgement gives a permit back; taking them all again waits for the last one.
            let acknowledgements = CapacityGate(capacity: max(1, feedback.tuples.count))
            try await acknowledgements.acquire(feedback.tuples.count)
            for tuple in feedback.tuples {
                let event = FeedbackEvent(app: app, environment: .production, token: tuple.token, timestamp: tuple.timestamp,
                                          receivedAt: Int64(Date().timeIntervalSince1970 * 1000))
                producer.produce(topic: feedbackTopic, key: Array(event.messageKey.utf8), value: event.json()) {
                    acknowledgements.release(1)
                }
            }
            try await acknowledgements.acquire(feedback.tuples.count)
            say("feedback service: \(feedback.tuples.count) tuples → '\(feedbackTopic)'")

            let unsettled = await pipeline.stop()
            consumer.stop()  // its final commit, on its own thread, covers everything settled
            suppressionReader.stop()
            producer.stop()
            try await group.waitForAll()
            let servers = cluster.bootstrapServers
            let committed = try await onOwnThread("kafka-offsets") {
                try KafkaAdmin.committedOffsets(
                    bootstrapServers: servers, group: "pushworker-demo", (0..<3).map { TopicPartition(topic: inputTopic, partition: $0) })
            }

            // Summary
            let counts = pipeline.snapshot
            let recorded = simulator.recorded
            let requests = simulator.recordedRequests
            let summary = simulator.summary
            await simulator.stop()
            say("")
            say("== what reached the gateway")
            say("  \(recorded.count) notifications recorded on \(Set(recorded.map(\.connection)).count) connections; " +
                "status-10 shutdowns: \(summary.errorResponses[10] ?? 0), resent on new connections, each notification recorded " +
                "\(Set(recorded.map(\.token)).count == recorded.count ? "exactly once" : "at least once")")
            if let long = recorded.first(where: { $0.payload.count > 1800 }) {
                say("  the long alert went out shortened to \(long.payload.count) bytes, ending \"…\(String(decoding: long.payload.suffix(12), as: UTF8.self))\"")
            }
            say("== what reached the HTTP/2 API")
            say("  \(requests.count) requests accepted on \(Set(requests.map(\.connection)).count) connections (token authentication), " +
                "the largest body \(requests.map(\.body.count).max() ?? 0) bytes; 410 Unregistered: \(summary.apiAnswers["410 Unregistered"] ?? 0) " +
                "→ a delivery error and a feedback event")
            say("== '\(errorTopic)': \(counts.errorsByReason.values.reduce(0, +)) events")
            for (reason, n) in counts.errorsByReason.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                say("  \(reason.rawValue): \(n)")
            }
            let errors = try await readTopic(cluster.bootstrapServers, errorTopic)
            for e in errors.filter({ ["invalid_token", "malformed_event", "unregistered", "token_suppressed"].contains(reasonOf($0)) }) {
                say("  e.g. " + String(decoding: e.value, as: UTF8.self))
            }
            let suppressionRecords = try await readTopic(cluster.bootstrapServers, suppressionTopic)
            say("== '\(suppressionTopic)': \(suppressionRecords.count) records (every instance reads them: none sends to these tokens again)")
            for r in suppressionRecords { say("  \(String(decoding: r.key ?? [], as: UTF8.self).prefix(40))… " + String(decoding: r.value, as: UTF8.self)) }
            let feedbackEvents = try await readTopic(cluster.bootstrapServers, feedbackTopic)
            say("== '\(feedbackTopic)': \(feedbackEvents.count) events")
            for e in feedbackEvents { say("  " + String(decoding: e.value, as: UTF8.self)) }
            say("== offsets committed for group 'pushworker-demo' on '\(inputTopic)': " +
                committed.sorted { $0.key.partition < $1.key.partition }.map { "[\($0.key.partition)] \($0.value < 0 ? "none (empty)" : String($0.value))" }.joined(separator: ", ") +
                " (\(unsettled) left without an outcome)")
            say("done in \(String(format: "%.1f", Double((ContinuousClock.now - started).components.seconds) + Double((ContinuousClock.now - started).components.attoseconds) * 1e-18)) s")
        }
    }

    static func reasonOf(_ record: KafkaRecord) -> String? {
        (try? JSONValue(parsing: record.value))?["reason"]?.stringValue
    }

    static func readTopic(_ servers: String, _ topic: String) async throws -> [KafkaRecord] {
        try await onOwnThread("kafka-open") {
            try KafkaReplayReader(properties: ["bootstrap.servers": servers, "log_level": "3"], topic: topic, start: .earliest)
        }.readAll()
    }
}

struct DemoError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
