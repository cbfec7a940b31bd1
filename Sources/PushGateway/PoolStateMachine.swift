import DequeModule
import PushCollections
import PushCore

/// The connections to one gateway for one (app, environment), in either transport, with no I/O, no clock and no
/// lock of its own: the queue in which resends stand before new notifications, resends that wait for a delay, the
/// connection slots and their life (waiting out backoff or the connect cap, connecting, ready, draining, finished),
/// the backoff, the connect cap, each connection's capacity, and what each connection's end means for the next one.
/// Every event returns what the caller must do (schedule a connection attempt or a resend, wake connections, close
/// connections, resolve a stop); ``ConnectionPool`` (binary) and ``HTTP2Pool`` do it.
///
/// Generic over the clock's instant, the caller's handle to a ready connection (tests drive it by hand, the pools
/// keep their event-loop-bound handlers in it), the queued item (``Delivery``, ``HTTP2Delivery``) and the kind of
/// capacity a connection has: ``SendWindow`` (notifications written and not yet accepted, binary) or
/// ``StreamWindow`` (open streams, HTTP/2).
///
/// **The simple format** (`bisects`) has no identifiers and no error responses: the gateway closes the connection
/// at a bad notification, having processed those before it and discarding those after. So a connection that ends
/// that way leaves a group known to hold a culprit (everything it had not yet seen accepted), and the pool finds
/// the culprit by halving: the first half goes alone on a connection with nothing else in flight (a probe). If the
/// connection closes, that half holds a culprit and the other half goes back to ordinary sending; if the half is
/// accepted, the other half holds it and is halved in turn, without a probe of its own. A single notification on
/// which a connection closed twice alone fails as `invalid_token` (the worker checks everything else before it
/// sends); its neighbours are never failed, only sent again.
struct PoolStateMachine<Instant: InstantProtocol, Connection, Item: PoolItem, Capacity: ConnectionCapacity>
where Instant.Duration == Duration {
    enum Slot {
        case idle
        /// Waiting out backoff or the connect cap; `timer` names the attempt the caller scheduled.
        case scheduled(timer: Int)
        /// Connecting or in the TLS handshake (the caller bounds it: the connect timeout, HTTP/2's SETTINGS timeout).
        case connecting
        case ready(Connection)
        /// Takes no new work (HTTP/2 GOAWAY, or retired); its end opens the replacement.
        case draining(Connection)
        /// Stopped for good.
        case finished

        var isFinished: Bool {
            if case .finished = self { return true }
            return false
        }

        var isReady: Bool {
            if case .ready = self { return true }
            return false
        }
    }

    /// A connection attempt for `slot` to schedule `after` from now; when it is due the caller calls
    /// ``timerFired(slot:timer:now:)`` with the same `timer`.
    struct ConnectTimer: Equatable {
        var slot: Int
        var timer: Int
        var after: Duration
        /// The cap the attempt took its token from, and how much of `after` is its wait.
        var cap: ConnectCap
        var capDelay: Duration
    }

    /// What a connection's end leads to.
    struct EndAction {
        /// The slot's next attempt; nil once the pool is stopping.
        var next: ConnectTimer?
        /// How long the slot backs off before its next attempt (the connect cap may add to it).
        var backoff: Duration
        /// Connections that waited for work and now have resends to take.
        var wake: [Connection]
        /// Notifications the pool settled itself (a culprit the simple format's halving found).
        var outcomes: [DeliveryOutcome]
        /// Every connection failed before becoming ready and none is ready: the gateway is down.
        var down: Bool
        var readyConnections: Int
    }

    /// Resends to put back in front of the queue `after` from now: the caller calls ``resendDue(timer:)`` then.
    struct ResendTimer: Equatable {
        var timer: Int
        var after: Duration
    }

    /// What stopping leads to.
    struct StopAction {
        /// Scheduled attempts and resends to cancel (they would find the pool stopped anyway; the resends' items
        /// stay with the unsent).
        var cancel: [Int]
        /// Ready and draining connections to close; each ends with ``ConnectionEnd/stopped``.
        var close: [Connection]
    }

    /// What happened, kept (the last `logLimit`) for status, logs and tests.
    struct LogEntry {
        var slot: Int
        var kind: PoolEvent.Kind
        var at: Instant
    }

    static var logLimit: Int { 10_000 }

    private(set) var pending = ChunkedQueue<Item>()
    /// Resends waiting for their delay, by timer.
    private var delayed: [Int: [Item]] = [:]
    private(set) var slots: [Slot]
    /// Slots whose connection found the queue empty and waits to be told of new work.
    private var waiting: Set<Int> = []
    private(set) var backoff: Backoff<Instant>
    private var limiter: ConnectRateLimiter<Instant>
    private var rejectionLimiter: ConnectRateLimiter<Instant>
    private(set) var window: Capacity
    private(set) var stopped = false
    private(set) var lastError: String?
    /// Whether any connection was ever ready.
    private(set) var everConnected = false
    /// Whether the last attempt failed in the TLS handshake (a certificate refused) and none is ready since.
    private(set) var credentialsRefused = false
    /// HTTP/2: why the provider API refused the app's credentials on a request, until a request succeeds.
    private(set) var refusedByAPI: String?
    /// Why the last connection ended, when one did.
    private(set) var lastEnd: ConnectionEnd?
    private(set) var attempts = 0
    private(set) var lateErrorResponses = 0
    private(set) var log = Deque<LogEntry>()
    private var nextTimer = 0

    /// Whether culprits are found by halving (the simple format).
    let bisects: Bool
    /// How many times a notification alone on a connection must see it close before it fails.
    static var closesAloneToFail: Int { 2 }
    /// Groups known to hold a notification the gateway closes the connection on, first to be probed first.
    private(set) var knownBad = Deque<[Item]>()
    /// The slot whose connection carries the probe, and the other half of the group, judged by the probe's verdict.
    private var probe: (slot: Int, rest: [Item])?
    /// A slot that takes nothing new until what it has in flight is settled, to carry the next probe alone.
    private var drainingSlot: Int?

    /// `limiter` caps every new connection but those after a rejection, which `rejectionLimiter` caps.
    init(
        connections: Int, backoff: Backoff<Instant>, limiter: ConnectRateLimiter<Instant>,
        rejectionLimiter: ConnectRateLimiter<Instant>, window: Capacity, bisects: Bool = false
    ) {
        self.bisects = bisects
        self.slots = Array(repeating: .idle, count: max(1, connections))
        self.backoff = backoff
        self.limiter = limiter
        self.rejectionLimiter = rejectionLimiter
        self.window = window
    }

    var readyConnections: Int { slots.count(where: \.isReady) }

    /// The slot's connection, while it is ready.
    func connection(in slot: Int) -> Connection? {
        if case .ready(let connection) = slots[slot] { return connection }
        return nil
    }

    /// Stopped, and every slot is finished: nothing can settle any more.
    var isStopComplete: Bool { stopped && slots.allSatisfy(\.isFinished) }

    // MARK: Work

    /// The first attempt of every slot (under the connect cap like every other).
    mutating func start(now: Instant) -> [ConnectTimer] {
        slots.indices.compactMap { schedule(slot: $0, after: .zero, cap: .gateway, now: now) }
    }

    /// Queues new deliveries; returns the connections to wake.
    mutating func submit<C: Collection<Item>>(_ deliveries: C) -> [Connection] {
        pending.append(contentsOf: deliveries)
        return takeWaiting()
    }

    /// Puts deliveries to send again in front of the queue, in their order; returns the connections to wake.
    mutating func requeue(_ deliveries: [Item]) -> [Connection] {
        guard !deliveries.isEmpty else { return [] }
        pending.prepend(contentsOf: deliveries)
        return takeWaiting()
    }

    /// Up to `max` deliveries for `slot` to send, and no more than its capacity leaves room for beside the `held`
    /// ones it has (none when it is full: its acceptance tick, or its next free stream, asks again). When the queue
    /// is empty, the slot waits to be woken by the next submit or requeue.
    mutating func take(max: Int, slot: Int, held: Int) -> [Item] {
        if let probe, probe.slot == slot { return [] }  // alone until its verdict
        if probe == nil, !knownBad.isEmpty, drainingSlot == nil || drainingSlot == slot {
            // The next probe goes out alone: this slot drains first.
            drainingSlot = slot
            guard held == 0 else { return [] }
            drainingSlot = nil
            let group = knownBad.removeFirst()
            let half = Swift.max(1, group.count / 2)
            probe = (slot, Array(group.dropFirst(half)))
            return Array(group.prefix(half))
        }
        let room = window.limit - held
        guard room > 0 else { return [] }
        if pending.isEmpty {
            waiting.insert(slot)
            return []
        }
        let count = Swift.min(max, room, pending.count)
        return pending.takeFirst(count)  // moved out: no retain and release of each frame block
    }

    private mutating func takeWaiting() -> [Connection] {
        guard !waiting.isEmpty else { return [] }
        var connections: [Connection] = []
        for slot in waiting {
            if let connection = connection(in: slot) { connections.append(connection) }
        }
        waiting.removeAll()
        return connections
    }

    /// Resends that wait `after` before they go again in front of the queue (HTTP/2: 429, 5xx); nil when there are
    /// none. Once stopping they join the queue at once, to be handed back unsent.
    mutating func resendLater(_ deliveries: [Item], after: Duration) -> ResendTimer? {
        guard !deliveries.isEmpty else { return nil }
        guard !stopped else {
            pending.prepend(contentsOf: deliveries)
            return nil
        }
        nextTimer += 1
        delayed[nextTimer] = deliveries
        return ResendTimer(timer: nextTimer, after: after)
    }

    /// A resend's delay is over; returns the connections to wake.
    mutating func resendDue(timer: Int) -> [Connection] {
        guard let deliveries = delayed.removeValue(forKey: timer) else { return [] }
        return requeue(deliveries)
    }

    // MARK: Connections

    /// A scheduled attempt is due. Returns whether to open the connection now (false once stopping, or for an
    /// attempt that is no longer the slot's).
    mutating func timerFired(slot: Int, timer: Int, now: Instant) -> Bool {
        guard case .scheduled(let current) = slots[slot], current == timer else { return false }
        guard !stopped else {
            slots[slot] = .finished
            return false
        }
        slots[slot] = .connecting
        attempts += 1
        record(slot, .attempt, now)
        return true
    }

    /// The slot's connection is ready. Returns false when the pool is stopping: the caller closes it.
    mutating func connectionReady(slot: Int, connection: Connection, now: Instant) -> Bool {
        slots[slot] = .ready(connection)
        everConnected = true
        credentialsRefused = false
        backoff.connected(at: now)
        record(slot, .ready, now)
        return !stopped
    }

    /// A ready connection is still healthy at `now` (backoff forgets failures after long enough).
    mutating func stillHealthy(at now: Instant) {
        backoff.stillHealthy(at: now)
    }

    /// The slot's connection ended for `reason` after `accepted` notifications were accepted on it; `resend` goes
    /// again in front of the queue, and `lostUnaccepted` says whether it ended holding notifications not accepted.
    mutating func connectionEnded(
        slot: Int, reason: ConnectionEnd, resend: [Item], lostUnaccepted: Bool, accepted: Int, now: Instant
    ) -> EndAction {
        slots[slot] = .idle
        waiting.remove(slot)
        var delay = Duration.zero
        lastEnd = reason
        switch reason {
        case .failedBeforeReady(let why):
            lastError = why
            credentialsRefused = false
            delay = backoff.failed()
        case .handshakeRefused(let why):
            lastError = why
            credentialsRefused = true
            delay = backoff.failed()
        case .errorResponse(let status):
            // What the answer settled, and its weight on the send window, went through errorResponse(...) when it
            // was read.
            if status == .shutdown { delay = backoff.failed() }
        case .dropped(let carried):
            if !carried {
                delay = backoff.failed()
            } else if lostUnaccepted && !bisects {
                // (In the simple format a close is the gateway's answer to a bad notification, as status 8 is in
                // the others: it says nothing against the window.)
                window.lost(acceptedOnConnection: accepted)
            }
        case .refusedByAPI(let why):
            lastError = why
            delay = backoff.failed()
        case .retired, .idleRenewal, .stopped:
            break
        }
        record(slot, .ended(reason: "\(reason)", backoff: delay), now)
        if drainingSlot == slot { drainingSlot = nil }
        var outcomes: [DeliveryOutcome] = []
        var toSend = resend
        let closedOnSomething: Bool
        switch reason {
        case .dropped(true), .errorResponse: closedOnSomething = true
        default: closedOnSomething = false
        }
        if bisects, let probe, probe.slot == slot {
            self.probe = nil
            if closedOnSomething && !resend.isEmpty {
                // The probe's half holds a culprit; the other half goes back to ordinary sending.
                toSend = probe.rest
                if resend.count == 1 {
                    var suspect = resend[0]
                    suspect.transientFailures += 1
                    if suspect.transientFailures >= Self.closesAloneToFail {
                        outcomes.append(suspect.failedByPool(
                            .invalidToken,
                            "the gateway closed the connection on it, alone on the connection, \(suspect.transientFailures) times (the simple format has no error responses)"))
                    } else {
                        knownBad.prepend([suspect])
                    }
                } else {
                    knownBad.prepend(resend)
                }
            } else {
                // Ended for another reason: the group is as suspect as before.
                toSend = []
                if !resend.isEmpty || !probe.rest.isEmpty { knownBad.prepend(resend + probe.rest) }
            }
        } else if bisects, closedOnSomething, !resend.isEmpty {
            knownBad.append(resend)
            toSend = []
        }
        var wake = requeue(toSend)
        if !knownBad.isEmpty { wake += takeWaiting() }
        let ready = readyConnections
        var down = false
        if reason.failedBeforeReady, ready == 0 { down = true }
        let next: ConnectTimer?
        if stopped {
            slots[slot] = .finished
            next = nil
        } else {
            // In the simple format a close on a notification is the gateway's rejection: the rejections' cap.
            let cap = bisects && closedOnSomething ? ConnectCap.afterRejection : reason.connectCap
            next = schedule(slot: slot, after: delay, cap: cap, now: now)
        }
        return EndAction(
            next: next, backoff: delay, wake: wake, outcomes: outcomes, down: down, readyConnections: ready)
    }

    /// Schedules the slot's next attempt after `backoff`, and after `cap` allows: the cap holds whatever the
    /// backoff says.
    private mutating func schedule(slot: Int, after backoff: Duration, cap: ConnectCap, now: Instant) -> ConnectTimer? {
        guard !stopped else {
            slots[slot] = .finished
            return nil
        }
        let due = now.advanced(by: backoff)
        let wait = switch cap {
        case .gateway: limiter.acquire(now: due)
        case .afterRejection: rejectionLimiter.acquire(now: due)
        }
        nextTimer += 1
        slots[slot] = .scheduled(timer: nextTimer)
        return ConnectTimer(slot: slot, timer: nextTimer, after: backoff + wait, cap: cap, capDelay: wait)
    }

    // MARK: Stopping

    /// Stops opening connections: scheduled and idle slots finish now, ready ones are to be closed (their ends
    /// finish them), connecting ones finish when their attempt ends.
    mutating func stop() -> StopAction {
        stopped = true
        var action = StopAction(cancel: [], close: [])
        for slot in slots.indices {
            switch slots[slot] {
            case .ready(let connection), .draining(let connection): action.close.append(connection)
            case .scheduled(let timer):
                action.cancel.append(timer)
                slots[slot] = .finished
            case .idle: slots[slot] = .finished
            case .connecting, .finished: break
            }
        }
        waiting.removeAll()
        action.cancel += delayed.keys
        return action
    }

    /// What was never sent or never settled, in order (suspects first), leaving the queue empty.
    mutating func takeUnsent() -> [Item] {
        defer {
            pending.removeAll()
            knownBad.removeAll()
            probe = nil
            delayed.removeAll()
        }
        return Array(knownBad.joined()) + (probe?.rest ?? []) + delayed.keys.sorted().flatMap { delayed[$0]! }
            + Array(pending)
    }

    /// Notifications waiting to be sent: the queue, resends waiting for their delay, and suspects waiting for a
    /// probe.
    var waitingCount: Int {
        pending.count + delayed.values.reduce(0) { $0 + $1.count } + knownBad.reduce(0) { $0 + $1.count }
            + (probe?.rest.count ?? 0)
    }

    private mutating func record(_ slot: Int, _ kind: PoolEvent.Kind, _ at: Instant) {
        log.append(LogEntry(slot: slot, kind: kind, at: at))
        if log.count > Self.logLimit { log.removeFirst() }
    }
}

