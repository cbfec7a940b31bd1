/// Decode and validate alone, in CPU time of this thread (not wall clock: the machines these run on are shared),
/// the best of seven runs of 200,000 decodes, for two events: the benchmarks' typical one (many keys, an alert
/// dictionary) and the end-to-end benchmark's (few keys, a 220-byte string). Compare two builds alternately:
///
///     PUSHWORKER_BENCHMARKS=1 swift build -c release --scratch-path .build-bench --product DecodeLoop
///     .build-bench/release/DecodeLoop [typical|e2e]
import NIOCore
import PushCore
import Foundation

func cpuNanos() -> UInt64 {
    var t = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
    return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
}

let typicalEvent = Array("""
    {"id":"order-shipped-8d2f41c6-19b4-4c47-8d0b-6f3f0c2a9e17","app":"com.example.app","environment":"production",\
    "token":"740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad",\
    "payload":{"aps":{"alert":{"title":"Your order has shipped","body":"Order #48213 is on its way and arrives Tuesday."},\
    "badge":3,"sound":"default","category":"ORDER"},"order":{"id":48213,"carrier":"ups"}},\
    "expiration":1893456000,"priority":10}
    """.utf8)
let e2eEvent = Array(("{\"id\":\"e123456\",\"app\":\"com.example.app\",\"token\":\"740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad\",\"payload\":{\"aps\":{\"alert\":\"Event 123456\",\"sound\":\"default\"},\"n\":123456,\"ts\":1795784033989,\"pad\":\"" + String(repeating: "x", count: 220) + "\"}}").utf8)
let decoder = EventDecoder(format: .frame)
let only = CommandLine.arguments.dropFirst().first
for (name, ev) in [("typical", typicalEvent), ("e2e", e2eEvent)] where only == nil || only == name {
    var best = Double.infinity
    for _ in 0..<7 {
        let n = 200_000
        var sink = 0
        let t0 = cpuNanos()
        for _ in 0..<n {
            guard case .success(let event) = decoder.decode(ev) else { fatalError() }
            sink &+= event.payload.count
        }
        let t1 = cpuNanos()
        best = min(best, Double(t1 - t0) / Double(n))
        if sink == 0 { print(sink) }
    }
    print(name, String(format: "%.0f ns", best))
}
