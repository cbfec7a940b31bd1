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

    private struct Slot: Sendable {
        var last: String?
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

    /// Writes `request`'s header block at the buffer's writer index.
    public mutating func write(_ request: APNsRequest, authority: String?, bearer: String?, into buffer: inout ByteBuffer) {
        if let smallest = smallestUpdate {
            if smallest < maxSize { HTTP2Wire.writeHPACKInteger(smallest, prefixBits: 5, pattern: 0x20, to: &buffer) }
            HTTP2Wire.writeHPACKInteger(maxSize, prefixBits: 5, pattern: 0x20, to: &buffer)
            smallestUpdate = nil
        }
        buffer.writeInteger(UInt8(0x83))  // :method: POST
        buffer.writeInteger(UInt8(0x87))  // :scheme: https
        // :path, a literal without indexing on the static name (index 4).
        let token = request.token.bytes
        buffer.writeInteger(UInt8(0x04))
        HTTP2Wire.writeHPACKInteger(10 + token.count * 2, prefixBits: 7, pattern: 0, to: &buffer)
        buffer.writeStaticString("/3/device/")
        token.withUnsafeBytes { token in
            _ = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: token.count * 2 + 8) { out in
                Hex.write(token, to: out.baseAddress!)
                return token.count * 2
            }
        }
        if let authority { write(.authority, authority, into: &buffer) }
        write(.topic, request.topic, into: &buffer)
        write(.pushType, request.pushType.rawValue, into: &buffer)
        write(.priority, APNsRequest.priorityField(request.priority).description, into: &buffer)
        write(.expiration, String(request.expiration), into: &buffer)
        // apns-id: a literal without indexing, its name written out.
        buffer.writeInteger(UInt8(0x00))
        buffer.writeInteger(UInt8(7))
        buffer.writeStaticString("apns-id")
        buffer.writeInteger(UInt8(36))
        _ = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: 36) { request.apnsID.write(into: $0) }
        if let collapseID = request.collapseID {
            buffer.writeInteger(UInt8(0x00))
            buffer.writeInteger(UInt8(16))
            buffer.writeStaticString("apns-collapse-id")
            HTTP2Wire.writeHPACKInteger(collapseID.utf8.count, prefixBits: 7, pattern: 0, to: &buffer)
            buffer.writeString(collapseID)
        }
        if let bearer { write(.authorization, bearer, into: &buffer) }
    }

    /// A repeated field: its entry's index when the table holds the value; else a literal, added to the table when
    /// the value is the one the field had last time (a value that changes with every request stays out of it).
    private mutating func write(_ field: Field, _ value: String, into buffer: inout ByteBuffer) {
        let slot = slots[field.rawValue]
        if slot.last == value, slot.entry > evicted {
            HTTP2Wire.writeHPACKInteger(62 + inserted - slot.entry, prefixBits: 7, pattern: 0x80, to: &buffer)
            return
        }
        let index = slot.last == value
        if let name = field.staticName {
            HTTP2Wire.writeHPACKInteger(name, prefixBits: index ? 6 : 4, pattern: index ? 0x40 : 0x00, to: &buffer)
        } else {
            buffer.writeInteger(UInt8(index ? 0x40 : 0x00))
            buffer.writeInteger(UInt8(field.name.utf8CodeUnitCount))
            buffer.writeStaticString(field.name)
        }
        HTTP2Wire.writeHPACKInteger(value.utf8.count, prefixBits: 7, pattern: 0, to: &buffer)
        buffer.writeString(value)
        if index {
            slots[field.rawValue].entry = insert(size: field.name.utf8CodeUnitCount + value.utf8.count + 32)
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
