import CPushScan

/// A validating, allocation-free reader over the bytes of one JSON text (RFC 8259, UTF-8).
///
/// It does not build a tree: callers walk the text and ask for the next token, so they can keep the raw bytes of
/// what they pass through (payloads are forwarded exactly as the producer wrote them). Strings are checked for
/// well-formed UTF-8, escapes and unpaired surrogates; nesting is limited to ``maxDepth`` so hostile input cannot
/// exhaust the stack.
struct JSONReader {
    let bytes: UnsafeRawBufferPointer
    /// `bytes.count`, kept: the buffer's own count tests its base for nil at every use.
    let count: Int
    var position: Int = 0
    /// Counts the whitespace bytes skipped so far; callers compare it before and after a value to learn whether
    /// the value's raw bytes hold insignificant whitespace.
    var whitespaceSkipped: Int = 0

    static let maxDepth = 64

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
        count = bytes.count
    }

    var isAtEnd: Bool { position >= count }

    @inline(__always)
    func peek() -> UInt8? {
        position < count ? bytes[position] : nil
    }

    /// Skips whitespace. In compact JSON the next byte is above 0x20 (no whitespace byte is): one test.
    @inline(__always)
    mutating func skipWhitespace() {
        if position < count, bytes[position] > 0x20 { return }
        skipAnyWhitespace()
    }

    @inline(never)
    private mutating func skipAnyWhitespace() {
        let start = position
        while position < count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position &+= 1
            default:
                whitespaceSkipped &+= position &- start
                return
            }
        }
        whitespaceSkipped &+= position &- start
    }

    @inline(__always)
    mutating func expect(_ byte: UInt8) throws(JSONSyntaxError) {
        guard position < count else { throw JSONSyntaxError(.unexpectedEnd, at: position) }
        guard bytes[position] == byte else { throw JSONSyntaxError(.expected(byte), at: position) }
        position &+= 1
    }

    /// Consumes `,` (returning true: another member follows) or `close` (returning false), after whitespace.
    @inline(__always)
    mutating func nextMember(close: UInt8) throws(JSONSyntaxError) -> Bool {
        skipWhitespace()
        guard position < count else { throw JSONSyntaxError(.unexpectedEnd, at: position) }
        let b = bytes[position]
        position &+= 1
        if b == UInt8(ascii: ",") { skipWhitespace(); return true }
        if b == close { return false }
        throw JSONSyntaxError(.expected(close), at: position &- 1)
    }

    /// After `{`: true when the object is empty (consuming the `}`), false when a member follows.
    @inline(__always)
    mutating func objectIsEmpty() throws(JSONSyntaxError) -> Bool {
        skipWhitespace()
        if peek() == UInt8(ascii: "}") { position &+= 1; return true }
        return false
    }

    /// Reads `"key"` and the `:` after it, leaving the reader at the value. The usual key, short and in compact JSON,
    /// is read in line; any other by ``readAnyKey()``.
    @inline(__always)
    mutating func readKey() throws(JSONSyntaxError) -> JSONString {
        if position < count, bytes[position] == UInt8(ascii: "\""), let short = readShortString() {
            // Compact JSON, `"key":` with its value right after (no byte up to a space starts a value): no
            // whitespace to skip on either side of the colon.
            if position &+ 1 < count, bytes[position] == UInt8(ascii: ":"), bytes[position &+ 1] > 0x20 {
                position &+= 1
                return short
            }
            position = short.start - 1
        }
        return try readAnyKey()
    }

    /// ``readKey()`` for any key: escapes, whitespace around the colon, and the errors.
    @inline(never)
    private mutating func readAnyKey() throws(JSONSyntaxError) -> JSONString {
        guard peek() == UInt8(ascii: "\"") else {
            throw JSONSyntaxError(isAtEnd ? .unexpectedEnd : .expectedKey, at: position)
        }
        let key: JSONString
        if let short = readShortString() { key = short } else { key = try readString() }
        skipWhitespace()
        try expect(UInt8(ascii: ":"))
        skipWhitespace()
        return key
    }

    // MARK: Strings

    /// A string that ends within the eight bytes after its opening quote and needs no attention (a key, usually),
    /// read with one word: nil when it does not, and nothing is consumed.
    @inline(__always)
    private mutating func readShortString() -> JSONString? {
        let start = position &+ 1
        guard start &+ 8 <= count else { return nil }
        let stops = Self.stringStops(bytes.loadUnaligned(fromByteOffset: start, as: UInt64.self))
        guard stops != 0 else { return nil }
        let end = start &+ stops.trailingZeroBitCount >> 3
        guard bytes[end] == UInt8(ascii: "\"") else { return nil }
        position = end &+ 1
        return JSONString(start: start, end: end, hasEscapes: false)
    }

    /// Reads a string token starting at its opening quote, validating escapes and UTF-8. A string that ends
    /// within the sixteen bytes after its quote and needs no attention (most values) is read in line, with one
    /// sixteen-byte test; any other by ``readAnyString(plainPrefix:)``.
    @inline(__always)
    mutating func readString() throws(JSONSyntaxError) -> JSONString {
        let start = position &+ 1
        if start &+ 16 <= count {
            // Sixteen bytes fit, so the buffer has a base.
            let stops = pushscan_string_stops16(bytes.baseAddress.unsafelyUnwrapped + start)
            // The bytes before the first stop (all sixteen when there is none) need no attention.
            let plain = (stops | 0x1_0000).trailingZeroBitCount
            if stops != 0, bytes[start &+ plain] == UInt8(ascii: "\"") {
                position = start &+ plain &+ 1
                return JSONString(start: start, end: start &+ plain, hasEscapes: false)
            }
            return try readAnyString(plainPrefix: plain)
        }
        return try readAnyString(plainPrefix: 0)
    }

    /// ``readString()`` for any string, its first `plainPrefix` bytes after the quote already known to need no
    /// attention.
    @inline(never)
    private mutating func readAnyString(plainPrefix: Int) throws(JSONSyntaxError) -> JSONString {
        position &+= 1  // opening quote
        let start = position
        position &+= plainPrefix
        var hasEscapes = false
        while true {
            skipPlainStringBytes()
            guard position < count else { throw JSONSyntaxError(.unterminatedString, at: start - 1) }
            let b = bytes[position]
            if b == UInt8(ascii: "\"") {
                position &+= 1
                return JSONString(start: start, end: position &- 1, hasEscapes: hasEscapes)
            } else if b == UInt8(ascii: "\\") {
                hasEscapes = true
                try readEscape()
            } else if b < 0x20 {
                throw JSONSyntaxError(.controlCharacterInString, at: position)
            } else if b < 0x80 {
                position &+= 1
            } else {
                try readUTF8Sequence()
            }
        }
    }

    /// The high bit of each of eight string bytes (as loaded, in memory order) that stops the fast path: a byte below
    /// 0x20, or with the high bit set, or equal to '"' or '\\'. A borrow can mark a byte above one that is marked
    /// rightly, never one below it: the lowest mark is exact (`trailingZeroBitCount >> 3` is its index).
    @inline(__always)
    private static func stringStops(_ loaded: UInt64) -> UInt64 {
        let word = UInt64(littleEndian: loaded)
        let ones: UInt64 = 0x0101_0101_0101_0101
        let below20 = (word &- ones &* 0x20) & ~word
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let isQuote = (quote &- ones) & ~quote
        let isBackslash = (backslash &- ones) & ~backslash
        return (below20 | isQuote | isBackslash | word) & 0x8080_8080_8080_8080
    }

    /// Skips string bytes that need no attention (printable ASCII other than `"` and `\\`), sixteen at a time where
    /// the CPU can (`CPushScan`), and stops on the first byte that does.
    @inline(__always)
    private mutating func skipPlainStringBytes() {
        guard let base = bytes.baseAddress else { return }
        position = pushscan_plain_string_end(base, position, count)
    }

    private mutating func readEscape() throws(JSONSyntaxError) {
        let escapeStart = position
        position &+= 1
        guard position < count else { throw JSONSyntaxError(.unterminatedString, at: escapeStart) }
        switch bytes[position] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
            UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            position &+= 1
        case UInt8(ascii: "u"):
            position &+= 1
            let unit = try readHex4(escapeStart)
            if (0xD800...0xDBFF).contains(unit) {
                guard position &+ 1 < count, bytes[position] == UInt8(ascii: "\\"),
                    bytes[position &+ 1] == UInt8(ascii: "u")
                else { throw JSONSyntaxError(.unpairedSurrogate, at: escapeStart) }
                position &+= 2
                let low = try readHex4(escapeStart)
                guard (0xDC00...0xDFFF).contains(low) else { throw JSONSyntaxError(.unpairedSurrogate, at: escapeStart) }
            } else if (0xDC00...0xDFFF).contains(unit) {
                throw JSONSyntaxError(.unpairedSurrogate, at: escapeStart)
            }
        default:
            throw JSONSyntaxError(.invalidEscape, at: escapeStart)
        }
    }

    private mutating func readHex4(_ escapeStart: Int) throws(JSONSyntaxError) -> UInt16 {
        guard position &+ 4 <= count else { throw JSONSyntaxError(.invalidEscape, at: escapeStart) }
        var value: UInt16 = 0
        for _ in 0..<4 {
            guard let n = DeviceToken.nibble(bytes[position]) else { throw JSONSyntaxError(.invalidEscape, at: escapeStart) }
            value = value << 4 | UInt16(n)
            position &+= 1
        }
        return value
    }

    /// Validates one multi-byte UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
    private mutating func readUTF8Sequence() throws(JSONSyntaxError) {
        let lead = bytes[position]
        let length: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F
        case 0xF0: length = 4; low = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F
        default: throw JSONSyntaxError(.invalidUTF8, at: position)
        }
        guard position &+ length <= count else { throw JSONSyntaxError(.invalidUTF8, at: position) }
        let second = bytes[position &+ 1]
        guard second >= low, second <= high else { throw JSONSyntaxError(.invalidUTF8, at: position) }
        var i = 2
        while i < length {
            guard bytes[position &+ i] & 0xC0 == 0x80 else { throw JSONSyntaxError(.invalidUTF8, at: position) }
            i += 1
        }
        position &+= length
    }

    /// The decoded text of a string token.
    func string(_ token: JSONString) -> String {
        if !token.hasEscapes {
            return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[token.start..<token.end]), as: UTF8.self)
        }
        var scalars = String.UnicodeScalarView()
        forEachScalar(of: token) { scalar, _ in scalars.append(scalar) }
        return String(scalars)
    }

    /// The decoded UTF-8 bytes of a string token.
    func utf8(_ token: JSONString) -> [UInt8] {
        if !token.hasEscapes { return Array(bytes[token.start..<token.end]) }
        return Array(string(token).utf8)
    }

    /// Whether a string token decodes to exactly `literal` (ASCII).
    @inline(__always)
    func string(_ token: JSONString, equals literal: StaticString) -> Bool {
        if !token.hasEscapes {
            return UnsafeRawBufferPointer(rebasing: bytes[token.start..<token.end]).spells(literal)
        }
        return string(token).utf8.elementsEqual(
            UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// The number of Unicode scalars a (valid) string token decodes to.
    func scalarCount(_ token: JSONString) -> Int {
        if !token.hasEscapes {
            var n = 0
            for i in token.start..<token.end where bytes[i] & 0xC0 != 0x80 { n += 1 }
            return n
        }
        var n = 0
        forEachScalar(of: token) { _, _ in n += 1 }
        return n
    }

    /// Calls `body` with every scalar of a (valid) string token and the offset, relative to the token's first
    /// content byte, of the raw bytes that spell it.
    func forEachScalar(of token: JSONString, _ body: (Unicode.Scalar, Int) -> Void) {
        var i = token.start
        while i < token.end {
            let rawOffset = i - token.start
            let b = bytes[i]
            if b == UInt8(ascii: "\\") {
                let e = bytes[i + 1]
                switch e {
                case UInt8(ascii: "b"): body("\u{08}", rawOffset); i += 2
                case UInt8(ascii: "f"): body("\u{0C}", rawOffset); i += 2
                case UInt8(ascii: "n"): body("\n", rawOffset); i += 2
                case UInt8(ascii: "r"): body("\r", rawOffset); i += 2
                case UInt8(ascii: "t"): body("\t", rawOffset); i += 2
                case UInt8(ascii: "u"):
                    var unit = hex4(at: i + 2)
                    i += 6
                    if (0xD800...0xDBFF).contains(unit) {
                        let low = hex4(at: i + 2)
                        unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                    }
                    body(Unicode.Scalar(unit)!, rawOffset)
                default: body(Unicode.Scalar(e), rawOffset); i += 2
                }
            } else {
                var width = 1
                var value = UInt32(b)
                if b >= 0xF0 { width = 4; value = UInt32(b & 0x07) }
                else if b >= 0xE0 { width = 3; value = UInt32(b & 0x0F) }
                else if b >= 0xC0 { width = 2; value = UInt32(b & 0x1F) }
                for k in 1..<width { value = value << 6 | UInt32(bytes[i + k] & 0x3F) }
                body(Unicode.Scalar(value)!, rawOffset)
                i += width
            }
        }
    }

    private func hex4(at index: Int) -> UInt32 {
        var v: UInt32 = 0
        for k in 0..<4 { v = v << 4 | UInt32(DeviceToken.nibble(bytes[index + k])!) }
        return v
    }

    // MARK: Numbers and literals

    /// Reads a number token (RFC 8259 grammar).
    mutating func readNumber() throws(JSONSyntaxError) -> JSONNumber {
        let start = position
        if peek() == UInt8(ascii: "-") { position &+= 1 }
        guard let first = peek(), isDigit(first) else { throw JSONSyntaxError(.invalidNumber, at: start) }
        position &+= 1
        if first != UInt8(ascii: "0") { skipDigits() }
        var plainInteger = true
        if peek() == UInt8(ascii: ".") {
            plainInteger = false
            position &+= 1
            guard let d = peek(), isDigit(d) else { throw JSONSyntaxError(.invalidNumber, at: start) }
            skipDigits()
        }
        if let e = peek(), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            plainInteger = false
            position &+= 1
            if let s = peek(), s == UInt8(ascii: "+") || s == UInt8(ascii: "-") { position &+= 1 }
            guard let d = peek(), isDigit(d) else { throw JSONSyntaxError(.invalidNumber, at: start) }
            skipDigits()
        }
        return JSONNumber(start: start, end: position, isPlainInteger: plainInteger)
    }

    /// Skips ASCII digits, eight at a time while eight bytes remain, and stops on the first byte that is not one.
    /// The word step is a short string's (``stringStops(_:)``) with another test, kept apart: one function for
    /// both, with the test passed in, cost 22 more instructions per decode.
    @inline(__always)
    private mutating func skipDigits() {
        while position &+ 8 <= count {
            let stops = Self.nonDigits(bytes.loadUnaligned(fromByteOffset: position, as: UInt64.self))
            if stops != 0 {
                position &+= stops.trailingZeroBitCount >> 3
                return
            }
            position &+= 8
        }
        while position < count, isDigit(bytes[position]) { position &+= 1 }
    }

    /// The high bit of each of eight bytes (as loaded, in memory order) that is not an ASCII digit. A byte XOR '0'
    /// is below 10 exactly for a digit; adding 0x76 sets the high bit of any larger value below 0x80, and a value
    /// from 0x80 up is marked by its own high bit. A carry out of a value of 0x8A or more can mark the byte above
    /// it, never one below: the lowest mark is exact (`trailingZeroBitCount >> 3` is its index).
    @inline(__always)
    static func nonDigits(_ loaded: UInt64) -> UInt64 {
        let value = UInt64(littleEndian: loaded) ^ 0x3030_3030_3030_3030
        return ((value &+ 0x7676_7676_7676_7676) | value) & 0x8080_8080_8080_8080
    }

    @inline(__always)
    private func isDigit(_ b: UInt8) -> Bool { b &- UInt8(ascii: "0") < 10 }

    /// The numeric value of a number token, as JSON Schema compares numbers (by value: `10.0` equals `10`).
    func value(_ number: JSONNumber) -> Double {
        if number.isPlainInteger, number.end - number.start <= 16 {
            var negative = false
            var i = number.start
            if bytes[i] == UInt8(ascii: "-") { negative = true; i += 1 }
            var v: Int64 = 0
            while i < number.end { v = v * 10 + Int64(bytes[i] &- UInt8(ascii: "0")); i += 1 }
            return Double(negative ? -v : v)
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[number.start..<number.end]), as: UTF8.self)
        return Double(text) ?? .nan
    }

    mutating func readLiteral(_ literal: StaticString) throws(JSONSyntaxError) {
        let n = literal.utf8CodeUnitCount
        guard position &+ n <= count else { throw JSONSyntaxError(.invalidLiteral, at: position) }
        for i in 0..<n where bytes[position &+ i] != literal.utf8Start[i] {
            throw JSONSyntaxError(.invalidLiteral, at: position)
        }
        position &+= n
    }

    /// Reads `true` or `false`, or throws.
    mutating func readBool() throws(JSONSyntaxError) -> Bool {
        if peek() == UInt8(ascii: "t") { try readLiteral("true"); return true }
        try readLiteral("false")
        return false
    }

    // MARK: Values

    /// The kind of the value at the current position, without consuming it.
    @inline(__always)
    func kindOfNextValue() -> JSONKind? {
        guard let b = peek() else { return nil }
        switch b {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        default: return nil
        }
    }

    /// ``skipValue(depth:)`` with a string or a number (most of a payload's own values) read in line. Their first
    /// bytes are tested here as in ``kindOfNextValue()``: asking that for the kind costs 11 more instructions per event.
    @inline(__always)
    mutating func skipValueInLine(depth: Int) throws(JSONSyntaxError) {
        if depth <= JSONReader.maxDepth, position < count {
            switch bytes[position] {
            case UInt8(ascii: "\""): _ = try readString(); return
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): _ = try readNumber(); return
            default: break
            }
        }
        try skipValue(depth: depth)
    }

    /// Reads and validates any value, discarding it. `depth` is the nesting depth of the value being read.
    mutating func skipValue(depth: Int) throws(JSONSyntaxError) {
        guard depth <= JSONReader.maxDepth else { throw JSONSyntaxError(.tooDeep, at: position) }
        guard let kind = kindOfNextValue() else {
            throw JSONSyntaxError(isAtEnd ? .unexpectedEnd : .unexpectedCharacter, at: position)
        }
        switch kind {
        case .object:
            position &+= 1
            if try objectIsEmpty() { return }
            repeat {
                _ = try readKey()
                try skipValue(depth: depth + 1)
            } while try nextMember(close: UInt8(ascii: "}"))
        case .array:
            position &+= 1
            skipWhitespace()
            if peek() == UInt8(ascii: "]") { position &+= 1; return }
            repeat {
                try skipValue(depth: depth + 1)
            } while try nextMember(close: UInt8(ascii: "]"))
        case .string: _ = try readString()
        case .number: _ = try readNumber()
        case .bool: _ = try readBool()
        case .null: try readLiteral("null")
        }
    }

    /// Requires that nothing but whitespace follows.
    mutating func expectEnd() throws(JSONSyntaxError) {
        skipWhitespace()
        guard isAtEnd else { throw JSONSyntaxError(.trailingCharacters, at: position) }
    }
}
