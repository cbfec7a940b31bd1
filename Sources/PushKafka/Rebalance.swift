import Crdkafka
import Logging
import Synchronization

/// What the rebalance callback needs; it outlives the client handle (the consumer holds it).
final class RebalanceContext: Sendable {
    let sink: any RecordSink
    let logger: Logger
    private let state = Mutex<(assignment: [TopicPartition], generation: Int)>(([], 0))
    private let offsets = Mutex(UnconfirmedOffsets())
    /// Set once the consumer stops fetching for shutdown.
    let stopping = Atomic<Bool>(false)

    init(sink: any RecordSink, logger: Logger) {
        self.sink = sink
        self.logger = logger
    }

    var assignment: [TopicPartition] { state.withLock { $0.assignment } }
    var generation: Int { state.withLock { $0.generation } }
    var assignmentAndGeneration: (partitions: [TopicPartition], generation: Int) {
        state.withLock { ($0.assignment, $0.generation) }
    }

    func assigned(_ partitions: [TopicPartition], incremental: Bool) {
        state.withLock { s in
            s.assignment = incremental ? Array(Set(s.assignment).union(partitions)) : partitions
            s.generation += 1
        }
    }

    /// Offsets stored and not confirmed by a commit yet.
    var unconfirmed: UnconfirmedOffsets { offsets.withLock { $0 } }

    func stored(_ moved: [(TopicPartition, Int64)]) {
        offsets.withLock { $0.stored(moved) }
    }

    func revokeCommitted(_ partitions: [TopicPartition], committed: Bool, stopping: Bool) {
        offsets.withLock { $0.revokeCommitted(partitions, committed: committed, stopping: stopping) }
    }

    func revoked(_ partitions: [TopicPartition], incremental: Bool) {
        state.withLock { s in
            s.assignment = incremental ? s.assignment.filter { !partitions.contains($0) } : []
            s.generation += 1
        }
    }
}

/// Assignment and revocation, on the poll thread. On revoke, the settled prefix of every revoked partition is
/// stored and committed synchronously; what is not settled is left uncommitted for the next owner.
func rebalanceCallback(
    client: OpaquePointer?, error: rd_kafka_resp_err_t,
    partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, opaque: UnsafeMutableRawPointer?
) {
    guard let client, let partitions, let opaque else { return }
    let context = Unmanaged<RebalanceContext>.fromOpaque(opaque).takeUnretainedValue()
    let incremental = String(cString: rd_kafka_rebalance_protocol(client)) == "COOPERATIVE"
    let list = partitions.pointee.entries.map(\.0)
    switch error {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        context.logger.info("partitions assigned", metadata: ["partitions": "\(list)"])
        if incremental {
            rd_kafka_error_destroy(rd_kafka_incremental_assign(client, partitions))
        } else {
            rd_kafka_assign(client, partitions)
        }
        context.sink.assigned(list)
        context.assigned(list, incremental: incremental)
    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
        // Every partition whose settled prefix moved is stored (for the partitions kept in a cooperative revoke),
        // then the offsets known for the revoked ones are committed, by name: after an assignment was lost and
        // given again, librdkafka has forgotten what was stored before, and a kept offset must not be.
        let settled = context.sink.revoked(list)
        if !settled.isEmpty {
            context.stored(settled)
            let store = PartitionList(settled)
            _ = withExtendedLifetime(store) { rd_kafka_offsets_store(client, store.pointer) }
        }
        let known = context.unconfirmed.toCommit(revoking: list)
        var commit = RD_KAFKA_RESP_ERR__NO_OFFSET
        if !known.isEmpty {
            let named = PartitionList(known)
            commit = withExtendedLifetime(named) { rd_kafka_commit(client, named.pointer, 0) }
        }
        context.revokeCommitted(
            list, committed: commit == RD_KAFKA_RESP_ERR_NO_ERROR, stopping: context.stopping.load(ordering: .relaxed))
        context.logger.info("partitions revoked", metadata: [
            "partitions": "\(list)", "commit": "\(String(cString: rd_kafka_err2str(commit)))",
        ])
        if incremental {
            rd_kafka_error_destroy(rd_kafka_incremental_unassign(client, partitions))
        } else {
            rd_kafka_assign(client, nil)
        }
        context.revoked(list, incremental: incremental)
    default:
        context.logger.error("rebalance failed", metadata: ["error": "\(String(cString: rd_kafka_err2str(error)))"])
        rd_kafka_assign(client, nil)
        _ = context.sink.revoked(context.assignment)
        context.revoked(list, incremental: false)
    }
}
