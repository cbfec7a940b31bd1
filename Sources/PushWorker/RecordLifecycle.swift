import PushCore
import PushGateway
import PushKafka

/// The life of every record the worker holds, from its poll to its commit, as a pure state machine: events go in
/// (a batch admitted, outcomes, acknowledgements, partitions assigned or revoked) and what to do comes out (the
/// tickets to deliver with, the output events each outcome writes, the suppressions to apply, the offsets to
/// commit). No Kafka, no TLS, no locks: ``RecordKeeper`` runs it behind one lock and does the I/O.
///
/// A record is *held* from admission until it is settled: its outcome is known and every output event it writes
/// is acknowledged by the broker. The held count is the worker's only measure of what it has in flight: fetching
/// pauses on it and a drain waits for it to reach zero. Its ledger (``HeldLedger``) keeps the records in
/// offset order, so the committable offset moves with the settled prefix of each partition.
struct RecordLifecycle: Sendable {
    private var ledger: HeldLedger<HeldEvent>
    let topics: OutputTopics
    /// Per endpoint, its app and environment (a suppression record names them).
    let endpoints: [AppKey]

    init(endpoints: [AppKey], topics: OutputTopics) {
        self.endpoints = endpoints
        self.topics = topics
        ledger = HeldLedger(groups: endpoints.count)
    }

    /// Records held: admitted and not yet settled.
    var held: Int { ledger.count }

    /// Records held for one endpoint's notifications.
    func held(endpoint: Int) -> Int { ledger.held(group: endpoint + 1) }

    // MARK: Admission

    /// A poll's records as they are admitted: runs of consecutive records of one partition, each record with what
    /// its outputs need when it is delivered, or nil when it was rejected (its outcome is known and it writes one
    /// error event).
    struct Batch {
        /// Consecutive records of one partition: `start` is the first one's index.
        struct Run {
            let partition: TopicPartition
            let start: Int
        }

        private(set) var runs: [Run] = []
        private(set) var records: [(offset: Int64, held: HeldEvent?)] = []

        init(capacity: Int = 0) { records.reserveCapacity(capacity) }

        /// The records added next are `partition`'s (until the next run starts).
        mutating func startRun(_ partition: TopicPartition) {
            runs.append(Run(partition: partition, start: records.count))
        }

        /// The partition of the run being added to.
        var currentPartition: TopicPartition { runs[runs.count - 1].partition }

        mutating func append(offset: Int64, held: HeldEvent?) { records.append((offset, held)) }

        /// The records of `runs[run]`.
        func indices(ofRun run: Int) -> Range<Int> {
            runs[run].start..<(run + 1 < runs.count ? runs[run + 1].start : records.count)
        }
    }

    /// What admitting a batch gives back: each record's ticket, in record order, and the partitions whose
    /// offsets went back (their earlier records are forgotten, to be delivered again from the new offset).
    struct Admitted {
        var tickets: [LedgerTicket] = []
        var restarts: [(partition: TopicPartition, forgotten: Int)] = []
    }

    mutating func admit(_ batch: Batch) -> Admitted {
        var admitted = Admitted()
        admitted.tickets.reserveCapacity(batch.records.count)
        for run in batch.runs.indices {
            let partition = batch.runs[run].partition
            let slot = ledger.slot(for: partition)
            for i in batch.indices(ofRun: run) {
                let (offset, held) = batch.records[i]
                let admission = if let held {
                    ledger.admit(slot: slot, offset: offset, group: held.endpoint + 1, entry: held)
                } else {
                    ledger.admit(
                        slot: slot, offset: offset, group: HeldLedger<HeldEvent>.noGroup, entry: nil,
                        outcomeKnown: true, outputs: OutputPlan.rejected.count)
                }
                if case .restarted(_, let forgotten) = admission { admitted.restarts.append((partition, forgotten)) }
                admitted.tickets.append(admission.ticket)
            }
        }
        return admitted
    }

    // MARK: Outcomes

    /// What resolving a batch of outcomes gives back.
    struct Resolution: Sendable {
        /// The outcomes that write output events, each with its plan.
        var planned: [PlannedOutputs] = []
        /// The record timestamps of accepted outcomes that write nothing (counted, and their latency recorded).
        var acceptedTimestamps: [Int64] = []
        /// Tokens reported gone, to be suppressed at once (SPEC section 10).
        var suppressions: [SuppressionEntry] = []

