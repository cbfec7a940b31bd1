import PushCollections

/// A held record's reference, carried by its delivery and by its output events: which partition ledger holds it,
/// in which epoch of that partition, and its place there. One word (a delivery carries it for as long as it is
/// held): the slot in 20 bits, the epoch's low 12 bits and the place's low 32 bits. The ledger compares epochs and
/// places modulo those widths, so a ticket could be taken for a live record only after its partition went through
/// 4,096 more epochs, or its epoch admitted 2^32 more records, while the ticket was still out: far beyond what an
/// in-flight window bounded by `max_in_flight` and the gateway's timeouts can hold.
@frozen
public struct LedgerTicket: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64

    /// Partitions one ledger can tell apart over its life (each distinct partition ever assigned takes a slot).
    public static let slotLimit = 1 << 20
    @usableFromInline static let epochMask: UInt32 = 0xFFF

    @inlinable
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// Keeps the epoch's low 12 bits and the sequence's low 32.
    @inlinable
    public init(slot: UInt32, epoch: UInt32, sequence: UInt64) {
        rawValue = UInt64(slot) << 44 | UInt64(epoch & Self.epochMask) << 32 | UInt64(UInt32(truncatingIfNeeded: sequence))
    }

    /// The partition's slot in the ledger.
    @inlinable public var slot: UInt32 { UInt32(truncatingIfNeeded: rawValue >> 44) }
    /// The partition's epoch when the record was admitted (its low 12 bits): a revoke, a reassignment or a reset
    /// ends the epoch, and a ticket of an ended epoch settles nothing.
    @inlinable public var epoch: UInt32 { UInt32(truncatingIfNeeded: rawValue >> 32) & Self.epochMask }
    /// The record's place in its partition's ledger (0 for the first record of the epoch), its low 32 bits.
    @inlinable public var sequence: UInt32 { UInt32(truncatingIfNeeded: rawValue) }

    public var description: String { "#\(slot).\(epoch).\(sequence)" }
}

/// The one owner of every record from fetch to commit (SPEC section 4): per partition, a compact entry per record in
/// offset order, holding what its output events need (`Entry`), whether its outcome is known, and how many of its
/// output events the broker has not acknowledged yet. The committable offset of a partition is one past its
/// settled prefix; the number of unsettled records is the worker's backpressure signal. Pure: no I/O, no locks
/// (its owner settles batches under one lock).
///
/// Rebalance fencing: a partition's records belong to an epoch. Revoking it, assigning it again, or a record
/// arriving at an offset at or below the last one (auto.offset.reset after an out-of-range, an unclean leader
/// election) ends the epoch: its records are forgotten (they stay uncommitted for whoever fetches them next) and a
/// settlement carrying a ticket of that epoch is ignored, so it can neither stall nor advance the next epoch's
/// commits.
public struct HeldLedger<Entry: Sendable>: Sendable {
    /// Which group (an app's share of the ledger) a record counts in; ``noGroup`` for records not delivered.
    public typealias Group = Int

    @inlinable
    public static var noGroup: Group { 0 }

    /// The most groups a ledger can count in (besides ``noGroup``): a record names its group in two bytes.
    public static var groupLimit: Int { Int(UInt16.max) - 1 }

    // Everything is inlinable so that the ledger is specialised for its entry in the module that uses it: generic
    // code across the module boundary looked up type metadata and copied entries through witnesses on every call.
    // The entry first and the small fields after it: Swift lays fields out in this order, and each small field takes
    // the next free bytes (32 bytes a record for the pipeline's 28-byte entry). A record keeps no offset: its
    // partition knows where runs of consecutive offsets start (``Partition/runs``).
    @usableFromInline
    struct Record: Sendable {
        @usableFromInline var entry: Entry?
        @usableFromInline var group: UInt16
        /// Output events not yet acknowledged (a handful at most: an error or report event, a feedback event, a
        /// suppression record).
        @usableFromInline var pendingOutputs: UInt8 = 0
        @usableFromInline var outcomeKnown = false

        @inlinable
        init(group: UInt16, entry: Entry?) {
            self.group = group
            self.entry = entry
        }

        @inlinable var isSettled: Bool { outcomeKnown && pendingOutputs == 0 }
    }

    /// A run of records at consecutive offsets begins at the record of `sequence`, at `offset`.
    @usableFromInline
    struct OffsetRun: Sendable {
        @usableFromInline var sequence: UInt64
        @usableFromInline var offset: Int64

        @inlinable init(sequence: UInt64, offset: Int64) {
            self.sequence = sequence
            self.offset = offset
        }
    }

