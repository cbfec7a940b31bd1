import PushCore
import Testing
@testable import PushWorker

/// SPEC section 7's example, with one app.
let specExample = """
    kafka:
      brokers: "127.0.0.1:9092"
      group_id: pushworker
      input_topics: [notifications]
      delivery_error_topic: notification-errors
      feedback_topic: notification-feedback
      delivery_report_topic: null        # optional
      properties: {}
      consumer_properties: {}
      producer_properties: {}
    apps:
      - bundle_id: com.example.app
        environment: production
        certificate: certs/app.pem
        private_key: certs/app-key.pem
        private_key_passphrase_file: null
        gateway: null
        feedback: null
        connections: 2
        protocol: frame
    tls:
      ca_file: null
    delivery:
      acceptance_window_ms: 1000
      max_in_flight: 100000
      max_attempts: 5
      default_ttl_s: 86400
      reconnect: { initial_ms: 500, max_ms: 60000, reset_after_s: 30 }
    feedback:
      interval_s: 86400
      spool_dir: ./spool
    http:
      listen: "127.0.0.1:9464"
    log:
      level: info
      format: json
    """

func load(_ yaml: String, _ env: [String: String] = [:]) throws(ConfigurationError) -> WorkerConfiguration {
    try WorkerConfiguration(yaml: yaml, environment: env)
}

func problem(_ yaml: String, _ env: [String: String] = [:]) -> ConfigurationError? {
    do {
        _ = try load(yaml, env)
        return nil
    } catch {
        return error
    }
}

@Suite struct ConfigurationTests {
    @Test func theSpecExampleLoadsWithItsValues() throws {
        let c = try load(specExample)
        #expect(c.kafka.brokers == "127.0.0.1:9092")
        #expect(c.kafka.inputTopics == ["notifications"])
        #expect(c.kafka.deliveryReportTopic == nil)
        #expect(c.apps.count == 1)
        #expect(c.apps[0].bundleID == "com.example.app")
        #expect(c.apps[0].environment == .production)
        #expect(c.apps[0].format == .frame)
        #expect(c.apps[0].gateway == nil)
        #expect(c.delivery.reconnectMaximumMilliseconds == 60000)
        #expect(c.httpListen == "127.0.0.1:9464")
        #expect(c.logFormat == "json")
    }

    @Test func defaultsFillWhatTheFileLeavesOut() throws {
        let c = try load("apps: [{bundle_id: a.b, certificate: c.pem, private_key: k.pem}]")
        #expect(c.kafka.groupID == "pushworker")
        #expect(c.delivery.acceptanceWindowMilliseconds == 1000)
        #expect(c.delivery.maxInFlight == 100_000)
        #expect(c.apps[0].connections == 2)
        #expect(c.spoolDirectory == "./spool")
    }

    @Test func everyKeyCanComeFromTheEnvironment() throws {
        let c = try load(specExample, [
            "PUSHWORKER_KAFKA_BROKERS": "k1:9092,k2:9092",
            "PUSHWORKER_KAFKA_INPUT_TOPICS": "a, b",
            "PUSHWORKER_KAFKA_PROPERTIES": #"{"security.protocol": "ssl"}"#,
            "PUSHWORKER_DELIVERY_RECONNECT_MAX_MS": "1000",
            "PUSHWORKER_LOG_LEVEL": "debug",
            "PUSHWORKER_APPS": #"[{"bundle_id": "x.y", "environment": "sandbox", "certificate": "c", "private_key": "k", "gateway": "127.0.0.1:2195"}]"#,
        ])
        #expect(c.kafka.brokers == "k1:9092,k2:9092")
        #expect(c.kafka.inputTopics == ["a", "b"])
        #expect(c.kafka.properties == ["security.protocol": "ssl"])
        #expect(c.delivery.reconnectMaximumMilliseconds == 1000)
        #expect(c.logLevel == "debug")
        #expect(c.apps.map(\.bundleID) == ["x.y"])
        #expect(c.apps[0].environment == .sandbox)
        #expect(c.apps[0].gateway == "127.0.0.1:2195")
    }

