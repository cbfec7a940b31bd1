import NIOCore

/// Decodes and validates notification events (SPEC section 2) from the raw bytes of a Kafka message.
///
/// One pass over the bytes validates the JSON and every field; the payload's bytes are then copied without their
/// insignificant whitespace. When an event has several problems, the reason reported is the first of: malformed
/// event (fields in the order of the SPEC table), invalid token format, invalid payload, invalid priority,
/// payload too large.
///
/// The HTTP/2 fields (`push_type`, `collapse_id`, `apns_id`) are validated for every event; a decoder for an http2
/// app (``EventDecoder/http2``) also allows priority 1 and takes the payload limit from the push type (4096 bytes,
/// 5120 for voip).
public struct EventDecoder: Sendable {
    /// The largest payload allowed, in bytes (2048 for the frame format, 256 for the legacy formats; for HTTP/2 the
    /// limit of the event's push type).
    public var payloadLimit: Int
    /// Whether the payload limit and priorities are HTTP/2's.
    public var usesHTTP2Rules = false
    /// Whether the format carries a priority. The enhanced and simple formats carry none and the gateway takes
    /// them as priority 10 (seeds), which is not allowed for a notification whose `aps` holds only
    /// `content-available`: such an event is `invalid_priority` there, whatever priority it names.
    public var carriesPriority: Bool
    /// Apps whose names are given back as these strings (``KnownNames``); any other name is decoded as written.
    public var knownApps = KnownNames()

    public init(format: NotificationFormat = .frame) {
        self.payloadLimit = format.maxPayloadSize
        self.carriesPriority = format == .frame
    }

    public init(payloadLimit: Int) {
        self.payloadLimit = payloadLimit
        self.carriesPriority = true
    }

    /// A decoder for an HTTP/2 app: priorities 1, 5 and 10, the push type's payload limit.
    public static let http2: EventDecoder = {
        var decoder = EventDecoder(payloadLimit: PushType.largestPayloadSize)
        decoder.usesHTTP2Rules = true
        return decoder
    }()

    public func decode(_ bytes: [UInt8]) -> Result<NotificationEvent, EventRejection> {
        bytes.withUnsafeBytes { decode($0) }
    }

    public func decode(_ buffer: ByteBuffer) -> Result<NotificationEvent, EventRejection> {
        buffer.withUnsafeReadableBytes { decode($0) }
    }

    public func decode(_ text: String) -> Result<NotificationEvent, EventRejection> {
        text.withBorrowedUTF8 { decode($0) }
    }

    public func decode(_ bytes: UnsafeRawBufferPointer) -> Result<NotificationEvent, EventRejection> {
        var scan = EventScan(reader: JSONReader(bytes))
        do {
            try scan.readEvent(knownApps: knownApps)
        } catch {
            return .failure(scan.rejection(.malformedEvent(error.description)))
        }
        return scan.finish(payloadLimit: payloadLimit, carriesPriority: carriesPriority, http2: usesHTTP2Rules)
    }

    /// Decodes and validates as ``decode(_:)-(UnsafeRawBufferPointer)`` does, with the same verdicts, but appends the
    /// token's bytes and then the payload's to `staging` instead of giving them arrays of their own (on a rejection
    /// `staging` is left as it was). The worker stages a poll's notifications in one buffer and encodes their frames
    /// from there.
    public func decode(_ bytes: UnsafeRawBufferPointer, staging: inout [UInt8]) -> Result<StagedNotification, EventRejection> {
        var scan = EventScan(reader: JSONReader(bytes))
        do {
            try scan.readEvent(knownApps: knownApps)
        } catch {
            return .failure(scan.rejection(.malformedEvent(error.description)))
        }
        return scan.finish(payloadLimit: payloadLimit, carriesPriority: carriesPriority, http2: usesHTTP2Rules, staging: &staging)
    }
}

