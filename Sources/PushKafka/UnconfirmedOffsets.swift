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
    /// Partitions whose offset was kept from a revoke whose commit failed, and not stored again since: the group
    /// may have moved past it (the next owner committed), even where the partition has come back to this member.
    private(set) var keptFromRevoke: Set<TopicPartition> = []

    /// Records offsets stored for auto-commit (the settled prefix moved).
    mutating func stored(_ moved: [(TopicPartition, Int64)]) {
        for (partition, offset) in moved {
            offsets[partition] = offset
            keptFromRevoke.remove(partition)
        }
    }

    /// What a revoke of `partitions` commits: the offsets known for them.
    func toCommit(revoking partitions: [TopicPartition]) -> [(TopicPartition, Int64)] {
        partitions.compactMap { p in offsets[p].map { (p, $0) } }
    }

    /// The revoke's commit went through (the offsets need no more confirming), or failed outside a shutdown (they
    /// are forgotten). A failed commit during a shutdown keeps them for the final commit.
    mutating func revokeCommitted(_ partitions: [TopicPartition], committed: Bool, stopping: Bool) {
        if committed || !stopping {
            for p in partitions {
                offsets[p] = nil
                keptFromRevoke.remove(p)
            }
        } else {
            for p in partitions where offsets[p] != nil { keptFromRevoke.insert(p) }
        }
    }

    /// Partitions whose offsets the final commit cannot commit without asking the group what it has committed for
    /// them: those kept from a revoke and not assigned now, and those kept from a revoke, assigned again, with
    /// nothing stored since (another member may have owned them in between and committed further).
    func kept(assignment: [TopicPartition]) -> [TopicPartition] {
        let assigned = Set(assignment)
        return offsets.keys.filter { !assigned.contains($0) || keptFromRevoke.contains($0) }.sorted()
    }

    /// What the final commit commits: every offset stored in the current assignment, and every kept offset beyond
    /// what the group has committed for it (`groupCommitted`, nil where unknown: then it is committed, since a
    /// duplicate delivery is better than a lost one). A partition's next owner may have gone further meanwhile;
    /// its commit is never moved back.
    func finalCommit(assignment: [TopicPartition], groupCommitted: [TopicPartition: Int64]) -> [(TopicPartition, Int64)] {
        let assigned = Set(assignment)
        return offsets.sorted { $0.key < $1.key }.compactMap { partition, offset in
            if assigned.contains(partition), !keptFromRevoke.contains(partition) { return (partition, offset) }
            if let theirs = groupCommitted[partition], theirs >= offset { return nil }
            return (partition, offset)
        }
    }
}
