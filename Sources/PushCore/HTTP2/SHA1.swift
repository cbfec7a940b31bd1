/// SHA-1, for UUID version 5 only (RFC 9562 names it; nothing here relies on SHA-1 for security). Allocates
/// nothing: the message is read in place and the last blocks are padded on the stack.
enum SHA1 {
    typealias State = (UInt32, UInt32, UInt32, UInt32, UInt32)

    static func digest(_ message: [UInt8]) -> [UInt8] {
        let h = message.withUnsafeBytes { digest($0) }
        var out: [UInt8] = []
        out.reserveCapacity(20)
        for word in [h.0, h.1, h.2, h.3, h.4] {
            for shift in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: word >> UInt32(shift))) }
        }
        return out
    }

    static func digest(_ message: UnsafeRawBufferPointer) -> State {
        var h: State = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
        let whole = message.count / 64 * 64
        var offset = 0
        while offset < whole {
            compress(&h, UnsafeRawBufferPointer(rebasing: message[offset..<offset + 64]))
            offset += 64
        }
        // The rest, 0x80, zeros, and the length in bits: one or two blocks.
        withUnsafeTemporaryAllocation(byteCount: 128, alignment: 8) { tail in
            tail.initializeMemory(as: UInt8.self, repeating: 0)
            let rest = message.count - whole
            if rest > 0 { tail.copyMemory(from: UnsafeRawBufferPointer(rebasing: message[whole...])) }
            tail[rest] = 0x80
            let blocks = rest + 9 <= 64 ? 1 : 2
            let bits = UInt64(message.count) &* 8
            for i in 0..<8 { tail[blocks * 64 - 1 - i] = UInt8(truncatingIfNeeded: bits >> UInt64(8 * i)) }
            for b in 0..<blocks {
                compress(&h, UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(tail)[(b * 64)..<(b * 64 + 64)]))
            }
        }
        return h
    }

    private static func compress(_ h: inout State, _ block: UnsafeRawBufferPointer) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 80) { w in
            for i in 0..<16 { w[i] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self)) }
            for i in 16..<80 { w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1) }
            var (a, b, c, d, e) = h
            @inline(__always) func round(_ f: UInt32, _ k: UInt32, _ wi: UInt32) {
                let t = rotl(a, 5) &+ f &+ e &+ k &+ wi
                e = d; d = c; c = rotl(b, 30); b = a; a = t
            }
            for i in 0..<20 { round((b & c) | (~b & d), 0x5A82_7999, w[i]) }
            for i in 20..<40 { round(b ^ c ^ d, 0x6ED9_EBA1, w[i]) }
            for i in 40..<60 { round((b & c) | (b & d) | (c & d), 0x8F1B_BCDC, w[i]) }
            for i in 60..<80 { round(b ^ c ^ d, 0xCA62_C1D6, w[i]) }
            h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e)
        }
    }

    @inline(__always)
    private static func rotl(_ x: UInt32, _ n: UInt32) -> UInt32 { x << n | x >> (32 - n) }
}
