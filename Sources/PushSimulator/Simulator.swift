import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import PushCore
import ServiceLifecycle
import Synchronization

/// Where the simulator listens.
public struct SimulatorAddresses: Hashable, Sendable {
    public var gateway: SocketAddress
    public var feedback: SocketAddress
    /// The HTTP/2 provider API, when served.
    public var api: SocketAddress?

    /// The start-up line of `pushworker simulate`: `{"gateway": "127.0.0.1:A", "feedback": "127.0.0.1:B"}`, with
    /// `"api": "127.0.0.1:C"` when the API is served.
    public var json: String {
        let api = self.api.map { ", \"api\": \"\(Self.hostPort($0))\"" } ?? ""
        return "{\"gateway\": \"\(Self.hostPort(gateway))\", \"feedback\": \"\(Self.hostPort(feedback))\"\(api)}"
    }

    public var apiPort: Int? { api?.port }

    public var gatewayPort: Int { gateway.port! }
    public var feedbackPort: Int { feedback.port! }

    static func hostPort(_ address: SocketAddress) -> String {
        let host = address.ipAddress ?? "?"
        return address.protocol == .inet6 ? "[\(host)]:\(address.port!)" : "\(host):\(address.port!)"
    }
}

/// A faithful stand-in for Apple's binary gateway and feedback service (retired by Apple), for users' tests, the
/// demo and the worker's own tests.
///
/// Both services speak TLS only and require a client certificate that chains to the configured CA; the app is the
/// UID of the certificate's subject. The gateway parses commands 0, 1 and 2 strictly and answers violations as the
/// seeds describe (error response, close, discard the rest). See ``SimulatorConfiguration`` for the faults.
///
/// Run it as a ServiceLifecycle `Service` (``run()``), or call ``start()`` and ``stop()``.
public final class GatewaySimulator: Service, Sendable {
    public let configuration: SimulatorConfiguration
    private let tlsContext: NIOSSLContext
    /// The API's TLS: ALPN h2; a client certificate required, or optional with provider tokens.
    private let apiTLSContext: NIOSSLContext?
    private let apiCheck: APIRequestCheck?
    private let group: any EventLoopGroup
    private let logger: Logger
    private let state: SimulatorState
    private let recorder: Recorder
    private let channels = Mutex<[any Channel]>([])
    /// Open connections, closed by ``stop()``.
    private let connections = ConnectionRegistry()
    private let onListening: (@Sendable (SimulatorAddresses) -> Void)?

