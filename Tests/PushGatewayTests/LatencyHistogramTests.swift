import Testing
@testable import PushGateway

/// Latencies counted a batch at a time, served as the `Timer`s served them.
@Suite struct LatencyHistogramTests {
    @Test func eachObservationCountsInTheFirstBucketItFitsAndCumulativelyAfter() {
        let histogram = LatencyHistogram(name: "h")
        var batch = LatencyHistogram.Batch()
        batch.record(nanoseconds: 5_000_000)  // exactly 5 ms: le="0.005"
        batch.record(nanoseconds: 5_000_001)  // just over: le="0.01"
        batch.record(nanoseconds: -3)  // a clock that went back: 0
        batch.record(milliseconds: 10_001)  // beyond the last bound: +Inf only
        batch.record(milliseconds: 700)  // le="1.0"
        batch.record(milliseconds: .max)  // overflows nanoseconds: the largest, +Inf only
        batch.record(milliseconds: .min)  // overflows the other way: 0
        #expect(batch.count == 7)
        histogram.record(batch)
        let (count, atMost, sum) = histogram.snapshot
        #expect(count == 7)
        // Bounds 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000 ms.
        #expect(atMost == [3, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5])
        #expect(sum > 9_223_372_000 && sum < 9_223_373_000)  // Int64.max nanoseconds dominates

        var second = LatencyHistogram.Batch()
        second.record(milliseconds: 30)
        histogram.record(second)
        histogram.record(LatencyHistogram.Batch())  // empty: nothing
        #expect(histogram.snapshot.count == 8)
        #expect(histogram.snapshot.atMost == [3, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6])  // 30 ms: le="0.05"
    }

    /// The bucket counted without a branch is the first whose bound a value does not exceed, at and around every
    /// bound and across the range, as a search through ``LatencyHistogram/boundsNanoseconds`` finds it.
    @Test func theBucketIsTheFirstBoundNotExceeded() {
        let bounds = LatencyHistogram.boundsNanoseconds
        func searched(_ value: Int64) -> Int { bounds.firstIndex { value <= $0 } ?? bounds.count }
        var values: [Int64] = [0, 1, .max]
        for bound in bounds { values += [bound - 1, bound, bound + 1] }
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<10_000 {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            values.append(Int64(x % 12_000_000_000))
        }
        for value in values {
            #expect(LatencyHistogram.bucket(nanoseconds: value) == searched(value), "\(value) ns")
        }
    }

    @Test func batchesFromManyThreadsAddUp() async {
        let histogram = LatencyHistogram(name: "h")
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    for _ in 0..<100 {
                        var batch = LatencyHistogram.Batch()
                        for i in 0..<10 { batch.record(milliseconds: Int64(worker * 10 + i)) }
                        histogram.record(batch)
                    }
                }
            }
        }
        let (count, atMost, sum) = histogram.snapshot
        #expect(count == 8_000)
        #expect(atMost[0] == 600)  // 0...5 ms: six of each worker 0's ten, 100 batches
        #expect(atMost[4] == 8_000)  // all at most 79 ms
        #expect(abs(sum - 100 * Double((0..<80).reduce(0, +)) / 1000) < 1e-6)
    }

    @Test func servedInPrometheusTextWithTheTimersBucketLabels() {
        let histograms = LatencyHistograms()
        let a = histograms.histogram("x_seconds", labels: [("app", #"com.example/"q"\"#)])
        let b = histograms.histogram("x_seconds", labels: [("app", "other")])
        #expect(histograms.histogram("x_seconds", labels: [("app", #"com.example/"q"\"#)]) === a, "the same name and labels: the same one")
        #expect(a !== b)
        let plain = histograms.histogram("y_seconds")
        var batch = LatencyHistogram.Batch()
        batch.record(milliseconds: 250)
        batch.record(milliseconds: 2_000)
        a.record(batch)
        var one = LatencyHistogram.Batch()
        one.record(milliseconds: 4)
        plain.record(one)

        var out: [UInt8] = []
        histograms.emit(into: &out)
        let lines = String(decoding: out, as: UTF8.self).split(separator: "\n").map(String.init)
        let label = #"app="com.example/\"q\"\\""#
        let les = ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0"]
        let counts = [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
        var expected = ["# TYPE x_seconds histogram"]
        expected += zip(les, counts).map { #"x_seconds_bucket{\#(label),le="\#($0)"} \#($1)"# }
        expected += [#"x_seconds_bucket{\#(label),le="+Inf"} 2"#, "x_seconds_sum{\(label)} 2.25", "x_seconds_count{\(label)} 2"]
        expected += les.map { #"x_seconds_bucket{app="other",le="\#($0)"} 0"# }
        expected += [#"x_seconds_bucket{app="other",le="+Inf"} 0"#, #"x_seconds_sum{app="other"} 0.0"#, #"x_seconds_count{app="other"} 0"#]
        expected += ["# TYPE y_seconds histogram"]
        expected += les.map { #"y_seconds_bucket{le="\#($0)"} 1"# }
        expected += [#"y_seconds_bucket{le="+Inf"} 1"#, "y_seconds_sum 0.004", "y_seconds_count 1"]
        #expect(lines == expected)
    }
}
