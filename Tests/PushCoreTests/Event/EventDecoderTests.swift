import Testing
@testable import PushCore

@Suite struct EventDecoderTests {
    let token = sampleTokenHex

    func event(_ fields: String, payload: String = #"{"aps":{"alert":"Hi"}}"#) -> String {
        #"{"id":"e1","app":"com.example.app","token":"\#(token)","payload":\#(payload)\#(fields.isEmpty ? "" : ",")\#(fields)}"#
    }

    @Test func aValidEventKeepsEverything() throws {
        let e = try decodeEvent(event(#""environment":"sandbox","expiration":1893456000,"priority":5"#)).get()
        #expect(e.id == "e1")
        #expect(e.app == "com.example.app")
        #expect(e.environment == .sandbox)
        #expect(e.token == sampleToken)
        #expect(e.payload == hiPayload)
        #expect(e.expiration == .at(1_893_456_000))
        #expect(e.priority == .conservePower)
        #expect(!e.alertTruncated)
    }

    @Test func payloadBytesAreTheProducersWithoutInsignificantWhitespace() throws {
        let payload = "{ \"aps\" :\t{ \"alert\" : \"a  b\\n\\u00e9 \\\" }\" ,\r\n \"badge\" : 1.0E0 } , \"n\" : [ 1 , -0.5e+3 , \"x y\" , { } , [ ] ] }"
        let e = try decodeEvent(event("", payload: payload)).get()
        let expected = "{\"aps\":{\"alert\":\"a  b\\n\\u00e9 \\\" }\",\"badge\":1.0E0},\"n\":[1,-0.5e+3,\"x y\",{},[]]}"
        #expect(String(decoding: e.payload, as: UTF8.self) == expected)
    }

    @Test func payloadWithoutWhitespaceIsCopiedAsIs() throws {
        let payload = #"{"aps":{"alert":"\u00e9\ud83d\ude00"},"z":{"k":null,"t":true,"f":false}}"#
        let e = try decodeEvent(event("", payload: payload)).get()
        #expect(e.payload == Array(payload.utf8))
    }

    @Test func tokenForms() throws {
        let spaced = "<740F4707 BEBCF74F 9B7C25D4 8E335894 5F6AA01D A5DDB387 462C7EAF 61BB78AD>"
        #expect(try DeviceToken(hex: spaced) == sampleToken)
        #expect(try DeviceToken(hex: "  ab cd  ").bytes == [0xAB, 0xCD])
        #expect(try DeviceToken(hex: String(repeating: "ff", count: 100)).bytes.count == 100)
        #expect(throws: DeviceTokenError.tooLong(bytes: 101)) { try DeviceToken(hex: String(repeating: "ff", count: 101)) }
        #expect(throws: DeviceTokenError.empty) { try DeviceToken(hex: "") }
        #expect(throws: DeviceTokenError.empty) { try DeviceToken(hex: "< >") }
        #expect(throws: DeviceTokenError.oddDigitCount) { try DeviceToken(hex: "abc") }
        #expect(throws: DeviceTokenError.notHex(position: 1)) { try DeviceToken(hex: "ag") }
        #expect(throws: DeviceTokenError.unbalancedBrackets) { try DeviceToken(hex: "<abcd") }
        #expect(throws: DeviceTokenError.unbalancedBrackets) { try DeviceToken(hex: "abcd>") }
        #expect(throws: DeviceTokenError.notHex(position: 0)) { try DeviceToken(hex: "\tab") }
        // Digits in pairs are read two at a time; anything else in an even count is read again the long way.
        #expect(try DeviceToken(hex: "ab cd ef").bytes == [0xAB, 0xCD, 0xEF])
        #expect(try DeviceToken(hex: "ABcd").bytes == [0xAB, 0xCD])
        #expect(throws: DeviceTokenError.notHex(position: 4)) { try DeviceToken(hex: "abcdzz") }
        #expect(throws: DeviceTokenError.notHex(position: 5)) { try DeviceToken(hex: "abcdez") }
        #expect(throws: DeviceTokenError.oddDigitCount) { try DeviceToken(hex: "abc de") }
        #expect(sampleToken.hex == sampleTokenHex)
        #expect(sampleToken.shortened == "740f…78ad")
    }

    /// Hex is written four bytes at a time, then one at a time: every length's digits are the ones a byte at a
    /// time gives, from contiguous bytes and from a collection that has no contiguous storage.
    @Test func hexEncodingAgreesWithOneByteAtATime() {
        let digits = Array("0123456789abcdef")
        for length in 0...13 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 73 &+ 0xA5) }
            let expected = String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] })
            #expect(Hex.encode(bytes) == expected)
            #expect(Hex.encode(bytes.lazy.map { $0 }) == expected)
            #expect(bytes.withUnsafeBytes { Hex.encode($0) } == expected)
        }
    }

    /// Tokens are read sixteen digits at a time (SSE2), then eight, then in pairs: on random text of hex digits and
    /// their neighbours (`/`, `:`, `@`, `G`, `` ` ``, `g`, bytes with the high bit set), each result is the one digit
    /// by digit gives.
    @Test func tokensReadEightDigitsAtATimeAgreeWithDigitByDigit() {
        let alphabet: [UInt8] = Array("0123456789abcdefABCDEF/:@G`g".utf8) + [0x80, 0xC3, 0xFF, 0x00]
        var random = SplitMix64(seed: 13)
        for _ in 0..<20_000 {
            let length = Int.random(in: 1...80, using: &random)
            // Mostly digits, so that long runs of valid words come up; now and then one neighbour.
            let text: [UInt8] = (0..<length).map { _ in
                Int.random(in: 0..<12, using: &random) == 0 ? alphabet.randomElement(using: &random)! : alphabet[Int.random(in: 0..<22, using: &random)]
            }
            let expected: Result<[UInt8], DeviceTokenError>
            if let bad = text.firstIndex(where: { DeviceToken.nibble($0) == nil }) {
                expected = .failure(.notHex(position: bad))
            } else if text.count % 2 == 1 {
                expected = .failure(.oddDigitCount)
            } else {
                expected = .success(stride(from: 0, to: text.count, by: 2).map { DeviceToken.nibble(text[$0])! << 4 | DeviceToken.nibble(text[$0 + 1])! })
            }
            let actual = text.withUnsafeBytes { raw in Result { () throws(DeviceTokenError) in try DeviceToken(hexUTF8: raw).bytes } }
            #expect(actual == expected, "\(text)")
            if actual != expected { return }
        }
    }

    /// Strings are scanned eight bytes at a time: the byte that ends the scan is found at every offset in a word.
    @Test func aStringEndsOrFailsAtTheExactByteWhereverItFallsInAWord() throws {
        for length in 0..<24 {
            let text = String(repeating: "x", count: length)
            #expect(try JSONValue(parsing: "[\"\(text)\",1]") == .array([.string(text), .number(1)]))
            #expect(try JSONValue(parsing: "[\"\(text)\\n\(text)\"]") == .array([.string(text + "\n" + text)]))
            #expect(try JSONValue(parsing: "[\"\(text)é\"]") == .array([.string(text + "é")]))
            #expect(throws: JSONSyntaxError(.controlCharacterInString, at: 2 + length)) {
                try JSONValue(parsing: "[\"\(text)\u{1}xxxxxxxxxx\"]")
            }
            #expect(throws: JSONSyntaxError(.controlCharacterInString, at: 3 + length)) {
                try JSONValue(parsing: "[\"\(text) \u{1F}xxxxxxxxxxxxxxxxxxxxx\"]")
            }
            // The bytes on either side of each class's edge: space and DEL are plain.
            let edges = text + " \u{7F}~!" + text
            #expect(try JSONValue(parsing: "[\"\(edges)\"]") == .array([.string(edges)]))
        }
    }

    @Test func eachRuleGetsItsReason() {
        let cases: [(String, DeliveryErrorReason)] = [
            ("", .malformedEvent),
            ("not json", .malformedEvent),
            ("{\"id\":\"x\"", .malformedEvent),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{}}} trailing"#, .malformedEvent),
            (#"{"id":"x","id":"y","app":"a","token":"ab","payload":{"aps":{}}}"#, .malformedEvent),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{}},"environment":null}"#, .malformedEvent),
            (#"{"id":"x","app":"","token":"ab","payload":{"aps":{}}}"#, .malformedEvent),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{}},"expiration":"2030-02-30T00:00:00Z"}"#, .malformedEvent),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{}},"expiration":"1969-12-31T23:59:59Z"}"#, .malformedEvent),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{}},"expiration":null}"#, .malformedEvent),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{"alert":"\ud800"}}}"#, .malformedEvent),
            ("{\"id\":\"x\",\"app\":\"a\",\"token\":\"ab\",\"payload\":{\"aps\":{\"alert\":\"\u{1}\"}}}", .malformedEvent),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{},"aps":{}}}"#, .invalidPayload),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{"badge":1,"badge":2}}}"#, .invalidPayload),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{"badge":1.5}}}"#, .invalidPayload),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{"alert":{"title-loc-args":"x"}}}}"#, .invalidPayload),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{}},"priority":null}"#, .invalidPriority),
            (#"{"id":"x","app":"a","token":"ab","payload":{"aps":{}},"priority":10.5}"#, .invalidPriority),
        ]
        for (json, reason) in cases {
            #expect(decodeEvent(json).failure?.reason == reason, "\(json)")
        }
    }

    @Test func invalidUTF8IsMalformed() {
        var bytes = Array(event("").utf8)
        let at = bytes.firstIndex(of: UInt8(ascii: "H"))!
        for bad: [UInt8] in [[0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82]] {
            var copy = bytes
            copy.replaceSubrange(at...at, with: bad)
            #expect(EventDecoder().decode(copy).failure?.reason == .malformedEvent)
        }
        bytes.replaceSubrange(at...at, with: [0xF0, 0x9F, 0x91, 0x8B])
        #expect(EventDecoder().decode(bytes).success != nil)
    }

    @Test func firstProblemInSpecOrderWins() {
        // token bad, payload bad, priority bad, app missing: the missing app (malformed) is reported.
        let json = #"{"priority":7,"payload":{},"token":"zz","id":"x"}"#
        let r = decodeEvent(json).failure!
        #expect(r.reason == .malformedEvent)
        #expect(r.detail == "field 'app' is missing")
        #expect(r.eventID == "x")
        // token bad and payload bad: token format first.
        #expect(decodeEvent(#"{"priority":7,"payload":{},"token":"zz","id":"x","app":"a"}"#).failure?.reason == .invalidTokenFormat)
        #expect(decodeEvent(#"{"priority":7,"payload":{},"token":"ab","id":"x","app":"a"}"#).failure?.reason == .invalidPayload)
    }

    @Test func rejectionsCarryWhatCouldBeRead() {
        let r = decodeEvent(#"{"id":"x","app":"a","environment":"staging","token":"<AB CD>","payload":{"aps":5}}"#).failure!
        #expect(r.reason == .malformedEvent)
        #expect(r.app == "a")
        #expect(r.environment == "staging")
        #expect(r.rawToken == "<AB CD>")
        let p = decodeEvent(#"{"id":"x","app":"a","token":"<AB CD>","payload":{"aps":5}}"#).failure!
        #expect(p.reason == .invalidPayload)
        #expect(p.token?.hex == "abcd")
        let broken = decodeEvent(#"{"id":"early","app":"a","token":"#).failure!
        #expect(broken.reason == .malformedEvent)
        #expect(broken.eventID == "early")
    }

    /// Each known key is found by its spelling alone: not by a prefix, an extension, a change of one byte or of
    /// case, and one spelled with escapes is the same key.
    @Test func knownKeysMatchTheirSpellingExactly() {
        func check<Key: KnownKey & Equatable>(_: Key.Type) {
            for key in Key.allCases {
                let spelling = Array(key.spelling.description.utf8)
                let found = spelling.withUnsafeBytes { Key.spelled(by: $0) }
                #expect(found == key, "\(key.spelling)")
                var variants = [Array(spelling.dropLast()), spelling + [UInt8(ascii: "s")], [UInt8(ascii: "x")] + spelling]
                for i in spelling.indices {
                    var changed = spelling
                    changed[i] ^= 0x20  // the other case of a letter ('-' and '_' become other bytes)
                    variants.append(changed)
                    changed[i] ^= 0x21
                    variants.append(changed)
                }
                for variant in variants {
                    let other = variant.withUnsafeBytes { Key.spelled(by: $0) }
                    #expect(other == nil || Array(other!.spelling.description.utf8) == variant, "\(key.spelling) as \(variant)")
                }
            }
        }
        check(EventField.self)
        check(ApsKey.self)
        check(AlertKey.self)
        #expect(APNsEnvironment.allCases.allSatisfy { e in Array(e.rawValue.utf8).withUnsafeBytes { APNsEnvironment(utf8: $0) } == e })
        #expect(Array("Production".utf8).withUnsafeBytes { APNsEnvironment(utf8: $0) } == nil)
        // Escaped spellings: a key and an environment written with \u escapes are still theirs.
        let escaped = decodeEvent(#"{"id":"x","app":"a","\u0065nvironment":"s\u0061ndbox","token":"ab","payload":{"aps":{"\u0062adge":1}}}"#)
        #expect((try? escaped.get())?.environment == .sandbox)
        #expect(decodeEvent(#"{"id":"x","app":"a","environment":"s\u0061ndb0x","token":"ab","payload":{"aps":{}}}"#).failure?.environment == "sandb0x")
    }

    /// A payload's own values and `aps`'s unknown ones that are strings or numbers are read in line, any other
    /// value by the general skip. Each value, valid or not, must get the verdict it gets inside an array (which
    /// always takes the general way), as a payload member and as an unknown member of `aps`.
    @Test func aPayloadValueReadInLineGetsTheGeneralVerdict() {
        let values = [
            "123456", "1795784033989", "0", "-1.5e3", "2E+2", #""a\nb""#, #""é""#, #""""#, "true", "null", "{}",
            "01", "-", "1.", "1e", "--1", "+1", ".5", #""\x""#, #""a"#, "0x1", "1 2",
        ]
        func verdict(_ payload: String) -> String {
            let event = #"{"id":"e1","app":"com.example.app","token":"\#(sampleTokenHex)","payload":\#(payload)}"#
            switch EventDecoder().decode(event) {
            case .success: return "valid"
            case .failure(let rejection): return "\(rejection.reason)"
            }
        }
        var invalid = 0
        for value in values {
            let asMember = verdict(#"{"aps":{"alert":"hi"},"n":\#(value)}"#)
            #expect(asMember == verdict(#"{"aps":{"alert":"hi"},"n":[\#(value)]}"#), "\(value)")
            let inAps = verdict(#"{"aps":{"alert":"hi","x":\#(value)}}"#)
            #expect(inAps == verdict(#"{"aps":{"alert":"hi","x":[\#(value)]}}"#), "\(value)")
            #expect(asMember == inAps, "\(value)")
            if asMember != "valid" { invalid += 1 }
        }
        #expect(invalid == 11)
    }

    @Test func idLengthCountsCharactersAndEscapedKeysCount() throws {
        let id128 = String(repeating: "😀", count: 128)
        #expect(try decodeEvent(#"{"id":"\#(id128)","app":"a","token":"ab","payload":{"aps":{}}}"#).get().id == id128)
        #expect(decodeEvent(#"{"id":"\#(id128)x","app":"a","token":"ab","payload":{"aps":{}}}"#).failure?.reason == .malformedEvent)
        let escaped = try decodeEvent(#"{"\u0069d":"a\"b","app":"a","token":"ab","payload":{"\u0061ps":{}}}"#).get()
        #expect(escaped.id == "a\"b")
    }

    @Test func priorityDefaultsAndContentAvailable() throws {
        #expect(try decodeEvent(event("")).get().priority == .immediate)
        let background = #"{"aps":{"content-available":1}}"#
        #expect(try decodeEvent(event("", payload: background)).get().priority == .conservePower)
        #expect(decodeEvent(event(#""priority":10"#, payload: background)).failure?.reason == .invalidPriority)
        #expect(try decodeEvent(event(#""priority":10.0"#, payload: #"{"aps":{"content-available":1,"badge":2}}"#)).get().priority == .immediate)
        #expect(try decodeEvent(event(#""priority":5"#, payload: background)).get().priority == .conservePower)
        #expect(decodeEvent(event("", payload: #"{"aps":{"content-available":true}}"#)).failure?.reason == .invalidPayload)
    }

    @Test(arguments: [NotificationFormat.enhanced, .simple])
    func legacyFormatsCarryNoPriorityAndTheGatewayTakesTen(format: NotificationFormat) throws {
        let background = #"{"aps":{"content-available":1}}"#
        for fields in ["", #""priority":5"#] {
            let rejection = decodeEvent(event(fields, payload: background), format: format).failure
            #expect(rejection?.reason == .invalidPriority)
            #expect(rejection?.detail.contains("legacy format carries no priority") == true)
        }
        #expect(decodeEvent(event("", payload: background), format: .frame).success != nil)
        // Anything else in 'aps' makes priority 10 fine.
        #expect(decodeEvent(event("", payload: #"{"aps":{"content-available":1,"badge":2}}"#), format: format).success != nil)
    }

    @Test func expirationForms() throws {
        func expiration(_ value: String) -> Expiration? { decodeEvent(event(#""expiration":\#(value)"#)).success?.expiration }
        #expect(expiration("0") == .at(0))
        #expect(expiration("4294967295") == .at(4_294_967_295))
        #expect(expiration("1e3") == .at(1000))
        #expect(expiration("4294967296") == nil)
        #expect(expiration(#""2026-11-21T10:15:30Z""#) == .at(1_795_256_130))
        #expect(expiration(#""2026-11-21t10:15:30.999z""#) == .at(1_795_256_130))
        #expect(expiration(#""2026-11-21T11:15:30+01:00""#) == .at(1_795_256_130))
        #expect(expiration(#""2026-11-21T09:45:30-00:30""#) == .at(1_795_256_130))
        #expect(expiration(#""2024-02-29T00:00:00Z""#) == .at(1_709_164_800))
        #expect(expiration(#""2023-02-29T00:00:00Z""#) == nil)
        #expect(expiration(#""2026-11-21 10:15:30Z""#) == nil)
        #expect(expiration(#""2026-11-21T10:15:30""#) == nil)
        #expect(try decodeEvent(event("")).get().expiration == .unspecified)
        #expect(Expiration.unspecified.resolved(recordTimestamp: 1000, defaultTTL: 86400) == 87400)
        #expect(Expiration.at(0).resolved(recordTimestamp: 1000, defaultTTL: 86400) == 0)
        #expect(!Expiration.hasPassed(0, now: 5_000_000_000))
        #expect(Expiration.hasPassed(999, now: 1000))
        #expect(!Expiration.hasPassed(1000, now: 1000))
    }

    @Test func sizeLimitsPerFormat() {
        let alert = String(repeating: "a", count: 2048 - 20)
        let exact = event("", payload: #"{"aps":{"alert":"\#(alert)"}}"#)
        #expect(decodeEvent(exact).success?.payload.count == 2048)
        let over = event("", payload: #"{"aps":{"alert":"\#(alert)a"}}"#)
        #expect(decodeEvent(over).failure?.reason == .payloadTooLarge)
        let legacy = event("", payload: #"{"aps":{"alert":"\#(String(repeating: "a", count: 237))"}}"#)
        #expect(decodeEvent(legacy, format: .enhanced).failure?.reason == .payloadTooLarge)
        #expect(decodeEvent(legacy, format: .frame).success != nil)
    }
}

@Suite struct TruncationTests {
    func truncated(_ alertJSON: String, limit: Int, bodyKey: Bool = false, extra: String = "") -> String? {
        let aps = bodyKey ? #"{"alert":{"title":"T","body":\#(alertJSON)}}"# : #"{"alert":\#(alertJSON)}"#
        let json = #"{"id":"t","app":"a","token":"ab","truncate_alert":true,"payload":{"aps":\#(aps)\#(extra)}}"#
        guard let event = EventDecoder(payloadLimit: limit).decode(json).success else { return nil }
        #expect(event.payload.count <= limit)
        return String(decoding: event.payload, as: UTF8.self)
    }

    @Test func keepsTheLongestPrefixThatFitsAndAddsAnEllipsis() {
        // {"aps":{"alert":"…"}} is 23 bytes; each ASCII character kept costs one more.
        #expect(truncated(#""Hello, world""#, limit: 28) == #"{"aps":{"alert":"Hello…"}}"#)
        #expect(truncated(#""Hello, world""#, limit: 23) == #"{"aps":{"alert":"…"}}"#)
        #expect(truncated(#""Hello, world""#, limit: 22) == nil)
        #expect(truncated(#""Hello""#, limit: 100) == #"{"aps":{"alert":"Hello"}}"#)
    }

    @Test func cutsOnGraphemeBoundaries() {
        // 👍🏽 is 8 bytes (two scalars); é written as e + U+0301 is 3 bytes (two scalars).
        #expect(truncated(#""ab👍🏽cdef""#, limit: 23 + 2 + 7) == #"{"aps":{"alert":"ab…"}}"#)
        #expect(truncated(#""ab👍🏽cdef""#, limit: 23 + 2 + 8) == #"{"aps":{"alert":"ab👍🏽…"}}"#)
        #expect(truncated("\"xe\u{301}yzwv\"", limit: 23 + 1 + 2) == #"{"aps":{"alert":"x…"}}"#)
        #expect(truncated("\"xe\u{301}yzwv\"", limit: 23 + 1 + 3) == "{\"aps\":{\"alert\":\"xe\u{301}…\"}}")
    }

    @Test func keepsEscapesAsWritten() {
        // \u00e9 takes 6 bytes in the payload; it is kept whole or dropped whole.
        #expect(truncated(#""\u00e9\u00e9\u00e9""#, limit: 23 + 6 + 5) == #"{"aps":{"alert":"\u00e9…"}}"#)
        #expect(truncated(#""a\"b\"c""#, limit: 23 + 2) == #"{"aps":{"alert":"a…"}}"#)
        #expect(truncated(#""a\"b\"c""#, limit: 23 + 3) == #"{"aps":{"alert":"a\"…"}}"#)
        // a surrogate pair escape is one character
        #expect(truncated(#""\ud83d\ude00\ud83d\ude00x""#, limit: 23 + 12) == #"{"aps":{"alert":"\ud83d\ude00…"}}"#)
    }

    @Test func shortensTheBodyOfAnAlertDictionaryAndKeepsTheRest() {
        let out = truncated(#""A long body text""#, limit: 60, bodyKey: true, extra: #", "x" : [1, 2]"#)
        #expect(out == #"{"aps":{"alert":{"title":"T","body":"A long…"}},"x":[1,2]}"#)
    }

    @Test func withoutAnAlertTextNothingCanBeShortened() {
        let json = #"{"id":"t","app":"a","token":"ab","truncate_alert":true,"payload":{"aps":{"badge":1},"x":"\#(String(repeating: "y", count: 300))"}}"#
        let r = EventDecoder(payloadLimit: 256).decode(json).failure
        #expect(r?.reason == .payloadTooLarge)
        let noFlag = #"{"id":"t","app":"a","token":"ab","payload":{"aps":{"alert":"\#(String(repeating: "y", count: 300))"}}}"#
        #expect(EventDecoder(payloadLimit: 256).decode(noFlag).failure?.reason == .payloadTooLarge)
    }

    @Test func truncationFlagIsReported() throws {
        let json = #"{"id":"t","app":"a","token":"ab","truncate_alert":true,"payload":{"aps":{"alert":"\#(String(repeating: "é", count: 200))"}}}"#
        let e = try EventDecoder(payloadLimit: 256).decode(json).get()
        #expect(e.alertTruncated)
        #expect(e.payload.count <= 256)
        #expect(e.payload.count >= 255)
        #expect(try JSONValue(parsing: e.payload)["aps"]?["alert"]?.stringValue?.hasSuffix("é…") == true)
    }
}

@Suite struct RFC3339Tests {
    @Test func formatsAndParsesRoundTrip() {
        for t: Int64 in [0, 1, 86399, 951_782_400, 1_709_164_800, 1_795_256_130, 4_294_967_295] {
            #expect(RFC3339.parse(RFC3339.format(unixSeconds: t)) == t)
        }
        #expect(RFC3339.format(unixSeconds: 1_795_256_130) == "2026-11-21T10:15:30Z")
        #expect(RFC3339.format(unixMilliseconds: 1_795_256_130_007) == "2026-11-21T10:15:30.007Z")
        #expect(RFC3339.parse("2016-12-31T23:59:60Z") == RFC3339.parse("2017-01-01T00:00:00Z"))
        #expect(RFC3339.parse("2026-13-01T00:00:00Z") == nil)
        #expect(RFC3339.parse("2026-11-21T24:00:00Z") == nil)
        #expect(RFC3339.parse("2026-11-21T10:15:30.Z") == nil)
        #expect(RFC3339.parse("2026-11-21T10:15:30+0100") == nil)
    }

    /// An offset may not carry a time outside the years the form writes: what is read can be written back.
    @Test func anOffsetCannotMoveATimeOutsideTheFourDigitYears() {
        #expect(RFC3339.parse("0000-01-01T00:00:00Z") == -62_167_219_200)
        #expect(RFC3339.parse("0000-01-01T01:00:00+01:00") == -62_167_219_200)
        #expect(RFC3339.parse("0000-01-01T00:30:00+01:00") == nil)
        #expect(RFC3339.parse("9999-12-31T23:59:59Z") == 253_402_300_799)
        #expect(RFC3339.parse("9999-12-31T22:59:59-01:00") == 253_402_300_799)
        #expect(RFC3339.parse("9999-12-31T23:30:00-01:00") == nil)
        #expect(RFC3339.parse("9999-12-31T23:59:60Z") == nil)
        for text in ["0000-01-01T00:00:00Z", "0000-01-01T05:00:00+04:59", "9999-12-31T23:59:59Z", "9999-12-31T20:00:00-03:59"] {
            let seconds = RFC3339.parse(text)
            #expect(seconds.map { RFC3339.parse(RFC3339.format(unixSeconds: $0)) } == seconds, "\(text)")
        }
    }

    /// The byte writer the simulator's record file uses says exactly what `format` says, across the years it writes
    /// with four digits and outside them.
    @Test func appendedBytesAreTheFormattedText() {
        var times: [Int64] = [0, 1, 999, 1000, -1, -999, -1000, -1001, 86_399_999, 86_400_000, 951_782_400_000,
                              951_868_799_999, 1_795_256_130_007, 253_402_300_799_999, 253_402_300_800_000,
                              -62_167_219_200_000, -62_167_219_200_001]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 { times.append(Int64.random(in: -62_167_219_200_000...253_402_300_799_999, using: &generator)) }
        for t in times {
            var out: [UInt8] = [UInt8(ascii: "x")]
            RFC3339.append(unixMilliseconds: t, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == "x" + RFC3339.format(unixMilliseconds: t), "\(t)")
        }
    }
}

@Suite struct HexTests {
    @Test func appendedDigitsAreTheEncodedText() {
        for count in 0..<41 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            var out: [UInt8] = [UInt8(ascii: "x")]
            Hex.append(bytes, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == "x" + Hex.encode(bytes))
        }
    }
}
