import Logging
import Metrics
import NIOCore
import NIOPosix
import PushCore
import PushGateway
import PushKafka
import Synchronization

/// Where the pipeline sends output events and how it delivers.
public struct PipelineConfiguration: Sendable {
    public var deliveryErrorTopic: String
    public var deliveryReportTopic: String?
    /// Where HTTP/2 410 answers go as feedback events (SPEC section 9: HTTP/2 has no feedback service); nil: none.
    public var feedbackTopic: String?
    /// The compacted topic of suppressed tokens (SPEC section 10); nil: no suppression.
    public var suppressionTopic: String?
    /// Added to the record's timestamp when an event names no expiration.
    public var defaultTTLSeconds: Int64 = 86400
    /// The configured apps: for each bundle id, its environments (the first is the default when the event names
    /// none and production is not configured).
    public var endpoints: [AppEndpoint]

    public init(deliveryErrorTopic: String, deliveryReportTopic: String? = nil, endpoints: [AppEndpoint]) {
        self.deliveryErrorTopic = deliveryErrorTopic
        self.deliveryReportTopic = deliveryReportTopic
        self.endpoints = endpoints
    }
}

/// Counts of what the pipeline did.
public struct PipelineCounts: Sendable, Hashable {
    public var consumed = 0
    public var submitted = 0
    public var accepted = 0
    public var errorsByReason: [DeliveryErrorReason: Int] = [:]
}

/// What the ledger keeps of a record while its notification is delivered: what its output events need, and no
/// payload and no token (the engine holds the frame, and outcomes bring its token back).
///
/// 28 bytes and, for the usual event, no heap object of its own: the event id is kept inline when it has at most
/// 16 bytes or is a UUID spelled canonically (36 characters, one case: kept as its 16 bytes); any other goes to an
/// object of its own, in the same two words' place. Swift lays out fields in declaration order, each small field in
/// the next free bytes, so the id's one-byte case comes first and the small fields fill what it leaves; the
/// timestamp is kept in two 4-byte halves so that nothing rounds the event up to 32 bytes, and the ledger's own
/// fields for the record (its group and counts; its offset is kept per run of offsets) fill the rest of its 32.
struct HeldEvent: Sendable {
    /// The id's bytes (the kind says how they spell it), or the id itself when it does not fit.
    private enum StoredID: Sendable {
        case inline(UInt64, UInt64)
        case long(LongID)
    }

    private var storedID: StoredID
    /// How `storedID`'s inline words spell the id (`.overflow` for a long one) in the low 7 bits; whether the
    /// event lifts a suppression in the high one.
    private var flags: UInt8
    private var endpointIndex: UInt16
    private var timestampLow: UInt32
    private var timestampHigh: Int32

    private static let liftsBit: UInt8 = 0x80

    /// The most endpoints a held event can name.
    static let endpointLimit = Int(UInt16.max) - 1

    private final class LongID: Sendable {
        let id: String

        init(_ id: String) { self.id = id }
    }

    init(id: EventID, endpoint: Int, timestamp: Int64) {
        precondition(endpoint <= Self.endpointLimit, "an endpoint index beyond the configuration's limit")
        endpointIndex = UInt16(endpoint)
        timestampLow = UInt32(truncatingIfNeeded: timestamp)
        timestampHigh = Int32(truncatingIfNeeded: timestamp >> 32)
        if let packed = id.packed {
            flags = packed.kind.rawValue
            storedID = .inline(packed.words.0, packed.words.1)
        } else {
            flags = CompactIDKind.overflow.rawValue
            storedID = .long(LongID(id.string))
        }
    }

    init(id: String, endpoint: Int, timestamp: Int64) {
        self.init(id: EventID(id), endpoint: endpoint, timestamp: timestamp)
    }

    private var idKind: CompactIDKind { CompactIDKind(rawValue: flags & ~Self.liftsBit) }

    /// Its token is suppressed but was registered again since: once accepted, the suppression is lifted.
    var liftsSuppression: Bool {
        get { flags & Self.liftsBit != 0 }
        set { flags = newValue ? flags | Self.liftsBit : flags & ~Self.liftsBit }
    }

    /// The Kafka record's timestamp, UNIX milliseconds (-1 when none).
    var timestamp: Int64 { Int64(timestampHigh) << 32 | Int64(timestampLow) }

    /// The endpoint's index in the configuration.
    var endpoint: Int { Int(endpointIndex) }

    var id: String {
        switch storedID {
        case .inline(let high, let low): idKind.unpack((high, low))
        case .long(let long): long.id
        }
    }
}

