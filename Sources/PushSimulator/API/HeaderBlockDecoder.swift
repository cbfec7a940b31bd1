#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOHPACK

/// Decodes request header blocks (RFC 7541, no I/O) into a ``HeaderList``: the static and dynamic tables, integers,
/// literals and Huffman-coded strings, a byte of code at a time from a table built once. Strict: an index of 0 or
/// past the tables, a truncated integer or string, an integer beyond 2^28, a table size update after a field or
/// above the limit, a Huffman string with EOS or with padding other than up to 7 one bits, and a header list over
/// ``maxHeaderListSize`` each throw (a connection's COMPRESSION_ERROR). The last few long never-indexed values are
/// kept by their encoded bytes (``RepeatedLiterals``). Values that are not UTF-8 are kept with
/// U+FFFD in place of the bad bytes (RFC 9113 allows any octet but NUL, CR and LF; `HeaderBlockRules` checks those).
struct HeaderBlockDecoder {
    /// What made a header block undecodable.
    struct Failure: Error, Equatable, CustomStringConvertible {
        var description: String
    }

    /// SETTINGS_HEADER_TABLE_SIZE as this side announces it (the default: it never changes it).
    static let maxTableSize = 4096
    /// The most a header list may take, by RFC 9113 section 6.5.2's count (name + value + 32 per field).
    var maxHeaderListSize: Int

    private var table = DynamicTable(maxSize: HeaderBlockDecoder.maxTableSize)
    private var repeated = RepeatedLiterals()

    init(maxHeaderListSize: Int = HPACKDecoder.defaultMaxHeaderListSize) {
        self.maxHeaderListSize = maxHeaderListSize
    }

    /// The entries of the dynamic table, newest first (for tests).
    var dynamicEntries: [(name: String, value: String)] { table.live.reversed().map { ($0.name.text, $0.value.text) } }

    mutating func decode(_ block: ByteBuffer) throws(Failure) -> HeaderList {
        let result = block.withUnsafeReadableBytes { bytes in
            Result { () throws(Failure) in try decode(bytes) }
        }
        return try result.get()
    }

    private mutating func decode(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> HeaderList {
        var reader = Reader(bytes: bytes)
        var headers = HeaderList()
        var listSize = 0
        var fieldSeen = false
        while let first = reader.peek() {
            let name: Literal, value: Literal, indexing: HPACKIndexing
            if first & 0x80 != 0 {
                (name, value) = try entry(reader.integer(prefixBits: 7))
                indexing = .indexable
            } else if first & 0xE0 == 0x20 {
                // RFC 7541 section 4.2: only at the start of a block.
                guard !fieldSeen else { throw Failure(description: "dynamic table size update after a field") }
                let size = try reader.integer(prefixBits: 5)
                guard size <= Self.maxTableSize else { throw Failure(description: "dynamic table size \(size) over \(Self.maxTableSize)") }
                table.resize(to: size)
                continue
            } else {
                let incremental = first & 0xC0 == 0x40
                let index = try reader.integer(prefixBits: incremental ? 6 : 4)
                name = index == 0 ? try reader.string().asName : try entry(index).name
                value = first & 0xF0 == 0x10 ? try reader.string(repeating: &repeated) : try reader.string()
                if incremental {
                    table.insert(name: name, value: value)
                    indexing = .indexable
                } else {
                    indexing = first & 0x10 != 0 ? .neverIndexed : .nonIndexable
                }
            }
            fieldSeen = true
            listSize += name.length + value.length + 32
            guard listSize <= maxHeaderListSize else { throw Failure(description: "header list over \(maxHeaderListSize) bytes") }
            headers.append(name: name.text, value: value.text, indexing: indexing)
        }
        return headers
    }

    private func entry(_ index: Int) throws(Failure) -> (name: Literal, value: Literal) {
        if index >= 1 && index <= Self.staticTable.count { return Self.staticTable[index - 1] }
        guard index > Self.staticTable.count, let entry = table[index - Self.staticTable.count - 1] else {
            throw Failure(description: "index \(index) outside the tables")
        }
        return (entry.name, entry.value)
    }

    /// A string of a block: its text, and its length in octets as the client counts it (for the table's sizes:
    /// the text differs when the octets are not UTF-8).
    struct Literal {
        var text: String
        var length: Int

        init(text: String, length: Int) {
            self.text = text
            self.length = length
        }

        init(_ text: String) { self.init(text: text, length: text.utf8.count) }

        /// As a field name: one that is not ASCII (no HTTP field name is) becomes a NUL, which
        /// `HeaderBlockRules` finds invalid like any other name outside RFC 9110's `tchar`.
        var asName: Literal {
            let ascii = text.utf8.withContiguousStorageIfAvailable { $0.allSatisfy { $0 < 0x80 } } ?? text.utf8.allSatisfy { $0 < 0x80 }
            return ascii ? self : Literal(text: "\u{0}", length: length)
        }
    }

    /// Reads integers and strings of a block.
    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        func peek() -> UInt8? { offset < bytes.count ? bytes[offset] : nil }

        /// RFC 7541 section 5.1; at most 2^28 (more than any length or index here can be) in at most four bytes after
        /// the prefix: a longer encoding, even of a small value, is refused (section 5.1 asks decoders to refuse
        /// encodings excessive in value or in length).
        mutating func integer(prefixBits: Int) throws(Failure) -> Int {
            let limit = (1 << prefixBits) - 1
            var value = Int(bytes[offset]) & limit
            offset += 1
            guard value == limit else { return value }
            var shift = 0
            while true {
                guard shift <= 21 else { throw Failure(description: "integer of more than four bytes after its prefix") }
                guard offset < bytes.count else { throw Failure(description: "integer cut short") }
                let byte = bytes[offset]
                offset += 1
                value += Int(byte & 0x7F) << shift
                guard value <= 1 << 28 else { throw Failure(description: "integer beyond 2^28") }
                if byte & 0x80 == 0 { return value }
                shift += 7
            }
        }

        /// RFC 7541 section 5.2: the H bit, the length, the octets (Huffman-coded when H is set).
        mutating func string() throws(Failure) -> Literal {
            let (octets, huffman) = try literal()
            return try Self.text(octets, huffman: huffman)
        }

        /// A never-indexed field's value, looked up among the last ones first.
        mutating func string(repeating repeated: inout RepeatedLiterals) throws(Failure) -> Literal {
            let (octets, huffman) = try literal()
            return try repeated.value(octets, huffman: huffman)
        }

        private mutating func literal() throws(Failure) -> (UnsafeRawBufferPointer, huffman: Bool) {
            guard let first = peek() else { throw Failure(description: "string missing") }
            let length = try integer(prefixBits: 7)
            guard length <= bytes.count - offset else { throw Failure(description: "string of \(length) bytes past the block's end") }
            let octets = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
            offset += length
            return (octets, first & 0x80 != 0)
        }

        static func text(_ octets: UnsafeRawBufferPointer, huffman: Bool) throws(Failure) -> Literal {
            huffman ? try HuffmanCode.decode(octets) : Literal(text: String(decoding: octets, as: UTF8.self), length: octets.count)
        }
    }

