/// A first-in first-out queue kept in fixed-size chunks: appended at the back, removed from the front (where
/// resends may also be put back), read and changed anywhere by position.
///
/// For the worker's long queues of held notifications (the in-flight ledger's records, a connection's in-flight
/// list), where a `Deque` has two costs that grow with the backlog: it doubles its buffer when full (copying every
/// element while its owner holds a lock, and keeping up to half of it unused), and it never gives memory back after
/// a burst. Here a full chunk is followed by a new one, and a chunk is freed as soon as its last element leaves the
/// front: at most one chunk at each end is partly unused, and nothing is ever copied but on copy-on-write.
///
/// Invariants: every chunk but the first starts at slot 0; every chunk but the last ends at its last slot (a first
/// chunk made by `prepend` fills from its end). A position therefore maps to a chunk and a slot with one comparison,
/// a shift and a mask.
public struct ChunkedQueue<Element> {
    /// Elements per chunk (a power of two).
    public static var chunkCapacity: Int { 256 }
    @usableFromInline static var shift: Int { 8 }

    @usableFromInline
    final class Chunk {
        @usableFromInline let slots: UnsafeMutablePointer<Element>
        /// `start` and `end` live behind a pointer rather than in stored `var`s: a class's stored `var` is checked
        /// for exclusive access at run time on every read, and `locate` reads both for each subscript.
        @usableFromInline let bounds: UnsafeMutablePointer<Int>

        /// The initialized slots are `start..<end`.
        @inlinable var start: Int {
            get { bounds[0] }
            set { bounds[0] = newValue }
        }

        @inlinable var end: Int {
            get { bounds[1] }
            set { bounds[1] = newValue }
        }

        @usableFromInline
        init() {
            slots = .allocate(capacity: ChunkedQueue.chunkCapacity)
            bounds = .allocate(capacity: 2)
            bounds.initialize(repeating: 0, count: 2)
        }

        @usableFromInline
        func copy() -> Chunk {
            let other = Chunk()
            other.start = start
            other.end = end
            (other.slots + start).initialize(from: slots + start, count: end - start)
            return other
        }

        deinit {
            (slots + start).deinitialize(count: end - start)
            slots.deallocate()
            bounds.deallocate()
        }
    }

    @usableFromInline var chunks: [Chunk] = []
    @usableFromInline var _count = 0

    @inlinable
    public init() {}

    /// The chunk of position `i` and the slot in it.
    @inlinable
    func locate(_ i: Int) -> (chunk: Int, slot: Int) {
        let first = chunks[0]
        let inFirst = first.end - first.start
        if i < inFirst { return (0, first.start + i) }
        let j = i - inFirst
        return (1 + j >> Self.shift, j & (Self.chunkCapacity - 1))
    }

    /// Makes chunk `k` this queue's own before it changes (copy-on-write).
    @inlinable
    mutating func makeUnique(_ k: Int) {
        if !isKnownUniquelyReferenced(&chunks[k]) { chunks[k] = chunks[k].copy() }
    }

    @inlinable
    public mutating func append(_ element: Element) {
        if chunks.isEmpty || chunks[chunks.count - 1].end == Self.chunkCapacity {
            chunks.append(Chunk())
        } else {
            makeUnique(chunks.count - 1)
        }
        let last = chunks[chunks.count - 1]
        (last.slots + last.end).initialize(to: element)
        last.end += 1
        _count += 1
    }

    /// Appends `elements` in their order, a chunk's free run at a time: one copy-on-write check per chunk, not per
    /// element (a pool's queue takes a poll's deliveries at once).
    @inlinable
    public mutating func append<S: Sequence<Element>>(contentsOf elements: S) {
        var iterator = elements.makeIterator()
        var next = iterator.next()
        while let first = next {
            if chunks.isEmpty || chunks[chunks.count - 1].end == Self.chunkCapacity {
                chunks.append(Chunk())
            } else {
                makeUnique(chunks.count - 1)
            }
            let last = chunks[chunks.count - 1]
            var end = last.end
            (last.slots + end).initialize(to: first)
            end += 1
            next = iterator.next()
            while end < Self.chunkCapacity, let element = next {
                (last.slots + end).initialize(to: element)
                end += 1
                next = iterator.next()
            }
            _count += end - last.end
            last.end = end
        }
    }

    /// Puts `element` before the first element.
    @inlinable
    public mutating func prepend(_ element: Element) {
        if _count == 0 { chunks.removeAll(keepingCapacity: true) }
        if chunks.isEmpty || chunks[0].start == 0 {
            // A new first chunk, filled from its end, so that every chunk but the last stays full.
            let chunk = Chunk()
            chunk.start = Self.chunkCapacity
            chunk.end = Self.chunkCapacity
            chunks.insert(chunk, at: 0)
        } else {
            makeUnique(0)
        }
        let first = chunks[0]
        first.start -= 1
        (first.slots + first.start).initialize(to: element)
        _count += 1
    }

