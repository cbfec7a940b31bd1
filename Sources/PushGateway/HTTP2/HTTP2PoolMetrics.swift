import Metrics
import PushCore
import Synchronization

/// The HTTP/2 pool's metrics (docs/monitoring.md): responses by status and reason are made as they come.
final class HTTP2PoolMetrics: Sendable {
    /// Streams open per connection slot.
    let streams: [Gauge]
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS per connection slot.
    let streamLimit: [Gauge]
    /// Seconds since the provider token in use was issued.
    let tokenAge: Gauge
    /// Follows the token cache's renewal count.
    let tokenRenewals: FollowingCounter
    /// From a stream's opening to its response.
    let latency: LatencyHistogram
    /// The app's label value.
    let app: String
    /// Connections this side ended for a broken rule or limit (SPEC section 13), by GOAWAY code.
    private let errorCounters: [HTTP2Wire.ErrorCode: Counter]
    /// Responses by status and reason, made on first use.
    private let responseCounters = Mutex<[ResponseKey: Counter]>([:])

    /// Counts a batch of responses by status and reason.
    func countResponses(_ counts: [ResponseKey: Int]) {
        let app = self.app
        let counters = responseCounters.withLock { made in
            counts.map { key, n in
                if let counter = made[key] { return (counter, n) }
                let counter = Counter(label: "pushworker_http2_responses_total", dimensions: [
                    ("app", app), ("status", String(key.status)), ("reason", key.reason ?? ""),
                ])
                made[key] = counter
                return (counter, n)
            }
        }
        for (counter, n) in counters { counter.increment(by: Int64(n)) }
    }

    func connectionErrors(_ code: HTTP2Wire.ErrorCode) -> Counter { errorCounters[code]! }

    /// A token was taken for a batch of requests: its age, and the renewals since the last look.
    func tokenUsed(_ tokens: ProviderTokenCache, now: Int64) {
        if let age = tokens.age(now: now) { tokenAge.record(age) }
        tokenRenewals.follow(tokens.renewalCount)
    }

    init(app: String, connections: Int) {
        self.app = app
        streams = (0..<connections).map {
            Gauge(label: "pushworker_http2_streams_open", dimensions: [("app", app), ("connection", String($0))])
        }
        streamLimit = (0..<connections).map {
            Gauge(label: "pushworker_http2_server_stream_limit", dimensions: [("app", app), ("connection", String($0))])
        }
        tokenAge = Gauge(label: "pushworker_provider_token_age_seconds", dimensions: [("app", app)])
        tokenRenewals = FollowingCounter(Counter(label: "pushworker_provider_token_renewals_total", dimensions: [("app", app)]))
        latency = LatencyHistograms.process.histogram("pushworker_http2_response_latency_seconds", labels: [("app", app)])
        var errorCounters: [HTTP2Wire.ErrorCode: Counter] = [:]
        for code in HTTP2Wire.ErrorCode.allCases {
            errorCounters[code] = Counter(label: "pushworker_http2_connection_errors_total", dimensions: [("app", app), ("code", code.name)])
        }
        self.errorCounters = errorCounters
    }
}

extension HTTP2PoolMetrics {
    /// A response's status and reason: what its counter is labelled with. A reason that is not one of Apple's is
    /// counted as `other` (the delivery error still carries it as sent), so a gateway that varies its reasons cannot
    /// make a counter, and a line of `/metrics`, per response.
    struct ResponseKey: Hashable {
        var status: Int
        var reason: String?

        init(status: Int, reason: String?) {
            self.status = status
            self.reason = reason
        }

        init(_ response: APNsResponse) {
            status = response.status
            reason = response.reason.map { APNsReason(rawValue: $0)?.rawValue ?? "other" }
        }
    }
}
