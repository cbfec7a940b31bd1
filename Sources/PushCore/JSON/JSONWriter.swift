/// Writes compact JSON into a byte array. Strings are escaped minimally (quote, backslash, control characters);
/// other characters are written as UTF-8. Nothing is allocated but the output: containers are tracked in a bit
/// set (up to 64 deep), strings and numbers are written byte by byte.
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8] = []
    /// Bit `depth - 1` set: the innermost open container has a member already.
    private var nonEmpty: UInt64 = 0
    private var depth = 0
    private var afterKey = false

    public init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    public var string: String { String(decoding: bytes, as: UTF8.self) }

    private mutating func separate() {
        if afterKey {
            afterKey = false
            return
        }
        guard depth > 0 else { return }
        let bit: UInt64 = 1 << UInt64(depth - 1)
        if nonEmpty & bit != 0 { bytes.append(UInt8(ascii: ",")) }
        nonEmpty |= bit
    }

    public mutating func beginObject() {
        separate()
        precondition(depth < 64, "JSONWriter nests at most 64 containers")
        bytes.append(UInt8(ascii: "{"))
        depth += 1
        nonEmpty &= ~(1 << UInt64(depth - 1))
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        depth -= 1
    }

    /// Writes `"key":`; the value written next belongs to it.
    public mutating func key(_ key: String) {
        separate()
        JSONWriter.appendQuoted(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        afterKey = true
    }

    public mutating func value(_ s: String?) {
        separate()
        if let s { JSONWriter.appendQuoted(s, to: &bytes) } else { bytes.append(contentsOf: "null".utf8) }
    }

    public mutating func value(_ n: Int64?) {
        separate()
        if let n { JSONWriter.appendDecimal(n, to: &bytes) } else { bytes.append(contentsOf: "null".utf8) }
    }

    public mutating func value(_ b: Bool) {
        separate()
        bytes.append(contentsOf: (b ? "true" : "false").utf8)
    }

    /// Writes already-encoded JSON as the value.
    public mutating func raw(_ json: [UInt8]) {
        separate()
        bytes.append(contentsOf: json)
    }

    public mutating func field(_ k: String, _ s: String?) { key(k); value(s) }
    public mutating func field(_ k: String, _ n: Int64?) { key(k); value(n) }
    public mutating func field(_ k: String, _ b: Bool) { key(k); value(b) }

    /// Appends `n` in decimal.
    public static func appendDecimal(_ n: Int64, to out: inout [UInt8]) {
        if n < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = n.magnitude
        var digits = 1
        var scale: UInt64 = 1
        while magnitude / scale >= 10 {
            scale *= 10
            digits += 1
        }
        for _ in 0..<digits {
            out.append(UInt8(ascii: "0") + UInt8(magnitude / scale))
            magnitude %= scale
            scale /= 10
        }
    }

    /// Appends `s` as a quoted JSON string.
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        @inline(__always) func hex(_ nibble: UInt8) -> UInt8 { nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10 }
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out.append(UInt8(ascii: "\\"))
                out.append(b)
            case 0x0A:
                out.append(UInt8(ascii: "\\"))
                out.append(UInt8(ascii: "n"))
            case 0x0D:
                out.append(UInt8(ascii: "\\"))
                out.append(UInt8(ascii: "r"))
            case 0x09:
                out.append(UInt8(ascii: "\\"))
                out.append(UInt8(ascii: "t"))
            case 0..<0x20:
                out.append(UInt8(ascii: "\\"))
                out.append(UInt8(ascii: "u"))
                out.append(UInt8(ascii: "0"))
                out.append(UInt8(ascii: "0"))
                out.append(hex(b >> 4))
                out.append(hex(b & 0xF))
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `s` as a quoted JSON string.
    public static func quoted(_ s: String) -> String {
        var out: [UInt8] = []
        appendQuoted(s, to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}
