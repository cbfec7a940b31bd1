import ArgumentParser
import PushWorker

/// `pushworker check-config --config FILE`: validates a configuration, loads the certificates, prints the plan.
struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validates a configuration (file and PUSHWORKER_* variables), loads the certificates, prints what the worker would do.",
        discussion: "Exits 2 naming the key when anything is wrong."
    )

    @Option(help: "The YAML configuration file.")
    var config: String

    func run() async throws {
        do {
            let configuration = try WorkerConfiguration.load(path: config)
            printLine(try configuration.check())
        } catch {
            throw CLIError.usage("configuration error: \(error)")
        }
    }
}

/// Loads `--config` with the environment on top; a problem is a usage error (exit 2) naming the key.
func loadConfiguration(_ path: String) throws(CLIError) -> WorkerConfiguration {
    do {
        return try WorkerConfiguration.load(path: path)
    } catch {
        throw CLIError.usage("configuration error: \(error)")
    }
}
