import NIOHPACK
import PushCore
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
        #expect(HeaderBlockRules.problem(inRequest: HeaderList(Self.good)) == nil)
    }

    /// The blocks the simulator resets on the wire (`APISimulatorTests`), each found here.
    @Test func everyMalformedBlockOfTheWireTestHasAProblem() {
        for (name, block) in APISimulatorTests.malformedBlocks {
            #expect(HeaderBlockRules.problem(inRequest: HeaderList(block)) != nil, "\(name)")
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
        #expect(HeaderBlockRules.problem(inRequest: HeaderList(Self.good + extra)) == problem)
    }

    @Test func pseudoHeaderFieldsFollowSection8Point3() {
        func check(_ change: ([(String, String)]) -> [(String, String)]) -> HeaderBlockRules.Problem? {
            HeaderBlockRules.problem(inRequest: HeaderList(change(Self.good)))
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
        let connect = HeaderList([(":method", "CONNECT"), (":authority", "api.push.apple.com:443")])
        #expect(HeaderBlockRules.problem(inRequest: connect) == nil)
        var withPath = connect
        withPath.append(name: ":path", value: "/", indexing: .indexable)
        #expect(HeaderBlockRules.problem(inRequest: withPath) == .unexpectedPseudoHeader)
        #expect(HeaderBlockRules.problem(inRequest: HeaderList([(":method", "CONNECT")])) == .missingPseudoHeader)
    }

    @Test func trailersHaveNoPseudoHeaderAndTheFieldRules() {
        #expect(HeaderBlockRules.problem(inTrailers: HeaderList([("x-trace", "1"), ("te", "gzip")])) == nil)
        #expect(HeaderBlockRules.problem(inTrailers: HeaderList([(":path", "/")])) == .unexpectedPseudoHeader)
        #expect(HeaderBlockRules.problem(inTrailers: HeaderList([(":Path", "/")])) == .invalidName)
        #expect(HeaderBlockRules.problem(inTrailers: HeaderList([("upgrade", "h2c")])) == .connectionSpecific)
        #expect(HeaderBlockRules.problem(inTrailers: HeaderList([("X-Trace", "1")])) == .invalidName)
        #expect(HeaderBlockRules.problem(inTrailers: HeaderList([("x-trace", "1\n")])) == .invalidValue)
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

/// The rules again, written from RFC 9113's text in the plainest way (strings and sets, no bytes), to compare
/// with on random blocks.
private enum ReferenceRules {
    static let tchar = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz".unicodeScalars)
    static let connectionSpecific: Set<String> = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]

    static func isName(_ s: Substring) -> Bool { !s.isEmpty && s.unicodeScalars.allSatisfy { tchar.contains($0) } }

    static func wellFormed(_ fields: [(String, String)], trailers: Bool) -> Bool {
        var pseudo: [String] = []
        var sawRegular = false
        for (name, value) in fields {
            if name.hasPrefix(":") {
                if trailers || sawRegular || !isName(name.dropFirst()) { return false }
                guard [":method", ":scheme", ":path", ":authority"].contains(name), !pseudo.contains(name) else { return false }
                if value.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) { return false }
                if name == ":path" && value.isEmpty { return false }
                pseudo.append(name)
            } else {
                sawRegular = true
                if !isName(name[...]) || connectionSpecific.contains(name) { return false }
                if !trailers && name == "te" && value != "trailers" { return false }
                if value.utf8.contains(where: { [0, 10, 13].contains($0) }) { return false }
            }
        }
        if trailers { return true }
        let method = fields.first { $0.0 == ":method" }?.1
        if method == "CONNECT" { return Set(pseudo) == [":method", ":authority"] }
        return Set([":method", ":scheme", ":path"]).isSubset(of: Set(pseudo))
    }
}

extension HeaderBlockRulesTests {
    /// Random blocks from names and values near the rules' edges: both implementations agree on every one.
    @Test func agreesWithAPlainReadingOfTheRulesOnRandomBlocks() {
        let names = [":method", ":scheme", ":path", ":authority", ":status", ":protocol", ":Path", ":", "apns-topic",
                     "Apns-Topic", "te", "TE", "connection", "keep-alive", "upgrade", "upgradeX", "proxy-connection",
                     "transfer-encoding", "x y", "", "é", "a~b|c", "authorization"]
        let values = ["POST", "CONNECT", "https", "", "/3/device/ab", "/a b", "trailers", "gzip", "a\u{0}b", "a\rb",
                      "a\nb", "\t", "x\u{7F}", "é", "bearer x.y.z", "localhost:443"]
        var random = SplitMix64(seed: 20261126)
        var wellFormed = 0
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...7, using: &random)
            var fields: [(String, String)] = []
            // Mostly a valid start, so that the later fields decide.
            if Bool.random(using: &random) {
                fields = [(":method", "POST"), (":scheme", "https"), (":path", "/3/device/ab")]
            }
            for _ in 0..<count { fields.append((names.randomElement(using: &random)!, values.randomElement(using: &random)!)) }
            let block = HeaderList(fields)
            let ours = HeaderBlockRules.problem(inRequest: block) == nil
            #expect(ours == ReferenceRules.wellFormed(fields, trailers: false), "\(fields)")
            #expect((HeaderBlockRules.problem(inTrailers: block) == nil) == ReferenceRules.wellFormed(fields, trailers: true), "trailers \(fields)")
            if ours { wellFormed += 1 }
        }
        // Both outcomes were exercised.
        #expect(wellFormed > 500 && wellFormed < 19_500)
    }
}

