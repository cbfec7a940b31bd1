import Testing
@testable import PushKafka

@Suite struct OffsetTrackerTests {
    let p0 = TopicPartition(topic: "t", partition: 0)
    let p1 = TopicPartition(topic: "t", partition: 1)

    func settle(_ t: inout OffsetTracker, _ p: TopicPartition, _ offset: Int64) {
        t.outcomeKnown(p, offset: offset)
    }

    @Test func outOfOrderCompletionsCommitOnlyTheContiguousPrefix() {
        var t = OffsetTracker()
        for o in Int64(10)...14 { t.received(p0, offset: o) }
        settle(&t, p0, 12)
        settle(&t, p0, 14)
        #expect(t.committable(p0) == nil)
        settle(&t, p0, 10)
        #expect(t.committable(p0) == 11)
        settle(&t, p0, 11)
        #expect(t.committable(p0) == 13)
        settle(&t, p0, 13)
        #expect(t.committable(p0) == 15)
        #expect(t.outstanding == 0)
    }

    @Test func anUnacknowledgedOutputEventHoldsTheOffsetBack() {
        var t = OffsetTracker()
        t.received(p0, offset: 0)
        t.received(p0, offset: 1)
        t.outputPending(p0, offset: 0)  // its delivery-error event is on its way to the broker
        settle(&t, p0, 0)
        settle(&t, p0, 1)
        #expect(t.committable(p0) == nil)
        #expect(t.outstanding == 1)
        t.outputAcknowledged(p0, offset: 0)
        #expect(t.committable(p0) == 2)
        #expect(t.outstanding == 0)
    }

    @Test func anAcknowledgementBeforeTheOutcomeStillWaitsForTheOutcome() {
        var t = OffsetTracker()
        t.received(p0, offset: 5)
        t.outputPending(p0, offset: 5)
        t.outputAcknowledged(p0, offset: 5)
        #expect(t.committable(p0) == nil)
        settle(&t, p0, 5)
        #expect(t.committable(p0) == 6)
    }

    @Test func partitionsAreIndependentAndGapsAreFine() {
        var t = OffsetTracker()
        for o: Int64 in [3, 7, 8] { t.received(p0, offset: o) }  // gaps, as after compaction
        t.received(p1, offset: 0)
        settle(&t, p0, 3)
        settle(&t, p0, 7)
        #expect(t.committable(p0) == 8)
        #expect(t.committable(p1) == nil)
        let moved = t.takeCommittable()
        #expect(moved.count == 1 && moved[0].0 == p0 && moved[0].1 == 8)
        #expect(t.takeCommittable().isEmpty)  // nothing moved since
        settle(&t, p1, 0)
        #expect(t.takeCommittable().map(\.1) == [1])
    }

    @Test func revokedPartitionsAreForgotten() {
        var t = OffsetTracker()
        t.received(p0, offset: 0)
        t.received(p0, offset: 1)
        t.received(p1, offset: 0)
        settle(&t, p0, 0)
        t.revoke([p0])
        #expect(t.outstanding == 1)
        #expect(t.committable(p0) == nil)
        settle(&t, p0, 1)  // a late outcome for a revoked partition changes nothing
        #expect(t.outstanding == 1)
        #expect(t.unsettled(p1) == 1)
    }
}
