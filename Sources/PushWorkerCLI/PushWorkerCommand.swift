import ArgumentParser
import Foundation
import PushCore
import PushDemo
import PushWorker

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `pushworker` command and its subcommands (SPEC section 6).
public struct PushWorkerCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "pushworker",
        abstract: "Delivers push notifications from Kafka to Apple's push gateway, over its binary provider interface or the HTTP/2 provider API.",
        discussion: """
            Exit codes: 0 success, 2 invalid usage or configuration, 1 any other failure.
            """,
        subcommands: [RunCommand.self, ReplayCommand.self, ValidateCommand.self, EncodeCommand.self, SimulateCommand.self, CheckConfigCommand.self, DemoCommand.self, ProviderTokenCommand.self]
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
        _ = text.withUTF8 { WholeWrite.write(UnsafeRawBufferPointer($0), to: 2) }
    }
}

/// `pushworker demo`: the whole flow on an embedded default.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Runs the whole flow on an in-process Kafka cluster and gateway simulator, then summarises it.",
        discussion: """
            Kafka is librdkafka's in-process mock cluster and the gateway is pushworker's simulator, over TLS with \
            client certificates: a throw-away PKI made for the run (removed after it), or the files in --pki (for \
            example those of scripts/gen-pki). A sample stream of events (valid \
            ones, a token the gateway rejects, a malformed event, a bad token, an expired event, a too-large \
            payload, an unknown app, an alert that is shortened) goes through the worker's pipeline while the \
            gateway shuts connections down (status 10) every 50 notifications; then the feedback service is read.
            """
    )

    @Option(help: "A folder of test certificates (ca.pem, server.pem, server-key.pem, app.pem, app-key.pem, as scripts/gen-pki writes them); by default the demo makes a throw-away set.")
    var pki: String?

    func run() async throws {
        let directory: String
        if let pki {
            for file in ThrowawayPKI.files {
                guard access("\(pki)/\(file)", R_OK) == 0 else {
                    throw CLIError.usage("--pki: \(pki)/\(file) is missing; run scripts/gen-pki, or leave --pki out")
                }
            }
            directory = pki
        } else {
            directory = NSTemporaryDirectory() + "pushworker-demo-pki-\(getpid())"
            do {
                try ThrowawayPKI.make(in: directory)
            } catch {
                throw CLIError.failure("demo: cannot make a throw-away PKI: \(error)")
            }
        }
        defer { if pki == nil { try? FileManager.default.removeItem(atPath: directory) } }
        do {
            try await Demo.run(pkiDirectory: directory) { line in printLine(line) }
        } catch let error as CLIError {
            throw error
        } catch {
            throw CLIError.failure("demo failed: \(error)")
        }
    }
}
