import Crypto
import PushCore
import Synchronization

/// A team's token signing key (the `.p8` file: a PKCS #8 P-256 private key in PEM) and its ids.
public struct ProviderTokenKey: Sendable {
    public let teamID: String
    public let keyID: String
    let key: P256.Signing.PrivateKey

    /// Reads the `.p8` text. Throws when it is not a P-256 private key in PEM.
    public init(teamID: String, keyID: String, pem: String) throws {
        self.teamID = teamID
        self.keyID = keyID
        self.key = try P256.Signing.PrivateKey(pemRepresentation: pem)
    }

    /// A new token issued at `issuedAt` (UNIX seconds): ES256 over the header and claims, signature r‖s.
    public func sign(issuedAt: Int64) throws -> String {
        let input = ProviderTokenFormat.signingInput(teamID: teamID, keyID: keyID, issuedAt: issuedAt)
        let signature = try key.signature(for: Array(input.utf8))
        return ProviderTokenFormat.token(signingInput: input, signature: Array(signature.rawRepresentation))
    }
}

/// The provider token of one (team, key), shared by every connection of the process (SPEC section 9): issued on
/// first use, renewed once it is `refreshInterval` seconds old, and at once when Apple answers
/// ExpiredProviderToken (``renew(rejected:now:)``; connections that report the same rejected token cause one
/// renewal).
public final class ProviderTokenCache: Sendable {
    /// What one cache stands for: a team's key, read from one file.
    struct Identity: Hashable {
        var teamID: String
        var keyID: String
        var signingKeyPath: String
    }

    public let key: ProviderTokenKey
    public let refreshInterval: Int64
    private let current = Mutex<(token: String, issuedAt: Int64)?>(nil)
    private let renewals = Atomic<Int>(0)

    public init(key: ProviderTokenKey, refreshInterval: Int64 = 2400) {
        self.key = key
        self.refreshInterval = refreshInterval
    }

    /// The token to send at `now` (UNIX seconds), renewed when due.
    public func token(now: Int64) throws -> String {
        try current.withLock { state in
            if let state, now - state.issuedAt < refreshInterval, now >= state.issuedAt { return state.token }
            return try issue(&state, now: now)
        }
    }

    /// Apple refused `rejected` as expired: issue a new token unless one newer than it was issued already.
    @discardableResult
    public func renew(rejected: String, now: Int64) throws -> String {
        try current.withLock { state in
            if let state, state.token != rejected { return state.token }
            return try issue(&state, now: now)
        }
    }

    /// Signs a new token into `state` (a renewal when there was one).
    private func issue(_ state: inout (token: String, issuedAt: Int64)?, now: Int64) throws -> String {
        let token = try key.sign(issuedAt: now)
        if state != nil { renewals.add(1, ordering: .relaxed) }
        state = (token, now)
        return token
    }

    /// Seconds since the current token was issued (nil before the first).
    public func age(now: Int64) -> Int64? { current.withLock { $0.map { now - $0.issuedAt } } }

    /// How many times the token was replaced.
    public var renewalCount: Int { renewals.load(ordering: .relaxed) }
}
