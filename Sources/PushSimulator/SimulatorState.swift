import PushCore
import Synchronization

/// Counts of what the simulator did, printed on exit.
public struct SimulatorSummary: Hashable, Sendable {
    public var gatewayConnections = 0
    public var refusedConnections = 0
    public var accepted = 0
    /// Error responses sent, by status code (10 included).
    public var errorResponses: [UInt8: Int] = [:]
    public var abruptCloses = 0
    /// Connections closed without an answer because a simple-format (command 0) notification was bad, by the status
    /// the other formats would have earned.
    public var silentCloses: [UInt8: Int] = [:]
    public var feedbackConnections = 0
    public var feedbackTuplesSent = 0
    /// HTTP/2 API: connections, answers by `"STATUS"` or `"STATUS Reason"`, GOAWAYs sent, connections cut.
    public var apiConnections = 0
    public var apiAnswers: [String: Int] = [:]
    public var apiGoaways = 0
    public var apiAbruptCloses = 0
    /// HTTP/2 API: connections this side ended for a broken rule or limit (SPEC section 13), by GOAWAY code name.
    public var apiConnectionErrors: [String: Int] = [:]
    /// HTTP/2 API: the distinct provider tokens that passed verification and were taken into use on a connection
    /// (a provider renews its token as often as this count less one).
    public var apiProviderTokens = 0
    /// Lines of the record file (`--record`) that could not be written: the file misses them.
    public var recordLinesLost = 0

    public init() {}

    /// Answers with this status, whatever the reason.
    public func apiAnswers(status: Int) -> Int {
        apiAnswers.filter { $0.key == String(status) || $0.key.hasPrefix("\(status) ") }.values.reduce(0, +)
    }

    /// One JSON line: `{"gateway_connections": ..., "error_responses": {"8": 3, ...}, ...}`.
    public var json: String {
        let errors = errorResponses.keys.sorted().map { "\"\($0)\": \(errorResponses[$0]!)" }.joined(separator: ", ")
        let silent = silentCloses.keys.sorted().map { "\"\($0)\": \(silentCloses[$0]!)" }.joined(separator: ", ")
        let answers = apiAnswers.keys.sorted().map { "\"\($0)\": \(apiAnswers[$0]!)" }.joined(separator: ", ")
        let connectionErrors = apiConnectionErrors.keys.sorted().map { "\"\($0)\": \(apiConnectionErrors[$0]!)" }.joined(separator: ", ")
        return """
            {"gateway_connections": \(gatewayConnections), "refused_connections": \(refusedConnections), \
            "accepted": \(accepted), "error_responses": {\(errors)}, "abrupt_closes": \(abruptCloses), \
            "silent_closes": {\(silent)}, \
            "feedback_connections": \(feedbackConnections), "feedback_tuples_sent": \(feedbackTuplesSent), \
            "api_connections": \(apiConnections), "api_answers": {\(answers)}, "api_goaways": \(apiGoaways), \
            "api_abrupt_closes": \(apiAbruptCloses), "api_connection_errors": {\(connectionErrors)}, \
            "api_provider_tokens": \(apiProviderTokens), \
            "record_lines_lost": \(recordLinesLost)}
            """
    }

    mutating func add(_ other: SimulatorSummary) {
        gatewayConnections += other.gatewayConnections
        refusedConnections += other.refusedConnections
        accepted += other.accepted
        errorResponses.merge(other.errorResponses, uniquingKeysWith: +)
        abruptCloses += other.abruptCloses
        silentCloses.merge(other.silentCloses, uniquingKeysWith: +)
        feedbackConnections += other.feedbackConnections
        feedbackTuplesSent += other.feedbackTuplesSent
        apiConnections += other.apiConnections
        apiAnswers.merge(other.apiAnswers, uniquingKeysWith: +)
        apiGoaways += other.apiGoaways
        apiAbruptCloses += other.apiAbruptCloses
        apiConnectionErrors.merge(other.apiConnectionErrors, uniquingKeysWith: +)
        apiProviderTokens += other.apiProviderTokens
    }
}

