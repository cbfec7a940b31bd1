import Synchronization

/// Wakes waiters when a condition may have become true: whoever changes what the condition reads calls
/// ``signal()``, and each waiter checks its condition again.
public final class IdleSignal: Sendable {
    private let waiters = Mutex<[CheckedContinuation<Void, Never>]>([])

    public init() {}

    public func signal() {
        let ready = waiters.withLock { w in
            defer { w = [] }
            return w
        }
        for continuation in ready { continuation.resume() }
    }

    /// Returns once `condition` holds (or the task is cancelled), checking it again after every signal.
    public func wait(until condition: @Sendable () -> Bool) async {
        while !condition() && !Task.isCancelled {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    waiters.withLock { $0.append(continuation) }
                    // Cancelled before it was queued (the handler's signal found nothing), or the condition came
                    // true meanwhile: wake it now.
                    if Task.isCancelled || condition() { signal() }
                }
            } onCancel: {
                signal()
            }
        }
    }

    /// Waits until `condition` holds or `timeout` has passed; returns whether it holds.
    public func wait(until condition: @escaping @Sendable () -> Bool, timeout: Duration) async -> Bool {
        if condition() { return true }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { [self] in
                await wait(until: condition)
                return true
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            _ = await group.next()!
            group.cancelAll()
            return condition()
        }
    }
}