    /// Keys beyond SPEC section 7: the idle renewal and the cap on new connections per gateway.
    @Test func theConnectionKeysReachTheEngine() throws {
        let defaults = try load(specExample).deliveryConfiguration
        #expect(defaults.idleRenewal == .seconds(300))
        #expect(defaults.maxNewConnectionsPerMinute == 300)
        #expect(defaults.connectBurst == 20)
        #expect(defaults.maxReconnectsAfterRejectionPerMinute == 1_800)
        #expect(defaults.rejectionConnectBurst == 100)
        let c = try load(specExample.replacingOccurrences(
            of: "max_attempts: 5",
            with: "max_attempts: 5\n  idle_renew_s: 120\n  connect_cap: { per_minute: 60, burst: 5, after_rejection_per_minute: 600, after_rejection_burst: 9 }"))
        #expect(c.deliveryConfiguration.maxReconnectsAfterRejectionPerMinute == 600)
        #expect(c.deliveryConfiguration.rejectionConnectBurst == 9)
        #expect(problem(specExample, ["PUSHWORKER_DELIVERY_CONNECT_CAP_AFTER_REJECTION_BURST": "0"])?.key == "delivery.connect_cap.after_rejection_burst")
        #expect(c.deliveryConfiguration.idleRenewal == .seconds(120))
        #expect(c.deliveryConfiguration.maxNewConnectionsPerMinute == 60)
        #expect(c.deliveryConfiguration.connectBurst == 5)
        let e = try load(specExample, ["PUSHWORKER_DELIVERY_CONNECT_CAP_BURST": "7"])
        #expect(e.deliveryConfiguration.connectBurst == 7)
        #expect(problem(specExample, ["PUSHWORKER_DELIVERY_IDLE_RENEW_S": "0"])?.key == "delivery.idle_renew_s")
        #expect(problem(specExample, ["PUSHWORKER_DELIVERY_CONNECT_CAP_PER_MINUTE": "lots"])?.key == "delivery.connect_cap.per_minute")
        #expect(problem(specExample, ["PUSHWORKER_DELIVERY_CONNECT_CAP_BURTS": "1"])?.key == "PUSHWORKER_DELIVERY_CONNECT_CAP_BURTS")
    }

    /// The worker and a replay take their pipeline's settings from one place: every topic and the TTL reach it.
    @Test func theOutputTopicsAndTheTTLReachThePipeline() throws {
        let c = try load(specExample, [
            "PUSHWORKER_KAFKA_DELIVERY_ERROR_TOPIC": "errors-x", "PUSHWORKER_KAFKA_FEEDBACK_TOPIC": "feedback-x",
            "PUSHWORKER_KAFKA_DELIVERY_REPORT_TOPIC": "reports-x", "PUSHWORKER_DELIVERY_DEFAULT_TTL_S": "60",
            "PUSHWORKER_SUPPRESSION_TOPIC": "suppressed-x",
        ])
        let p = c.pipelineConfiguration(endpoints: c.endpoints)
        #expect(p.deliveryErrorTopic == "errors-x")
        #expect(p.feedbackTopic == "feedback-x")
        #expect(p.deliveryReportTopic == "reports-x")
        #expect(p.defaultTTLSeconds == 60)
        #expect(p.suppressionTopic == "suppressed-x")
        #expect(p.endpoints.map(\.app) == ["com.example.app"])
        let plain = try load(specExample).pipelineConfiguration(endpoints: [])
        #expect(plain.deliveryReportTopic == nil)
        #expect(plain.suppressionTopic == nil)
        #expect(plain.defaultTTLSeconds == 86400)
    }

    @Test func errorsNameTheKey() {
        #expect(problem(specExample + "\nextra: 1")?.key == "extra")
        // More apps than a held notification can name: refused before any entry is read.
        let tooMany = "[" + Array(repeating: "{}", count: WorkerConfiguration.maxApps + 1).joined(separator: ",") + "]"
        #expect(problem(specExample, ["PUSHWORKER_APPS": tooMany])?.key == "apps")
        #expect(problem(specExample.replacingOccurrences(of: "group_id: pushworker", with: "group_id: pushworker\n  groupid: x"))?.key == "kafka.groupid")
        #expect(problem(specExample.replacingOccurrences(of: "connections: 2", with: "connections: many"))?.key == "apps[0].connections")
        #expect(problem(specExample.replacingOccurrences(of: "protocol: frame", with: "protocol: http2"))?.key == "apps[0].protocol")
        #expect(problem(specExample.replacingOccurrences(of: "environment: production", with: "environment: staging"))?.key == "apps[0].environment")
        #expect(problem(specExample.replacingOccurrences(of: "certificate: certs/app.pem", with: ""))?.key == "apps[0].certificate")
        #expect(problem(specExample.replacingOccurrences(of: "listen: \"127.0.0.1:9464\"", with: "listen: nowhere"))?.key == "http.listen")
        #expect((try? load(specExample.replacingOccurrences(of: "listen: \"127.0.0.1:9464\"", with: "listen: \"127.0.0.1:0\"")))?.httpListen == "127.0.0.1:0")
        #expect(problem(specExample.replacingOccurrences(of: "gateway: null", with: "gateway: \"h:0\""))?.key == "apps[0].gateway")
        #expect(problem(specExample.replacingOccurrences(of: "max_ms: 60000", with: "max_ms: 100"))?.key == "delivery.reconnect.max_ms")
        #expect(problem(specExample, ["PUSHWORKER_KAFKA_BROKRES": "x"])?.key == "PUSHWORKER_KAFKA_BROKRES")
        #expect(problem(specExample, ["PUSHWORKER_DELIVERY_MAX_ATTEMPTS": "0"])?.key == "delivery.max_attempts")
        #expect(problem("kafka: [1]")?.key == "kafka")
        #expect(problem("kafka: {brokers: x}")?.key == "apps")
        #expect(problem("{")?.key == "(file)")
        let twice = "apps: [{bundle_id: a, certificate: c, private_key: k}, {bundle_id: a, certificate: c, private_key: k}]"
        #expect(problem(twice)?.key == "apps[1]")
    }

