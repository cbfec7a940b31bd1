import Testing
@testable import PushCore

/// `readNumber` skips digits eight at a time while eight bytes remain, then one at a time. Every byte after a run of
/// digits, at every length of run and with or without eight bytes left, must end the number exactly where the
/// grammar read one byte at a time ends it.
@Suite struct JSONReaderNumberTests {
    /// RFC 8259's number grammar, one byte at a time: (end, plain integer) or the offset of the error.
    static func byteAtATime(_ text: [UInt8]) -> String {
        func isDigit(_ i: Int) -> Bool { i < text.count && (0x30...0x39).contains(text[i]) }
        var i = 0
        if i < text.count, text[i] == UInt8(ascii: "-") { i += 1 }
        guard isDigit(i) else { return "invalidNumber at 0" }
        let first = text[i]
        i += 1
        if first != UInt8(ascii: "0") { while isDigit(i) { i += 1 } }
        var plain = true
        if i < text.count, text[i] == UInt8(ascii: ".") {
            plain = false
            i += 1
            guard isDigit(i) else { return "invalidNumber at 0" }
            while isDigit(i) { i += 1 }
        }
        if i < text.count, text[i] == UInt8(ascii: "e") || text[i] == UInt8(ascii: "E") {
            plain = false
            i += 1
            if i < text.count, text[i] == UInt8(ascii: "+") || text[i] == UInt8(ascii: "-") { i += 1 }
            guard isDigit(i) else { return "invalidNumber at 0" }
            while isDigit(i) { i += 1 }
        }
        return "0..<\(i) \(plain)"
    }

    static func read(_ text: [UInt8]) -> String {
        text.withUnsafeBytes { bytes in
            var reader = JSONReader(bytes)
            do {
                let number = try reader.readNumber()
                #expect(reader.position == number.end)
                return "\(number.start)..<\(number.end) \(number.isPlainInteger)"
            } catch let error as JSONSyntaxError {
                return "\(error.kind) at \(error.offset)"
            } catch {
                return "\(error)"
            }
        }
    }

    @Test(arguments: ["1", "-9", "0", "-0", "1.", "1.5", "3e", "3E+", "3e-", "0.0"])
    func everyByteAfterEveryRunOfDigitsEndsTheNumberInItsPlace(_ prefix: String) {
        var checked = 0
        for run in 0...17 {
            let digits = (0..<run).map { UInt8(ascii: "0") + UInt8(($0 * 7 + 3) % 10) }
            for byte in UInt8.min...UInt8.max {
                // Digits after the byte: a skip that passed it would count them too. Zero to nine of them, so that
                // eight bytes remain after the run or not.
                for after in 0...9 {
                    let text = Array(prefix.utf8) + digits + [byte] + Array(repeating: UInt8(ascii: "7"), count: after)
                    let expected = Self.byteAtATime(text)
                    #expect(Self.read(text) == expected, "\(prefix) + \(run) digits + \(byte) + \(after) digits")
                    checked += 1
                }
            }
        }
        #expect(checked == 18 * 256 * 10)
    }

    @Test func digitsToTheEndOfTheInputEndTheNumberThere() {
        for run in 0...20 {
            let text = [UInt8(ascii: "9")] + Array(repeating: UInt8(ascii: "0"), count: run)
            #expect(Self.read(text) == "0..<\(run + 1) true", "\(run)")
        }
    }

    @Test func nonDigitsMarksEachByteThatIsNoDigit() {
        // One byte at a time, in every lane, among digits: only that lane is marked (no carry from a digit).
        for lane in 0..<8 {
            for byte in UInt8.min...UInt8.max {
                var word = [UInt8](repeating: UInt8(ascii: "5"), count: 8)
                word[lane] = byte
                let loaded = word.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                let marks = JSONReader.nonDigits(loaded)
                let isDigit = (0x30...0x39).contains(byte)
                #expect(marks == (isDigit ? 0 : UInt64(0x80) << (UInt64(lane) * 8)), "\(byte) in lane \(lane)")
            }
        }
    }
}
