import DequeModule
import Synchronization

/// Bounds what the engine holds: `submit` takes permits (waiting, in order, while there are too few) and every
/// settled delivery gives one back. Nothing is dropped and nothing grows without bound. The feedback poller bounds
/// the spool's unacknowledged records with one too.
public final class CapacityGate: Sendable {
    private struct State {
        var available: Int
        var waiters = Deque<(count: Int, continuation: CheckedContinuation<Void, any Error>, id: UInt64)>()
        var nextID: UInt64 = 0
        var peakHeld = 0
    }

    public let capacity: Int
    private let state: Mutex<State>

    public init(capacity: Int) {
        self.capacity = capacity
        state = Mutex(State(available: capacity))
    }

    /// Waits until `count` permits are free and takes them. A request larger than the capacity takes all of it.
    public func acquire(_ count: Int) async throws {
        let count = min(count, capacity)
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let ready = state.withLock { s -> Bool? in
                    // Cancelled before it was queued: the cancellation handler found no waiter to resume.
                    if Task.isCancelled { return nil }
                    if s.waiters.isEmpty && s.available >= count {
                        s.available -= count
                        s.peakHeld = max(s.peakHeld, capacity - s.available)
                        return true
                    }
                    s.waiters.append((count, continuation, id))
                    return false
                }
                switch ready {
                case true: continuation.resume()
                case nil: continuation.resume(throwing: CancellationError())
                default: break
                }
            }
        } onCancel: {
            let cancelled = state.withLock { s -> CheckedContinuation<Void, any Error>? in
                guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: index).continuation
            }
            cancelled?.resume(throwing: CancellationError())
        }
    }

    /// Takes permits without waiting, even past the capacity (for a caller that bounds what it hands over by other
    /// means); waiters wait until enough are given back.
    func take(_ count: Int) {
        state.withLock { s in
            s.available -= count
            s.peakHeld = max(s.peakHeld, capacity - s.available)
        }
    }

    /// Gives permits back and wakes the waiters that now fit, in order.
    public func release(_ count: Int) {
        guard count > 0 else { return }
        let ready = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
            s.available += count
            var ready: [CheckedContinuation<Void, any Error>] = []
            while let first = s.waiters.first, first.count <= s.available {
                s.available -= first.count
                s.peakHeld = max(s.peakHeld, capacity - s.available)
                ready.append(s.waiters.removeFirst().continuation)
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    public var held: Int { state.withLock { capacity - $0.available } }
    /// The most permits held at once so far.
    public var peakHeld: Int { state.withLock { $0.peakHeld } }
    var waiting: Int { state.withLock { $0.waiters.count } }
}
