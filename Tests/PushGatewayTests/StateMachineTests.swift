import NIOCore
import PushCore
import PushTestSupport
import Testing
@testable import PushGateway

/// A clock's instant that tests move by hand.
struct ManualInstant: InstantProtocol {
    var offset: Duration
    func advanced(by duration: Duration) -> ManualInstant { ManualInstant(offset: offset + duration) }
    func duration(to other: ManualInstant) -> Duration { other.offset - offset }
    static func < (a: ManualInstant, b: ManualInstant) -> Bool { a.offset < b.offset }
}

let t0 = ManualInstant(offset: .zero)
let now: Int64 = 1_800_000_000

func delivery(_ ticket: UInt64, expiration: UInt32 = 0) -> Delivery {
    Delivery(
        ticket: ticket,
        notification: PushNotification(
            token: try! DeviceToken(bytes: [UInt8(ticket & 0xFF)]), payload: Array(#"{"aps":{}}"#.utf8),
            identifier: 0, expiration: expiration, priority: .immediate),
        format: .frame)
}

typealias Machine = ConnectionStateMachine<ManualInstant>

/// Sends tickets 1...n at t0 and returns their identifiers.
func sendAll(_ m: inout Machine, _ n: Int) -> [UInt32] {
    (1...n).map { i in
        guard case .send(let id) = m.send(delivery(UInt64(i)), now: t0, unixNow: now) else { fatalError("not sent") }
        return id
    }
}

@Suite struct ConnectionStateMachineTests {
    @Test func identifiersIncreaseAndTheWindowAccepts() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        #expect(sendAll(&m, 3) == [1, 2, 3])
        #expect(m.acceptDue(now: t0.advanced(by: .milliseconds(999))).isEmpty)
        let accepted = m.acceptDue(now: t0.advanced(by: .seconds(1)))
        #expect(accepted.map(\.ticket) == [1, 2, 3])
        #expect(accepted.allSatisfy { $0.result == .accepted && $0.attempts == 1 })
        #expect(m.inFlight.isEmpty)
    }

    @Test func windowAcceptsInSendOrderOnly() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        _ = m.send(delivery(1), now: t0, unixNow: now)
        _ = m.send(delivery(2), now: t0.advanced(by: .milliseconds(500)), unixNow: now)
        #expect(m.acceptDue(now: t0.advanced(by: .milliseconds(1200))).map(\.ticket) == [1])
        #expect(m.acceptDue(now: t0.advanced(by: .milliseconds(1500))).map(\.ticket) == [2])
    }

    /// Sends at one instant share one kept send time (a run): the window accepts a run whole, the next run at its own
    /// time, and an error response after part of the list was accepted settles the rest by place.
    @Test func runsOfSendsAtOneInstantAreAcceptedWholeAndInOrder() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        for (ticket, at) in [(1, 0), (2, 0), (3, 0), (4, 300), (5, 300), (6, 700)] {
            _ = m.send(delivery(UInt64(ticket)), now: t0.advanced(by: .milliseconds(at)), unixNow: now)
        }
        #expect(m.acceptDue(now: t0.advanced(by: .milliseconds(999))).isEmpty)
        #expect(m.acceptDue(now: t0.advanced(by: .milliseconds(1000))).map(\.ticket) == [1, 2, 3])
        #expect(!m.hasDue(now: t0.advanced(by: .milliseconds(1299))))
        #expect(m.hasDue(now: t0.advanced(by: .milliseconds(1300))))
        #expect(m.inFlight.count == 3)
        // Status 8 naming ticket 5 (identifier 5): 4 is accepted, 5 fails, 6 goes again.
        let s = m.receive(ErrorResponse(status: .invalidToken, identifier: 5))
        #expect(s.outcomes.map(\.ticket) == [4, 5])
        #expect(s.outcomes[0].result == .accepted)
        #expect(s.resend.map(\.ticket) == [6])
        #expect(m.inFlight.isEmpty)
        #expect(!m.hasDue(now: t0.advanced(by: .seconds(5))))
    }

    /// Accepted in batches of at most `limit`: a batch may end inside a run, whose rest stays due at its own time,
    /// and an error response after that settles by place as before.
    @Test func acceptanceInBatchesSplitsRunsAndKeepsThePlaces() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        for (ticket, at) in [(1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 300), (7, 300), (8, 700)] {
            _ = m.send(delivery(UInt64(ticket)), now: t0.advanced(by: .milliseconds(at)), unixNow: now)
        }
        let dueFirst = t0.advanced(by: .milliseconds(1000))
        #expect(m.acceptDue(now: dueFirst, limit: 2).map(\.ticket) == [1, 2])
        #expect(m.hasDue(now: dueFirst))
        #expect(m.acceptDue(now: dueFirst, limit: 2).map(\.ticket) == [3, 4])
        #expect(m.acceptDue(now: dueFirst, limit: 2).map(\.ticket) == [5])  // the next run is not due yet
        #expect(m.acceptDue(now: dueFirst, limit: 2).isEmpty)
        // A batch across two runs, then the rest of the second: 6 and 7 were sent at 300 ms.
        #expect(m.acceptDue(now: t0.advanced(by: .milliseconds(1300)), limit: 1).map(\.ticket) == [6])
        #expect(m.inFlight.count == 2)
        // Status 8 naming ticket 8 (identifier 8): 7 is accepted, 8 fails.
        let s = m.receive(ErrorResponse(status: .invalidToken, identifier: 8))
        #expect(s.outcomes.map(\.ticket) == [7, 8])
        #expect(s.outcomes[0].result == .accepted)
        #expect(s.resend.isEmpty)
        #expect(m.acceptedCount == 7)
    }

    /// Send times are kept as nanoseconds after the first send: the window is exact to the nanosecond, before and
    /// long after the first send, and `hasDue` agrees with `acceptDue`.
    @Test func theWindowIsExactToTheNanosecondAsTimeGoesOn() {
        var m = Machine(acceptanceWindow: .seconds(2), maxAttempts: 5)
        #expect(!m.hasDue(now: t0.advanced(by: .seconds(10))))  // nothing sent yet
        let later = t0.advanced(by: .seconds(86_400 * 400) + .nanoseconds(7))
        _ = m.send(delivery(1), now: t0, unixNow: now)
        _ = m.send(delivery(2), now: t0, unixNow: now)  // the same instant as the one before
        _ = m.send(delivery(3), now: later, unixNow: now)
        let dueFirst = t0.advanced(by: .seconds(2))
        #expect(!m.hasDue(now: dueFirst.advanced(by: .nanoseconds(-1))))
        #expect(m.acceptDue(now: dueFirst.advanced(by: .nanoseconds(-1))).isEmpty)
        #expect(m.hasDue(now: dueFirst))
        #expect(m.acceptDue(now: dueFirst).map(\.ticket) == [1, 2])
        let dueLast = later.advanced(by: .seconds(2))
        #expect(!m.hasDue(now: dueLast.advanced(by: .nanoseconds(-1))))
        #expect(m.acceptDue(now: dueLast.advanced(by: .nanoseconds(-1))).isEmpty)
        #expect(m.hasDue(now: dueLast))
        #expect(m.acceptDue(now: dueLast).map(\.ticket) == [3])
        #expect(!m.hasDue(now: dueLast.advanced(by: .seconds(1))))  // nothing left
    }

    @Test func aFinalStatusFailsTheNamedOneAndResendsTheRestUncounted() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        let ids = sendAll(&m, 5)
        let s = m.receive(ErrorResponse(status: .invalidToken, identifier: ids[2]))
        #expect(s.outcomes.map(\.ticket) == [1, 2, 3])
        #expect(s.outcomes[0].result == .accepted && s.outcomes[1].result == .accepted)
        #expect(s.outcomes[2].result == .failed(.invalidToken, status: .invalidToken, detail: "the gateway answered invalid_token(8)"))
        #expect(s.outcomes[2].attempts == 1)
        #expect(s.resend.map(\.ticket) == [4, 5])
        #expect(s.resend.allSatisfy { $0.transientFailures == 0 && $0.sends == 1 })
        #expect(!m.isOpen)
        #expect(m.inFlight.isEmpty)
    }

    /// The in-flight list keeps no identifiers: a place in it says which was sent. Identifiers run to 4294967295,
    /// then start again at 1 (never 0); an error response names the right notification across the wrap, after the
    /// window accepted some, and one naming what was accepted, what was not sent yet, or 0 names nothing in flight.
    @Test(arguments: [UInt32.max - 3, UInt32.max, 1])
    func anErrorResponseFindsItsNotificationAcrossTheWrap(first: UInt32) {
        func machine() -> (Machine, [UInt32]) {
            var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5, firstIdentifier: first)
            _ = m.send(delivery(1), now: t0, unixNow: now)
            _ = m.send(delivery(2), now: t0, unixNow: now)
            var ids = [first, Machine.identifier(after: first, by: 1)]
            for ticket in 3...8 {
                guard case .send(let id) = m.send(delivery(UInt64(ticket)), now: t0.advanced(by: .seconds(1)), unixNow: now) else {
                    fatalError("not sent")
                }
                ids.append(id)
            }
            #expect(m.acceptDue(now: t0.advanced(by: .milliseconds(1500))).map(\.ticket) == [1, 2])
            return (m, ids)
        }
        let (_, ids) = machine()
        #expect(!ids.contains(0) && Set(ids).count == 8)
        for (a, b) in zip(ids, ids.dropFirst()) { #expect(b == (a == .max ? 1 : a + 1)) }
        for named in 2..<8 {
            var (m, _) = machine()
            let s = m.receive(ErrorResponse(status: .invalidToken, identifier: ids[named]))
            #expect(s.unmatchedIdentifier == nil)
            #expect(s.outcomes.map(\.ticket) == (3...(named + 1)).map { DeliveryTicket(UInt64($0)) })
            #expect(s.outcomes.last?.result == .failed(.invalidToken, status: .invalidToken, detail: "the gateway answered invalid_token(8)"))
            #expect(s.resend.map(\.ticket) == ((named + 2)..<9).map { DeliveryTicket(UInt64($0)) })
        }
        for nobody in [ids[0], ids[1], Machine.identifier(after: ids[7], by: 1), 0] {
            var (m, _) = machine()
            let s = m.receive(ErrorResponse(status: .shutdown, identifier: nobody))
            #expect(s.unmatchedIdentifier == nobody)
            #expect(s.resend.map(\.ticket) == (3...8).map { DeliveryTicket(UInt64($0)) })
        }
    }

    @Test(arguments: [GatewayStatus.missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize, .invalidTopicSize, .invalidPayloadSize, .protocolError])
    func everyFinalStatusHasItsReason(status: GatewayStatus) {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        let ids = sendAll(&m, 1)
        let s = m.receive(ErrorResponse(status: status, identifier: ids[0]))
        guard case .failed(let reason, let st, _) = s.outcomes.first?.result else {
            Issue.record("no failure")
            return
        }
        #expect(reason == status.deliveryErrorReason)
        #expect(st == status)
    }

    @Test func shutdownAcceptsUpToAndIncludingTheNamedOne() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        let ids = sendAll(&m, 4)
        let s = m.receive(ErrorResponse(status: .shutdown, identifier: ids[1]))
        #expect(s.outcomes.map(\.ticket) == [1, 2])
        #expect(s.outcomes.allSatisfy { $0.result == .accepted })
        #expect(s.resend.map(\.ticket) == [3, 4])
        #expect(s.resend.allSatisfy { $0.transientFailures == 0 })
    }

    @Test(arguments: [GatewayStatus.processingError, .unknown, .unrecognized(9)])
    func transientStatusesRetryUntilMaxAttempts(status: GatewayStatus) {
        var d = delivery(7)
        for attempt in 1...3 {
            var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 3)
            guard case .send(let id) = m.send(d, now: t0, unixNow: now) else { fatalError() }
            _ = m.send(delivery(8), now: t0, unixNow: now)
            let s = m.receive(ErrorResponse(status: status, identifier: id))
            if attempt < 3 {
                #expect(s.outcomes.isEmpty)
                #expect(s.resend.map(\.ticket) == [7, 8])  // the retried one goes first
                d = s.resend[0]
                #expect(d.transientFailures == attempt)
                #expect(s.resend[1].transientFailures == 0)
            } else {
                #expect(s.outcomes.count == 1)
                #expect(s.outcomes[0].result == .failed(.retriesExhausted, status: status, detail: "the gateway answered \(status) 3 times"))
                #expect(s.outcomes[0].attempts == 3)
                #expect(s.resend.map(\.ticket) == [8])
            }
        }
    }

    @Test func aCloseTheSendWindowTakesTheBlameForCountsNothing() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 1)
        _ = sendAll(&m, 3)
        let s = m.closed(blameTheOldest: false)
        #expect(s.outcomes.isEmpty)
        #expect(s.resend.map(\.ticket) == [1, 2, 3])
        #expect(s.resend.map(\.transientFailures) == [0, 0, 0])
    }

    @Test func aCloseWithoutErrorResponseResendsAllAndCountsTheOldest() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 2)
        _ = sendAll(&m, 3)
        #expect(m.acceptDue(now: t0).isEmpty)
        let s = m.closed()
        #expect(s.outcomes.isEmpty)
        #expect(s.resend.map(\.ticket) == [1, 2, 3])
        #expect(s.resend.map(\.transientFailures) == [1, 0, 0])
        var again = Machine(acceptanceWindow: .seconds(1), maxAttempts: 2)
        for d in s.resend { _ = again.send(d, now: t0, unixNow: now) }
        let second = again.closed()
        // The oldest breaks the connection twice: it fails; the others go on.
        #expect(second.outcomes.map(\.ticket) == [1])
        #expect(second.outcomes[0].attempts == 2)
        if case .failed(.retriesExhausted, nil, _) = second.outcomes[0].result {} else { Issue.record("\(second.outcomes[0])") }
        #expect(second.resend.map(\.ticket) == [2, 3])
        #expect(second.resend.allSatisfy { $0.transientFailures == 0 })
    }

    @Test func acceptedNotificationsAreNotResentOnClose() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        _ = m.send(delivery(1), now: t0, unixNow: now)
        _ = m.send(delivery(2), now: t0.advanced(by: .seconds(1)), unixNow: now)
        #expect(m.acceptDue(now: t0.advanced(by: .seconds(1))).map(\.ticket) == [1])
        #expect(m.closed().resend.map(\.ticket) == [2])
    }

    @Test func statusTenNamingNothingInFlightResendsEverythingUncounted() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        _ = sendAll(&m, 2)
        let s = m.receive(ErrorResponse(status: .shutdown, identifier: 999))
        #expect(s.unmatchedIdentifier == 999)
        #expect(s.outcomes.isEmpty)
        #expect(s.resend.map(\.ticket) == [1, 2])
        #expect(s.resend.allSatisfy { $0.transientFailures == 0 })
    }

    @Test func anyOtherAnswerNamingNothingInFlightIsBounded() {
        // A gateway that always answers identifier 0: the same notification is not resent for ever.
        var d = delivery(1)
        for attempt in 1...3 {
            var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 3)
            _ = m.send(d, now: t0, unixNow: now)
            _ = m.send(delivery(2), now: t0, unixNow: now)
            let s = m.receive(ErrorResponse(status: .invalidToken, identifier: 0))
            #expect(s.unmatchedIdentifier == 0)
            if attempt < 3 {
                #expect(s.outcomes.isEmpty)
                #expect(s.resend.map(\.ticket) == [1, 2])
                #expect(s.resend.map(\.transientFailures) == [attempt, 0])
                d = s.resend[0]
            } else {
                #expect(s.outcomes.map(\.ticket) == [1])
                #expect(s.outcomes[0].result == .failed(
                    .retriesExhausted, status: nil,
                    detail: "the gateway answered invalid_token(8) naming no notification in flight, with it the oldest in flight 3 times"))
                #expect(s.resend.map(\.ticket) == [2])
            }
        }
    }

    @Test func expirationIsCheckedBeforeEverySend() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        guard case .expired(let outcome) = m.send(delivery(1, expiration: UInt32(now - 1)), now: t0, unixNow: now) else {
            Issue.record("sent an expired notification")
            return
        }
        #expect(outcome.attempts == 0)
        if case .failed(.expired, nil, _) = outcome.result {} else { Issue.record("wrong outcome \(outcome)") }
        #expect(m.inFlight.isEmpty)
        guard case .send = m.send(delivery(2, expiration: 0), now: t0, unixNow: now) else {
            Issue.record("expiration 0 never expires")
            return
        }
        guard case .send = m.send(delivery(3, expiration: UInt32(now)), now: t0, unixNow: now) else {
            Issue.record("not expired yet at its second")
            return
        }
        // A resend after the expiration passed is not sent either.
        let resend = m.closed().resend
        var next = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        guard case .expired = next.send(resend[1], now: t0, unixNow: now + 1) else {
            Issue.record("resent an expired notification")
            return
        }
    }

    /// A connection sends a batch in one call: each notification gets the decision, identifier and send time that
    /// sending them one at a time gives, expired ones included, and a batch at the instant of the run before joins it.
    @Test func aBatchIsDecidedAsTheSameSendsOneAtATime() {
        let expired = UInt32(now - 1)
        // Per batch: (ticket, expiration), and the batch's send time in milliseconds.
        let batches: [([(UInt64, UInt32)], Int)] = [
            ([(1, 0), (2, expired), (3, 0)], 0),
            ([(4, 0)], 0),  // the same instant: one run with the batch before
            ([(5, expired)], 100),  // nothing sent: no run
            ([(6, 0), (7, 0), (8, expired), (9, 0)], 300),
        ]
        var single = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        var batched = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        var singleDecisions: [String] = []
        var batchedDecisions: [String] = []
        func describe(_ ticket: DeliveryTicket, _ decision: Machine.SendDecision) -> String {
            switch decision {
            case .send(let identifier): "\(ticket) sent as \(identifier)"
            case .expired(let outcome): "\(outcome.ticket) expired"
            }
        }
        for (batch, at) in batches {
            let instant = t0.advanced(by: .milliseconds(at))
            let deliveries = batch.map { delivery($0.0, expiration: $0.1) }
            for d in deliveries {
                singleDecisions.append(describe(d.ticket, single.send(d, now: instant, unixNow: now)))
            }
            batched.send(deliveries, at: batched.sendTime(at: instant), unixNow: now) { d, decision in
                batchedDecisions.append(describe(d.ticket, decision))
            }
        }
        #expect(batchedDecisions == singleDecisions)
        #expect(batchedDecisions.filter { $0.hasSuffix("expired") }.count == 3)
        #expect(batched.inFlight.map(\.ticket) == [1, 3, 4, 6, 7, 9])
        #expect(batched.inFlight.map(\.sends) == single.inFlight.map(\.sends))
        // An error response names a notification by its identifier: the batches kept the head's identifier, so
        // both settle the same (the one named failed, those before it accepted, those after it to send again).
        var singleRefused = single
        var batchedRefused = batched
        let named = singleRefused.receive(ErrorResponse(status: .invalidToken, identifier: 5))
        let batchedNamed = batchedRefused.receive(ErrorResponse(status: .invalidToken, identifier: 5))
        #expect(named.outcomes.map(\.ticket) == [1, 3, 4, 6, 7])
        #expect(batchedNamed.outcomes.map(\.ticket) == named.outcomes.map(\.ticket))
        #expect(batchedNamed.resend.map(\.ticket) == [9] && named.resend.map(\.ticket) == [9])
        // Accepted run by run at the same instants: the send times were kept alike.
        for ms in [999, 1000, 1299, 1300] {
            let at = t0.advanced(by: .milliseconds(ms))
            #expect(batched.acceptDue(now: at).map(\.ticket) == single.acceptDue(now: at).map(\.ticket), "\(ms) ms")
        }
        #expect(batched.inFlight.isEmpty)
        #expect(batched.acceptedCount == 6)
    }

    @Test func abandonHandsEverythingBackUncounted() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        _ = sendAll(&m, 2)
        let s = m.abandon()
        #expect(s.resend.map(\.ticket) == [1, 2])
        #expect(s.resend.allSatisfy { $0.transientFailures == 0 })
        #expect(!m.isOpen)
    }

    @Test func framesCarryTheIdentifierTheyWereSentWith() {
        var m = Machine(acceptanceWindow: .seconds(1), maxAttempts: 5)
        let d = delivery(1)
        guard case .send(let id) = m.send(d, now: t0, unixNow: now) else { fatalError() }
        #expect(id == 1)
        var read = d.written(identifier: 0xA1B2_C3D4)
        guard case .notification(let n)? = NotificationDecoder.decode(from: &read) else {
            Issue.record("not a frame")
            return
        }
        #expect(n.identifier == 0xA1B2_C3D4)
        for format in [NotificationFormat.enhanced, .simple] {
            var b = Delivery(ticket: DeliveryTicket(1), notification: PushNotification(token: try! DeviceToken(bytes: [1]), payload: Array("{}".utf8), identifier: 0, expiration: 5, priority: .immediate), format: format)
                .written(identifier: 77)
            guard case .notification(let decoded)? = NotificationDecoder.decode(from: &b) else { fatalError() }
            #expect(decoded.identifier == (format == .simple ? 0 : 77))
            #expect(decoded.expiration == (format == .simple ? 0 : 5))
        }
    }
}