        var isEmpty: Bool { planned.isEmpty && acceptedTimestamps.isEmpty }
    }

    /// Resolves the outcomes of delivered records: each outcome's output plan is made here, once, and the ledger
    /// waits for exactly that many acknowledgements. An outcome of a record no longer held (its partition was
    /// revoked, or it was resolved already) is ignored. `now` (UNIX milliseconds) dates a suppression whose 410
    /// gave no time.
    mutating func resolve(_ outcomes: [DeliveryOutcome], now: Int64) -> Resolution {
        var resolution = Resolution()
        resolution.acceptedTimestamps.reserveCapacity(outcomes.count)
        let topics = self.topics
        ledger.settlingBatch { ledger in
            // Each outcome read where it is: a copy would retain what it holds (its token's source, its detail).
            for i in outcomes.indices {
                let ticket = LedgerTicket(outcomes[i].ticket)
                var plan = OutputPlan()
                guard let (entry, offset) = ledger.resolve(ticket, outputs: { entry in
                    plan = OutputPlan(outcomes[i], held: entry, topics: topics)
                    return plan.count
                }), let entry else { continue }
                if plan.isEmpty {  // accepted, and nothing to write
                    resolution.acceptedTimestamps.append(entry.timestamp)
                    continue
                }
                var planned = PlannedOutputs(
                    outcome: outcomes[i], ticket: ticket, held: entry, plan: plan,
                    source: ledger.topicPartition(slot: ticket.slot).source(offset: offset))
                if plan.contains(.suppression), let reason = outcomes[i].suppressionReason {
                    let endpoint = endpoints[entry.endpoint]
                    let record = SuppressionRecord(
                        app: endpoint.app, environment: endpoint.environment, token: outcomes[i].tokenSource.token,
                        invalidatedAtMilliseconds: outcomes[i].unregisteredAt ?? now, reason: reason)
                    planned.suppression = record
                    resolution.suppressions.append(.suppress(record))
                }
                resolution.planned.append(planned)
            }
        }
        return resolution
    }

    /// The broker acknowledged output events: each ticket settles one output of its record.
    mutating func acknowledged(_ tickets: [LedgerTicket]) {
        ledger.settlingBatch { ledger in for ticket in tickets { ledger.acknowledged(ticket) } }
    }

    /// The held records of these tickets (nil for one no longer held).
    func heldEvents(_ tickets: [DeliveryTicket]) -> [HeldEvent?] {
        tickets.map { ledger.entry(LedgerTicket($0)) }
    }

    // MARK: Partitions and offsets

    mutating func assigned(_ partitions: [TopicPartition]) { ledger.assign(partitions) }

    /// The committable offsets that moved, then the revoked partitions' held records are forgotten.
    mutating func revoked(_ partitions: [TopicPartition]) -> [(TopicPartition, Int64)] { ledger.revoke(partitions) }

    mutating func takeCommittable() -> [(TopicPartition, Int64)] { ledger.takeCommittable() }

    // MARK: Backpressure

    /// What fetching compares with `maxInFlight`: the held count, an endpoint whose gateway is down counting with
    /// at most `share`, so that its backlog does not stop the other apps; at least `maxInFlight` once the held
    /// count is twice that.
    func pressure(maxInFlight: Int, share: Int, isDown: (Int) -> Bool) -> Int {
        var pressure = held
        for endpoint in endpoints.indices where isDown(endpoint) {
            pressure -= max(0, held(endpoint: endpoint) - share)
        }
        return held >= 2 * maxInFlight ? max(pressure, maxInFlight) : pressure
    }
}

/// An outcome resolved by the lifecycle that writes output events, with what they need.
struct PlannedOutputs: Sendable {
    var outcome: DeliveryOutcome
    var ticket: LedgerTicket
    var held: HeldEvent
    var plan: OutputPlan
    /// The record's topic, partition and offset.
    var source: RecordSource
    /// The suppression record it writes (in the plan as ``OutputPlan/suppression``).
    var suppression: SuppressionRecord?
}

extension DeliveryTicket {
    /// A ledger ticket as a delivery's word.
    init(_ ticket: LedgerTicket) { self.init(ticket.rawValue) }
}

extension LedgerTicket {
    init(_ ticket: DeliveryTicket) { self.init(rawValue: ticket.value) }
}

extension TopicPartition {
    func source(offset: Int64) -> RecordSource { RecordSource(topic: topic, partition: partition, offset: offset) }
}
