import PushCollections
import PushCore

/// The life of the notifications on one gateway connection (SPEC section 4), with no I/O and no clock of its own:
/// callers pass `now`, so tests drive time by hand.
///
/// - Every notification written gets the connection's next identifier and joins the in-flight list, in send order.
/// - It is accepted once the acceptance window has passed since it was written with no error response and no
///   close, or as soon as an error response names a later notification.
/// - Status 10 (shutdown): everything up to and including the named one is accepted; everything after is resent,
///   uncounted.
/// - Any other status: the named one fails with it (1, 255 and codes the table does not define are transient and
///   retried until `maxAttempts`); everything after is resent, uncounted.
/// - A close with no error response: everything not yet accepted is resent; the oldest of them counts a transient
///   failure (it is the likeliest cause, and a notification that always breaks the connection must not loop for
///   ever), the others go again uncounted. A reset can destroy an error response before it is read, so counting
///   every notification in flight would fail innocent ones.
/// - Expiration is checked before every send, resends included.
struct ConnectionStateMachine<Instant: InstantProtocol> where Instant.Duration == Duration {
    /// Consecutive notifications in flight written at one send time (the batches of one turn of the event loop
    /// share theirs), so that an entry in flight is its delivery alone.
    struct SendRun {
        /// When they were written: nanoseconds after the machine's `origin` (half an instant's size).
        let sentAt: Int64
        var count: Int
    }

    /// What an error response or a close means for the notifications in flight.
    struct Settlement {
        var outcomes: [DeliveryOutcome] = []
        /// To send again, before anything new, in this order.
        var resend: [Delivery] = []
        /// An error response named a notification this connection no longer holds (already accepted by the window,
        /// or never sent): nothing can be done for it but say so.
        var unmatchedIdentifier: UInt32?
    }

    /// A send's instant as the machine keeps it, nanoseconds after the first send's: taken once for a batch of
    /// sends (an instant of the standard clocks is copied and converted through its type's witnesses, and the
    /// conversion divides 128-bit numbers).
    struct SendTime {
        fileprivate let offset: Int64
    }

    enum SendDecision {
        case send(identifier: UInt32)
        case expired(DeliveryOutcome)
    }

    let acceptanceWindow: Duration
    let maxAttempts: Int
    /// The notifications in flight, in send order: 24 bytes each. Their identifiers are not kept: identifiers are
    /// given in send order (``identifier(after:by:)``), so the list's place says each one.
    private(set) var inFlight = ChunkedQueue<Delivery>()
    /// When `inFlight`'s notifications were written, oldest first: its counts add up to `inFlight.count`.
    private var sendRuns = ChunkedQueue<SendRun>()
    /// Notifications accepted on this connection so far.
    private(set) var acceptedCount = 0
    private var nextIdentifier: UInt32
    /// The identifier of `inFlight[0]` (when there is one).
    private var headIdentifier: UInt32
    /// What entries' send times count from: the first send.
    private var origin: Instant?
    /// False once an error response arrived or the connection closed: nothing more may be sent on it.
    private(set) var isOpen = true

    /// - Parameter firstIdentifier: the first send's identifier (not 0; tests start near the end of the range).
    init(acceptanceWindow: Duration, maxAttempts: Int, firstIdentifier: UInt32 = 1) {
        precondition(firstIdentifier != 0, "identifier 0 is never given")
        self.acceptanceWindow = acceptanceWindow
        self.maxAttempts = maxAttempts
        nextIdentifier = firstIdentifier
        headIdentifier = firstIdentifier
    }

    /// The identifier `n` sends after `identifier`: they count 1, 2, ... 4294967295, then 1 again (0 is never given).
    static func identifier(after identifier: UInt32, by n: Int) -> UInt32 {
        let span = UInt64(UInt32.max)
        return UInt32((UInt64(identifier - 1) + UInt64(n) % span) % span + 1)
    }

    /// The place in `inFlight` of the notification sent with `identifier`, if it is there.
    private func index(of identifier: UInt32) -> Int? {
        guard identifier != 0, !inFlight.isEmpty else { return nil }
        let span = UInt64(UInt32.max)
        let distance = (UInt64(identifier - 1) + span - UInt64(headIdentifier - 1)) % span
        return distance < UInt64(inFlight.count) ? Int(distance) : nil
    }

