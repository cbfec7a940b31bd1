import CPushScan

/// A device token in binary form, 1 to 100 bytes.
///
/// Producers write tokens in hex; ``init(hex:)`` accepts upper or lower case, spaces anywhere and one surrounding
/// pair of `<` `>`, as iOS prints a token's description (`<740f4707 bebcf74f ...>`).
public struct DeviceToken: Hashable, Sendable, CustomStringConvertible {
    /// The token's bytes, 1 to ``NotificationFormat/maxTokenSize`` of them.
    public let bytes: [UInt8]

    /// Wraps binary token bytes; fails when there are none or more than 100.
    public init(bytes: [UInt8]) throws(DeviceTokenError) {
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= NotificationFormat.maxTokenSize else { throw .tooLong(bytes: bytes.count) }
        self.bytes = bytes
    }

    /// Parses a hex token as producers write it (in place when the text's bytes are contiguous).
    public init(hex: some StringProtocol) throws(DeviceTokenError) {
        let result = hex.withBorrowedUTF8 { raw in
            Result { () throws(DeviceTokenError) in try DeviceToken(hexUTF8: raw) }
        }
        self = try result.get()
    }

    /// Parses a hex token from its UTF-8 bytes.
    public init(hexUTF8 text: UnsafeRawBufferPointer) throws(DeviceTokenError) {
        var bytes: [UInt8] = []
        try Self.appendHex(text, to: &bytes)
        self.bytes = bytes
    }

