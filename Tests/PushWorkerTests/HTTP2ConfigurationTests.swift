import PushCore
import PushGateway
import PushTestSupport
import Testing
@testable import PushWorker

/// SPEC section 9's configuration: an app entry chooses its transport, an http2 app its authentication; keys of
/// the other transport or authentication are errors naming them.
@Suite struct HTTP2ConfigurationTests {
    static let tokenApp = """
        apps:
          - bundle_id: com.example.app
            transport: http2
            auth: token
            team_id: TEAM123456
            key_id: KEY1234567
            signing_key: keys/AuthKey_KEY1234567.p8
        """

    @Test func aTokenAppLoadsWithAppleHostsAndDefaults() throws {
        let c = try load(Self.tokenApp)
        #expect(c.apps[0].transport == .http2)
        #expect(c.apps[0].authentication == .token)
        #expect(c.apps[0].certificate == nil)
        #expect(c.delivery.requestTimeoutMilliseconds == 10_000)
        #expect(c.delivery.tokenRefreshSeconds == 2400)
        let endpoint = try #require(c.endpoints.first?.http2)
        #expect(endpoint == HTTP2Endpoint(
            host: "api.push.apple.com", port: 443,
            authentication: .token(teamID: "TEAM123456", keyID: "KEY1234567", signingKeyPath: "keys/AuthKey_KEY1234567.p8"),
            maxConcurrentStreams: 1000))
        #expect(c.deliveryConfiguration.requestTimeout == .seconds(10))
    }

    @Test func aCertificateAppOnTheSandboxWithItsOwnHost() throws {
        let c = try load("""
            apps:
              - bundle_id: com.example.mdm
                environment: sandbox
                transport: http2
                certificate: app.pem
                private_key: app-key.pem
                api: "127.0.0.1:2197"
                topic: com.apple.mgmt.External.abc
                max_concurrent_streams: 100
            delivery: {request_timeout_ms: 2500, token_refresh_s: 3000}
            """)
        let endpoint = try #require(c.endpoints.first)
        #expect(endpoint.http2 == HTTP2Endpoint(
            host: "127.0.0.1", port: 2197, authentication: .certificate, topic: "com.apple.mgmt.External.abc", maxConcurrentStreams: 100))
        #expect(endpoint.certificatePath == "app.pem")
        #expect(c.delivery.requestTimeoutMilliseconds == 2500)
        #expect(c.delivery.tokenRefreshSeconds == 3000)
        #expect(try load(Self.tokenApp, ["PUSHWORKER_DELIVERY_TOKEN_REFRESH_S": "1800"]).delivery.tokenRefreshSeconds == 1800)
        #expect(try load(Self.tokenApp).apps[0].environment == .production)
        #expect(try load(Self.tokenApp).endpoints[0].http2?.host == "api.push.apple.com")
        let sandbox = try load(Self.tokenApp.replacingOccurrences(of: "transport: http2", with: "transport: http2\n    environment: sandbox"))
        #expect(sandbox.endpoints[0].http2?.host == "api.sandbox.push.apple.com")
    }

    @Test func theEnvironmentSetsTheHTTP2Keys() throws {
        let c = try load(Self.tokenApp, [
            "PUSHWORKER_APPS_0_KEY_ID": "ABCDEFGHIJ", "PUSHWORKER_APPS_0_API": "10.0.0.1:443",
            "PUSHWORKER_APPS_0_MAX_CONCURRENT_STREAMS": "50", "PUSHWORKER_DELIVERY_REQUEST_TIMEOUT_MS": "500",
        ])
        #expect(c.apps[0].keyID == "ABCDEFGHIJ")
        #expect(c.endpoints[0].http2?.host == "10.0.0.1")
        #expect(c.endpoints[0].http2?.maxConcurrentStreams == 50)
        #expect(c.delivery.requestTimeoutMilliseconds == 500)
    }

    @Test(arguments: [
        // A key of the other transport or authentication.
        ("apps: [{bundle_id: a, certificate: c, private_key: k, team_id: TEAM123456}]", "apps[0].team_id"),
        ("apps: [{bundle_id: a, transport: binary, certificate: c, private_key: k, max_concurrent_streams: 5}]", "apps[0].max_concurrent_streams"),
        ("apps: [{bundle_id: a, certificate: c, private_key: k, gateway: \"h:1\", api: \"h:1\"}]", "apps[0].api"),
        ("apps: [{bundle_id: a, transport: http2, certificate: c, private_key: k, gateway: \"h:1\"}]", "apps[0].gateway"),
        ("apps: [{bundle_id: a, transport: http2, certificate: c, private_key: k, protocol: frame}]", "apps[0].protocol"),
        ("apps: [{bundle_id: a, transport: http2, certificate: c, private_key: k, key_id: KEY1234567}]", "apps[0].key_id"),
        ("apps: [{bundle_id: a, transport: http2, auth: token, team_id: TEAM123456, key_id: KEY1234567, signing_key: s, certificate: c}]", "apps[0].certificate"),
        // Missing or malformed values.
        ("apps: [{bundle_id: a, transport: http2, auth: token, key_id: KEY1234567, signing_key: s}]", "apps[0].team_id"),
        ("apps: [{bundle_id: a, transport: http2, auth: token, team_id: TEAM123456, key_id: KEY1234567}]", "apps[0].signing_key"),
        ("apps: [{bundle_id: a, transport: http2, auth: token, team_id: team123456, key_id: KEY1234567, signing_key: s}]", "apps[0].team_id"),
        ("apps: [{bundle_id: a, transport: http2, auth: token, team_id: TEAM123456, key_id: KEY12345, signing_key: s}]", "apps[0].key_id"),
        ("apps: [{bundle_id: a, transport: http2}]", "apps[0].certificate"),
        ("apps: [{bundle_id: a, transport: http3, certificate: c, private_key: k}]", "apps[0].transport"),
        ("apps: [{bundle_id: a, transport: http2, auth: password, certificate: c, private_key: k}]", "apps[0].auth"),
        ("apps: [{bundle_id: a, transport: http2, certificate: c, private_key: k, max_concurrent_streams: 0}]", "apps[0].max_concurrent_streams"),
        ("apps: [{bundle_id: a, certificate: c, private_key: k}]\ndelivery: {token_refresh_s: 600}", "delivery.token_refresh_s"),
        ("apps: [{bundle_id: a, certificate: c, private_key: k}]\ndelivery: {token_refresh_s: 3600}", "delivery.token_refresh_s"),
        ("apps: [{bundle_id: a, certificate: c, private_key: k}]\ndelivery: {request_timeout_ms: 0}", "delivery.request_timeout_ms"),
    ])
    func aWrongKeyIsNamed(yaml: String, key: String) {
        #expect(problem(yaml)?.key == key)
    }

    @Test func aKeyOfTheOtherAuthenticationFromTheEnvironmentIsNamed() {
        let certificateApp = "apps: [{bundle_id: a, certificate: c, private_key: k}]"
        #expect(problem(certificateApp, ["PUSHWORKER_APPS_0_SIGNING_KEY": "s"])?.key == "apps[0].signing_key")
    }

    /// HTTP/2 unless the entry says `transport: binary` or names a key only the binary interface has (an entry
    /// written before HTTP/2 was the default, SPEC section 7's example among them).
    @Test func theTransportIsHTTP2UnlessTheEntryNamesTheBinaryInterface() throws {
        let plain = try load("apps: [{bundle_id: a, certificate: c, private_key: k}]")
        #expect(plain.apps[0].transport == .http2)
        #expect(plain.endpoints[0].http2?.host == "api.push.apple.com")
        for binary in ["transport: binary", "gateway: null", "feedback: \"h:1\"", "protocol: enhanced"] {
            let c = try load("apps: [{bundle_id: a, certificate: c, private_key: k, \(binary)}]")
            #expect(c.apps[0].transport == .binary, "\(binary)")
            #expect(c.endpoints[0].http2 == nil)
        }
        let fromEnvironment = try load(
            "apps: [{bundle_id: a, certificate: c, private_key: k}]", ["PUSHWORKER_APPS_0_GATEWAY": "h:1"])
        #expect(fromEnvironment.apps[0].transport == .binary)
    }

    func tokenConfiguration(signingKey: String, keyID: String = "KEY1234567") throws -> WorkerConfiguration {
        try load("""
            apps:
              - bundle_id: com.example.app
                transport: http2
                auth: token
                team_id: TEAM123456
                key_id: \(keyID)
                signing_key: \(TestPKI.path(signingKey))
                api: "127.0.0.1:2197"
            tls: {ca_file: \(TestPKI.path("ca.pem"))}
            """)
    }

    @Test func checkConfigLoadsTheSigningKeyAndNeverPrintsIt() throws {
        let plan = try tokenConfiguration(signingKey: "AuthKey_KEY1234567.p8").check()
        #expect(plan.contains("com.example.app (production): http2 api 127.0.0.1:2197, 2 connections, at most 1000 streams each"))
        #expect(plan.contains("provider tokens: team TEAM123456, key KEY1234567, signed with \(TestPKI.path("AuthKey_KEY1234567.p8")) (loaded), renewed every 2400 s"))
        #expect(plan.contains("a request unanswered after 10000 ms is retried"))
        #expect(!plan.contains("BEGIN"))
        #expect(!plan.contains("PRIVATE"))
    }

    @Test func anUnloadableSigningKeyIsNamed() throws {
        for file in ["missing.p8", "app.pem"] {
            let c = try tokenConfiguration(signingKey: file)
            do {
                _ = try c.check()
                Issue.record("\(file) was accepted as a signing key")
            } catch {
                #expect(error.key == "apps[0].signing_key")
            }
        }
    }
}