    /// The last few long values of never-indexed fields, by their encoded bytes. A client marks a sensitive value
    /// never to be indexed (RFC 7541 section 7.1.3), an `authorization` bearer token above all, and then sends it
    /// again with every request: a repeat is neither decoded nor allocated again.
    struct RepeatedLiterals {
        private var entries: [(encoded: [UInt8], huffman: Bool, value: Literal)] = []
        private var next = 0
        static let capacity = 4
        /// Shorter values are decoded each time (comparing would save little).
        static let minimumLength = 32

        mutating func value(_ octets: UnsafeRawBufferPointer, huffman: Bool) throws(Failure) -> Literal {
            guard octets.count >= Self.minimumLength else { return try Reader.text(octets, huffman: huffman) }
            for entry in entries where entry.encoded.count == octets.count && entry.huffman == huffman {
                if entry.encoded.withUnsafeBytes({ memcmp($0.baseAddress!, octets.baseAddress!, octets.count) == 0 }) {
                    return entry.value
                }
            }
            let value = try Reader.text(octets, huffman: huffman)
            let entry = (Array(octets), huffman, value)
            if entries.count < Self.capacity {
                entries.append(entry)
            } else {
                entries[next] = entry
                next = (next + 1) % Self.capacity
            }
            return value
        }
    }

    /// RFC 7541 section 4: entries of name + value + 32 bytes, the oldest evicted first.
    private struct DynamicTable {
        struct Entry {
            var name: Literal
            var value: Literal
            var size: Int { name.length + value.length + 32 }
        }

        /// Oldest first; those before `first` are evicted.
        private var entries: [Entry] = []
        private var first = 0
        private var size = 0
        private var maxSize: Int

        init(maxSize: Int) { self.maxSize = maxSize }

        var live: ArraySlice<Entry> { entries[first...] }

        /// The entry `index` places from the newest (0 the newest).
        subscript(index: Int) -> Entry? {
            let position = entries.count - 1 - index
            return position >= first ? entries[position] : nil
        }

        mutating func insert(name: Literal, value: Literal) {
            let entry = Entry(name: name, value: value)
            evict(toFit: entry.size)
            // An entry larger than the table empties it and is not added (RFC 7541 section 4.4).
            guard entry.size <= maxSize else { return }
            entries.append(entry)
            size += entry.size
        }

        mutating func resize(to newSize: Int) {
            maxSize = newSize
            evict(toFit: 0)
        }

        private mutating func evict(toFit extra: Int) {
            while size + extra > maxSize, first < entries.count {
                size -= entries[first].size
                first += 1
            }
            if first > 64 && first * 2 > entries.count {
                entries.removeFirst(first)
                first = 0
            }
        }
    }
}

extension HeaderBlockDecoder {
    /// RFC 7541 appendix A, index 1 first.
    static let staticTable: [(name: Literal, value: Literal)] = staticFields.map { (Literal($0.0), Literal($0.1)) }

