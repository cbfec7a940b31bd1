import Testing
@testable import PushCore

/// The worker decodes binary notifications into a staging buffer (`EventDecoder.decode(_:staging:)`): the verdicts
/// and what the binary transport sends must be exactly those of the decoder that gives each event arrays of its own.
@Suite struct StagedDecodingTests {
    /// Events that pass, fail at each step after the fields (token, payload, priority, size) and need compaction or
    /// truncation; with the schema examples.
    static let events: [String] = {
        let token = sampleTokenHex
        func event(_ fields: String, token: String = token, payload: String = #"{"aps":{"alert":"Hi"}}"#) -> String {
            #"{"id":"e1","app":"com.example.app","token":"\#(token)","payload":\#(payload)\#(fields.isEmpty ? "" : ",")\#(fields)}"#
        }
        // Over the legacy formats' limit (256), and over the frame format's (2048).
        let long = String(repeating: "y", count: 300)
        let huge = String(repeating: "y", count: 2100)
        var events = [
            event(""),
            event(#""environment":"sandbox","expiration":1893456000,"priority":5"#),
            event("", payload: "{ \"aps\" :\t{ \"alert\" : \"a  b\" , \"badge\" : 1 } , \"n\" : [ 1 , \"x y\" ] }"),
            event("", token: "<740F4707 BEBCF74F 9B7C25D4 8E335894 5F6AA01D A5DDB387 462C7EAF 61BB78AD>"),
            event("", token: #"74\u00300f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"#),
            event("", token: "ab"),
            event("", token: String(repeating: "ff", count: 100)),
            event("", token: String(repeating: "ff", count: 101)),
            event("", token: ""),
            event("", token: "abc"),
            event("", token: "zz"),
            event("", token: "<abcd"),
            event("", payload: #"{"aps":5}"#),
            event(#""priority":7"#),
            event(#""priority":1"#),
            event(#""priority":10"#, payload: #"{"aps":{"content-available":1}}"#),
            event("", payload: #"{"aps":{"content-available":1}}"#),
            event(#""push_type":"background","priority":10"#),
            event("", payload: #"{"aps":{"alert":"Hi"},"x":"\#(long)"}"#),
            event(#""truncate_alert":true"#, payload: #"{"aps":{"alert":"\#(long)"}}"#),
            event(#""truncate_alert":true"#, payload: #"{"aps":{"alert":{"title":"T","body":"\#(long) \#(long)"}}}"#),
            event(#""truncate_alert":true"#, payload: #"{"aps":{"badge":1},"x":"\#(long)"}"#),
            event(#""truncate_alert":true"#, payload: "{ \"aps\" : { \"alert\" : \"\(long)\" } }"),
            event(#""truncate_alert":true"#, payload: "{ \"aps\" : { \"alert\" : \"\(huge)\" } }"),
            event(#""truncate_alert":true"#, payload: #"{"aps":{"badge":1},"x":"\#(huge)"}"#),
            event("", payload: #"{"aps":{"alert":"\#(String(repeating: "z", count: 2100))"}}"#),
            #"{"id":"x","app":"a","token":"ab","payload":{"aps":{}}} trailing"#,
            #"{"id":"x","app":"a","environment":"staging","token":"<AB CD>","payload":{"aps":5}}"#,
        ]
        for validity in ["valid", "invalid"] {
            for path in SchemaExamplesTests.examples("notification-event", validity) {
                events.append(String(decoding: SchemaExamplesTests.load(path), as: UTF8.self))
            }
        }
        return events
    }()

    static let decoders: [(String, EventDecoder)] = [
        ("frame", EventDecoder()), ("enhanced", EventDecoder(format: .enhanced)), ("simple", EventDecoder(format: .simple)),
        ("http2", .http2), ("limit 40", EventDecoder(payloadLimit: 40)),
    ]

    @Test func theCorpusHasEveryVerdict() {
        let reasons = Set(Self.events.compactMap { EventDecoder().decode($0).failure?.reason })
        #expect(reasons == [.malformedEvent, .invalidTokenFormat, .invalidPayload, .invalidPriority, .payloadTooLarge])
        #expect(Self.events.contains { EventDecoder().decode($0).success?.alertTruncated == true })
    }

    @Test(arguments: decoders.map(\.0))
    func stagedVerdictsAndEventsAreTheDecoders(name: String) {
        let decoder = Self.decoders.first { $0.0 == name }!.1
        // A buffer already holding another notification's bytes: they stay as they are.
        let before: [UInt8] = [7, 7, 7]
        for json in Self.events {
            var staging = before
            let staged = Array(json.utf8).withUnsafeBytes { decoder.decode($0, staging: &staging) }
            switch decoder.decode(json) {
            case .success(let event):
                guard case .success(let s) = staged else {
                    Issue.record("\(name): staged refused \(json): \(staged)")
                    continue
                }
                // What the binary transport sends and names; the HTTP/2 fields are not kept.
                var binary = event
                (binary.alertTruncated, binary.pushType, binary.collapseID, binary.apnsID) = (false, nil, nil, nil)
                binary.contentAvailableOnly = false
                #expect(s.event(in: staging) == binary, "\(name): \(json)")
                #expect(Array(staging[s.token]) == event.token.bytes)
                #expect(Array(staging[s.payload]) == event.payload)
                #expect(s.staged == before.count..<staging.count, "\(name): \(json)")
                #expect(Array(staging.prefix(before.count)) == before)
            case .failure(let rejection):
                #expect(staged.failure == rejection, "\(name): \(json)")
                #expect(staging == before, "\(name): \(json)")
            }
        }
    }

    /// A staged notification's id is the event's, however it is spelled; one that fits 16 bytes or is a UUID in one
    /// case is packed straight from the event's bytes (no string made), escapes or not.
    @Test func anIdIsTheEventsByBothPathsAndPackedWhenItFits() throws {
        let uuid = "3f2b8c1e-9d4a-4e7b-8a61-0c5d2e9f7b13"
        let cases: [(json: String, id: String, packed: Bool)] = [
            ("e1", "e1", true),
            ("0123456789abcdef", "0123456789abcdef", true),
            ("0123456789abcdefg", "0123456789abcdefg", false),
            (uuid, uuid, true),
            (uuid.uppercased(), uuid.uppercased(), true),
            ("12345678-1234-1234-1234-123456789012", "12345678-1234-1234-1234-123456789012", true),
            ("3f2b8c1e-9D4A-4e7b-8a61-0c5d2e9f7b13", "3f2b8c1e-9D4A-4e7b-8a61-0c5d2e9f7b13", false),
            ("é中🙂", "é中🙂", true),
            (#"e\u0031"#, "e1", true),
            (#"3f2b8c1e-9d4a-4e7b-8a61-0c5d2e9f7b1\u0033"#, uuid, true),
            (#"a\"b"#, "a\"b", true),
            (String(repeating: "x", count: 128), String(repeating: "x", count: 128), false),
            (String(repeating: "é", count: 128), String(repeating: "é", count: 128), false),
        ]
        for (spelled, id, packed) in cases {
            let json = #"{"id":"\#(spelled)","app":"com.example.app","token":"\#(sampleTokenHex)","payload":{"aps":{}}}"#
            let decoded = try EventDecoder().decode(json).get()
            var staging: [UInt8] = []
            let staged = try Array(json.utf8).withUnsafeBytes { EventDecoder().decode($0, staging: &staging) }.get()
            #expect(decoded.id == id, "\(spelled)")
            #expect(staged.id == id, "\(spelled)")
            #expect((staged.eventID.packed != nil) == packed, "\(spelled)")
        }
        // Too long by characters, by either path; 128 characters of two bytes each pass (above).
        for spelled in [String(repeating: "x", count: 129), String(repeating: "é", count: 129)] {
            let json = #"{"id":"\#(spelled)","app":"com.example.app","token":"\#(sampleTokenHex)","payload":{"aps":{}}}"#
            var staging: [UInt8] = []
            let staged = Array(json.utf8).withUnsafeBytes { EventDecoder().decode($0, staging: &staging) }
            #expect(staged.failure?.reason == .malformedEvent)
            #expect(staged.failure == EventDecoder().decode(json).failure)
        }
    }

    @Test func appendedTokenBytesAreTheParsedTokens() {
        for text in ["ab", " ab cd ", "<ABCD>", sampleTokenHex, String(repeating: "0f", count: 100), "a b c d", "abcdef01"] {
            var out: [UInt8] = [1]
            #expect(throws: Never.self) { try text.withBorrowedUTF8 { try DeviceToken.appendHex($0, to: &out) } }
            #expect(Array(out.dropFirst()) == (try? DeviceToken(hex: text).bytes), "\(text)")
        }
        let failures: [(String, DeviceTokenError)] = [
            ("", .empty), ("< >", .empty), ("abc", .oddDigitCount), ("ag", .notHex(position: 1)),
            ("<abcd", .unbalancedBrackets), (String(repeating: "ff", count: 101), .tooLong(bytes: 101)),
        ]
        for (text, error) in failures {
            var out: [UInt8] = [1]
            #expect(throws: error) { try text.withBorrowedUTF8 { try DeviceToken.appendHex($0, to: &out) } }
            #expect(out == [1], "\(text)")
        }
    }

    /// What `appendHex` makes of `text`: the bytes appended, or the error.
    static func appended(_ text: [UInt8]) -> Result<[UInt8], DeviceTokenError> {
        text.withUnsafeBytes { bytes in
            var out: [UInt8] = []
            do {
                try DeviceToken.appendHex(bytes, to: &out)
                return .success(out)
            } catch let error as DeviceTokenError {
                return .failure(error)
            } catch {
                preconditionFailure("appendHex throws only DeviceTokenError")
            }
        }
    }

    /// Digits in whole sixteens are decoded sixteen at a time with nothing trimmed; any other byte among them sends
    /// the token the general way. A trailing space means nothing (it is trimmed) but always takes the general way:
    /// both must agree, for a space, a non-digit, a bracket and an uppercase digit at every place.
    @Test func aTokenInWholeSixteensDecodesAsTheGeneralWayDoes() {
        let digits = Array("0123456789abcdef".utf8)
        var checked = 0
        for length in stride(from: 16, through: 208, by: 16) {
            let plain = (0..<length).map { digits[($0 * 7 + $0 / 16) % 16] }
            let whole = Self.appended(plain)
            #expect(whole == Self.appended(plain + [0x20]), "\(length) digits")
            if length <= 200 { #expect((try? whole.get())?.count == length / 2, "\(length) digits") }
            for index in 0..<length {
                for replacement in Array(" g<>F".utf8) {
                    var text = plain
                    text[index] = replacement
                    let outcome = Self.appended(text)
                    #expect(outcome == Self.appended(text + [0x20]), "\(UnicodeScalar(replacement)) at \(index) of \(length)")
                    checked += 1
                }
            }
        }
        #expect(checked == (1...13).reduce(0) { $0 + $1 * 16 } * 5)
        // The fast way decodes what it should, uppercase included.
        #expect(Self.appended(Array("00FF10aB0123456789abcdefDEADbeef".utf8)) == .success([0x00, 0xFF, 0x10, 0xAB, 0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF, 0xDE, 0xAD, 0xBE, 0xEF]))
    }
}

/// An event's `app` given back as the configured name's own string when its bytes match (no string made per event).
@Suite struct KnownAppTests {
    static let long = "com.example.notifications.ios"  // longer than 15 bytes: a string of its own would be allocated
    static let token = String(repeating: "ab", count: 32)

    /// Where a string's bytes are: the same for two strings that share their storage.
    static func storage(_ text: String) -> UnsafeRawPointer? {
        text.utf8.withContiguousStorageIfAvailable { UnsafeRawPointer($0.baseAddress) } ?? nil
    }

    static func event(app: String) -> String {
        #"{"id":"e1","app":"\#(app)","token":"\#(token)","payload":{"aps":{"alert":"hi"}}}"#
    }

    @Test func aKnownAppIsTheConfiguredStringByBothDecodingPaths() throws {
        let known = String(decoding: Array(Self.long.utf8), as: UTF8.self)  // a native string of its own
        var decoder = EventDecoder()
        decoder.knownApps = KnownNames(["other.app", known, known])
        let json = Self.event(app: Self.long)
        let decoded = try decoder.decode(json).get()
        #expect(decoded.app == Self.long)
        #expect(Self.storage(decoded.app) == Self.storage(known))
        var staging: [UInt8] = []
        let staged = try Array(json.utf8).withUnsafeBytes { decoder.decode($0, staging: &staging) }.get()
        #expect(Self.storage(staged.app) == Self.storage(known))
        #expect(staged.knownApp == 1)  // its first place: repeats are dropped
        // Escaped, the same name is not known by its bytes, so no position comes with it.
        let escaped = Self.event(app: Self.long.replacingOccurrences(of: ".", with: #"\u002e"#))
        let unknown = try Array(escaped.utf8).withUnsafeBytes { decoder.decode($0, staging: &staging) }.get()
        #expect(unknown.app == Self.long && unknown.knownApp == nil)
        // Without the known names, the same event's app is a string of its own.
        #expect(Self.storage(try EventDecoder().decode(json).get().app) != Self.storage(known))
    }

    /// The position is kept in 16 bits: every position a configuration can have comes back, and none stands for nil.
    @Test func aKnownAppsPositionIsKeptWholeOrNotAtAll() throws {
        var staging: [UInt8] = []
        var staged = try Array(Self.event(app: Self.long).utf8).withUnsafeBytes { EventDecoder().decode($0, staging: &staging) }.get()
        #expect(staged.knownApp == nil)
        for position in [0, 1, 255, 256, 65_533, 65_534] {
            staged.knownApp = position
            #expect(staged.knownApp == position)
        }
        for beyond in [65_535, 1 << 20, -1] {
            staged.knownApp = beyond
            #expect(staged.knownApp == nil, "\(beyond)")
        }
    }

    @Test func otherNamesAreDecodedAsWritten() throws {
        var decoder = EventDecoder()
        decoder.knownApps = KnownNames([Self.long])
        // Shorter, longer, and of the same length differing in the last byte, in the first, and in the middle word.
        for app in [
            "com.example.notifications.io", "com.example.notifications.ios2", "x", "com.example.notifications.iot",
            "Com.example.notifications.ios", "com.exampleXnotifications.ios",
        ] {
            let decoded = try decoder.decode(Self.event(app: app)).get()
            #expect(decoded.app == app)
            #expect(Self.storage(decoded.app) != Self.storage(Self.long))
        }
        // Escaped, the same name decodes to an equal string (found by value afterwards).
        let escaped = Self.long.replacingOccurrences(of: ".", with: #"\u002e"#)
        #expect(try decoder.decode(Self.event(app: escaped)).get().app == Self.long)
    }

    /// Names are compared a word at a time, the last word of a name of eight bytes or more overlapping the one before:
    /// at every length, a name differing from a known one in any one byte is not it.
    @Test func aNameDifferingInAnyOneByteIsNotKnown() {
        var checked = 0
        for length in 1...24 {
            let name = String((0..<length).map { Character(UnicodeScalar(UInt8(ascii: "a") + UInt8($0 % 26))) })
            let known = KnownNames(["x.y", name])
            #expect(Array(name.utf8).withUnsafeBytes { known.name(matching: $0) } == name)
            for index in 0..<length {
                var bytes = Array(name.utf8)
                bytes[index] = UInt8(ascii: "Z")
                #expect(bytes.withUnsafeBytes { known.name(matching: $0) } == nil, "\(index) of \(length)")
                checked += 1
            }
        }
        #expect(checked == (1...24).reduce(0, +))
    }

    @Test func manyNamesAreFoundByTheirHash() {
        let names = (0..<200).map { "com.example.app\($0).with.a.long.name" }
        let known = KnownNames(names)
        for name in names {
            let found = Array(name.utf8).withUnsafeBytes { known.name(matching: $0) }
            #expect(found == name)
            #expect(found.map(Self.storage) == Self.storage(name))
        }
        for stranger in ["com.example.app200.with.a.long.name", "com.example.app1.with.a.long.nam", ""] {
            #expect(Array(stranger.utf8).withUnsafeBytes { known.name(matching: $0) } == nil)
        }
    }
}