// MARK: The send window (binary)

extension PoolStateMachine where Capacity == SendWindow {
    /// Whether a connection ending now, after `accepted` were accepted on it, is the send window's doing.
    func windowBlamed(acceptedOnConnection accepted: Int) -> Bool {
        window.blamesWindow(acceptedOnConnection: accepted)
    }

    /// `count` notifications passed the acceptance window on `slot`'s connection, which held `held`. Returns the
    /// connections to wake (a probe's verdict can make another group ready to probe).
    mutating func accepted(_ count: Int, held: Int, slot: Int) -> [Connection] {
        window.accepted(count, held: held)
        guard let probe, probe.slot == slot, count >= held else { return [] }
        // The probe went through: the culprit is in the other half.
        self.probe = nil
        if !probe.rest.isEmpty { knownBad.prepend(probe.rest) }
        return takeWaiting()
    }

    /// An error response ended a connection on which `accepted` were accepted; what it settled goes again in
    /// front of the queue. Every answer weighs on the send window
    /// (``SendWindow/gatewayAnswered(resent:acceptedOnConnection:)``), those about one notification's data (an
    /// invalid token) as much as the gateway's own (status 10, a processing error). Returns the connections to wake.
    mutating func errorResponse(
        _ status: GatewayStatus, resend: [Item], unmatched: Bool, acceptedOnConnection accepted: Int
    ) -> [Connection] {
        if unmatched && status.deliveryErrorReason != nil { lateErrorResponses += 1 }
        window.gatewayAnswered(
            resent: resend.count, acceptedOnConnection: accepted, aboutData: status != .shutdown && !status.isTransient)
        return requeue(resend)
    }
}