/// The worker's flow for each record: decode and validate, pick the app's connection pool, deliver, and turn the
/// outcome into output events. The pipeline's ``InFlightLedger`` owns every record from fetch to commit: a record
/// is admitted when polled (its delivery carries the ledger ticket), resolved when its outcome is known, and
/// settled once its output events are acknowledged by the broker; its offset moves with the settled prefix. Each
/// step takes the ledger's lock once per batch (a poll, an outcome batch, a producer poll's acknowledgements).
///
/// Backpressure is the ledger's count (``pressure``): fetching pauses at `max_in_flight`. An app whose gateway is
/// down counts with at most its share (`max_in_flight` / endpoints), so that its backlog does not stop the other
/// apps; what it holds beyond its share waits in the ledger, and fetching pauses anyway once the ledger holds twice
/// `max_in_flight`.
public final class Pipeline: RecordSink {
    private struct Ledger {
        var ledger: InFlightLedger<HeldEvent>
        /// Slots by (topic handle, partition), for the poll thread's records.
        var slots: [SlotKey: UInt32] = [:]
    }

    private struct SlotKey: Hashable {
        var topic: UInt
        var partition: Int32
    }

    public let configuration: PipelineConfiguration
    private let producer: KafkaProducer
    private let errorTopic: ProducerTopic
    private let reportTopic: ProducerTopic?
    private let feedbackTopic: ProducerTopic?
    /// Suppressed tokens (SPEC section 10) and their topic; nil without `suppression.topic`.
    private let suppression: SuppressionList?
    private let suppressionTopic: ProducerTopic?
    /// Per endpoint, `pushworker_suppressed_total{app}`.
    private let suppressedCounters: [Counter]
    /// Per endpoint, its HTTP/2 settings (nil for a binary endpoint).
    private let http2Apps: [HTTP2AppSettings?]
    private let engineBox = Mutex<DeliveryEngine?>(nil)
    private let state: Mutex<Ledger>
    private let counts = Mutex(PipelineCounts())
    /// Validates against the frame format's limits, before the app is known.
    /// Decoders for the frame format's limits (every event is read by it first) and HTTP/2's, with the configured
    /// apps' names known (an event's `app` is then no string of its own).
    private let frameDecoder: EventDecoder
    private let http2Decoder: EventDecoder
    /// Per endpoint, the decoder of its format when that is not the frame format (its own limits apply).
    private let legacyDecoders: [EventDecoder?]
    fileprivate let endpointFormats: [NotificationFormat]
    /// Per endpoint, what the hot path needs (an `AppEndpoint` copy costs a retain of each of its strings).
    private let endpointKeys: [AppKey]
    /// Which endpoint an event goes to.
    private let directory: EndpointDirectory
    private let maxInFlight: Int
    private let share: Int
    private let logger: Logger
    private let wallClock: @Sendable () -> Int64
    private let consumedCounter = Counter(label: "pushworker_events_consumed_total")
    private let acceptedCounter = Counter(label: "pushworker_notifications_accepted_total")
    private let errorCounters = Dictionary(uniqueKeysWithValues: DeliveryErrorReason.allCases.map {
        ($0, Counter(label: "pushworker_delivery_errors_total", dimensions: [("reason", $0.rawValue)]))
    })
    /// From the Kafka record's timestamp to acceptance by the gateway.
    private let latency = LatencyHistograms.process.histogram("pushworker_delivery_latency_seconds")
    /// Outcome batches resolved in the ledger whose output events are still being built (on NIO's thread pool,
    /// off the event loops that report outcomes).
    private let outputsPending = Atomic<Int>(0)
    /// The poll thread's buffer for a poll's tokens and payloads (``DecodedBatch/staging``), kept between polls: a
    /// poll's worth is larger than glibc's mmap threshold, and a new one per poll would be mapped and faulted in
    /// afresh. Taken and given back once per poll.
    private let stagingBuffer = Mutex<[UInt8]>([])