/// A notification event that passed validation, its token and payload bytes in a caller's buffer
/// (``EventDecoder/decode(_:staging:)``): what the binary transport sends and its output events name, without arrays
/// of its own. The HTTP/2 fields (push type, collapse id, apns-id) are validated but not kept: an app on the HTTP/2
/// API is decoded into a ``NotificationEvent``.
public struct StagedNotification: Sendable {
    /// Its id, packed when it fits (a UUID makes no string).
    public var eventID: EventID
    public var id: String { eventID.string }
    public var app: String
    public var environment: APNsEnvironment?
    /// ``knownApp`` plus one, 0 for none: kept in the padding after `environment`, so that it costs the value no
    /// size (a configuration has at most 65,534 endpoints, so as many apps).
    var knownAppPlusOne: UInt16 = 0
    /// Where the token's bytes are in the buffer.
    public var token: Range<Int>
    /// Where the payload's bytes are, right after the token's.
    public var payload: Range<Int>
    /// When it stops being worth delivering, and its priority: the frame's other items.
    public var expiration: Expiration
    public var priority: Priority
    /// The event's `token_registered_at` (SPEC section 10).
    public var tokenRegisteredAt: Int64?
    /// `app`'s position in the decoder's ``EventDecoder/knownApps`` (``KnownNames/all``), when its bytes spelled
    /// one of them: its endpoint is then found without comparing the name again.
    public var knownApp: Int? {
        get { knownAppPlusOne == 0 ? nil : Int(knownAppPlusOne) - 1 }
        set { knownAppPlusOne = newValue.flatMap { UInt16(exactly: $0 + 1) } ?? 0 }
    }

    /// The bytes it took in the buffer.
    public var staged: Range<Int> { token.lowerBound..<payload.upperBound }

    /// Its device token, copied out of `staging`.
    public func deviceToken(in staging: [UInt8]) -> DeviceToken {
        // Staged from a token that parsed.
        try! DeviceToken(bytes: Array(staging[token]))
    }

    /// The event with its token and payload copied out of `staging`, for an error event (without the HTTP/2 fields).
    public func event(in staging: [UInt8]) -> NotificationEvent {
        NotificationEvent(
            id: id, app: app, environment: environment, token: deviceToken(in: staging), payload: Array(staging[payload]),
            expiration: expiration, priority: priority, tokenRegisteredAt: tokenRegisteredAt)
    }
}

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

    static func spelled(by k: UnsafeRawBufferPointer) -> AlertKey? {
        switch k.count {
        case 4: k.spells("body") ? .body : nil
        case 5: k.spells("title") ? .title : nil
        case 7: k.spells("loc-key") ? .locKey : nil
        case 8: k.spells("loc-args") ? .locArgs : nil
        case 12: k.spells("launch-image") ? .launchImage : nil
        case 13: k.spells("title-loc-key") ? .titleLocKey : nil
        case 14: k.spells("action-loc-key") ? .actionLocKey : k.spells("title-loc-args") ? .titleLocArgs : nil
        default: nil
        }
    }

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

/// What an event's scan rarely finds: its problems and a collapse id, apart from ``EventScan`` so that the scan
/// of a valid event without a collapse id holds no string to copy or release (a scan holding them as optional
/// strings took about 200 instructions per event to copy and destroy).
private final class ScanExtras {
    var fieldProblem: (field: EventField, text: String)?
    var payloadProblem: String?
    var priorityProblem: String?
    var collapseID: String?
}

/// The state of one pass over an event.
private struct EventScan {
    var reader: JSONReader
    /// Bits of the fields seen so far.
    var seen: UInt16 = 0
    /// What few events have (``ScanExtras``), made on first use.
    var extras: ScanExtras?
    /// The malformed-event problem of the field earliest in the SPEC's order, if any.
    var fieldProblem: (field: EventField, text: String)? {
        get { extras?.fieldProblem }
        set { madeExtras.fieldProblem = newValue }
    }
    var payloadProblem: String? {
        get { extras?.payloadProblem }
        set { madeExtras.payloadProblem = newValue }
    }
    var priorityProblem: String? {
        get { extras?.priorityProblem }
        set { madeExtras.priorityProblem = newValue }
    }
    var collapseID: String? {
        get { extras?.collapseID }
        set { madeExtras.collapseID = newValue }
    }

