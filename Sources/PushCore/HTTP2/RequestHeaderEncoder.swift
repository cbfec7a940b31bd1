import NIOCore

/// One HTTP/2 connection's encoder of request header blocks (RFC 7541, no I/O), for the requests the worker sends:
/// `:method` and `:scheme` from the static table; the connection's repeated values (`:authority`, `apns-topic`,
/// `apns-push-type`, `apns-priority`, `apns-expiration`, `authorization`) sent as literals, added to the dynamic
/// table the second time in a row a value comes, and then sent as one index; the values of one request (`:path`
/// with the device token, `apns-id`, `apns-collapse-id`) as literals never added to the table. No Huffman coding
/// (the bytes it would save are few; the time it takes is not).
///
/// The table follows the server's SETTINGS_HEADER_TABLE_SIZE (at most 4,096 bytes are used), with the size update
/// RFC 7541 section 4.2 asks for at the start of the next block.
public struct RequestHeaderEncoder: Sendable {
    /// The repeated fields, each with the last value it had and the table entry holding it.
    private enum Field: Int, CaseIterable {
        case authority, topic, pushType, priority, expiration, authorization

        /// The static table's index of the name, or nil for a name written out.
        var staticName: Int? {
            switch self {
            case .authority: 1
            case .authorization: 23
            default: nil
            }
        }

        var name: StaticString {
            switch self {
            case .authority: ":authority"
            case .topic: "apns-topic"
            case .pushType: "apns-push-type"
            case .priority: "apns-priority"
            case .expiration: "apns-expiration"
            case .authorization: "authorization"
            }
        }
    }

    /// A repeated field's value, compared with the last one without building text for numbers and push types.
    private enum Value: Equatable, Sendable {
        case text(String)
        case number(UInt32)
        case pushType(PushType)
        case priority(Priority)

        /// Its length in octets.
        var length: Int {
            switch self {
            case .text(let text): text.utf8.count
            case .number(let value): APNsRequest.decimalDigitCount(value)
            case .pushType(let type): type.staticName.utf8CodeUnitCount
            case .priority(let priority): APNsRequest.priorityField(priority).utf8CodeUnitCount
            }
        }

        func write(to w: inout RawWriter) {
            switch self {
            case .text(let text): w.put(text)
            case .number(let value): w.decimal(value, digits: APNsRequest.decimalDigitCount(value))
            case .pushType(let type): w.put(type.staticName)
            case .priority(let priority): w.put(APNsRequest.priorityField(priority))
            }
        }
    }

    private struct Slot: Sendable {
        var last: Value?
        /// The insertion number of the table entry holding `last`, 0 when none.
        var entry = 0
    }

    private var slots = [Slot](repeating: Slot(), count: Field.allCases.count)
    /// Sizes of the entries inserted after the first `removed`, oldest first. Entries are numbered by insertion from
    /// 1; the first `evicted` are gone.
    private var sizes: [Int] = []
    private var removed = 0
    private var evicted = 0
    private var size = 0
    private var maxSize = 4096
    /// Size updates to announce: the smallest since the last block, then the current one.
    private var smallestUpdate: Int?

    public init() {}

    /// The server's SETTINGS_HEADER_TABLE_SIZE.
    public mutating func setMaxTableSize(_ value: Int) {
        let newSize = min(value, 4096)
        guard newSize != maxSize || smallestUpdate != nil else { return }
        smallestUpdate = min(smallestUpdate ?? newSize, newSize)
        maxSize = newSize
        evict(toFit: 0)
    }

    /// The number of entries in the dynamic table (for tests).
    public var entryCount: Int { inserted - evicted }

    private var inserted: Int { removed + sizes.count }

    /// The most one field's representation adds to its value's octets: a name written out (1 + 1 + 16) and the
    /// value's length (at most 5 bytes for any length here).
    private static let fieldOverhead = 24

