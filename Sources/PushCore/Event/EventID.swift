/// An event's `id` as the decoder keeps it: up to 16 UTF-8 bytes, or a UUID spelled in one case, packed in two words
/// (``CompactIDKind``); any other id as its string. Reading an id that packs makes no string: a UUID, the id many
/// producers write, would otherwise cost an allocation per event, and a held notification keeps the words as they
/// are.
public struct EventID: Sendable {
    private enum Storage: Sendable {
        case packed(UInt64, UInt64, CompactIDKind)
        case text(String)
    }

    private let storage: Storage

    /// `id`, packed when it fits.
    public init(_ id: String) {
        storage = id.withBorrowedUTF8 { Self.storage(utf8: $0) } ?? .text(id)
    }

    /// The id whose UTF-8 is `utf8` (valid UTF-8: a JSON string without escapes, as the reader checked it).
    init(validUTF8 utf8: UnsafeRawBufferPointer) {
        storage = Self.storage(utf8: utf8) ?? .text(String(decoding: utf8, as: UTF8.self))
    }

    private static func storage(utf8: UnsafeRawBufferPointer) -> Storage? {
        var words: (UInt64, UInt64) = (0, 0)
        let kind = CompactIDKind.pack(utf8: utf8, into: &words)
        return kind == .overflow ? nil : .packed(words.0, words.1, kind)
    }

    /// The id's two words and how they spell it, when it is packed.
    public var packed: (words: (UInt64, UInt64), kind: CompactIDKind)? {
        if case .packed(let high, let low, let kind) = storage { ((high, low), kind) } else { nil }
    }

    /// The id as the event spelled it.
    public var string: String {
        switch storage {
        case .packed(let high, let low, let kind): kind.unpack((high, low))
        case .text(let text): text
        }
    }
}

/// How an event id is kept in 16 bytes: its UTF-8 as it is (up to 16 bytes; the raw value is the length), a UUID
/// in its canonical spelling as its 16 bytes (lowercase or uppercase digits), or not at all. Seven bits.
public struct CompactIDKind: Equatable, Sendable {
    public let rawValue: UInt8

    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let lowercaseUUID = CompactIDKind(rawValue: 17)
    public static let uppercaseUUID = CompactIDKind(rawValue: 18)
    public static let overflow = CompactIDKind(rawValue: 0x7F)

    /// Packs the id whose (valid) UTF-8 is `text` into `words` if it fits; the kind says how.
    static func pack(utf8 text: UnsafeRawBufferPointer, into words: inout (UInt64, UInt64)) -> CompactIDKind {
        if text.count <= 16 {
            withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: text) }
            return CompactIDKind(rawValue: UInt8(text.count))
        }
        // A UUID in one case: its 16 bytes and the case give the text back exactly.
        guard let uuid = APNsID.parse(utf8: text), !(uuid.uppercase && uuid.lowercase) else { return .overflow }
        words = (uuid.id.high, uuid.id.low)
        return uuid.uppercase ? .uppercaseUUID : .lowercaseUUID
    }

    /// The id `words` keep (not for `.overflow`).
    public func unpack(_ words: (UInt64, UInt64)) -> String {
        if rawValue <= 16 {
            var copy = words
            return withUnsafeBytes(of: &copy) { String(decoding: $0.prefix(Int(rawValue)), as: UTF8.self) }
        }
        let text = APNsID(high: words.0, low: words.1).description  // lowercase
        return self == .uppercaseUUID ? text.uppercased() : text
    }
}