    public init(
        configuration: PipelineConfiguration, producer: KafkaProducer, delivery: DeliveryConfiguration,
        suppression: SuppressionList? = nil,
        logger: Logger = Logger(label: "pushworker.pipeline"), wallClockMilliseconds: @escaping @Sendable () -> Int64
    ) throws {
        self.configuration = configuration
        self.suppression = configuration.suppressionTopic == nil ? nil : (suppression ?? SuppressionList())
        suppressionTopic = configuration.suppressionTopic.map { producer.topic($0) }
        suppressedCounters = configuration.endpoints.map {
            Counter(label: "pushworker_suppressed_total", dimensions: [("app", "\($0.key)")])
        }
        self.producer = producer
        self.logger = logger
        self.wallClock = wallClockMilliseconds
        errorTopic = producer.topic(configuration.deliveryErrorTopic)
        reportTopic = configuration.deliveryReportTopic.map { producer.topic($0) }
        feedbackTopic = configuration.feedbackTopic.map { producer.topic($0) }
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
        maxInFlight = delivery.maxInFlight
        share = max(1, delivery.maxInFlight / max(1, configuration.endpoints.count))
        state = Mutex(Ledger(ledger: InFlightLedger(groups: configuration.endpoints.count)))
        var sendCheck: SendCheck?
        if configuration.suppressionTopic != nil {
            sendCheck = { [weak self] (app: AppKey, candidates: [SendCandidate]) -> [(index: Int, outcome: DeliveryOutcome)] in
                self?.suppressedBeforeSending(app, candidates) ?? []
            }
        }
        let engine = try DeliveryEngine(
            endpoints: configuration.endpoints, configuration: delivery, logger: logger, sendCheck: sendCheck
        ) { [weak self] outcomes in self?.settle(outcomes) }
        engineBox.withLock { $0 = engine }
        producer.onAcknowledged { [weak self] tickets in self?.acknowledged(tickets) }
    }

    private var engine: DeliveryEngine { engineBox.withLock { $0! } }

    public var snapshot: PipelineCounts { counts.withLock { $0 } }

    /// Records admitted and not yet settled (outcome known and output events acknowledged).
    public var held: Int { state.withLock { $0.ledger.count } }

    /// Opens the gateway connections.
    public func start() {
        engine.start()
    }

    /// Consumes a stream of copied records until it ends (a replay's range), waiting while the engine holds
    /// `max_in_flight` notifications.
    public func run(records: some AsyncSequence<[KafkaRecord], Never>) async throws {
        engine.start()
        for await batch in records {
            var decoded = DecodedBatch(now: wallClock(), capacity: batch.count)
            for r in batch {
                if decoded.runs.last?.partition != r.topicPartition { decoded.startRun(r.topicPartition) }
                r.value.withUnsafeBytes { decoded.add(offset: r.offset, timestamp: r.timestamp, value: $0, self) }
            }
            let admitted = admit(decoded)
            for (index, deliveries) in admitted.binary.enumerated() where !deliveries.isEmpty {
                try await engine.submit(deliveries, to: endpointKeys[index])
            }
            for (index, deliveries) in admitted.http2.enumerated() where !deliveries.isEmpty {
                try await engine.submit(deliveries, to: endpointKeys[index])
            }
        }
    }

    /// Stops delivering: what has no outcome is left uncommitted (delivered again after a restart).
    public func stop() async -> Int {
        let unsettled = await engine.stopAll()
        return unsettled.binary.count + unsettled.http2
    }

    /// Waits until every delivery has its outcome and every outcome's output events are handed to the producer, or
    /// until `timeout`; returns whether all of it happened.
    public func drain(timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        guard await engine.drain(timeout: timeout) else { return false }
        return await outputsHandedOver(before: deadline)
    }

    /// Output batches still being built.
    public var pendingOutputs: Int { outputsPending.load(ordering: .relaxed) }

