/// Decides which partitions the consumer pauses and resumes, from the pipeline's unsettled records and the
/// assignment. Pure: the consumer's poll loop asks it once per turn and applies the answer.
///
/// - Hysteresis: fetching pauses at `limit` unsettled records and resumes only at three quarters of it, because
///   pausing drops librdkafka's prefetched records (they are fetched again on resume).
/// - A new assignment while full is paused too.
/// - A resume names every partition paused since the last resume, assigned now or not. librdkafka keeps a
///   partition's pause across revocation and reassignment, and a rebalance makes the unsettled records of revoked
///   partitions stop counting, so the resume often comes while the paused partitions are not assigned. Resuming
///   only the assignment of that moment left them paused when they came back: the consumer stayed assigned and
///   idle for good after a broker restart or a member joining under a full pipeline.
public struct FetchThrottle: Sendable, Equatable {
    /// What to do, and to which partitions.
    public enum Action: Sendable, Equatable {
        case pause([TopicPartition])
        case resume([TopicPartition])
    }

    public let limit: Int
    /// Whether fetching is paused.
    public private(set) var paused = false
    private var pausedGeneration = 0
    private var pausedPartitions: Set<TopicPartition> = []

    public init(limit: Int) {
        self.limit = limit
    }

    /// The action to apply now, if any.
    /// - Parameters:
    ///   - outstanding: records polled and not yet settled (`Int.max` while fetching is suspended for shutdown).
    ///   - assignment: the partitions assigned now.
    ///   - generation: a number that changes whenever the assignment changes.
    public mutating func next(outstanding: Int, assignment: [TopicPartition], generation: Int) -> Action? {
        if outstanding >= limit {
            guard !paused || generation != pausedGeneration else { return nil }
            paused = true
            pausedGeneration = generation
            pausedPartitions.formUnion(assignment)
            return .pause(assignment)
        }
        guard paused, outstanding <= limit * 3 / 4 else { return nil }
        paused = false
        let resumed = pausedPartitions.sorted()
        pausedPartitions = []
        return .resume(resumed)
    }
}
