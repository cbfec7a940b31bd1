import Logging
import PushCore

#if canImport(Glibc)
import Glibc
#endif

/// One JSON object per log line on standard error: time, level, label, message and metadata.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    init(label: String) { self.label = label }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var w = JSONWriter()
        w.beginObject()
        w.field("time", RFC3339.format(unixMilliseconds: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000))
        w.field("level", event.level.rawValue)
        w.field("label", label)
        w.field("message", event.message.description)
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) { w.field(key, "\(value)") }
        w.endObject()
        StandardError.write(w.string + "\n")
    }
}
