import Testing
@testable import PushCore

/// A key that ends within eight bytes is read with one word; every other key the long way. Both must read the same
/// keys, stop at the same places and fail the same way.
@Suite struct JSONReaderKeyTests {
    /// Reads a key as `readKey` does, through `readString` alone (the long way).
    static func longWay(_ reader: inout JSONReader) throws(JSONSyntaxError) -> JSONString {
        let key = try reader.readString()
        reader.skipWhitespace()
        try reader.expect(UInt8(ascii: ":"))
        reader.skipWhitespace()
        return key
    }

    /// (key's text, escapes, position after, error) by both ways, for `text` whose first byte is the key's quote.
    static func both(_ text: [UInt8]) -> [String] {
        text.withUnsafeBytes { bytes in
            func run(_ read: (inout JSONReader) throws(JSONSyntaxError) -> JSONString) -> String {
                var reader = JSONReader(bytes)
                do {
                    let key = try read(&reader)
                    return "\(reader.string(key)) \(key.hasEscapes) \(key.start)..<\(key.end) at \(reader.position)"
                } catch {
                    return "error \(error)"
                }
            }
            return [run { reader throws(JSONSyntaxError) in try reader.readKey() }, run(Self.longWay)]
        }
    }

    @Test func bothWaysAgreeOnEveryKindOfKey() {
        var keys: [[UInt8]] = (0...10).map { Array(#""\#(String(repeating: "k", count: $0))""#.utf8) }
        keys += [
            #""a\"b""#, #""\u0041""#, #""ab\\""#, #""é""#, #""abcdefgé""#, #""a"#, #""abcdefghij"#, #""""#,
        ].map { Array($0.utf8) }
        keys += [[0x22, 0x61, 0x09, 0x62, 0x22], [0x22, 0x61, 0xFF, 0x22], [0x22, 0x61, 0x7F, 0x22]]
        // Followed by a value and more (a key mid-object), by a spaced colon, by a colon with whitespace or a control
        // character after it, and by nothing (the input's end within eight bytes of the quote).
        let tails = [#":1,"other":2}"#, #" : 1}"#, ": 1}", ":\t1}", ":\u{1}1}", ":!", ":", ""]
        var checked = 0
        for key in keys {
            for tail in tails {
                let text = key + Array(tail.utf8)
                let (fast, long) = { (r: [String]) in (r[0], r[1]) }(Self.both(text))
                #expect(fast == long, "\(String(decoding: text, as: UTF8.self))")
                checked += 1
            }
        }
        #expect(checked == keys.count * tails.count)
        // The one-word way was taken: a short key mid-object ends where its quote is.
        #expect(Self.both(Array(#""id":1,"app":2}"#.utf8))[0] == "id false 1..<3 at 5")
    }

    /// Known keys are matched a word or two at a time: every key is found, and a key differing from one in any one
    /// byte is not that key (it may be another only if it spells it).
    @Test func knownKeysAreFoundAndNoOneByteChangeMatchesThem() {
        func check<Key: KnownKey & Equatable>(_: Key.Type) -> Int {
            var checked = 0
            for key in Key.allCases {
                let spelling = Array(key.spelling.description.utf8)
                #expect(spelling.withUnsafeBytes { Key.spelled(by: $0) } == key, "\(key.spelling)")
                for index in spelling.indices {
                    var changed = spelling
                    changed[index] = changed[index] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
                    let found = changed.withUnsafeBytes { Key.spelled(by: $0) }
                    #expect(found != key, "\(key.spelling) changed at \(index)")
                    if let found { #expect(Array(found.spelling.description.utf8) == changed) }
                    checked += 1
                }
            }
            return checked
        }
        let checked = check(EventField.self) + check(ApsKey.self) + check(AlertKey.self)
        let letters = [EventField.allCases.map(\.spelling), ApsKey.allCases.map(\.spelling), AlertKey.allCases.map(\.spelling)]
        #expect(checked == letters.joined().map(\.utf8CodeUnitCount).reduce(0, +))
    }
}
