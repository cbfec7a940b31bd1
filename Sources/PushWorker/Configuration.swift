import PushCore
import PushGateway
import PushKafka
import Yams

/// The worker's configuration (SPEC section 7): a YAML file, every key also settable from the environment
/// (`PUSHWORKER_` + the upper-cased path with `_`, e.g. `PUSHWORKER_KAFKA_BROKERS`). Lists come from the
/// environment comma-separated; maps and the `apps` list as JSON. Unknown keys, in the file or as `PUSHWORKER_*`
/// variables, are errors naming them.
public struct WorkerConfiguration: Sendable, Equatable {
    public struct Kafka: Sendable, Equatable {
        public var brokers = "127.0.0.1:9092"
        public var groupID = "pushworker"
        public var inputTopics = ["notifications"]
        public var deliveryErrorTopic = "notification-errors"
        public var feedbackTopic = "notification-feedback"
        public var deliveryReportTopic: String?
        public var properties: [String: String] = [:]
        public var consumerProperties: [String: String] = [:]
        public var producerProperties: [String: String] = [:]
        /// How long each empty fetch answer at once is held before librdkafka fetches again while the consumer is
        /// idle on a broker that answers empty fetches at once, in milliseconds (0: never; see ``KafkaConsumer``).
        public var idleFetchPaceMilliseconds = 10
    }

    /// How an app's notifications travel (SPEC section 9).
    public enum Transport: String, Sendable, Equatable {
        /// The binary provider protocol (SPEC sections 2 to 5).
        case binary
        /// The HTTP/2 provider API (SPEC section 9).
        case http2
    }

    /// How an HTTP/2 app authenticates.
    public enum Authentication: String, Sendable, Equatable {
        case certificate
        case token
    }

    public struct App: Sendable, Equatable {
        public var bundleID: String
        public var environment: APNsEnvironment
        public var transport: Transport = .http2
        /// `certificate` for the binary transport; either for HTTP/2.
        public var authentication: Authentication = .certificate
        /// The client certificate and its key (certificate authentication).
        public var certificate: String?
        public var privateKey: String?
        /// Token authentication: the team, the key's id and the `.p8` file's path.
        public var teamID: String?
        public var keyID: String?
        public var signingKey: String?
        /// HTTP/2: `host:port` of the provider API; nil means Apple's host for the environment.
        public var api: String?
        /// HTTP/2: the `apns-topic` of mdm notifications.
        public var topic: String?
        public var maxConcurrentStreams = 1000
        public var privateKeyPassphraseFile: String?
        /// The key's passphrase from the environment (`PUSHWORKER_APPS_<index>_PRIVATE_KEY_PASSPHRASE`; never from
        /// the file); it wins over `privateKeyPassphraseFile`.
        public var privateKeyPassphrase: Secret?
        /// `host:port`; nil means Apple's host for the environment.
        public var gateway: String?
        public var feedback: String?
        public var connections = 2
        public var format: NotificationFormat = .frame
    }

    public struct Delivery: Sendable, Equatable {
        public var acceptanceWindowMilliseconds = 1000
        public var maxInFlight = 100_000
        public var maxAttempts = 5
        public var defaultTTLSeconds = 86400
        public var reconnectInitialMilliseconds = 500
        public var reconnectMaximumMilliseconds = 60_000
        public var reconnectResetAfterSeconds = 30
        public var idleRenewSeconds = 300
        public var connectCapPerMinute = 300
        public var connectCapBurst = 20
        public var reconnectAfterRejectionPerMinute = 1_800
        public var reconnectAfterRejectionBurst = 100
        /// HTTP/2: a request without a response this long is retried (counted).
        public var requestTimeoutMilliseconds = 10_000
        /// HTTP/2: provider tokens are renewed this often (Apple refuses them after an hour, and renewals more often
        /// than every 20 minutes).
        public var tokenRefreshSeconds = 2400
    }

    public var kafka = Kafka()
    public var apps: [App] = []
    /// The most entries `apps` may list: each is a group of the in-flight ledger.
    public static let maxApps = HeldLedger<Never>.groupLimit
    public var caFile: String?
    public var delivery = Delivery()
    /// The compacted topic of suppressed tokens shared by every instance (SPEC section 10); nil: no suppression.
    public var suppressionTopic: String?
    public var feedbackIntervalSeconds = 86400
    public var spoolDirectory = "./spool"
    public var httpListen = "127.0.0.1:9464"
    public var logLevel = "info"
    public var logFormat = "json"

