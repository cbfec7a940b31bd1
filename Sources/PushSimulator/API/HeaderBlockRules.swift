
/// RFC 9113's rules for the header block of a request and of its trailers (section 8.2: field names, connection-
/// specific fields, field values; section 8.3: request pseudo-header fields), checked by the simulator itself on the
/// bytes of each field: the same rules swift-nio-http2's header validation applies, which the API's connections turn
/// off because it cost a sixth of the simulator's time per request. A block that breaks one is malformed: its stream
/// is reset with PROTOCOL_ERROR (section 8.1.1). Pure: no I/O.
enum HeaderBlockRules {
    /// What makes a block malformed (for the log).
    enum Problem: Hashable, Sendable, CustomStringConvertible {
        /// Empty, an uppercase letter, or a character outside RFC 9110's `tchar`.
        case invalidName
        /// `connection`, `keep-alive`, `proxy-connection`, `transfer-encoding` or `upgrade`; `te` other than
        /// `trailers`.
        case connectionSpecific
        /// NUL, CR or LF in a value; in a pseudo-header's value, any control character, space or DEL.
        case invalidValue
        case pseudoHeaderAfterRegular
        /// Not one of a request's (`:method`, `:scheme`, `:path`, `:authority`), or in trailers.
        case unexpectedPseudoHeader
        case repeatedPseudoHeader
        /// `:method`, `:scheme` or `:path` missing (`:method` or `:authority` for CONNECT).
        case missingPseudoHeader
        case emptyPath
        /// A second header block (trailers) without END_STREAM (RFC 9113 section 8.1).
        case trailersWithoutEndStream

        var description: String {
            switch self {
            case .invalidName: "invalid field name"
            case .connectionSpecific: "connection-specific field"
            case .invalidValue: "invalid field value"
            case .pseudoHeaderAfterRegular: "pseudo-header field after a regular field"
            case .unexpectedPseudoHeader: "pseudo-header field not allowed here"
            case .repeatedPseudoHeader: "pseudo-header field repeated"
            case .missingPseudoHeader: "mandatory pseudo-header field missing"
            case .emptyPath: "empty :path"
            case .trailersWithoutEndStream: "trailers without END_STREAM"
            }
        }
    }

    /// The problem with a request's first header block, nil when it is well formed.
    static func problem(inRequest headers: HeaderList) -> Problem? {
        var block = RequestBlock()
        for (name, value, _) in headers {
            let found = withBytes(name) { n in withBytes(value) { v in block.problem(name: n, value: v) } }
            if let found { return found }
        }
        return block.problemAtEnd
    }

    /// `text`'s UTF-8 bytes where they are (a decoded field's strings are native, so always), else in a copy.
    private static func withBytes<R>(_ text: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = text.utf8.withContiguousStorageIfAvailable(body) { return result }
        var copy = text
        return copy.withUTF8(body)
    }

    /// The problem with a request's trailers (a header block after the first), nil when they are well formed.
    static func problem(inTrailers headers: HeaderList) -> Problem? {
        for (name, value, _) in headers {
            let found = withBytes(name) { n in
                withBytes(value) { v -> Problem? in
                    if n.first == UInt8(ascii: ":") { return isValidName(n, from: 1) ? .unexpectedPseudoHeader : .invalidName }
                    return regularFieldProblem(name: n, value: v, inTrailers: true)
                }
            }
            if let found { return found }
        }
        return nil
    }

    /// A request block read field by field.
    private struct RequestBlock {
        var seen: PseudoHeaders = []
        var isConnect = false
        var regular = false

        mutating func problem(name n: UnsafeBufferPointer<UInt8>, value v: UnsafeBufferPointer<UInt8>) -> Problem? {
            guard n.first == UInt8(ascii: ":") else {
                regular = true
                return regularFieldProblem(name: n, value: v, inTrailers: false)
            }
            if regular { return .pseudoHeaderAfterRegular }
            guard let pseudo = PseudoHeaders(requestName: n) else {
                return isValidName(n, from: 1) ? .unexpectedPseudoHeader : .invalidName
            }
            if seen.contains(pseudo) { return .repeatedPseudoHeader }
            seen.insert(pseudo)
            if !isValidPseudoHeaderValue(v) { return .invalidValue }
            if pseudo == .method { isConnect = equals(v, "CONNECT") }
            if pseudo == .path && v.isEmpty { return .emptyPath }
            return nil
        }

