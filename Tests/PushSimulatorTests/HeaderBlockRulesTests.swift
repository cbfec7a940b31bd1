import NIOHPACK
import Testing
@testable import PushSimulator

struct HeaderBlockRulesTests {
    static let good: [(String, String)] = [
        (":method", "POST"), (":scheme", "https"), (":authority", "api.push.apple.com"),
        (":path", "/3/device/740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"),
        ("authorization", "bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IktFWTEyMzQ1NjcifQ.e30.sig"),
        ("apns-topic", "com.example.app"), ("apns-push-type", "alert"),
    ]

    @Test func aRequestAsTheWorkerSendsItIsWellFormed() {
        #expect(HeaderBlockRules.problem(inRequest: HPACKHeaders(Self.good)) == nil)
    }

    /// The blocks the simulator resets on the wire (`APISimulatorTests`), each found here.
    @Test func everyMalformedBlockOfTheWireTestHasAProblem() {
        for (name, block) in APISimulatorTests.malformedBlocks {
            #expect(HeaderBlockRules.problem(inRequest: HPACKHeaders(block)) != nil, "\(name)")
        }
    }

    @Test(arguments: [
        ([("Apns-Topic", "x")], HeaderBlockRules.Problem.invalidName),
        ([("apns topic", "x")], .invalidName),
        ([("", "x")], .invalidName),
        ([("apns-tópico", "x")], .invalidName),
        ([("connection", "close")], .connectionSpecific),
        ([("te", "gzip")], .connectionSpecific),
        ([("x", "a\u{0}")], .invalidValue),
        ([("x", "\r")], .invalidValue),
        ([(":path", "/again")], .pseudoHeaderAfterRegular),
    ])
    func aRegularFieldBreakingARuleIsNamed(extra: [(String, String)], problem: HeaderBlockRules.Problem) {
        #expect(HeaderBlockRules.problem(inRequest: HPACKHeaders(Self.good + extra)) == problem)
    }

    @Test func pseudoHeaderFieldsFollowSection8Point3() {
        func check(_ change: ([(String, String)]) -> [(String, String)]) -> HeaderBlockRules.Problem? {
            HeaderBlockRules.problem(inRequest: HPACKHeaders(change(Self.good)))
        }
        #expect(check { [(":status", "200")] + $0 } == .unexpectedPseudoHeader)
        #expect(check { [(":protocol", "websocket")] + $0 } == .unexpectedPseudoHeader)
        #expect(check { [(":Path", "/")] + $0 } == .invalidName)
        #expect(check { [(":", "/")] + $0 } == .invalidName)
        #expect(check { [(":scheme", "https")] + $0 } == .repeatedPseudoHeader)
        #expect(check { $0.filter { $0.0 != ":scheme" } } == .missingPseudoHeader)
        #expect(check { $0.filter { $0.0 != ":path" } } == .missingPseudoHeader)
        #expect(check { $0.filter { $0.0 != ":authority" } } == nil)
        #expect(check { $0.map { $0.0 == ":path" ? (":path", "") : $0 } } == .emptyPath)
        #expect(check { $0.map { $0.0 == ":path" ? (":path", "/a b") : $0 } } == .invalidValue)
        #expect(check { $0.map { $0.0 == ":authority" ? (":authority", "a\tb") : $0 } } == .invalidValue)
        // Bytes above 127 pass in a pseudo-header's value, as obs-text does in a regular one.
        #expect(check { $0.map { $0.0 == ":path" ? (":path", "/3/device/é") : $0 } } == nil)
        #expect(check { $0 + [("apns-collapse-id", "a b é")] } == nil)
        #expect(check { $0 + [("te", "trailers")] } == nil)
    }

    /// CONNECT (RFC 9113 section 8.5) has `:method` and `:authority` only; the API answers it 405.
    @Test func connectHasOnlyMethodAndAuthority() {
        let connect = HPACKHeaders([(":method", "CONNECT"), (":authority", "api.push.apple.com:443")])
        #expect(HeaderBlockRules.problem(inRequest: connect) == nil)
        var withPath = connect
        withPath.add(name: ":path", value: "/")
        #expect(HeaderBlockRules.problem(inRequest: withPath) == .unexpectedPseudoHeader)
        #expect(HeaderBlockRules.problem(inRequest: HPACKHeaders([(":method", "CONNECT")])) == .missingPseudoHeader)
    }

    @Test func trailersHaveNoPseudoHeaderAndTheFieldRules() {
        #expect(HeaderBlockRules.problem(inTrailers: HPACKHeaders([("x-trace", "1"), ("te", "gzip")])) == nil)
        #expect(HeaderBlockRules.problem(inTrailers: HPACKHeaders([(":path", "/")])) == .unexpectedPseudoHeader)
        #expect(HeaderBlockRules.problem(inTrailers: HPACKHeaders([(":Path", "/")])) == .invalidName)
        #expect(HeaderBlockRules.problem(inTrailers: HPACKHeaders([("upgrade", "h2c")])) == .connectionSpecific)
        #expect(HeaderBlockRules.problem(inTrailers: HPACKHeaders([("X-Trace", "1")])) == .invalidName)
        #expect(HeaderBlockRules.problem(inTrailers: HPACKHeaders([("x-trace", "1\n")])) == .invalidValue)
    }

    /// Every byte of a name, one at a time, against RFC 9110's tchar without uppercase letters.
    @Test func nameCharactersAreExactlyLowercaseTchar() {
        let tchar = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz".utf8)
        for byte in UInt8.min...UInt8.max {
            let valid = [byte].withUnsafeBufferPointer { HeaderBlockRules.isValidName($0, from: 0) }
            #expect(valid == tchar.contains(byte), "byte \(byte)")
        }
    }
}
