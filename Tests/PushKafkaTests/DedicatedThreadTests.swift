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

    /// A blocking call made through `onOwnThread` runs on its own named thread and hands back its value, or its
    /// error as thrown.
    @Test func aBlockingCallReturnsItsValueOrItsErrorFromItsOwnThread() async throws {
        let comm = try await onOwnThread("kafka-test-call") { () throws(KafkaError) -> String in
            ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .newlines)
        }
        #expect(comm == "kafka-test-call")
        await #expect {
            try await onOwnThread("kafka-test-call") { () throws(KafkaError) -> Int in throw KafkaError("no broker") }
        } throws: { error in
            (error as? KafkaError)?.description == "no broker"
        }
    }
}