    private static let staticFields: [(String, String)] = [
        (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
        (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
        (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
        (":status", "404"), (":status", "500"), ("accept-charset", ""), ("accept-encoding", "gzip, deflate"),
        ("accept-language", ""), ("accept-ranges", ""), ("accept", ""), ("access-control-allow-origin", ""),
        ("age", ""), ("allow", ""), ("authorization", ""), ("cache-control", ""),
        ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
        ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
        ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""),
        ("from", ""), ("host", ""), ("if-match", ""), ("if-modified-since", ""),
        ("if-none-match", ""), ("if-range", ""), ("if-unmodified-since", ""), ("last-modified", ""),
        ("link", ""), ("location", ""), ("max-forwards", ""), ("proxy-authenticate", ""),
        ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""),
        ("retry-after", ""), ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""),
        ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""), ("via", ""),
        ("www-authenticate", ""),
    ]
}

/// RFC 7541 appendix B's Huffman code, decoded a byte at a time: a table of 256 states (the code tree's inner nodes)
/// by 256 input bytes, each entry the next state, up to two symbols completed on the way, and whether EOS was met.
enum HuffmanCode {
    /// (code, length in bits) for symbols 0 to 255 and EOS (256).
    static let codes: [(code: UInt32, bits: Int)] = [
        (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28),
        (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),
        (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28), (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),
        (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28), (0xffffffb, 28),
        (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12), (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
        (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
        (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6),
        (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8), (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10),
        (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
        (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
        (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7),
        (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
        (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),
        (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5),
        (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
        (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),
        (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23),
        (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23), (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
        (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),
        (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
        (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
        (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),
        (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23),
        (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
        (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
        (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25),
        (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
        (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),
        (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23),
        (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25), (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
        (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27),
        (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26),
        (0x3fffffff, 30),
    ]

    /// The code tree: node 0 the root, each inner node's two children, a leaf as 0x1000 | symbol.
    private static let tree: [[Int]] = {
        var children: [[Int]] = [[-1, -1]]
        for (symbol, entry) in codes.enumerated() {
            var node = 0
            for bit in stride(from: entry.bits - 1, through: 0, by: -1) {
                let branch = Int(entry.code >> UInt32(bit) & 1)
                if bit == 0 {
                    children[node][branch] = 0x1000 | symbol
                } else {
                    if children[node][branch] < 0 {
                        children.append([-1, -1])
                        children[node][branch] = children.count - 1
                    }
                    node = children[node][branch]
                }
            }
        }
        precondition(children.count == 256, "RFC 7541's code has 256 inner nodes")
        return children
    }()

    /// Entry bits: 0-7 the next state, 8-9 the count of symbols, 10 failure (EOS), 16-23 and 24-31 the symbols.
    private static let transitions: [UInt32] = {
        let tree = HuffmanCode.tree
        var table = [UInt32](repeating: 0, count: 256 * 256)
        for state in 0..<256 {
            for byte in 0..<256 {
                var node = state, count = 0, symbols: UInt32 = 0, failed = false
                for bit in stride(from: 7, through: 0, by: -1) {
                    let next = tree[node][byte >> bit & 1]
                    if next & 0x1000 != 0 {
                        let symbol = next & 0xFFF
                        if symbol == 256 { failed = true; break }
                        symbols |= UInt32(symbol) << (16 + 8 * count)
                        count += 1
                        node = 0
                    } else {
                        node = next
                    }
                }
                table[state << 8 | byte] = failed ? 1 << 10 : UInt32(node) | UInt32(count) << 8 | symbols
            }
        }
        return table
    }()

    /// The states a string may end in: the root, or up to 7 one bits below it (the most significant bits of EOS,
    /// RFC 7541 section 5.2).
    private static let accepting: [Bool] = {
        var accepting = [Bool](repeating: false, count: 256)
        var node = 0
        accepting[node] = true
        for _ in 0..<7 {
            node = tree[node][1]
            accepting[node] = true
        }
        return accepting
    }()

    /// Decodes a Huffman-coded string.
    static func decode(_ octets: UnsafeRawBufferPointer) throws(HeaderBlockDecoder.Failure) -> HeaderBlockDecoder.Literal {
        var failure: HeaderBlockDecoder.Failure?
        var length = 0
        let text = String(unsafeUninitializedCapacity: octets.count * 8 / 5 + 1) { output in
            transitions.withUnsafeBufferPointer { table in
                var state = 0, written = 0
                for byte in octets {
                    let entry = table[state << 8 | Int(byte)]
                    if entry & 1 << 10 != 0 {
                        failure = .init(description: "EOS inside a Huffman-coded string")
                        return 0
                    }
                    let count = Int(entry >> 8 & 3)
                    if count > 0 { output[written] = UInt8(truncatingIfNeeded: entry >> 16) }
                    if count > 1 { output[written + 1] = UInt8(truncatingIfNeeded: entry >> 24) }
                    written += count
                    state = Int(entry & 0xFF)
                }
                if !accepting[state] {
                    failure = .init(description: "Huffman padding other than up to 7 one bits")
                    return 0
                }
                length = written
                return written
            }
        }
        if let failure { throw failure }
        return HeaderBlockDecoder.Literal(text: text, length: length)
    }
}
