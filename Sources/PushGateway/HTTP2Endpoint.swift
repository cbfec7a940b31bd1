import PushCore

/// Where and how an app with `transport: http2` reaches the HTTP/2 provider API (SPEC section 9).
public struct HTTP2Endpoint: Sendable, Hashable {
    public var host: String
    public var port: Int
    public var authentication: HTTP2Authentication
    /// The `apns-topic` of mdm notifications (the app's bundle id serves every other push type).
    public var topic: String?
    /// Our cap on a connection's concurrent streams; the server's SETTINGS_MAX_CONCURRENT_STREAMS may lower it.
    public var maxConcurrentStreams: Int

    public init(host: String, port: Int, authentication: HTTP2Authentication, topic: String? = nil, maxConcurrentStreams: Int = 1000) {
        self.host = host
        self.port = port
        self.authentication = authentication
        self.topic = topic
        self.maxConcurrentStreams = maxConcurrentStreams
    }

    /// The requests' `:authority`: the host (an IPv6 literal in brackets), with the port unless it is 443.
    public var authority: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? name : "\(name):\(port)"
    }

    /// Apple's API host for an environment.
    public static func defaultAPI(_ environment: APNsEnvironment) -> (String, Int) {
        environment == .production ? ("api.push.apple.com", 443) : ("api.sandbox.push.apple.com", 443)
    }
}

/// How an HTTP/2 connection authenticates: the app's client certificate, or provider tokens signed with the team's
/// `.p8` key (the key file's path; the key itself is never kept in the configuration).
public enum HTTP2Authentication: Sendable, Hashable {
    case certificate
    case token(teamID: String, keyID: String, signingKeyPath: String)
}
