import Testing
@testable import PushKafka

struct FetchThrottleTests {
    static let p0 = TopicPartition(topic: "t", partition: 0)
    static let p1 = TopicPartition(topic: "t", partition: 1)

    @Test func pausesAtTheLimitAndResumesAtThreeQuarters() {
        var throttle = FetchThrottle(limit: 100)
        let all = [Self.p0, Self.p1]
        #expect(throttle.next(outstanding: 99, assignment: all, generation: 1) == nil)
        #expect(throttle.next(outstanding: 100, assignment: all, generation: 1) == .pause(all))
        #expect(throttle.next(outstanding: 120, assignment: all, generation: 1) == nil)
        #expect(throttle.next(outstanding: 76, assignment: all, generation: 1) == nil)
        #expect(throttle.paused)
        #expect(throttle.next(outstanding: 75, assignment: all, generation: 1) == .resume(all))
        #expect(throttle.next(outstanding: 90, assignment: all, generation: 1) == nil)
        #expect(!throttle.paused)
    }

    /// The broker restart of the fault matrix: paused, the assignment is lost (its records stop counting), then
    /// the same partitions come back, still paused inside librdkafka unless the resume named them.
    @Test func theResumeNamesWhatWasPausedEvenWhenNothingIsAssigned() {
        var throttle = FetchThrottle(limit: 100)
        let all = [Self.p0, Self.p1]
        #expect(throttle.next(outstanding: 100, assignment: all, generation: 1) == .pause(all))
        #expect(throttle.next(outstanding: 0, assignment: [], generation: 2) == .resume(all))
        #expect(throttle.next(outstanding: 0, assignment: all, generation: 3) == nil)
        // A later pause and resume name only what was paused since.
        #expect(throttle.next(outstanding: 100, assignment: [Self.p1], generation: 4) == .pause([Self.p1]))
        #expect(throttle.next(outstanding: 0, assignment: [Self.p1], generation: 4) == .resume([Self.p1]))
    }

    @Test func aNewAssignmentWhileFullIsPausedAndResumedWithTheOldOne() {
        var throttle = FetchThrottle(limit: 10)
        #expect(throttle.next(outstanding: 10, assignment: [Self.p0], generation: 1) == .pause([Self.p0]))
        #expect(throttle.next(outstanding: 10, assignment: [Self.p1], generation: 2) == .pause([Self.p1]))
        #expect(throttle.next(outstanding: 9, assignment: [Self.p1], generation: 2) == nil)
        #expect(throttle.next(outstanding: 0, assignment: [Self.p1], generation: 2) == .resume([Self.p0, Self.p1]))
        // Suspended for shutdown counts as full.
        #expect(throttle.next(outstanding: .max, assignment: [Self.p1], generation: 2) == .pause([Self.p1]))
    }
}
