import Testing
@testable import PushSimulator

/// `--token-rate`: at most N accepted requests per device token per second of the clock.
struct TokenRateLimitTests {
    @Test func aTokenGetsItsRatePerSecondAndOthersTheirOwn() {
        var limit = TokenRateLimit(limit: 2)
        let a: [UInt8] = [1, 2, 3]
        let b: [UInt8] = [4, 5, 6]
        let first = (0..<3).map { _ in limit.admit(a, second: 100) }
        let other = limit.admit(b, second: 100)
        let next = (0..<3).map { _ in limit.admit(a, second: 101) }  // the next second starts again
        #expect(first == [true, true, false])
        #expect(other)
        #expect(next == [true, true, false])
    }
}