    /// The `id` field's string, once it passed: made text (or packed) only for the result.
    var idToken: JSONString?
    var app: String?
    /// `app`'s position among the decoder's known apps, when it was read as one of them.
    var knownApp: Int?
    /// The `environment` field's string, made text only for an error event.
    var environmentToken: JSONString?
    var environment: APNsEnvironment?
    var tokenString: JSONString?
    var expiration: Expiration = .unspecified
    var priority: Priority?
    var truncateAlert = false
    var pushType: PushType?
    var apnsID: APNsID?
    var tokenRegisteredAt: Int64?

    var payloadStart = 0
    var payloadEnd = 0
    var payloadHasWhitespace = false
    var apsSeen = false
    var apsKeyCount = 0
    var apsHasContentAvailable = false
    /// The alert text that truncation may shorten (`alert`, or `alert.body`).
    var alertText: JSONString?

    init(reader: JSONReader) {
        self.reader = reader
    }

    private var madeExtras: ScanExtras {
        mutating get {
            if let extras { return extras }
            let made = ScanExtras()
            extras = made
            return made
        }
    }

    private mutating func problem(_ field: EventField, _ text: String) {
        if let current = fieldProblem, current.field.rawValue <= field.rawValue { return }
        fieldProblem = (field, text)
    }

    private mutating func payloadProblem(_ text: String) {
        if payloadProblem == nil { payloadProblem = text }
    }

    /// - Parameter knownApps: passed down, not kept: a copy kept per event would retain its tables.
    mutating func readEvent(knownApps: KnownNames) throws(JSONSyntaxError) {
        reader.skipWhitespace()
        guard reader.kindOfNextValue() == .object else {
            if let kind = reader.kindOfNextValue() {
                try reader.skipValue(depth: 0)
                try reader.expectEnd()
                throw JSONSyntaxError(.unexpectedCharacter, at: 0).withKindMessage(kind)
            }
            throw JSONSyntaxError(reader.isAtEnd ? .unexpectedEnd : .unexpectedCharacter, at: reader.position)
        }
        reader.position &+= 1
        if try !reader.objectIsEmpty() {
            repeat {
                let key = try reader.readKey()
                guard let field = reader.match(key, as: EventField.self) else {
                    try reader.skipValue(depth: 1)
                    continue
                }
                if seen & field.bit != 0 {
                    problem(field, "field '\(field.name)' appears more than once")
                    try reader.skipValue(depth: 1)
                    continue
                }
                seen |= field.bit
                try readField(field, knownApps: knownApps)
            } while try reader.nextMember(close: UInt8(ascii: "}"))
        }
        try reader.expectEnd()
        guard seen & EventField.requiredBits != EventField.requiredBits else { return }
        for field in EventField.required where seen & field.bit == 0 {
            problem(field, "field '\(field.name)' is missing")
        }
    }

    private mutating func wrongType(_ field: EventField, expected: String) throws(JSONSyntaxError) {
        let kind = reader.kindOfNextValue()?.rawValue ?? "nothing"
        problem(field, "field '\(field.name)' must be \(expected), not \(kind)")
        try reader.skipValue(depth: 1)
    }

