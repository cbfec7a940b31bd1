/// Names matched by their UTF-8 bytes and handed back as the one `String` each (the configured apps): an event's
/// `app` then costs a comparison, not a string of its own, which for a name longer than 15 bytes (most bundle ids)
/// is an allocation per event.
public struct KnownNames: Sendable {
    private let names: [String]
    private let bytes: [[UInt8]]
    /// Beyond a few names, indices by a hash of their bytes.
    private let byHash: [Int: [Int]]
    private static let linearLimit = 8

    public init(_ names: [String] = []) {
        var unique: [String] = []
        for name in names where !unique.contains(name) { unique.append(name) }
        self.names = unique
        bytes = unique.map { Array($0.utf8) }
        var byHash: [Int: [Int]] = [:]
        if unique.count > Self.linearLimit {
            for (i, b) in bytes.enumerated() { byHash[Self.hash(UnsafeRawBufferPointer(start: b, count: b.count)), default: []].append(i) }
        }
        self.byHash = byHash
    }

    /// The known name with exactly these bytes, if any.
    public func name(matching utf8: UnsafeRawBufferPointer) -> String? {
        if names.count <= Self.linearLimit {
            for i in names.indices where Self.equal(bytes[i], utf8) { return names[i] }
            return nil
        }
        guard let candidates = byHash[Self.hash(utf8)] else { return nil }
        for i in candidates where Self.equal(bytes[i], utf8) { return names[i] }
        return nil
    }

    private static func equal(_ a: [UInt8], _ b: UnsafeRawBufferPointer) -> Bool {
        a.count == b.count && a.withUnsafeBytes { $0.elementsEqual(b) }
    }

    private static func hash(_ bytes: UnsafeRawBufferPointer) -> Int {
        var hasher = Hasher()
        hasher.combine(bytes: bytes)
        return hasher.finalize()
    }
}
