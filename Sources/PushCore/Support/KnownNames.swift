/// Names matched by their UTF-8 bytes and handed back as the one `String` each (the configured apps): an event's
/// `app` then costs a comparison, not a string of its own, which for a name longer than 15 bytes (most bundle ids)
/// is an allocation per event.
public struct KnownNames: Sendable {
    private let names: [String]
    /// Every name's UTF-8, one after the other; `spans[i]` is `names[i]`'s.
    private let bytes: [UInt8]
    private let spans: [Range<Int>]
    /// Beyond a few names, indices by a hash of their bytes.
    private let byHash: [Int: [Int]]
    private static let linearLimit = 8

    public init(_ names: [String] = []) {
        var seen = Set<String>()
        let unique = names.filter { seen.insert($0).inserted }  // in order; not quadratic for a long `apps` list
        self.names = unique
        var bytes: [UInt8] = []
        var spans: [Range<Int>] = []
        var byHash: [Int: [Int]] = [:]
        for (i, name) in unique.enumerated() {
            let start = bytes.count
            bytes.append(contentsOf: name.utf8)
            spans.append(start..<bytes.count)
            if unique.count > Self.linearLimit {
                byHash[name.withBorrowedUTF8 { Self.hash($0) }, default: []].append(i)
            }
        }
        self.bytes = bytes
        self.spans = spans
        self.byHash = byHash
    }

    /// The known names, without repeats, in the order first given.
    public var all: [String] { names }

    /// The known name with exactly these bytes, if any.
    public func name(matching utf8: UnsafeRawBufferPointer) -> String? {
        index(matching: utf8).map { names[$0] }
    }

    /// The position in ``all`` of the known name with exactly these bytes, if any.
    public func index(matching utf8: UnsafeRawBufferPointer) -> Int? {
        bytes.withUnsafeBytes { all in
            if names.count <= Self.linearLimit {
                for i in names.indices where Self.equal(all, spans[i], utf8) { return i }
                return nil
            }
            guard let candidates = byHash[Self.hash(utf8)] else { return nil }
            for i in candidates where Self.equal(all, spans[i], utf8) { return i }
            return nil
        }
    }

    /// The known name at a position in ``all``.
    public func name(at index: Int) -> String { names[index] }

    /// Compares eight bytes at a time (a byte-wise `elementsEqual` took about 16 instructions a byte), the last eight
    /// of a name of eight or more bytes once more for the bytes after its last whole eight.
    private static func equal(_ all: UnsafeRawBufferPointer, _ span: Range<Int>, _ b: UnsafeRawBufferPointer) -> Bool {
        let n = span.count
        guard n == b.count else { return false }
        guard n > 0, let a = all.baseAddress.map({ $0 + span.lowerBound }), let b = b.baseAddress else { return n == 0 }
        var i = 0
        while i + 8 <= n {
            if a.loadUnaligned(fromByteOffset: i, as: UInt64.self) != b.loadUnaligned(fromByteOffset: i, as: UInt64.self) { return false }
            i += 8
        }
        if i < n && n >= 8 {
            return a.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self) == b.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
        }
        while i < n {
            if a.load(fromByteOffset: i, as: UInt8.self) != b.load(fromByteOffset: i, as: UInt8.self) { return false }
            i += 1
        }
        return true
    }

    private static func hash(_ bytes: UnsafeRawBufferPointer) -> Int {
        var hasher = Hasher()
        hasher.combine(bytes: bytes)
        return hasher.finalize()
    }
}
