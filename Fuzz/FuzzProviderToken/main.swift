// libFuzzer target: the provider-token parser (what the simulator reads from a request's `authorization`) and
// base64url, on arbitrary bytes.
//
// It must not trap; base64url gives back what it encoded; a token it parses covers with its signing input exactly
// the text before the second dot, and one that names ES256, made again from its fields, parses as the same.
import FuzzSupport
import PushCore

runFuzzer { bytes in
    precondition(Base64URL.decode(Base64URL.encode(bytes)) == bytes, "base64url did not give back what it encoded")
    let text = String(decoding: bytes, as: UTF8.self)
    guard let parsed = ProviderTokenFormat.parse(text) else { return }
    let parts = text.split(separator: ".", omittingEmptySubsequences: false)
    precondition(parts.count == 3, "parsed a token without three parts")
    precondition(parsed.signingInput == Array(parts[0].utf8) + [UInt8(ascii: ".")] + Array(parts[1].utf8), "wrong signing input")
    guard parsed.algorithm == "ES256" else { return }
    let input = ProviderTokenFormat.signingInput(teamID: parsed.teamID, keyID: parsed.keyID, issuedAt: parsed.issuedAt)
    guard let again = ProviderTokenFormat.parse(ProviderTokenFormat.token(signingInput: input, signature: parsed.signature)) else {
        preconditionFailure("a token made from parsed fields does not parse")
    }
    precondition(again.algorithm == "ES256" && again.keyID == parsed.keyID && again.teamID == parsed.teamID
        && again.issuedAt == parsed.issuedAt && again.signature == parsed.signature, "fields changed when made again")
    precondition(again.signingInput == Array(input.utf8), "wrong signing input for a token made here")
}