    /// Parses a hex token from its UTF-8 bytes and appends its bytes to `out` (nothing when it does not parse):
    /// the checks of ``init(hexUTF8:)`` without an array of its own.
    public static func appendHex(_ text: UnsafeRawBufferPointer, to out: inout [UInt8]) throws(DeviceTokenError) {
        // As producers write it: digits only, sixteen at a time (a 32-byte token is 64 of them), so nothing to trim.
        // Anything else, or a stop on the way, takes the general path below.
        let length = text.count
        if length & 15 == 0, length > 0, length <= 2 * NotificationFormat.maxTokenSize, let base = text.baseAddress {
            let whole = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: NotificationFormat.maxTokenSize) { buffer in
                guard pushscan_hex_pairs(base, length, buffer.baseAddress!) == length else { return false }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<(length / 2)]))
                return true
            }
            if whole { return }
        }
        let digits = try digits(of: text)
        // Decoded on the stack, then copied: an array made with uninitialized capacity looks its storage type up in
        // the runtime's metadata cache on every call (about 2% of the worker's CPU by profile).
        let result = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(1, digits.count / 2)) { buffer in
            decodeDigits(text, digits, into: buffer).map { count in
                if count > 0 && count <= NotificationFormat.maxTokenSize {
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<count]))  // one copy, no iterator
                }
                return count
            }
        }
        let count = try result.get()
        guard count > 0 else { throw .empty }
        guard count <= NotificationFormat.maxTokenSize else { throw .tooLong(bytes: count) }
    }

    /// Where the digits are: spaces trimmed and one surrounding pair of `<` `>` taken off.
    private static func digits(of text: UnsafeRawBufferPointer) throws(DeviceTokenError) -> Range<Int> {
        var lower = 0
        var upper = text.count
        while lower < upper, text[lower] == 0x20 { lower += 1 }
        while upper > lower, text[upper - 1] == 0x20 { upper -= 1 }
        if lower < upper, text[lower] == UInt8(ascii: "<") {
            guard text[upper - 1] == UInt8(ascii: ">"), upper - lower >= 2 else { throw .unbalancedBrackets }
            lower += 1
            upper -= 1
        } else if lower < upper, text[upper - 1] == UInt8(ascii: ">") {
            throw .unbalancedBrackets
        }
        return lower..<upper
    }

    /// Decodes the hex digits of `text[digits]` into `out` (room for half as many bytes); returns how many it wrote.
    private static func decodeDigits(
        _ text: UnsafeRawBufferPointer, _ digits: Range<Int>, into out: UnsafeMutableBufferPointer<UInt8>
    ) -> Result<Int, DeviceTokenError> {
        let (first, end) = (digits.lowerBound, digits.upperBound)
        var count = 0
        // As producers write it: digits only, in pairs. Anything else (a space) starts over the long way.
        if (end - first) & 1 == 0 {
            var index = first
            // Sixteen at a time where the CPU can (`CPushScan`), then eight, then in pairs.
            if end - first >= 16, let base = text.baseAddress, let outBase = out.baseAddress {
                let decoded = pushscan_hex_pairs(base + first, end - first, outBase)
                index += decoded
                count += decoded / 2
            }
            while index + 8 <= end, let four = DeviceToken.hexWord(text.loadUnaligned(fromByteOffset: index, as: UInt64.self)) {
                UnsafeMutableRawPointer(out.baseAddress! + count).storeBytes(of: four.littleEndian, as: UInt32.self)
                count += 4
                index += 8
            }
            while index < end, let h = DeviceToken.nibble(text[index]), let l = DeviceToken.nibble(text[index + 1]) {
                out[count] = h << 4 | l
                count += 1
                index += 2
            }
            if index == end { return .success(count) }
            count = 0
        }
        var high: UInt8? = nil
        var index = first
        while index < end {
            let character = text[index]
            index += 1
            if character == 0x20 { continue }
            guard let nibble = DeviceToken.nibble(character) else {
                return .failure(.notHex(position: index - 1))
            }
            if let h = high {
                out[count] = h << 4 | nibble
                count += 1
                high = nil
            } else {
                high = nibble
            }
        }
        return high == nil ? .success(count) : .failure(.oddDigitCount)
    }

    /// The four bytes that eight hex digits (either case; the first digit in the word's lowest byte, as loaded from
    /// text little-endian) spell, the first byte in the result's lowest; nil unless all eight are hex digits.
    /// Computed in the word's lanes: a range test per byte that cannot carry into the next (bit tricks' `hasbetween`).
    @inline(__always)
    static func hexWord(_ loaded: UInt64) -> UInt32? { hexWordAndLetters(loaded)?.value }

    /// ``hexWord(_:)`` with the lanes that held letters (their high bit set) and, of those, the lowercase ones.
    @inline(__always)
    static func hexWordAndLetters(_ loaded: UInt64) -> (value: UInt32, letters: UInt64, lowercase: UInt64)? {
        let word = UInt64(littleEndian: loaded)
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        /// Bytes of `x` strictly between `m` and `n` get their high bit set (0 <= m <= 127, n <= 128).
        @inline(__always) func between(_ x: UInt64, _ m: UInt64, _ n: UInt64) -> UInt64 {
            let low7 = x & (ones &* 0x7F)
            return (ones &* (127 + n) &- low7) & ~x & (low7 &+ ones &* (127 - m)) & highs
        }
        let isDigit = between(word, 0x2F, 0x3A)  // '0'...'9'
        let isLetter = between(word | (ones &* 0x20), 0x60, 0x67)  // 'a'...'f', 'A'...'F' once lowercased
        guard isDigit | isLetter == highs else { return nil }
        // A digit's value is its low nibble; a letter's, its low nibble plus 9.
        let values = (word & (ones &* 0x0F)) &+ (isLetter >> 7) &* 9
        // Pairs: the first digit of each pair is the high nibble.
        var packed = ((values & 0x000F_000F_000F_000F) << 4) | ((values >> 8) & 0x000F_000F_000F_000F)
        packed = (packed | packed >> 8) & 0x0000_FFFF_0000_FFFF
        packed = (packed | packed >> 16) & 0xFFFF_FFFF
        // A lowercase letter has bit 5 set: two places up, its lane's high bit.
        return (UInt32(truncatingIfNeeded: packed), isLetter, isLetter & word << 2)
    }

    /// The value of one hex digit (either case), nil for any other byte.
    @inline(__always)
    public static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c &- UInt8(ascii: "A") &+ 10
        default: nil
        }
    }

    /// The normalised form: lowercase hex, no spaces. Used as the message key of output events.
    public var hex: String { Hex.encode(bytes) }

    /// A short form for logs: the first and last four hex digits.
    public var shortened: String {
        let full = hex
        guard full.count > 12 else { return full }
        return "\(full.prefix(4))…\(full.suffix(4))"
    }

    public var description: String { hex }
}

