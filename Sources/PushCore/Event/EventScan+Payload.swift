// The payload's part of an event's scan: the object, `aps` and its alert.

extension EventScan {
    mutating func readPayload() throws(JSONSyntaxError) {
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
                if http2Rules { try readCurrentAps() } else { try readAps() }
            } while try reader.nextMember(close: UInt8(ascii: "}"))
        }
        if !apsSeen { payloadProblem("payload has no 'aps' object") }
    }

    mutating func apsWrongType(_ name: String, expected: String, depth: Int) throws(JSONSyntaxError) {
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

    /// An alert dictionary: the keys of SPEC section 2's list, or of Apple's current reference for an http2 app.
    mutating func readAlertDictionary() throws(JSONSyntaxError) {
        reader.position &+= 1
        var seenKeys: UInt16 = 0
        guard try !reader.objectIsEmpty() else { return }
        repeat {
            let key = try reader.readKey()
            guard let known = reader.match(key, as: AlertKey.self), http2Rules ? known.isCurrent : known.isInSeedsList else {
                try reader.skipValue(depth: 4)
                continue
            }
            let bit: UInt16 = 1 << known.rawValue
            if seenKeys & bit != 0 {
                payloadProblem("'aps.alert.\(known.name)' appears more than once")
                try reader.skipValue(depth: 4)
                continue
            }
            seenKeys |= bit
            let kind = reader.kindOfNextValue()
            switch known {
            case .body, .title, .locKey, .titleLocKey, .launchImage, .subtitle, .subtitleLocKey:
                guard kind == .string else { try apsWrongType("alert.\(known.name)", expected: "a string", depth: 4); continue }
                let text = try reader.readString()
                if known == .body { alertText = text }
            case .actionLocKey:
                guard kind == .string || kind == .null else {
                    try apsWrongType("alert.\(known.name)", expected: "a string or null", depth: 4)
                    continue
                }
                try reader.skipValue(depth: 4)
            case .locArgs, .titleLocArgs, .subtitleLocArgs:
                guard kind == .array else { try apsWrongType("alert.\(known.name)", expected: "an array of strings", depth: 4); continue }
                try readStringArray(name: known.name)
            }
        } while try reader.nextMember(close: UInt8(ascii: "}"))
    }

    mutating func readStringArray(name: String) throws(JSONSyntaxError) {
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
}
