import Foundation
import PushCore
import PushTestSupport
import Testing
@testable import PushGateway
@testable import PushSimulator

@Suite struct ProviderTokenTests {
    static func key() throws -> ProviderTokenKey {
        try ProviderTokenKey(
            teamID: "TEAM123456", keyID: "KEY1234567",
            pem: String(contentsOfFile: TestPKI.path("AuthKey_KEY1234567.p8"), encoding: .utf8))
    }

    static func verifier() throws -> ProviderTokenVerifier {
        try ProviderTokenVerifier(
            teamID: "TEAM123456", keyID: "KEY1234567",
            pem: String(contentsOfFile: TestPKI.path("token-key.pub.pem"), encoding: .utf8))
    }

    @Test func aSignedTokenVerifiesAndNamesItsIssuer() throws {
        let token = try Self.key().sign(issuedAt: 1_795_000_000)
        let parsed = try #require(ProviderTokenFormat.parse(token))
        #expect(parsed.teamID == "TEAM123456" && parsed.keyID == "KEY1234567" && parsed.issuedAt == 1_795_000_000)
        #expect(parsed.signature.count == 64)
        #expect(try Self.verifier().check(token, now: 1_795_000_100) == nil)
        #expect(try Self.verifier().check(token, now: 1_795_003_601) == .expiredProviderToken)
        // one changed byte of the claims breaks the signature
        var parts = token.split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(Array(#"{"iss":"TEAM123456","iat":1795000001}"#.utf8))
        #expect(try Self.verifier().check(parts.joined(separator: "."), now: 1_795_000_100) == .invalidProviderToken)
    }

    /// SPEC section 9: one token per (team, key) per process. Two apps signed by the same key share one cache (one
    /// renewal when it expires, one token Apple sees); an app with another key has its own.
    @Test func appsSignedByOneKeyShareOneToken() throws {
        func app(_ name: String, key: String) -> AppEndpoint {
            AppEndpoint(
                app: name, environment: .production, gatewayHost: "", gatewayPort: 0, feedbackHost: "", feedbackPort: 0,
                connections: 1, format: .frame, certificatePath: nil, privateKeyPath: nil, caPath: TestPKI.path("ca.pem"),
                http2: HTTP2Endpoint(host: "127.0.0.1", port: 1, authentication: .token(teamID: "TEAM123456", keyID: key, signingKeyPath: TestPKI.path("AuthKey_KEY1234567.p8"))))
        }
        let endpoints = [app("com.example.one", key: "KEY1234567"), app("com.example.two", key: "KEY1234567"), app("com.example.three", key: "OTHERKEY00")]
        let engine = try BoundedDeliveryEngine(endpoints: endpoints, configuration: DeliveryConfiguration()) { _ in }
        let caches = endpoints.map { engine.providerTokens(of: $0.key) }
        #expect(caches.allSatisfy { $0 != nil })
        #expect(caches[0] === caches[1])
        #expect(caches[0] !== caches[2])
    }

    @Test func aNonP256KeyIsRefused() {
        #expect(throws: (any Error).self) {
            try ProviderTokenKey(teamID: "T", keyID: "K", pem: String(contentsOfFile: TestPKI.path("app-key.pem"), encoding: .utf8))
        }
    }

    @Test func theCacheRenewsOnItsSchedule() throws {
        let cache = ProviderTokenCache(key: try Self.key(), refreshInterval: 2400)
        let first = try cache.token(now: 10_000)
        #expect(try cache.token(now: 12_399) == first)
        #expect(cache.age(now: 12_399) == 2399)
        let second = try cache.token(now: 12_400)
        #expect(second != first)
        #expect(ProviderTokenFormat.parse(second)?.issuedAt == 12_400)
        #expect(cache.renewalCount == 1)
        // a clock that went back does not keep a token from the future
        let third = try cache.token(now: 12_000)
        #expect(ProviderTokenFormat.parse(third)?.issuedAt == 12_000)
    }

    @Test func anExpiredTokenIsRenewedOnceWhateverHowManyReportIt() throws {
        let cache = ProviderTokenCache(key: try Self.key())
        let old = try cache.token(now: 20_000)
        let renewed = try cache.renew(rejected: old, now: 20_010)
        #expect(renewed != old)
        // a second connection reporting the same rejected token gets the renewed one, no new signature
        #expect(try cache.renew(rejected: old, now: 20_011) == renewed)
        #expect(cache.renewalCount == 1)
        #expect(try cache.token(now: 20_012) == renewed)
    }
}
