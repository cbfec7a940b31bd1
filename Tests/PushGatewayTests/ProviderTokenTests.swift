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
