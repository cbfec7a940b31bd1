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
}
