/// Decides which partitions the consumer pauses and resumes, from the pipeline's held records and the
/// assignment. Pure: the consumer's poll loop asks it once per turn and applies the answer.
///
/// - Hold before pausing: at `limit` held records the consumer first stops polling (``Action/hold``) for up to
///   `holdLimit`, without pausing. Pausing drops librdkafka's prefetched records, and they are fetched again on
///   resume: a backlog read through a full pipeline was fetched several times over (most of librdkafka's CPU on a
///   broker that answers a fetch with all it has). A hold that sees the count fall to three quarters of `limit`
///   ends, and polling goes on with nothing dropped; one that lasts `holdLimit` (a gateway that is down) pauses.
///   A hold serves no rebalance (those are served inside the poll), so `holdLimit` is short.
/// - Hysteresis: fetching pauses at `limit` held records and resumes only at three quarters of it, because
///   pausing drops librdkafka's prefetched records (they are fetched again on resume).
/// - A new assignment while full is paused too.
/// - A resume names every partition paused since the last resume, assigned now or not. librdkafka keeps a
///   partition's pause across revocation and reassignment, and a rebalance makes the held records of revoked
///   partitions stop counting, so the resume often comes while the paused partitions are not assigned. Resuming
///   only the assignment of that moment left them paused when they came back: the consumer stayed assigned and
///   idle for good after a broker restart or a member joining under a full pipeline.
public struct FetchThrottle: Sendable, Equatable {
    /// What to do, and to which partitions.
    public enum Action: Sendable, Equatable {
        case pause([TopicPartition])
        case resume([TopicPartition])
        /// Poll nothing this turn (full, and the hold has time left): librdkafka keeps what it prefetched.
        case hold
    }

    public let limit: Int
    /// How long polling is held when full before fetching pauses (zero: pause at once).
    public let holdLimit: Duration
    /// Whether fetching is paused.
    public private(set) var paused = false
    /// When the current hold began (nil when not holding).
    public private(set) var holdStarted: ContinuousClock.Instant?
    /// How many holds began, since the start.
    public private(set) var holds = 0
    /// How many times fetching paused because it was full (a hold that did not drain in time, or a new assignment
    /// while full), since the start; not the pauses of a shutdown, which are not a sign of load.
    public private(set) var pauses = 0
    private var pausedGeneration = 0
    private var pausedPartitions: Set<TopicPartition> = []

    public init(limit: Int, holdLimit: Duration = .zero) {
        self.limit = limit
        self.holdLimit = holdLimit
    }

    /// The action to apply now, if any.
    /// - Parameters:
    ///   - held: records polled and not yet settled (`Int.max` while fetching is suspended for shutdown:
    ///     that pauses at once, held or not).
    ///   - assignment: the partitions assigned now.
    ///   - generation: a number that changes whenever the assignment changes.
    ///   - now: the time, for the hold.
    public mutating func next(
        held: Int, assignment: [TopicPartition], generation: Int, now: ContinuousClock.Instant = .now
    ) -> Action? {
        if let started = holdStarted {
            if held <= limit * 3 / 4 {
                holdStarted = nil
                return nil
            }
            if held != .max && now < started.advanced(by: holdLimit) { return .hold }
            holdStarted = nil
        } else if held >= limit && held != .max && !paused && holdLimit > .zero {
            holdStarted = now
            holds += 1
            return .hold
        }
        if held >= limit {
            guard !paused || generation != pausedGeneration else { return nil }
            paused = true
            pausedGeneration = generation
            pausedPartitions.formUnion(assignment)
            if held != .max { pauses += 1 }
            return .pause(assignment)
        }
        guard paused, held <= limit * 3 / 4 else { return nil }
        paused = false
        let resumed = pausedPartitions.sorted()
        pausedPartitions = []
        return .resume(resumed)
    }
}
