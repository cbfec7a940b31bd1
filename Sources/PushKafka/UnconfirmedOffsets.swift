/// The offsets a consumer stored and the group has not confirmed yet: what a revoke and the final commit commit.
///
/// Pure bookkeeping, no librdkafka: the rebalance callback and the final commit ask it what to commit and tell it
/// what went through.
///
/// A revoke commits exactly the offsets known for the revoked partitions (not librdkafka's own stored offsets: those
/// are gone once an assignment was lost and given again, while these are not). When that commit fails outside a
/// shutdown the offsets are forgotten (the next owner delivers from the last commit, as it would anyway); during a
/// shutdown they are kept for the final commit, which is how members stopping together (a rollout) keep what they
/// settled while the group rebalances under them.
struct UnconfirmedOffsets: Sendable {
    private(set) var offsets: [TopicPartition: Int64] = [:]

    /// Records offsets stored for auto-commit (the settled prefix moved).
    mutating func stored(_ moved: [(TopicPartition, Int64)]) {
        for (partition, offset) in moved { offsets[partition] = offset }
    }

    /// What a revoke of `partitions` commits: the offsets known for them.
    func toCommit(revoking partitions: [TopicPartition]) -> [(TopicPartition, Int64)] {
        partitions.compactMap { p in offsets[p].map { (p, $0) } }
    }

    /// The revoke's commit went through (the offsets need no more confirming), or failed outside a shutdown (they
    /// are forgotten). A failed commit during a shutdown keeps them for the final commit.
    mutating func revokeCommitted(_ partitions: [TopicPartition], committed: Bool, stopping: Bool) {
        guard committed || !stopping else { return }
        for p in partitions { offsets[p] = nil }
    }

    /// Partitions whose offsets were kept from a revoke, not assigned to this member now: the final commit asks
    /// the group what it has committed for them before committing over it.
    func kept(assignment: [TopicPartition]) -> [TopicPartition] {
        let assigned = Set(assignment)
        return offsets.keys.filter { !assigned.contains($0) }.sorted()
    }

    /// What the final commit commits: every offset of a partition assigned now, and every kept offset beyond what
    /// the group has committed for it (`groupCommitted`, nil where unknown: then it is committed, since a
    /// duplicate delivery is better than a lost one). A partition's next owner may have gone further meanwhile;
    /// its commit is never moved back.
    func finalCommit(assignment: [TopicPartition], groupCommitted: [TopicPartition: Int64]) -> [(TopicPartition, Int64)] {
        let assigned = Set(assignment)
        return offsets.sorted { $0.key < $1.key }.compactMap { partition, offset in
            if assigned.contains(partition) { return (partition, offset) }
            if let theirs = groupCommitted[partition], theirs >= offset { return nil }
            return (partition, offset)
        }
    }
}
