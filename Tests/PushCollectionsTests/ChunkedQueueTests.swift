import PushCollections
import Synchronization
import Testing

/// An element that counts how many of its kind are alive: the queue must release what leaves it, at once.
final class Tracked: Sendable {
    static let alive = Atomic<Int>(0)
    let value: Int

    init(_ value: Int) {
        self.value = value
        Self.alive.add(1, ordering: .relaxed)
    }

    deinit { Self.alive.subtract(1, ordering: .relaxed) }
}

@Suite(.serialized) struct ChunkedQueueTests {
    /// A deterministic generator (SplitMix64), so that a failure repeats.
    struct Random: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Random appends, removals from the front, changes in place and copies, against an array doing the same.
    @Test(arguments: [1, 2, 3])
    func behavesLikeAnArrayUsedAsAQueue(seed: UInt64) {
        var random = Random(state: seed)
        var queue = ChunkedQueue<Int>()
        var model: [Int] = []
        var copies: [(ChunkedQueue<Int>, [Int])] = []
        var next = 0
        for _ in 0..<6_000 {
            switch random.next() % 100 {
            case 0..<50:
                // Runs of appends, so that the queue spans many chunks: one at a time, or as a run (filled a
                // chunk's free slots at a time, into a chunk a copy may share).
                let run = Array(next..<(next + Int(random.next() % 600)))
                switch random.next() % 3 {
                case 0: for element in run { queue.append(element) }
                case 1: queue.append(contentsOf: run)
                default: queue.append(contentsOf: run.lazy.map { $0 })  // a sequence that is not an array
                }
                model.append(contentsOf: run)
                next += run.count
            case 50..<80:
                let n = min(model.count, Int(random.next() % 700))
                switch random.next() % 4 {
                case 0:
                    queue.removeFirst(n)
                case 1:
                    #expect(queue.takeFirst(n) == Array(model.prefix(n)))
                case 2:
                    var handed: [Int] = []
                    queue.removeFirst(n) { handed.append($0) }
                    #expect(handed == Array(model.prefix(n)))
                default:
                    for _ in 0..<n { #expect(queue.removeFirst() == model[0]); model.removeFirst() }
                    continue
                }
                model.removeFirst(n)
            case 80..<95 where !model.isEmpty:
                let i = Int(random.next() % UInt64(model.count))
                queue[i] += 1_000_000
                model[i] += 1_000_000
            case 95..<97:
                copies.append((queue, model))
            case 97:
                // Put back at the front (resends), one at a time or as a run.
                let run = (0..<Int(random.next() % 400)).map { _ in -Int(random.next() % 1_000) - 1 }
                if random.next() % 2 == 0 {
                    queue.prepend(contentsOf: run)
                } else {
                    for element in run.reversed() { queue.prepend(element) }
                }
                model.insert(contentsOf: run, at: 0)
            case 98:
                queue.removeAll()
                model.removeAll()
            default:
                break
            }
            #expect(queue.count == model.count)
            #expect(queue.prefixCount { $0 % 7 != 0 } == (model.firstIndex { $0 % 7 == 0 } ?? model.count))
        }
        #expect(Array(queue) == model)
        #expect(queue.first == model.first)
        // Copies kept their contents while the original changed (copy-on-write), and change alone.
        for (var copy, expected) in copies {
            #expect(Array(copy) == expected)
            copy.append(-1)
            if !copy.isEmpty { copy[0] = -2 }
            #expect(copy.count == expected.count + 1)
        }
        #expect(Array(queue) == model)
    }

    @Test func prependingKeepsOrderAcrossNewFirstChunks() {
        var queue = ChunkedQueue<Int>()
        let capacity = ChunkedQueue<Int>.chunkCapacity
        queue.prepend(contentsOf: Array(0..<3))  // into an empty queue
        queue.append(contentsOf: 3..<(capacity + 10))
        queue.removeFirst(5)
        queue.prepend(contentsOf: Array(-(2 * capacity)..<5))  // fills the first chunk's front, then new chunks
        #expect(Array(queue) == Array(-(2 * capacity)..<(capacity + 10)))
        #expect(queue[capacity] == capacity - 2 * capacity)
        while !queue.isEmpty { queue.removeFirst() }
        queue.prepend(7)
        queue.append(8)
        #expect(Array(queue) == [7, 8])
    }

    @Test func positionsAcrossChunkBoundaries() {
        var queue = ChunkedQueue<Int>()
        let capacity = ChunkedQueue<Int>.chunkCapacity
        for i in 0..<(3 * capacity + 5) { queue.append(i) }
        // The first chunk part-way consumed: positions shift across every boundary.
        queue.removeFirst(capacity / 2 + 3)
        let offset = capacity / 2 + 3
        for i in [0, capacity / 2 - 4, capacity / 2 - 3, capacity / 2 - 2, capacity, 2 * capacity, queue.count - 1] {
            #expect(queue[i] == i + offset)
        }
        #expect(Array(queue[3..<7]) == [3, 4, 5, 6].map { $0 + offset })
        #expect(queue.firstIndex(of: 2 * capacity) == 2 * capacity - offset)
        #expect(queue.reduce(0, +) == (offset..<(3 * capacity + 5)).reduce(0, +))
    }

    /// What leaves the queue is released at once; emptying it releases everything; a copy keeps its own alive.
    @Test func releasesWhatLeaves() {
        let before = Tracked.alive.load(ordering: .relaxed)
        do {
            var queue = ChunkedQueue<Tracked>()
            for i in 0..<1_000 { queue.append(Tracked(i)) }
            #expect(Tracked.alive.load(ordering: .relaxed) == before + 1_000)
            queue.removeFirst(300)
            #expect(Tracked.alive.load(ordering: .relaxed) == before + 700)
            queue[10] = Tracked(-1)  // replaces one: the old one goes
            #expect(Tracked.alive.load(ordering: .relaxed) == before + 700)
            let copy = queue
            queue.removeAll()
            #expect(Tracked.alive.load(ordering: .relaxed) == before + 700)  // the copy holds them
            #expect(copy.count == 700 && copy[10].value == -1 && copy[0].value == 300)
            _ = copy
        }
        #expect(Tracked.alive.load(ordering: .relaxed) == before)
        do {
            var queue = ChunkedQueue<Tracked>()
            for i in 0..<600 { queue.append(Tracked(i)) }
            while !queue.isEmpty { _ = queue.removeFirst() }
            #expect(Tracked.alive.load(ordering: .relaxed) == before)
            queue.append(Tracked(1))  // the emptied queue fills again
            #expect(queue.count == 1 && queue[0].value == 1)
        }
        #expect(Tracked.alive.load(ordering: .relaxed) == before)
        do {
            // Taken elements move out: alive once, in the array only, across chunk boundaries and from a shared queue.
            var queue = ChunkedQueue<Tracked>()
            for i in 0..<700 { queue.append(Tracked(i)) }
            var taken = queue.takeFirst(300)
            #expect(Tracked.alive.load(ordering: .relaxed) == before + 700)
            #expect(taken.map(\.value) == Array(0..<300) && queue.count == 400 && queue[0].value == 300)
            let copy = queue
            taken = queue.takeFirst(400)
            // The first 300 went with the array that held them; the copy and the new array share the other 400.
            #expect(Tracked.alive.load(ordering: .relaxed) == before + 400)
            #expect(queue.isEmpty && copy.count == 400 && taken.map(\.value) == Array(300..<700))
            _ = copy
        }
        #expect(Tracked.alive.load(ordering: .relaxed) == before)
        do {
            // Handed out one by one: each is released once its receiver lets go; appended as a run: held once.
            var queue = ChunkedQueue<Tracked>()
            queue.append(contentsOf: (0..<700).map { Tracked($0) })
            #expect(Tracked.alive.load(ordering: .relaxed) == before + 700)
            var values: [Int] = []
            queue.removeFirst(500) { values.append($0.value) }
            #expect(Tracked.alive.load(ordering: .relaxed) == before + 200)
            #expect(values == Array(0..<500) && queue.count == 200 && queue[0].value == 500)
        }
        #expect(Tracked.alive.load(ordering: .relaxed) == before)
    }
}
