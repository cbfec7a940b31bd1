// What the JSON reader hands out: a string's or a number's place in the bytes, a value's kind, a syntax error.

/// A string token: its raw content lies between `start` (after the opening quote) and `end` (the closing quote).
struct JSONString: Hashable, Sendable {
    var start: Int
    var end: Int
    var hasEscapes: Bool
}

/// A number token's raw span.
struct JSONNumber: Hashable, Sendable {
    var start: Int
    var end: Int
    /// No fraction and no exponent.
    var isPlainInteger: Bool
}

enum JSONKind: String, Sendable {
    case object, array, string, number, bool = "boolean", null
}

/// A JSON syntax error with the byte offset where it was found.
public struct JSONSyntaxError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        case unexpectedEnd, unexpectedCharacter, expected(UInt8), expectedKey, unterminatedString
        case controlCharacterInString, invalidEscape, unpairedSurrogate, invalidUTF8, invalidNumber
        case invalidLiteral, tooDeep, trailingCharacters
        /// Valid JSON, but not the object an event must be.
        case notAnObject(String)
    }

    public var kind: Kind
    public var offset: Int

    init(_ kind: Kind, at offset: Int) {
        self.kind = kind
        self.offset = offset
    }

    public var description: String {
        let what: String
        switch kind {
        case .notAnObject(let kind): return "the event is a JSON \(kind), not an object"
        case .unexpectedEnd: what = "unexpected end of input"
        case .unexpectedCharacter: what = "unexpected character"
        case .expected(let b): what = "expected '\(Character(Unicode.Scalar(b)))'"
        case .expectedKey: what = "expected a quoted object key"
        case .unterminatedString: what = "unterminated string"
        case .controlCharacterInString: what = "unescaped control character in string"
        case .invalidEscape: what = "invalid escape sequence"
        case .unpairedSurrogate: what = "unpaired UTF-16 surrogate escape"
        case .invalidUTF8: what = "invalid UTF-8"
        case .invalidNumber: what = "invalid number"
        case .invalidLiteral: what = "invalid literal"
        case .tooDeep: what = "nesting deeper than \(JSONReader.maxDepth) levels"
        case .trailingCharacters: what = "unexpected characters after the JSON value"
        }
        return "not valid JSON: \(what) at byte \(offset)"
    }
}
