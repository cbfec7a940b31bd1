import Foundation
import Synchronization
import Testing
@testable import PushKafka

struct DedicatedThreadTests {
    /// The loop runs on a thread the operating system knows by the given name (what `top -H`, perf and
    /// /proc/PID/task/*/comm show), not on the awaiting task's thread.
    @Test func theLoopRunsOnAThreadOfItsOwnName() async throws {
        let seen = Mutex<String?>(nil)
        let finished = await runOnDedicatedThread(name: "kafka-test-loop") {
            let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
            seen.withLock { $0 = comm.trimmingCharacters(in: .newlines) }
        }
        #expect(finished)
        #expect(seen.withLock { $0 } == "kafka-test-loop")
    }
}
