import PushCore
import Testing
@testable import PushGateway
@testable import PushKafka
@testable import PushWorker

/// The record lifecycle driven directly: no Kafka, no TLS, no engine.
@Suite struct RecordLifecycleTests {
    static let apps = [AppKey(app: "com.example.a", environment: .production), AppKey(app: "com.example.b", environment: .sandbox)]
    static let partition = TopicPartition(topic: "notifications", partition: 0)
    static let token = try! DeviceToken(bytes: Array(repeating: 0xAB, count: 32))

    static func topics(report: Bool = false, feedback: Bool = false, suppression: Bool = false) -> OutputTopics {
        OutputTopics(
            error: ProducerTopic(index: 0), report: report ? ProducerTopic(index: 1) : nil,
            feedback: feedback ? ProducerTopic(index: 2) : nil, suppression: suppression ? ProducerTopic(index: 3) : nil)
    }

    /// A batch of one partition: each record delivered to the endpoint given, or rejected (nil).
    static func batch(from offset: Int64, _ endpoints: [Int?], liftsSuppression: Bool = false) -> RecordLifecycle.Batch {
        var batch = RecordLifecycle.Batch()
        batch.startRun(partition)
        for (i, endpoint) in endpoints.enumerated() {
            let held = endpoint.map { e -> HeldEvent in
                var held = HeldEvent(id: "e\(offset + Int64(i))", endpoint: e, timestamp: 1_000)
                held.liftsSuppression = liftsSuppression
                return held
            }
            batch.append(offset: offset + Int64(i), held: held)
        }
        return batch
    }

    static func accepted(_ ticket: LedgerTicket) -> DeliveryOutcome {
        DeliveryOutcome(ticket: DeliveryTicket(ticket), tokenSource: DeliveryTokenSource(token), result: .accepted, attempts: 1)
    }

    static func gone(_ ticket: LedgerTicket, at time: Int64? = 1_700_000_000_000) -> DeliveryOutcome {
        DeliveryOutcome(
            ticket: DeliveryTicket(ticket), tokenSource: DeliveryTokenSource(token),
            result: .failed(.unregistered, status: nil, detail: "Unregistered"), attempts: 1, httpStatus: 410, unregisteredAt: time)
    }

    @Test func aRecordIsHeldUntilItsOutcomeAndEveryOutputIsAcknowledged() {
        var lifecycle = RecordLifecycle(endpoints: Self.apps, topics: Self.topics(report: true))
        lifecycle.assigned([Self.partition])
        let admitted = lifecycle.admit(Self.batch(from: 10, [0, nil, 1]))
        #expect(admitted.tickets.count == 3)
        #expect(lifecycle.held == 3)  // the rejected record waits for its error event's acknowledgement
        #expect(lifecycle.held(endpoint: 0) == 1 && lifecycle.held(endpoint: 1) == 1)

        let resolution = lifecycle.resolve([Self.accepted(admitted.tickets[0])], now: 0)
        #expect(resolution.planned.map(\.plan) == [.report])
        #expect(lifecycle.held == 3)  // its report is not acknowledged yet
        #expect(lifecycle.takeCommittable().isEmpty)

        lifecycle.acknowledged([admitted.tickets[0]])
        #expect(lifecycle.held == 2)
        #expect(lifecycle.takeCommittable().map(\.1) == [11])
        lifecycle.acknowledged([admitted.tickets[1]])
        #expect(lifecycle.takeCommittable().map(\.1) == [12])

        // A second outcome for a resolved record changes nothing.
        #expect(lifecycle.resolve([Self.accepted(admitted.tickets[0])], now: 0).isEmpty)
        _ = lifecycle.resolve([Self.accepted(admitted.tickets[2])], now: 0)
        lifecycle.acknowledged([admitted.tickets[2]])
        #expect(lifecycle.held == 0)
        #expect(lifecycle.takeCommittable().map(\.1) == [13])
    }

    @Test func anAcceptedOutcomeWithNothingToWriteSettlesAtOnce() {
        var lifecycle = RecordLifecycle(endpoints: Self.apps, topics: Self.topics())
        lifecycle.assigned([Self.partition])
        let admitted = lifecycle.admit(Self.batch(from: 0, [0, 0]))
        let resolution = lifecycle.resolve(admitted.tickets.map(Self.accepted), now: 0)
        #expect(resolution.planned.isEmpty)
        #expect(resolution.acceptedTimestamps == [1_000, 1_000])
        #expect(lifecycle.held == 0)
        #expect(lifecycle.takeCommittable().map(\.1) == [2])
    }

