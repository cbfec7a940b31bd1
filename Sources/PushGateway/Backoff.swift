import PushCore

/// Exponential backoff with full jitter: after the n-th consecutive failure the next attempt waits a random time
/// in [0, min(max, initial × 2^(n-1))]. It resets once a connection has stayed healthy for `resetAfter`.
struct Backoff<Instant: InstantProtocol> where Instant.Duration == Duration {
    let initial: Duration
    let maximum: Duration
    let resetAfter: Duration
    private(set) var consecutiveFailures = 0
    private var healthySince: Instant?
    private var random: SplitMix64

    init(initial: Duration, maximum: Duration, resetAfter: Duration, seed: UInt64) {
        self.initial = initial
        self.maximum = maximum
        self.resetAfter = resetAfter
        self.random = SplitMix64(seed: seed)
    }

    /// The ceiling of the next delay: min(max, initial × 2^(failures-1)); zero when nothing failed.
    var ceiling: Duration {
        guard consecutiveFailures > 0 else { return .zero }
        return initial.doubled(consecutiveFailures - 1, atMost: maximum)
    }

    /// Records a failure (status 10, refused connection, failed handshake) and returns how long to wait.
    mutating func failed() -> Duration {
        consecutiveFailures += 1
        healthySince = nil
        let ceiling = self.ceiling
        return ceiling * random.nextUnitInterval()
    }

    /// A connection is up; if it is still healthy `resetAfter` later, the failures are forgotten.
    mutating func connected(at now: Instant) {
        if healthySince == nil { healthySince = now }
    }

    /// Called as time passes while a connection is healthy.
    mutating func stillHealthy(at now: Instant) {
        if let since = healthySince, since.advanced(by: resetAfter) <= now {
            consecutiveFailures = 0
        }
    }
}

/// A token bucket over new connections: at most `perMinute` a minute on average, `burst` at once.
struct ConnectRateLimiter<Instant: InstantProtocol> where Instant.Duration == Duration {
    let perMinute: Int
    let burst: Int
    private var tokens: Double
    private var updatedAt: Instant

    init(perMinute: Int, burst: Int, now: Instant) {
        self.perMinute = perMinute
        self.burst = max(1, burst)
        self.tokens = Double(self.burst)
        self.updatedAt = now
    }

    private mutating func refill(_ now: Instant) {
        let elapsed = updatedAt.duration(to: now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        tokens = min(Double(burst), tokens + seconds * Double(perMinute) / 60)
        updatedAt = now
    }

    /// Takes a token: returns zero when one is there, else reserves the next one and says how long until it is
    /// due. A reservation is a debt (tokens go below zero) that later refills repay first, so that attempts made
    /// after their wait never add up to more than `burst + perMinute × minutes`.
    mutating func acquire(now: Instant) -> Duration {
        refill(now)
        tokens -= 1
        if tokens >= 0 { return .zero }
        return .seconds(-tokens * 60 / Double(perMinute))
    }
}

extension Duration {
    /// This duration doubled `times` times, at most `maximum`: the delay after `times + 1` failures in a row.
    func doubled(_ times: Int, atMost maximum: Duration) -> Duration {
        min(maximum, self * Double(sign: .plus, exponent: min(max(times, 0), 40), significand: 1))
    }
}