    @usableFromInline
    struct Partition: Sendable {
        @usableFromInline let topicPartition: TopicPartition
        @usableFromInline var epoch: UInt32 = 0
        @usableFromInline var records = ChunkedQueue<Record>()
        /// The sequence of `records.first`.
        @usableFromInline var headSequence: UInt64 = 0
        /// Where the records' offsets start a run of consecutive offsets, in sequence order, from `firstRun` on (the
        /// ones before it are behind the head): one run while the partition's offsets have no gap, which is the usual
        /// case; a compacted topic, or a transaction's commit marker, starts another. The first run starts at or
        /// before the head.
        @usableFromInline var runs: [OffsetRun] = []
        @usableFromInline var firstRun = 0
        @usableFromInline var lastOffset: Int64?
        /// One past the settled prefix: what a commit of this epoch would store.
        @usableFromInline var committable: Int64?
        @usableFromInline var dirty = false

        @inlinable init(_ topicPartition: TopicPartition) { self.topicPartition = topicPartition }

        /// The offset of `records[index]`.
        @inlinable
        func offset(at index: Int) -> Int64 {
            let sequence = headSequence + UInt64(index)
            var run = runs.count - 1
            if runs[run].sequence > sequence {
                // Gaps among the records held: the last run that starts at or before the record.
                var low = firstRun
                var high = run - 1
                while low < high {
                    let mid = (low + high + 1) / 2
                    if runs[mid].sequence <= sequence { low = mid } else { high = mid - 1 }
                }
                run = low
            }
            return runs[run].offset + Int64(sequence - runs[run].sequence)
        }

        /// Appends a record at `offset`: a new run unless it follows the last record's offset.
        @inlinable
        mutating func append(_ record: Record, offset: Int64, after last: Int64?) {
            let sequence = headSequence + UInt64(records.count)
            if records.isEmpty {
                runs.removeAll(keepingCapacity: true)
                firstRun = 0
                runs.append(OffsetRun(sequence: sequence, offset: offset))
            } else if offset != last.map({ $0 + 1 }) {
                runs.append(OffsetRun(sequence: sequence, offset: offset))
            }
            records.append(record)
        }

        /// Removes the first `n` records (at least one); returns the offset of the last of them.
        @inlinable
        mutating func removeFirst(_ n: Int) -> Int64 {
            let offset = offset(at: n - 1)
            records.removeFirst(n)
            headSequence += UInt64(n)
            while firstRun + 1 < runs.count, runs[firstRun + 1].sequence <= headSequence { firstRun += 1 }
            if firstRun >= 16, firstRun * 2 >= runs.count {
                runs.removeFirst(firstRun)
                firstRun = 0
            }
            return offset
        }

        @inlinable
        func index(of ticket: LedgerTicket) -> Int? {
            guard ticket.epoch == epoch & LedgerTicket.epochMask else { return nil }
            // Modulo 2^32: a ticket behind the head (settled and gone) lands far past the records held.
            let index = Int(ticket.sequence &- UInt32(truncatingIfNeeded: headSequence))
            return index < records.count ? index : nil
        }
    }

    /// What the ledger did with a record offered to it.
    public enum Admission: Sendable, Equatable {
        case admitted(LedgerTicket)
        /// The offset was at or below the partition's last one: the partition's epoch was restarted (its
        /// `forgotten` unsettled records will not be committed by this epoch) and the record admitted into the new
        /// one.
        case restarted(LedgerTicket, forgotten: Int)

        public var ticket: LedgerTicket {
            switch self {
            case .admitted(let t), .restarted(let t, _): t
            }
        }
    }

    @usableFromInline var partitions: [Partition] = []
    @usableFromInline var slots: [TopicPartition: Int] = [:]
    @usableFromInline var groupCounts: [Int]
    /// Records admitted and not yet settled, across partitions.
    @inlinable public var count: Int { held }
    @usableFromInline var held: Int
    /// While a batch settles (``settlingBatch(_:)``): the slots whose first record settled, their settled prefix
    /// removed when the batch ends. Nil otherwise.
    @usableFromInline var settledHeads: [Int]?

    /// - Parameter groups: how many groups records may count in (besides ``noGroup``).
    @inlinable
    public init(groups: Int = 0) {
        held = 0
        settledHeads = nil
        precondition(groups <= Self.groupLimit, "more groups than a record can name")
        groupCounts = Array(repeating: 0, count: groups + 1)
    }

    // MARK: Partitions

    /// The slot of a partition (created on first use). Look it up once per run of records of one partition.
    @inlinable
    public mutating func slot(for partition: TopicPartition) -> UInt32 {
        if let slot = slots[partition] { return UInt32(slot) }
        precondition(partitions.count < LedgerTicket.slotLimit, "one worker was assigned over 2^20 distinct partitions")
        partitions.append(Partition(partition))
        slots[partition] = partitions.count - 1
        return UInt32(partitions.count - 1)
    }

