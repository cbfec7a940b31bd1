import ArgumentParser
import PushCore

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
            invalid. The payload limit is that of --format (frame: 2048 bytes, enhanced and simple: 256).
            """
    )

    @Argument(help: "A file of JSON lines; standard input when absent or '-'.")
    var file: String?

    @Option(help: "The notification format whose payload limit applies: frame, enhanced or simple.")
    var format: NotificationFormatArgument = .frame

    func run() async throws {
        var reader = try LineReader(path: file)
        defer { reader.close() }
        var output = OutputWriter()
        let decoder = EventDecoder(format: format.format)
        var lineNumber = 0
        var anyInvalid = false
        while let line = try reader.next() {
            lineNumber += 1
            if isBlank(line) { continue }
            let verdict = ValidateCommand.verdict(line: lineNumber, event: line, decoder: decoder)
            anyInvalid = anyInvalid || !verdict.valid
            output.write(bytes: verdict.json)
            output.write("\n")
        }
        output.flush()
        if anyInvalid { throw ExitCode.failure }
    }

    /// The output line for one event.
    static func verdict(line: Int, event: ArraySlice<UInt8>, decoder: EventDecoder) -> (valid: Bool, json: [UInt8]) {
        let result = event.withUnsafeBytes { decoder.decode($0) }
        var out: [UInt8] = []
        out.append(contentsOf: "{\"line\": \(line), \"id\": ".utf8)
        switch result {
        case .success(let event):
            JSONWriter.appendQuoted(event.id, to: &out)
            out.append(contentsOf: ", \"valid\": true}".utf8)
            return (true, out)
        case .failure(let rejection):
            if let id = rejection.eventID { JSONWriter.appendQuoted(id, to: &out) } else { out.append(contentsOf: "null".utf8) }
            out.append(contentsOf: ", \"valid\": false, \"reason\": \"\(rejection.reason.rawValue)\", \"detail\": ".utf8)
            JSONWriter.appendQuoted(rejection.detail, to: &out)
            out.append(UInt8(ascii: "}"))
            return (false, out)
        }
    }
}

/// `--format` values.
enum NotificationFormatArgument: String, ExpressibleByArgument, CaseIterable {
    case frame, enhanced, simple

    var format: NotificationFormat {
        switch self {
        case .frame: .frame
        case .enhanced: .enhanced
        case .simple: .simple
        }
    }
}