    /// Loads the certificates and opens the record file. Throws ``SimulatorInputError`` on unusable inputs.
    public init(
        configuration: SimulatorConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "pushworker.simulator"),
        onListening: (@Sendable (SimulatorAddresses) -> Void)? = nil
    ) throws {
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.onListening = onListening
        self.state = SimulatorState(configuration: configuration)
        self.recorder = try Recorder(
            path: configuration.recordPath, keepInMemory: configuration.recordInMemory, logger: logger)
        do {
            let chain = try NIOSSLCertificate.fromPEMFile(configuration.certificatePath)
            let key = try NIOSSLPrivateKey(file: configuration.privateKeyPath, format: .pem)
            var tls = TLSConfiguration.makeServerConfiguration(
                certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
            tls.trustRoots = .file(configuration.caPath)
            // The gateway authenticates providers by their certificate: one is required and must chain to the CA.
            tls.certificateVerification = .noHostnameVerification
            tls.minimumTLSVersion = .tlsv12
            tlsContext = try NIOSSLContext(configuration: tls)
            if configuration.apiPort != nil {
                var api = tls
                api.applicationProtocols = ["h2"]
                if configuration.tokenKeyPath != nil { api.certificateVerification = .optionalVerification }
                apiTLSContext = try NIOSSLContext(configuration: api)
            } else {
                apiTLSContext = nil
            }
        } catch {
            throw SimulatorInputError("cannot load the simulator's TLS files: \(error)")
        }
        if configuration.apiPort != nil {
            var verifier: ProviderTokenVerifier?
            if let path = configuration.tokenKeyPath {
                guard let team = configuration.teamID, let key = configuration.keyID else {
                    throw SimulatorInputError("--token-key needs --team-id and --key-id")
                }
                let pem: String
                do {
                    pem = try String(contentsOfFile: path, encoding: .utf8)
                } catch {
                    throw SimulatorInputError("cannot read --token-key \(path): \(error)")
                }
                verifier = try ProviderTokenVerifier(teamID: team, keyID: key, pem: pem)
                verifier?.maximumAge = configuration.tokenLifetimeSeconds
            }
            var check = APIRequestCheck(
                verifier: verifier, invalidTokens: configuration.invalidTokens, unregistered: configuration.unregistered)
            check.minimumRenewalInterval = configuration.tokenRenewalIntervalSeconds ?? configuration.tokenLifetimeSeconds / 3
            apiCheck = check
        } else {
            apiCheck = nil
        }
    }

    /// Binds the gateway and feedback ports.
    public func start() async throws -> SimulatorAddresses {
        let gateway = try await bind(port: configuration.gatewayPort) { [self] channel in
            try self.initializeGatewayChannel(channel)
        }
        let feedback: any Channel
        do {
            feedback = try await bind(port: configuration.feedbackPort) { [self] channel in
                try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tlsContext))
                try channel.pipeline.syncOperations.addHandler(FeedbackConnectionHandler(
                    state: state, stallAfter: configuration.feedbackStallAfter, logger: logger))
            }
        } catch {
            try? await gateway.close()
            throw error
        }
        var api: (any Channel)?
        if let port = configuration.apiPort {
            do {
                api = try await bind(port: port) { [self] channel in try self.initializeAPIChannel(channel) }
            } catch {
                try? await gateway.close()
                try? await feedback.close()
                throw error
            }
        }
        channels.withLock { $0 = [gateway, feedback] + (api.map { [$0] } ?? []) }
        let addresses = SimulatorAddresses(
            gateway: gateway.localAddress!, feedback: feedback.localAddress!, api: api?.localAddress)
        logger.info("simulator listening", metadata: [
            "gateway": "\(addresses.gateway)", "feedback": "\(addresses.feedback)",
            "api": "\(addresses.api.map { "\($0)" } ?? "off")",
        ])
        return addresses
    }

    /// Closes the listening sockets and the record file. Connections still open are closed as well.
    public func stop() async {
        let listening = channels.withLock { c in
            defer { c = [] }
            return c
        }
        for channel in listening { try? await channel.close() }
        for channel in connections.open { try? await channel.close() }
        await recorder.close()
    }

    /// Runs until graceful shutdown (SIGTERM/SIGINT through a `ServiceGroup`) or cancellation, flushing the record
    /// file now and then.
    public func run() async throws {
        let addresses = try await start()
        onListening?(addresses)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [recorder] in
                // Keeps the record file current for people watching it; the final flush happens in stop().
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(200))
                    await recorder.flush()
                }
            }
            try? await gracefulShutdown()
            group.cancelAll()
        }
        await stop()
    }

    /// What the simulator has done so far.
    public var summary: SimulatorSummary {
        var summary = state.summary
        summary.recordLinesLost = recorder.linesLost
        return summary
    }

    /// The accepted notifications, when ``SimulatorConfiguration/recordInMemory`` is set.
    public var recorded: [RecordedNotification] { recorder.records }

    /// The accepted API requests, when ``SimulatorConfiguration/recordInMemory`` is set.
    public var recordedRequests: [RecordedRequest] { recorder.requests }

    /// Writes out the record file's pending lines.
    public func flushRecord() async { await recorder.flush() }

    private func bind(
        port: Int, _ initialize: @escaping @Sendable (any Channel) throws -> Void
    ) async throws -> any Channel {
        let pacing = configuration.readDelayMilliseconds > 0
        var bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { [connections] channel in
                connections.track(channel)
                return channel.eventLoop.makeCompletedFuture { try initialize(channel) }
            }
        if pacing {
            bootstrap = bootstrap
                .childChannelOption(.autoRead, value: false)
                .childChannelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 4096))
        }
        return try await bootstrap.bind(host: configuration.host, port: port).get()
    }

    /// An API connection: TLS with ALPN h2; once negotiated, certificate or token authentication decides the
    /// initial stream limit, and an ``APIConnection`` speaks HTTP/2 and answers the streams.
    private func initializeAPIChannel(_ channel: any Channel) throws {
        guard let apiTLSContext, let apiCheck else { return }
        let context = APIServerContext(
            check: apiCheck, configuration: configuration, state: state, recorder: recorder, logger: logger)
        let pipeline = channel.pipeline.syncOperations
        // No reads while the client leaves the answers unread (APIConnection stops reading frames then, too).
        try pipeline.addHandler(BackPressureHandler())
        try pipeline.addHandler(NIOSSLServerHandler(context: apiTLSContext))
        try pipeline.addHandler(ApplicationProtocolNegotiationHandler { result, channel in
            guard case .negotiated("h2") = result else {
                context.logger.notice("api: client did not negotiate h2; closing")
                return channel.close()
            }
            let certificate = try? channel.pipeline.syncOperations.nioSSL_peerCertificate()
            let authentication: APIAuthentication
            if let app = certificate.flatMap(app(of:)) {
                authentication = .certificate(app: app)
            } else if certificate != nil || context.check.verifier == nil {
                context.logger.notice("api: client certificate names no app (no UID in its subject); closing")
                return channel.close()
            } else {
                authentication = .token
            }
            let connection = APIConnection(
                number: context.state.openAPIConnection(), authentication: authentication, context: context)
            return channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(connection)
            }
        })
    }

    private func initializeGatewayChannel(_ channel: any Channel) throws {
        guard let connection = state.openGatewayConnection() else {
            // Refused: reset at once (SO_LINGER 0 turns the close into a RST), before any TLS.
            if let socket = channel as? any SocketOptionProvider {
                socket.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in channel.close(promise: nil) }
            } else {
                channel.close(promise: nil)
            }
            return
        }
        let pipeline = channel.pipeline.syncOperations
        if configuration.readDelayMilliseconds > 0 {
            try pipeline.addHandler(ReadPacer(delay: .milliseconds(Int64(configuration.readDelayMilliseconds))))
        }
        try pipeline.addHandler(NIOSSLServerHandler(context: tlsContext))
        try pipeline.addHandler(ByteToMessageHandler(NotificationStreamDecoder()))
        try pipeline.addHandler(GatewayConnectionHandler(
            session: GatewaySession(configuration: configuration, connection: connection), connection: connection,
            state: state, recorder: recorder, logger: logger,
            errorResponseDelay: .milliseconds(Int64(configuration.errorResponseDelayMilliseconds))))
    }
}

/// The connections a simulator has open, so that stopping it closes them too.
final class ConnectionRegistry: Sendable {
    private let channels = Mutex<[ObjectIdentifier: any Channel]>([:])

    func track(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        channels.withLock { $0[id] = channel }
        channel.closeFuture.whenComplete { [self] _ in _ = channels.withLock { $0.removeValue(forKey: id) } }
    }

    var open: [any Channel] { channels.withLock { Array($0.values) } }
}
