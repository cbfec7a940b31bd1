import Crypto
import PushCore

/// Checks provider tokens as Apple does (SPEC section 9): ES256 signature by the team's key, the key id and team
/// id, and an age of at most an hour.
public struct ProviderTokenVerifier: Sendable {
    public let teamID: String
    public let keyID: String
    let publicKey: P256.Signing.PublicKey
    /// Apple refuses tokens older than an hour.
    public static let appleMaximumAge: Int64 = 3600
    /// Tokens older than this (seconds) are refused: Apple's hour, or less to exercise renewals (`--token-lifetime-s`).
    public var maximumAge: Int64 = Self.appleMaximumAge
    /// A token issued this far in the future is refused as invalid (clock skew allowance).
    public static let futureAllowance: Int64 = 300

    /// `pem` is the team's public key, or its private `.p8` key (the public half is taken).
    public init(teamID: String, keyID: String, pem: String) throws(SimulatorInputError) {
        self.teamID = teamID
        self.keyID = keyID
        if let key = try? P256.Signing.PublicKey(pemRepresentation: pem) {
            publicKey = key
        } else if let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) {
            publicKey = key.publicKey
        } else {
            throw SimulatorInputError("--token-key is neither a P-256 public key nor a PKCS #8 P-256 private key in PEM")
        }
    }

    /// nil when the token is good at `now` (UNIX seconds), else Apple's reason.
    public func check(_ token: String, now: Int64) -> APNsReason? {
        if case .failure(let reason) = verify(token, now: now) { return reason }
        return nil
    }

    /// The token's issue time (UNIX seconds) when it is good at `now`, else Apple's reason.
    public func verify(_ token: String, now: Int64) -> Result<Int64, APNsReason> {
        guard let parsed = ProviderTokenFormat.parse(token), parsed.algorithm == "ES256", parsed.keyID == keyID,
            parsed.teamID == teamID, parsed.signature.count == 64,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: parsed.signature),
            publicKey.isValidSignature(signature, for: parsed.signingInput)
        else { return .failure(.invalidProviderToken) }
        if parsed.issuedAt > now + Self.futureAllowance { return .failure(.invalidProviderToken) }
        if now - parsed.issuedAt > maximumAge { return .failure(.expiredProviderToken) }
        return .success(parsed.issuedAt)
    }
}