    private mutating func readField(_ field: EventField, knownApps: KnownNames) throws(JSONSyntaxError) {
        let kind = reader.kindOfNextValue()
        switch field {
        case .id:
            guard kind == .string else { return try wrongType(field, expected: "a string") }
            let token = try reader.readString()
            // At most 128 bytes without escapes is at most 128 characters: no count needed.
            let length = !token.hasEscapes && token.end - token.start <= 128 ? token.end - token.start : reader.scalarCount(token)
            if length == 0 {
                problem(field, "field 'id' is empty")
            } else if length > 128 {
                problem(field, "field 'id' has \(length) characters, more than 128")
            } else {
                idToken = token
            }
        case .app:
            guard kind == .string else { return try wrongType(field, expected: "a string") }
            let token = try reader.readString()
            let known = token.hasEscapes
                ? nil : knownApps.index(matching: UnsafeRawBufferPointer(rebasing: reader.bytes[token.start..<token.end]))
            let text = known.map { knownApps.name(at: $0) } ?? reader.string(token)
            knownApp = known
            if text.isEmpty { problem(field, "field 'app' is empty") } else { app = text }
        case .environment:
            guard kind == .string else { return try wrongType(field, expected: "\"production\" or \"sandbox\"") }
            let token = try reader.readString()
            environmentToken = token
            let env = token.hasEscapes
                ? APNsEnvironment(rawValue: reader.string(token))
                : APNsEnvironment(utf8: UnsafeRawBufferPointer(rebasing: reader.bytes[token.start..<token.end]))
            guard let env else {
                return problem(field, "field 'environment' must be \"production\" or \"sandbox\", not \"\(reader.string(token).prefix(40))\"")
            }
            environment = env
        case .token:
            guard kind == .string else { return try wrongType(field, expected: "a hex string") }
            tokenString = try reader.readString()
        case .payload:
            guard kind == .object else { return try wrongType(field, expected: "an object") }
            let before = reader.whitespaceSkipped
            payloadStart = reader.position
            try readPayload()
            payloadEnd = reader.position
            payloadHasWhitespace = reader.whitespaceSkipped != before
        case .expiration:
            try readExpiration()
        case .truncateAlert:
            guard kind == .bool else { return try wrongType(field, expected: "a boolean") }
            truncateAlert = try reader.readBool()
        case .priority:
            guard kind == .number else {
                priorityProblem = "field 'priority' must be the number 5 or 10, not \(kind?.rawValue ?? "nothing")"
                return try reader.skipValue(depth: 1)
            }
            let value = reader.value(try reader.readNumber())
            if value == 10 { priority = .immediate }
            else if value == 5 { priority = .conservePower }
            else if value == 1 { priority = .lowest }
            else { priorityProblem = "field 'priority' must be 5 or 10 (or 1 for an http2 app), not \(Self.format(value))" }
        case .pushType:
            guard kind == .string else { return try wrongType(field, expected: "a push type string") }
            let token = try reader.readString()
            let parsed = token.hasEscapes
                ? PushType(rawValue: reader.string(token))
                : PushType.parse(UnsafeRawBufferPointer(rebasing: reader.bytes[token.start..<token.end]))
            guard let parsed else {
                return problem(field, "field 'push_type' must be one of \(PushType.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(reader.string(token).prefix(40))\"")
            }
            pushType = parsed
        case .collapseID:
            guard kind == .string else { return try wrongType(field, expected: "a string") }
            let text = reader.string(try reader.readString())
            guard text.utf8.count <= 64 else {
                return problem(field, "field 'collapse_id' is \(text.utf8.count) bytes, more than 64")
            }
            collapseID = text
        case .apnsID:
            guard kind == .string else { return try wrongType(field, expected: "a UUID string") }
            let token = try reader.readString()
            let parsed = token.hasEscapes
                ? APNsID(reader.string(token))
                : APNsID(utf8: UnsafeRawBufferPointer(rebasing: reader.bytes[token.start..<token.end]))
            guard let parsed else {
                return problem(field, "field 'apns_id' must be a UUID (8-4-4-4-12 hex digits), not \"\(reader.string(token).prefix(40))\"")
            }
            apnsID = parsed
        case .tokenRegisteredAt:
            tokenRegisteredAt = try readTime(field)
        }
    }

