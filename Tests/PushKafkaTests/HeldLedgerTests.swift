import PushCore
import Testing
@testable import PushKafka

@Suite struct HeldLedgerTests {
    let p0 = TopicPartition(topic: "t", partition: 0)
    let p1 = TopicPartition(topic: "t", partition: 1)

    /// Admits `offsets` of `partition` as deliveries of group 1; returns their tickets.
    func admit(_ l: inout HeldLedger<String>, _ partition: TopicPartition, _ offsets: some Sequence<Int64>) -> [LedgerTicket] {
        let slot = l.slot(for: partition)
        return offsets.map { l.admit(slot: slot, offset: $0, group: 1, entry: "e\($0)").ticket }
    }

    @Test func outOfOrderOutcomesCommitOnlyTheContiguousPrefix() {
        var l = HeldLedger<String>(groups: 1)
        let t = admit(&l, p0, 10...14)
        #expect(l.count == 5)
        #expect(l.resolve(t[2], outputs: 0)?.entry == "e12")
        #expect(l.resolve(t[4], outputs: 0)?.offset == 14)
        #expect(l.committable(p0) == nil)
        _ = l.resolve(t[0], outputs: 0)
        #expect(l.committable(p0) == 11)
        _ = l.resolve(t[1], outputs: 0)
        #expect(l.committable(p0) == 13)
        _ = l.resolve(t[3], outputs: 0)
        #expect(l.committable(p0) == 15)
        #expect(l.count == 0)
        #expect(l.held(group: 1) == 0)
    }

    @Test func anUnacknowledgedOutputEventHoldsTheOffsetBack() {
        var l = HeldLedger<String>(groups: 1)
        let t = admit(&l, p0, 0...1)
        _ = l.resolve(t[0], outputs: 1)  // its delivery-error event is on its way to the broker
        _ = l.resolve(t[1], outputs: 0)
        #expect(l.committable(p0) == nil)
        #expect(l.count == 1)
        l.acknowledged(t[0])
        #expect(l.committable(p0) == 2)
        #expect(l.count == 0)
    }

    @Test func aRecordRejectedAtAdmissionSettlesWithItsErrorEvent() {
        var l = HeldLedger<String>(groups: 1)
        let slot = l.slot(for: p0)
        let rejected = l.admit(slot: slot, offset: 0, group: HeldLedger<String>.noGroup, entry: nil, outcomeKnown: true, outputs: 1)
        let delivered = l.admit(slot: slot, offset: 1, group: 1, entry: "e1").ticket
        #expect(l.count == 2)
        #expect(l.held(group: 1) == 1)
        #expect(l.held(group: HeldLedger<String>.noGroup) == 1)
        _ = l.resolve(delivered, outputs: 0)
        #expect(l.committable(p0) == nil)
        #expect(l.resolve(rejected.ticket, outputs: 0) == nil)  // its outcome was known already
        l.acknowledged(rejected.ticket)
        #expect(l.committable(p0) == 2)
        #expect(l.count == 0)
    }

    @Test func aRecordIsResolvedOnceAndItsEntryIsNotKept() {
        var l = HeldLedger<String>(groups: 1)
        let t = admit(&l, p0, [7])
        #expect(l.resolve(t[0], outputs: 1)?.entry == "e7")
        #expect(l.resolve(t[0], outputs: 1) == nil)
        l.acknowledged(t[0])
        l.acknowledged(t[0])  // a second acknowledgement changes nothing
        #expect(l.count == 0)
        #expect(l.committable(p0) == 8)
    }

    @Test func takeCommittableReportsEachMoveOnce() {
        var l = HeldLedger<String>(groups: 1)
        let a = admit(&l, p0, 0...2)
        let b = admit(&l, p1, 5...6)
        _ = l.resolve(a[0], outputs: 0)
        _ = l.resolve(b[0], outputs: 0)
        _ = l.resolve(b[1], outputs: 0)
        let moved = Dictionary(uniqueKeysWithValues: l.takeCommittable().map { ($0.0, $0.1) })
        #expect(moved == [p0: 1, p1: 7])
        #expect(l.takeCommittable().isEmpty)
    }

