/// A parsed JSON value, for the places that need a whole document (output-event checks, tools); the hot path
/// (event decoding) walks the bytes with ``JSONReader`` instead.
public enum JSONValue: Hashable, Sendable {
    case object([(String, JSONValue)])
    case array([JSONValue])
    case string(String)
    case number(Double)
    case bool(Bool)
    case null

    /// Parses one JSON text (RFC 8259). Throws ``JSONSyntaxError`` on anything else.
    public init(parsing bytes: [UInt8]) throws(JSONSyntaxError) {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(JSONSyntaxError) in
                var reader = JSONReader(raw)
                reader.skipWhitespace()
                let value = try JSONValue.read(&reader, depth: 0)
                try reader.expectEnd()
                return value
            }
        }
        self = try result.get()
    }

    public init(parsing text: String) throws(JSONSyntaxError) {
        try self.init(parsing: Array(text.utf8))
    }

    private static func read(_ r: inout JSONReader, depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard depth <= JSONReader.maxDepth else { throw JSONSyntaxError(.tooDeep, at: r.position) }
        guard let kind = r.kindOfNextValue() else {
            throw JSONSyntaxError(r.isAtEnd ? .unexpectedEnd : .unexpectedCharacter, at: r.position)
        }
        switch kind {
        case .object:
            r.position += 1
            var members: [(String, JSONValue)] = []
            if try r.objectIsEmpty() { return .object(members) }
            repeat {
                let key = r.string(try r.readKey())
                members.append((key, try read(&r, depth: depth + 1)))
            } while try r.nextMember(close: UInt8(ascii: "}"))
            return .object(members)
        case .array:
            r.position += 1
            var elements: [JSONValue] = []
            r.skipWhitespace()
            if r.peek() == UInt8(ascii: "]") { r.position += 1; return .array(elements) }
            repeat {
                elements.append(try read(&r, depth: depth + 1))
            } while try r.nextMember(close: UInt8(ascii: "]"))
            return .array(elements)
        case .string: return .string(r.string(try r.readString()))
        case .number: return .number(r.value(try r.readNumber()))
        case .bool: return .bool(try r.readBool())
        case .null:
            try r.readLiteral("null")
            return .null
        }
    }

    /// The value of `key` in an object (the last one, if repeated), or nil.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last { $0.0 == key }?.1
    }

    public var keys: [String] {
        guard case .object(let members) = self else { return [] }
        return members.map(\.0)
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var numberValue: Double? {
        if case .number(let n) = self { return n }
        return nil
    }

    /// The value as an integer, when it is a number with no fractional part.
    public var integerValue: Int64? {
        guard case .number(let n) = self, n == n.rounded(), abs(n) < 9.0e18 else { return nil }
        return Int64(n)
    }

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.object(let a), .object(let b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        case (.array(let a), .array(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.bool(let a), .bool(let b)): a == b
        case (.null, .null): true
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .object(let members):
            hasher.combine(0)
            for (k, v) in members { hasher.combine(k); hasher.combine(v) }
        case .array(let a): hasher.combine(1); hasher.combine(a)
        case .string(let s): hasher.combine(2); hasher.combine(s)
        case .number(let n): hasher.combine(3); hasher.combine(n)
        case .bool(let b): hasher.combine(4); hasher.combine(b)
        case .null: hasher.combine(5)
        }
    }
}