extension Delivery {
    /// The frame as a connection writes it (``write(identifier:to:)``), in a buffer of its own size.
    func written(identifier: UInt32) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: frameSize)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: frameSize) { write(identifier: identifier, to: $0.baseAddress!) }
        return buffer
    }
}

@Suite struct BackoffTests {
    @Test func fullJitterUnderAnExponentialCeiling() {
        var b = Backoff<ManualInstant>(initial: .milliseconds(100), maximum: .seconds(1), resetAfter: .seconds(30), seed: 42)
        var ceilings: [Duration] = []
        for _ in 1...6 {
            let delay = b.failed()
            ceilings.append(b.ceiling)
            #expect(delay >= .zero && delay <= b.ceiling)
        }
        #expect(ceilings == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1), .seconds(1)])
        var same = Backoff<ManualInstant>(initial: .milliseconds(100), maximum: .seconds(1), resetAfter: .seconds(30), seed: 42)
        var other = Backoff<ManualInstant>(initial: .milliseconds(100), maximum: .seconds(1), resetAfter: .seconds(30), seed: 42)
        #expect(same.failed() == other.failed())
    }

    @Test func resetsAfterAHealthyPeriodOnly() {
        var b = Backoff<ManualInstant>(initial: .milliseconds(100), maximum: .seconds(1), resetAfter: .seconds(30), seed: 1)
        _ = b.failed()
        _ = b.failed()
        b.connected(at: t0)
        b.stillHealthy(at: t0.advanced(by: .seconds(29)))
        #expect(b.consecutiveFailures == 2)
        b.stillHealthy(at: t0.advanced(by: .seconds(30)))
        #expect(b.consecutiveFailures == 0)
        #expect(b.ceiling == .zero)
    }

