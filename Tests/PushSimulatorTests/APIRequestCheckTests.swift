import Crypto
import Testing
@testable import PushSimulator

struct APIRequestCheckTests {
    private func answer(path: String) -> APIAnswer {
        let check = APIRequestCheck(verifier: nil, invalidTokens: [], unregistered: [:])
        var history = APITokenHistory()
        let headers: [(name: String, value: String)] = [
            (":method", "POST"), (":scheme", "https"), (":path", path), ("apns-topic", "com.example.app"),
        ]
        return check.answer(
            headers: headers, body: Array(#"{"aps":{}}"#.utf8), authentication: .certificate(app: "com.example.app"),
            tokenHistory: &history, now: 1_700_000_000, newID: { "00000000-0000-4000-8000-000000000000" })
    }

    /// The path's token is hex digits only: the spaces and brackets producers may write in an event's token are not
    /// a path's.
    @Test func thePathsTokenIsStrictHex() {
        #expect(answer(path: "/3/device/00fF").accepted?.token == [0x00, 0xFF])
        #expect(answer(path: "/3/device/" + String(repeating: "ab", count: 100)).status == 200)
        for bad in ["0", "abc", "zz", "00 ff", "<00ff>", "00ff ", String(repeating: "ab", count: 101), "é0"] {
            #expect(answer(path: "/3/device/" + bad).reason == .badDeviceToken, "\(bad)")
        }
        #expect(answer(path: "/3/device/").reason == .missingDeviceToken)
        #expect(answer(path: "/3/devices/00ff").reason == .badPath)
        #expect(answer(path: "/3/device").reason == .badPath)
    }

    /// A new provider token within the renewal interval is refused for its rate before its signature is looked at:
    /// a client that changes tokens on every request costs a comparison each, not a signature check (and a token
    /// with a bad signature is answered TooManyProviderTokenUpdates, not InvalidProviderToken).
    @Test func theRenewalRateIsCheckedBeforeTheSignature() throws {
        let verifier = try ProviderTokenVerifier(teamID: "T", keyID: "K", pem: P256.Signing.PrivateKey().pemRepresentation)
        let check = APIRequestCheck(verifier: verifier, invalidTokens: [], unregistered: [:])
        var history = APITokenHistory(current: "a.verified.token", issuedAt: 1_700_000_000, since: 1_700_000_000)
        func answer(bearer: String, now: Int64) -> APIAnswer {
            let headers: [(name: String, value: String)] = [
                (":method", "POST"), (":scheme", "https"), (":path", "/3/device/00ff"), ("apns-topic", "com.example.app"),
                ("authorization", "bearer " + bearer),
            ]
            return check.answer(
                headers: headers, body: Array(#"{"aps":{}}"#.utf8), authentication: .token,
                tokenHistory: &history, now: now, newID: { "00000000-0000-4000-8000-000000000000" })
        }
        #expect(answer(bearer: "not.signed.atall", now: 1_700_000_010).reason == .tooManyProviderTokenUpdates)
        #expect(answer(bearer: "not.signed.atall", now: 1_700_000_000 + 20 * 60).reason == .invalidProviderToken)
        #expect(history.current == "a.verified.token")
    }
}