    /// Waits (yielding; building a batch takes microseconds) until no output batch is being built, or `deadline`.
    public func outputsHandedOver(before deadline: ContinuousClock.Instant) async -> Bool {
        while outputsPending.load(ordering: .acquiring) > 0 {
            if ContinuousClock.now >= deadline || Task.isCancelled { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return true
    }

    public var engineStatus: [AppKey: PoolStatus] {
        Dictionary(uniqueKeysWithValues: engine.apps.compactMap { k in engine.status(of: k).map { (k, $0) } })
    }

    // MARK: RecordSink (the consumer's poll thread)

    public func consume(_ batch: PolledBatch) {
        var staging = stagingBuffer.withLock { buffer in
            var taken = [UInt8]()
            swap(&taken, &buffer)
            return taken
        }
        staging.removeAll(keepingCapacity: true)
        var decoded = DecodedBatch(now: wallClock(), capacity: batch.count, staging: staging)
        var run: (handle: UnsafeRawPointer, partition: Int32)?
        for i in 0..<batch.count {
            let r = batch[i]
            if run == nil || run!.handle != r.topicHandle || run!.partition != r.partition {
                run = (r.topicHandle, r.partition)
                decoded.startRun(r.topicPartition)
            }
            decoded.add(offset: r.offset, timestamp: r.timestamp, value: r.value, self)
        }
        let admitted = admit(decoded)
        stagingBuffer.withLock { $0 = decoded.takeStaging() }
        for (index, deliveries) in admitted.binary.enumerated() where !deliveries.isEmpty {
            engine.enqueue(deliveries, to: endpointKeys[index])
        }
        for (index, deliveries) in admitted.http2.enumerated() where !deliveries.isEmpty {
            engine.enqueue(deliveries, to: endpointKeys[index])
        }
    }

    public func assigned(_ partitions: [TopicPartition]) { state.withLock { $0.ledger.assign(partitions) } }

    public func revoked(_ partitions: [TopicPartition]) -> [(TopicPartition, Int64)] {
        state.withLock { $0.ledger.revoke(partitions) }
    }

    public func takeCommittable() -> [(TopicPartition, Int64)] { state.withLock { $0.ledger.takeCommittable() } }

    /// The ledger's count, an app whose gateway is down counting with at most its share; at least `max_in_flight`
    /// once the ledger holds twice that.
    public var pressure: Int {
        let engine = self.engine
        return state.withLock { s in
            var pressure = s.ledger.count
            for (index, key) in endpointKeys.enumerated() where engine.isDown(key) {
                pressure -= max(0, s.ledger.held(group: index + 1) - share)
            }
            return s.ledger.count >= 2 * maxInFlight ? max(pressure, maxInFlight) : pressure
        }
    }

    // MARK: Admission

    /// What a record decoded to: a delivery for an endpoint, or an error event (boxed: it is rare and several
    /// times a delivery's size, which every element of a batch would otherwise take).
    fileprivate enum Decoded {
        /// Encoded once the batch is decoded: the batch's frames for one endpoint go into one block.
        case deliver(HeldEvent, StagedFrame)
        /// Its request went to the batch's `requests` (a decoded record is moved as a value per record: it is kept
        /// small, without the request's 120 bytes).
        case deliverHTTP2(HeldEvent)
        indirect case reject(DeliveryErrorEvent)
    }

    /// A binary notification whose token and payload are in the batch's staging buffer, with its frame's other items.
    fileprivate struct StagedFrame {
        let token: Range<Int>
        let payload: Range<Int>
        let expiration: UInt32
        let priority: Priority
    }

    /// A poll's records, decoded outside the ledger's lock. What a record became is kept apart from the notification,
    /// request or error event it carries, each kind in an array of its own in record order, so that admitting and
    /// encoding read them where they are: an element copied out retains its token, payload and strings.
    fileprivate struct DecodedBatch {
        /// What became of one record (its notification, request or error event is the next of its kind).
        enum Kind {
            case deliver(HeldEvent)
            case deliverHTTP2(HeldEvent)
            case reject
        }

        /// A binary notification waiting to be encoded, with its endpoint and its room in a frame block.
        struct PendingFrame {
            let endpoint: Int
            let room: Int
            let frame: StagedFrame
        }

        /// Consecutive records of one partition: `start` is the first one's index.
        struct Run {
            let partition: TopicPartition
            let start: Int
        }

        let now: Int64
        private(set) var runs: [Run] = []
        private(set) var records: [(offset: Int64, kind: Kind)] = []
        private(set) var frames: [PendingFrame] = []
        private(set) var requests: [HTTP2Delivery] = []
        private(set) var rejects: [DeliveryErrorEvent] = []
        /// The tokens' and payloads' bytes of `frames`, one after the other: no arrays of their own per record.
        private(set) var staging: [UInt8]

        init(now: Int64, capacity: Int, staging: [UInt8] = []) {
            self.now = now
            self.staging = staging
            records.reserveCapacity(capacity)
            frames.reserveCapacity(capacity)
        }

        /// The staging buffer, for the next poll.
        mutating func takeStaging() -> [UInt8] {
            var taken = [UInt8]()
            swap(&taken, &staging)
            return taken
        }

        /// The records of `runs[run]`.
        func indices(ofRun run: Int) -> Range<Int> {
            runs[run].start..<(run + 1 < runs.count ? runs[run + 1].start : records.count)
        }

        /// The records added next are `partition`'s (until the next run starts).
        mutating func startRun(_ partition: TopicPartition) {
            runs.append(Run(partition: partition, start: records.count))
        }

        /// Decodes one record of the current run.
        mutating func add(offset: Int64, timestamp: Int64, value: UnsafeRawBufferPointer, _ pipeline: Pipeline) {
            let partition = runs[runs.count - 1].partition
            let decoded = pipeline.decode(value, timestamp: timestamp, now: now, staging: &staging, requests: &requests) {
                RecordSource(topic: partition.topic, partition: partition.partition, offset: offset)
            }
            switch consume decoded {
            case .deliver(let held, let frame):
                let room = FrameBlockWriter.room(
                    tokenCount: frame.token.count, payloadCount: frame.payload.count, format: pipeline.endpointFormats[held.endpoint])
                frames.append(PendingFrame(endpoint: held.endpoint, room: room, frame: frame))
                records.append((offset, .deliver(held)))
            case .deliverHTTP2(let held):
                records.append((offset, .deliverHTTP2(held)))
            case .reject(let event):
                rejects.append(event)
                records.append((offset, .reject))
            }
        }
    }

    /// Decodes and validates one record; a binary notification's token and payload go to `staging` (nothing is left
    /// there for any other outcome); an HTTP/2 request goes to `requests`. `source` is asked for only for an error
    /// event.
    fileprivate func decode(
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
            let expiration = event.expiration.resolved(recordTimestamp: recordSeconds, defaultTTL: configuration.defaultTTLSeconds)
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
                    event: event, app: http2Apps[index]!, recordTimestamp: recordSeconds, defaultTTL: configuration.defaultTTLSeconds)
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
    /// registration do.
    private func suppressedBeforeSending(_ app: AppKey, _ candidates: [SendCandidate]) -> [(index: Int, outcome: DeliveryOutcome)] {
        guard let suppression, suppression.count > 0 else { return [] }
        let entries = state.withLock { s in candidates.map { s.ledger.entry(LedgerTicket($0.ticket)) } }
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
            event.environment = configuration.endpoints[index].environment.rawValue
        }
        return .reject(event)
    }

    /// Admits a batch into the ledger under one lock; returns the deliveries by endpoint and produces the error
    /// events of the rejected records.
    private func admit(_ batch: DecodedBatch) -> (binary: [[Delivery]], http2: [[HTTP2Delivery]]) {
        // Each endpoint's deliveries are in record order: the next one of `held.endpoint` is the record's, and its
        // ticket is written in place (a copy out and back would retain and release its frame block).
        var byEndpoint = encodeFrames(batch)
        var nextFrame = Array(repeating: 0, count: byEndpoint.count)
        var nextRequest = 0, nextReject = 0
        var byHTTP2Endpoint = Array(repeating: [HTTP2Delivery](), count: configuration.endpoints.count)
        var errors: [OutgoingMessage] = []
        var reasons: [DeliveryErrorReason] = []
        state.withLock { s in
            for run in batch.runs.indices {
                let partition = batch.runs[run].partition
                let slot = s.ledger.slot(for: partition)
                for i in batch.indices(ofRun: run) {
                    let offset = batch.records[i].offset
                    switch batch.records[i].kind {
                    case .deliver(let held):
                        let admission = s.ledger.admit(slot: slot, offset: offset, group: held.endpoint + 1, entry: held)
                        restarted(admission, partition)
                        byEndpoint[held.endpoint][nextFrame[held.endpoint]].ticket = DeliveryTicket(admission.ticket)
                        nextFrame[held.endpoint] += 1
                    case .deliverHTTP2(let held):
                        let admission = s.ledger.admit(slot: slot, offset: offset, group: held.endpoint + 1, entry: held)
                        restarted(admission, partition)
                        var delivery = batch.requests[nextRequest]
                        nextRequest += 1
                        delivery.ticket = DeliveryTicket(admission.ticket)
                        byHTTP2Endpoint[held.endpoint].append(delivery)
                    case .reject:
                        let admission = s.ledger.admit(
                            slot: slot, offset: offset, group: InFlightLedger<HeldEvent>.noGroup, entry: nil,
                            outcomeKnown: true, outputs: 1)
                        restarted(admission, partition)
                        let event = batch.rejects[nextReject]
                        nextReject += 1
                        errors.append(OutgoingMessage(
                            topic: errorTopic, key: event.messageKey.map { Array($0.utf8) }, value: event.json(),
                            ticket: admission.ticket))
                        reasons.append(event.reason)
                    }
                }
            }
        }
        producer.produce(errors)
        let submitted = byEndpoint.reduce(0) { $0 + $1.count } + byHTTP2Endpoint.reduce(0) { $0 + $1.count }
        record(consumed: batch.records.count, submitted: submitted, errors: reasons)
        return (byEndpoint, byHTTP2Endpoint)
    }

    /// The batch's notifications encoded, by endpoint, each endpoint's in the batch's order: each endpoint's into
    /// blocks of exactly their size (up to ``FrameBlockWriter/blockCapacity`` each), outside the ledger's lock.
    private func encodeFrames(_ batch: DecodedBatch) -> [[Delivery]] {
        var remaining = Array(repeating: 0, count: endpointFormats.count)
        var counts = Array(repeating: 0, count: endpointFormats.count)
        for i in batch.frames.indices {
            remaining[batch.frames[i].endpoint] += batch.frames[i].room
            counts[batch.frames[i].endpoint] += 1
        }
        var byEndpoint = counts.map { count in
            var deliveries: [Delivery] = []
            deliveries.reserveCapacity(count)
            return deliveries
        }
        var writers: [FrameBlockWriter?] = Array(repeating: nil, count: endpointFormats.count)
        // The writer of the endpoint being written is held here, not in `writers`: a write through the array's
        // optional would copy it out and back, retaining and releasing its block for every frame.
        var current = -1
        var writer: FrameBlockWriter?
        batch.staging.withUnsafeBytes { staging in
            for i in batch.frames.indices {
                let endpoint = batch.frames[i].endpoint
                if endpoint != current {
                    if current >= 0 { writers[current] = writer.take() }
                    writer = writers[endpoint].take()
                    current = endpoint
                }
                let room = batch.frames[i].room
                if !(writer?.fits(room) ?? false) {
                    writer = FrameBlockWriter(capacity: max(room, min(remaining[endpoint], FrameBlockWriter.blockCapacity)))
                }
                remaining[endpoint] -= room
                let frame = batch.frames[i].frame
                byEndpoint[endpoint].append(writer!.delivery(
                    ticket: DeliveryTicket(0), token: UnsafeRawBufferPointer(rebasing: staging[frame.token]),
                    payload: UnsafeRawBufferPointer(rebasing: staging[frame.payload]), expiration: frame.expiration,
                    priority: frame.priority, format: endpointFormats[endpoint]))
            }
        }
        return byEndpoint
    }

    private func restarted(_ admission: InFlightLedger<HeldEvent>.Admission, _ partition: TopicPartition) {
        if case .restarted(_, let forgotten) = admission {
            logger.warning("a partition went back to an earlier offset: its ledger restarts", metadata: [
                "partition": "\(partition)", "forgotten": "\(forgotten)",
            ])
        }
    }

    // MARK: Settling

    /// Outcomes from the engine (an event-loop thread, a batch at a time): resolved in the ledger under one lock,
    /// then their output events are handed to the producer.
    private func settle(_ outcomes: [DeliveryOutcome]) {
        // What decides an outcome's output events, read once (not through `self` per outcome).
        let reportOutputs = reportTopic == nil ? 0 : 1
        let suppressing = suppressionTopic != nil
        let feedbackOutputs = feedbackTopic == nil ? 0 : 1
        var resolved: [Resolved] = []
        // Most outcomes: accepted, with no output event. Only counted, with their latency: their record times alone
        // go to the output work, not the whole entry.
        var acceptedTimestamps: [Int64] = []
        acceptedTimestamps.reserveCapacity(outcomes.count)
        state.withLock { s in
            s.ledger.settlingBatch { ledger in
                // Each outcome read where it is: a copy would retain what it holds (its token's source, its detail).
                for i in outcomes.indices {
                    let ticket = LedgerTicket(outcomes[i].ticket)
                    // What a failure writes: its error event, a feedback event for a 410 (when the feedback topic is
                    // set), a suppression record for a token reported gone.
                    let failureOutputs = outcomes[i].isAccepted ? nil : 1
                        + (outcomes[i].unregisteredAt != nil ? feedbackOutputs : 0)
                        + (suppressing && Self.suppressionReason(of: outcomes[i]) != nil ? 1 : 0)
                    var outputs = 0
                    guard let (entry, offset) = ledger.resolve(ticket, outputs: { entry in
                        // Accepted: a token registered again writes its suppression's tombstone.
                        outputs = failureOutputs ?? reportOutputs + (suppressing && entry?.liftsSuppression == true ? 1 : 0)
                        return outputs
                    }), let entry else { continue }
                    if outputs == 0 {  // accepted (a failure always has its error event)
                        acceptedTimestamps.append(entry.timestamp)
                        continue
                    }
                    resolved.append((outcomes[i], ticket, entry, ledger.topicPartition(slot: ticket.slot).source(offset: offset), nil))
                }
            }
        }
        guard !resolved.isEmpty || !acceptedTimestamps.isEmpty else { return }
        // This instance suppresses what its gateways reported gone at once, before any resend can be taken (the
        // other instances when they read the records).
        // SPEC section 10's time: the 410's timestamp, else the time of the answer. The same record goes to the topic.
        if let suppression {
            let now = wallClock()
            var entries: [SuppressionEntry] = []
            for i in resolved.indices {
                let (outcome, _, entry, _, _) = resolved[i]
                guard let reason = Self.suppressionReason(of: outcome) else { continue }
                let endpoint = endpointKeys[entry.endpoint]
                let record = SuppressionRecord(
                    app: endpoint.app, environment: endpoint.environment, token: outcome.tokenSource.token,
                    invalidatedAtMilliseconds: outcome.unregisteredAt ?? now, reason: reason)
                resolved[i].suppression = record
                entries.append(.suppress(record))
            }
            suppression.apply(entries)
        }
        // The output events are built off the event loop that reported the outcomes: it goes back to its sockets.
        outputsPending.add(1, ordering: .relaxed)
        NIOThreadPool.singleton.submit { [self, resolved, acceptedTimestamps] _ in
            produceOutputs(resolved, acceptedTimestamps: acceptedTimestamps)
            outputsPending.subtract(1, ordering: .releasing)
        }
    }

    /// An outcome resolved in the ledger that writes output events: what they need (the record's source, and the
    /// suppression record its outcome writes, if any).
    private typealias Resolved = (
        outcome: DeliveryOutcome, ticket: LedgerTicket, entry: HeldEvent, source: RecordSource, suppression: SuppressionRecord?
    )

    /// Builds and produces the output events of resolved outcomes, and counts them with the accepted ones that write
    /// none (given by their records' timestamps).
    private func produceOutputs(_ resolved: [Resolved], acceptedTimestamps: [Int64]) {
        let now = wallClock()
        var messages: [OutgoingMessage] = []
        var accepted = acceptedTimestamps.count
        var latencies = LatencyHistogram.Batch()
        for timestamp in acceptedTimestamps where timestamp > 0 { latencies.record(milliseconds: now - timestamp) }
        var reasons: [DeliveryErrorReason] = []
        var suppressions: [SuppressionEntry] = []
        for (outcome, ticket, entry, source, suppressionRecord) in resolved {
            let endpoint = endpointKeys[entry.endpoint]
            let token = outcome.tokenSource.token
            switch outcome.result {
            case .accepted:
                accepted += 1
                if entry.liftsSuppression, let suppressionTopic {
                    let key = SuppressionRecord.key(app: endpoint.app, environment: endpoint.environment, token: token)
                    messages.append(OutgoingMessage(topic: suppressionTopic, key: key, value: nil, ticket: ticket))
                    suppressions.append(.lift(SuppressionKey(app: endpoint.app, environment: endpoint.environment, token: token)))
                }
                if entry.timestamp > 0 { latencies.record(milliseconds: now - entry.timestamp) }
                if let reportTopic {
                    let report = DeliveryReport(
                        eventID: entry.id, app: endpoint.app, environment: endpoint.environment, token: token,
                        attempts: outcome.attempts, source: source, occurredAt: now)
                    messages.append(OutgoingMessage(topic: reportTopic, key: Array(token.hex.utf8), value: report.json(), ticket: ticket))
                }
            case .failed(let reason, let status, let detail):
                let hex = token.hex
                let event = DeliveryErrorEvent(
                    eventID: entry.id, app: endpoint.app, environment: endpoint.environment.rawValue, token: hex,
                    reason: reason, status: outcome.httpStatus ?? status.map { UInt16($0.code) }, detail: detail,
                    attempts: outcome.attempts, source: source, occurredAt: now, messageKey: hex)
                messages.append(OutgoingMessage(topic: errorTopic, key: Array(hex.utf8), value: event.json(), ticket: ticket))
                if let unregisteredAt = outcome.unregisteredAt, let feedbackTopic {
                    // SPEC section 9: the response's timestamp (milliseconds) converted to the feedback event's seconds.
                    let feedback = FeedbackEvent(
                        app: endpoint.app, environment: endpoint.environment, token: token,
                        timestamp: UInt32(clamping: unregisteredAt / 1000), receivedAt: now)
                    messages.append(OutgoingMessage(topic: feedbackTopic, key: Array(hex.utf8), value: feedback.json(), ticket: ticket))
                }
                if let suppressionTopic, let record = suppressionRecord {
                    messages.append(OutgoingMessage(topic: suppressionTopic, key: record.key, value: record.json(), ticket: ticket))
                }
                reasons.append(reason)
            }
        }
        // A lifted suppression ends here at once; the others when they read the tombstone.
        suppression?.apply(suppressions)
        producer.produce(messages)
        latency.record(latencies)
        record(accepted: accepted, errors: reasons)
    }

    /// Why an outcome suppresses its token (SPEC section 10): binary status 8, HTTP/2 410 and 400 BadDeviceToken.
    static func suppressionReason(of outcome: DeliveryOutcome) -> SuppressionReason? {
        switch outcome.result {
        case .failed(.invalidToken, _, let detail):
            // HTTP/2 400 DeviceTokenNotForTopic is the token of another app: not gone.
            outcome.httpStatus == nil ? .invalidToken : (detail == APNsReason.badDeviceToken.rawValue ? .badDeviceToken : nil)
        case .failed(.unregistered, _, _): .unregistered
        default: nil
        }
    }

    /// Adds a batch's figures to the counts (one lock) and the metrics.
    private func record(consumed: Int = 0, submitted: Int = 0, accepted: Int = 0, errors: [DeliveryErrorReason]) {
        counts.withLock { c in
            c.consumed += consumed
            c.submitted += submitted
            c.accepted += accepted
            for reason in errors { c.errorsByReason[reason, default: 0] += 1 }
        }
        if consumed > 0 { consumedCounter.increment(by: Int64(consumed)) }
        if accepted > 0 { acceptedCounter.increment(by: Int64(accepted)) }
        for reason in errors { errorCounters[reason]?.increment() }
    }

    /// The broker acknowledged output events (the producer thread, one batch per poll).
    private func acknowledged(_ tickets: [LedgerTicket]) {
        state.withLock { s in s.ledger.settlingBatch { ledger in for ticket in tickets { ledger.acknowledged(ticket) } } }
    }
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

/// Which endpoint an event goes to: its environment's if it names one, else production's if configured, else the
/// app's only (or first) environment's. Built once from the endpoints: per app, the index of each environment's
/// endpoint; an event whose app the decoder knew finds it by that app's position, any other by its name.
struct EndpointDirectory: Sendable {
    private struct Choices {
        var production: Int?
        var sandbox: Int?
        let first: Int
    }

    /// Each app's place in `choices`.
    private var slots: [String: Int] = [:]
    private var choices: [Choices] = []
    /// Per name of the decoders' known apps (by its position there), the endpoints it goes to with no
    /// environment, production and sandbox named, three in a row, -1 for none: one load for an event.
    private var endpointsOfKnown: [Int32] = []

    /// - Parameter knownApps: the names the decoders know, so that an event's ``StagedNotification/knownApp`` finds
    ///   its endpoint without a comparison of names.
    init(_ endpoints: [AppEndpoint], knownApps: KnownNames = KnownNames()) {
        for (index, endpoint) in endpoints.enumerated() {
            let slot: Int
            if let known = slots[endpoint.app] {
                slot = known
            } else {
                slot = choices.count
                slots[endpoint.app] = slot
                choices.append(Choices(first: index))
            }
            switch endpoint.environment {
            case .production: choices[slot].production = choices[slot].production ?? index
            case .sandbox: choices[slot].sandbox = choices[slot].sandbox ?? index
            }
        }
        for name in knownApps.all {
            for environment in [nil, APNsEnvironment.production, .sandbox] {
                endpointsOfKnown.append(Int32(index(app: name, environment: environment) ?? -1))
            }
        }
    }

    /// The index of the endpoint in the configuration, or nil when the app (or its named environment) has none.
    func index(app: String, environment: APNsEnvironment?) -> Int? {
        slots[app].flatMap { index(slot: $0, environment: environment) }
    }

    /// As ``index(app:environment:)`` for the app at this position among the known apps it was built with.
    func index(knownApp: Int, environment: APNsEnvironment?) -> Int? {
        let column = switch environment {
        case nil: 0
        case .production?: 1
        case .sandbox?: 2
        }
        let endpoint = endpointsOfKnown[3 * knownApp + column]
        return endpoint < 0 ? nil : Int(endpoint)
    }

    private func index(slot: Int, environment: APNsEnvironment?) -> Int? {
        let app = choices[slot]
        switch environment {
        case .production?: return app.production
        case .sandbox?: return app.sandbox
        case nil: return app.production ?? app.first
        }
    }
}

/// The optional delivery-report event: one per accepted notification, for audit.
struct DeliveryReport {
    var eventID: String
    var app: String
    var environment: APNsEnvironment
    var token: DeviceToken
    var attempts: Int
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
        source.write("source", into: &w)
        w.field("accepted_at", RFC3339.format(unixMilliseconds: occurredAt))
        w.endObject()
        return w.bytes
    }
}
