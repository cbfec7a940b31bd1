/// An `apns-id`: a UUID naming one notification request. Written as 8-4-4-4-12 lowercase hex digits.
public struct APNsID: Hashable, Sendable, CustomStringConvertible {
    public var high: UInt64
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The namespace of derived apns-ids (a fixed random UUID of ours: `5e1f3c52-8a7d-4b36-9d0e-2f6a41c7b9e3`).
    public static var namespace: APNsID { APNsID(high: 0x5E1F_3C52_8A7D_4B36, low: 0x9D0E_2F6A_41C7_B9E3) }

    /// The apns-id of an event that names none: UUID version 5 (SHA-1) in ``namespace`` of the name
    /// `app` + one zero byte + `eventID` (UTF-8), so that a redelivered event carries the same apns-id.
    public static func derived(app: String, eventID: String) -> APNsID {
        app.withBorrowedUTF8 { appBytes in
            eventID.withBorrowedUTF8 { idBytes in
                let count = 16 + appBytes.count + 1 + idBytes.count
                return withUnsafeTemporaryAllocation(byteCount: count, alignment: 8) { name in
                    let start = name.baseAddress!
                    start.storeBytes(of: namespace.high.bigEndian, as: UInt64.self)
                    start.storeBytes(of: namespace.low.bigEndian, toByteOffset: 8, as: UInt64.self)
                    if let app = appBytes.baseAddress { (start + 16).copyMemory(from: app, byteCount: appBytes.count) }
                    start.storeBytes(of: 0, toByteOffset: 16 + appBytes.count, as: UInt8.self)
                    if let id = idBytes.baseAddress {
                        (start + 17 + appBytes.count).copyMemory(from: id, byteCount: idBytes.count)
                    }
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
        guard let parsed = text.withBorrowedUTF8({ APNsID(utf8: $0) }) else { return nil }
        self = parsed
    }

    public init?(utf8 text: UnsafeRawBufferPointer) {
        guard let parsed = Self.parse(utf8: text) else { return nil }
        self = parsed.id
    }

    /// The canonical text form read eight digits at a time (``DeviceToken/hexWord(_:)``), with whether any of its
    /// letters are uppercase and whether any are lowercase; nil for anything but 8-4-4-4-12 hex digits.
    static func parse(utf8 text: UnsafeRawBufferPointer) -> (id: APNsID, uppercase: Bool, lowercase: Bool)? {
        let dash = UInt8(ascii: "-")
        guard text.count == 36, text[8] == dash, text[13] == dash, text[18] == dash, text[23] == dash else { return nil }
        func load64(_ offset: Int) -> UInt64 { UInt64(littleEndian: text.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
        func load32(_ offset: Int) -> UInt64 {
            UInt64(UInt32(littleEndian: text.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
        }
        // Lanes of either case, gathered per word of eight digits (a lane of one word is no lane of another).
        var uppercase: UInt64 = 0
        var lowercase: UInt64 = 0
        func digits(_ group: UInt64) -> UInt64? {
            guard let word = DeviceToken.hexWordAndLetters(group.littleEndian) else { return nil }
            uppercase |= word.letters & ~word.lowercase
            lowercase |= word.lowercase
            return UInt64(word.value.byteSwapped)  // the first digit's byte the most significant
        }
        // The 32 digits as four words of eight, in text order (the first digit in each word's lowest byte).
        guard let a = digits(load64(0)), let b = digits(load32(9) | load32(14) << 32),
            let c = digits(load32(19) | load32(24) << 32), let d = digits(load64(28))
        else { return nil }
        return (APNsID(high: a << 32 | b, low: c << 32 | d), uppercase != 0, lowercase != 0)
    }

    /// Writes the 36 characters of the canonical lowercase form at the start of `out`; returns 36.
    @discardableResult
    public func write(into out: UnsafeMutableRawBufferPointer) -> Int {
        precondition(out.count >= 36)
        write(to: out.baseAddress!)
        return 36
    }

    /// Writes the 36 characters of the canonical lowercase form at `out`, which has room for them.
    @inline(__always)
    func write(to out: UnsafeMutableRawPointer) {
        // Digits 0-7, 8-15 of the high half and 16-23, 24-31 of the low half, placed around the dashes
        // (8-4-4-4-12).
        let d0 = Hex.digitWord(UInt32(truncatingIfNeeded: high >> 32))
        let d1 = Hex.digitWord(UInt32(truncatingIfNeeded: high))
        let d2 = Hex.digitWord(UInt32(truncatingIfNeeded: low >> 32))
        let d3 = Hex.digitWord(UInt32(truncatingIfNeeded: low))
        out.storeBytes(of: d0.littleEndian, toByteOffset: 0, as: UInt64.self)
        out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 8, as: UInt8.self)
        out.storeBytes(of: UInt32(truncatingIfNeeded: d1).littleEndian, toByteOffset: 9, as: UInt32.self)
        out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 13, as: UInt8.self)
        out.storeBytes(of: UInt32(truncatingIfNeeded: d1 >> 32).littleEndian, toByteOffset: 14, as: UInt32.self)
        out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 18, as: UInt8.self)
        out.storeBytes(of: UInt32(truncatingIfNeeded: d2).littleEndian, toByteOffset: 19, as: UInt32.self)
        out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 23, as: UInt8.self)
        out.storeBytes(of: UInt32(truncatingIfNeeded: d2 >> 32).littleEndian, toByteOffset: 24, as: UInt32.self)
        out.storeBytes(of: d3.littleEndian, toByteOffset: 28, as: UInt64.self)
    }

    public var description: String {
        String(unsafeUninitializedCapacity: 36) { write(into: UnsafeMutableRawBufferPointer($0)) }
    }
}