    /// A time as UNIX seconds (an integer) or an RFC 3339 string; nil after reporting a problem.
    private mutating func readTime(_ field: EventField) throws(JSONSyntaxError) -> Int64? {
        switch reader.kindOfNextValue() {
        case .number:
            let value = reader.value(try reader.readNumber())
            guard value == value.rounded(), value >= 0, value <= 4_294_967_295 else {
                problem(field, "field '\(field.name)' must be UNIX seconds from 0 to 4294967295, not \(Self.format(value))")
                return nil
            }
            return Int64(value)
        case .string:
            let token = try reader.readString()
            let seconds = token.hasEscapes
                ? RFC3339.parse(reader.string(token))
                : RFC3339.parse(UnsafeRawBufferPointer(rebasing: reader.bytes[token.start..<token.end]))
            guard let seconds, seconds >= 0 else {
                problem(field, "field '\(field.name)' is not an RFC 3339 date-time after 1970: \"\(reader.string(token).prefix(64))\"")
                return nil
            }
            return seconds
        default:
            try wrongType(field, expected: "UNIX seconds or an RFC 3339 string")
            return nil
        }
    }

    private mutating func readExpiration() throws(JSONSyntaxError) {
        switch reader.kindOfNextValue() {
        case .number:
            let value = reader.value(try reader.readNumber())
            guard value == value.rounded(), value >= 0, value <= 4_294_967_295 else {
                return problem(.expiration, "field 'expiration' must be an integer from 0 to 4294967295, not \(Self.format(value))")
            }
            expiration = .at(UInt32(value))
        case .string:
            let token = try reader.readString()
            let seconds: Int64?
            if token.hasEscapes {
                seconds = RFC3339.parse(reader.string(token))
            } else {
                seconds = RFC3339.parse(UnsafeRawBufferPointer(rebasing: reader.bytes[token.start..<token.end]))
            }
            guard let seconds else {
                return problem(.expiration, "field 'expiration' is not an RFC 3339 date-time: \"\(reader.string(token).prefix(64))\"")
            }
            guard seconds >= 0, seconds <= 4_294_967_295 else {
                return problem(.expiration, "field 'expiration' is outside 1970-01-01T00:00:00Z...2106-02-07T06:28:15Z")
            }
            expiration = .at(UInt32(seconds))
        default:
            try wrongType(.expiration, expected: "an integer or an RFC 3339 string")
        }
    }

    // MARK: Payload

    private mutating func readPayload() throws(JSONSyntaxError) {
        reader.position &+= 1
        if try !reader.objectIsEmpty() {
            repeat {
                let key = try reader.readKey()
                guard reader.string(key, equals: "aps") else {
                    try reader.skipValueInLine(depth: 2)
                    continue
                }
                if apsSeen {
                    payloadProblem("payload holds 'aps' more than once")
                    try reader.skipValue(depth: 2)
                    continue
                }
                apsSeen = true
                guard reader.kindOfNextValue() == .object else {
                    payloadProblem("'aps' must be an object, not \(reader.kindOfNextValue()?.rawValue ?? "nothing")")
                    try reader.skipValue(depth: 2)
                    continue
                }
                try readAps()
            } while try reader.nextMember(close: UInt8(ascii: "}"))
        }
        if !apsSeen { payloadProblem("payload has no 'aps' object") }
    }

    private mutating func apsWrongType(_ name: String, expected: String, depth: Int) throws(JSONSyntaxError) {
        payloadProblem("'aps.\(name)' must be \(expected), not \(reader.kindOfNextValue()?.rawValue ?? "nothing")")
        try reader.skipValue(depth: depth)
    }

