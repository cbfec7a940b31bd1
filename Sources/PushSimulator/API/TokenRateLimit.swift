/// Apple answers 429 TooManyRequests when a provider sends too many requests to one device token in a short time
/// (`--token-rate N`): at most `limit` requests to one token are accepted per second of the clock, across every
/// connection; the rest of that second's are refused. Pure; it remembers only the current second's tokens.
struct TokenRateLimit: Sendable {
    let limit: Int
    private var second: Int64 = .min
    private var counts: [[UInt8]: Int] = [:]

    init(limit: Int) {
        self.limit = limit
    }

    /// A request to `token` was otherwise accepted in `second` (UNIX seconds): whether it stays accepted.
    mutating func admit(_ token: [UInt8], second: Int64) -> Bool {
        if second != self.second {
            self.second = second
            counts.removeAll(keepingCapacity: true)
        }
        let count = counts[token, default: 0]
        guard count < limit else { return false }
        counts[token] = count + 1
        return true
    }
}