    @Test func rateLimiterAllowsABurstThenTheRate() {
        var r = ConnectRateLimiter<ManualInstant>(perMinute: 60, burst: 3, now: t0)
        #expect((0..<3).map { _ in r.acquire(now: t0) } == [.zero, .zero, .zero])
        #expect(r.acquire(now: t0) == .seconds(1))  // reserved: due at 1 s
        #expect(r.acquire(now: t0.advanced(by: .seconds(1))) == .seconds(1))  // the 1 s token is taken: due at 2 s
        #expect(r.acquire(now: t0.advanced(by: .milliseconds(2500))) == .milliseconds(500))  // due at 3 s
        #expect(r.acquire(now: t0.advanced(by: .seconds(10))) == .zero)
    }
}

@Suite struct CapacityGateTests {
    @Test func acquireWaitsForReleaseInOrder() async throws {
        let gate = CapacityGate(capacity: 10)
        try await gate.acquire(8)
        #expect(gate.held == 8)
        try await confirmation(expectedCount: 2) { resumed in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await gate.acquire(5)
                    resumed()
                }
                // The waiter is queued before anything is released.
                try #require(await eventually(within: .seconds(10)) { gate.waiting == 1 })
                #expect(gate.held == 8)
                gate.release(2)
                #expect(gate.waiting == 1)  // 4 free, 5 wanted
                gate.release(1)
                try await group.next()
                #expect(gate.held == 10)
                resumed()
            }
        }
        #expect(gate.peakHeld == 10)
    }

    @Test func aCancelledWaiterLeaves() async throws {
        let gate = CapacityGate(capacity: 1)
        try await gate.acquire(1)
        await withTaskGroup(of: (any Error)?.self) { group in
            group.addTask {
                do {
                    try await gate.acquire(1)
                    return nil
                } catch {
                    return error
                }
            }
            #expect(await eventually(within: .seconds(10)) { gate.waiting == 1 })
            group.cancelAll()
            let error = await group.next()!
            #expect(error is CancellationError)
        }
        #expect(gate.waiting == 0)
        #expect(gate.held == 1)
    }

    /// A task cancelled before its waiter is queued: the cancellation handler runs first and finds nothing to
    /// resume, so the waiter must not be queued at all (it would wait for good).
    @Test func aWaiterCancelledBeforeItIsQueuedIsNotLost() async throws {
        let gate = CapacityGate(capacity: 1)
        try await gate.acquire(1)
        let outcome = await withTaskGroup(of: String.self) { group in
            group.addTask {
                withUnsafeCurrentTask { $0?.cancel() }
                do {
                    try await gate.acquire(1)
                    return "acquired"
                } catch {
                    return error is CancellationError ? "cancelled" : "\(error)"
                }
            }
            group.addTask {
                // A bound on a hang, not a synchronisation: the waiter should end at once.
                try? await Task.sleep(for: .seconds(10))
                return "still waiting after 10 s"
            }
            let first = await group.next()!
            group.cancelAll()
            gate.release(1)  // a lost waiter would hang the group: let it through so the test fails instead
            return first
        }
        #expect(outcome == "cancelled")
    }

    @Test func anIdleWaiterCancelledBeforeItIsQueuedIsNotLost() async {
        let signal = IdleSignal()
        let outcome = await withTaskGroup(of: String.self) { group in
            group.addTask {
                withUnsafeCurrentTask { $0?.cancel() }
                // The condition never holds; only cancellation can end the wait.
                await signal.wait { false }
                return "returned"
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return "still waiting after 10 s"
            }
            let first = await group.next()!
            group.cancelAll()
            return first
        }
        #expect(outcome == "returned")
    }
}

