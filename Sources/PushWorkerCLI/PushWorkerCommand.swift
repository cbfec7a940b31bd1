import ArgumentParser

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `pushworker` command and its subcommands (SPEC section 6).
public struct PushWorkerCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "pushworker",
        abstract: "Delivers push notifications from Kafka to Apple's binary provider interface.",
        discussion: """
            Exit codes: 0 success, 2 invalid usage or configuration, 1 any other failure.
            """,
        subcommands: [ValidateCommand.self, EncodeCommand.self, SimulateCommand.self, DemoCommand.self]
    )

    public init() {}

    /// Parses the arguments, runs the subcommand and exits with the SPEC's exit codes: 0 success, 2 invalid usage
    /// or configuration, 1 any other failure.
    public static func runAndExit(_ arguments: [String]? = nil) async -> Never {
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            Glibc.exit(0)
        } catch {
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            if code == .success {
                print(message)
                Glibc.exit(0)
            }
            if !message.isEmpty { StandardError.write(message + "\n") }
            // Usage errors exit 2 (ArgumentParser's own code for them is 64); explicit exit codes pass through.
            if code == .validationFailure || (error as? CLIError)?.isUsage == true { Glibc.exit(2) }
            Glibc.exit(code.rawValue == 0 ? 1 : code.rawValue)
        }
    }
}

/// Writes to standard error without buffering.
enum StandardError {
    static func write(_ text: String) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(2, bytes.baseAddress! + offset, bytes.count - offset)
                if n <= 0 { return }
                offset += n
            }
        }
    }
}

/// `pushworker demo`: the whole flow on an embedded default. It arrives with the worker.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Runs the whole flow on an embedded Kafka cluster and gateway simulator (not yet available)."
    )

    func run() async throws {
        StandardError.write(
            "pushworker demo: not yet available in this build; it arrives with the worker (see the README).\n")
        throw ExitCode.failure
    }
}
