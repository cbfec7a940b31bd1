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

    /// The members of `aps`: each key `Key` knows goes to `value` once (a repeat is a problem); any other is skipped.
    /// Returns the keys seen, a bit per raw value. Inlined into each caller, closure included.
    @inline(__always)
    mutating func readApsMembers<Key: KnownKey & RawRepresentable>(
        as _: Key.Type, _ value: (inout EventScan, Key) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) -> UInt32 where Key.RawValue == Int {
        reader.position &+= 1
        var seenKeys: UInt32 = 0
        guard try !reader.objectIsEmpty() else { return 0 }
        repeat {
            let key = try reader.readKey()
            apsKeyCount &+= 1
            guard let known = reader.match(key, as: Key.self) else {
                try reader.skipValueInLine(depth: 3)
                continue
            }
            let bit: UInt32 = 1 << UInt32(known.rawValue)
            if seenKeys & bit != 0 {
                payloadProblem("'aps.\(known.spelling)' appears more than once")
                try reader.skipValue(depth: 3)
                continue
            }
            seenKeys |= bit
            try value(&self, known)
        } while try reader.nextMember(close: UInt8(ascii: "}"))
        return seenKeys
    }

    /// `aps` by SPEC section 2's list (a binary app).
    private mutating func readAps() throws(JSONSyntaxError) {
        _ = try readApsMembers(as: ApsKey.self) { (scan: inout EventScan, known: ApsKey) throws(JSONSyntaxError) in
            let kind = scan.reader.kindOfNextValue()
            switch known {
            case .alert: try scan.readAlert(kind)
            case .badge: try scan.readBadge(kind)
            case .sound:
                guard kind == .string else { return try scan.apsWrongType("sound", expected: "a string", depth: 3) }
                _ = try scan.reader.readString()
            case .contentAvailable:
                scan.apsHasContentAvailable = true
                guard kind == .number else { return try scan.apsWrongType("content-available", expected: "the number 1", depth: 3) }
                let value = scan.reader.value(try scan.reader.readNumber())
                if value != 1 { scan.payloadProblem("'aps.content-available' must be 1, not \(Self.format(value))") }
            case .category:
                guard kind == .string else { return try scan.apsWrongType("category", expected: "a string", depth: 3) }
                _ = try scan.reader.readString()
            }
        }
    }

    /// `aps.alert`: a string (the text truncation may shorten) or a dictionary.
    mutating func readAlert(_ kind: JSONKind?) throws(JSONSyntaxError) {
        if kind == .string {
            alertText = try reader.readString()
        } else if kind == .object {
            try readAlertDictionary()
        } else {
            try apsWrongType("alert", expected: "a string or an object", depth: 3)
        }
    }

    /// `aps.badge`: a non-negative integer.
    mutating func readBadge(_ kind: JSONKind?) throws(JSONSyntaxError) {
        guard kind == .number else { return try apsWrongType("badge", expected: "a non-negative integer", depth: 3) }
        let value = reader.value(try reader.readNumber())
        if !(value >= 0 && value.isWhole) { payloadProblem("'aps.badge' must be a non-negative integer, not \(Self.format(value))") }
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
