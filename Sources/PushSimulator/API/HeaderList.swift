import NIOHPACK

/// A decoded header list: each field's name and value in the order the client sent them, and how it asked for the
/// field to be indexed. What ``HeaderBlockDecoder`` makes of a block; names are ASCII (the decoder turns any other
/// name into a NUL, which ``HeaderBlockRules`` refuses), so nothing here checks them again.
struct HeaderList: RandomAccessCollection, Sendable {
    typealias Element = (name: String, value: String, indexing: HPACKIndexing)

    private(set) var fields: [Element] = []

    init() {
        // A request carries about a dozen fields: one allocation instead of one per doubling.
        fields.reserveCapacity(16)
    }

    /// Fields given as pairs, indexable (for tests).
    init(_ pairs: [(String, String)]) {
        fields = pairs.map { (name: $0.0, value: $0.1, indexing: .indexable) }
    }

    mutating func append(name: String, value: String, indexing: HPACKIndexing) {
        fields.append((name, value, indexing))
    }

    /// A request's trailers, after its header fields.
    mutating func append(contentsOf other: HeaderList) {
        fields.append(contentsOf: other.fields)
    }

    var startIndex: Int { 0 }
    var endIndex: Int { fields.count }
    subscript(position: Int) -> Element { fields[position] }

    /// The values of the fields named `name`, in order.
    subscript(name: String) -> [String] {
        fields.compactMap { $0.name == name ? $0.value : nil }
    }
}
