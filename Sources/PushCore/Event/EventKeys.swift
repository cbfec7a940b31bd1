// The keys of a notification event the decoder interprets, matched on their bytes.

/// A key the decoder interprets, matched against a key token's bytes.
protocol KnownKey: CaseIterable {
    var spelling: StaticString { get }
    /// The key whose spelling is exactly `bytes` (unescaped), if any: one comparison of lengths, then of the bytes
    /// of the one or two keys of that length.
    static func spelled(by bytes: UnsafeRawBufferPointer) -> Self?
}

extension UnsafeRawBufferPointer {
    /// Whether the bytes are exactly `literal`'s: up to sixteen bytes as two words, the first and the last (they
    /// overlap when the length is not twice a word's), each compared with the literal's as one constant.
    @inline(__always)
    func spells(_ literal: StaticString) -> Bool {
        let n = literal.utf8CodeUnitCount
        guard count == n else { return false }
        guard n > 0, let base = baseAddress else { return true }
        let text = UnsafeRawPointer(literal.utf8Start)
        @inline(__always) func same<Word: FixedWidthInteger>(_: Word.Type) -> Bool {
            let last = n - MemoryLayout<Word>.size
            return base.loadUnaligned(as: Word.self) == text.loadUnaligned(as: Word.self)
                && base.loadUnaligned(fromByteOffset: last, as: Word.self) == text.loadUnaligned(fromByteOffset: last, as: Word.self)
        }
        switch n {
        case 1: return base.load(as: UInt8.self) == text.load(as: UInt8.self)
        case 2..<4: return same(UInt16.self)
        case 4..<8: return same(UInt32.self)
        case 8...16: return same(UInt64.self)
        default:
            for i in 0..<n where self[i] != text.load(fromByteOffset: i, as: UInt8.self) { return false }
            return true
        }
    }
}

extension JSONReader {
    /// The known key a key token spells (escapes included), if any.
    @inline(__always)
    func match<Key: KnownKey>(_ key: JSONString, as: Key.Type) -> Key? {
        if !key.hasEscapes {
            return Key.spelled(by: UnsafeRawBufferPointer(rebasing: bytes[key.start..<key.end]))
        }
        let text = string(key)
        return Key.allCases.first { $0.spelling.description == text }
    }
}

/// The fields of the event object, in the order their problems are reported.
enum EventField: Int, CaseIterable, KnownKey {
    case id, app, environment, token, payload, expiration, truncateAlert, priority, pushType, collapseID, apnsID
    case tokenRegisteredAt

    static func spelled(by k: UnsafeRawBufferPointer) -> EventField? {
        switch k.count {
        case 2: k.spells("id") ? .id : nil
        case 3: k.spells("app") ? .app : nil
        case 5: k.spells("token") ? .token : nil
        case 7: k.spells("payload") ? .payload : k.spells("apns_id") ? .apnsID : nil
        case 8: k.spells("priority") ? .priority : nil
        case 9: k.spells("push_type") ? .pushType : nil
        case 10: k.spells("expiration") ? .expiration : nil
        case 11: k.spells("environment") ? .environment : k.spells("collapse_id") ? .collapseID : nil
        case 14: k.spells("truncate_alert") ? .truncateAlert : nil
        case 19: k.spells("token_registered_at") ? .tokenRegisteredAt : nil
        default: nil
        }
    }

    var name: String { spelling.description }

    var spelling: StaticString {
        switch self {
        case .id: "id"
        case .app: "app"
        case .environment: "environment"
        case .token: "token"
        case .payload: "payload"
        case .expiration: "expiration"
        case .truncateAlert: "truncate_alert"
        case .priority: "priority"
        case .pushType: "push_type"
        case .collapseID: "collapse_id"
        case .apnsID: "apns_id"
        case .tokenRegisteredAt: "token_registered_at"
        }
    }

    var bit: UInt16 { 1 << UInt16(rawValue) }

    /// The required fields' bits: a constant that the optimiser folds, so checking an event's fields against it
    /// costs one test (a stored list would be a lazy global, initialised behind `swift_once` at every use).
    static var requiredBits: UInt16 { id.bit | app.bit | token.bit | payload.bit }

    /// The required fields, in declaration order: for naming the missing ones.
    static var required: [EventField] { allCases.filter { requiredBits & $0.bit != 0 } }
}

