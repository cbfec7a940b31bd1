import Foundation
import Synchronization

/// Runs a blocking librdkafka loop on a thread of its own (never on the cooperative pool) and returns when it
/// ends. The thread carries `name` (at most 15 bytes: Linux keeps no longer thread names). Cancelling the awaiting
/// task calls `onCancel`, which must make the loop end.
///
/// With `abandonAfterCancel`, a loop that has not ended that long after the cancellation is left to itself and the
/// call returns false: librdkafka can wait without end inside a call (a group coordinator that stopped answering
/// holds `rd_kafka_commit` and `rd_kafka_consumer_close` as long as it stays silent), and a process being shut
/// down must not wait with it. The thread keeps what its loop holds until it ends or the process exits.
@discardableResult
func runOnDedicatedThread(
    name: String, onCancel: @escaping @Sendable () -> Void = {}, abandonAfterCancel grace: Duration? = nil,
    _ loop: @escaping @Sendable () -> Void
) async -> Bool {
    let completion = ThreadCompletion()
    return await withTaskCancellationHandler {
        await withCheckedContinuation { (done: CheckedContinuation<Bool, Never>) in
            completion.wait(done)
            let thread = Thread {
                nameCurrentThread(name)
                loop()
                completion.complete(finished: true)
            }
            thread.start()
        }
    } onCancel: {
        onCancel()
        if let grace {
            let (seconds, attoseconds) = grace.components
            let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) {
                completion.complete(finished: false)
            }
        }
    }
}

/// Gives the calling thread its name in the operating system (`top -H`, perf, /proc), from inside the thread.
/// Foundation's `Thread.name` cannot be relied on for this on Linux: a name set before `start()` never reaches the OS
/// thread, and one set from inside it is lost when the thread runs before `start()` has recorded its handle. The
/// thread then keeps its creator's name (a cooperative pool thread's, "oot.default-qos").
private func nameCurrentThread(_ name: String) {
    #if os(Linux)
    let fd = open("/proc/thread-self/comm", O_WRONLY)
    guard fd >= 0 else { return }
    defer { close(fd) }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    #else
    Thread.current.name = name
    #endif
}

/// The end of a dedicated thread's loop, or its abandonment, whichever comes first: resumes the waiting task once.
private final class ThreadCompletion: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Bool, Never>?
        var result: Bool?
    }

    private let state = Mutex(State())

    func wait(_ continuation: CheckedContinuation<Bool, Never>) {
        let result: Bool? = state.withLock { s in
            if s.result == nil { s.continuation = continuation }
            return s.result
        }
        if let result { continuation.resume(returning: result) }
    }

    func complete(finished: Bool) {
        let continuation: CheckedContinuation<Bool, Never>? = state.withLock { s in
            guard s.result == nil else { return nil }
            s.result = finished
            defer { s.continuation = nil }
            return s.continuation
        }
        continuation?.resume(returning: finished)
    }
}

/// Runs one blocking librdkafka call (metadata and offset look-ups, a synchronous commit, opening a
/// ``KafkaReplayReader``) on a thread of its own and returns its result, so that no thread of the cooperative pool
/// waits on the broker.
public func onOwnThread<T: Sendable, E: Error>(_ name: String, _ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
    let outcome = Mutex<Result<T, E>?>(nil)
    await runOnDedicatedThread(name: name) {
        let result = Result { () throws(E) -> T in try body() }
        outcome.withLock { $0 = result }
    }
    return try outcome.withLock { $0 }!.get()
}
