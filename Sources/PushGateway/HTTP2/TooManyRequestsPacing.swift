import PushCore

/// Apple answers 429 TooManyRequests when one device token gets too many requests in a short time, so the delay
/// before a retry is the token's, not the notification's (SPEC section 9: "a delay that grows per device token"):
/// every 429 a token draws doubles the delay of the retries that follow it, from `initialDelay` up to
/// `maximumDelay`, whichever notification drew it. Ten notifications to one chatty token that meet 429 together are
/// retried 1, 2, 4 ... steps apart instead of together again, and a token that keeps drawing 429s waits the longest.
/// Retries to one token are also at least one first step (`initialDelay`) apart: once the delay has reached its
/// maximum, the notifications that meet 429 together would otherwise all be retried together at that maximum, meet
/// 429 together again, and a burst of a few dozen to one device would use up its attempts. A token that draws none
/// for `forgetAfter` starts again from `initialDelay`.
///
/// Pure. It remembers at most `capacity` tokens: when full it forgets the ones quiet for `forgetAfter` (at most
/// once per `forgetAfter / 8`), and a token that still finds no room gets the first step's delay.
struct TooManyRequestsPacing: Sendable {
    let initialDelay: Duration
    let maximumDelay: Duration
    let forgetAfter: Duration
    let capacity: Int

    private struct Strikes {
        var count: Int
        /// When its last 429 arrived.
        var last: ContinuousClock.Instant
        /// The earliest time the next retry to it may go (one first step after the last one given).
        var nextRetry: ContinuousClock.Instant
    }

    private var tokens: [DeviceToken: Strikes] = [:]
    private var lastSweep: ContinuousClock.Instant?

    init(initialDelay: Duration, maximumDelay: Duration, forgetAfter: Duration? = nil, capacity: Int = 65_536) {
        self.initialDelay = initialDelay
        self.maximumDelay = max(initialDelay, maximumDelay)
        self.forgetAfter = forgetAfter ?? self.maximumDelay * 2
        self.capacity = capacity
    }

    /// Tokens remembered.
    var count: Int { tokens.count }

    /// A 429 for `token` arrived at `now`: how long a retry to it waits.
    mutating func tooManyRequests(for token: DeviceToken, now: ContinuousClock.Instant) -> Duration {
        if var strikes = tokens[token] {
            strikes.count = now - strikes.last > forgetAfter ? 1 : strikes.count + 1
            strikes.last = now
            let retry = max(now + initialDelay.doubled(strikes.count - 1, atMost: maximumDelay), strikes.nextRetry)
            strikes.nextRetry = retry + initialDelay
            tokens[token] = strikes
            return retry - now
        }
        if tokens.count >= capacity { forgetQuiet(now: now) }
        if tokens.count < capacity {
            tokens[token] = Strikes(count: 1, last: now, nextRetry: now + initialDelay + initialDelay)
        }
        return initialDelay
    }

    private mutating func forgetQuiet(now: ContinuousClock.Instant) {
        if let lastSweep, now - lastSweep < forgetAfter / 8 { return }
        lastSweep = now
        let forgetAfter = self.forgetAfter
        tokens = tokens.filter { now - $0.value.last <= forgetAfter }
    }
}
