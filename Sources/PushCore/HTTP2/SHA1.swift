import CPushSHA

/// SHA-1, for UUID version 5 only (RFC 9562 names it; nothing here relies on SHA-1 for security). Allocates
/// nothing: the message is read in place and the last blocks are padded on the stack. Blocks are compressed with the
/// CPU's SHA extensions where it has them (`CPushSHA`, about a fifth of the time), else in Swift.
enum SHA1 {
    typealias State = (UInt32, UInt32, UInt32, UInt32, UInt32)

    static func digest(_ message: [UInt8], hardware: Bool = SHA1.hardware) -> [UInt8] {
        let h = message.withUnsafeBytes { digest($0, hardware: hardware) }
        var out: [UInt8] = []
        out.reserveCapacity(20)
        for word in [h.0, h.1, h.2, h.3, h.4] {
            for shift in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: word >> UInt32(shift))) }
        }
        return out
    }

    /// `hardware`: whether to use the SHA extensions (tests compare both ways).
    static func digest(_ message: UnsafeRawBufferPointer, hardware: Bool = SHA1.hardware) -> State {
        var h: State = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
        let whole = message.count / 64 * 64
        if whole > 0 { compress(&h, UnsafeRawBufferPointer(rebasing: message[..<whole]), hardware: hardware) }
        // The rest, 0x80, zeros, and the length in bits: one or two blocks.
        withUnsafeTemporaryAllocation(byteCount: 128, alignment: 8) { tail in
            tail.initializeMemory(as: UInt8.self, repeating: 0)
            let rest = message.count - whole
            if rest > 0 { tail.copyMemory(from: UnsafeRawBufferPointer(rebasing: message[whole...])) }
            tail[rest] = 0x80
            let blocks = rest + 9 <= 64 ? 1 : 2
            let bits = UInt64(message.count) &* 8
            for i in 0..<8 { tail[blocks * 64 - 1 - i] = UInt8(truncatingIfNeeded: bits >> UInt64(8 * i)) }
            compress(&h, UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(tail)[..<(blocks * 64)]), hardware: hardware)
        }
        return h
    }

    /// Whether this CPU has the SHA extensions.
    static let hardware = pushsha_sha1_hardware() != 0

    /// Compresses whole 64-byte blocks into `h`.
    @inline(__always)
    private static func compress(_ h: inout State, _ blocks: UnsafeRawBufferPointer, hardware: Bool) {
        if hardware {
            withUnsafeMutableBytes(of: &h) { state in
                pushsha_sha1_compress(
                    state.baseAddress!.assumingMemoryBound(to: UInt32.self),
                    blocks.baseAddress!.assumingMemoryBound(to: UInt8.self), blocks.count / 64)
            }
        } else {
            for offset in stride(from: 0, to: blocks.count, by: 64) {
                compressInSwift(&h, UnsafeRawBufferPointer(rebasing: blocks[offset..<offset + 64]))
            }
        }
    }

    private static func compressInSwift(_ h: inout State, _ block: UnsafeRawBufferPointer) {
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
