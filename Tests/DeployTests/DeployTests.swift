import Foundation
import PushTestSupport
import Testing
import Yams

/// The deployment files under `deploy/` are checked statically (no container engine or cluster is needed): every
/// YAML and JSON file parses, the Kubernetes objects carry what operating the worker depends on, and the
/// configurations they ship pass `pushworker check-config` with test certificates in place of the real ones.
@Suite struct DeployTests {
    static let deploy = "\(TestPKI.root)/deploy"

    /// Every file under deploy/ with the given extensions.
    static func files(_ extensions: Set<String>) -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: deploy)
        var found: [String] = []
        while let path = enumerator?.nextObject() as? String {
            if extensions.contains((path as NSString).pathExtension) { found.append("\(deploy)/\(path)") }
        }
        return found.sorted()
    }

    static func text(_ path: String) throws -> String {
        try String(contentsOfFile: path, encoding: .utf8)
    }

    /// Every document of every YAML file under deploy/kubernetes, as dictionaries.
    static func kubernetesObjects() throws -> [[String: Any]] {
        try files(["yaml", "yml"]).filter { $0.contains("/kubernetes/") }.flatMap { path in
            try Yams.load_all(yaml: text(path)).compactMap { $0 as? [String: Any] }
        }
    }

    static func object(_ kind: String, in objects: [[String: Any]]) throws -> [String: Any] {
        let matching = objects.filter { $0["kind"] as? String == kind }
        #expect(matching.count == 1, "expected one \(kind), found \(matching.count)")
        return try #require(matching.first)
    }

    /// Runs `pushworker check-config` on a configuration text; returns its status and standard error.
    static func checkConfig(_ yaml: String) throws -> (status: Int32, output: String) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-check-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try yaml.write(toFile: "\(folder)/pushworker.yaml", atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltExecutable.path("pushworker"))
        process.arguments = ["check-config", "--config", "\(folder)/pushworker.yaml"]
        // The configurations name no passphrase files and no overrides; the test's own environment must not add any.
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PUSHWORKER_") }
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let output = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }

    @Test func everyYAMLAndJSONFileParses() throws {
        let yaml = Self.files(["yaml", "yml"])
        let json = Self.files(["json"])
        #expect(yaml.count >= 7)
        #expect(json.count >= 1)
        for path in yaml {
            let documents = try Yams.load_all(yaml: Self.text(path)).map { $0 }
            #expect(!documents.isEmpty, "\(path) holds no document")
        }
        for path in json {
            let data = try #require(FileManager.default.contents(atPath: path))
            #expect(throws: Never.self, "\(path)") { _ = try JSONSerialization.jsonObject(with: data) }
        }
    }

    @Test func kubernetesObjectsCarryWhatTheWorkerNeeds() throws {
        let objects = try Self.kubernetesObjects()
        let deployment = try Self.object("Deployment", in: objects)
        let configMap = try Self.object("ConfigMap", in: objects)
        let secret = try Self.object("Secret", in: objects)
        let budget = try Self.object("PodDisruptionBudget", in: objects)
        let scaled = try Self.object("ScaledObject", in: objects)

        let deploymentName = try #require(deployment[path: "metadata", "name"] as? String)
        let labels = try #require(deployment[path: "spec", "template", "metadata", "labels"] as? [String: Any])
        let pod = try #require(deployment[path: "spec", "template", "spec"] as? [String: Any])
        let container = try #require((pod["containers"] as? [[String: Any]])?.first)

        // Probes on the worker's endpoints, on the port the configuration listens on.
        #expect(container[path: "livenessProbe", "httpGet", "path"] as? String == "/healthz")
        #expect(container[path: "readinessProbe", "httpGet", "path"] as? String == "/readyz")
        let ports = try #require(container["ports"] as? [[String: Any]])
        let portName = container[path: "readinessProbe", "httpGet", "port"] as? String
        let probePort = try #require(ports.first { $0["name"] as? String == portName }?["containerPort"] as? Int)
        let config = try #require(configMap[path: "data", "pushworker.yaml"] as? String)
        let parsed = try #require(try Yams.load(yaml: config) as? [String: Any])
        let listen = try #require(parsed[path: "http", "listen"] as? String)
        #expect(listen.hasSuffix(":\(probePort)"))
        #expect(listen.hasPrefix("0.0.0.0:"), "probes come from outside the pod")

        // Resource requests.
        #expect(container[path: "resources", "requests", "cpu"] != nil)
        #expect(container[path: "resources", "requests", "memory"] != nil)

        // The grace period outlasts the shutdown deadline plus the 10 s the worker allows itself beyond it.
        let arguments = try #require(container["args"] as? [String])
        let deadlineIndex = try #require(arguments.firstIndex(of: "--shutdown-deadline"))
        let deadline = try #require(Int(arguments[deadlineIndex + 1]))
        let grace = try #require(pod["terminationGracePeriodSeconds"] as? Int)
        #expect(grace > deadline + 10)

        // The configuration file and the certificates are mounted where the arguments and the config look.
        let configIndex = try #require(arguments.firstIndex(of: "--config"))
        let mounts = try #require(container["volumeMounts"] as? [[String: Any]])
        let volumes = try #require(pod["volumes"] as? [[String: Any]])
        func volume(mountedAt path: String) -> [String: Any]? {
            guard let mount = mounts.first(where: { path.hasPrefix($0["mountPath"] as? String ?? "\u{0}") }) else { return nil }
            return volumes.first { $0["name"] as? String == mount["name"] as? String }
        }
        let configVolume = try #require(volume(mountedAt: arguments[configIndex + 1]))
        #expect(configVolume[path: "configMap", "name"] as? String == configMap[path: "metadata", "name"] as? String)
        let apps = try #require(parsed["apps"] as? [[String: Any]])
        let secretKeys = Set((secret["stringData"] as? [String: Any] ?? secret["data"] as? [String: Any] ?? [:]).keys)
        for app in apps {
            // Every credential file (certificate and key, or a token app's .p8 key) comes from the Secret.
            for key in app["auth"] as? String == "token" ? ["signing_key"] : ["certificate", "private_key"] {
                let file = try #require(app[key] as? String)
                let certVolume = try #require(volume(mountedAt: file), "\(file) is on no mounted volume")
                #expect(certVolume[path: "secret", "secretName"] as? String == secret[path: "metadata", "name"] as? String)
                #expect(secretKeys.contains((file as NSString).lastPathComponent), "the Secret holds no \(file)")
            }
        }
        // The spool is writable (the root file system is read-only).
        let spool = try #require(parsed[path: "feedback", "spool_dir"] as? String)
        #expect(volume(mountedAt: spool)?["emptyDir"] != nil || volume(mountedAt: spool)?["persistentVolumeClaim"] != nil)

        // The budget and the autoscaler select this Deployment.
        let budgetSelector = try #require(budget[path: "spec", "selector", "matchLabels"] as? [String: String])
        #expect(!budgetSelector.isEmpty)
        for (key, value) in budgetSelector { #expect(labels[key] as? String == value) }
        #expect(budget[path: "spec", "maxUnavailable"] != nil || budget[path: "spec", "minAvailable"] != nil)
        #expect(scaled[path: "spec", "scaleTargetRef", "name"] as? String == deploymentName)
        let minimum = try #require(scaled[path: "spec", "minReplicaCount"] as? Int)
        let maximum = try #require(scaled[path: "spec", "maxReplicaCount"] as? Int)
        #expect(1 <= minimum && minimum <= maximum)
        let trigger = try #require((scaled[path: "spec", "triggers"] as? [[String: Any]])?.first)
        #expect(trigger["type"] as? String == "kafka")
        #expect(trigger[path: "metadata", "consumerGroup"] as? String == parsed[path: "kafka", "group_id"] as? String)
        #expect(trigger[path: "metadata", "bootstrapServers"] as? String == parsed[path: "kafka", "brokers"] as? String)
        let topic = try #require(trigger[path: "metadata", "topic"] as? String)
        #expect((parsed[path: "kafka", "input_topics"] as? [String])?.contains(topic) == true)
        #expect(trigger[path: "metadata", "allowIdleConsumers"] as? String == "false", "no instance beyond the partition count")
    }

    @Test func configMapConfigurationPassesCheckConfig() throws {
        let configMap = try Self.object("ConfigMap", in: Self.kubernetesObjects())
        let config = try #require(configMap[path: "data", "pushworker.yaml"] as? String)
        // The Secret's files, mounted at /etc/pushworker/certs in the pod, are the test certificates here.
        let certificates = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-certs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: certificates, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: certificates) }
        for name in ["app.pem", "app-key.pem", "AuthKey_KEY1234567.p8"] {
            try FileManager.default.copyItem(atPath: TestPKI.path(name), toPath: "\(certificates)/\(name)")
        }
        #expect(config.contains("/etc/pushworker/certs/"))
        let local = config.replacingOccurrences(of: "/etc/pushworker/certs/", with: "\(certificates)/")
        let result = try Self.checkConfig(local)
        #expect(result.status == 0, "\(result.output)")

        // The Secret's placeholders are refused with the key named: the check can fail.
        let secret = try Self.object("Secret", in: Self.kubernetesObjects())
        for (name, value) in try #require(secret["stringData"] as? [String: String]) {
            try value.write(toFile: "\(certificates)/\(name)", atomically: true, encoding: .utf8)
        }
        let refused = try Self.checkConfig(local)
        #expect(refused.status == 2)
        #expect(refused.output.contains("apps[0].certificate"))
    }

    @Test func composeStackRunsKafkaInKRaftModeWithWorkerAndSimulator() throws {
        let compose = try #require(try Yams.load(yaml: Self.text("\(Self.deploy)/compose.yaml")) as? [String: Any])
        let services = try #require(compose["services"] as? [String: Any])
        let kafka = try #require(services["kafka"] as? [String: Any])
        #expect((kafka["image"] as? String)?.hasPrefix("apache/kafka:") == true)
        let roles = try #require(kafka[path: "environment", "KAFKA_PROCESS_ROLES"] as? String)
        #expect(roles.contains("controller") && roles.contains("broker"), "KRaft: the node is its own controller")
        let worker = try #require(services["worker"] as? [String: Any])
        let simulator = try #require(services["simulator"] as? [String: Any])
        #expect((simulator["entrypoint"] as? [String])?.last == "simulate")
        let grace = try #require((worker["stop_grace_period"] as? String).flatMap { Int($0.dropLast()) })
        #expect(grace > 25 + 10)

        // The worker's configuration names the simulator and topics the stack creates.
        let config = try Self.text("\(Self.deploy)/compose/pushworker.yaml")
        let parsed = try #require(try Yams.load(yaml: config) as? [String: Any])
        let topicsScript = try #require((services["topics"] as? [String: Any])?["command"] as? [String]).joined()
        let kafkaSection = try #require(parsed["kafka"] as? [String: Any])
        let topics = (kafkaSection["input_topics"] as? [String] ?? []) + ["delivery_error_topic", "feedback_topic"].compactMap { kafkaSection[$0] as? String }
        #expect(topics.count == 3)
        for topic in topics { #expect(topicsScript.contains("\(topic):"), "the stack does not create \(topic)") }
        // Token suppression: the topic the workers share is created, compacted.
        let suppression = try #require(parsed[path: "suppression", "topic"] as? String)
        #expect(topicsScript.contains("--topic \(suppression) ") && topicsScript.contains("cleanup.policy=compact"))
        let app = try #require((parsed["apps"] as? [[String: Any]])?.first)
        #expect((app["gateway"] as? String)?.hasPrefix("simulator:") == true)
        // The HTTP/2 app (the default transport) goes to the port the simulator serves the API on, with the key the
        // simulator verifies.
        let http2 = try #require((parsed["apps"] as? [[String: Any]])?.first { $0["api"] != nil })
        #expect(http2["transport"] == nil)
        let simulatorArguments = try #require(simulator["command"] as? [String])
        let apiPort = try #require(simulatorArguments.first { $0.hasPrefix("--api-port=") }?.split(separator: "=").last)
        #expect(http2["api"] as? String == "simulator:\(apiPort)")
        #expect(simulatorArguments.contains("--token-key=/pki/token-key.pub.pem"))

        // With the PKI scripts/gen-pki makes (the stack's `pki` service runs the same script), it passes the check.
        let local = config.replacingOccurrences(of: "/pki/", with: "\(TestPKI.directory)/")
        let result = try Self.checkConfig(local)
        #expect(result.status == 0, "\(result.output)")
    }

    @Test func imageIsMultiStageNonRootWithHealthcheck() throws {
        let dockerfile = try Self.text("\(Self.deploy)/Dockerfile")
        let stages = dockerfile.split(separator: "\n").filter { $0.hasPrefix("FROM ") }
        #expect(stages.count == 2)
        #expect(dockerfile.contains("ARG SWIFT_IMAGE=swift:"))
        #expect(dockerfile.contains("librdkafka1") && dockerfile.contains("ca-certificates"))
        let user = try #require(dockerfile.split(separator: "\n").last { $0.hasPrefix("USER ") })
        #expect(!user.contains("root") && !user.hasSuffix(" 0") && !user.contains(" 0:"))
        #expect(dockerfile.contains("HEALTHCHECK"))
        #expect(dockerfile.contains(#"ENTRYPOINT ["pushworker"]"#))
        #expect(dockerfile.contains(#"CMD ["run", "--config", "/etc/pushworker/pushworker.yaml""#))
        // Every file the image copies from the checkout exists.
        for line in dockerfile.split(separator: "\n") where line.hasPrefix("COPY ") && !line.contains("--from=") {
            let source = String(line.split(separator: " ")[1])
            #expect(FileManager.default.fileExists(atPath: "\(TestPKI.root)/\(source)"), "COPY \(source)")
        }
    }

    @Test func dashboardGraphsOnlyDocumentedMetrics() throws {
        let data = try #require(FileManager.default.contents(atPath: "\(Self.deploy)/grafana/pushworker-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(panels.count >= 6)
        let readme = try Self.text("\(TestPKI.root)/docs/monitoring.md")
        let metric = try Regex(#"pushworker_[a-z_]+"#)
        var graphed = Set<String>()
        for panel in panels {
            let targets = try #require(panel["targets"] as? [[String: Any]], "\(panel["title"] ?? "")")
            #expect(!targets.isEmpty)
            for target in targets {
                let expression = try #require(target["expr"] as? String)
                for match in expression.matches(of: metric) { graphed.insert(String(expression[match.range])) }
            }
        }
        #expect(graphed.count >= 9)
        for name in graphed {
            let documented = ["_bucket", "_count", "_sum"].reduce(name) { $0.hasSuffix($1) ? String($0.dropLast($1.count)) : $0 }
            let isDocumented = readme.contains("`\(documented)")
            #expect(isDocumented, "\(name) is not a metric docs/monitoring.md documents")
        }
    }
}

extension Dictionary where Key == String, Value == Any {
    /// The value at a path of keys through nested dictionaries.
    subscript(path keys: String...) -> Any? {
        var current: Any? = self
        for key in keys { current = (current as? [String: Any])?[key] }
        return current
    }
}
