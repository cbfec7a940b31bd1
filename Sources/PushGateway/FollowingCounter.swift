import CoreMetrics
import Synchronization

/// A counter that follows a count kept elsewhere (the consumer's fetch holds, a token cache's renewals), brought up
/// to date when it is looked at: it is incremented by what the count rose since the last call, and never by a count
/// lower than one seen before (two readers racing with counts read at different moments count each rise once).
package final class FollowingCounter: Sendable {
    private let counter: CoreMetrics.Counter
    private let reported = Mutex<Int>(0)

    package init(_ counter: CoreMetrics.Counter) { self.counter = counter }

    package func follow(_ count: Int) {
        let increase = reported.withLock { reported in
            defer { reported = max(reported, count) }
            return count - reported
        }
        if increase > 0 { counter.increment(by: Int64(increase)) }
    }
}
