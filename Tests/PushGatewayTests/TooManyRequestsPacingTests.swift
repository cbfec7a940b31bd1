import PushCore
import Testing
@testable import PushGateway

/// 429 TooManyRequests paces a device token's retries, whichever notifications draw it.
@Suite struct TooManyRequestsPacingTests {
    static let start = ContinuousClock.now
    static func token(_ n: UInt8) -> DeviceToken { try! DeviceToken(bytes: [UInt8](repeating: n, count: 32)) }

    func pacing(capacity: Int = 100) -> TooManyRequestsPacing {
        TooManyRequestsPacing(initialDelay: .milliseconds(500), maximumDelay: .seconds(4), capacity: capacity)
    }

    /// The delay doubles per strike up to the maximum; retries drawn together beyond it go one first step apart
    /// (not all at the maximum, together again).
    @Test func eachStrikeAgainstATokenDoublesItsDelayAndRetriesStayAStepApart() {
        var p = pacing()
        let delays = (0..<7).map { _ in p.tooManyRequests(for: Self.token(1), now: Self.start) }
        #expect(delays == [
            .milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .milliseconds(4500), .seconds(5),
            .milliseconds(5500),
        ])
        // Later strikes: the doubled delay when that is later than a step after the last retry given.
        #expect(p.tooManyRequests(for: Self.token(1), now: Self.start + .seconds(3)) == .seconds(4))
        #expect(p.tooManyRequests(for: Self.token(1), now: Self.start + .seconds(3)) == .milliseconds(4500))
    }

    /// Forty notifications to one token meet 429 at once: their retries are spread, at most two a second after
    /// the delay reached its maximum, never two at one instant.
    @Test func aBurstToOneTokenIsRetriedSpreadOut() {
        var p = pacing()
        let retries = (0..<40).map { _ in Self.start + p.tooManyRequests(for: Self.token(1), now: Self.start) }
        #expect(Set(retries).count == 40)
        for (earlier, later) in zip(retries, retries.dropFirst()) { #expect(later - earlier >= .milliseconds(500)) }
    }

    @Test func tokensArePacedApart() {
        var p = pacing()
        #expect(p.tooManyRequests(for: Self.token(1), now: Self.start) == .milliseconds(500))
        #expect(p.tooManyRequests(for: Self.token(1), now: Self.start) == .seconds(1))
        #expect(p.tooManyRequests(for: Self.token(2), now: Self.start) == .milliseconds(500))
        #expect(p.count == 2)
    }

    @Test func aTokenQuietForTwiceTheMaximumStartsAgain() {
        var p = pacing()
        _ = p.tooManyRequests(for: Self.token(1), now: Self.start)
        #expect(p.tooManyRequests(for: Self.token(1), now: Self.start + .seconds(8)) == .seconds(1))
        #expect(p.tooManyRequests(for: Self.token(1), now: Self.start + .seconds(16)) == .seconds(2))
        #expect(p.tooManyRequests(for: Self.token(1), now: Self.start + .seconds(24) + .milliseconds(1)) == .milliseconds(500))
    }

    @Test func memoryIsBoundedAndQuietTokensMakeRoom() {
        var p = pacing(capacity: 3)
        for n: UInt8 in 1...3 { _ = p.tooManyRequests(for: Self.token(n), now: Self.start) }
        // Full, and nobody quiet yet: a new token is not remembered and gets the first step.
        #expect(p.tooManyRequests(for: Self.token(4), now: Self.start + .seconds(1)) == .milliseconds(500))
        #expect(p.tooManyRequests(for: Self.token(4), now: Self.start + .seconds(1)) == .milliseconds(500))
        #expect(p.count == 3)
        // Later the first three are quiet: they are forgotten and the new one is paced.
        #expect(p.tooManyRequests(for: Self.token(5), now: Self.start + .seconds(9)) == .milliseconds(500))
        #expect(p.tooManyRequests(for: Self.token(5), now: Self.start + .seconds(9)) == .seconds(1))
        #expect(p.count == 1)
    }
}
