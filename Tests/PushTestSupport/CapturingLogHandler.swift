import Logging
import Synchronization

/// Keeps what is logged through it (tests read `lines`).
public final class CapturingLogHandler: LogHandler, Sendable {
    public struct Line: Sendable {
        public var level: Logger.Level
        public var message: String
        public var metadata: [String: String]
    }

    public let lines = Mutex<[Line]>([])

    public init() {}

    public var metadata: Logger.Metadata {
        get { [:] }
        set {}
    }
    public var logLevel: Logger.Level {
        get { .trace }
        set {}
    }
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { nil }
        set {}
    }

    public func log(event: LogEvent) {
        let line = Line(
            level: event.level, message: "\(event.message)",
            metadata: (event.metadata ?? [:]).mapValues { "\($0)" })
        lines.withLock { $0.append(line) }
    }
}
