import Synchronization

/// A Prometheus histogram of latencies that takes its observations a batch at a time: a ``Batch`` counts them into
/// buckets on the caller's thread, and ``record(_:)`` adds the batch under one lock. Outcomes and answers arrive in
/// batches, so a notification costs a bucket search and no lock (a swift-metrics `Timer` took a lock per
/// observation). Served on `/metrics` beside the registry's metrics by ``LatencyHistograms``.
public final class LatencyHistogram: Sendable {
    /// The buckets' upper bounds (Prometheus `le`), in milliseconds: the buckets the `Timer`s had (swift-prometheus's
    /// defaults), so the series keep their labels.
    public static let boundsMilliseconds: [Int64] = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000]
    static let boundsNanoseconds: [Int64] = boundsMilliseconds.map { $0 * 1_000_000 }
    /// One per bound and one above them all.
    static let bucketCount = boundsMilliseconds.count + 1

    public let name: String
    public let labels: [(String, String)]
    private let totals: Mutex<Totals>

    private struct Totals {
        /// Per bucket, not cumulative; the last counts what is above every bound.
        var buckets = [Int](repeating: 0, count: LatencyHistogram.bucketCount)
        var count = 0
        var sumSeconds = 0.0
    }

    /// Observations counted on the caller's side, added to a histogram by ``LatencyHistogram/record(_:)``.
    public struct Batch: Sendable {
        /// Per bucket, as in ``Totals``.
        fileprivate var buckets = [Int](repeating: 0, count: LatencyHistogram.bucketCount)
        /// Observations in the batch.
        public private(set) var count = 0
        /// Nanoseconds (a double: exact to 2^53, and no overflow), in seconds once per batch.
        fileprivate var sumNanoseconds = 0.0

        public init() {}

        /// One observation; a negative one (a clock that went back) counts as 0.
        public mutating func record(nanoseconds: Int64) {
            let value = max(0, nanoseconds)
            buckets[LatencyHistogram.bucket(nanoseconds: value)] &+= 1
            count &+= 1
            sumNanoseconds += Double(value)
        }

        public mutating func record(milliseconds: Int64) {
            let (nanoseconds, overflow) = milliseconds.multipliedReportingOverflow(by: 1_000_000)
            record(nanoseconds: overflow ? (milliseconds < 0 ? 0 : .max) : nanoseconds)
        }
    }

    /// The bucket of a value: how many bounds it is above (they ascend), counted without a branch, with the bounds
    /// of ``boundsMilliseconds`` as constants (a test holds the two to each other). A search through the bounds cost
    /// about 100 instructions per notification in a backlog, whose latencies are seconds long, in the last buckets.
    @inline(__always)
    static func bucket(nanoseconds value: Int64) -> Int {
        let ms: Int64 = 1_000_000
        var bucket = value > 5 * ms ? 1 : 0
        bucket &+= value > 10 * ms ? 1 : 0
        bucket &+= value > 25 * ms ? 1 : 0
        bucket &+= value > 50 * ms ? 1 : 0
        bucket &+= value > 100 * ms ? 1 : 0
        bucket &+= value > 250 * ms ? 1 : 0
        bucket &+= value > 500 * ms ? 1 : 0
        bucket &+= value > 1000 * ms ? 1 : 0
        bucket &+= value > 2500 * ms ? 1 : 0
        bucket &+= value > 5000 * ms ? 1 : 0
        bucket &+= value > 10000 * ms ? 1 : 0
        return bucket
    }

    /// A histogram of its own; ``LatencyHistograms/histogram(_:labels:)`` makes the ones served on `/metrics`.
    public init(name: String, labels: [(String, String)] = []) {
        self.name = name
        self.labels = labels
        totals = Mutex(Totals())
    }

    /// Adds a batch's observations, under one lock.
    public func record(_ batch: Batch) {
        guard batch.count > 0 else { return }
        totals.withLock { t in
            for i in t.buckets.indices { t.buckets[i] += batch.buckets[i] }
            t.count += batch.count
            t.sumSeconds += batch.sumNanoseconds / 1e9
        }
    }

    /// Observations so far, and how many were at most each bound (cumulative, as Prometheus counts them).
    public var snapshot: (count: Int, atMost: [Int], sumSeconds: Double) {
        let t = totals.withLock { $0 }
        var running = 0
        let atMost = t.buckets.dropLast().map { running += $0; return running }
        return (t.count, atMost, t.sumSeconds)
    }

    /// The histogram's lines in Prometheus's text format (without its `# TYPE` line).
    func emit(into buffer: inout [UInt8]) {
        let (count, atMost, sum) = snapshot
        let labelText = labels.map { "\($0.0)=\"\(Self.escaped($0.1))\"" }.joined(separator: ",")
        let prefix = labelText.isEmpty ? "" : labelText + ","
        for (bound, n) in zip(Self.boundsMilliseconds, atMost) {
            buffer.append(contentsOf: "\(name)_bucket{\(prefix)le=\"\(Self.seconds(milliseconds: bound))\"} \(n)\n".utf8)
        }
        buffer.append(contentsOf: "\(name)_bucket{\(prefix)le=\"+Inf\"} \(count)\n".utf8)
        let braced = labelText.isEmpty ? "" : "{\(labelText)}"
        buffer.append(contentsOf: "\(name)_sum\(braced) \(sum)\n\(name)_count\(braced) \(count)\n".utf8)
    }

    /// A bound in seconds as the `Timer`s wrote it: `0.005`, `0.25`, `1.0`, `2.5`.
    static func seconds(milliseconds: Int64) -> String {
        var fraction = String(milliseconds % 1000)
        fraction = String(repeating: "0", count: 3 - fraction.count) + fraction
        while fraction.count > 1 && fraction.hasSuffix("0") { fraction.removeLast() }
        return "\(milliseconds / 1000).\(fraction)"
    }

    /// A label value escaped for the text format (backslash, double quote, line feed).
    static func escaped(_ value: String) -> String {
        var out = ""
        for character in value {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(character)
            }
        }
        return out
    }
}

/// The process's latency histograms, served on `/metrics` after the Prometheus registry's metrics. One histogram per
/// name and labels: asking again gives the same one (as the registry does for its metrics).
public final class LatencyHistograms: Sendable {
    /// The histograms `pushworker run` serves.
    public static let process = LatencyHistograms()

    /// In the order made, and by name and labels (one per app: not a search through all apps' for each).
    private let histograms = Mutex<(list: [LatencyHistogram], byKey: [[String]: LatencyHistogram])>(([], [:]))

    public init() {}

    public func histogram(_ name: String, labels: [(String, String)] = []) -> LatencyHistogram {
        let key = [name] + labels.flatMap { [$0.0, $0.1] }
        return histograms.withLock { h in
            if let found = h.byKey[key] { return found }
            let made = LatencyHistogram(name: name, labels: labels)
            h.list.append(made)
            h.byKey[key] = made
            return made
        }
    }

    /// Every histogram in Prometheus's text format, one `# TYPE` line per name.
    public func emit(into buffer: inout [UInt8]) {
        let list = histograms.withLock { $0.list }
        var names: [String] = []
        var byName: [String: [LatencyHistogram]] = [:]
        for histogram in list {
            if byName[histogram.name] == nil { names.append(histogram.name) }
            byName[histogram.name, default: []].append(histogram)
        }
        for name in names {
            buffer.append(contentsOf: "# TYPE \(name) histogram\n".utf8)
            for histogram in byName[name]! { histogram.emit(into: &buffer) }
        }
    }
}