@Suite struct SendWindowTests {
    @Test func growsByWhatWasAcceptedWhileFullThenByAnEighthPastTheThreshold() {
        var w = SendWindow(initial: 1000, maximum: 100_000)
        w.accepted(1000, held: 1000)
        #expect(w.limit == 2000)
        w.accepted(500, held: 900)  // less than half of the window used: proves nothing
        #expect(w.limit == 2000)
        w.accepted(2000, held: 2000)
        #expect(w.limit == 4000)
        w.lost(acceptedOnConnection: 4000)  // it carried a window's worth: the window was not the problem
        #expect(w.limit == 4000)
        w.lost(acceptedOnConnection: 3999)
        #expect(w.limit == 2000)
        #expect(w.threshold == 2000)
        w.accepted(2000, held: 2000)
        #expect(w.limit == 2250)
        w.accepted(8, held: 2250)
        #expect(w.limit == 2251)
    }

    @Test func staysWithinItsBounds() {
        var w = SendWindow(initial: 10, minimum: 1, maximum: 64)
        for _ in 0..<10 { w.accepted(w.limit, held: w.limit) }
        #expect(w.limit == 64)
        for _ in 0..<20 { w.lost(acceptedOnConnection: 0) }
        #expect(w.limit == 1)
        w.accepted(1, held: 1)
        #expect(w.limit == 2)
        #expect(SendWindow(initial: 1_000_000, maximum: 500).limit == 500)
        #expect(SendWindow(initial: 0, maximum: 500).limit == 1)
    }

