/// How many streams each HTTP/2 connection of a pool may hold (additive increase, multiplicative decrease): one more
/// per successful response up to `maximum` (`max_concurrent_streams`), halved when requests are lost together (a
/// cut connection, deadlines passed). Without it, the requests a cut connection held would all go out again at once
/// on the next one and meet its cut together again: a connection that fails every N requests would fail the same
/// batch until `max_attempts` ran out. The server's own SETTINGS limit applies per connection beside it. Pure.
struct StreamWindow: ConnectionCapacity, Equatable {
    let maximum: Int
    private(set) var limit: Int

    init(maximum: Int) {
        self.maximum = max(1, maximum)
        limit = self.maximum
    }

    mutating func succeeded(_ count: Int) {
        limit = min(maximum, limit + count)
    }

    /// `count` requests were lost together: at most half of them may be open at once from now on.
    mutating func streamsLost(_ count: Int) {
        guard count > 1 else { return }
        limit = max(1, min(limit, count) / 2)
    }

    mutating func lost(acceptedOnConnection accepted: Int) {
        limit = max(1, limit / 2)
    }
}
