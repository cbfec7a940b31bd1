import PushCore
import Testing
@testable import PushGateway

/// The connection handle the pure pool tests hand in: a name.
typealias Pool = PoolStateMachine<ManualInstant, String, Delivery, SendWindow>

func pool(
    connections: Int = 2, perMinute: Int = 60, burst: Int = 20, rejectionsPerMinute: Int = 600,
    rejectionBurst: Int = 2, window: Int = 100, bisects: Bool = false
) -> Pool {
    Pool(
        connections: connections,
        backoff: Backoff(initial: .milliseconds(500), maximum: .seconds(60), resetAfter: .seconds(30), seed: 7),
        limiter: ConnectRateLimiter(perMinute: perMinute, burst: burst, now: t0),
        rejectionLimiter: ConnectRateLimiter(perMinute: rejectionsPerMinute, burst: rejectionBurst, now: t0),
        window: SendWindow(initial: window, maximum: 1_000), bisects: bisects)
}

/// Brings every slot of `p` to ready, each with the handle "c<slot>".
func readyAll(_ p: inout Pool, at now: ManualInstant = t0) {
    for timer in p.start(now: now) {
        let opened = p.timerFired(slot: timer.slot, timer: timer.timer, now: now)
        #expect(opened)
        let proceeds = p.connectionReady(slot: timer.slot, connection: "c\(timer.slot)", now: now)
        #expect(proceeds)
    }
}

@Suite struct PoolStateMachineTests {
    @Test func startSchedulesEverySlotUnderTheConnectCap() {
        var p = pool(connections: 3, perMinute: 60, burst: 2)
        let timers = p.start(now: t0)
        #expect(timers.map(\.slot) == [0, 1, 2])
        // Two within the burst at once; the third waits for the next token (one a second).
        #expect(timers.map(\.after) == [.zero, .zero, .seconds(1)])
        #expect(p.slots.allSatisfy { if case .scheduled = $0 { true } else { false } })
    }

    @Test func anAttemptNoLongerTheSlotsDoesNotOpen() {
        var p = pool(connections: 1)
        let first = p.start(now: t0)[0]
        let opened = p.timerFired(slot: 0, timer: first.timer, now: t0)
        #expect(opened)
        let opened2 = p.timerFired(slot: 0, timer: first.timer, now: t0)
        #expect(!opened2)  // fired twice: one attempt
        #expect(p.attempts == 1)
    }

    @Test func failuresBeforeReadyBackOffAndMarkTheGatewayDown() {
        var p = pool(connections: 1, perMinute: 6_000, burst: 100)
        var timer = p.start(now: t0)[0]
        var ceilings: [Duration] = []
        for _ in 0..<4 {
            let opened = p.timerFired(slot: 0, timer: timer.timer, now: t0)
            #expect(opened)
            let end = p.connectionEnded(
                slot: 0, reason: .failedBeforeReady("refused"), resend: [], lostUnaccepted: false, accepted: 0, now: t0)
            #expect(end.down)
            #expect(end.readyConnections == 0)
            #expect(end.next?.after == end.backoff)
            ceilings.append(p.backoff.ceiling)
            #expect(end.backoff <= p.backoff.ceiling)
            timer = end.next!
        }
        #expect(ceilings == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4)])
        #expect(p.lastError == "refused")
        // A connection that stays healthy long enough forgets the failures.
        let opened2 = p.timerFired(slot: 0, timer: timer.timer, now: t0)
        #expect(opened2)
        let proceeds = p.connectionReady(slot: 0, connection: "c0", now: t0)
        #expect(proceeds)
        p.stillHealthy(at: t0.advanced(by: .seconds(29)))
        #expect(p.backoff.consecutiveFailures == 4)
        p.stillHealthy(at: t0.advanced(by: .seconds(30)))
        #expect(p.backoff.consecutiveFailures == 0)
    }

