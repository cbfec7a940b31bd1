import Logging
import PushTestSupport
import Synchronization
import Testing
@testable import PushKafka

@Suite(.serialized) struct KafkaLogTests {
    @Test func syslogLevelsMapToSwiftLogLevels() {
        #expect((0...7).map { KafkaLog.level(syslog: $0) } == [.critical, .critical, .critical, .error, .warning, .notice, .info, .debug])
    }

    @Test func librdkafkasLinesGoThroughTheLogger() async throws {
        let capture = CapturingLogHandler()
        KafkaLog.use(Logger(label: "kafka-log-test") { _ in capture })
        defer { KafkaLog.use(nil) }
        // A client pointed at a closed port logs its connection failures (level 3, facility FAIL) through the
        // callback rather than to standard error, and its debug lines when asked for them.
        let port = 1  // nothing listens on loopback's port 1, and no other test's server can be given it
        let producer = try KafkaProducer(properties: ["bootstrap.servers": "127.0.0.1:\(port)", "log_level": "7", "debug": "broker"])
        let client = "rdkafka#producer"
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run(flushTimeout: .zero) }
            producer.produce(topic: "t", key: nil, value: [1]) {}
            #expect(await eventually(within: .seconds(30)) {
                capture.lines.withLock { $0.contains { $0.metadata["facility"] == "FAIL" && $0.level == .error } }
            })
            producer.stop()
        }
        let lines = capture.lines.withLock { $0 }
        let failure = lines.first { $0.metadata["facility"] == "FAIL" && $0.level == .error }
        #expect(failure?.message.contains("127.0.0.1:\(port)") == true)
        #expect(failure?.metadata["client"]?.hasPrefix(client) == true)
        #expect(lines.contains { $0.level == .debug })
    }
}