    /// `now` as a send time.
    mutating func sendTime(at now: Instant) -> SendTime {
        let origin = self.origin ?? now
        self.origin = origin
        return SendTime(offset: Self.nanoseconds(from: origin, to: now))
    }

    /// Decides whether `delivery` goes out now; when it does, it is in flight from `now` with the identifier given.
    mutating func send(_ delivery: Delivery, now: Instant, unixNow: Int64) -> SendDecision {
        send(delivery, at: sendTime(at: now), unixNow: unixNow)
    }

    /// Decides whether `delivery` goes out at `time`; when it does, it is in flight from then with the identifier
    /// given.
    mutating func send(_ delivery: Delivery, at time: SendTime, unixNow: Int64) -> SendDecision {
        precondition(isOpen, "nothing may be sent on a connection after an error response or a close")
        let decision = admit(delivery, unixNow: unixNow)
        if case .send = decision { recordSends(1, at: time) }
        return decision
    }

    /// Decides for each of `batch` in order, as ``send(_:at:unixNow:)`` one at a time would, and hands each with
    /// its decision to `body`. One call for a connection's batch: the connection reaches its machine once, not once
    /// for every notification.
    mutating func send(_ batch: [Delivery], at time: SendTime, unixNow: Int64, _ body: (Delivery, SendDecision) -> Void) {
        precondition(isOpen, "nothing may be sent on a connection after an error response or a close")
        var sent = 0
        for delivery in batch {
            if let expired = Self.refusal(delivery, unixNow: unixNow) {
                body(delivery, expired)
                continue
            }
            let identifier = takeIdentifier(first: sent == 0 && inFlight.isEmpty)
            sent += 1
            body(delivery, .send(identifier: identifier))
        }
        guard sent > 0 else { return }
        // In flight as a run, in the order of their identifiers: one copy-on-write check per chunk.
        inFlight.append(contentsOf: batch.lazy.filter { !Expiration.hasPassed($0.expiration, now: unixNow) }.map {
            var delivery = $0
            delivery.sends += 1
            return delivery
        })
        recordSends(sent, at: time)
    }

    /// The decision for a delivery whose expiration has passed by `unixNow`; nil for one that may go.
    private static func refusal(_ delivery: Delivery, unixNow: Int64) -> SendDecision? {
        guard Expiration.hasPassed(delivery.expiration, now: unixNow) else { return nil }
        return .expired(.failed(delivery, .expired, status: nil, Expiration.passedDetail(delivery.expiration)))
    }

    /// Puts `delivery` in flight with the next identifier, or refuses it when its expiration has passed. The caller
    /// records its send time (``recordSends(_:at:)``).
    private mutating func admit(_ delivery: Delivery, unixNow: Int64) -> SendDecision {
        if let expired = Self.refusal(delivery, unixNow: unixNow) { return expired }
        var delivery = delivery
        delivery.sends += 1
        let identifier = takeIdentifier(first: inFlight.isEmpty)
        inFlight.append(delivery)
        return .send(identifier: identifier)
    }

    /// The identifier of the next notification put in flight; it becomes the head's when it is `first` in flight.
    private mutating func takeIdentifier(first: Bool) -> UInt32 {
        let identifier = nextIdentifier
        nextIdentifier = Self.identifier(after: identifier, by: 1)
        if first { headIdentifier = identifier }
        return identifier
    }

    /// The last `count` notifications put in flight were written at `time`.
    private mutating func recordSends(_ count: Int, at time: SendTime) {
        let last = sendRuns.count - 1
        if last >= 0, sendRuns[last].sentAt == time.offset {
            sendRuns[last].count += count
        } else {
            sendRuns.append(SendRun(sentAt: time.offset, count: count))
        }
    }

    /// The notifications whose acceptance window has passed, oldest first, at most `limit` of them (the rest stay
    /// due for the next call).
    mutating func acceptDue(now: Instant, limit: Int = .max) -> [DeliveryOutcome] {
        // Sent at or before this instant: due (one subtraction, not an addition per entry). The oldest is read in
        // place and moved out, not copied.
        guard let sentBy = sentBy(now) else { return [] }
        // How many are due, from the runs (a few per tick), so that the result is allocated once.
        var due = 0
        var runs = 0
        while due < limit, runs < sendRuns.count, sendRuns[runs].sentAt <= sentBy {
            due += sendRuns[runs].count
            runs += 1
        }
        guard due > 0 else { return [] }
        due = min(due, limit)
        var accepted: [DeliveryOutcome] = []
        accepted.reserveCapacity(due)
        inFlight.removeFirst(due) { accepted.append(.accepted($0)) }
        var left = due
        while left > 0 {
            if sendRuns[0].count <= left {
                left -= sendRuns.removeFirst().count
            } else {
                sendRuns[0].count -= left
                left = 0
            }
        }
        headIdentifier = Self.identifier(after: headIdentifier, by: due)
        acceptedCount += due
        return accepted
    }

