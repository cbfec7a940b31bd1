// An http2 app's `aps`, read by Apple's current payload key reference (SPEC section 9).

/// A Live Activity update's `aps.event`.
enum LiveActivityEvent: String, Sendable {
    case start, update, end
}

extension EventScan {
    /// `aps` by Apple's current reference: every key it defines is checked for its type and values; any other key
    /// passes through untouched (Apple ignores it).
    mutating func readCurrentAps() throws(JSONSyntaxError) {
        currentApsKeys = try readApsMembers(as: CurrentApsKey.self) { (scan: inout EventScan, known: CurrentApsKey) throws(JSONSyntaxError) in
            try scan.readCurrentApsValue(known)
        }
    }

    private mutating func readCurrentApsValue(_ known: CurrentApsKey) throws(JSONSyntaxError) {
        let kind = reader.kindOfNextValue()
        let name = known.spelling.description
        switch known {
        case .alert: try readAlert(kind)
        case .badge: try readBadge(kind)
        case .sound:
            if kind == .string {
                _ = try reader.readString()
            } else if kind == .object {
                try readCriticalSound()
            } else {
                try apsWrongType(name, expected: "a string or an object (a critical alert's)", depth: 3)
            }
        case .threadID, .category, .targetContentID, .filterCriteria, .attributesType, .inputPushChannel:
            guard kind == .string else { return try apsWrongType(name, expected: "a string", depth: 3) }
            _ = try reader.readString()
        case .contentAvailable, .mutableContent, .inputPushToken:
            if known == .contentAvailable { apsHasContentAvailable = true }
            guard kind == .number else { return try apsWrongType(name, expected: "the number 1", depth: 3) }
            let value = reader.value(try reader.readNumber())
            if value != 1 { payloadProblem("'aps.\(name)' must be 1, not \(Self.format(value))") }
        case .interruptionLevel:
            guard kind == .string else { return try apsWrongType(name, expected: "a string", depth: 3) }
            let level = reader.string(try reader.readString())
            if !["passive", "active", "time-sensitive", "critical"].contains(level) {
                payloadProblem("'aps.interruption-level' must be passive, active, time-sensitive or critical, not '\(level.prefix(64))'")
            }
        case .relevanceScore:
            guard kind == .number else { return try apsWrongType(name, expected: "a number", depth: 3) }
            _ = try reader.readNumber()
        case .event:
            guard kind == .string else { return try apsWrongType(name, expected: "a string", depth: 3) }
            let text = reader.string(try reader.readString())
            liveActivityEvent = LiveActivityEvent(rawValue: text)
            if liveActivityEvent == nil { payloadProblem("'aps.event' must be start, update or end, not '\(text.prefix(64))'") }
        case .timestamp, .staleDate, .dismissalDate:
            guard kind == .number else { return try apsWrongType(name, expected: "an integer (UNIX seconds)", depth: 3) }
            let value = reader.value(try reader.readNumber())
            if !(value >= 0 && value.isWhole) { payloadProblem("'aps.\(name)' must be an integer (UNIX seconds), not \(Self.format(value))") }
        case .contentState, .attributes:
            guard kind == .object else { return try apsWrongType(name, expected: "an object", depth: 3) }
            try reader.skipValue(depth: 3)
        }
    }

    /// A critical alert's sound: `critical` 0 or 1, `name` a string, `volume` from 0.0 to 1.0; other keys pass.
    private mutating func readCriticalSound() throws(JSONSyntaxError) {
        reader.position &+= 1
        guard try !reader.objectIsEmpty() else { return }
        repeat {
            let key = reader.string(try reader.readKey())
            let kind = reader.kindOfNextValue()
            switch key {
            case "critical":
                guard kind == .number else { try apsWrongType("sound.critical", expected: "0 or 1", depth: 4); continue }
                let value = reader.value(try reader.readNumber())
                if value != 0 && value != 1 { payloadProblem("'aps.sound.critical' must be 0 or 1, not \(Self.format(value))") }
            case "name":
                guard kind == .string else { try apsWrongType("sound.name", expected: "a string", depth: 4); continue }
                _ = try reader.readString()
            case "volume":
                guard kind == .number else { try apsWrongType("sound.volume", expected: "a number from 0.0 to 1.0", depth: 4); continue }
                let value = reader.value(try reader.readNumber())
                if !(value >= 0 && value <= 1) { payloadProblem("'aps.sound.volume' must be from 0.0 to 1.0, not \(Self.format(value))") }
            default:
                try reader.skipValue(depth: 4)
            }
        } while try reader.nextMember(close: UInt8(ascii: "}"))
    }

    /// What a push type `liveactivity` event needs in its `aps` (SPEC section 9), once the whole event is read.
    var liveActivityProblem: String? {
        func has(_ key: CurrentApsKey) -> Bool { currentApsKeys & key.bit != 0 }
        guard has(.event), let event = liveActivityEvent else { return "a liveactivity event needs 'aps.event'" }
        guard has(.timestamp) else { return "a liveactivity event needs 'aps.timestamp'" }
        if event != .end, !has(.contentState) { return "a liveactivity \(event) needs 'aps.content-state'" }
        if event == .start, !has(.attributesType) { return "a liveactivity start needs 'aps.attributes-type'" }
        if event == .start, !has(.attributes) { return "a liveactivity start needs 'aps.attributes'" }
        return nil
    }
}

extension Double {
    /// Finite and without a fraction.
    var isWhole: Bool { isFinite && self == rounded() }
}