    /// Partitions were assigned: each starts a new epoch, empty.
    @inlinable
    public mutating func assign(_ assigned: [TopicPartition]) {
        for partition in assigned { restart(Int(slot(for: partition))) }
    }

    /// Partitions were revoked: returns the committable offsets that moved (of every partition, so that the commit
    /// made before the release carries all of them), then ends the revoked partitions' epochs.
    @inlinable
    public mutating func revoke(_ revoked: [TopicPartition]) -> [(TopicPartition, Int64)] {
        let moved = takeCommittable()
        for partition in revoked {
            if let slot = slots[partition] { restart(slot) }
        }
        return moved
    }

    /// Ends the partition's epoch: its unsettled records stop counting and are forgotten. Returns how many.
    @inlinable @discardableResult
    mutating func restart(_ slot: Int) -> Int {
        var forgotten = 0
        for record in partitions[slot].records where !record.isSettled {
            forgotten += 1
            groupCounts[Int(record.group)] -= 1
        }
        held -= forgotten
        partitions[slot].epoch &+= 1
        partitions[slot].records.removeAll()
        partitions[slot].runs.removeAll()
        partitions[slot].firstRun = 0
        partitions[slot].headSequence = 0
        partitions[slot].lastOffset = nil
        partitions[slot].committable = nil
        partitions[slot].dirty = false
        return forgotten
    }

    // MARK: Records

    /// Takes a record in: `entry` is what its output events will need (nil for a record whose outcome is already
    /// known, see `outcomeKnown`), `group` the share it counts in while unsettled.
    /// - Parameters:
    ///   - outcomeKnown: the record is settled by its output events alone (rejected before delivery): `outputs` of
    ///     them are on their way to the broker.
    @inlinable
    public mutating func admit(
        slot: UInt32, offset: Int64, group: Group, entry: Entry?, outcomeKnown: Bool = false, outputs: Int = 0
    ) -> Admission {
        let s = Int(slot)
        var forgotten: Int?
        if let last = partitions[s].lastOffset, offset <= last { forgotten = restart(s) }
        let sequence = partitions[s].headSequence + UInt64(partitions[s].records.count)
        var record = Record(group: UInt16(group), entry: entry)
        record.outcomeKnown = outcomeKnown
        record.pendingOutputs = UInt8(outputs)
        let last = partitions[s].lastOffset
        partitions[s].lastOffset = offset
        if record.isSettled && partitions[s].records.isEmpty {
            // Nothing ahead of it: it moves the committable offset at once and need not be kept.
            partitions[s].headSequence += 1
            partitions[s].committable = offset + 1
            partitions[s].dirty = true
        } else {
            partitions[s].append(record, offset: offset, after: last)
            if !record.isSettled {
                held += 1
                groupCounts[group] += 1
            }
        }
        let ticket = LedgerTicket(slot: slot, epoch: partitions[s].epoch, sequence: sequence)
        if let forgotten { return .restarted(ticket, forgotten: forgotten) }
        return .admitted(ticket)
    }

    /// The record's outcome is known and `outputs` output events about it are on their way to the broker. Returns
    /// its entry (the ledger keeps no copy) and offset, or nil for a ticket of an ended epoch or a record already
    /// resolved.
    @inlinable
    public mutating func resolve(_ ticket: LedgerTicket, outputs: Int) -> (entry: Entry?, offset: Int64)? {
        resolve(ticket) { _ in outputs }
    }

    /// ``resolve(_:outputs:)`` when how many output events there are depends on the record's entry.
    @inlinable
    public mutating func resolve(_ ticket: LedgerTicket, outputs: (Entry?) -> Int) -> (entry: Entry?, offset: Int64)? {
        guard let (s, i) = locate(ticket) else { return nil }
        // One access to the record for all of it.
        guard let entry = Self.takeOutcome(&partitions[s].records[i], outputs) else { return nil }
        let offset = partitions[s].offset(at: i)
        settledIfDone(s, i)
        return (entry, offset)
    }

    /// Marks `record`'s outcome known and takes its entry (the outer optional is nil when it was known already).
    @inlinable
    static func takeOutcome(_ record: inout Record, _ outputs: (Entry?) -> Int) -> Entry?? {
        guard !record.outcomeKnown else { return nil }
        let entry = record.entry.take()
        record.outcomeKnown = true
        record.pendingOutputs += UInt8(outputs(entry))
        return .some(entry)
    }

