/// The text of a provider token (SPEC section 9): a JWT `header.claims.signature`, each part base64url without
/// padding, header `{"alg":"ES256","kid":KEY_ID}`, claims `{"iss":TEAM_ID,"iat":UNIX_SECONDS}`. Pure: signing and
/// verifying (ES256, P-256 with SHA-256, signature as r‖s) are the callers', with swift-crypto.
public enum ProviderTokenFormat {
    /// The bytes the signature covers: `base64url(header).base64url(claims)`.
    public static func signingInput(teamID: String, keyID: String, issuedAt: Int64) -> String {
        var header = JSONWriter(capacity: 48)
        header.beginObject()
        header.field("alg", "ES256")
        header.field("kid", keyID)
        header.endObject()
        var claims = JSONWriter(capacity: 48)
        claims.beginObject()
        claims.field("iss", teamID)
        claims.field("iat", issuedAt)
        claims.endObject()
        return Base64URL.encode(header.bytes) + "." + Base64URL.encode(claims.bytes)
    }

    /// The token: the signing input, a dot, and the 64-byte r‖s signature in base64url.
    public static func token(signingInput: String, signature: [UInt8]) -> String {
        signingInput + "." + Base64URL.encode(signature)
    }

    /// A token taken apart, before its signature is checked.
    public struct Parsed: Hashable, Sendable {
        public var algorithm: String
        public var keyID: String
        public var teamID: String
        public var issuedAt: Int64
        /// What the signature covers.
        public var signingInput: [UInt8]
        public var signature: [UInt8]
    }

    /// Parses `header.claims.signature`; nil when any part is not what a provider token holds.
    public static func parse(_ token: some StringProtocol) -> Parsed? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ !$0.isEmpty }), let header = Base64URL.decode(parts[0]), let claims = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2])
        else { return nil }
        guard let h = try? JSONValue(parsing: header), let c = try? JSONValue(parsing: claims),
            let alg = h["alg"]?.stringValue, let kid = h["kid"]?.stringValue, let iss = c["iss"]?.stringValue,
            let iat = c["iat"]?.integerValue
        else { return nil }
        return Parsed(
            algorithm: alg, keyID: kid, teamID: iss, issuedAt: iat,
            signingInput: Array(parts[0].utf8) + [UInt8(ascii: ".")] + Array(parts[1].utf8), signature: signature)
    }
}

/// Base64 with the URL alphabet (`-`, `_`) and no padding (RFC 7515's base64url).
public enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            out.append(alphabet[Int(n >> 18 & 63)]); out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)]); out.append(alphabet[Int(n & 63)])
            i += 3
        }
        let rest = bytes.count - i
        if rest > 0 {
            let n = UInt32(bytes[i]) << 16 | (rest == 2 ? UInt32(bytes[i + 1]) << 8 : 0)
            out.append(alphabet[Int(n >> 18 & 63)]); out.append(alphabet[Int(n >> 12 & 63)])
            if rest == 2 { out.append(alphabet[Int(n >> 6 & 63)]) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes unpadded base64url; nil on any other character, on padding, or on a length no encoding gives.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var out: [UInt8] = []
        var accumulator: UInt32 = 0
        var bits = 0
        var count = 0
        for c in text.utf8 {
            let v: UInt8
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): v = c - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): v = c - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0") + 52
            case UInt8(ascii: "-"): v = 62
            case UInt8(ascii: "_"): v = 63
            default: return nil
            }
            accumulator = accumulator << 6 | UInt32(v)
            bits += 6
            count += 1
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        guard count % 4 != 1 else { return nil }
        return out
    }
}