/// Why a hex device token was refused; every case maps to the `invalid_token_format` reason.
public enum DeviceTokenError: Error, Hashable, Sendable, CustomStringConvertible {
    case empty
    case tooLong(bytes: Int)
    case notHex(position: Int)
    case oddDigitCount
    case unbalancedBrackets

    public var description: String {
        switch self {
        case .empty: "token holds no hex digits"
        case .tooLong(let n): "token decodes to \(n) bytes, more than \(NotificationFormat.maxTokenSize)"
        case .notHex(let p): "token is not hex: unexpected character at position \(p)"
        case .oddDigitCount: "token has an odd number of hex digits"
        case .unbalancedBrackets: "token has a '<' or '>' without its partner"
        }
    }
}

/// Lowercase hex encoding.
public enum Hex {
    /// The `2 * bytes.count` lowercase hex digits of `bytes`.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        if let encoded = bytes.withContiguousStorageIfAvailable({ encode(UnsafeRawBufferPointer($0)) }) { return encoded }
        return Array(bytes).withUnsafeBytes { encode($0) }
    }

    /// The `2 * bytes.count` lowercase hex digits of `bytes`.
    public static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        guard !bytes.isEmpty else { return "" }
        return String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            write(bytes, to: UnsafeMutableRawPointer(out.baseAddress!))
            return bytes.count * 2
        }
    }

    /// Appends the `2 * bytes.count` lowercase hex digits of `bytes` to `out`, with no `String` between.
    public static func append(_ bytes: [UInt8], to out: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: bytes.count * 2))
        bytes.withUnsafeBytes { source in
            out.withUnsafeMutableBytes { target in write(source, to: target.baseAddress! + start) }
        }
    }

    /// The eight lowercase hex digits of `value`, most significant first, as a word whose lowest-addressed byte
    /// (once stored little-endian) is the first digit. Computed in the word's lanes: no table, no branch.
    @inline(__always)
    static func digitWord(_ value: UInt32) -> UInt64 {
        var x = UInt64(value)
        // One nibble per byte, the most significant nibble in the top byte.
        x = (x | x << 16) & 0x0000_FFFF_0000_FFFF
        x = (x | x << 8) & 0x00FF_00FF_00FF_00FF
        x = (x | x << 4) & 0x0F0F_0F0F_0F0F_0F0F
        // '0' + nibble, plus 'a' - '0' - 10 (0x27) where the nibble is 10 or more.
        let letters = ((x &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        x = x &+ 0x3030_3030_3030_3030 &+ letters &* 0x27
        return x.byteSwapped
    }

    /// Writes the `2 * bytes.count` lowercase hex digits of `bytes` at `out`, four bytes at a time.
    @inline(__always)
    static func write(_ bytes: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) {
        guard let source = bytes.baseAddress else { return }
        let count = bytes.count
        var i = 0
        while i + 4 <= count {
            let word = UInt32(bigEndian: source.loadUnaligned(fromByteOffset: i, as: UInt32.self))
            out.storeBytes(of: digitWord(word).littleEndian, toByteOffset: 2 * i, as: UInt64.self)
            i += 4
        }
        while i < count {
            let pair = UInt16(truncatingIfNeeded: digitWord(UInt32(source.load(fromByteOffset: i, as: UInt8.self))) >> 48)
            out.storeBytes(of: pair.littleEndian, toByteOffset: 2 * i, as: UInt16.self)
            i += 1
        }
    }

    /// Decodes plain hex (no spaces, even length); nil on anything else.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        var i = 0
        while i < utf8.count {
            guard let h = DeviceToken.nibble(utf8[i]), let l = DeviceToken.nibble(utf8[i + 1]) else { return nil }
            out.append(h << 4 | l)
            i += 2
        }
        return out
    }
}
