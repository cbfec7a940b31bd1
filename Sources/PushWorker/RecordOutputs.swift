import PushCore
import PushGateway
import PushKafka

/// The output topics (SPEC section 5): the error topic always, the others when configured.
struct OutputTopics: Sendable {
    var error: ProducerTopic
    var report: ProducerTopic?
    var feedback: ProducerTopic?
    var suppression: ProducerTopic?
}

/// The output events one record's outcome writes. Made once per outcome by ``RecordLifecycle``: the ledger waits
/// for `count` acknowledgements and ``OutputBuilder`` writes one message per member, so the two cannot disagree.
struct OutputPlan: OptionSet, Sendable {
    let rawValue: UInt8

    /// The delivery-error event of a failure.
    static let error = OutputPlan(rawValue: 1 << 0)
    /// The delivery report of an accepted notification.
    static let report = OutputPlan(rawValue: 1 << 1)
    /// The feedback event of an HTTP/2 410.
    static let feedback = OutputPlan(rawValue: 1 << 2)
    /// The suppression record of a token reported gone (SPEC section 10).
    static let suppression = OutputPlan(rawValue: 1 << 3)
    /// The tombstone that lifts a token's suppression once a notification to it was accepted again.
    static let lift = OutputPlan(rawValue: 1 << 4)

    /// A record rejected before delivery: its error event.
    static let rejected: OutputPlan = .error

    init(rawValue: UInt8) { self.rawValue = rawValue }

    init(_ outcome: DeliveryOutcome, held: HeldEvent?, topics: OutputTopics) {
        var plan: OutputPlan = []
        if outcome.isAccepted {
            if topics.report != nil { plan.insert(.report) }
            if topics.suppression != nil, held?.liftsSuppression == true { plan.insert(.lift) }
        } else {
            plan.insert(.error)
            if topics.feedback != nil, outcome.unregisteredAt != nil { plan.insert(.feedback) }
            if topics.suppression != nil, outcome.suppressionReason != nil { plan.insert(.suppression) }
        }
        self = plan
    }

    /// How many output events it writes.
    var count: Int { rawValue.nonzeroBitCount }
}

extension DeliveryOutcome {
    /// Why this outcome suppresses its token (SPEC section 10): binary status 8, HTTP/2 410 and 400 BadDeviceToken;
    /// nil for any other.
    var suppressionReason: SuppressionReason? {
        switch result {
        case .failed(.invalidToken, _, let detail):
            // HTTP/2 400 DeviceTokenNotForTopic is the token of another app: not gone.
            httpStatus == nil ? .invalidToken : (detail == APNsReason.badDeviceToken.rawValue ? .badDeviceToken : nil)
        case .failed(.unregistered, _, _): .unregistered
        default: nil
        }
    }
}

/// Turns planned outcomes into output messages (SPEC section 5), one per member of each plan. Pure: the caller
/// produces them.
struct OutputBuilder: Sendable {
    let topics: OutputTopics
    /// Per endpoint, its app and environment.
    let endpoints: [AppKey]

    /// What a batch of planned outcomes writes, and what it tells the counts.
    struct Built {
        var messages: [OutgoingMessage] = []
        /// Suppressions lifted by accepted notifications (applied here at once; other instances read the tombstone).
        var lifted: [SuppressionEntry] = []
        var accepted = 0
        var reasons: [DeliveryErrorReason] = []
        /// From each accepted record's timestamp to `now`.
        var latencies = LatencyHistogram.Batch()
    }