    /// App a in sandbox only, app b in both environments.
    static let threeEndpoints = """
        apps:
          - {bundle_id: a, environment: sandbox, certificate: c, private_key: k}
          - {bundle_id: b, environment: sandbox, certificate: c, private_key: k}
          - {bundle_id: b, environment: production, certificate: c, private_key: k}
        """

    @Test func environmentsAreChosenAsTheSpecSays() throws {
        let c = try load(Self.threeEndpoints)
        let directory = EndpointDirectory(c.endpoints)
        #expect(directory.index(app: "a", environment: nil) == 0)  // the only one
        #expect(directory.index(app: "b", environment: nil) == 2)  // production when configured
        #expect(directory.index(app: "b", environment: .sandbox) == 1)
        #expect(directory.index(app: "b", environment: .production) == 2)
        #expect(directory.index(app: "a", environment: .production) == nil)  // unknown_app
        #expect(directory.index(app: "c", environment: nil) == nil)
        #expect(c.endpoints.first { $0.app == "b" && $0.environment == .sandbox }?.gatewayHost == "gateway.sandbox.push.apple.com")
    }

    @Test func aKnownAppFindsTheEndpointItsNameFinds() throws {
        let c = try load(Self.threeEndpoints)
        // Known names in another order than the endpoints', one of them not configured.
        let known = KnownNames(["z", "b", "a"])
        let directory = EndpointDirectory(c.endpoints, knownApps: known)
        for (position, name) in known.all.enumerated() {
            for environment in [nil, APNsEnvironment.sandbox, .production] {
                #expect(
                    directory.index(knownApp: position, environment: environment)
                        == directory.index(app: name, environment: environment), "\(name) \(String(describing: environment))")
            }
        }
        #expect(directory.index(knownApp: 1, environment: .sandbox) == 1)
        #expect(directory.index(knownApp: 0, environment: nil) == nil)
    }
}

@Suite struct SuppressionConfigurationTests {
    static let app = "apps: [{bundle_id: a.b, certificate: c.pem, private_key: k.pem}]\n"

    @Test func suppressionIsOffUnlessItsTopicIsSet() throws {
        #expect(try load(Self.app).suppressionTopic == nil)
        #expect(try load(Self.app + "suppression: {topic: suppressed-tokens}").suppressionTopic == "suppressed-tokens")
        #expect(try load(Self.app, ["PUSHWORKER_SUPPRESSION_TOPIC": "from-env"]).suppressionTopic == "from-env")
    }

    @Test func aBadSuppressionSectionNamesItsKey() {
        #expect(problem(Self.app + "suppression: {topic: ''}")?.key == "suppression.topic")
        #expect(problem(Self.app + "suppression: {topic: t, compact: true}")?.key == "suppression.compact")
    }
}

@Suite struct IdleFetchPaceConfigurationTests {
    static let app = "apps: [{bundle_id: a.b, certificate: c.pem, private_key: k.pem}]\n"

    @Test func thePaceIsTenMillisecondsUnlessSet() throws {
        #expect(try load(Self.app).kafka.idleFetchPaceMilliseconds == 10)
        #expect(try load("kafka: {idle_fetch_pace_ms: 0}\n" + Self.app).kafka.idleFetchPaceMilliseconds == 0)
        #expect(try load(Self.app, ["PUSHWORKER_KAFKA_IDLE_FETCH_PACE_MS": "250"]).kafka.idleFetchPaceMilliseconds == 250)
    }

    @Test func aPaceOutOfRangeNamesItsKey() {
        #expect(problem("kafka: {idle_fetch_pace_ms: 1001}\n" + Self.app)?.key == "kafka.idle_fetch_pace_ms")
        #expect(problem("kafka: {idle_fetch_pace_ms: -1}\n" + Self.app)?.key == "kafka.idle_fetch_pace_ms")
        #expect(problem(Self.app, ["PUSHWORKER_KAFKA_IDLE_FETCH_PACE_MS": "soon"])?.key == "kafka.idle_fetch_pace_ms")
    }
}