// MARK: The stream window (HTTP/2)

extension PoolStateMachine where Capacity == StreamWindow {
    /// Responses arrived: `successes` of them succeeded (each widens the stream window by one); `refused` says why
    /// the provider API refused the app's credentials, if one did (until the next success).
    mutating func answered(successes: Int, refused: String?) {
        if let refused {
            refusedByAPI = refused
        } else if successes > 0 {
            refusedByAPI = nil
            window.succeeded(successes)
        }
    }

    /// `count` requests lost together (their connection cut, their deadline passed): the stream window shrinks.
    mutating func streamsLost(_ count: Int) {
        window.streamsLost(count)
    }

    /// The slot's connection takes no new streams (GOAWAY, or retired); it ends once its open streams finish.
    mutating func connectionDraining(slot: Int) {
        guard let connection = connection(in: slot) else { return }
        slots[slot] = .draining(connection)
        waiting.remove(slot)
    }
}

extension PoolStateMachine: Sendable where Instant: Sendable, Connection: Sendable {}
extension PoolStateMachine.Slot: Sendable where Instant: Sendable, Connection: Sendable {}
extension PoolStateMachine.EndAction: Sendable where Instant: Sendable, Connection: Sendable {}
extension PoolStateMachine.StopAction: Sendable where Instant: Sendable, Connection: Sendable {}
extension PoolStateMachine.LogEntry: Sendable where Instant: Sendable, Connection: Sendable {}