    func build(_ planned: [PlannedOutputs], now: Int64) -> Built {
        var built = Built()
        for item in planned {
            let endpoint = endpoints[item.held.endpoint]
            let token = item.outcome.tokenSource.token
            let ticket = item.ticket
            switch item.outcome.result {
            case .accepted:
                built.accepted += 1
                if item.held.timestamp > 0 { built.latencies.record(milliseconds: now - item.held.timestamp) }
                if item.plan.contains(.lift), let topic = topics.suppression {
                    let key = SuppressionRecord.key(app: endpoint.app, environment: endpoint.environment, token: token)
                    built.messages.append(OutgoingMessage(topic: topic, key: key, value: nil, ticket: ticket))
                    built.lifted.append(.lift(SuppressionKey(app: endpoint.app, environment: endpoint.environment, token: token)))
                }
                if item.plan.contains(.report), let topic = topics.report {
                    let report = DeliveryReport(
                        eventID: item.held.id, app: endpoint.app, environment: endpoint.environment, token: token,
                        attempts: item.outcome.attempts, ids: item.outcome.ids, source: item.source, occurredAt: now)
                    built.messages.append(OutgoingMessage(topic: topic, key: Array(token.hex.utf8), value: report.json(), ticket: ticket))
                }
            case .failed(let reason, let status, let detail):
                let hex = token.hex
                let event = DeliveryErrorEvent(
                    eventID: item.held.id, app: endpoint.app, environment: endpoint.environment.rawValue, token: hex,
                    reason: reason, status: item.outcome.httpStatus ?? status.map { UInt16($0.code) }, detail: detail,
                    attempts: item.outcome.attempts, source: item.source, occurredAt: now, messageKey: hex,
                    ids: item.outcome.ids)
                built.messages.append(OutgoingMessage(topic: topics.error, key: Array(hex.utf8), value: event.json(), ticket: ticket))
                if item.plan.contains(.feedback), let unregisteredAt = item.outcome.unregisteredAt, let topic = topics.feedback {
                    // SPEC section 9: the response's timestamp (milliseconds) converted to the feedback event's seconds.
                    let feedback = FeedbackEvent(
                        app: endpoint.app, environment: endpoint.environment, token: token,
                        timestamp: UInt32(clamping: unregisteredAt / 1000), receivedAt: now)
                    built.messages.append(OutgoingMessage(topic: topic, key: Array(hex.utf8), value: feedback.json(), ticket: ticket))
                }
                if item.plan.contains(.suppression), let record = item.suppression, let topic = topics.suppression {
                    built.messages.append(OutgoingMessage(topic: topic, key: record.key, value: record.json(), ticket: ticket))
                }
                built.reasons.append(reason)
            }
        }
        return built
    }

    /// The error event of a record rejected before delivery (its plan is ``OutputPlan/rejected``).
    func rejected(_ event: DeliveryErrorEvent, ticket: LedgerTicket) -> OutgoingMessage {
        OutgoingMessage(topic: topics.error, key: event.messageKey.map { Array($0.utf8) }, value: event.json(), ticket: ticket)
    }
}

/// The optional delivery-report event: one per accepted notification, for audit.
struct DeliveryReport {
    var eventID: String
    var app: String
    var environment: APNsEnvironment
    var token: DeviceToken
    var attempts: Int
    var ids: NotificationIDs
    var source: RecordSource
    var occurredAt: Int64

    func json() -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.field("event_id", eventID)
        w.field("app", app)
        w.field("environment", environment.rawValue)
        w.field("token", token.hex)
        w.field("attempts", Int64(attempts))
        ids.write(into: &w)
        source.write("source", into: &w)
        w.field("accepted_at", RFC3339.format(unixMilliseconds: occurredAt))
        w.endObject()
        return w.bytes
    }
}

extension OutgoingMessage {
    /// An output event of the held record `ticket`: its acknowledgement settles one of the record's outputs.
    init(topic: ProducerTopic, key: [UInt8]?, value: [UInt8]?, ticket: LedgerTicket) {
        self.init(topic: topic, key: key, value: value, tag: ticket.rawValue)
    }
}

extension DeliveryOutcome {
    /// The ids its output events carry (no broadcast yet: `channel_id` stays null).
    var ids: NotificationIDs {
        NotificationIDs(apnsID: apnsID?.description, apnsUniqueID: apnsUniqueID)
    }
}