    /// A gateway that closes every connection after `lifetime` notifications, long before the acceptance window
    /// passes: halving on every loss brings the window under the lifetime, after which every connection's first
    /// window's worth is accepted.
    @Test func convergesBelowAConnectionLifetimeShorterThanTheWindow() {
        var w = SendWindow(initial: 32_768, maximum: 100_000)
        let lifetime = 1000
        var losses = 0
        while w.limit >= lifetime {
            w.lost(acceptedOnConnection: 0)  // closed before the first window passed
            losses += 1
        }
        #expect(losses == 6)
        #expect(w.limit == 512)
        // From here a connection carries 512 a window and lives two windows: its end costs the window nothing,
        // and the oldest notification on it takes the blame again.
        #expect(!w.blamesWindow(acceptedOnConnection: 512))
        w.lost(acceptedOnConnection: 512)
        #expect(w.limit == 512)
        #expect(w.blamesWindow(acceptedOnConnection: 100))
        var floor = SendWindow(initial: 1, maximum: 10)
        #expect(!floor.blamesWindow(acceptedOnConnection: 0), "at the minimum, a poison notification must still fail")
        floor.lost(acceptedOnConnection: 0)
        #expect(floor.limit == 1)
    }
}

extension SendWindowTests {
    /// A gateway that answers status 10 (or 1) after every 100 notifications while thousands were written behind:
    /// the window halves while an answer costs more resends than its connection delivered, down to four times
    /// what such connections deliver, so that no connection waits on the acceptance window before its answer.
    @Test func aCostlyAnswerHalvesItDownToFourConnectionsWorth() {
        var w = SendWindow(initial: 100_000, maximum: 100_000)
        var answers = 0
        while true {
            let written = min(w.limit, 10_000)  // what was pending
            let before = w.limit
            w.gatewayAnswered(resent: written - 100, acceptedOnConnection: 100)
            answers += 1
            if w.limit == before { break }
        }
        #expect(w.limit == 400)
        #expect(w.threshold == 400)
        #expect(answers == 9)
        // A few resends, or fewer than the connection delivered, shrink nothing.
        w.gatewayAnswered(resent: 16, acceptedOnConnection: 0)
        w.gatewayAnswered(resent: 95, acceptedOnConnection: 100)
        #expect(w.limit == 400)
        // Shorter connections lower the floor as the average follows them.
        for _ in 0..<40 { w.gatewayAnswered(resent: w.limit - 10, acceptedOnConnection: 10) }
        #expect(w.limit < 100)
        #expect(w.limit >= 40)
    }
}

@Suite struct ConnectCapTests {
    @Test func errorResponsesAboutOneNotificationsDataHaveACapOfTheirOwn() {
        for code: UInt8 in 2...8 { #expect(ConnectionEnd.errorResponse(GatewayStatus(code: code)).connectCap == .afterRejection) }
        for code: UInt8 in [1, 10, 128, 255, 42] {
            #expect(ConnectionEnd.errorResponse(GatewayStatus(code: code)).connectCap == .gateway)
        }
        #expect(ConnectionEnd.failedBeforeReady("refused").connectCap == .gateway)
        #expect(ConnectionEnd.handshakeRefused("bad certificate").connectCap == .gateway)
        #expect(ConnectionEnd.dropped(carriedNotifications: true).connectCap == .gateway)
        #expect(ConnectionEnd.dropped(carriedNotifications: false).connectCap == .gateway)
        #expect(ConnectionEnd.idleRenewal.connectCap == .gateway)
    }
}
