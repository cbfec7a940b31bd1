import PushCore
import PushGateway

// What a loaded configuration gives the engine and the pipeline.

extension WorkerConfiguration {
    /// The delivery endpoints of the configured apps, with Apple's hosts where the file names none.
    public var endpoints: [AppEndpoint] {
        apps.map { app in
            let gateway = app.gateway.map(Self.split) ?? AppEndpoint.defaultGateway(app.environment)
            let feedback = app.feedback.map(Self.split) ?? AppEndpoint.defaultFeedback(app.environment)
            var http2: HTTP2Endpoint?
            if app.transport == .http2 {
                let api = app.api.map(Self.split) ?? HTTP2Endpoint.defaultAPI(app.environment)
                let authentication: HTTP2Authentication = switch app.authentication {
                case .certificate: .certificate
                case .token: .token(teamID: app.teamID ?? "", keyID: app.keyID ?? "", signingKeyPath: app.signingKey ?? "")
                }
                http2 = HTTP2Endpoint(
                    host: api.0, port: api.1, authentication: authentication, topic: app.topic,
                    maxConcurrentStreams: app.maxConcurrentStreams)
            }
            return AppEndpoint(
                app: app.bundleID, environment: app.environment, gatewayHost: gateway.0, gatewayPort: gateway.1,
                feedbackHost: feedback.0, feedbackPort: feedback.1, connections: app.connections, format: app.format,
                certificatePath: app.certificate, privateKeyPath: app.privateKey, caPath: caFile, http2: http2)
        }
    }

    /// The engine's settings.
    public var deliveryConfiguration: DeliveryConfiguration {
        var d = DeliveryConfiguration()
        d.acceptanceWindow = .milliseconds(delivery.acceptanceWindowMilliseconds)
        d.maxInFlight = delivery.maxInFlight
        d.maxAttempts = delivery.maxAttempts
        d.reconnectInitial = .milliseconds(delivery.reconnectInitialMilliseconds)
        d.reconnectMaximum = .milliseconds(delivery.reconnectMaximumMilliseconds)
        d.reconnectResetAfter = .seconds(delivery.reconnectResetAfterSeconds)
        d.idleRenewal = .seconds(delivery.idleRenewSeconds)
        d.maxNewConnectionsPerMinute = delivery.connectCapPerMinute
        d.connectBurst = delivery.connectCapBurst
        d.maxReconnectsAfterRejectionPerMinute = delivery.reconnectAfterRejectionPerMinute
        d.rejectionConnectBurst = delivery.reconnectAfterRejectionBurst
        d.requestTimeout = .milliseconds(delivery.requestTimeoutMilliseconds)
        d.tokenRefreshSeconds = delivery.tokenRefreshSeconds
        return d
    }

    /// The pipeline's settings, with the given endpoints (their credentials loaded): the same for the worker and for
    /// a replay, so that both send their output events to the same topics.
    public func pipelineConfiguration(endpoints: [AppEndpoint]) -> PipelineConfiguration {
        var p = PipelineConfiguration(
            deliveryErrorTopic: kafka.deliveryErrorTopic, deliveryReportTopic: kafka.deliveryReportTopic, endpoints: endpoints)
        p.feedbackTopic = kafka.feedbackTopic
        p.defaultTTLSeconds = Int64(delivery.defaultTTLSeconds)
        p.suppressionTopic = suppressionTopic
        return p
    }

    static func split(_ hostPort: String) -> (String, Int) {
        let colon = hostPort.lastIndex(of: ":")!
        return (String(hostPort[..<colon]), Int(hostPort[hostPort.index(after: colon)...])!)
    }
}
