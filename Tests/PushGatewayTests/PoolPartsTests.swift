import NIOCore
import PushCore
import PushTestSupport
import Testing
@testable import PushGateway

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