/// State shared by all connections, behind one lock: connection numbering, refusals, counts and the feedback lists.
/// Connections touch it once per read batch, not once per notification.
final class SimulatorState: Sendable {
    private struct State {
        var connectionsOpened = 0
        var summary = SimulatorSummary()
        /// Tokens that got status 8, per app, with the time they did.
        var unregistered: [String: [FeedbackTuple]] = [:]
        /// Apps that have been sent the `--feedback` file's tuples already.
        var fileFeedbackSent: Set<String> = []
        /// The provider tokens taken into use on any API connection (`SimulatorSummary/apiProviderTokens`).
        var providerTokens: Set<String> = []
    }

    private let state = Mutex(State())
    /// `--token-rate`: its own lock, taken once per accepted request (only when the option is given).
    private let tokenRate: Mutex<TokenRateLimit>
    private let limitsTokenRate: Bool
    private let refuseFirst: Int
    private let fileFeedback: [FeedbackEntry]
    private let unregisteredAfter: Int64

    init(configuration: SimulatorConfiguration) {
        tokenRate = Mutex(TokenRateLimit(limit: configuration.tokenRate ?? .max))
        limitsTokenRate = configuration.tokenRate != nil
        refuseFirst = configuration.refuseConnections
        fileFeedback = configuration.feedback
        unregisteredAfter = Int64(configuration.unregisteredAfterSeconds)
    }

    /// `--token-rate`: whether a request to `token`, otherwise accepted, in `second` stays within the token's rate.
    func withinTokenRate(_ token: [UInt8], second: Int64) -> Bool {
        guard limitsTokenRate else { return true }
        return tokenRate.withLock { $0.admit(token, second: second) }
    }

    /// Numbers a new gateway connection, or returns nil when it is one of the first N to refuse.
    func openGatewayConnection() -> Int? {
        state.withLock { s in
            s.connectionsOpened += 1
            if s.connectionsOpened <= refuseFirst {
                s.summary.refusedConnections += 1
                return nil
            }
            s.summary.gatewayConnections += 1
            return s.connectionsOpened
        }
    }

    /// Numbers a new API connection (its own sequence).
    func openAPIConnection() -> Int {
        state.withLock { s in
            s.summary.apiConnections += 1
            return s.summary.apiConnections
        }
    }

    func countAPI(
        answer: String? = nil, times: Int = 1, goaway: Bool = false, abruptClose: Bool = false,
        connectionError: HTTP2Wire.ErrorCode? = nil
    ) {
        state.withLock { s in
            if let connectionError { s.summary.apiConnectionErrors[connectionError.name, default: 0] += 1 }
            if let answer { s.summary.apiAnswers[answer, default: 0] += times }
            if goaway { s.summary.apiGoaways += 1 }
            if abruptClose { s.summary.apiAbruptCloses += 1 }
        }
    }

    /// A connection took `token` into use (verified, and not refused as too soon a renewal): counted once however
    /// many connections use it.
    func providerTokenTaken(_ token: String) {
        state.withLock { s in
            if s.providerTokens.insert(token).inserted { s.summary.apiProviderTokens += 1 }
        }
    }

    func add(_ counts: SimulatorSummary) {
        state.withLock { $0.summary.add(counts) }
    }

    var summary: SimulatorSummary { state.withLock { $0.summary } }

    func tokenRejected(app: String, token: [UInt8], at time: UInt32) {
        guard let token = try? DeviceToken(bytes: token) else { return }
        state.withLock { $0.unregistered[app, default: []].append(FeedbackTuple(timestamp: time, token: token)) }
    }

    /// The feedback list for `app` at `now` (UNIX seconds), cleared as it is handed out.
    func takeFeedback(app: String, now: Int64) -> [FeedbackTuple] {
        state.withLock { s in
            var tuples: [FeedbackTuple] = []
            if s.fileFeedbackSent.insert(app).inserted {
                tuples += fileFeedback.filter { $0.app == nil || $0.app == app }.map(\.tuple)
            }
            let pending = s.unregistered[app] ?? []
            let due = pending.filter { Int64($0.timestamp) + unregisteredAfter <= now }
            s.unregistered[app] = pending.filter { Int64($0.timestamp) + unregisteredAfter > now }
            tuples += due
            s.summary.feedbackConnections += 1
            s.summary.feedbackTuplesSent += tuples.count
            return tuples
        }
    }
}
