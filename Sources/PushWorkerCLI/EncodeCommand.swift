import ArgumentParser
import NIOCore
import PushCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `pushworker encode [FILE]`: shows the exact bytes the worker would send for each event.
struct EncodeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "encode",
        abstract: "Encodes notification events (JSON lines) as binary-interface notifications (hex) or HTTP/2 requests.",
        discussion: """
            Prints one line per event: the event id, a space, and the notification as lowercase hex, or
            'error:REASON' when the event is invalid or its expiration has passed. With --format http2 the
            notification is one JSON object {"path", "headers": {...}, "body"} (the body as a string; no
            authorization header: provider tokens are the worker's); an mdm push needs --topic. An id that holds whitespace or
            control characters, or starts with a quote, is printed as a JSON string; '-' stands for a missing id.
            Every event (valid or not) takes the next identifier, starting at --identifier-start. An event with no
            expiration gets --now plus --default-ttl, as the worker gives it the Kafka record's timestamp plus the
            configured default time-to-live. Blank lines are skipped. Exits 1 if any event is invalid, or if the
            output cannot be written.
            """
    )

    @Argument(help: "A file of JSON lines; standard input when absent or '-'.")
    var file: String?

    @Option(help: "frame (command 2), enhanced (command 1), simple (command 0) or http2 (a provider API request).")
    var format: NotificationFormatArgument = .frame

    @Option(help: "http2: the app entry's topic, which mdm notifications are sent to.")
    var topic: String?

    @Option(help: "The identifier of the first event.")
    var identifierStart: UInt32 = 1

    @Option(help: "The current time in UNIX seconds (default: the clock).")
    var now: Int64?

    @Option(help: "Seconds added to --now for events without an expiration.")
    var defaultTTL: Int64 = 86400

    func validate() throws {
        guard defaultTTL >= 0 else { throw ValidationError("--default-ttl must not be negative") }
    }

    func run() async throws {
        var reader = try LineReader(path: file)
        defer { reader.close() }
        var output = OutputWriter()
        let encoder = LineEncoder(
            format: format.format, now: now ?? Int64(time(nil)), defaultTTL: defaultTTL, mdmTopic: topic)
        var identifier = identifierStart
        var anyInvalid = false
        while let line = try reader.next() {
            if isBlank(line) { continue }
            let result = encoder.encode(line, identifier: identifier)
            anyInvalid = anyInvalid || !result.ok
            try output.write(result.line)
            try output.write("\n")
            identifier &+= 1
        }
        try output.flush()
        if anyInvalid { throw ExitCode.failure }
    }
}

/// Turns one event line into the `encode` output line.
struct LineEncoder {
    /// The binary format, or nil for HTTP/2 requests.
    let format: NotificationFormat?
    let now: Int64
    let defaultTTL: Int64
    let decoder: EventDecoder
    let mdmTopic: String?

    init(format: NotificationFormat?, now: Int64, defaultTTL: Int64, mdmTopic: String? = nil) {
        self.format = format
        self.now = now
        self.defaultTTL = defaultTTL
        self.decoder = format.map { EventDecoder(format: $0) } ?? .http2
        self.mdmTopic = mdmTopic
    }

    func encode(_ line: ArraySlice<UInt8>, identifier: UInt32) -> (ok: Bool, line: String) {
        switch line.withUnsafeBytes({ decoder.decode($0) }) {
        case .failure(let rejection):
            return (false, "\(LineEncoder.printable(id: rejection.eventID)) error:\(rejection.reason.rawValue)")
        case .success(let event):
            if Expiration.hasPassed(event.expiration.resolved(recordTimestamp: now, defaultTTL: defaultTTL), now: now) {
                return (false, "\(LineEncoder.printable(id: event.id)) error:\(DeliveryErrorReason.expired.rawValue)")
            }
            guard let format else {
                let app = HTTP2AppSettings(bundleID: event.app, mdmTopic: mdmTopic)
                guard let request = try? APNsRequest(event: event, app: app, recordTimestamp: now, defaultTTL: defaultTTL) else {
                    return (false, "\(LineEncoder.printable(id: event.id)) error:\(DeliveryErrorReason.rejected.rawValue)")
                }
                return (true, "\(LineEncoder.printable(id: event.id)) \(request.json())")
            }
            let notification = event.notification(identifier: identifier, recordTimestamp: now, defaultTTL: defaultTTL)
            let buffer = NotificationEncoder.encode(notification, format: format)
            return (true, "\(LineEncoder.printable(id: event.id)) \(Hex.encode(buffer.readableBytesView))")
        }
    }

    /// The id as printed: raw when it is safe to split on the first space, else a JSON string; `-` when absent.
    static func printable(id: String?) -> String {
        guard let id else { return "-" }
        let unsafe = id.unicodeScalars.contains { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F }
        return unsafe || id.hasPrefix("\"") || id == "-" ? JSONWriter.quoted(id) : id
    }
}