    @Test func reconnectsAfterRejectionsTakeFromTheirOwnCapAndEveryOtherEndFromTheGateways() throws {
        // The gateway cap: one token a minute, spent by the first attempt. The rejection cap: 2 at once, then 10 a
        // second.
        var p = pool(connections: 1, perMinute: 1, burst: 1, rejectionsPerMinute: 600, rejectionBurst: 2)
        readyAll(&p)
        var waits: [Duration] = []
        for _ in 0..<4 {
            let end = p.connectionEnded(
                slot: 0, reason: .errorResponse(.invalidToken), resend: [], lostUnaccepted: false, accepted: 10, now: t0)
            let next = try #require(end.next)
            #expect(next.cap == .afterRejection)
            #expect(next.capDelay == next.after)
            waits.append(next.after)
            _ = p.timerFired(slot: 0, timer: next.timer, now: t0)
            _ = p.connectionReady(slot: 0, connection: "c0", now: t0)
        }
        #expect(waits == [.zero, .zero, .milliseconds(100), .milliseconds(200)])
        // A drop: the gateway's cap, whose next token is a minute away.
        let afterDrop = p.connectionEnded(
            slot: 0, reason: .dropped(carriedNotifications: true), resend: [], lostUnaccepted: false, accepted: 10,
            now: t0)
        #expect(afterDrop.backoff == .zero)
        #expect(afterDrop.next?.cap == .gateway)
        #expect(afterDrop.next?.after == .seconds(60))
    }

    @Test func queueHandsOutWithinTheWindowAndWakesWhoWaited() {
        var p = pool(connections: 2, window: 3)
        readyAll(&p)
        let taken = p.take(max: 10, slot: 0, held: 0)
        #expect(taken.isEmpty)  // nothing yet: slot 0 waits
        let woken = p.submit((1...5).map { delivery($0) })
        #expect(woken == ["c0"])
        let woken2 = p.submit([delivery(6)])
        #expect(woken2.isEmpty)  // woken once
        let taken2 = p.take(max: 10, slot: 0, held: 1)
        #expect(taken2.map(\.ticket) == [1, 2])  // room for 3 - 1
        let taken3 = p.take(max: 10, slot: 0, held: 3)
        #expect(taken3.isEmpty)  // full: not waiting, the acceptance tick asks again
        let woken3 = p.submit([delivery(7)])
        #expect(woken3.isEmpty)
        // Resends stand before new work.
        let woken4 = p.requeue([delivery(1)])
        #expect(woken4.isEmpty)
        let taken4 = p.take(max: 2, slot: 1, held: 0)
        #expect(taken4.map(\.ticket) == [1, 3])
        #expect(p.pending.map(\.ticket) == [4, 5, 6, 7])
    }

    @Test func anEndRequeuesAndAnEarlyLossHalvesTheWindow() {
        var p = pool(connections: 1, window: 100)
        readyAll(&p)
        _ = p.take(max: 1, slot: 0, held: 0)  // slot 0 waits
        let end = p.connectionEnded(
            slot: 0, reason: .dropped(carriedNotifications: true), resend: [delivery(1), delivery(2)],
            lostUnaccepted: true, accepted: 10, now: t0)
        #expect(end.wake.isEmpty)  // the slot that waited is gone
        #expect(p.pending.map(\.ticket) == [1, 2])
        #expect(p.window.limit == 50)
        #expect(end.backoff == .zero)
        #expect(!end.down)
    }

    @Test func costlyAnswersWeighOnTheWindowAndLateRejectionsAreCounted() {
        var p = pool(connections: 1, window: 100)
        readyAll(&p)
        // An invalid token after one notification, 90 written behind it: the resends cost more than the connection
        // delivered.
        _ = p.errorResponse(.invalidToken, resend: (1...90).map { delivery($0) }, unmatched: false, acceptedOnConnection: 1)
        #expect(p.window.limit == 50)
        #expect(p.window.threshold == p.window.maximum)  // grows back doubling once such answers stop
        _ = p.errorResponse(.shutdown, resend: (1...90).map { delivery($0) }, unmatched: false, acceptedOnConnection: 1)
        #expect(p.window.limit == 25)
        #expect(p.window.threshold == 25)  // the gateway's own answer: grows back by an eighth
        // One after a connection delivered more than it resends shrinks nothing.
        _ = p.errorResponse(.invalidToken, resend: (1...20).map { delivery($0) }, unmatched: false, acceptedOnConnection: 40)
        #expect(p.window.limit == 25)
        _ = p.errorResponse(.invalidToken, resend: [], unmatched: true, acceptedOnConnection: 1)
        _ = p.errorResponse(.shutdown, resend: [], unmatched: true, acceptedOnConnection: 1)
        #expect(p.lateErrorResponses == 1)  // status 10 naming an accepted one is ordinary
        #expect(p.pending.count == 200)
    }