    /// Reads the YAML text, then the environment on top of it.
    public init(yaml: String, environment: [String: String]) throws(ConfigurationError) {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            throw ConfigurationError(key: "(file)", "not valid YAML: \(error)")
        }
        let reader = ConfigReader(environment: environment)
        let top = try reader.section(root, path: "")
        try self.init(reader: reader, top: top)
        try reader.rejectUnusedEnvironment()
    }

    private init(reader r: ConfigReader, top: ConfigSection) throws(ConfigurationError) {
        let k = try r.section(top.take("kafka"), path: "kafka")
        kafka.brokers = try r.string(k, "brokers") ?? kafka.brokers
        kafka.groupID = try r.string(k, "group_id") ?? kafka.groupID
        kafka.inputTopics = try r.stringList(k, "input_topics") ?? kafka.inputTopics
        guard !kafka.inputTopics.isEmpty else { throw ConfigurationError(key: "kafka.input_topics", "must name at least one topic") }
        kafka.deliveryErrorTopic = try r.string(k, "delivery_error_topic") ?? kafka.deliveryErrorTopic
        kafka.feedbackTopic = try r.string(k, "feedback_topic") ?? kafka.feedbackTopic
        kafka.deliveryReportTopic = try r.string(k, "delivery_report_topic")
        kafka.properties = try r.stringMap(k, "properties") ?? [:]
        kafka.consumerProperties = try r.stringMap(k, "consumer_properties") ?? [:]
        kafka.producerProperties = try r.stringMap(k, "producer_properties") ?? [:]
        kafka.idleFetchPaceMilliseconds = try r.int(k, "idle_fetch_pace_ms", in: 0...1_000) ?? kafka.idleFetchPaceMilliseconds
        try k.rejectUnknown()

        let appNodes = try r.list(top.take("apps"), path: "apps")
        guard appNodes.count <= Self.maxApps else {
            throw ConfigurationError(key: "apps", "lists \(appNodes.count) apps; at most \(Self.maxApps)")
        }
        for (index, node) in appNodes.enumerated() {
            let a = try r.section(node, path: "apps[\(index)]")
            func required(_ key: String) throws(ConfigurationError) -> String {
                guard let value = try r.string(a, key) else { throw ConfigurationError(key: "\(a.path).\(key)", "is required") }
                return value
            }
            var app = App(bundleID: try required("bundle_id"), environment: .production)
            app.environment = try r.choice(a, "environment", APNsEnvironment.init(rawValue:)) ?? .production
            // HTTP/2 unless the entry says otherwise (Apple turned the binary interface off in 2021): `transport`, or
            // a key only the binary interface has (an entry written for it before HTTP/2 was the default).
            let binaryKeys = ["gateway", "feedback", "protocol"]
            let namesBinaryKeys = binaryKeys.contains { a.has($0) || r.hasVariable("\(a.path).\($0)") }
            app.transport = try r.choice(a, "transport", Transport.init(rawValue:)) ?? (namesBinaryKeys ? .binary : .http2)
            app.connections = try r.int(a, "connections", in: 1...64) ?? app.connections
            /// Keys that belong to another transport or authentication are errors, not silently ignored.
            func refuse(_ keys: [String], _ reason: String) throws(ConfigurationError) {
                for key in keys where a.has(key) || r.hasVariable("\(a.path).\(key)") {
                    throw ConfigurationError(key: "\(a.path).\(key)", reason)
                }
            }
            switch app.transport {
            case .binary:
                try refuse(["auth", "team_id", "key_id", "signing_key", "api", "topic", "max_concurrent_streams"], "only for transport: http2")
                app.gateway = try r.hostPort(a, "gateway")
                app.feedback = try r.hostPort(a, "feedback")
                app.format = try r.choice(a, "protocol", NotificationFormat.init(rawValue:)) ?? .frame
            case .http2:
                try refuse(binaryKeys, "only for transport: binary (an http2 app names its host with api)")
                app.authentication = try r.choice(a, "auth", Authentication.init(rawValue:)) ?? .certificate
                app.api = try r.hostPort(a, "api")
                app.topic = try r.string(a, "topic")
                app.maxConcurrentStreams = try r.int(a, "max_concurrent_streams", in: 1...100_000) ?? app.maxConcurrentStreams
            }
            switch app.authentication {
            case .certificate:
                try refuse(["team_id", "key_id", "signing_key"], "only with auth: token")
                app.certificate = try required("certificate")
                app.privateKey = try required("private_key")
                app.privateKeyPassphraseFile = try r.string(a, "private_key_passphrase_file")
                if a.has("private_key_passphrase") {
                    throw ConfigurationError(
                        key: "apps[\(index)].private_key_passphrase",
                        "a passphrase is never read from the file: set \(ConfigReader.variable("apps[\(index)].private_key_passphrase")) or private_key_passphrase_file")
                }
                app.privateKeyPassphrase = r.secret("apps[\(index)].private_key_passphrase").map(Secret.init)
            case .token:
                try refuse(["certificate", "private_key", "private_key_passphrase", "private_key_passphrase_file"], "only with auth: certificate")
                func identifier(_ key: String) throws(ConfigurationError) -> String {
                    let value = try required(key)
                    guard value.utf8.count == 10, value.utf8.allSatisfy({ (48...57).contains($0) || (65...90).contains($0) }) else {
                        throw ConfigurationError(key: "\(a.path).\(key)", "must be Apple's 10-character identifier (digits and capital letters), not '\(value)'")
                    }
                    return value
                }
                app.teamID = try identifier("team_id")
                app.keyID = try identifier("key_id")
                app.signingKey = try required("signing_key")
            }
            try a.rejectUnknown()
            if apps.contains(where: { $0.bundleID == app.bundleID && $0.environment == app.environment }) {
                throw ConfigurationError(key: "apps[\(index)]", "\(app.bundleID) (\(app.environment.rawValue)) is configured twice")
            }
            apps.append(app)
        }
        guard !apps.isEmpty else { throw ConfigurationError(key: "apps", "must list at least one app") }

        let t = try r.section(top.take("tls"), path: "tls")
        caFile = try r.string(t, "ca_file")
        try t.rejectUnknown()

        let d = try r.section(top.take("delivery"), path: "delivery")
        delivery.acceptanceWindowMilliseconds = try r.int(d, "acceptance_window_ms", in: 1...600_000) ?? delivery.acceptanceWindowMilliseconds
        delivery.maxInFlight = try r.int(d, "max_in_flight", in: 1...100_000_000) ?? delivery.maxInFlight
        delivery.maxAttempts = try r.int(d, "max_attempts", in: 1...1000) ?? delivery.maxAttempts
        delivery.defaultTTLSeconds = try r.int(d, "default_ttl_s", in: 0...4_294_967_295) ?? delivery.defaultTTLSeconds
        let rc = try r.section(d.take("reconnect"), path: "delivery.reconnect")
        delivery.reconnectInitialMilliseconds = try r.int(rc, "initial_ms", in: 1...3_600_000) ?? delivery.reconnectInitialMilliseconds
        delivery.reconnectMaximumMilliseconds = try r.int(rc, "max_ms", in: 1...86_400_000) ?? delivery.reconnectMaximumMilliseconds
        delivery.reconnectResetAfterSeconds = try r.int(rc, "reset_after_s", in: 0...86_400) ?? delivery.reconnectResetAfterSeconds
        try rc.rejectUnknown()
        delivery.idleRenewSeconds = try r.int(d, "idle_renew_s", in: 1...86_400) ?? delivery.idleRenewSeconds
        delivery.requestTimeoutMilliseconds = try r.int(d, "request_timeout_ms", in: 100...600_000) ?? delivery.requestTimeoutMilliseconds
        // Apple answers 429 TooManyProviderTokenUpdates to renewals within 20 minutes and refuses tokens older
        // than an hour: a refresh outside those bounds could not work.
        delivery.tokenRefreshSeconds = try r.int(d, "token_refresh_s", in: 1200...3500) ?? delivery.tokenRefreshSeconds
        let cc = try r.section(d.take("connect_cap"), path: "delivery.connect_cap")
        delivery.connectCapPerMinute = try r.int(cc, "per_minute", in: 1...1_000_000) ?? delivery.connectCapPerMinute
        delivery.connectCapBurst = try r.int(cc, "burst", in: 1...100_000) ?? delivery.connectCapBurst
        delivery.reconnectAfterRejectionPerMinute =
            try r.int(cc, "after_rejection_per_minute", in: 1...1_000_000) ?? delivery.reconnectAfterRejectionPerMinute
        delivery.reconnectAfterRejectionBurst =
            try r.int(cc, "after_rejection_burst", in: 1...100_000) ?? delivery.reconnectAfterRejectionBurst
        try cc.rejectUnknown()
        try d.rejectUnknown()
        if delivery.reconnectMaximumMilliseconds < delivery.reconnectInitialMilliseconds {
            throw ConfigurationError(key: "delivery.reconnect.max_ms", "must not be below initial_ms")
        }

        let f = try r.section(top.take("feedback"), path: "feedback")
        feedbackIntervalSeconds = try r.int(f, "interval_s", in: 1...31_536_000) ?? feedbackIntervalSeconds
        spoolDirectory = try r.string(f, "spool_dir") ?? spoolDirectory
        try f.rejectUnknown()

        let sup = try r.section(top.take("suppression"), path: "suppression")
        suppressionTopic = try r.string(sup, "topic")
        if suppressionTopic?.isEmpty == true { throw ConfigurationError(key: "suppression.topic", "is empty (leave it out for no suppression)") }
        try sup.rejectUnknown()

        let h = try r.section(top.take("http"), path: "http")
        httpListen = try r.hostPort(h, "listen", allowPortZero: true) ?? httpListen
        try h.rejectUnknown()

        let l = try r.section(top.take("log"), path: "log")
        logLevel = try r.choice(l, "level") { ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains($0) ? $0 : nil } ?? logLevel
        logFormat = try r.choice(l, "format") { ["json", "text"].contains($0) ? $0 : nil } ?? logFormat
        try l.rejectUnknown()
        try top.rejectUnknown()
    }
}

