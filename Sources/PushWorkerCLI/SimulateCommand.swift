import ArgumentParser
import Logging
import PushCore
import PushSimulator
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#endif

/// `pushworker simulate`: the gateway simulator as a standalone server.
struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Runs a strict simulator of Apple's binary gateway, feedback service and HTTP/2 provider API, over TLS.",
        discussion: """
            Both services require a client certificate that chains to --ca; the app is the UID of its subject, as \
            in the certificates Apple issues. Once listening, prints one JSON line:
              {"gateway": "127.0.0.1:A", "feedback": "127.0.0.1:B"}
            and on SIGTERM or SIGINT a summary line {"summary": {...}}; it exits 1 if lines of the --record file
            could not be written (the summary's record_lines_lost).

            Faults count per connection. Malformed input gets the error response the seeds describe (status 2, 4, \
            5, 7 or 8, or 128 for a protocol error: an unknown command or item, a payload that is not a JSON object \
            holding an 'aps' object, or priority 10 with content-available only), then the connection is closed \
            and whatever followed the bad notification is discarded.

            The feedback file holds lines 'HEXTOKEN UNIXTIME [APP]'; a line without an app is in every app's list. \
            Each app's list is sent once and then cleared; tokens that got status 8 join their app's list once \
            --unregistered-after-s has passed.

            With --api-port the HTTP/2 provider API is served too (ALPN h2), and the ready line adds             "api": "127.0.0.1:C". Without --token-key an API connection needs a client certificate (its UID is the             app); with --token-key, --team-id and --key-id a connection without one authenticates each request with             a provider token (ES256; older than an hour: 403 ExpiredProviderToken; a new token within 20 minutes on             one connection: 429 TooManyProviderTokenUpdates; one stream until the first 200). Every header and the             body are checked with Apple's statuses and reasons. --invalid-tokens answers 400 BadDeviceToken,             --unregistered (lines 'HEXTOKEN UNIXTIME_MS') 410 Unregistered. --shutdown-every N: the Nth request of             a connection gets 503 Shutdown, then GOAWAY and close; --close-every N: the Nth request is not answered             and the connection is cut.
            """
    )

    @Option(help: "PEM file with the server's certificate (chain).") var cert: String
    @Option(help: "PEM file with the server's private key.") var key: String
    @Option(help: "PEM file with the CA that client certificates must chain to.") var ca: String
    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Gateway port (0 picks a free one).") var gatewayPort = 2195
    @Option(help: "Feedback port (0 picks a free one).") var feedbackPort = 2196
    @Option(help: "Record every accepted notification to FILE, one JSON line each.") var record: String?
    @Option(help: "Feedback tuples to serve: lines 'HEXTOKEN UNIXTIME [APP]'.") var feedback: String?
    @Option(help: "Answer status 10 after every N accepted notifications on a connection, then close.") var shutdownEvery: Int?
    @Option(help: "Close a connection abruptly after every N accepted notifications on it.") var closeEvery: Int?
    @Option(help: "Answer status 8 for the hex tokens listed in FILE (one per line).") var invalidTokens: String?
    @Option(help: "Answer status 1 for this share of notifications (0...1).") var processingErrorRate = 0.0
    @Option(help: "Seed of the processing-error draw.") var seed: UInt64 = 1
    @Option(name: .customLong("read-delay-ms"), help: "Pause N ms before each read of 4 KiB (a slow reader).") var readDelayMs = 0
    @Option(name: .customLong("error-delay-ms"), help: "Send each error response N ms late (later than the client's acceptance window).") var errorDelayMs = 0
    @Option(help: "Refuse the first N gateway connection attempts.") var refuseConnections = 0
    @Option(help: "Feedback connections send N tuples, then stall without closing (a connection cut off mid-stream).") var feedbackStallAfter: Int?
    @Option(name: .customLong("unregistered-after-s"), help: "Seconds before a token that got status 8 is in the feedback list.") var unregisteredAfterS = 0
    @Option(help: "Serve the HTTP/2 provider API on this port (0 picks a free one).") var apiPort: Int?
    @Option(help: "API provider-token authentication: the team's public key, or its .p8 private key (PEM).") var tokenKey: String?
    @Option(help: "The team id provider tokens must name (iss).") var teamID: String?
    @Option(help: "The key id provider tokens must name (kid).") var keyID: String?
    @Option(help: "API: answer 410 Unregistered for the tokens listed in FILE (lines 'HEXTOKEN UNIXTIME_MS').") var unregistered: String?
    @Option(help: "API: after every N answered requests on a connection, send GOAWAY naming the last and close.") var goawayEvery: Int?
    @Flag(help: "API: answer as Apple's sandbox does, with an apns-unique-id on every response.") var sandbox = false
    @Option(name: .customLong("rate-429"), help: "API: answer this share of requests 429 TooManyRequests (0...1).") var rate429 = 0.0
    @Option(name: .customLong("token-rate"), help: "API: accept at most N requests per second to one device token; answer the others 429 TooManyRequests.") var tokenRate: Int?
    @Option(name: .customLong("rate-503"), help: "API: answer this share of requests 503 ServiceUnavailable (0...1).") var rate503 = 0.0
    @Option(name: .customLong("response-delay-ms"), help: "API: answer N ms late (the answers to one read of requests leave together).") var responseDelayMs = 0
    @Option(
        name: .customLong("token-lifetime-s"),
        help: "API: refuse provider tokens older than N seconds (403 ExpiredProviderToken) and a connection's new token within N/3 (429 TooManyProviderTokenUpdates); Apple's 3600 by default, less to exercise renewals.")
    var tokenLifetimeS: Int64 = 3600
    @Option(
        name: .customLong("token-renewal-s"),
        help: "API: a connection's token may be replaced only after N seconds (429 TooManyProviderTokenUpdates before); a third of --token-lifetime-s by default. Longer than the lifetime, no connection may switch tokens.")
    var tokenRenewalS: Int64?
    @Option(help: "API: the SETTINGS_MAX_CONCURRENT_STREAMS of a connection.") var maxConcurrentStreams = 1000
    @Option(help: "Log level: trace, debug, info, notice, warning, error.") var logLevel = "notice"

    /// The longest delay an option takes: an hour.
    static let maxDelayMs = 3_600_000
    /// The longest time in seconds an option takes: a year.
    static let maxSeconds = 31_536_000

    func validate() throws {
        for (name, value) in [("--shutdown-every", shutdownEvery), ("--close-every", closeEvery), ("--goaway-every", goawayEvery)] {
            if let value, value < 1 { throw ValidationError("\(name) must be at least 1") }
        }
        guard (0...1).contains(processingErrorRate) else { throw ValidationError("--processing-error-rate must be between 0 and 1") }
        guard (0...1).contains(rate429) else { throw ValidationError("--rate-429 must be between 0 and 1") }
        if let tokenRate, tokenRate < 1 { throw ValidationError("--token-rate must be at least 1") }
        guard (0...1).contains(rate503) else { throw ValidationError("--rate-503 must be between 0 and 1") }
        // Upper bounds keep every delay inside what the event loops' timers can count (nanoseconds in 64 bits).
        guard (0...Self.maxDelayMs).contains(responseDelayMs) else { throw ValidationError("--response-delay-ms must be 0 to \(Self.maxDelayMs)") }
        guard (3...Int64(Self.maxSeconds)).contains(tokenLifetimeS) else { throw ValidationError("--token-lifetime-s must be 3 to \(Self.maxSeconds)") }
        if let tokenRenewalS, !(0...Int64(Self.maxSeconds)).contains(tokenRenewalS) { throw ValidationError("--token-renewal-s must be 0 to \(Self.maxSeconds)") }
        guard (1...Int(Int32.max)).contains(maxConcurrentStreams) else { throw ValidationError("--max-concurrent-streams must be at least 1") }
        if let apiPort, !(0...65535).contains(apiPort) { throw ValidationError("ports are 0...65535") }
        if tokenKey != nil, teamID == nil || keyID == nil { throw ValidationError("--token-key needs --team-id and --key-id") }
        if apiPort == nil, tokenKey != nil || unregistered != nil { throw ValidationError("--token-key and --unregistered need --api-port") }
        guard (0...Self.maxDelayMs).contains(readDelayMs) else { throw ValidationError("--read-delay-ms must be 0 to \(Self.maxDelayMs)") }
        guard (0...Self.maxDelayMs).contains(errorDelayMs) else { throw ValidationError("--error-delay-ms must be 0 to \(Self.maxDelayMs)") }
        guard refuseConnections >= 0 else { throw ValidationError("--refuse-connections must not be negative") }
        if let feedbackStallAfter, feedbackStallAfter < 0 { throw ValidationError("--feedback-stall-after must not be negative") }
        guard (0...Self.maxSeconds).contains(unregisteredAfterS) else { throw ValidationError("--unregistered-after-s must be 0 to \(Self.maxSeconds)") }
        guard (0...65535).contains(gatewayPort), (0...65535).contains(feedbackPort) else { throw ValidationError("ports are 0...65535") }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical") }
    }

    func simulatorConfiguration() throws(CLIError) -> SimulatorConfiguration {
        var c = SimulatorConfiguration(certificatePath: cert, privateKeyPath: key, caPath: ca)
        c.host = host
        c.gatewayPort = gatewayPort
        c.feedbackPort = feedbackPort
        c.recordPath = record
        c.shutdownEvery = shutdownEvery
        c.closeEvery = closeEvery
        c.processingErrorRate = processingErrorRate
        c.seed = seed
        c.readDelayMilliseconds = readDelayMs
        c.errorResponseDelayMilliseconds = errorDelayMs
        c.refuseConnections = refuseConnections
        c.unregisteredAfterSeconds = unregisteredAfterS
        c.feedbackStallAfter = feedbackStallAfter
        c.apiPort = apiPort
        c.tokenKeyPath = tokenKey
        c.teamID = teamID
        c.keyID = keyID
        c.goawayEvery = goawayEvery
        c.sandbox = sandbox
        c.rate429 = rate429
        c.tokenRate = tokenRate
        c.rate503 = rate503
        c.responseDelayMilliseconds = responseDelayMs
        c.tokenLifetimeSeconds = tokenLifetimeS
        c.tokenRenewalIntervalSeconds = tokenRenewalS
        c.maxConcurrentStreams = maxConcurrentStreams
        do {
            if let unregistered { c.unregistered = try parseUnregisteredList(try readTextFile(unregistered, option: "--unregistered")) }
            if let feedback { c.feedback = try FeedbackEntry.parseFile(try readTextFile(feedback, option: "--feedback")) }
            if let invalidTokens { c.invalidTokens = try parseTokenList(try readTextFile(invalidTokens, option: "--invalid-tokens")) }
        } catch let error as CLIError {
            throw error
        } catch {
            throw CLIError.usage("\(error)")
        }
        return c
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel)!
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "pushworker.simulate")
        let simulator: GatewaySimulator
        do {
            simulator = try GatewaySimulator(configuration: try simulatorConfiguration(), logger: logger) { addresses in
                printLine(addresses.json)
            }
        } catch let error as CLIError {
            throw error
        } catch {
            throw CLIError.usage("\(error)")
        }
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: simulator, successTerminationBehavior: .gracefullyShutdownGroup)],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            throw CLIError.failure("simulator stopped: \(error)")
        }
        let summary = simulator.summary
        printLine("{\"summary\": \(summary.json)}")
        if summary.recordLinesLost > 0 {
            throw CLIError.failure("the record file misses \(summary.recordLinesLost) lines that could not be written")
        }
    }
}

/// Prints a line to standard output at once (scripts wait for it).
func printLine(_ line: String) {
    print(line)
    fflush(nil)
}

/// Reads a text file named by a command-line option; a missing or unreadable file is a usage error naming it.
func readTextFile(_ path: String, option: String) throws(CLIError) -> String {
    var reader: LineReader
    do {
        reader = try LineReader(path: path)
    } catch {
        throw CLIError.usage("\(option): \(error)")
    }
    defer { reader.close() }
    var lines: [String] = []
    while let line = try reader.next() { lines.append(String(decoding: line, as: UTF8.self)) }
    return lines.joined(separator: "\n")
}
