/// Writes compact JSON into a byte array. Strings are escaped minimally (quote, backslash, control characters);
/// other characters are written as UTF-8.
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8] = []
    /// Per open container: whether no member has been written yet.
    private var empty: [Bool] = []
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
        if let isEmpty = empty.last {
            if !isEmpty { bytes.append(UInt8(ascii: ",")) }
            empty[empty.count - 1] = false
        }
    }

    public mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        empty.append(true)
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        empty.removeLast()
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
        if let n { bytes.append(contentsOf: String(n).utf8) } else { bytes.append(contentsOf: "null".utf8) }
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

    /// Appends `s` as a quoted JSON string.
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\\")); out.append(b)
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(b)
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: Array("\\u00".utf8))
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0xF)])
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