/// A configuration problem, naming the key (a dotted path, or the environment variable).
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var key: String
    public var problem: String

    public init(key: String, _ problem: String) {
        self.key = key
        self.problem = problem
    }

    public var description: String { "\(key): \(problem)" }
}

/// A mapping of the file with its path, handing out keys and remembering which were taken.
final class ConfigSection {
    let path: String
    private var members: [(String, Node)]
    private var taken: Set<String> = []

    init(path: String, members: [(String, Node)]) {
        self.path = path
        self.members = members
    }

    func take(_ key: String) -> Node? {
        taken.insert(key)
        return members.last { $0.0 == key }?.1
    }

    func key(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// Whether the file has the key.
    func has(_ key: String) -> Bool { members.contains { $0.0 == key } }

    func rejectUnknown() throws(ConfigurationError) {
        if let unknown = members.first(where: { !taken.contains($0.0) }) {
            throw ConfigurationError(key: key(unknown.0), "unknown key")
        }
    }
}

/// A value never to be printed: its description hides it.
public struct Secret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    public let value: String
    public init(_ value: String) { self.value = value }
    public var description: String { "(secret)" }
    public var debugDescription: String { "(secret)" }
}

/// Reads values from the file, with the environment on top, and remembers which variables were used.
final class ConfigReader {
    private let environment: [String: String]
    private var used: Set<String> = []

