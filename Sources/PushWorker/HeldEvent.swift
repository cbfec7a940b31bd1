import PushCore

/// What the ledger keeps of a record while its notification is delivered: what its output events need, and no
/// payload and no token (the engine holds the frame, and outcomes bring its token back).
///
/// 28 bytes and, for the usual event, no heap object of its own: the event id is kept inline when it has at most
/// 16 bytes or is a UUID spelled canonically (36 characters, one case: kept as its 16 bytes); any other goes to an
/// object of its own. With the ledger's own fields for the record (its group and counts) a held record is 32 bytes;
/// `HeldEventTests` checks both sizes.
struct HeldEvent: Sendable {
    /// The Kafka record's timestamp, UNIX milliseconds (-1 when none).
    let timestamp: Int64
    private let storedID: StoredID
    /// How `storedID`'s inline words spell the id (`.overflow` for a long one) in the low 7 bits; whether the
    /// event lifts a suppression in the high one.
    private var flags: UInt8
    private let endpointIndex: UInt16

    /// The id's bytes (the kind in `flags` says how they spell it), or the id itself when it does not fit.
    private enum StoredID: Sendable {
        case inline(UInt64, UInt64)
        case long(LongID)
    }

    private final class LongID: Sendable {
        let id: String

        init(_ id: String) { self.id = id }
    }

    private static let liftsBit: UInt8 = 0x80

    /// The most endpoints a held event can name (the ledger counts endpoint + 1 in a `UInt16`).
    static let endpointLimit = Int(UInt16.max) - 1

    init(id: EventID, endpoint: Int, timestamp: Int64) {
        precondition(endpoint <= Self.endpointLimit, "an endpoint index beyond the configuration's limit")
        endpointIndex = UInt16(endpoint)
        self.timestamp = timestamp
        if let packed = id.packed {
            flags = packed.kind.rawValue
            storedID = .inline(packed.words.0, packed.words.1)
        } else {
            flags = CompactIDKind.overflow.rawValue
            storedID = .long(LongID(id.string))
        }
    }

    private var idKind: CompactIDKind { CompactIDKind(rawValue: flags & ~Self.liftsBit) }

    /// Its token is suppressed but was registered again since: once accepted, the suppression is lifted.
    var liftsSuppression: Bool {
        get { flags & Self.liftsBit != 0 }
        set { flags = newValue ? flags | Self.liftsBit : flags & ~Self.liftsBit }
    }

    init(id: String, endpoint: Int, timestamp: Int64) {
        self.init(id: EventID(id), endpoint: endpoint, timestamp: timestamp)
    }

    /// The endpoint's index in the configuration.
    var endpoint: Int { Int(endpointIndex) }

    var id: String {
        switch storedID {
        case .inline(let high, let low): idKind.unpack((high, low))
        case .long(let long): long.id
        }
    }
}
