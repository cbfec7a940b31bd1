import ArgumentParser
import PushGateway

#if canImport(Glibc)
import Glibc
#endif

/// `pushworker provider-token`: prints a provider token for the HTTP/2 API, signed with a team's `.p8` key, as the
/// worker makes them (for curl tests against the simulator or Apple, and for checking keys).
struct ProviderTokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "provider-token",
        abstract: "Prints an ES256 provider token (JWT) for the HTTP/2 provider API.",
        discussion: """
            The token's header is {"alg":"ES256","kid":KEY_ID} and its claims {"iss":TEAM_ID,"iat":ISSUED_AT}, \
            each base64url without padding, signed with the PKCS #8 P-256 key of --signing-key. Apple refuses \
            tokens older than an hour. Send it as 'authorization: bearer TOKEN'.
            """
    )

    @Option(help: "The team's token signing key, a .p8 file (PKCS #8 P-256, PEM).") var signingKey: String
    @Option(help: "The team id (iss).") var teamID: String
    @Option(help: "The key id (kid).") var keyID: String
    @Option(help: "The issue time in UNIX seconds (default: the clock).") var issuedAt: Int64?

    func run() async throws {
        let pem = try readTextFile(signingKey, option: "--signing-key")
        let key: ProviderTokenKey
        do {
            key = try ProviderTokenKey(teamID: teamID, keyID: keyID, pem: pem)
        } catch {
            throw CLIError.usage("--signing-key: \(signingKey) is not a PKCS #8 P-256 private key in PEM (\(error))")
        }
        do {
            printLine(try key.sign(issuedAt: issuedAt ?? Int64(time(nil))))
        } catch {
            throw CLIError.failure("cannot sign: \(error)")
        }
    }
}
