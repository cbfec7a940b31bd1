import PushCore
import PushGateway
import Metrics
import PushKafka

/// Decodes, validates and routes records: each record is read once with the frame format's limits, then by the
/// rules of the app it goes to (an HTTP/2 app's or a legacy format's), checked against the suppressed tokens and
/// its expiration, and becomes a delivery for an endpoint or an error event. Pure but for the suppression list it
/// reads and the counter of suppressed events.
struct EventAdmission: Sendable {
    /// Decoders for the frame format's limits (every event is read by it first) and HTTP/2's, with the configured
    /// apps' names known (an event's `app` is then no string of its own).
    private let frameDecoder: EventDecoder
    private let http2Decoder: EventDecoder
    /// Per endpoint, the decoder of its format when that is not the frame format (its own limits apply).
    private let legacyDecoders: [EventDecoder?]
    /// Per endpoint, its HTTP/2 settings (nil for a binary endpoint).
    let http2Apps: [HTTP2AppSettings?]
    let endpointFormats: [NotificationFormat]
    /// Per endpoint, what the hot path needs (an `AppEndpoint` copy costs a retain of each of its strings).
    let endpointKeys: [AppKey]
    /// Which endpoint an event goes to.
    private let directory: EndpointDirectory
    /// Added to the record's timestamp when an event names no expiration.
    private let defaultTTLSeconds: Int64
    /// Suppressed tokens (SPEC section 10); nil without `suppression.topic`.
    let suppression: SuppressionList?
    /// Per endpoint, `pushworker_suppressed_total{app}`.
    let suppressedCounters: [Counter]

    init(configuration: PipelineConfiguration, suppression: SuppressionList?) {
        self.suppression = suppression
        suppressedCounters = configuration.endpoints.map {
            Counter(label: "pushworker_suppressed_total", dimensions: [("app", "\($0.key)")])
        }
        defaultTTLSeconds = configuration.defaultTTLSeconds
        http2Apps = configuration.endpoints.map { e in e.http2.map { HTTP2AppSettings(bundleID: e.app, mdmTopic: $0.topic) } }
        let knownApps = KnownNames(configuration.endpoints.map(\.app))
        func decoder(_ decoder: EventDecoder) -> EventDecoder {
            var decoder = decoder
            decoder.knownApps = knownApps
            return decoder
        }
        frameDecoder = decoder(EventDecoder(format: .frame))
        http2Decoder = decoder(.http2)
        legacyDecoders = configuration.endpoints.map { $0.format == .frame ? nil : decoder(EventDecoder(format: $0.format)) }
        endpointFormats = configuration.endpoints.map(\.format)
        endpointKeys = configuration.endpoints.map(\.key)
        directory = EndpointDirectory(configuration.endpoints, knownApps: knownApps)
    }


    /// What a record decoded to: a delivery for an endpoint, or an error event (boxed: it is rare and several
    /// times a delivery's size, which every element of a batch would otherwise take).
    enum Decoded {
        /// Encoded once the batch is decoded: the batch's frames for one endpoint go into one block.
        case deliver(HeldEvent, StagedFrame)
        /// Its request went to the batch's `requests` (a decoded record is moved as a value per record: it is kept
        /// small, without the request's 120 bytes).
        case deliverHTTP2(HeldEvent)
        indirect case reject(DeliveryErrorEvent)
    }

    /// A binary notification whose token and payload are in the batch's staging buffer, with its frame's other items.
    struct StagedFrame {
        let token: Range<Int>
        let payload: Range<Int>
        let expiration: UInt32
        let priority: Priority
    }