    /// A 410 writes its error event, its feedback event (when it has a time) and its suppression record, and the
    /// record stays held until all of them are acknowledged; the suppression is dated by the 410, else by `now`.
    @Test(arguments: [Int64?.some(1_700_000_000_000), nil])
    func aTokenReportedGoneWritesThreeEventsAndIsSuppressed(time: Int64?) {
        var lifecycle = RecordLifecycle(endpoints: Self.apps, topics: Self.topics(feedback: true, suppression: true))
        lifecycle.assigned([Self.partition])
        let ticket = lifecycle.admit(Self.batch(from: 0, [1])).tickets[0]
        let resolution = lifecycle.resolve([Self.gone(ticket, at: time)], now: 1_800_000_000_000)
        let plan: OutputPlan = time == nil ? [.error, .suppression] : [.error, .feedback, .suppression]
        #expect(resolution.planned.map(\.plan) == [plan])
        let record = SuppressionRecord(
            app: "com.example.b", environment: .sandbox, token: Self.token,
            invalidatedAtMilliseconds: time ?? 1_800_000_000_000, reason: .unregistered)
        #expect(resolution.suppressions == [.suppress(record)])
        #expect(resolution.planned[0].suppression == record)
        lifecycle.acknowledged(Array(repeating: ticket, count: plan.count - 1))
        #expect(lifecycle.held == 1)
        lifecycle.acknowledged([ticket])
        #expect(lifecycle.held == 0)
    }

    /// Every outcome, under every set of output topics: the builder writes exactly the events the plan counted,
    /// each to its topic.
    @Test func theBuilderWritesWhatThePlanCounted() throws {
        let outcomes: [(LedgerTicket) -> DeliveryOutcome] = [
            Self.accepted,
            { Self.gone($0) },
            { Self.gone($0, at: nil) },
            {
                DeliveryOutcome(
                    ticket: DeliveryTicket($0), tokenSource: DeliveryTokenSource(Self.token),
                    result: .failed(.invalidToken, status: nil, detail: APNsReason.badDeviceToken.rawValue), attempts: 2,
                    httpStatus: 400)
            },
            {
                DeliveryOutcome(
                    ticket: DeliveryTicket($0), tokenSource: DeliveryTokenSource(Self.token),
                    result: .failed(.invalidToken, status: .invalidToken, detail: "status 8"), attempts: 1)
            },
            {
                DeliveryOutcome(
                    ticket: DeliveryTicket($0), tokenSource: DeliveryTokenSource(Self.token),
                    result: .failed(.expired, status: nil, detail: "expired"), attempts: 0)
            },
        ]
        for mask in 0..<8 {
            for lifts in [false, true] {
                let topics = Self.topics(report: mask & 1 != 0, feedback: mask & 2 != 0, suppression: mask & 4 != 0)
                var lifecycle = RecordLifecycle(endpoints: Self.apps, topics: topics)
                lifecycle.assigned([Self.partition])
                let admitted = lifecycle.admit(Self.batch(from: 0, Array(repeating: 0, count: outcomes.count), liftsSuppression: lifts))
                let resolution = lifecycle.resolve(zip(outcomes, admitted.tickets).map { $0($1) }, now: 5_000)
                let built = OutputBuilder(topics: topics, endpoints: Self.apps).build(resolution.planned, now: 5_000)
                #expect(built.messages.count == resolution.planned.reduce(0) { $0 + $1.plan.count })
                // What was counted is what the ledger waits for: acknowledging every message settles every record.
                lifecycle.acknowledged(built.messages.map(\.ticket))
                #expect(lifecycle.held == 0, "topics \(mask), lifts \(lifts)")
                #expect(lifecycle.takeCommittable().map(\.1) == [Int64(outcomes.count)])
            }
        }
    }

    @Test func outcomesOfARevokedPartitionAreIgnored() {
        var lifecycle = RecordLifecycle(endpoints: Self.apps, topics: Self.topics(report: true))
        lifecycle.assigned([Self.partition])
        let admitted = lifecycle.admit(Self.batch(from: 0, [0, 0]))
        let first = lifecycle.resolve([Self.accepted(admitted.tickets[0])], now: 0)
        lifecycle.acknowledged(first.planned.map(\.ticket))
        #expect(lifecycle.revoked([Self.partition]).map(\.1) == [1])
        #expect(lifecycle.held == 0)
        #expect(lifecycle.resolve([Self.accepted(admitted.tickets[1])], now: 0).isEmpty)
    }

    @Test func anOffsetGoingBackRestartsThePartition() {
        var lifecycle = RecordLifecycle(endpoints: Self.apps, topics: Self.topics())
        lifecycle.assigned([Self.partition])
        _ = lifecycle.admit(Self.batch(from: 5, [0, 0]))
        let admitted = lifecycle.admit(Self.batch(from: 5, [0]))
        #expect(admitted.restarts.count == 1)
        #expect(admitted.restarts.first?.forgotten == 2)
        #expect(lifecycle.held == 1)
    }

    /// An endpoint that is down counts with at most its share, until the whole is twice the bound.
    @Test func aDownEndpointCountsWithItsShare() {
        var lifecycle = RecordLifecycle(endpoints: Self.apps, topics: Self.topics())
        lifecycle.assigned([Self.partition])
        _ = lifecycle.admit(Self.batch(from: 0, Array(repeating: 0, count: 30) + Array(repeating: 1, count: 5)))
        #expect(lifecycle.pressure(maxInFlight: 20, share: 10) { _ in false } == 35)
        #expect(lifecycle.pressure(maxInFlight: 20, share: 10) { $0 == 0 } == 15)
        _ = lifecycle.admit(Self.batch(from: 35, Array(repeating: 0, count: 5)))
        #expect(lifecycle.pressure(maxInFlight: 20, share: 10) { $0 == 0 } == 20)  // 40 held: at least the bound
    }
}

extension OutgoingMessage {
    var ticket: LedgerTicket { LedgerTicket(rawValue: tag!) }
}