    init(environment: [String: String]) {
        self.environment = environment.filter { $0.key.hasPrefix("PUSHWORKER_") }
    }

    static func variable(_ path: String) -> String {
        "PUSHWORKER_" + path.uppercased().replacingOccurrences(of: ".", with: "_").replacingOccurrences(of: "[", with: "_")
            .replacingOccurrences(of: "]", with: "")
    }

    /// Whether the environment sets a key (without taking it).
    func hasVariable(_ path: String) -> Bool { environment[Self.variable(path)] != nil }

    /// A secret only the environment may give (the file never holds one).
    func secret(_ path: String) -> String? { fromEnvironment(path) }

    /// The environment's value for a key, if it sets one.
    private func fromEnvironment(_ path: String) -> String? {
        let name = Self.variable(path)
        guard let value = environment[name] else { return nil }
        used.insert(name)
        return value
    }

    func rejectUnusedEnvironment() throws(ConfigurationError) {
        if let unknown = environment.keys.sorted().first(where: { !used.contains($0) }) {
            throw ConfigurationError(key: unknown, "unknown configuration variable")
        }
    }

    private static func isNull(_ node: Node?) -> Bool {
        guard let node else { return true }
        if case .scalar(let s) = node, s.style == .plain, ["", "~", "null", "Null", "NULL"].contains(s.string) { return true }
        return false
    }

