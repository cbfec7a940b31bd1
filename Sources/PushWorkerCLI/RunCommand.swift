import ArgumentParser
import Logging
import Metrics
import Prometheus
import PushKafka
import PushWorker
import ServiceLifecycle

/// `pushworker run --config FILE`: the worker.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Runs the worker: consumes notification events, delivers them, produces the outcome events.",
        discussion: """
            SIGTERM or SIGINT shut it down gracefully: fetching stops, what is held gets its outcome within \\
            --shutdown-deadline, output events are produced, offsets committed, connections closed.
            """
    )

    @Option(help: "The YAML configuration file (PUSHWORKER_* variables override it).")
    var config: String

    @Option(help: "Seconds to settle held records on SIGTERM/SIGINT.")
    var shutdownDeadline = 25

    func validate() throws {
        // A day at most: longer is no deadline, and a number near Int.max would overflow the clock's arithmetic.
        guard (0...86_400).contains(shutdownDeadline) else {
            throw ValidationError("--shutdown-deadline: must be 0 to 86400 seconds, not \(shutdownDeadline)")
        }
    }

    func run() async throws {
        let configuration = try loadConfiguration(config)
        bootstrapLogging(configuration)
        let logger = Logger(label: "pushworker")
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let worker: Worker
        do {
            // Opening the suppression topic asks the brokers (partitions, end offsets): not on the cooperative pool.
            let deadline = Duration.seconds(shutdownDeadline)
            worker = try await onOwnThread("pushworker-init") {
                try Worker(configuration: configuration, shutdownDeadline: deadline, logger: logger, registry: registry)
            }
        } catch {
            throw CLIError.usage("configuration error: \(error)")
        }
        // SIGTERM/SIGINT shut down gracefully, a second one cancels the group (Worker.services); past the deadline
        // the group is cancelled too. Either way only settled offsets are committed.
        var groupConfiguration = ServiceGroupConfiguration(
            services: worker.services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(shutdownDeadline + 10)
        let group = ServiceGroup(configuration: groupConfiguration)
        worker.logStart()
        do {
            try await group.run()
        } catch is CancellationError {
            // the second signal or the deadline: settled offsets were committed, the rest is delivered again
        } catch is SecondSignalReceived {
        } catch {
            throw CLIError.failure("worker failed: \(error)")
        }
        worker.logStop()
    }
}

/// Sends every log line, librdkafka's included, to standard error in the configuration's `log.format` and at its
/// `log.level`.
func bootstrapLogging(_ configuration: WorkerConfiguration) {
    let level = Logger.Level(rawValue: configuration.logLevel) ?? .info
    let json = configuration.logFormat == "json"
    LoggingSystem.bootstrap { label in
        var handler: any LogHandler = json ? JSONLogHandler(label: label) : StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
}
