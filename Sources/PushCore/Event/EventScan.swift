import NIOCore

/// What an event's scan rarely finds: its problems and a collapse id, apart from ``EventScan`` so that the scan
/// of a valid event without a collapse id holds no string to copy or release (a scan holding them as optional
/// strings took about 200 instructions per event to copy and destroy).
final class ScanExtras {
    var fieldProblem: (field: EventField, text: String)?
    var payloadProblem: String?
    var priorityProblem: String?
    var collapseID: String?
}

/// The state of one pass over an event.
struct EventScan {
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
    /// Whether `aps` is read by Apple's current reference (an http2 app) rather than SPEC section 2's list.
    var http2Rules = false
    /// The current reference's `aps` keys present (``CurrentApsKey/bit``), and a Live Activity's `event`.
    var currentApsKeys: UInt32 = 0
    var liveActivityEvent: LiveActivityEvent?
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

    mutating func problem(_ field: EventField, _ text: String) {
        if let current = fieldProblem, current.field.rawValue <= field.rawValue { return }
        fieldProblem = (field, text)
    }

    mutating func payloadProblem(_ text: String) {
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
}
extension JSONSyntaxError {
    fileprivate func withKindMessage(_ kind: JSONKind) -> JSONSyntaxError {
        var copy = self
        copy.kind = .notAnObject(kind.rawValue)
        return copy
    }
}
