import ArgumentParser
import Logging
import PushCore
import PushKafka
import PushWorker

/// `pushworker replay`: re-sends a range of the input topics.
struct ReplayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Re-sends a range of the input topics through the pipeline, outside the worker's consumer group.",
        discussion: """
            The range starts at a time (--from-timestamp, UNIX seconds or RFC 3339), at offsets per partition \\
            (--from-offset PARTITION:OFFSET, repeated; only the partitions named are replayed), or at the earliest \\
            offsets (--to-earliest), and ends at the offsets that were the end when the replay started. Expired \\
            events are reported on the delivery-error topic, not sent. The worker group's committed offsets do not \\
            move; with --reset-group nothing is replayed here: the (stopped) group's offsets are set to the start \\
            of the range instead. Prints a JSON summary; exits 1 when any notification got no outcome, or any \\
            record of the range was not read, because nothing progressed for --drain-deadline seconds.
            """
    )

    @Option(help: "The YAML configuration file (PUSHWORKER_* variables override it).")
    var config: String

    @Option(help: "Start at this time: UNIX seconds or an RFC 3339 date-time.")
    var fromTimestamp: String?

    @Option(parsing: .singleValue, help: "Replay partition P from offset O: P:O for every input topic, or TOPIC:P:O; repeat for more. Partitions not named are not replayed.")
    var fromOffset: [String] = []

    @Flag(help: "Start at the earliest offsets.")
    var toEarliest = false

    @Flag(help: "Set the worker group's committed offsets to the start of the range instead of replaying.")
    var resetGroup = false

    @Option(help: "Seconds without progress (no record read, no outcome) after which the replay stops and reports what is left.")
    var drainDeadline = 120

    func validate() throws {
        let chosen = (fromTimestamp != nil ? 1 : 0) + (fromOffset.isEmpty ? 0 : 1) + (toEarliest ? 1 : 0)
        guard chosen == 1 else { throw ValidationError("give exactly one of --from-timestamp, --from-offset, --to-earliest") }
        // A week at most: a number near Int.max would overflow the clock's arithmetic.
        guard (1...604_800).contains(drainDeadline) else {
            throw ValidationError("--drain-deadline: must be 1 to 604800 seconds, not \(drainDeadline)")
        }
        _ = try start()
    }

    func start() throws -> ReplayStart {
        if toEarliest { return .earliest }
        if let fromTimestamp {
            guard let seconds = Int64(fromTimestamp) ?? RFC3339.parse(fromTimestamp) else {
                throw ValidationError("--from-timestamp: '\(fromTimestamp)' is neither UNIX seconds nor RFC 3339")
            }
            let (milliseconds, overflow) = seconds.multipliedReportingOverflow(by: 1000)
            guard !overflow, milliseconds >= 0 else {
                throw ValidationError("--from-timestamp: '\(fromTimestamp)' is out of range (1970 to year 292,000,000)")
            }
            return .timestamp(milliseconds)
        }
        var offsets: [ReplayStart.ReplayOffset] = []
        for spec in fromOffset {
            let parts = spec.split(separator: ":", omittingEmptySubsequences: false)
            guard (2...3).contains(parts.count), let p = Int32(parts[parts.count - 2]), let o = Int64(parts[parts.count - 1]),
                p >= 0, o >= 0, parts.count == 2 || !parts[0].isEmpty
            else {
                throw ValidationError("--from-offset: '\(spec)' is not PARTITION:OFFSET or TOPIC:PARTITION:OFFSET")
            }
            offsets.append(ReplayStart.ReplayOffset(topic: parts.count == 3 ? String(parts[0]) : nil, partition: p, offset: o))
        }
        return .offsets(offsets)
    }

    func run() async throws {
        let configuration = try loadConfiguration(config)
        bootstrapLogging(configuration)
        let logger = Logger(label: "pushworker.replay")
        do {
            if resetGroup {
                let replayStart = try start()
                let offsets = try await onOwnThread("kafka-offsets") { try Replay.resetGroup(configuration: configuration, start: replayStart) }
                let list = offsets.sorted { ($0.key.topic, $0.key.partition) < ($1.key.topic, $1.key.partition) }
                    .map { "\"\($0.key.topic)[\($0.key.partition)]\": \($0.value)" }.joined(separator: ", ")
                printLine("{\"group\": \(JSONWriter.quoted(configuration.kafka.groupID)), \"offsets\": {\(list)}}")
                return
            }
            let result = try await Replay.run(
                configuration: configuration, start: try start(), drainDeadline: .seconds(drainDeadline), logger: logger)
            let counts = result.counts
            let errors = counts.errorsByReason.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\"\($0.key.rawValue)\": \($0.value)" }.joined(separator: ", ")
            printLine("{\"replayed\": \(counts.consumed), \"accepted\": \(counts.accepted), \"errors\": {\(errors)}, \"without_outcome\": \(result.withoutOutcome), \"unread\": \(result.unread)}")
            guard result.withoutOutcome == 0 && result.unread == 0 else {
                throw CLIError.failure(
                    "replay incomplete: \(result.withoutOutcome) notifications got no outcome and \(result.unread) records were not read, nothing having progressed for \(drainDeadline) s (the gateway down?); replay the range again")
            }
        } catch let error as CLIError {
            throw error
        } catch let error as ConfigurationError {
            throw CLIError.usage("configuration error: \(error)")
        } catch {
            throw CLIError.failure("replay failed: \(error)")
        }
    }
}
