/// Removes insignificant whitespace from valid JSON, keeping every other byte as it is.
enum JSONCompaction {
    /// Appends `bytes[from..<to]` (valid JSON, starting outside a string) to `out` without the whitespace that lies
    /// outside strings. Runs between whitespace are copied in one piece.
    static func append(_ bytes: UnsafeRawBufferPointer, from: Int, to: Int, into out: inout [UInt8]) {
        var inString = false
        var runStart = from
        var i = from
        while i < to {
            let b = bytes[i]
            if inString {
                if b == UInt8(ascii: "\\") { i += 2; continue }
                if b == UInt8(ascii: "\"") { inString = false }
            } else if b == UInt8(ascii: "\"") {
                inString = true
            } else if b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D {
                if runStart < i { out.append(contentsOf: bytes[runStart..<i]) }
                runStart = i + 1
            }
            i += 1
        }
        if runStart < to { out.append(contentsOf: bytes[runStart..<to]) }
    }
}

/// Cheap checks of whole JSON texts, without building values.
public enum JSONCheck {
    /// Whether `bytes` is one JSON object (RFC 8259) and nothing else but whitespace.
    public static func isObject(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { raw in
            var reader = JSONReader(raw)
            reader.skipWhitespace()
            guard reader.kindOfNextValue() == .object else { return false }
            do {
                try reader.skipValue(depth: 0)
                try reader.expectEnd()
                return true
            } catch {
                return false
            }
        }
    }
}