    func section(_ node: Node?, path: String) throws(ConfigurationError) -> ConfigSection {
        if Self.isNull(node) { return ConfigSection(path: path, members: []) }
        guard case .mapping(let mapping)? = node else {
            throw ConfigurationError(key: path.isEmpty ? "(file)" : path, "must be a mapping")
        }
        var members: [(String, Node)] = []
        for (key, value) in mapping {
            guard case .scalar(let k) = key else { throw ConfigurationError(key: path, "keys must be strings") }
            members.append((k.string, value))
        }
        return ConfigSection(path: path, members: members)
    }

    func list(_ node: Node?, path: String) throws(ConfigurationError) -> [Node] {
        if let json = fromEnvironment(path) {
            do {
                guard let node = try Yams.compose(yaml: json), case .sequence(let s) = node else {
                    throw ConfigurationError(key: Self.variable(path), "must be a JSON array")
                }
                return Array(s)
            } catch let error as ConfigurationError {
                throw error
            } catch {
                throw ConfigurationError(key: Self.variable(path), "must be a JSON array")
            }
        }
        if Self.isNull(node) { return [] }
        guard case .sequence(let s)? = node else { throw ConfigurationError(key: path, "must be a list") }
        return Array(s)
    }

    func string(_ s: ConfigSection, _ key: String) throws(ConfigurationError) -> String? {
        let path = s.key(key)
        let node = s.take(key)
        if let value = fromEnvironment(path) { return value == "null" ? nil : value }
        if Self.isNull(node) { return nil }
        guard case .scalar(let scalar)? = node else { throw ConfigurationError(key: path, "must be a string") }
        return scalar.string
    }

    func int(_ s: ConfigSection, _ key: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int? {
        guard let text = try string(s, key) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError(key: s.key(key), "must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return value
    }

    func choice<T>(_ s: ConfigSection, _ key: String, _ make: (String) -> T?) throws(ConfigurationError) -> T? {
        guard let text = try string(s, key) else { return nil }
        guard let value = make(text) else { throw ConfigurationError(key: s.key(key), "'\(text)' is not one of the allowed values") }
        return value
    }

    /// `host:port`; port 0 (pick a free one) only where `allowPortZero`.
    func hostPort(_ s: ConfigSection, _ key: String, allowPortZero: Bool = false) throws(ConfigurationError) -> String? {
        guard let text = try string(s, key) else { return nil }
        guard let colon = text.lastIndex(of: ":"), !text[..<colon].isEmpty, let port = Int(text[text.index(after: colon)...]),
            ((allowPortZero ? 0 : 1)...65535).contains(port)
        else { throw ConfigurationError(key: s.key(key), "must be host:port, not '\(text)'") }
        return text
    }

    func stringList(_ s: ConfigSection, _ key: String) throws(ConfigurationError) -> [String]? {
        let path = s.key(key)
        let node = s.take(key)
        if let value = fromEnvironment(path) {
            return value.split(separator: ",").map { $0.trimming([" "]) }.filter { !$0.isEmpty }
        }
        if Self.isNull(node) { return nil }
        guard case .sequence(let seq)? = node else { throw ConfigurationError(key: path, "must be a list of strings") }
        var out: [String] = []
        for item in seq {
            guard case .scalar(let scalar) = item else { throw ConfigurationError(key: path, "must be a list of strings") }
            out.append(scalar.string)
        }
        return out
    }

    func stringMap(_ s: ConfigSection, _ key: String) throws(ConfigurationError) -> [String: String]? {
        let path = s.key(key)
        var node = s.take(key)
        if let json = fromEnvironment(path) {
            node = try? Yams.compose(yaml: json)
            guard case .mapping? = node else { throw ConfigurationError(key: Self.variable(path), "must be a JSON object") }
        }
        if Self.isNull(node) { return nil }
        guard case .mapping(let mapping)? = node else { throw ConfigurationError(key: path, "must be a mapping of strings") }
        var out: [String: String] = [:]
        for (k, v) in mapping {
            guard case .scalar(let ks) = k, case .scalar(let vs) = v else {
                throw ConfigurationError(key: path, "must be a mapping of strings")
            }
            out[ks.string] = vs.string
        }
        return out
    }
}
