/// Shortens a payload's alert text so that the payload fits a size limit (SPEC section 2, `truncate_alert`).
///
/// The longest prefix of the text that fits is kept, cut on a grapheme (user-perceived character) boundary and
/// followed by `…` (U+2026, written as raw UTF-8). The prefix keeps its original spelling, escapes included, so
/// the rest of the payload is not re-encoded.
enum PayloadTruncation {
    static let ellipsis: [UInt8] = [0xE2, 0x80, 0xA6]

    /// The shortened compact payload, or nil when even an empty text followed by `…` does not fit.
    static func truncate(
        reader: JSONReader, payloadStart: Int, payloadEnd: Int, alert: JSONString, limit: Int
    ) -> [UInt8]? {
        let bytes = reader.bytes
        var head: [UInt8] = []
        head.reserveCapacity(limit)
        JSONCompaction.append(bytes, from: payloadStart, to: alert.start, into: &head)  // ends with the opening quote
        var tail: [UInt8] = [UInt8(ascii: "\"")]
        JSONCompaction.append(bytes, from: alert.end + 1, to: payloadEnd, into: &tail)
        let budget = limit - head.count - tail.count - ellipsis.count
        guard budget >= 0 else { return nil }

        // Raw offsets of every scalar, then the grapheme boundaries among them.
        var scalars = String.UnicodeScalarView()
        var rawOffsets: [Int] = []
        reader.forEachScalar(of: alert) { scalar, offset in
            scalars.append(scalar)
            rawOffsets.append(offset)
        }
        rawOffsets.append(alert.end - alert.start)
        var keep = 0
        var scalarIndex = 0
        for character in String(scalars) {
            scalarIndex += character.unicodeScalars.count
            let boundary = rawOffsets[scalarIndex]
            guard boundary <= budget else { break }
            keep = boundary
        }
        head.append(contentsOf: bytes[alert.start..<(alert.start + keep)])
        head.append(contentsOf: ellipsis)
        head.append(contentsOf: tail)
        return head
    }
}
