import Foundation

/// Runs a blocking librdkafka loop on a thread of its own (never on the cooperative pool) and returns when it
/// ends. Cancelling the awaiting task calls `onCancel`, which must make the loop end.
func runOnDedicatedThread(
    name: String, onCancel: @escaping @Sendable () -> Void = {}, _ loop: @escaping @Sendable () -> Void
) async {
    await withTaskCancellationHandler {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let thread = Thread {
                loop()
                done.resume()
            }
            thread.name = name
            thread.start()
        }
    } onCancel: {
        onCancel()
    }
}