    private mutating func readAps() throws(JSONSyntaxError) {
        reader.position &+= 1
        var seenKeys: UInt8 = 0
        guard try !reader.objectIsEmpty() else { return }
        repeat {
            let key = try reader.readKey()
            apsKeyCount &+= 1
            guard let known = reader.match(key, as: ApsKey.self) else {
                try reader.skipValueInLine(depth: 3)
                continue
            }
            let bit: UInt8 = 1 << known.rawValue
            if seenKeys & bit != 0 {
                payloadProblem("'aps.\(known.spelling)' appears more than once")
                try reader.skipValue(depth: 3)
                continue
            }
            seenKeys |= bit
            let kind = reader.kindOfNextValue()
            switch known {
            case .alert:
                if kind == .string {
                    alertText = try reader.readString()
                } else if kind == .object {
                    try readAlertDictionary()
                } else {
                    try apsWrongType("alert", expected: "a string or an object", depth: 3)
                }
            case .badge:
                guard kind == .number else { try apsWrongType("badge", expected: "a non-negative integer", depth: 3); continue }
                let value = reader.value(try reader.readNumber())
                if !(value >= 0 && value == value.rounded() && value.isFinite) {
                    payloadProblem("'aps.badge' must be a non-negative integer, not \(Self.format(value))")
                }
            case .sound:
                guard kind == .string else { try apsWrongType("sound", expected: "a string", depth: 3); continue }
                _ = try reader.readString()
            case .contentAvailable:
                apsHasContentAvailable = true
                guard kind == .number else { try apsWrongType("content-available", expected: "the number 1", depth: 3); continue }
                let value = reader.value(try reader.readNumber())
                if value != 1 { payloadProblem("'aps.content-available' must be 1, not \(Self.format(value))") }
            case .category:
                guard kind == .string else { try apsWrongType("category", expected: "a string", depth: 3); continue }
                _ = try reader.readString()
            }
        } while try reader.nextMember(close: UInt8(ascii: "}"))
    }

    private mutating func readAlertDictionary() throws(JSONSyntaxError) {
        reader.position &+= 1
        var seenKeys: UInt8 = 0
        guard try !reader.objectIsEmpty() else { return }
        repeat {
            let key = try reader.readKey()
            guard let known = reader.match(key, as: AlertKey.self) else {
                try reader.skipValue(depth: 4)
                continue
            }
            let bit: UInt8 = 1 << known.rawValue
            if seenKeys & bit != 0 {
                payloadProblem("'aps.alert.\(known.name)' appears more than once")
                try reader.skipValue(depth: 4)
                continue
            }
            seenKeys |= bit
            let kind = reader.kindOfNextValue()
            switch known {
            case .body, .title, .locKey, .titleLocKey, .launchImage:
                guard kind == .string else { try apsWrongType("alert.\(known.name)", expected: "a string", depth: 4); continue }
                let text = try reader.readString()
                if known == .body { alertText = text }
            case .actionLocKey:
                guard kind == .string || kind == .null else {
                    try apsWrongType("alert.\(known.name)", expected: "a string or null", depth: 4)
                    continue
                }
                try reader.skipValue(depth: 4)
            case .locArgs, .titleLocArgs:
                guard kind == .array else { try apsWrongType("alert.\(known.name)", expected: "an array of strings", depth: 4); continue }
                try readStringArray(name: known.name)
            }
        } while try reader.nextMember(close: UInt8(ascii: "}"))
    }

    private mutating func readStringArray(name: String) throws(JSONSyntaxError) {
        reader.position &+= 1
        reader.skipWhitespace()
        if reader.peek() == UInt8(ascii: "]") { reader.position &+= 1; return }
        repeat {
            if reader.kindOfNextValue() == .string {
                _ = try reader.readString()
            } else {
                payloadProblem("'aps.alert.\(name)' must hold only strings, not \(reader.kindOfNextValue()?.rawValue ?? "nothing")")
                try reader.skipValue(depth: 5)
            }
        } while try reader.nextMember(close: UInt8(ascii: "]"))
    }

    // MARK: Result