/// The keys of an alert dictionary that have a defined type.
enum AlertKey: Int, CaseIterable, KnownKey {
    case body, title, actionLocKey, locKey, locArgs, titleLocKey, titleLocArgs, launchImage
    /// Apple's current reference only (http2 apps).
    case subtitle, subtitleLocKey, subtitleLocArgs

    static func spelled(by k: UnsafeRawBufferPointer) -> AlertKey? {
        switch k.count {
        case 4: k.spells("body") ? .body : nil
        case 5: k.spells("title") ? .title : nil
        case 7: k.spells("loc-key") ? .locKey : nil
        case 8: k.spells("loc-args") ? .locArgs : k.spells("subtitle") ? .subtitle : nil
        case 12: k.spells("launch-image") ? .launchImage : nil
        case 13: k.spells("title-loc-key") ? .titleLocKey : nil
        case 14: k.spells("action-loc-key") ? .actionLocKey : k.spells("title-loc-args") ? .titleLocArgs : nil
        case 16: k.spells("subtitle-loc-key") ? .subtitleLocKey : nil
        case 17: k.spells("subtitle-loc-args") ? .subtitleLocArgs : nil
        default: nil
        }
    }

    /// Whether the seeds' 2016 list (SPEC section 2, binary apps) has it.
    var isInSeedsList: Bool { rawValue <= AlertKey.launchImage.rawValue }

    /// Whether Apple's current reference (SPEC section 9, http2 apps) has it.
    var isCurrent: Bool { self != .actionLocKey }

    var name: String { spelling.description }

    var spelling: StaticString {
        switch self {
        case .body: "body"
        case .title: "title"
        case .actionLocKey: "action-loc-key"
        case .locKey: "loc-key"
        case .locArgs: "loc-args"
        case .titleLocKey: "title-loc-key"
        case .titleLocArgs: "title-loc-args"
        case .launchImage: "launch-image"
        case .subtitle: "subtitle"
        case .subtitleLocKey: "subtitle-loc-key"
        case .subtitleLocArgs: "subtitle-loc-args"
        }
    }
}

/// The keys of `aps` that have a defined type.
enum ApsKey: Int, CaseIterable, KnownKey {
    case alert, badge, sound, contentAvailable, category

    static func spelled(by k: UnsafeRawBufferPointer) -> ApsKey? {
        switch k.count {
        case 5: k.spells("alert") ? .alert : k.spells("badge") ? .badge : k.spells("sound") ? .sound : nil
        case 8: k.spells("category") ? .category : nil
        case 17: k.spells("content-available") ? .contentAvailable : nil
        default: nil
        }
    }

    var spelling: StaticString {
        switch self {
        case .alert: "alert"
        case .badge: "badge"
        case .sound: "sound"
        case .contentAvailable: "content-available"
        case .category: "category"
        }
    }
}

/// The keys of `aps` in Apple's current payload key reference (SPEC section 9): what an http2 app's event is checked
/// against. Any other key passes through untouched.
enum CurrentApsKey: Int, CaseIterable, KnownKey {
    case alert, badge, sound, threadID, category, contentAvailable, mutableContent, targetContentID, interruptionLevel
    case relevanceScore, filterCriteria
    /// Live Activities.
    case event, timestamp, staleDate, dismissalDate, contentState, attributesType, attributes, inputPushToken
    case inputPushChannel

    var bit: UInt32 { 1 << UInt32(rawValue) }

    static func spelled(by k: UnsafeRawBufferPointer) -> CurrentApsKey? {
        allCases.first { k.spells($0.spelling) }
    }

    var spelling: StaticString {
        switch self {
        case .alert: "alert"
        case .badge: "badge"
        case .sound: "sound"
        case .threadID: "thread-id"
        case .category: "category"
        case .contentAvailable: "content-available"
        case .mutableContent: "mutable-content"
        case .targetContentID: "target-content-id"
        case .interruptionLevel: "interruption-level"
        case .relevanceScore: "relevance-score"
        case .filterCriteria: "filter-criteria"
        case .event: "event"
        case .timestamp: "timestamp"
        case .staleDate: "stale-date"
        case .dismissalDate: "dismissal-date"
        case .contentState: "content-state"
        case .attributesType: "attributes-type"
        case .attributes: "attributes"
        case .inputPushToken: "input-push-token"
        case .inputPushChannel: "input-push-channel"
        }
    }
}
