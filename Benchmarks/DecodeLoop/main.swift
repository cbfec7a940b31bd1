import BenchmarkSamples
import Foundation
import PushCore

/// Decode and validate alone, in CPU time of this thread (not wall clock: the machines these run on are shared, and
/// the benchmark harness's CPU metric counts in 10 ms steps), the best of seven runs of 200,000 decodes, for two
/// events: the typical one (many keys, an alert dictionary) and the end-to-end benchmark's (few keys, a 220-byte
/// string). Compare two builds alternately:
///
///     PUSHWORKER_BENCHMARKS=1 swift build -c release --scratch-path .build-bench --product DecodeLoop
///     .build-bench/release/DecodeLoop [typical|e2e]
func threadCPUNanoseconds() -> UInt64 {
    var t = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
    return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
}

let decoder = EventDecoder(format: .frame)
let only = CommandLine.arguments.dropFirst().first
for (name, event) in [("typical", typicalEvent), ("e2e", endToEndEvent)] where only == nil || only == name {
    var best = UInt64.max
    for _ in 0..<7 {
        let count: UInt64 = 200_000
        var payloadBytes = 0
        let start = threadCPUNanoseconds()
        for _ in 0..<count {
            guard case .success(let decoded) = decoder.decode(event) else { fatalError("the sample event is valid") }
            payloadBytes &+= decoded.payload.count
        }
        best = min(best, (threadCPUNanoseconds() - start) / count)
        precondition(payloadBytes > 0)
    }
    print("\(name) \(best) ns")
}