    func rejection(_ error: EventError, token: DeviceToken? = nil) -> EventRejection {
        EventRejection(
            error: error, eventID: idToken.map { reader.string($0) }, app: app, environment: environmentToken.map { reader.string($0) }, token: token,
            rawToken: tokenString.map { reader.string($0) })
    }

    func finish(payloadLimit: Int, carriesPriority: Bool, http2: Bool) -> Result<NotificationEvent, EventRejection> {
        if let fieldProblem { return .failure(rejection(.malformedEvent(fieldProblem.text))) }
        let token: DeviceToken
        do {
            token = try parseToken()
        } catch {
            return .failure(rejection(.invalidTokenFormat(error.description)))
        }
        if let problem = problem(carriesPriority: carriesPriority, http2: http2) {
            return .failure(rejection(problem, token: token))
        }
        let payloadLimit = limit(payloadLimit, http2: http2)
        var payload = compactPayload()
        var truncated = false
        if payload.count > payloadLimit {
            switch shortened(payload.count, limit: payloadLimit) {
            case .success(let shortened): payload = shortened
            case .failure(let error): return .failure(rejection(error, token: token))
            }
            truncated = true
        }
        return .success(NotificationEvent(
            id: reader.string(idToken!), app: app!, environment: environment, token: token, payload: payload, expiration: expiration,
            priority: resolvedPriority(http2: http2), alertTruncated: truncated, pushType: pushType, collapseID: collapseID,
            apnsID: apnsID, contentAvailableOnly: contentAvailableOnly, tokenRegisteredAt: tokenRegisteredAt))
    }

    /// ``finish(payloadLimit:carriesPriority:http2:)`` with the token's and the payload's bytes appended to `staging`
    /// (left as it was on a rejection).
    func finish(
        payloadLimit: Int, carriesPriority: Bool, http2: Bool, staging: inout [UInt8]
    ) -> Result<StagedNotification, EventRejection> {
        if let fieldProblem { return .failure(rejection(.malformedEvent(fieldProblem.text))) }
        let start = staging.count
        do {
            try appendToken(to: &staging)
        } catch {
            return .failure(rejection(.invalidTokenFormat(error.description)))
        }
        let tokenEnd = staging.count
        func refuse(_ error: EventError, _ staging: inout [UInt8]) -> Result<StagedNotification, EventRejection> {
            let token = try! DeviceToken(bytes: Array(staging[start..<tokenEnd]))  // it parsed
            staging.removeSubrange(start...)
            return .failure(rejection(error, token: token))
        }
        if let problem = problem(carriesPriority: carriesPriority, http2: http2) { return refuse(problem, &staging) }
        let payloadLimit = limit(payloadLimit, http2: http2)
        if payloadHasWhitespace {
            JSONCompaction.append(reader.bytes, from: payloadStart, to: payloadEnd, into: &staging)
        } else {
            // As typed bytes: a slice of raw bytes is appended through a generic iterator.
            staging.append(contentsOf: UnsafeRawBufferPointer(rebasing: reader.bytes[payloadStart..<payloadEnd])
                .assumingMemoryBound(to: UInt8.self))
        }
        if staging.count - tokenEnd > payloadLimit {
            switch shortened(staging.count - tokenEnd, limit: payloadLimit) {
            case .success(let shortened):
                staging.removeSubrange(tokenEnd...)
                staging.append(contentsOf: shortened)
            case .failure(let error): return refuse(error, &staging)
            }
        }
        var staged = StagedNotification(
            eventID: eventID(idToken!), app: app!, environment: environment, token: start..<tokenEnd, payload: tokenEnd..<staging.count,
            expiration: expiration, priority: resolvedPriority(http2: http2), tokenRegisteredAt: tokenRegisteredAt)
        staged.knownApp = knownApp
        return .success(staged)
    }

    /// The id as a staged notification keeps it: packed straight from the event's bytes when it has no escapes.
    private func eventID(_ token: JSONString) -> EventID {
        token.hasEscapes
            ? EventID(reader.string(token))
            : EventID(validUTF8: UnsafeRawBufferPointer(rebasing: reader.bytes[token.start..<token.end]))
    }

