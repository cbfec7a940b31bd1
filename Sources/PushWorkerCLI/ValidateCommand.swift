import ArgumentParser
import PushCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `pushworker validate [FILE]`: checks events offline, one JSON line of verdict per input line.
struct ValidateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Validates notification events (JSON lines) offline.",
        discussion: """
            Reads one event per line from FILE, or standard input when FILE is absent or '-', and prints one JSON
            line per event:
              {"line": N, "id": ..., "valid": true}
              {"line": N, "id": ..., "valid": false, "reason": "...", "detail": "..."}
            "id" is null when none could be read. Blank lines are skipped but counted. Exits 1 if any event is
            invalid. The payload limit is that of --format (frame: 2048 bytes, enhanced and simple: 256; http2:
            4096, 5120 for push type voip, and priority 1 is allowed). An event whose expiration is before --now is
            "expired", as the worker would report it. Output that cannot be written exits 1.
            """
    )

    @Argument(help: "A file of JSON lines; standard input when absent or '-'.")
    var file: String?

    @Option(help: "The notification format whose rules apply: frame, enhanced, simple or http2.")
    var format: NotificationFormatArgument = .frame

    @Option(help: "The current time in UNIX seconds, against which expirations are judged (default: the clock).")
    var now: Int64?

    func run() async throws {
        var reader = try LineReader(path: file)
        defer { reader.close() }
        var output = OutputWriter()
        let decoder = format.decoder
        let now = self.now ?? Int64(time(nil))
        var lineNumber = 0
        var anyInvalid = false
        while let line = try reader.next() {
            lineNumber += 1
            if isBlank(line) { continue }
            let verdict = ValidateCommand.verdict(line: lineNumber, event: line, decoder: decoder, now: now)
            anyInvalid = anyInvalid || !verdict.valid
            try output.write(bytes: verdict.json)
            try output.write("\n")
        }
        try output.flush()
        if anyInvalid { throw ExitCode.failure }
    }

    /// The output line for one event.
    static func verdict(line: Int, event: ArraySlice<UInt8>, decoder: EventDecoder, now: Int64) -> (valid: Bool, json: [UInt8]) {
        var out: [UInt8] = []
        out.append(contentsOf: "{\"line\": \(line), \"id\": ".utf8)
        let id: String?
        var problem: (reason: DeliveryErrorReason, detail: String)?
        switch event.withUnsafeBytes({ decoder.decode($0) }) {
        case .success(let valid):
            id = valid.id
            if case .at(let expiration) = valid.expiration, Expiration.hasPassed(expiration, now: now) {
                problem = (.expired, "expiration \(RFC3339.format(unixSeconds: Int64(expiration))) is before now (\(RFC3339.format(unixSeconds: now)))")
            }
        case .failure(let rejection):
            id = rejection.eventID
            problem = (rejection.reason, rejection.detail)
        }
        if let id { JSONWriter.appendQuoted(id, to: &out) } else { out.append(contentsOf: "null".utf8) }
        guard let problem else {
            out.append(contentsOf: ", \"valid\": true}".utf8)
            return (true, out)
        }
        out.append(contentsOf: ", \"valid\": false, \"reason\": \"\(problem.reason.rawValue)\", \"detail\": ".utf8)
        JSONWriter.appendQuoted(problem.detail, to: &out)
        out.append(UInt8(ascii: "}"))
        return (false, out)
    }
}

/// `--format` values.
enum NotificationFormatArgument: String, ExpressibleByArgument, CaseIterable {
    case frame, enhanced, simple, http2

    /// The binary format (nil for http2).
    var format: NotificationFormat? {
        switch self {
        case .frame: .frame
        case .enhanced: .enhanced
        case .simple: .simple
        case .http2: nil
        }
    }

    var decoder: EventDecoder { format.map { EventDecoder(format: $0) } ?? .http2 }
}
