/// An `apns-id`: a UUID naming one notification request. Written as 8-4-4-4-12 lowercase hex digits.
public struct APNsID: Hashable, Sendable, CustomStringConvertible {
    public var high: UInt64
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The namespace of derived apns-ids (a fixed random UUID of ours: `5e1f3c52-8a7d-4b36-9d0e-2f6a41c7b9e3`).
    public static let namespace = APNsID(high: 0x5E1F_3C52_8A7D_4B36, low: 0x9D0E_2F6A_41C7_B9E3)

    /// The apns-id of an event that names none: UUID version 5 (SHA-1) in ``namespace`` of the name
    /// `app` + one zero byte + `eventID` (UTF-8), so that a redelivered event carries the same apns-id.
    public static func derived(app: String, eventID: String) -> APNsID {
        var app = app
        var eventID = eventID
        return app.withUTF8 { appBytes in
            eventID.withUTF8 { idBytes in
                let count = 16 + appBytes.count + 1 + idBytes.count
                return withUnsafeTemporaryAllocation(byteCount: count, alignment: 8) { name in
                    for i in 0..<8 {
                        name[i] = UInt8(truncatingIfNeeded: namespace.high >> UInt64(56 - 8 * i))
                        name[8 + i] = UInt8(truncatingIfNeeded: namespace.low >> UInt64(56 - 8 * i))
                    }
                    UnsafeMutableRawBufferPointer(rebasing: name[16...]).copyMemory(from: UnsafeRawBufferPointer(appBytes))
                    name[16 + appBytes.count] = 0
                    UnsafeMutableRawBufferPointer(rebasing: name[(17 + appBytes.count)...])
                        .copyMemory(from: UnsafeRawBufferPointer(idBytes))
                    let h = SHA1.digest(UnsafeRawBufferPointer(name))
                    // The first 128 bits of the digest, version 5 and the RFC 9562 variant set.
                    let high = UInt64(h.0) << 32 | UInt64(h.1)
                    let low = UInt64(h.2) << 32 | UInt64(h.3)
                    return APNsID(
                        high: high & ~0xF000 | 0x5000,
                        low: low & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000)
                }
            }
        }
    }

    /// Parses the canonical text form, 8-4-4-4-12 hex digits in either case (as Apple accepts it).
    public init?(_ text: some StringProtocol) {
        var copy = String(text)
        guard let parsed = copy.withUTF8({ APNsID(utf8: UnsafeRawBufferPointer($0)) }) else { return nil }
        self = parsed
    }

    public init?(utf8 text: UnsafeRawBufferPointer) {
        guard text.count == 36 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        var digits = 0
        for (index, c) in text.enumerated() {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard c == UInt8(ascii: "-") else { return nil }
                continue
            }
            guard let nibble = DeviceToken.nibble(c) else { return nil }
            if digits < 16 { high = high << 4 | UInt64(nibble) } else { low = low << 4 | UInt64(nibble) }
            digits += 1
        }
        self.init(high: high, low: low)
    }

    /// Writes the 36 characters of the canonical lowercase form at the start of `out`; returns 36.
    @discardableResult
    public func write(into out: UnsafeMutableRawBufferPointer) -> Int {
        precondition(out.count >= 36)
        let base = out.baseAddress!
        APNsRequest.hexPairs.withUnsafeBufferPointer { pairs in
            @inline(__always) func hex(_ word: UInt64, _ digits: Int, shift: Int, at offset: Int) {
                for i in 0..<digits / 2 {
                    let byte = Int(truncatingIfNeeded: word >> UInt64(shift - 4 - 8 * i)) & 0xFF
                    base.storeBytes(of: pairs[byte], toByteOffset: offset + 2 * i, as: UInt16.self)
                }
            }
            hex(high, 8, shift: 60, at: 0)
            hex(high, 4, shift: 28, at: 9)
            hex(high, 4, shift: 12, at: 14)
            hex(low, 4, shift: 60, at: 19)
            hex(low, 12, shift: 44, at: 24)
        }
        for dash in 0..<4 { base.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 8 + 5 * dash, as: UInt8.self) }  // 8, 13, 18, 23
        return 36
    }

    public var description: String {
        String(unsafeUninitializedCapacity: 36) { write(into: UnsafeMutableRawBufferPointer($0)) }
    }
}
