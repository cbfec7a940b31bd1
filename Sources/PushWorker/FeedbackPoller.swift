import Foundation
import Logging
import Metrics
import PushCore
import PushGateway
import PushKafka
import Synchronization

/// Polls each app's feedback service every `interval` (SPEC section 5). The service forgets what it sent, so the
/// events are first written to a spool file (atomically), then produced, and the file is removed once the broker
/// has acknowledged every event in it. On start, spool files left by an earlier run are produced first.
public final class FeedbackPoller: Sendable {
    private let endpoints: [AppEndpoint]
    private let topic: String
    private let spool: String
    private let interval: Duration
    private let producer: KafkaProducer
    private let logger: Logger
    private let tuplesProduced = Atomic<Int>(0)
    private let tuplesCounter = Counter(label: "pushworker_feedback_tuples_total")

    public init(endpoints: [AppEndpoint], topic: String, spoolDirectory: String, interval: Duration, producer: KafkaProducer, logger: Logger) {
        self.endpoints = endpoints
        self.topic = topic
        self.spool = spoolDirectory
        self.interval = interval
        self.producer = producer
        self.logger = logger
    }

    /// Feedback events acknowledged by the broker so far.
    public var produced: Int { tuplesProduced.load(ordering: .relaxed) }

    /// Produces what an earlier run left in the spool, then polls every interval until cancelled.
    public func run() async {
        try? FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)
        for file in spoolFiles() { produce(file: file) }
        while !Task.isCancelled {
            for endpoint in endpoints { await poll(endpoint) }
            try? await Task.sleep(for: interval)
        }
    }

    private func spoolFiles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []).filter { $0.hasSuffix(".jsonl") }.sorted()
            .map { "\(spool)/\($0)" }
    }

    private func poll(_ endpoint: AppEndpoint) async {
        let report: FeedbackReport
        do {
            report = try await FeedbackClient(endpoint: endpoint).fetch()
        } catch {
            logger.warning("feedback service unreachable", metadata: ["app": "\(endpoint.key)", "error": "\(error)"])
            return
        }
        if let problem = report.problem {
            logger.warning("feedback stream ended badly; the tuples before it are kept", metadata: ["app": "\(endpoint.key)", "problem": "\(problem)"])
        }
        guard !report.tuples.isEmpty else { return }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var lines = Data()
        for tuple in report.tuples {
            let event = FeedbackEvent(app: endpoint.app, environment: endpoint.environment, token: tuple.token, timestamp: tuple.timestamp, receivedAt: now)
            lines.append(contentsOf: event.json())
            lines.append(0x0A)
        }
        let name = "\(spool)/\(now)-\(endpoint.app)-\(endpoint.environment.rawValue).jsonl"
        do {
            try lines.write(to: URL(fileURLWithPath: name), options: .atomic)
        } catch {
            logger.error("cannot write the feedback spool; producing without it", metadata: ["file": "\(name)", "error": "\(error)"])
        }
        tuplesCounter.increment(by: Int64(report.tuples.count))
        logger.info("feedback tuples", metadata: ["app": "\(endpoint.key)", "tuples": "\(report.tuples.count)"])
        produce(file: name, contents: lines)
    }

    /// Produces a spool file's events; removes the file once every one is acknowledged.
    private func produce(file: String, contents: Data? = nil) {
        guard let data = contents ?? FileManager.default.contents(atPath: file) else { return }
        let lines = data.split(separator: 0x0A).filter { !$0.isEmpty }
        let remaining = Countdown(lines.count)
        for line in lines {
            let bytes = Array(line)
            let key = (try? JSONValue(parsing: bytes))?["token"]?.stringValue.map { Array($0.utf8) }
            producer.produce(topic: topic, key: key, value: bytes) { [self] in
                tuplesProduced.add(1, ordering: .relaxed)
                if remaining.tick() { try? FileManager.default.removeItem(atPath: file) }
            }
        }
    }
}

/// Counts down to zero from several threads; `tick` says when it got there.
final class Countdown: Sendable {
    private let value: Atomic<Int>
    init(_ count: Int) { value = Atomic(count) }
    func tick() -> Bool { value.subtract(1, ordering: .relaxed).newValue == 0 }
}
