import PushCore
import Testing
@testable import PushGateway

/// The pool state machine as the HTTP/2 pool drives it: open streams as each connection's capacity, draining
/// connections, delayed resends, and the HTTP/2 ends.
@Suite struct HTTP2PoolStateMachineTests {
    typealias HTTP2PoolMachine = PoolStateMachine<ManualInstant, String, HTTP2Delivery, StreamWindow>

    static func machine(connections: Int = 2, streams: Int = 8) -> HTTP2PoolMachine {
        HTTP2PoolMachine(
            connections: connections,
            backoff: Backoff(initial: .milliseconds(500), maximum: .seconds(60), resetAfter: .seconds(30), seed: 7),
            limiter: ConnectRateLimiter(perMinute: 6_000, burst: 100, now: t0),
            rejectionLimiter: ConnectRateLimiter(perMinute: 6_000, burst: 100, now: t0),
            window: StreamWindow(maximum: streams))
    }

    static func ready(_ p: inout HTTP2PoolMachine) {
        for timer in p.start(now: t0) { reopen(&p, timer) }
    }

    /// The attempt `timer` is due and its connection ready, named "c<slot>".
    static func reopen(_ p: inout HTTP2PoolMachine, _ timer: HTTP2PoolMachine.ConnectTimer?) {
        guard let timer else {
            Issue.record("no attempt was scheduled")
            return
        }
        let opened = p.timerFired(slot: timer.slot, timer: timer.timer, now: t0)
        #expect(opened)
        let proceeds = p.connectionReady(slot: timer.slot, connection: "c\(timer.slot)", now: t0)
        #expect(proceeds)
    }

    static func deliveries(_ tickets: ClosedRange<UInt64>) -> [HTTP2Delivery] {
        tickets.map { ticket in
            var d = HTTP2ResponsePolicyTests.delivery()
            d.ticket = DeliveryTicket(ticket)
            return d
        }
    }

    @Test func aConnectionTakesNoMoreThanTheStreamWindowLeavesBesideItsOpenStreams() {
        var p = Self.machine(streams: 8)
        Self.ready(&p)
        _ = p.submit(Self.deliveries(1...20))
        #expect(p.take(max: 100, slot: 0, held: 3).count == 5)
        // Requests lost together halve the window (to half of those lost when fewer were lost than it allowed).
        p.streamsLost(6)
        #expect(p.window.limit == 3)
        #expect(p.take(max: 100, slot: 1, held: 0).count == 3)
        #expect(p.take(max: 100, slot: 1, held: 3).isEmpty)
        // Each success widens it by one, up to the configured maximum.
        p.answered(successes: 2, refused: nil)
        #expect(p.window.limit == 5)
        p.answered(successes: 100, refused: nil)
        #expect(p.window.limit == 8)
        // The server's own limit, as the connection's available streams, bounds a take too.
        #expect(p.take(max: 2, slot: 1, held: 0).count == 2)
        #expect(p.waitingCount == 20 - 5 - 3 - 2)
    }

    @Test func delayedResendsWaitForTheirTimerAndStandBeforeNewWork() {
        var p = Self.machine(connections: 1)
        Self.ready(&p)
        #expect(p.take(max: 10, slot: 0, held: 0).isEmpty)  // nothing queued: the slot waits
        let timer = p.resendLater(Self.deliveries(1...2), after: .seconds(2))
        #expect(timer?.after == .seconds(2))
        #expect(p.waitingCount == 2)
        #expect(p.submit(Self.deliveries(3...3)) == ["c0"])
        #expect(p.take(max: 10, slot: 0, held: 0).map(\.ticket.value) == [3])
        #expect(p.take(max: 10, slot: 0, held: 1).isEmpty)
        #expect(p.resendDue(timer: timer!.timer) == ["c0"])
        #expect(p.take(max: 10, slot: 0, held: 1).map(\.ticket.value) == [1, 2])
        #expect(p.resendDue(timer: timer!.timer).isEmpty)  // fired once
    }

    @Test func stoppingCancelsDelayedResendsAndHandsThemBackUnsent() {
        var p = Self.machine(connections: 1)
        Self.ready(&p)
        let timer = p.resendLater(Self.deliveries(1...2), after: .seconds(5))!
        _ = p.submit(Self.deliveries(3...4))
        let stop = p.stop()
        #expect(stop.cancel == [timer.timer])
        #expect(stop.close == ["c0"])
        // Resends decided after the stop join the queue at once.
        #expect(p.resendLater(Self.deliveries(5...5), after: .seconds(1)) == nil)
        let end = p.connectionEnded(slot: 0, reason: .stopped, resend: [], lostUnaccepted: false, accepted: 0, now: t0)
        #expect(end.next == nil)
        #expect(p.isStopComplete)
        #expect(p.takeUnsent().map(\.ticket.value) == [1, 2, 5, 3, 4])
        #expect(p.resendDue(timer: timer.timer).isEmpty)
        #expect(p.waitingCount == 0)
    }

    @Test func aDrainingConnectionTakesNothingIsClosedOnStopAndIsReplacedAtOnceWhenItEnds() {
        var p = Self.machine(connections: 2)
        Self.ready(&p)
        #expect(p.take(max: 10, slot: 0, held: 0).isEmpty)
        p.connectionDraining(slot: 0)
        #expect(p.readyConnections == 1)
        #expect(p.connection(in: 0) == nil)
        #expect(p.submit(Self.deliveries(1...1)).isEmpty)  // no longer woken
        let end = p.connectionEnded(slot: 0, reason: .retired, resend: [], lostUnaccepted: false, accepted: 0, now: t0)
        #expect(end.backoff == .zero)
        #expect(end.next?.after == .zero)
        #expect(p.lastEnd == .retired)

        var q = Self.machine(connections: 1)
        Self.ready(&q)
        q.connectionDraining(slot: 0)
        #expect(q.stop().close == ["c0"])
    }

    @Test func refusedCredentialsAreKeptUntilASuccessAndTheirEndBacksOff() {
        var p = Self.machine(connections: 1)
        Self.ready(&p)
        p.answered(successes: 0, refused: "InvalidProviderToken")
        #expect(p.refusedByAPI == "InvalidProviderToken")
        let end = p.connectionEnded(
            slot: 0, reason: .refusedByAPI("InvalidProviderToken"), resend: [], lostUnaccepted: false, accepted: 0, now: t0)
        #expect(end.backoff > .zero)
        #expect(end.next?.after == end.backoff)
        #expect(p.backoff.consecutiveFailures == 1)
        #expect(p.lastError == "InvalidProviderToken")
        #expect(!end.down)  // it was ready: the credentials, not the gateway, are the trouble
        Self.reopen(&p, end.next)
        p.answered(successes: 1, refused: nil)
        #expect(p.refusedByAPI == nil)
    }

    @Test func aConnectionThatClosesHavingCarriedNothingBacksOffAndOneThatCarriedReconnectsAtOnce() {
        var p = Self.machine(connections: 1)
        Self.ready(&p)
        let idle = p.connectionEnded(
            slot: 0, reason: .dropped(carriedNotifications: false), resend: [], lostUnaccepted: false, accepted: 0, now: t0)
        #expect(idle.backoff > .zero)
        Self.reopen(&p, idle.next)
        let busy = p.connectionEnded(
            slot: 0, reason: .dropped(carriedNotifications: true), resend: [], lostUnaccepted: false, accepted: 0, now: t0)
        #expect(busy.backoff == .zero)
        #expect(p.log.map(\.kind).filter { if case .ended = $0 { true } else { false } }.count == 2)
    }
}
