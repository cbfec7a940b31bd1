import Testing
@testable import PushKafka

struct UnconfirmedOffsetsTests {
    static let p0 = TopicPartition(topic: "t", partition: 0)
    static let p1 = TopicPartition(topic: "t", partition: 1)
    static let p2 = TopicPartition(topic: "t", partition: 2)

    static func pairs(_ list: [(TopicPartition, Int64)]) -> [String] { list.map { "\($0.0)@\($0.1)" } }

    /// The rollout seen in CI: the member stopping lost its assignment (the revoke's commit failed), was given the
    /// same partition again, and revoked it once more with nothing newly stored. librdkafka's own stored offsets
    /// were gone by then, so a commit of them committed nothing and the partition was left uncommitted. The kept
    /// offset is what the second revoke commits, and it is forgotten only once that commit went through.
    @Test func anOffsetKeptFromALostAssignmentIsCommittedByTheNextRevokeOfThatPartition() {
        var offsets = UnconfirmedOffsets()
        offsets.stored([(Self.p2, 140)])
        #expect(Self.pairs(offsets.toCommit(revoking: [Self.p2])) == ["t[2]@140"])
        offsets.revokeCommitted([Self.p2], committed: false, stopping: true)
        // Given again and revoked again, nothing settled in between.
        #expect(Self.pairs(offsets.toCommit(revoking: [Self.p2])) == ["t[2]@140"])
        offsets.revokeCommitted([Self.p2], committed: false, stopping: true)
        #expect(Self.pairs(offsets.finalCommit(assignment: [], groupCommitted: [:])) == ["t[2]@140"])
        offsets.revokeCommitted([Self.p2], committed: true, stopping: true)
        #expect(offsets.offsets.isEmpty)
    }

    @Test func aFailedRevokeCommitOutsideAShutdownForgetsTheOffsets() {
        var offsets = UnconfirmedOffsets()
        offsets.stored([(Self.p0, 10), (Self.p1, 20)])
        offsets.revokeCommitted([Self.p0], committed: false, stopping: false)
        #expect(offsets.offsets == [Self.p1: 20])
        #expect(offsets.toCommit(revoking: [Self.p0]).isEmpty)
    }

    @Test func aRevokeCommitsOnlyTheRevokedPartitionsWithTheirLatestOffsets() {
        var offsets = UnconfirmedOffsets()
        offsets.stored([(Self.p0, 10), (Self.p1, 20)])
        offsets.stored([(Self.p0, 15)])
        #expect(Self.pairs(offsets.toCommit(revoking: [Self.p0, Self.p2])) == ["t[0]@15"])
        offsets.revokeCommitted([Self.p0], committed: true, stopping: false)
        #expect(offsets.offsets == [Self.p1: 20])
    }

    /// The final commit never moves back what a partition's next owner committed; what it cannot compare
    /// (unknown, or the group has less) it commits.
    @Test func theFinalCommitSkipsKeptOffsetsTheNextOwnerHasPassed() {
        var offsets = UnconfirmedOffsets()
        offsets.stored([(Self.p0, 100), (Self.p1, 200), (Self.p2, 300)])
        for p in [Self.p1, Self.p2] { offsets.revokeCommitted([p], committed: false, stopping: true) }
        #expect(offsets.kept(assignment: [Self.p0]) == [Self.p1, Self.p2])
        // p0 is assigned: committed without asking. p1: the group has 250 > 200, skipped. p2: the group has 300,
        // equal, skipped.
        #expect(Self.pairs(offsets.finalCommit(assignment: [Self.p0], groupCommitted: [Self.p1: 250, Self.p2: 300])) == ["t[0]@100"])
        // The group behind (or with no commit, -1001): committed.
        #expect(Self.pairs(offsets.finalCommit(assignment: [Self.p0], groupCommitted: [Self.p1: 199, Self.p2: -1001])) == ["t[0]@100", "t[1]@200", "t[2]@300"])
        // Unknown: committed.
        #expect(Self.pairs(offsets.finalCommit(assignment: [], groupCommitted: [:])) == ["t[0]@100", "t[1]@200", "t[2]@300"])
        // Assigned to this member again: still asked about until a newer offset is stored.
        #expect(offsets.kept(assignment: [Self.p0, Self.p1, Self.p2]) == [Self.p1, Self.p2])
    }

    /// A partition lost in a failed revoke and given back to this member before it stops: another member may have
    /// owned it in between and committed further, so its kept offset is checked against the group like any kept
    /// one, until this member stores a newer offset for it (settled in the current assignment: committed as is).
    @Test func aKeptOffsetOfAPartitionAssignedAgainIsCheckedUntilANewOneIsStored() {
        var offsets = UnconfirmedOffsets()
        offsets.stored([(Self.p0, 100), (Self.p1, 200)])
        offsets.revokeCommitted([Self.p0, Self.p1], committed: false, stopping: true)
        // Both assigned again; the group has 150 for p0 (the member between went further), 150 for p1.
        #expect(offsets.kept(assignment: [Self.p0, Self.p1]) == [Self.p0, Self.p1])
        #expect(Self.pairs(offsets.finalCommit(assignment: [Self.p0, Self.p1], groupCommitted: [Self.p0: 150, Self.p1: 150])) == ["t[1]@200"])
        // p0 settles further in the new assignment: its offset is this member's own again.
        offsets.stored([(Self.p0, 170)])
        #expect(offsets.kept(assignment: [Self.p0, Self.p1]) == [Self.p1])
        #expect(Self.pairs(offsets.finalCommit(assignment: [Self.p0, Self.p1], groupCommitted: [Self.p1: 150])) == ["t[0]@170", "t[1]@200"])
        // A revoke that commits forgets it, kept or not.
        offsets.revokeCommitted([Self.p1], committed: true, stopping: true)
        #expect(offsets.kept(assignment: [Self.p0]).isEmpty)
        #expect(offsets.keptFromRevoke.isEmpty)
    }
}