    /// Whether the oldest notification in flight has passed the acceptance window by `now`.
    func hasDue(now: Instant) -> Bool {
        guard let oldest = sendRuns.first, let sentBy = sentBy(now) else { return false }
        return oldest.sentAt <= sentBy
    }

    /// The send time by which a notification has passed the acceptance window at `now`; nil before the first send.
    private func sentBy(_ now: Instant) -> Int64? {
        origin.map { Self.nanoseconds(from: $0, to: now.advanced(by: .zero - acceptanceWindow)) }
    }

    /// `instant` as nanoseconds after `origin` (negative before it).
    private static func nanoseconds(from origin: Instant, to instant: Instant) -> Int64 {
        let (seconds, attoseconds) = origin.duration(to: instant).components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }

    /// An error response: settles everything in flight. The connection is not used again.
    mutating func receive(_ response: ErrorResponse) -> Settlement {
        isOpen = false
        var settlement = Settlement()
        guard let index = index(of: response.identifier) else {
            // Nothing in flight is the one named. After status 10 that is ordinary: the last one processed was
            // accepted by the window already, and everything in flight was sent after it. Any other answer is
            // settled as a close with no answer (the oldest counts a transient failure): a gateway that keeps
            // answering with an identifier nobody holds must not make the same notifications go round for ever.
            if response.status == .shutdown {
                settlement.resend = Array(inFlight)
                removeAll()
            } else {
                settlement = closed(
                    blameTheOldest: true,
                    cause: "the gateway answered \(response.status) naming no notification in flight, with it the oldest in flight")
            }
            settlement.unmatchedIdentifier = response.identifier
            return settlement
        }
        let before = inFlight[..<index]
        let named = inFlight[index]
        let after = inFlight[(index + 1)...]
        settlement.outcomes = before.map { .accepted($0) }
        if response.status == .shutdown {
            settlement.outcomes.append(.accepted(named))
        } else if response.status.isTransient {
            var delivery = named
            delivery.transientFailures += 1
            if delivery.transientFailures >= maxAttempts {
                settlement.outcomes.append(.failed(
                    delivery, .retriesExhausted, status: response.status,
                    "the gateway answered \(response.status) \(delivery.transientFailures) times"))
            } else {
                settlement.resend.append(delivery)
            }
        } else {
            settlement.outcomes.append(.failed(
                named, response.status.deliveryErrorReason ?? .unknown, status: response.status,
                "the gateway answered \(response.status)"))
        }
        settlement.resend += after
        acceptedCount += settlement.outcomes.count { $0.result == .accepted }
        removeAll()
        return settlement
    }

    /// The connection closed or broke with no error response: what was not accepted is resent; the oldest counts a
    /// transient failure unless `blameTheOldest` is false (the pool's send window takes the blame instead: the
    /// connection ended before a window's worth was accepted on it, and the window will shrink).
    mutating func closed(
        blameTheOldest: Bool = true, cause: String = "the connection broke with it in flight"
    ) -> Settlement {
        isOpen = false
        var settlement = Settlement()
        for (index, entry) in inFlight.enumerated() {
            var delivery = entry
            guard index == 0, blameTheOldest else {
                settlement.resend.append(delivery)
                continue
            }
            delivery.transientFailures += 1
            if delivery.transientFailures >= maxAttempts {
                settlement.outcomes.append(.failed(
                    delivery, .retriesExhausted, status: nil,
                    "\(cause) \(delivery.transientFailures) times"))
            } else {
                settlement.resend.append(delivery)
            }
        }
        removeAll()
        return settlement
    }

    /// The engine is stopping: everything in flight goes back unsettled and uncounted, to be delivered after a
    /// restart (its Kafka offsets are not committed).
    mutating func abandon() -> Settlement {
        isOpen = false
        var settlement = Settlement()
        settlement.resend = Array(inFlight)
        removeAll()
        return settlement
    }

    private mutating func removeAll() {
        inFlight.removeAll()
        sendRuns.removeAll()
    }
}