    /// Whether the payload's `aps` holds only `content-available` (a background notification).
    private var contentAvailableOnly: Bool { apsKeyCount == 1 && apsHasContentAvailable }

    /// Whether it is a background notification: its push type says so, or it names none and is content-available only.
    private var isBackground: Bool { pushType == .background || (pushType == nil && contentAvailableOnly) }

    /// The priority sent: the event's, else 5 for a background notification, else 10.
    private func resolvedPriority(http2: Bool) -> Priority {
        priority ?? (contentAvailableOnly || (http2 && isBackground) ? .conservePower : .immediate)
    }

    /// The payload limit: the format's, or on HTTP/2 the push type's.
    private func limit(_ formatLimit: Int, http2: Bool) -> Int {
        http2 ? (pushType ?? .alert).maxPayloadSize : formatLimit
    }

    /// The first problem of the payload and the priority, once the fields and the token passed.
    private func problem(carriesPriority: Bool, http2: Bool) -> EventError? {
        if let payloadProblem { return .invalidPayload(payloadProblem) }
        if let priorityProblem { return .invalidPriority(priorityProblem) }
        if priority == .lowest && !http2 {
            return .invalidPriority("priority 1 is only for apps on the http2 transport")
        }
        if http2 && isBackground && priority == .immediate {
            return .invalidPriority("priority 10 is not allowed with push type background")
        }
        if contentAvailableOnly && priority == .immediate {
            return .invalidPriority("priority 10 is not allowed when 'aps' holds only 'content-available'")
        }
        if contentAvailableOnly && !carriesPriority {
            return .invalidPriority(
                "the app's legacy format carries no priority and the gateway takes it as 10, which is not allowed when 'aps' holds only 'content-available'")
        }
        return nil
    }

    /// A payload of `count` bytes (compacted) over `limit`: shortened by truncating the alert text when the event
    /// asks for it and that is enough, else why not.
    private func shortened(_ count: Int, limit: Int) -> Result<[UInt8], EventError> {
        guard truncateAlert, let alertText,
            let shortened = PayloadTruncation.truncate(
                reader: reader, payloadStart: payloadStart, payloadEnd: payloadEnd, alert: alertText, limit: limit)
        else {
            let hint = truncateAlert ? " and no alert text can be shortened enough" : ""
            return .failure(.payloadTooLarge("payload is \(count) bytes, more than \(limit)\(hint)"))
        }
        return .success(shortened)
    }

    private func appendToken(to staging: inout [UInt8]) throws(DeviceTokenError) {
        let t = tokenString!
        if t.hasEscapes {
            staging.append(contentsOf: try DeviceToken(hex: reader.string(t)).bytes)
        } else {
            try DeviceToken.appendHex(UnsafeRawBufferPointer(rebasing: reader.bytes[t.start..<t.end]), to: &staging)
        }
    }

    private func parseToken() throws(DeviceTokenError) -> DeviceToken {
        let t = tokenString!
        if t.hasEscapes { return try DeviceToken(hex: reader.string(t)) }
        return try DeviceToken(hexUTF8: UnsafeRawBufferPointer(rebasing: reader.bytes[t.start..<t.end]))
    }

    private func compactPayload() -> [UInt8] {
        if !payloadHasWhitespace {
            return Array(reader.bytes[payloadStart..<payloadEnd])
        }
        var out: [UInt8] = []
        out.reserveCapacity(payloadEnd - payloadStart)
        JSONCompaction.append(reader.bytes, from: payloadStart, to: payloadEnd, into: &out)
        return out
    }

    static func format(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

extension JSONSyntaxError {
    fileprivate func withKindMessage(_ kind: JSONKind) -> JSONSyntaxError {
        var copy = self
        copy.kind = .notAnObject(kind.rawValue)
        return copy
    }
}