        /// The pseudo-header fields a request must have and may have: CONNECT (RFC 9113 section 8.5) has only
        /// `:method` and `:authority`.
        var problemAtEnd: Problem? {
            let mandatory: PseudoHeaders = isConnect ? [.method, .authority] : [.method, .scheme, .path]
            let allowed: PseudoHeaders = isConnect ? [.method, .authority] : [.method, .scheme, .path, .authority]
            if !seen.isSuperset(of: mandatory) { return .missingPseudoHeader }
            if !allowed.isSuperset(of: seen) { return .unexpectedPseudoHeader }
            return nil
        }
    }

    private static func regularFieldProblem(
        name n: UnsafeBufferPointer<UInt8>, value v: UnsafeBufferPointer<UInt8>, inTrailers: Bool
    ) -> Problem? {
        guard isValidName(n, from: 0) else { return .invalidName }
        switch n.count {
        case 2 where !inTrailers && equals(n, "te"):
            if !equals(v, "trailers") { return .connectionSpecific }
        case 7 where equals(n, "upgrade"), 10 where equals(n, "connection") || equals(n, "keep-alive"),
             16 where equals(n, "proxy-connection"), 17 where equals(n, "transfer-encoding"):
            return .connectionSpecific
        default:
            break
        }
        for byte in v where byte == 0x00 || byte == 0x0A || byte == 0x0D { return .invalidValue }
        return nil
    }

    /// RFC 9110's `tchar` without uppercase letters (RFC 9113 section 8.2.1), as a bit per character below 128.
    private static let nameCharactersBelow64: UInt64 = 0x03FF_6CFA_0000_0000
    private static let nameCharactersFrom64: UInt64 = 0x57FF_FFFF_C000_0000

    /// Whether the bytes from `start` on are a field name: at least one, each a lowercase `tchar`.
    static func isValidName(_ name: UnsafeBufferPointer<UInt8>, from start: Int) -> Bool {
        guard name.count > start else { return false }
        for i in start..<name.count {
            let byte = name[i]
            let allowed = byte < 64
                ? nameCharactersBelow64 >> byte & 1
                : byte < 128 ? nameCharactersFrom64 >> (byte &- 64) & 1 : 0
            if allowed == 0 { return false }
        }
        return true
    }

    /// A pseudo-header's value has no control character, space or DEL (bytes above 127 pass, as in swift-nio-http2).
    private static func isValidPseudoHeaderValue(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
        for byte in value where byte <= 0x20 || byte == 0x7F { return false }
        return true
    }

    /// Whether `bytes` are exactly `text`.
    static func equals(_ bytes: UnsafeBufferPointer<UInt8>, _ text: StaticString) -> Bool {
        guard bytes.count == text.utf8CodeUnitCount else { return false }
        let expected = text.utf8Start
        for i in 0..<bytes.count where bytes[i] != expected[i] { return false }
        return true
    }

    /// The request pseudo-header fields.
    private struct PseudoHeaders: OptionSet {
        var rawValue: UInt8
        static let method = PseudoHeaders(rawValue: 1)
        static let scheme = PseudoHeaders(rawValue: 2)
        static let path = PseudoHeaders(rawValue: 4)
        static let authority = PseudoHeaders(rawValue: 8)

        init(rawValue: UInt8) { self.rawValue = rawValue }

        /// The pseudo-header `name` (with its colon) names, nil for any other.
        init?(requestName name: UnsafeBufferPointer<UInt8>) {
            switch name.count {
            case 5 where HeaderBlockRules.equals(name, ":path"): self = .path
            case 7 where HeaderBlockRules.equals(name, ":method"): self = .method
            case 7 where HeaderBlockRules.equals(name, ":scheme"): self = .scheme
            case 10 where HeaderBlockRules.equals(name, ":authority"): self = .authority
            default: return nil
            }
        }
    }
}
