import Crdkafka
import Testing
@testable import PushKafka

struct IdleFetchPacingTests {
    /// Whether each answer of these sizes, in order, is held.
    static func held(_ sizes: [Int], _ pacing: inout IdleFetchPacing) -> [Bool] {
        sizes.map { pacing.holds(answerSize: $0) }
    }

    /// Empty answers to one request are all of one size: each is held; a larger one (records) goes through. A
    /// smaller request (a partition left it) makes its size the empty one.
    @Test func holdsEmptyAnswersAndLetsALargerOneThrough() {
        var pacing = IdleFetchPacing()
        #expect(Self.held([120, 120, 500, 120], &pacing) == [true, true, false, true])
        #expect(pacing.emptySize == 120)
        #expect(Self.held([90, 120], &pacing) == [true, false])
        #expect(pacing.emptySize == 90)
    }

    /// Two larger answers in a row: the request grew, and the second is held as the new empty size.
    @Test func twoLargerAnswersInARowAreTheNewEmptySize() {
        var pacing = IdleFetchPacing()
        #expect(Self.held([90, 120, 120], &pacing) == [true, false, true])
        #expect(pacing.emptySize == 120)
        #expect(Self.held([120, 300, 120], &pacing) == [true, false, true])
    }

    @Test func aNewIdleStretchLearnsTheSizeAnew() {
        var pacing = IdleFetchPacing()
        #expect(Self.held([90], &pacing) == [true])
        pacing.restart()
        #expect(pacing.emptySize == .max)
        #expect(Self.held([400], &pacing) == [true])
        #expect(pacing.emptySize == 400)
    }
}

struct FetchAnswerWatchTests {
    /// A watch for a consumer with librdkafka's default `fetch.wait.max.ms` (answers under 250 ms are "at once").
    static func watch(pace: Duration = .milliseconds(5)) -> FetchAnswerWatch {
        FetchAnswerWatch(fetchWaitMaxMilliseconds: 500, pace: pace)
    }

    static func answer(_ watch: FetchAnswerWatch, apiKey: Int16 = 1, size: Int = 100, rtt: Int64 = 80,
                       error: rd_kafka_resp_err_t = RD_KAFKA_RESP_ERR_NO_ERROR) {
        watch.answered(apiKey: apiKey, size: size, roundTripMicroseconds: rtt, error: error)
    }

    /// Only fetch answers that came back faster than a held one count; other requests, failures and answers held
    /// for most of `fetch.wait.max.ms` do not.
    @Test func countsOnlyFetchAnswersAtOnce() {
        let watch = Self.watch()
        #expect(watch.holdMicroseconds == 250_000)
        Self.answer(watch)
        Self.answer(watch, rtt: 249_999)
        Self.answer(watch, apiKey: 3)
        Self.answer(watch, rtt: 250_000)
        Self.answer(watch, rtt: 500_100)
        Self.answer(watch, rtt: -1)
        Self.answer(watch, error: RD_KAFKA_RESP_ERR__TRANSPORT)
        #expect(watch.answers == 2 && watch.answersSinceReset == 2)
        watch.reset()
        #expect(watch.answers == 2 && watch.answersSinceReset == 0)
        // A consumer asking for no hold at all: under 10 ms is "at once".
        #expect(FetchAnswerWatch(fetchWaitMaxMilliseconds: 0, pace: .zero).holdMicroseconds == 10_000)
    }

    /// While the consumer is idle an empty answer at once holds its broker thread for the pace; otherwise, or with
    /// the pace off, it returns at once. A reset ends the idle stretch.
    @Test func holdsOnlyWhileIdle() {
        let clock = ContinuousClock()
        let watch = Self.watch(pace: .milliseconds(20))
        Self.answer(watch)
        #expect(watch.paces == 0)
        watch.setIdle(true)
        let held = clock.measure { Self.answer(watch) }
        #expect(watch.paces == 1)
        #expect(held >= .milliseconds(20))
        // Larger than the empty answer: it carries records and is not held.
        Self.answer(watch, size: 400)
        #expect(watch.paces == 1)
        watch.reset()
        #expect(!watch.isIdle)
        Self.answer(watch)
        #expect(watch.paces == 1)
        let off = Self.watch(pace: .zero)
        off.setIdle(true)
        Self.answer(off)
        #expect(off.paces == 0 && off.answers == 1)
    }

    /// A reader whose poll found nothing is idle only once the broker answered ``FetchAnswerWatch/wakeAt`` fetches at
    /// once since its last records, with nothing prefetched, and only with the pace on; what is prefetched is asked
    /// only when the rest holds.
    @Test func idleAfterAnEmptyPollOnlyAtWakeAtWithNothingPrefetched() {
        let watch = Self.watch()
        var asked = 0
        let nothing = { asked += 1; return true }
        for _ in 1..<FetchAnswerWatch.wakeAt { Self.answer(watch) }
        #expect(!watch.idleAfterEmptyPoll(nothingPrefetched: nothing))
        #expect(asked == 0)
        Self.answer(watch)
        #expect(watch.idleAfterEmptyPoll(nothingPrefetched: nothing))
        #expect(!watch.idleAfterEmptyPoll { false })
        #expect(asked == 1)
        watch.reset()
        #expect(!watch.idleAfterEmptyPoll(nothingPrefetched: nothing))
        let off = Self.watch(pace: .zero)
        for _ in 0..<FetchAnswerWatch.wakeAt { Self.answer(off) }
        #expect(!off.idleAfterEmptyPoll(nothingPrefetched: nothing))
        #expect(asked == 1)
    }
}
