import BenchmarkSamples
import Foundation
import PushCore

/// Decode and validate alone, in CPU time of this thread (not wall clock: the machines these run on are shared, and
/// the benchmark harness's CPU metric counts in 10 ms steps), the best of seven runs of 200,000 decodes, for two
/// events: the typical one (many keys, an alert dictionary) and the end-to-end benchmark's (few keys, a 220-byte
/// string), the latter with its app known to the decoder as the worker's are (`e2e-known`), and with a 29-byte app
/// name, decoded as written and known (`long-app`, `long-app-known`). Compare two builds alternately:
///
///     PUSHWORKER_BENCHMARKS=1 swift build -c release --scratch-path .build-bench --product DecodeLoop
///     .build-bench/release/DecodeLoop [typical|e2e|e2e-known|long-app|long-app-known|e2e-staged|uuid-staged]
///
/// `e2e-staged` and `uuid-staged` decode as the worker does, into a staging buffer, the second with a UUID id.
func threadCPUNanoseconds() -> UInt64 {
    var t = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
    return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
}

let decoder = EventDecoder(format: .frame)
let longApp = "com.example.notifications.ios"
let longAppEvent = Array(String(decoding: endToEndEvent, as: UTF8.self)
    .replacingOccurrences(of: #""app":"com.example.app""#, with: #""app":"\#(longApp)""#).utf8)
precondition(longAppEvent != endToEndEvent)
var knowing = decoder
knowing.knownApps = KnownNames([longApp])
var knowingShort = decoder  // as the worker decodes the end-to-end benchmark's events
knowingShort.knownApps = KnownNames(["com.example.app"])
// The end-to-end event with a UUID for its id, as many producers write them.
let uuidEvent = Array(String(decoding: endToEndEvent, as: UTF8.self)
    .replacingOccurrences(of: #""id":"e123456""#, with: #""id":"3f2b8c1e-9d4a-4e7b-8a61-0c5d2e9f7b13""#).utf8)
precondition(uuidEvent != endToEndEvent)
let only = CommandLine.arguments.dropFirst().first
let cases = [
    ("typical", typicalEvent, decoder), ("e2e", endToEndEvent, decoder), ("e2e-known", endToEndEvent, knowingShort),
    ("long-app", longAppEvent, decoder), ("long-app-known", longAppEvent, knowing),
]
// The worker's way: decoded into a poll's staging buffer (``StagedNotification``), cleared between polls.
let stagedCases = [("e2e-staged", endToEndEvent), ("uuid-staged", uuidEvent)]
for (name, event) in stagedCases where only == nil || only == name {
    // A constant, as the worker's decoders are: a global `var` would be copied (its arrays retained) for every call.
    let stagedDecoder = knowingShort
    var best = UInt64.max
    var staging: [UInt8] = []
    staging.reserveCapacity(1 << 20)
    for _ in 0..<7 {
        let count: UInt64 = 200_000
        var payloadBytes = 0
        let start = threadCPUNanoseconds()
        event.withUnsafeBytes { bytes in
            for i in 0..<count {
                if i & 1023 == 0 { staging.removeAll(keepingCapacity: true) }
                guard case .success(let decoded) = stagedDecoder.decode(bytes, staging: &staging) else {
                    fatalError("the sample event is valid")
                }
                payloadBytes &+= decoded.payload.count
            }
        }
        best = min(best, (threadCPUNanoseconds() - start) / count)
        precondition(payloadBytes > 0)
    }
    print("\(name) \(best) ns")
}
for (name, event, decoder) in cases where only == nil || only == name {
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