    /// Decodes and validates one record; a binary notification's token and payload go to `staging` (nothing is left
    /// there for any other outcome); an HTTP/2 request goes to `requests`. `source` is asked for only for an error
    /// event.
    func decode(
        _ value: UnsafeRawBufferPointer, timestamp: Int64, now: Int64, staging: inout [UInt8], requests: inout [HTTP2Delivery],
        source: () -> RecordSource
    ) -> Decoded {
        // Validation against the frame limit first; the app's own format limit is applied once the app is known.
        switch frameDecoder.decode(value, staging: &staging) {
        case .failure(let rejection):
            // An HTTP/2 app has limits of its own (4096 or 5120 bytes, priority 1): its events are judged by them.
            if let app = rejection.app,
                let index = directory.index(app: app, environment: rejection.environment.flatMap(APNsEnvironment.init(rawValue:))),
                http2Apps[index] != nil
            {
                return decodeHTTP2(value, endpoint: index, timestamp: timestamp, now: now, requests: &requests, source: source)
            }
            return rejected(rejection, value, endpoint: nil, now: now, source: source)
        case .success(var event):
            let endpoint = if let known = event.knownApp {
                directory.index(knownApp: known, environment: event.environment)
            } else {
                directory.index(app: event.app, environment: event.environment)
            }
            guard let index = endpoint else {
                let env = event.environment.map { " (\($0.rawValue))" } ?? ""
                let failed = event.event(in: staging)
                staging.removeSubrange(event.staged)
                return .reject(DeliveryErrorEvent(
                    failed: failed, reason: .unknownApp, status: nil, detail: "no configuration for app \(event.app)\(env)",
                    attempts: 0, source: source(), occurredAt: now))
            }
            if http2Apps[index] != nil {
                staging.removeSubrange(event.staged)
                return decodeHTTP2(value, endpoint: index, timestamp: timestamp, now: now, requests: &requests, source: source)
            }
            if let legacy = legacyDecoders[index] {
                staging.removeSubrange(event.staged)
                switch legacy.decode(value, staging: &staging) {
                case .failure(let rejection):
                    return rejected(rejection, value, endpoint: index, now: now, source: source)
                case .success(let legacy): event = legacy
                }
            }
            var held = HeldEvent(id: event.eventID, endpoint: index, timestamp: timestamp)
            if suppression != nil {
                let suppressed = checkSuppression(
                    app: event.app, token: event.deviceToken(in: staging), registeredAt: event.tokenRegisteredAt,
                    endpoint: index, held: &held, now: now, source: source, failed: { [event] in event.event(in: staging) })
                if let suppressed {
                    staging.removeSubrange(event.staged)
                    return suppressed
                }
            }
            let recordSeconds = timestamp >= 0 ? timestamp / 1000 : now / 1000
            let expiration = event.expiration.resolved(recordTimestamp: recordSeconds, defaultTTL: defaultTTLSeconds)
            if Expiration.hasPassed(expiration, now: now / 1000) {
                let failed = event.event(in: staging)
                staging.removeSubrange(event.staged)
                return expired(failed, expiration, endpoint: index, now: now, source: source)
            }
            return .deliver(held, StagedFrame(token: event.token, payload: event.payload, expiration: expiration, priority: event.priority))
        }
    }

    /// Decodes and validates a record for an HTTP/2 endpoint with the HTTP/2 rules and builds its request.
    private func decodeHTTP2(
        _ value: UnsafeRawBufferPointer, endpoint index: Int, timestamp: Int64, now: Int64, requests: inout [HTTP2Delivery],
        source: () -> RecordSource
    ) -> Decoded {
        switch http2Decoder.decode(value) {
        case .failure(let rejection):
            return rejected(rejection, value, endpoint: index, now: now, source: source)
        case .success(let event):
            var held = HeldEvent(id: event.id, endpoint: index, timestamp: timestamp)
            if suppression != nil,
                let suppressed = checkSuppression(
                    app: event.app, token: event.token, registeredAt: event.tokenRegisteredAt, endpoint: index, held: &held,
                    now: now, source: source, failed: { event })
            {
                return suppressed
            }
            let recordSeconds = timestamp >= 0 ? timestamp / 1000 : now / 1000
            do {
                let request = try APNsRequest(
                    event: event, app: http2Apps[index]!, recordTimestamp: recordSeconds, defaultTTL: defaultTTLSeconds)
                if Expiration.hasPassed(request.expiration, now: now / 1000) {
                    return expired(event, request.expiration, endpoint: index, now: now, source: source)
                }
                requests.append(HTTP2Delivery(ticket: DeliveryTicket(0), request: request))
                return .deliverHTTP2(held)
            } catch {
                return .reject(DeliveryErrorEvent(
                    failed: event, reason: .rejected, status: nil,
                    detail: "push type mdm needs the app entry's topic (apps[].topic)", attempts: 0, source: source(), occurredAt: now))
            }
        }
    }

