import NIOSSL
import PushCore

/// How the engine delivers (SPEC section 7, `delivery`), shared by every pool.
public struct DeliveryConfiguration: Sendable {
    /// A notification counts as accepted this long after it was written with no error response and no close.
    public var acceptanceWindow: Duration = .seconds(1)
    /// Notifications submitted and not yet settled, across all pools; `submit` waits while this many are held.
    public var maxInFlight = 100_000
    /// Transient failures (status 1, 255, a connection breaking) before `retries_exhausted`.
    public var maxAttempts = 5
    public var reconnectInitial: Duration = .milliseconds(500)
    public var reconnectMaximum: Duration = .seconds(60)
    public var reconnectResetAfter: Duration = .seconds(30)
    /// New connections per gateway per minute, on average; `connectBurst` may open at once.
    public var maxNewConnectionsPerMinute = 300
    public var connectBurst = 20
    /// Reconnects per gateway per minute after an error response about one notification's data (status 2 to 8),
    /// on average, `rejectionConnectBurst` at once: a cap of their own (``ConnectCap/afterRejection``).
    public var maxReconnectsAfterRejectionPerMinute = 1_800
    public var rejectionConnectBurst = 100
    /// What a gateway's connections may each hold unaccepted at first (``SendWindow``); nil means `maxInFlight`,
    /// no limit beyond the global one until a connection ends early. It halves after such a loss and grows again
    /// while the acceptance window confirms, up to `maxInFlight`.
    public var initialSendWindow: Int? = nil
    /// A connection that has sent nothing for this long is renewed before it is used again: firewalls drop idle
    /// TCP connections silently, and a write into one would count as accepted while going nowhere.
    public var idleRenewal: Duration = .seconds(300)
    public var connectTimeout: Duration = .seconds(10)
    /// HTTP/2: a request without a response this long is retried (counted).
    public var requestTimeout: Duration = .seconds(10)
    /// HTTP/2: how often a provider token is renewed.
    public var tokenRefreshSeconds = 2400
    /// Seed of the backoff jitter (tests fix it; by default it differs per process).
    public var jitterSeed = UInt64.random(in: 0...UInt64.max)

    public init() {}
}

/// One (app, environment): where its gateway and feedback service are and how to authenticate to them.
public struct AppEndpoint: Sendable, Hashable {
    public var app: String
    public var environment: APNsEnvironment
    public var gatewayHost: String
    public var gatewayPort: Int
    public var feedbackHost: String
    public var feedbackPort: Int
    public var connections: Int
    public var format: NotificationFormat
    /// The client certificate and its key; nil only for an HTTP/2 app with token authentication.
    public var certificatePath: String?
    public var privateKeyPath: String?
    /// The key's passphrase, when it is encrypted.
    public var privateKeyPassphrase: String?
    /// CA file to verify the gateway with; nil uses the system trust store.
    public var caPath: String?
    /// The HTTP/2 provider API's settings for an app with `transport: http2`; nil for the binary transport.
    public var http2: HTTP2Endpoint?

    public init(
        app: String, environment: APNsEnvironment, gatewayHost: String, gatewayPort: Int, feedbackHost: String,
        feedbackPort: Int, connections: Int, format: NotificationFormat, certificatePath: String?,
        privateKeyPath: String?, privateKeyPassphrase: String? = nil, caPath: String? = nil, http2: HTTP2Endpoint? = nil
    ) {
        self.app = app
        self.environment = environment
        self.gatewayHost = gatewayHost
        self.gatewayPort = gatewayPort
        self.feedbackHost = feedbackHost
        self.feedbackPort = feedbackPort
        self.connections = connections
        self.format = format
        self.certificatePath = certificatePath
        self.privateKeyPath = privateKeyPath
        self.privateKeyPassphrase = privateKeyPassphrase
        self.caPath = caPath
        self.http2 = http2
    }

    public var key: AppKey { AppKey(app: app, environment: environment) }

    /// Apple's hosts for an environment.
    public static func defaultGateway(_ environment: APNsEnvironment) -> (String, Int) {
        environment == .production ? ("gateway.push.apple.com", 2195) : ("gateway.sandbox.push.apple.com", 2195)
    }

    public static func defaultFeedback(_ environment: APNsEnvironment) -> (String, Int) {
        environment == .production ? ("feedback.push.apple.com", 2196) : ("feedback.sandbox.push.apple.com", 2196)
    }

    /// The client TLS context: the app's certificate and key (when it has them), the gateway verified against the
    /// CA or the system; ALPN `h2` for the HTTP/2 provider API.
    public func tlsContext() throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        if http2 != nil { tls.applicationProtocols = ["h2"] }
        tls.trustRoots = caPath.map { .file($0) } ?? .default
        tls.certificateVerification = .fullVerification
        guard let certificatePath, let privateKeyPath else { return try NIOSSLContext(configuration: tls) }
        tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) }
        if let passphrase = privateKeyPassphrase {
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: privateKeyPath, format: .pem) { setter in
                setter(Array(passphrase.utf8))
            })
        } else {
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: privateKeyPath, format: .pem))
        }
        return try NIOSSLContext(configuration: tls)
    }
}

/// Selects a pool: the app's bundle id and environment.
public struct AppKey: Hashable, Sendable, CustomStringConvertible {
    public var app: String
    public var environment: APNsEnvironment

    public init(app: String, environment: APNsEnvironment) {
        self.app = app
        self.environment = environment
    }

    public var description: String { "\(app)/\(environment.rawValue)" }
}