    /// The entry of a record whose outcome is not known yet (nil for a ticket of an ended epoch or a record resolved).
    @inlinable
    public func entry(_ ticket: LedgerTicket) -> Entry? {
        guard let (s, i) = locate(ticket) else { return nil }
        return partitions[s].records[i].entry
    }

    /// The ticket of the record at `offset` in the partition's current epoch (a binary search: for tools and
    /// tests; the hot path keeps tickets).
    @inlinable
    public func ticket(slot: UInt32, offset: Int64) -> LedgerTicket? {
        let s = Int(slot)
        var low = 0
        var high = partitions[s].records.count - 1
        while low <= high {
            let mid = (low + high) / 2
            let value = partitions[s].offset(at: mid)
            if value == offset {
                return LedgerTicket(slot: slot, epoch: partitions[s].epoch, sequence: partitions[s].headSequence + UInt64(mid))
            }
            if value < offset { low = mid + 1 } else { high = mid - 1 }
        }
        return nil
    }

    /// The partition a slot stands for.
    @inlinable
    public func topicPartition(slot: UInt32) -> TopicPartition { partitions[Int(slot)].topicPartition }

    /// More output events about a record whose outcome is known are on their way (ignored for an ended epoch).
    @inlinable
    public mutating func outputsPending(_ ticket: LedgerTicket, _ outputs: Int) {
        guard let (s, i) = locate(ticket), !partitions[s].records[i].isSettled else { return }
        partitions[s].records[i].pendingOutputs += UInt8(outputs)
    }

    /// The broker acknowledged an output event about the record (ignored for an ended epoch).
    @inlinable
    public mutating func acknowledged(_ ticket: LedgerTicket) {
        guard let (s, i) = locate(ticket), partitions[s].records[i].pendingOutputs > 0 else { return }
        partitions[s].records[i].pendingOutputs -= 1
        settledIfDone(s, i)
    }

    @inlinable
    func locate(_ ticket: LedgerTicket) -> (Int, Int)? {
        let s = Int(ticket.slot)
        guard s < partitions.count, let i = partitions[s].index(of: ticket) else { return nil }
        return (s, i)
    }

    @inlinable
    mutating func settledIfDone(_ s: Int, _ i: Int) {
        guard partitions[s].records[i].isSettled else { return }
        held -= 1
        groupCounts[Int(partitions[s].records[i].group)] -= 1
        guard i == 0 else { return }
        if settledHeads != nil {
            settledHeads!.append(s)
        } else {
            removeSettledHead(s)
        }
    }

    /// The settled run at a partition's head leaves: one removal, one committable offset.
    @inlinable
    mutating func removeSettledHead(_ s: Int) {
        let settled = partitions[s].records.prefixCount { $0.isSettled }
        // None when the partition restarted after its head settled in the same batch.
        guard settled > 0 else { return }
        partitions[s].committable = partitions[s].removeFirst(settled) + 1
        partitions[s].dirty = true
    }

    /// Runs `body`, which settles a batch (``resolve(_:outputs:)``, ``acknowledged(_:)``), with the removal of
    /// settled records put off to its end: each partition's settled prefix then leaves in one removal, where
    /// settling in order removed the head one record at a time. The counts (``count``, ``held(group:)``) change at
    /// once, the committable offsets when `body` returns; a record settled and not yet removed is never resolved or
    /// acknowledged again, and a restart forgets it as it would have.
    @inlinable
    public mutating func settlingBatch<R>(_ body: (inout Self) throws -> R) rethrows -> R {
        precondition(settledHeads == nil, "settling batches do not nest")
        settledHeads = []
        defer {
            let heads = settledHeads!
            settledHeads = nil
            for s in heads { removeSettledHead(s) }
        }
        return try body(&self)
    }

    // MARK: Reading

    /// Unsettled records that count in `group`.
    @inlinable
    public func held(group: Group) -> Int { groupCounts[group] }

    /// The committable offset of a partition in its current epoch, if it moved at all.
    @inlinable
    public func committable(_ partition: TopicPartition) -> Int64? {
        slots[partition].flatMap { partitions[$0].committable }
    }

    /// Unsettled records of one partition.
    @inlinable
    public func unsettled(_ partition: TopicPartition) -> Int {
        guard let slot = slots[partition] else { return 0 }
        return partitions[slot].records.reduce(0) { $0 + ($1.isSettled ? 0 : 1) }
    }

    /// The partitions whose committable offset moved since the last call, with that offset; clears the marks.
    @inlinable
    public mutating func takeCommittable() -> [(TopicPartition, Int64)] {
        var result: [(TopicPartition, Int64)] = []
        for s in partitions.indices where partitions[s].dirty {
            partitions[s].dirty = false
            if let offset = partitions[s].committable { result.append((partitions[s].topicPartition, offset)) }
        }
        return result
    }
}