    /// SPEC section 2: an event already past its expiration when it is read is not sent; it is reported at once,
    /// not after waiting for a connection (and checked again before each send). Its error event names the
    /// environment its endpoint resolved to, as a delivered event's would.
    private func expired(
        _ event: NotificationEvent, _ expiration: UInt32, endpoint index: Int, now: Int64, source: () -> RecordSource
    ) -> Decoded {
        var failed = event
        failed.environment = endpointKeys[index].environment
        return .reject(DeliveryErrorEvent(
            failed: failed, reason: .expired, status: nil, detail: Expiration.passedDetail(expiration), attempts: 0,
            source: source(), occurredAt: now))
    }

    /// SPEC section 10: an event to a suppressed token ends as `token_suppressed`, unless its `token_registered_at`
    /// is later than the invalidation: then it goes out and, once accepted, lifts the suppression.
    /// `failed` gives the event for the error event, when there is one.
    private func checkSuppression(
        app: String, token: DeviceToken, registeredAt: Int64?, endpoint index: Int, held: inout HeldEvent, now: Int64,
        source: () -> RecordSource, failed: () -> NotificationEvent
    ) -> Decoded? {
        guard let suppression else { return nil }
        let environment = endpointKeys[index].environment
        switch suppression.verdict(SuppressionKey(app: app, environment: environment, token: token), registeredAt: registeredAt) {
        case .send:
            return nil
        case .sendAndLift:
            held.liftsSuppression = true
            return nil
        case .suppressed(let invalidatedAt, let reason):
            suppressedCounters[index].increment()
            var failed = failed()
            failed.environment = environment
            return .reject(DeliveryErrorEvent(
                failed: failed, reason: .tokenSuppressed, status: nil,
                detail: Self.suppressedDetail(invalidatedAt, reason),
                attempts: 0, source: source(), occurredAt: now))
        }
    }

    /// SPEC section 10 at the last moment: notifications decoded before their token was suppressed (queued, or
    /// to be resent after a connection's end) do not go out once it is; only those let through by a later
    /// registration do. `held` gives the held records of the candidates' tickets.
    func suppressedBeforeSending(
        _ candidates: [SendCandidate], held: ([DeliveryTicket]) -> [HeldEvent?]
    ) -> [(index: Int, outcome: DeliveryOutcome)] {
        guard let suppression, suppression.count > 0 else { return [] }
        let entries = held(candidates.map(\.ticket))
        var stopped: [(index: Int, outcome: DeliveryOutcome)] = []
        for (index, entry) in entries.enumerated() {
            guard let entry, !entry.liftsSuppression else { continue }
            let endpoint = endpointKeys[entry.endpoint]
            let tokenSource = candidates[index].tokenSource
            let key = SuppressionKey(app: endpoint.app, environment: endpoint.environment, token: tokenSource.token)
            guard case .suppressed(let invalidatedAt, let reason) = suppression.verdict(key, registeredAt: nil) else { continue }
            suppressedCounters[entry.endpoint].increment()
            stopped.append((index, DeliveryOutcome(
                ticket: candidates[index].ticket, tokenSource: tokenSource,
                result: .failed(.tokenSuppressed, status: nil, detail: Self.suppressedDetail(invalidatedAt, reason)),
                attempts: candidates[index].sends)))
        }
        return stopped
    }

    static func suppressedDetail(_ invalidatedAt: Int64, _ reason: SuppressionReason) -> String {
        "token invalidated at \(RFC3339.format(unixSeconds: invalidatedAt)) (\(reason.rawValue)), not registered again since"
    }

    /// The error event of a rejected record. It says what is known: when the event names no environment but its
    /// app is configured, the environment SPEC section 2's default resolves to (as for delivered events).
    private func rejected(
        _ rejection: EventRejection, _ value: UnsafeRawBufferPointer, endpoint: Int?, now: Int64, source: () -> RecordSource
    ) -> Decoded {
        var event = DeliveryErrorEvent(rejected: rejection, rawMessage: Array(value), source: source(), occurredAt: now)
        if event.environment == nil, rejection.environment == nil,
            let index = endpoint ?? rejection.app.flatMap({ directory.index(app: $0, environment: nil) })
        {
            event.environment = endpointKeys[index].environment.rawValue
        }
        return .reject(event)
    }
}
