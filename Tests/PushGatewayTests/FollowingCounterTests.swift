import CoreMetrics
import Synchronization
import Testing

@testable import PushGateway

/// What a counter was incremented by, call by call.
private final class RecordingCounterHandler: CounterHandler, Sendable {
    let increments = Mutex<[Int64]>([])
    func increment(by amount: Int64) { increments.withLock { $0.append(amount) } }
    func reset() {}
}

@Suite struct FollowingCounterTests {
    @Test func itIsIncrementedByWhatTheCountRoseAndNothingElse() {
        let handler = RecordingCounterHandler()
        let following = FollowingCounter(Counter(label: "test_following_total", dimensions: [], handler: handler))
        following.follow(0)
        following.follow(3)
        following.follow(3)
        following.follow(5)
        // A count read lower than one already reported (two readers racing) neither decrements nor counts twice.
        following.follow(4)
        following.follow(6)
        #expect(handler.increments.withLock { $0 } == [3, 2, 1])
    }
}
