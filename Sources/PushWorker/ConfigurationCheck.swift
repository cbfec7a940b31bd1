import Foundation
import NIOSSL
import PushGateway

extension WorkerConfiguration {
    /// Loads a configuration file, with the process environment on top.
    public static func load(path: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigurationError) -> WorkerConfiguration {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(key: "--config", "cannot read \(path)")
        }
        return try WorkerConfiguration(yaml: String(decoding: data, as: UTF8.self), environment: environment)
    }

    /// The endpoints with each key's passphrase, from the environment or read from its file. Throws naming the key
    /// when a file is unreadable.
    public func endpointsWithSecrets() throws(ConfigurationError) -> [AppEndpoint] {
        var endpoints = self.endpoints
        for (index, app) in apps.enumerated() {
            if let passphrase = app.privateKeyPassphrase {
                endpoints[index].privateKeyPassphrase = passphrase.value
                continue
            }
            guard let file = app.privateKeyPassphraseFile else { continue }
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ConfigurationError(key: "apps[\(index)].private_key_passphrase_file", "cannot read \(file)")
            }
            var passphrase = String(decoding: data, as: UTF8.self)
            while passphrase.last == "\n" || passphrase.last == "\r" { passphrase.removeLast() }
            endpoints[index].privateKeyPassphrase = passphrase
        }
        return endpoints
    }

    /// Every app's endpoint with its credentials loaded as the worker will load them (certificate, key with its
    /// passphrase, the CA file), and its certificate chain. Throws naming the key of the first that does not load:
    /// `run` calls this before it touches Kafka.
    public func loadCredentials() throws(ConfigurationError) -> [(endpoint: AppEndpoint, certificates: [NIOSSLCertificate])] {
        let endpoints = try endpointsWithSecrets()
        if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw ConfigurationError(key: "tls.ca_file", "cannot read \(caFile)")
        }
        var loaded: [(endpoint: AppEndpoint, certificates: [NIOSSLCertificate])] = []
        for (index, endpoint) in endpoints.enumerated() {
            if case .token(let teamID, let keyID, let signingKeyPath) = endpoint.http2?.authentication {
                try Self.loadSigningKey(teamID: teamID, keyID: keyID, path: signingKeyPath, key: "apps[\(index)].signing_key")
                do {
                    _ = try endpoint.tlsContext()
                } catch {
                    throw ConfigurationError(key: "tls.ca_file", "cannot build the TLS context: \(error)")
                }
                loaded.append((endpoint, []))
                continue
            }
            guard let certificatePath = endpoint.certificatePath, let privateKeyPath = endpoint.privateKeyPath else {
                throw ConfigurationError(key: "apps[\(index)].certificate", "is required")
            }
            let certificates: [NIOSSLCertificate]
            do {
                certificates = try NIOSSLCertificate.fromPEMFile(certificatePath)
                guard !certificates.isEmpty else { throw ConfigurationError(key: "", "") }
            } catch {
                throw ConfigurationError(key: "apps[\(index)].certificate", "cannot load a PEM certificate from \(certificatePath)")
            }
            do {
                _ = try endpoint.tlsContext()
            } catch {
                let passphrase = apps[index].privateKeyPassphrase != nil || apps[index].privateKeyPassphraseFile != nil
                let hint = passphrase ? " (wrong passphrase?)" : " (an encrypted key needs a passphrase)"
                throw ConfigurationError(
                    key: "apps[\(index)].private_key",
                    "cannot load \(privateKeyPath) with the certificate: \(error)\(hint)")
            }
            loaded.append((endpoint, certificates))
        }
        return loaded
    }

    /// Loads a `.p8` signing key and signs a token with it, as the worker will. Throws naming `key`.
    @discardableResult
    static func loadSigningKey(teamID: String, keyID: String, path: String, key: String) throws(ConfigurationError) -> ProviderTokenKey {
        guard let data = FileManager.default.contents(atPath: path) else { throw ConfigurationError(key: key, "cannot read \(path)") }
        do {
            let signingKey = try ProviderTokenKey(teamID: teamID, keyID: keyID, pem: String(decoding: data, as: UTF8.self))
            _ = try signingKey.sign(issuedAt: 0)
            return signingKey
        } catch {
            throw ConfigurationError(key: key, "\(path) is not a PKCS #8 P-256 key (a .p8 file from Apple): \(error)")
        }
    }

    /// Loads every app's certificate and key (and the CA file) as the worker will, and describes what the worker
    /// would do. Throws naming the key of the first file that does not load.
    public func check() throws(ConfigurationError) -> String {
        let credentials = try loadCredentials()
        var lines: [String] = []
        lines.append("kafka: brokers \(kafka.brokers), group '\(kafka.groupID)', consuming \(kafka.inputTopics.joined(separator: ", "))")
        lines.append("  delivery errors → \(kafka.deliveryErrorTopic), feedback → \(kafka.feedbackTopic), delivery reports → \(kafka.deliveryReportTopic ?? "off")")
        let passthrough = kafka.properties.count + kafka.consumerProperties.count + kafka.producerProperties.count
        if passthrough > 0 {
            lines.append("  librdkafka properties passed through: \((kafka.properties.keys.sorted() + kafka.consumerProperties.keys.sorted() + kafka.producerProperties.keys.sorted()).joined(separator: ", "))")
        }
        lines.append("apps:")
        for (index, (endpoint, certificates)) in credentials.enumerated() {
            if let http2 = endpoint.http2 {
                lines.append("  \(endpoint.app) (\(endpoint.environment.rawValue)): http2 api \(http2.host):\(http2.port), \(endpoint.connections) connection\(endpoint.connections == 1 ? "" : "s"), at most \(http2.maxConcurrentStreams) streams each\(http2.topic.map { ", mdm topic \($0)" } ?? "")")
                if case .token(let teamID, let keyID, let path) = http2.authentication {
                    lines.append("    provider tokens: team \(teamID), key \(keyID), signed with \(path) (loaded), renewed every \(delivery.tokenRefreshSeconds) s; api verified with \(caFile ?? "the system trust store")")
                    continue
                }
            } else {
                lines.append("  \(endpoint.app) (\(endpoint.environment.rawValue)): gateway \(endpoint.gatewayHost):\(endpoint.gatewayPort), feedback \(endpoint.feedbackHost):\(endpoint.feedbackPort), \(endpoint.connections) connection\(endpoint.connections == 1 ? "" : "s"), \(endpoint.format.rawValue) format")
            }
            let subject = certificates[0].subjectName.map { "\($0.value)" }.joined(separator: ", ")
            let uid = certificates[0].subjectName.first { $0.type == .userId }?.value
            let expiry = CertificateExpiry(app: endpoint.key, notAfter: Int64(certificates[0].notValidAfter))
            let expires = Date(timeIntervalSince1970: TimeInterval(expiry.notAfter))
            var warning = ""
            if let uid, uid != endpoint.app { warning = " — WARNING: the certificate is for \(uid), not \(endpoint.app)" }
            if let notice = expiry.notice(now: Int64(Date().timeIntervalSince1970)) { warning += " — WARNING: \(notice.message)" }
            let source = apps[index].privateKeyPassphrase != nil
                ? "; key passphrase from \(ConfigReader.variable("apps[\(index)].private_key_passphrase"))"
                : apps[index].privateKeyPassphraseFile.map { "; key passphrase from \($0)" } ?? ""
            lines.append("    certificate: \(subject); valid until \(expires)\(warning); gateway verified with \(caFile ?? "the system trust store")\(source)")
        }
        let ceiling = Int(Double(delivery.maxInFlight) * 1000 / Double(delivery.acceptanceWindowMilliseconds))
        lines.append("delivery: acceptance window \(delivery.acceptanceWindowMilliseconds) ms, at most \(delivery.maxInFlight) held → at most \(ceiling) notifications/s per process")
        lines.append("  \(delivery.maxAttempts) attempts for transient failures; events without an expiration live \(delivery.defaultTTLSeconds) s; reconnect backoff \(delivery.reconnectInitialMilliseconds)…\(delivery.reconnectMaximumMilliseconds) ms, reset after \(delivery.reconnectResetAfterSeconds) s healthy")
        lines.append("  at most \(delivery.connectCapPerMinute) new connections a minute per gateway (\(delivery.connectCapBurst) at once); idle connections renewed after \(delivery.idleRenewSeconds) s")
        lines.append("  reconnects after a rejected notification (status 2 to 8): at most \(delivery.reconnectAfterRejectionPerMinute) a minute per gateway (\(delivery.reconnectAfterRejectionBurst) at once)")
        if apps.contains(where: { $0.transport == .http2 }) {
            lines.append("  http2: a request unanswered after \(delivery.requestTimeoutMilliseconds) ms is retried")
        }
        lines.append("feedback: every \(feedbackIntervalSeconds) s, spool \(spoolDirectory)")
        lines.append("suppression: \(suppressionTopic.map { "tokens reported gone are shared through \($0) (read whole at start, then followed)" } ?? "off")")
        lines.append("http: \(httpListen) (/metrics, /healthz, /readyz)")
        lines.append("log: \(logLevel), \(logFormat)")
        return lines.joined(separator: "\n")
    }
}
