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