    /// Puts `elements` before the first element, in their order.
    @inlinable
    public mutating func prepend<C: BidirectionalCollection<Element>>(contentsOf elements: C) {
        for element in elements.reversed() { prepend(element) }
    }

    /// Removes and returns the first element; the queue must not be empty.
    @inlinable
    @discardableResult
    public mutating func removeFirst() -> Element {
        precondition(_count > 0, "removeFirst on an empty queue")
        makeUnique(0)
        let first = chunks[0]
        let element = (first.slots + first.start).move()
        first.start += 1
        _count -= 1
        dropFirstChunkIfDrained()
        return element
    }

    /// Frees the first chunk once its last element has left; the only chunk starts over instead (a queue that
    /// empties and fills again keeps one chunk).
    @inlinable
    mutating func dropFirstChunkIfDrained() {
        let first = chunks[0]
        guard first.start == first.end else { return }
        if chunks.count == 1 {
            first.start = 0
            first.end = 0
        } else {
            chunks.removeFirst()
        }
    }

    /// Removes the first `n` elements, a chunk's worth at a time.
    @inlinable
    public mutating func removeFirst(_ n: Int) {
        precondition(n >= 0 && n <= _count, "removeFirst(\(n)) on a queue of \(_count)")
        detachFirst(n) { slots, count in slots.deinitialize(count: count) }
    }

    /// Hands the first `n` elements' initialized slots to `leave`, a chunk's run at a time, in order; `leave` ends
    /// them (deinitializes or moves them out) and the queue no longer holds them.
    @inlinable
    mutating func detachFirst(_ n: Int, _ leave: (UnsafeMutablePointer<Element>, Int) -> Void) {
        var left = n
        while left > 0 {
            makeUnique(0)
            let first = chunks[0]
            let k = Swift.min(left, first.end - first.start)
            assert(k > 0, "an empty first chunk in a queue of \(_count)")
            leave(first.slots + first.start, k)
            first.start += k
            _count -= k
            left -= k
            dropFirstChunkIfDrained()
        }
    }

    /// How many elements from the first on satisfy `predicate`, up to the first that does not (read in place, a
    /// chunk's slots at a time).
    @inlinable
    public func prefixCount(while predicate: (borrowing Element) -> Bool) -> Int {
        var n = 0
        for chunk in chunks {
            for slot in chunk.start..<chunk.end {
                guard predicate(chunk.slots[slot]) else { return n }
                n += 1
            }
        }
        return n
    }

    /// Removes the first `n` elements and hands each to `body` in their order, moved out rather than copied.
    @inlinable
    public mutating func removeFirst(_ n: Int, each body: (Element) -> Void) {
        precondition(n >= 0 && n <= _count, "removeFirst(\(n)) on a queue of \(_count)")
        detachFirst(n) { slots, count in
            for i in 0..<count { body((slots + i).move()) }
        }
    }

    /// Removes the first `n` elements and returns them in their order, moved out rather than copied.
    @inlinable
    public mutating func takeFirst(_ n: Int) -> [Element] {
        precondition(n >= 0 && n <= _count, "takeFirst(\(n)) on a queue of \(_count)")
        return [Element](unsafeUninitializedCapacity: n) { out, taken in
            detachFirst(n) { slots, count in
                (out.baseAddress! + taken).moveInitialize(from: slots, count: count)
                taken += count
            }
        }
    }

    @inlinable
    public mutating func removeAll() {
        chunks = []
        _count = 0
    }
}

extension ChunkedQueue: RandomAccessCollection, MutableCollection {
    public typealias Index = Int
    public typealias Indices = Range<Int>

    @inlinable public var startIndex: Int { 0 }
    @inlinable public var endIndex: Int { _count }
    @inlinable public var count: Int { _count }
    @inlinable public var isEmpty: Bool { _count == 0 }
    @inlinable public var indices: Range<Int> { 0..<_count }
    @inlinable public func index(after i: Int) -> Int { i + 1 }
    @inlinable public func index(before i: Int) -> Int { i - 1 }

    @inlinable
    public subscript(position: Int) -> Element {
        // Borrowed, not copied: reading one field of an element retains none of its references.
        _read {
            precondition(position >= 0 && position < _count, "index \(position) out of 0..<\(_count)")
            let (k, slot) = locate(position)
            yield chunks[k].slots[slot]
        }
        _modify {
            precondition(position >= 0 && position < _count, "index \(position) out of 0..<\(_count)")
            let (k, slot) = locate(position)
            makeUnique(k)
            yield &chunks[k].slots[slot]
        }
    }
}

extension ChunkedQueue: ExpressibleByArrayLiteral {
    @inlinable
    public init(arrayLiteral elements: Element...) {
        self.init()
        append(contentsOf: elements)
    }
}

extension ChunkedQueue: @unchecked Sendable where Element: Sendable {}