    /// Writes `request`'s header block at the buffer's writer index, in one reservation of the buffer.
    public mutating func write(_ request: APNsRequest, authority: String?, bearer: String?, into buffer: inout ByteBuffer) {
        let token = request.token.bytes
        let topic = Value.text(request.topic)
        let authority = authority.map(Value.text)
        let bearer = bearer.map(Value.text)
        let bound = 6 + 2 + (1 + 5 + 10 + token.count * 2) + 46
            // size updates, :method and :scheme, :path, apns-id; seven fields; expiration, push type, priority
            + Self.fieldOverhead * 7 + topic.length + (authority?.length ?? 0) + (bearer?.length ?? 0) + 10 + 16 + 2
            + (request.collapseID?.utf8.count ?? 0)
        token.withUnsafeBytes { token in
            _ = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { out in
                var w = RawWriter(out)
                if let smallest = smallestUpdate {
                    if smallest < maxSize { w.hpackInteger(smallest, prefixBits: 5, pattern: 0x20) }
                    w.hpackInteger(maxSize, prefixBits: 5, pattern: 0x20)
                    smallestUpdate = nil
                }
                w.u8(0x83)  // :method: POST
                w.u8(0x87)  // :scheme: https
                // :path, a literal without indexing on the static name (index 4).
                w.u8(0x04)
                w.hpackInteger(10 + token.count * 2, prefixBits: 7, pattern: 0)
                w.put("/3/device/")
                Hex.write(token, to: out.baseAddress! + w.offset)
                w.offset += token.count * 2
                if let authority { write(.authority, authority, to: &w) }
                write(.topic, topic, to: &w)
                write(.pushType, .pushType(request.pushType), to: &w)
                write(.priority, .priority(request.priority), to: &w)
                write(.expiration, .number(request.expiration), to: &w)
                // apns-id: a literal without indexing, its name written out.
                w.u8(0x00)
                w.u8(7)
                w.put("apns-id")
                w.u8(36)
                request.apnsID.write(to: out.baseAddress! + w.offset)
                w.offset += 36
                if let collapseID = request.collapseID {
                    w.u8(0x00)
                    w.u8(16)
                    w.put("apns-collapse-id")
                    w.hpackInteger(collapseID.utf8.count, prefixBits: 7, pattern: 0)
                    w.put(collapseID)
                }
                if let bearer { write(.authorization, bearer, to: &w) }
                precondition(w.offset <= bound, "a header block of \(w.offset) bytes over its bound \(bound)")
                return w.offset
            }
        }
    }

    /// A repeated field: its entry's index when the table holds the value; else a literal, added to the table when
    /// the value is the one the field had last time (a value that changes with every request stays out of it).
    private mutating func write(_ field: Field, _ value: Value, to w: inout RawWriter) {
        let slot = slots[field.rawValue]
        let index = slot.last == value
        if index, slot.entry > evicted {
            w.hpackInteger(62 + inserted - slot.entry, prefixBits: 7, pattern: 0x80)
            return
        }
        if let name = field.staticName {
            w.hpackInteger(name, prefixBits: index ? 6 : 4, pattern: index ? 0x40 : 0x00)
        } else {
            w.u8(index ? 0x40 : 0x00)
            w.u8(UInt8(field.name.utf8CodeUnitCount))
            w.put(field.name)
        }
        let length = value.length
        w.hpackInteger(length, prefixBits: 7, pattern: 0)
        value.write(to: &w)
        if index {
            slots[field.rawValue].entry = insert(size: field.name.utf8CodeUnitCount + length + 32)
        } else {
            slots[field.rawValue] = Slot(last: value, entry: 0)
        }
    }

    /// Adds an entry of `size` bytes (RFC 7541 section 4.4: the oldest leave first; one larger than the table
    /// empties it and is not added). Returns its insertion number, 0 when not added.
    private mutating func insert(size entrySize: Int) -> Int {
        evict(toFit: entrySize)
        guard entrySize <= maxSize else { return 0 }
        sizes.append(entrySize)
        size += entrySize
        return inserted
    }

    private mutating func evict(toFit extra: Int) {
        while size + extra > maxSize, evicted < inserted {
            size -= sizes[evicted - removed]
            evicted += 1
        }
        if evicted - removed >= 64 {
            sizes.removeFirst(evicted - removed)
            removed = evicted
        }
    }
}
