import Foundation
import Logging
import Prometheus
import PushKafka
import PushTestSupport
import Testing

@testable import PushDemo
@testable import PushWorker

@Suite struct ServiceNamesTests {
    /// The group's services go by short names in its log lines and errors, never by a description of what they hold:
    /// the suppression reader holds the Kafka properties, a SASL password among them.
    @Test func everyServiceHasAShortNameThatHoldsNoProperty() throws {
        let folder = NSTemporaryDirectory() + "service-names-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try ThrowawayPKI.make(in: folder)
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("suppressed-tokens", partitions: 1)
        let secret = "not-for-the-log-7f3a"
        let configuration = try WorkerConfiguration(yaml: """
            kafka: {brokers: "\(cluster.bootstrapServers)", properties: {"log_level": "0", "sasl.password": "\(secret)"}}
            suppression: {topic: suppressed-tokens}
            apps:
              - bundle_id: com.example.app
                certificate: \(folder)/app.pem
                private_key: \(folder)/app-key.pem
            """, environment: [:])
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let worker = try Worker(configuration: configuration, logger: quiet, registry: PrometheusCollectorRegistry())
        let names = worker.services.map(\.serviceName)
        #expect(names == ["signals", "producer", "http", "suppression", "consumer", "pipeline", "feedback"])
        // What the group would have logged without the names: the reader's description carries the property.
        #expect("\(try #require(worker.suppression).service)".contains(secret))
    }
}