    @Test func stopFinishesIdleAndScheduledSlotsAndClosesReadyOnes() {
        var p = pool(connections: 3)
        let timers = p.start(now: t0)
        _ = p.timerFired(slot: 0, timer: timers[0].timer, now: t0)
        _ = p.connectionReady(slot: 0, connection: "c0", now: t0)
        _ = p.timerFired(slot: 1, timer: timers[1].timer, now: t0)  // connecting
        _ = p.submit([delivery(1)])
        let stop = p.stop()
        #expect(stop.close == ["c0"])
        #expect(stop.cancel == [timers[2].timer])
        #expect(!p.isStopComplete)
        let opened = p.timerFired(slot: 2, timer: timers[2].timer, now: t0)
        #expect(!opened)  // cancelled too late: still no attempt
        let closed = p.connectionEnded(
            slot: 0, reason: .stopped, resend: [delivery(2)], lostUnaccepted: true, accepted: 0, now: t0)
        #expect(closed.next == nil)
        #expect(!p.isStopComplete)
        // The attempt in progress becomes ready after the stop: it is to be closed, and its end finishes the pool.
        let proceeds = p.connectionReady(slot: 1, connection: "c1", now: t0)
        #expect(!proceeds)
        let last = p.connectionEnded(slot: 1, reason: .stopped, resend: [], lostUnaccepted: false, accepted: 0, now: t0)
        #expect(last.next == nil)
        #expect(p.isStopComplete)
        let unsent = p.takeUnsent()
        #expect(unsent.map(\.ticket) == [2, 1])
        #expect(p.pending.isEmpty)
    }

    @Test func theLogKeepsTheLastEntries() {
        var p = pool(connections: 1, perMinute: 1_000_000, burst: 1_000_000)
        var timer = p.start(now: t0)[0]
        for _ in 0..<(Pool.logLimit / 2 + 10) {
            _ = p.timerFired(slot: 0, timer: timer.timer, now: t0)
            timer = p.connectionEnded(
                slot: 0, reason: .idleRenewal, resend: [], lostUnaccepted: false, accepted: 0, now: t0
            ).next!
        }
        #expect(p.log.count == Pool.logLimit)
        #expect(p.attempts == Pool.logLimit / 2 + 10)
    }

    /// A simple-format connection on `slot` closes silently with `inFlight` unaccepted; returns the end's action.
    func closeSilently(_ p: inout Pool, slot: Int, _ inFlight: [Delivery]) -> Pool.EndAction {
        let end = p.connectionEnded(
            slot: slot, reason: .dropped(carriedNotifications: true), resend: inFlight, lostUnaccepted: true,
            accepted: 0, now: t0)
        if let next = end.next {
            _ = p.timerFired(slot: slot, timer: next.timer, now: t0)
            _ = p.connectionReady(slot: slot, connection: "c\(slot)", now: t0)
        }
        return end
    }

