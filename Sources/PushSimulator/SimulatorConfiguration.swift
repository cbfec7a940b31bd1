import PushCore

/// Everything `pushworker simulate` can be told. Faults count per connection.
public struct SimulatorConfiguration: Sendable {
    /// PEM files: the server's certificate chain and key, and the CA that client certificates must chain to.
    public var certificatePath: String
    public var privateKeyPath: String
    public var caPath: String
    public var host = "127.0.0.1"
    /// 0 picks a free port.
    public var gatewayPort = 0
    public var feedbackPort = 0
    /// Where accepted notifications are recorded, one JSON line each.
    public var recordPath: String?
    /// Keep accepted notifications in memory too (tests, the demo).
    public var recordInMemory = false

    /// After a connection has accepted this many notifications, answer status 10 naming the last, then close.
    /// On the API: the Nth request of a connection gets 503 Shutdown, then GOAWAY and close.
    public var shutdownEvery: Int?
    /// After a connection has accepted this many notifications, close it without an error response. On the API:
    /// the Nth request of a connection gets no answer and the connection is cut.
    public var closeEvery: Int?
    /// Tokens answered with status 8 (invalid token); on the API, 400 BadDeviceToken.
    public var invalidTokens: Set<[UInt8]> = []
    /// The share of notifications answered with status 1 (processing error), from a generator seeded with `seed`.
    public var processingErrorRate = 0.0
    public var seed: UInt64 = 1
    /// Pause this long before each read, so that a fast client meets backpressure.
    public var readDelayMilliseconds = 0
    /// Send each error response this long after the notification it names (what follows is still discarded): a
    /// gateway that answers later than the client's acceptance window.
    public var errorResponseDelayMilliseconds = 0
    /// The first N connection attempts (to the gateway port) are closed at once.
    public var refuseConnections = 0

    // MARK: The HTTP/2 provider API (SPEC section 9)

    /// Serve the API on this port (0 picks a free one); nil: not at all.
    public var apiPort: Int?
    /// Provider-token authentication: the team's key (public, or the `.p8` private key) and its ids. Without it,
    /// API connections need a client certificate.
    public var tokenKeyPath: String?
    public var teamID: String?
    public var keyID: String?
    /// Provider tokens older than this are refused (403 ExpiredProviderToken), and a connection's token may be
    /// replaced only after a third of it (429 TooManyProviderTokenUpdates): Apple's hour and 20 minutes by default,
    /// seconds to exercise a worker's renewals.
    public var tokenLifetimeSeconds: Int64 = 3600
    /// Seconds a connection's token must be in use before another may replace it (429 TooManyProviderTokenUpdates
    /// before); nil for a third of ``tokenLifetimeSeconds``. Longer than the lifetime, no connection can switch
    /// tokens at all: a provider must open new connections to renew.
    public var tokenRenewalIntervalSeconds: Int64?
    /// Tokens answered 410 Unregistered, with the timestamp (milliseconds) the answer carries.
    public var unregistered: [[UInt8]: Int64] = [:]
    /// After this many answered requests, a connection sends GOAWAY naming the last and closes.
    public var goawayEvery: Int?
    /// Answer as Apple's sandbox: every API response carries an `apns-unique-id` (a new UUID).
    public var sandbox = false
    /// The share of otherwise accepted requests answered 429 TooManyRequests, and 503 ServiceUnavailable.
    public var rate429 = 0.0
    /// At most this many requests to one device token are accepted per second (across connections); more are
    /// answered 429 TooManyRequests, as Apple answers too many requests to one device in a short time.
    public var tokenRate: Int?
    public var rate503 = 0.0
    /// Every API answer waits this long.
    public var responseDelayMilliseconds = 0
    /// The SETTINGS_MAX_CONCURRENT_STREAMS of API connections (a token connection starts at 1 until a success).
    public var maxConcurrentStreams = 1000

    /// Tuples every app's feedback list starts with.
    public var feedback: [FeedbackEntry] = []
    /// The feedback service writes this many tuples of a connection's list, then stalls (sends nothing more and
    /// never closes): a connection cut off mid-stream. The rest of the list counts as sent.
    public var feedbackStallAfter: Int?
    /// A token that got status 8 joins its app's feedback list once this many seconds have passed.
    public var unregisteredAfterSeconds = 0

    public init(certificatePath: String, privateKeyPath: String, caPath: String) {
        self.certificatePath = certificatePath
        self.privateKeyPath = privateKeyPath
        self.caPath = caPath
    }
}

/// A line of the `--feedback` file: `HEXTOKEN UNIXTIME [APP]`. Without an app it is in every app's list.
public struct FeedbackEntry: Hashable, Sendable {
    public var tuple: FeedbackTuple
    public var app: String?

    public init(tuple: FeedbackTuple, app: String?) {
        self.tuple = tuple
        self.app = app
    }

    /// Parses the feedback file's text. Blank lines and lines starting with `#` are skipped.
    public static func parseFile(_ text: String) throws(SimulatorInputError) -> [FeedbackEntry] {
        var entries: [FeedbackEntry] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            if fields.isEmpty || fields[0].hasPrefix("#") { continue }
            guard fields.count == 2 || fields.count == 3, let token = try? DeviceToken(hex: fields[0]),
                let time = UInt32(fields[1])
            else {
                throw SimulatorInputError("feedback line \(index + 1): expected 'HEXTOKEN UNIXTIME [APP]', got '\(line.prefix(80))'")
            }
            entries.append(FeedbackEntry(tuple: FeedbackTuple(timestamp: time, token: token), app: fields.count == 3 ? String(fields[2]) : nil))
        }
        return entries
    }
}

/// Parses the `--unregistered` file: lines `HEXTOKEN UNIXTIME_MS`; blank lines and `#` comments are skipped.
public func parseUnregisteredList(_ text: String) throws(SimulatorInputError) -> [[UInt8]: Int64] {
    var tokens: [[UInt8]: Int64] = [:]
    for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
        if fields.isEmpty || fields[0].hasPrefix("#") { continue }
        guard fields.count == 2, let token = try? DeviceToken(hex: fields[0]), let time = Int64(fields[1]), time >= 0 else {
            throw SimulatorInputError("unregistered line \(index + 1): expected 'HEXTOKEN UNIXTIME_MS', got '\(line.prefix(80))'")
        }
        tokens[token.bytes] = time
    }
    return tokens
}

/// Parses the `--invalid-tokens` file: one hex token per line; blank lines and `#` comments are skipped.
public func parseTokenList(_ text: String) throws(SimulatorInputError) -> Set<[UInt8]> {
    var tokens: Set<[UInt8]> = []
    for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
        let trimmed = line.trimming([" ", "\t", "\r"])
        if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
        guard let token = try? DeviceToken(hex: trimmed) else {
            throw SimulatorInputError("invalid-tokens line \(index + 1): not a hex token: '\(trimmed.prefix(80))'")
        }
        tokens.insert(token.bytes)
    }
    return tokens
}

/// A simulator input file that cannot be read as documented.
public struct SimulatorInputError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
