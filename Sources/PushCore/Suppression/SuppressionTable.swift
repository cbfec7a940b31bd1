/// The table's name for one (app, environment, token): a 61-bit digest of the three (SipHash, seeded per process).
///
/// Two different tokens share a digest with a chance of 2⁻⁶¹ per comparison: with a million tokens suppressed, one
/// lookup in about 10¹³ would take an unsuppressed token for a suppressed one (and end it as `token_suppressed`
/// with its error event, never silently). In exchange the table holds no token bytes.
public struct SuppressionKey: Hashable, Sendable {
    /// Never zero (zero marks an empty slot); the low three bits are free for the reason.
    let digest: UInt64

    public init(app: String, environment: APNsEnvironment, token: DeviceToken) {
        var hasher = Hasher()
        hasher.combine(app)
        hasher.combine(environment)
        token.bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        let digest = UInt64(bitPattern: Int64(hasher.finalize())) & ~SuppressionReason.codeMask
        self.digest = digest == 0 ? SuppressionReason.codeMask + 1 : digest
    }
}

/// The suppressed tokens of every app (SPEC section 10), in 12 bytes a slot: an open-addressing table (linear
/// probing, backward-shift deletion) of digests with the reason in their low bits, and the invalidation time in
/// UNIX seconds beside them. It grows by doubling beyond three quarters full, so above a dozen tokens it holds
/// between 16 and 32 bytes per suppressed token. A value type: the owner puts it behind its lock.
public struct SuppressionTable: Sendable {
    /// Digest | reason code, or 0 for an empty slot.
    private var slots: [UInt64]
    /// UNIX seconds, clamped to 32 bits (until 2106).
    private var times: [UInt32]
    public private(set) var count = 0

    /// What the table says about one notification.
    public enum Verdict: Hashable, Sendable {
        /// Not suppressed: send it.
        case send
        /// Suppressed: do not send it; it ends as `token_suppressed`.
        case suppressed(invalidatedAt: Int64, reason: SuppressionReason)
        /// Suppressed, but registered again since: send it, and once it is accepted, lift the suppression (write a
        /// tombstone).
        case sendAndLift(invalidatedAt: Int64, reason: SuppressionReason)
    }

    public init(minimumCapacity: Int = 0) {
        var capacity = 16
        while capacity * 3 / 4 < minimumCapacity { capacity *= 2 }
        slots = Array(repeating: 0, count: capacity)
        times = Array(repeating: 0, count: capacity)
    }

    /// Bytes the table holds (its arrays' elements).
    public var memoryBytes: Int { slots.count * (MemoryLayout<UInt64>.size + MemoryLayout<UInt32>.size) }

    /// Suppresses a token, or moves its invalidation (the topic's later record wins).
    public mutating func suppress(_ key: SuppressionKey, invalidatedAt: Int64, reason: SuppressionReason) {
        if (count + 1) * 4 > slots.count * 3 { grow() }
        let time = UInt32(clamping: invalidatedAt)
        var i = index(of: key.digest)
        while slots[i] != 0 {
            if slots[i] & ~SuppressionReason.codeMask == key.digest {
                slots[i] = key.digest | reason.code
                times[i] = time
                return
            }
            i = (i + 1) & (slots.count - 1)
        }
        slots[i] = key.digest | reason.code
        times[i] = time
        count += 1
    }

    /// Lifts a token's suppression (a tombstone); returns whether it was suppressed.
    @discardableResult
    public mutating func lift(_ key: SuppressionKey) -> Bool {
        let mask = slots.count - 1
        var i = index(of: key.digest)
        while slots[i] & ~SuppressionReason.codeMask != key.digest {
            if slots[i] == 0 { return false }
            i = (i + 1) & mask
        }
        // Backward shift: later entries of the run move up into the hole if their home slot allows.
        var hole = i
        var j = (i + 1) & mask
        while slots[j] != 0 {
            let home = index(of: slots[j] & ~SuppressionReason.codeMask)
            // j may fill the hole when its home is not in (hole, j] (cyclically).
            let distanceToHome = (j - home) & mask
            let distanceToHole = (j - hole) & mask
            if distanceToHome >= distanceToHole {
                slots[hole] = slots[j]
                times[hole] = times[j]
                hole = j
            }
            j = (j + 1) & mask
        }
        slots[hole] = 0
        times[hole] = 0
        count -= 1
        return true
    }

    /// The token's invalidation, if it is suppressed.
    public func lookup(_ key: SuppressionKey) -> (invalidatedAt: Int64, reason: SuppressionReason)? {
        var i = index(of: key.digest)
        while slots[i] != 0 {
            if slots[i] & ~SuppressionReason.codeMask == key.digest { return (Int64(times[i]), SuppressionReason(code: slots[i])) }
            i = (i + 1) & (slots.count - 1)
        }
        return nil
    }

    /// SPEC section 10: a suppressed token is sent only if the event says it was registered (UNIX seconds) after its
    /// invalidation.
    public func verdict(_ key: SuppressionKey, registeredAt: Int64?) -> Verdict {
        guard let (invalidatedAt, reason) = lookup(key) else { return .send }
        if let registeredAt, registeredAt > invalidatedAt { return .sendAndLift(invalidatedAt: invalidatedAt, reason: reason) }
        return .suppressed(invalidatedAt: invalidatedAt, reason: reason)
    }

    /// Applies one record of the topic.
    public mutating func apply(_ entry: SuppressionEntry) {
        switch entry {
        case .suppress(let record): suppress(record.tableKey, invalidatedAt: record.invalidatedAt, reason: record.reason)
        case .lift(let key): lift(key)
        }
    }

    private func index(of digest: UInt64) -> Int {
        // The digest's high bits (its low three hold the reason); Fibonacci hashing spreads them over the table.
        Int(truncatingIfNeeded: (digest &* 0x9E37_79B9_7F4A_7C15) >> UInt64(64 - slots.count.trailingZeroBitCount))
    }

    private mutating func grow() {
        let oldSlots = slots
        let oldTimes = times
        slots = Array(repeating: 0, count: oldSlots.count * 2)
        times = Array(repeating: 0, count: oldSlots.count * 2)
        let mask = slots.count - 1
        for (slot, time) in zip(oldSlots, oldTimes) where slot != 0 {
            var i = index(of: slot & ~SuppressionReason.codeMask)
            while slots[i] != 0 { i = (i + 1) & mask }
            slots[i] = slot
            times[i] = time
        }
    }
}
