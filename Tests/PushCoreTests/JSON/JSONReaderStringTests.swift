import Testing
@testable import PushCore

/// `readString` reads a string that ends within sixteen bytes with one test, and skips the plain bytes of any other
/// sixteen at a time, the last sixteen of the input once more for what is left at its end. Whichever step meets it,
/// a byte that needs attention must stop the skip at exactly its place.
@Suite struct JSONReaderStringTests {
    /// What reading the string at the start of `text` gives: its span, escapes and position after, or the error.
    static func read(_ text: [UInt8]) -> String {
        text.withUnsafeBytes { bytes in
            var reader = JSONReader(bytes)
            do {
                let string = try reader.readString()
                return "\(string.start)..<\(string.end) \(string.hasEscapes) at \(reader.position)"
            } catch let error as JSONSyntaxError {
                return "\(error.kind) at \(error.offset)"
            } catch {
                return "\(error)"
            }
        }
    }

    /// A byte that needs attention, at `index` among `length` plain bytes, and what reading must then give.
    struct Stop: Sendable {
        let name: String
        let bytes: [UInt8]
        /// The outcome for a string of `length` plain bytes with this stop at `index`, the closing quote after all.
        let expected: @Sendable (_ index: Int, _ length: Int) -> String
    }

    static let stops: [Stop] = [
        Stop(name: "quote", bytes: [0x22]) { index, _ in "1..<\(1 + index) false at \(2 + index)" },
        Stop(name: "escape", bytes: Array(#"\n"#.utf8)) { _, length in "1..<\(3 + length) true at \(4 + length)" },
        Stop(name: "unicode escape", bytes: Array(#"\u00e9"#.utf8)) { _, length in
            "1..<\(7 + length) true at \(8 + length)"
        },
        Stop(name: "control character", bytes: [0x1F]) { index, _ in "controlCharacterInString at \(1 + index)" },
        Stop(name: "NUL", bytes: [0x00]) { index, _ in "controlCharacterInString at \(1 + index)" },
        Stop(name: "two-byte UTF-8", bytes: [0xC3, 0xA9]) { _, length in "1..<\(3 + length) false at \(4 + length)" },
        Stop(name: "four-byte UTF-8", bytes: [0xF0, 0x9F, 0x98, 0x80]) { _, length in
            "1..<\(5 + length) false at \(6 + length)"
        },
        Stop(name: "invalid UTF-8", bytes: [0xFF]) { index, _ in "invalidUTF8 at \(1 + index)" },
        Stop(name: "a lone continuation byte", bytes: [0x80]) { index, _ in "invalidUTF8 at \(1 + index)" },
        // Plain, at the edges of the plain range: must not stop anything.
        Stop(name: "space", bytes: [0x20]) { _, length in "1..<\(2 + length) false at \(3 + length)" },
        Stop(name: "DEL", bytes: [0x7F]) { _, length in "1..<\(2 + length) false at \(3 + length)" },
        Stop(name: "!", bytes: [0x21]) { _, length in "1..<\(2 + length) false at \(3 + length)" },
        Stop(name: "#", bytes: [0x23]) { _, length in "1..<\(2 + length) false at \(3 + length)" },
        Stop(name: "[", bytes: [0x5B]) { _, length in "1..<\(2 + length) false at \(3 + length)" },
        Stop(name: "]", bytes: [0x5D]) { _, length in "1..<\(2 + length) false at \(3 + length)" },
    ]

    @Test(arguments: stops.indices)
    func aStopAnywhereIsFoundInItsPlace(_ which: Int) {
        let stop = Self.stops[which]
        var checked = 0
        // The string's closing quote and more after it (an object's next member), and at the input's end.
        for after in [#"","x":1}"#, #"""#, #""}}"#] {
            for length in 0...70 {
                for index in 0...length {
                    var plain = (0..<length).map { UInt8(ascii: "a") &+ UInt8($0 % 26) }
                    plain.insert(contentsOf: stop.bytes, at: index)
                    let text = [0x22] + plain + Array(after.utf8)
                    let outcome = Self.read(text)
                    #expect(outcome == stop.expected(index, length), "\(stop.name) at \(index) of \(length), then \(after)")
                    checked += 1
                }
            }
        }
        #expect(checked == (1...71).reduce(0, +) * 3)
    }

    @Test func aStringWithoutItsQuoteIsUnterminatedAtEveryLength() {
        for length in 0...70 {
            let text = [0x22] + Array(repeating: UInt8(ascii: "x"), count: length)
            #expect(Self.read(text) == "unterminatedString at 0", "\(length)")
        }
    }
}