    /// Revoke and reassign the same partition to the same member while outcomes are in flight: the old epoch's
    /// outcomes are ignored; they neither advance nor stall the new epoch's commits.
    @Test func settlementsOfARevokedEpochAreIgnored() {
        var l = HeldLedger<String>(groups: 1)
        l.assign([p0])
        let old = admit(&l, p0, 0...3)
        _ = l.resolve(old[0], outputs: 0)
        let moved = l.revoke([p0])
        #expect(moved.map(\.1) == [1])  // the settled prefix is committed before the release
        #expect(l.count == 0)
        #expect(l.held(group: 1) == 0)
        l.assign([p0])
        // The same records come again (the next owner is this member), and then newer ones.
        let new = admit(&l, p0, 1...5)
        #expect(new.first?.epoch != old[1].epoch)
        // Late outcomes of the old epoch: same slot, same sequences, another epoch.
        for t in old.dropFirst() { #expect(l.resolve(t, outputs: 0) == nil) }
        for t in old { l.acknowledged(t) }
        #expect(l.committable(p0) == nil)
        #expect(l.count == 5)
        for t in new { _ = l.resolve(t, outputs: 0) }
        #expect(l.committable(p0) == 6)
        #expect(l.count == 0)
    }

    @Test func aBackwardOffsetRestartsThePartitionInsteadOfTrapping() {
        var l = HeldLedger<String>(groups: 1)
        let slot = l.slot(for: p0)
        let old = admit(&l, p0, 100...102)
        _ = l.resolve(old[0], outputs: 0)
        _ = l.takeCommittable()
        // auto.offset.reset sends the partition back to 40
        let admission = l.admit(slot: slot, offset: 40, group: 1, entry: "e40")
        #expect(admission == .restarted(admission.ticket, forgotten: 2))
        #expect(l.count == 1)
        #expect(l.committable(p0) == nil)  // nothing of the old epoch is committed by the new one
        #expect(l.resolve(old[1], outputs: 0) == nil)
        _ = l.resolve(admission.ticket, outputs: 0)
        #expect(l.takeCommittable().map(\.1) == [41])
        // An equal offset restarts too.
        let again = l.admit(slot: slot, offset: 41, group: 1, entry: "x")
        #expect(again == .admitted(again.ticket))
        if case .restarted = l.admit(slot: slot, offset: 41, group: 1, entry: "y") {} else { Issue.record("not restarted") }
    }

    @Test func groupsCountTheirUnsettledRecords() {
        var l = HeldLedger<String>(groups: 2)
        let slot = l.slot(for: p0)
        let a = l.admit(slot: slot, offset: 0, group: 1, entry: "a").ticket
        let b = l.admit(slot: slot, offset: 1, group: 2, entry: "b").ticket
        _ = l.admit(slot: slot, offset: 2, group: 2, entry: "c")
        #expect(l.held(group: 1) == 1)
        #expect(l.held(group: 2) == 2)
        _ = l.resolve(b, outputs: 0)
        #expect(l.held(group: 2) == 1)
        _ = l.resolve(a, outputs: 1)
        #expect(l.held(group: 1) == 1)  // until its output event is acknowledged
        l.acknowledged(a)
        #expect(l.held(group: 1) == 0)
        _ = l.revoke([p0])
        #expect(l.held(group: 2) == 0)
        #expect(l.count == 0)
    }

    /// Records keep no offset of their own: with gaps among the offsets (a compacted topic, transaction markers),
    /// outcomes in any order still give each record's offset, commit exactly the settled prefix and find tickets by
    /// offset (checked against a plain list of the records over seeded random gaps and outcome orders).
    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func offsetsWithGapsAreKeptExactly(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        func next() -> UInt64 { random.next() }
        var l = HeldLedger<String>(groups: 1)
        let slot = l.slot(for: p0)
        var offset = Int64(next() % 1000)
        var model: [(offset: Int64, ticket: LedgerTicket, settled: Bool)] = []
        var head = 0  // the model's settled prefix ends here
        var committable: Int64?
        var open: [Int] = []  // places in the model whose outcome is not known
        for _ in 0..<3000 {
            if next() % 3 != 0 {
                // The next record: right after the last, or past a gap (so runs are one record long at times).
                offset += next() % 4 == 0 ? Int64(2 + next() % 50) : 1
                let ticket = l.admit(slot: slot, offset: offset, group: 1, entry: "e\(offset)").ticket
                open.append(model.count)
                model.append((offset, ticket, false))
            } else if !open.isEmpty {
                let place = open.remove(at: Int(next() % UInt64(open.count)))
                let (expected, ticket, _) = model[place]
                #expect(l.ticket(slot: slot, offset: expected) == ticket)
                let resolved = l.resolve(ticket, outputs: 0)
                #expect(resolved?.offset == expected)
                #expect(resolved?.entry == "e\(expected)")
                model[place].settled = true
                while head < model.count, model[head].settled {
                    committable = model[head].offset + 1
                    head += 1
                }
                #expect(l.committable(p0) == committable)
            }
            #expect(l.count == open.count)
        }
    }

    /// A batch settles as the same outcomes one by one would, but removes a partition's settled prefix once, at
    /// its end: the counts move at once, the committable offsets when the batch ends.
    @Test func aBatchRemovesTheSettledPrefixAtItsEnd() {
        var l = HeldLedger<String>(groups: 1)
        let t0 = admit(&l, p0, 0...4)
        let t1 = admit(&l, p1, 20...22)
        l.settlingBatch { l in
            for ticket in t0[0...2] { #expect(l.resolve(ticket, outputs: 0) != nil) }
            #expect(l.resolve(t1[0], outputs: 1)?.offset == 20)
            #expect(l.resolve(t1[1], outputs: 0)?.offset == 21)
            #expect(l.count == 4)  // t1[0] waits for its error event's acknowledgement
            #expect(l.held(group: 1) == 4)
            #expect(l.committable(p0) == nil)
            // Settled and not yet removed: resolved or acknowledged again, nothing changes.
            #expect(l.resolve(t0[0], outputs: 0) == nil)
            l.acknowledged(t0[1])
            #expect(l.count == 4)
        }
        #expect(l.committable(p0) == 3)
        #expect(l.committable(p1) == nil)  // its first record's error event is not acknowledged
        #expect(l.partitions[Int(l.slot(for: p0))].records.count == 2)
        #expect(l.entry(t0[3]) == "e3")
        l.settlingBatch { l in l.acknowledged(t1[0]) }
        #expect(l.committable(p1) == 22)
        #expect(l.count == 3)
    }

    /// A partition that restarts after its head settled in the same batch keeps its new epoch's records.
    @Test func aRestartWithinABatchForgetsOnlyTheOldEpoch() {
        var l = HeldLedger<String>(groups: 1)
        let old = admit(&l, p0, 0...2)
        var new: [LedgerTicket] = []
        l.settlingBatch { l in
            _ = l.resolve(old[0], outputs: 0)
            _ = l.revoke([p0])
            l.assign([p0])
            new = admit(&l, p0, 0...1)
        }
        #expect(l.count == 2)
        #expect(l.committable(p0) == nil)
        #expect(l.entry(new[0]) == "e0")
        _ = l.resolve(new[0], outputs: 0)
        #expect(l.committable(p0) == 1)
    }

    /// Seeded random admissions, outcomes and acknowledgements over two partitions, settled in batches of random
    /// length in one ledger and one at a time in another: after every batch both have the same counts and
    /// committable offsets.
    @Test(arguments: [11, 12, 13, 14] as [UInt64])
    func batchesSettleAsOutcomesOneByOne(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        func next() -> UInt64 { random.next() }
        var batched = HeldLedger<String>(groups: 2)
        var single = HeldLedger<String>(groups: 2)
        let partitions = [p0, p1]
        var offsets: [Int64] = [0, 100]
        var open: [LedgerTicket] = []  // outcome not known
        var unacknowledged: [LedgerTicket] = []  // an output event on its way
        for _ in 0..<400 {
            for _ in 0..<Int(next() % 8) {
                let p = Int(next() % 2)
                offsets[p] += next() % 5 == 0 ? 3 : 1
                let group = 1 + Int(next() % 2)
                let a = batched.admit(slot: batched.slot(for: partitions[p]), offset: offsets[p], group: group, entry: "e")
                let b = single.admit(slot: single.slot(for: partitions[p]), offset: offsets[p], group: group, entry: "e")
                #expect(a == b)
                open.append(a.ticket)
            }
            var settles: [(LedgerTicket, outputs: Int?)] = []  // nil: an acknowledgement
            for _ in 0..<Int(next() % 12) {
                if !unacknowledged.isEmpty, next() % 4 == 0 {
                    settles.append((unacknowledged.remove(at: Int(next() % UInt64(unacknowledged.count))), nil))
                } else if !open.isEmpty {
                    // Mostly the oldest, as a connection accepts in order; at times any.
                    let place = next() % 3 == 0 ? Int(next() % UInt64(open.count)) : 0
                    let ticket = open.remove(at: place)
                    let outputs = next() % 6 == 0 ? 1 : 0
                    if outputs > 0 { unacknowledged.append(ticket) }
                    settles.append((ticket, outputs))
                }
            }
            batched.settlingBatch { l in
                for (ticket, outputs) in settles {
                    if let outputs { _ = l.resolve(ticket, outputs: outputs) } else { l.acknowledged(ticket) }
                }
            }
            for (ticket, outputs) in settles {
                if let outputs { _ = single.resolve(ticket, outputs: outputs) } else { single.acknowledged(ticket) }
            }
            #expect(batched.count == single.count)
            #expect(batched.held(group: 1) == single.held(group: 1))
            #expect(batched.held(group: 2) == single.held(group: 2))
            for p in partitions {
                #expect(batched.committable(p) == single.committable(p))
                #expect(batched.unsettled(p) == single.unsettled(p))
                let slot = Int(batched.slot(for: p))
                #expect(batched.partitions[slot].records.count == single.partitions[slot].records.count)
            }
        }
        #expect(batched.takeCommittable().map(\.1) == single.takeCommittable().map(\.1))
    }

    @Test func ticketsAreFoundByOffset() {
        var l = HeldLedger<String>(groups: 1)
        let t = admit(&l, p0, [3, 5, 9])
        let slot = l.slot(for: p0)
        #expect(l.ticket(slot: slot, offset: 5) == t[1])
        #expect(l.ticket(slot: slot, offset: 4) == nil)
        _ = l.resolve(t[0], outputs: 0)
        #expect(l.ticket(slot: slot, offset: 9) == t[2])
    }

    /// A ticket keeps its place's low 32 bits: across 2^32 records of one epoch, tickets still find their records,
    /// and the ticket of a record settled and gone settles nothing (its place, modulo 2^32, is behind the head).
    @Test func ticketsFindTheirRecordsAcrossTheirPlacesWrap() {
        var l = HeldLedger<String>(groups: 1)
        let slot = l.slot(for: p0)
        l.partitions[Int(slot)].headSequence = UInt64(UInt32.max) - 1  // as after 2^32 - 2 records settled
        let t = admit(&l, p0, 100...103)
        #expect(t.map(\.sequence) == [UInt32.max - 1, UInt32.max, 0, 1])
        #expect(l.resolve(t[3], outputs: 0)?.entry == "e103")
        #expect(l.resolve(t[2], outputs: 0)?.entry == "e102")
        #expect(l.committable(p0) == nil)
        _ = l.resolve(t[0], outputs: 1)
        _ = l.resolve(t[1], outputs: 0)
        #expect(l.committable(p0) == nil)  // t[0]'s output event is not acknowledged yet
        l.acknowledged(t[0])
        #expect(l.committable(p0) == 104)
        #expect(l.count == 0)
        // Gone: a second acknowledgement or outcome of them changes nothing, and new records are found.
        l.acknowledged(t[0])
        #expect(l.resolve(t[2], outputs: 0) == nil)
        let next = admit(&l, p0, [104])
        #expect(next[0].sequence == 2)
        #expect(l.entry(next[0]) == "e104")
        #expect(l.entry(t[2]) == nil)
    }

    @Test func aTicketIsOneWord() {
        #expect(MemoryLayout<LedgerTicket>.size == 8)
        let t = LedgerTicket(slot: UInt32(LedgerTicket.slotLimit - 1), epoch: 4097, sequence: UInt64(UInt32.max) + 5)
        #expect(t.slot == UInt32(LedgerTicket.slotLimit - 1))
        #expect(t.epoch == 1)
        #expect(t.sequence == 4)
    }
}