    @Test func theSimpleFormatFindsTheCulpritByHalvingAndFailsNoNeighbour() {
        var p = pool(connections: 2, rejectionsPerMinute: 60_000, rejectionBurst: 100, window: 100, bisects: true)
        readyAll(&p)
        _ = p.submit((1...8).map { delivery($0) })
        let sent = p.take(max: 100, slot: 0, held: 0)
        #expect(sent.map(\.ticket) == [1, 2, 3, 4, 5, 6, 7, 8])
        // The gateway closes at 3 (the culprit): everything unaccepted is suspect; nothing goes back to the queue.
        let first = closeSilently(&p, slot: 0, sent)
        #expect(first.next?.cap == .afterRejection)
        #expect(p.pending.isEmpty && p.knownBad.map { $0.map(\.ticket) } == [[1, 2, 3, 4, 5, 6, 7, 8]])
        #expect(p.window.limit == 100)  // a rejection says nothing against the window
        _ = p.submit([delivery(9)])
        // Slot 1 is idle: it probes the first half, alone; ordinary work goes to the other slot meanwhile.
        let probe1 = p.take(max: 100, slot: 1, held: 0)
        #expect(probe1.map(\.ticket) == [1, 2, 3, 4])
        #expect(p.take(max: 100, slot: 1, held: 4).isEmpty)
        #expect(p.take(max: 100, slot: 0, held: 0).map(\.ticket) == [9])
        // It closes: that half holds the culprit, the other half goes back to ordinary sending, first.
        _ = closeSilently(&p, slot: 1, probe1)
        #expect(p.knownBad.map { $0.map(\.ticket) } == [[1, 2, 3, 4]])
        #expect(p.pending.map(\.ticket) == [5, 6, 7, 8])
        // The next probe: [1, 2], accepted after the window: the culprit is in [3, 4], halved without a probe.
        let probe2 = p.take(max: 100, slot: 1, held: 0)
        #expect(probe2.map(\.ticket) == [1, 2])
        _ = p.accepted(2, held: 2, slot: 1)
        #expect(p.knownBad.map { $0.map(\.ticket) } == [[3, 4]])
        let probe3 = p.take(max: 100, slot: 1, held: 0)
        #expect(probe3.map(\.ticket) == [3])
        let close3 = closeSilently(&p, slot: 1, probe3)
        #expect(close3.outcomes.isEmpty)  // closed once alone: probed again before it fails
        #expect(p.pending.map(\.ticket) == [4, 5, 6, 7, 8])
        let probe4 = p.take(max: 100, slot: 1, held: 0)
        #expect(probe4.map(\.ticket) == [3])
        let close4 = closeSilently(&p, slot: 1, probe4)
        #expect(close4.outcomes.map(\.ticket) == [3])
        #expect(close4.outcomes[0].result == .failed(
            .invalidToken, status: nil,
            detail: "the gateway closed the connection on it, alone on the connection, 2 times (the simple format has no error responses)"))
        #expect(p.knownBad.isEmpty)
        // The neighbours go on, none of them counted.
        let rest = p.take(max: 100, slot: 1, held: 0)
        #expect(rest.map(\.ticket) == [4, 5, 6, 7, 8])
        #expect(rest.allSatisfy { $0.transientFailures == 0 })
    }

    @Test func aProbeWaitsForASlotWithNothingInFlight() {
        var p = pool(connections: 1, rejectionsPerMinute: 60_000, rejectionBurst: 100, bisects: true)
        readyAll(&p)
        _ = p.submit((1...4).map { delivery($0) })
        let sent = p.take(max: 2, slot: 0, held: 0)
        _ = closeSilently(&p, slot: 0, sent)
        // The reconnected slot has work in flight (as if it took more): it drains, taking nothing new.
        #expect(p.take(max: 10, slot: 0, held: 3).isEmpty)
        #expect(p.take(max: 10, slot: 0, held: 0).map(\.ticket) == [1])
        // A group whose probe's connection ends for another reason stays suspect, whole.
        _ = p.connectionEnded(slot: 0, reason: .idleRenewal, resend: [delivery(1)], lostUnaccepted: false, accepted: 0, now: t0)
        #expect(p.knownBad.map { $0.map(\.ticket) } == [[1, 2]])
        #expect(p.takeUnsent().map(\.ticket) == [1, 2, 3, 4])
    }

    @Test func otherFormatsRequeueWhatAClosedConnectionHeld() {
        var p = pool(connections: 1, bisects: false)
        readyAll(&p)
        _ = p.submit((1...4).map { delivery($0) })
        let sent = p.take(max: 10, slot: 0, held: 0)
        let end = closeSilently(&p, slot: 0, sent)
        #expect(end.next?.cap == .gateway)
        #expect(p.knownBad.isEmpty)
        #expect(p.pending.map(\.ticket) == [1, 2, 3, 4])
    }
}
