import Testing
@testable import PushGateway

/// The HTTP/2 connection's stream rules (SPEC section 9), without a network.
@Suite struct HTTP2StreamBookTests {
    typealias Book = HTTP2StreamBook<String>

    /// Opens as many streams as are available, named r0, r1, …; returns their ids.
    static func fill(_ book: inout Book, from first: Int = 0, now: Int64 = 0) -> [UInt32] {
        var ids: [UInt32] = []
        var n = first
        while book.available > 0 {
            ids.append(book.start("r\(n)", now: now))
            n += 1
        }
        return ids
    }

    @Test func oneStreamUntilTheServersSettingsThenTheSmallerOfBothLimits() {
        var book = Book(cap: 1000, oneStreamUntilSuccess: false, timeout: 100)
        #expect(book.limit == 1)
        #expect(Self.fill(&book) == [1])
        book.settings(maxConcurrentStreams: 500)
        #expect(book.limit == 500)
        #expect(Self.fill(&book, from: 1).count == 499)
        book.settings(maxConcurrentStreams: 2000)
        #expect(book.limit == 1000)
        var unlimited = Book(cap: 7, oneStreamUntilSuccess: false, timeout: 100)
        unlimited.settings(maxConcurrentStreams: nil)  // names no limit: unlimited, our cap holds
        #expect(unlimited.limit == 7)
    }

    @Test func aDropToOneLetsOpenStreamsFinishAndStartsNoNewOne() {
        var book = Book(cap: 100, oneStreamUntilSuccess: false, timeout: 100)
        book.settings(maxConcurrentStreams: 10)
        let ids = Self.fill(&book)
        #expect(ids.count == 10)
        #expect(ids == stride(from: 1, through: 19, by: 2).map(UInt32.init))
        book.settings(maxConcurrentStreams: 1)
        #expect(book.available == 0)
        for id in ids.dropLast() { #expect(book.finish(id, success: true) != nil) }
        #expect(book.available == 0)  // one still open: the limit is 1
        #expect(book.finish(ids.last!, success: true) == "r9")
        #expect(book.available == 1)
    }

    @Test func aTokenConnectionHasOneStreamUntilARequestSucceeds() {
        var book = Book(cap: 1000, oneStreamUntilSuccess: true, timeout: 100)
        book.settings(maxConcurrentStreams: 1000)
        #expect(book.limit == 1)
        let first = book.start("a", now: 0)
        #expect(book.available == 0)
        #expect(book.finish(first, success: false) == "a")  // an error does not open the connection up
        #expect(book.limit == 1)
        let second = book.start("b", now: 0)
        #expect(book.finish(second, success: true) == "b")
        #expect(book.limit == 1000)
        #expect(book.finish(second, success: true) == nil)  // a stream finishes once
    }

    @Test func goAwayReturnsTheUnprocessedStreamsAndDrains() {
        var book = Book(cap: 100, oneStreamUntilSuccess: false, timeout: 100)
        book.settings(maxConcurrentStreams: 6)
        let ids = Self.fill(&book)  // 1, 3, 5, 7, 9, 11
        #expect(book.finish(3, success: true) == "r1")
        let unprocessed = book.goAway(lastStreamID: 5)
        #expect(unprocessed.map(\.request) == ["r3", "r4", "r5"])
        #expect(unprocessed.map(\.stream) == [7, 9, 11])
        #expect(book.phase == .draining)
        #expect(book.available == 0)
        #expect(!book.isFinished)
        #expect(book.finish(ids[0], success: true) == "r0")
        #expect(book.finish(ids[2], success: true) == "r2")
        #expect(book.isFinished)
        #expect(book.finish(7, success: true) == nil)  // returned by the GOAWAY: it is not answered here
    }

    @Test func deadlinesExpireOldestFirstAndSkipFinishedStreams() {
        var book = Book(cap: 10, oneStreamUntilSuccess: false, timeout: 100)
        book.settings(maxConcurrentStreams: 10)
        let a = book.start("a", now: 0)
        let b = book.start("b", now: 10)
        let c = book.start("c", now: 20)
        #expect(book.nextDeadline == 100)
        #expect(book.finish(a, success: true) == "a")
        #expect(book.nextDeadline == 110)
        #expect(book.expire(now: 109).isEmpty)
        #expect(book.expire(now: 125).map(\.request) == ["b", "c"])
        #expect(book.expire(now: 125).isEmpty)
        #expect(book.nextDeadline == nil)
        #expect(book.finish(b, success: true) == nil)  // expired: a late answer is ignored
        #expect(book.finish(c, success: true) == nil)
        #expect(book.openCount == 0)
    }

    @Test func closingReturnsEveryOpenRequestInStreamOrder() {
        var book = Book(cap: 10, oneStreamUntilSuccess: false, timeout: 100)
        book.settings(maxConcurrentStreams: 4)
        _ = Self.fill(&book)
        #expect(book.reset(3) == "r1")
        #expect(book.closed() == ["r0", "r2", "r3"])
        #expect(book.phase == .closed)
        #expect(book.available == 0)
        #expect(book.isFinished)
    }

    @Test func runningOutOfStreamIDsDrainsTheConnection() {
        var book = Book(cap: 10, oneStreamUntilSuccess: false, timeout: 100, firstStreamID: 0x7FFF_FFFD)
        book.settings(maxConcurrentStreams: 10)
        #expect(book.start("a", now: 0) == 0x7FFF_FFFD)
        #expect(book.start("b", now: 0) == 0x7FFF_FFFF)
        #expect(book.phase == .draining)
        #expect(book.available == 0)
    }

    @Test func retiringStopsNewStreams() {
        var book = Book(cap: 10, oneStreamUntilSuccess: false, timeout: 100)
        book.settings(maxConcurrentStreams: 10)
        let id = book.start("a", now: 0)
        book.retire()
        #expect(book.available == 0)
        #expect(!book.isFinished)
        #expect(book.finish(id, success: true) == "a")
        #expect(book.isFinished)
    }
}
