import Crypto

/// SHA-1, for UUID version 5 only (RFC 9562 names it; nothing here relies on SHA-1 for security): swift-crypto's
/// `Insecure.SHA1` (BoringSSL's, with the CPU's SHA extensions where it has them), read in place.
enum SHA1 {
    typealias State = (UInt32, UInt32, UInt32, UInt32, UInt32)

    static func digest(_ message: [UInt8]) -> [UInt8] {
        var hash = Insecure.SHA1()
        message.withUnsafeBytes { hash.update(bufferPointer: $0) }
        return Array(hash.finalize())
    }

    /// The digest as five big-endian words.
    static func digest(_ message: UnsafeRawBufferPointer) -> State {
        var hash = Insecure.SHA1()
        hash.update(bufferPointer: message)
        return hash.finalize().withUnsafeBytes { d in
            func word(_ i: Int) -> UInt32 { UInt32(bigEndian: d.loadUnaligned(fromByteOffset: 4 * i, as: UInt32.self)) }
            return (word(0), word(1), word(2), word(3), word(4))
        }
    }
}
