import Testing
@testable import PushKafka

struct FetchThrottleTests {
    static let p0 = TopicPartition(topic: "t", partition: 0)
    static let p1 = TopicPartition(topic: "t", partition: 1)

    @Test func pausesAtTheLimitAndResumesAtThreeQuarters() {
        var throttle = FetchThrottle(limit: 100)
        let all = [Self.p0, Self.p1]
        #expect(throttle.next(held: 99, assignment: all, generation: 1) == nil)
        #expect(throttle.next(held: 100, assignment: all, generation: 1) == .pause(all))
        #expect(throttle.next(held: 120, assignment: all, generation: 1) == nil)
        #expect(throttle.next(held: 76, assignment: all, generation: 1) == nil)
        #expect(throttle.paused)
        #expect(throttle.next(held: 75, assignment: all, generation: 1) == .resume(all))
        #expect(throttle.next(held: 90, assignment: all, generation: 1) == nil)
        #expect(!throttle.paused)
    }

    /// The broker restart of the fault matrix: paused, the assignment is lost (its records stop counting), then
    /// the same partitions come back, still paused inside librdkafka unless the resume named them.
    @Test func theResumeNamesWhatWasPausedEvenWhenNothingIsAssigned() {
        var throttle = FetchThrottle(limit: 100)
        let all = [Self.p0, Self.p1]
        #expect(throttle.next(held: 100, assignment: all, generation: 1) == .pause(all))
        #expect(throttle.next(held: 0, assignment: [], generation: 2) == .resume(all))
        #expect(throttle.next(held: 0, assignment: all, generation: 3) == nil)
        // A later pause and resume name only what was paused since.
        #expect(throttle.next(held: 100, assignment: [Self.p1], generation: 4) == .pause([Self.p1]))
        #expect(throttle.next(held: 0, assignment: [Self.p1], generation: 4) == .resume([Self.p1]))
    }

    @Test func aNewAssignmentWhileFullIsPausedAndResumedWithTheOldOne() {
        var throttle = FetchThrottle(limit: 10)
        #expect(throttle.next(held: 10, assignment: [Self.p0], generation: 1) == .pause([Self.p0]))
        #expect(throttle.next(held: 10, assignment: [Self.p1], generation: 2) == .pause([Self.p1]))
        #expect(throttle.next(held: 9, assignment: [Self.p1], generation: 2) == nil)
        #expect(throttle.next(held: 0, assignment: [Self.p1], generation: 2) == .resume([Self.p0, Self.p1]))
        // Suspended for shutdown counts as full.
        #expect(throttle.next(held: .max, assignment: [Self.p1], generation: 2) == .pause([Self.p1]))
        // Both pauses of load are counted (one per assignment), the shutdown's is not; no hold without a limit.
        #expect(throttle.pauses == 2 && throttle.holds == 0)
    }

    /// A throttle with a one-second hold at a limit of 100, asked at milliseconds after a fixed start.
    struct HeldThrottle {
        var throttle = FetchThrottle(limit: 100, holdLimit: .seconds(1))
        let t0 = ContinuousClock.now
        let assignment: [TopicPartition]

        mutating func next(_ held: Int, at ms: Int) -> FetchThrottle.Action? {
            throttle.next(held: held, assignment: assignment, generation: 1, now: t0.advanced(by: .milliseconds(ms)))
        }
    }

    /// Full: polling holds (nothing dropped inside librdkafka) while the count stays above three quarters, and
    /// fetching pauses only when the hold has lasted its limit.
    @Test func holdsWhenFullAndPausesOnceTheHoldRunsOut() {
        let all = [Self.p0, Self.p1]
        var h = HeldThrottle(assignment: all)
        #expect(h.next(99, at: 0) == nil)
        #expect(h.next(100, at: 0) == .hold)
        #expect(h.next(90, at: 500) == .hold)
        #expect(h.next(120, at: 999) == .hold)
        #expect(!h.throttle.paused)
        #expect(h.next(120, at: 1000) == .pause(all))
        #expect(h.throttle.paused && h.throttle.holdStarted == nil)
        // Paused: no hold until it resumes.
        #expect(h.next(120, at: 3000) == nil)
        #expect(h.next(75, at: 3500) == .resume(all))
        #expect(h.next(100, at: 3600) == .hold)
        // Counted once each, when they begin: a hold asked again is the same hold.
        #expect(h.throttle.holds == 2 && h.throttle.pauses == 1)
    }

    @Test func aHoldThatDrainsToThreeQuartersEndsWithoutAPause() {
        var h = HeldThrottle(assignment: [Self.p0])
        #expect(h.next(100, at: 0) == .hold)
        #expect(h.next(76, at: 100) == .hold)
        #expect(h.next(75, at: 200) == nil)
        #expect(!h.throttle.paused && h.throttle.holdStarted == nil)
        // Full again: a new hold, its limit counted from its own start.
        #expect(h.next(100, at: 300) == .hold)
        #expect(h.next(100, at: 1299) == .hold)
        #expect(h.next(100, at: 1300) == .pause([Self.p0]))
        #expect(h.throttle.holds == 2 && h.throttle.pauses == 1)
    }

    /// A hold that runs out with the count between three quarters and the limit polls again (there is room), and
    /// holds again once full.
    @Test func aHoldThatRunsOutBelowTheLimitPollsAgain() {
        var h = HeldThrottle(assignment: [Self.p0])
        #expect(h.next(100, at: 0) == .hold)
        #expect(h.next(80, at: 1000) == nil)
        #expect(!h.throttle.paused)
        #expect(h.next(100, at: 1100) == .hold)
    }

    /// Suspended for shutdown pauses at once, held or not.
    @Test func shutdownPausesWithoutAHold() {
        var fresh = HeldThrottle(assignment: [Self.p0])
        #expect(fresh.next(.max, at: 0) == .pause([Self.p0]))
        var held = HeldThrottle(assignment: [Self.p0])
        #expect(held.next(100, at: 0) == .hold)
        #expect(held.next(.max, at: 0) == .pause([Self.p0]))
        #expect(held.throttle.paused && held.throttle.holdStarted == nil)
        // A shutdown's pause is not counted as one of load; the hold before it was.
        #expect(fresh.throttle.holds == 0 && fresh.throttle.pauses == 0)
        #expect(held.throttle.holds == 1 && held.throttle.pauses == 0)
    }
}
