import Logging
import NIOPosix
import PushCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A notification the simulator accepted.
public struct RecordedNotification: Hashable, Sendable {
    public var app: String
    public var token: [UInt8]
    public var payload: [UInt8]
    public var identifier: UInt32
    public var expiry: UInt32
    public var priority: UInt8
    public var command: UInt8
    /// The gateway connection's number (1 for the first accepted TCP connection, refused ones included).
    public var connection: Int
    /// UNIX milliseconds.
    public var time: Int64

    /// The record file's line (without the newline).
    public var jsonLine: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(lineCapacity)
        appendJSONLine(to: &out)
        return out
    }

    /// About as many bytes as the line takes (its fixed part at the longest, the payload and the token's digits).
    var lineCapacity: Int { 200 + app.utf8.count + payload.count + token.count * 2 }

    /// Appends the record file's line (without the newline) to `out`, in place: no string is made on the way. (It
    /// reserves nothing: `out` holds many lines, and reserving a little more for each would copy it each time.)
    public func appendJSONLine(to out: inout [UInt8]) {
        out.append(contentsOf: "{\"app\":".utf8)
        JSONWriter.appendQuoted(app, to: &out)
        out.append(contentsOf: ",\"token\":\"".utf8)
        Hex.append(token, to: &out)
        out.append(contentsOf: "\",\"payload\":".utf8)
        out.append(contentsOf: payload)  // the gateway checked that it is a JSON object
        out.append(contentsOf: ",\"identifier\":".utf8)
        JSONWriter.appendDecimal(Int64(identifier), to: &out)
        out.append(contentsOf: ",\"expiry\":".utf8)
        JSONWriter.appendDecimal(Int64(expiry), to: &out)
        out.append(contentsOf: ",\"priority\":".utf8)
        JSONWriter.appendDecimal(Int64(priority), to: &out)
        out.append(contentsOf: ",\"command\":".utf8)
        JSONWriter.appendDecimal(Int64(command), to: &out)
        RecordLine.appendEnd(connection: connection, time: time, to: &out)
    }
}

/// What both kinds of record line end with.
private enum RecordLine {
    /// `,"connection":N,"time":"RFC 3339","time_ms":N}`.
    static func appendEnd(connection: Int, time: Int64, to out: inout [UInt8]) {
        out.append(contentsOf: ",\"connection\":".utf8)
        JSONWriter.appendDecimal(Int64(connection), to: &out)
        out.append(contentsOf: ",\"time\":\"".utf8)
        RFC3339.append(unixMilliseconds: time, to: &out)
        out.append(contentsOf: "\",\"time_ms\":".utf8)
        JSONWriter.appendDecimal(time, to: &out)
        out.append(UInt8(ascii: "}"))
    }
}

/// A request the simulated HTTP/2 API accepted (200).
public struct RecordedRequest: Hashable, Sendable {
    public var token: [UInt8]
    public var topic: String
    public var pushType: String
    public var priority: Int
    public var expiration: UInt32
    public var collapseID: String?
    public var apnsID: String
    public var body: [UInt8]
    /// The API connection's number (1 for the first).
    public var connection: Int
    /// UNIX milliseconds.
    public var time: Int64

    init(accepted: AcceptedRequest, connection: Int, time: Int64) {
        token = accepted.token
        topic = accepted.topic
        pushType = accepted.pushType
        priority = accepted.priority
        expiration = accepted.expiration
        collapseID = accepted.collapseID
        apnsID = accepted.apnsID
        body = accepted.body
        self.connection = connection
        self.time = time
    }

    /// The record file's line: `{"api":true,"topic":...,"token":...,"push_type":...,"priority":...,
    /// "expiration":...,"collapse_id":...,"apns_id":...,"payload":{...},"connection":N,"time":...,"time_ms":...}`.
    public var jsonLine: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(220 + body.count + token.count * 2)
        out.append(contentsOf: "{\"api\":true,\"topic\":".utf8)
        JSONWriter.appendQuoted(topic, to: &out)
        out.append(contentsOf: ",\"token\":\"".utf8)
        Hex.append(token, to: &out)
        out.append(contentsOf: "\",\"push_type\":\"".utf8)
        out.append(contentsOf: pushType.utf8)
        out.append(contentsOf: "\",\"priority\":".utf8)
        JSONWriter.appendDecimal(Int64(priority), to: &out)
        out.append(contentsOf: ",\"expiration\":".utf8)
        JSONWriter.appendDecimal(Int64(expiration), to: &out)
        out.append(contentsOf: ",\"collapse_id\":".utf8)
        if let collapseID { JSONWriter.appendQuoted(collapseID, to: &out) } else { out.append(contentsOf: "null".utf8) }
        out.append(contentsOf: ",\"apns_id\":\"".utf8)
        out.append(contentsOf: apnsID.utf8)
        out.append(contentsOf: "\",\"payload\":".utf8)
        if JSONCheck.isObject(body) {
            out.append(contentsOf: body)
        } else {
            JSONWriter.appendQuoted(String(decoding: body, as: UTF8.self), to: &out)
        }
        RecordLine.appendEnd(connection: connection, time: time, to: &out)
        return out
    }
}

/// Writes the record file (JSON lines) off the event loops, on one thread of its own, in order, in large writes;
/// optionally keeps the records in memory as well. Lines that cannot be written (a full disk) are counted in
/// ``linesLost`` and logged once, never dropped without a word: the file is what a test or a user counts deliveries by.
final class Recorder: Sendable {
    private struct Pending {
        var bytes: [UInt8] = []
        var records: [RecordedNotification] = []
        var requests: [RecordedRequest] = []
    }

    private let pending = Mutex(Pending())
    private let descriptor: Int32?
    private let keepInMemory: Bool
    private let writer: NIOThreadPool
    private let lost = Atomic<Int>(0)
    private let logger: Logger
    static let writeThreshold = 256 * 1024

    /// Opens (truncating) the record file; throws when it cannot be created.
    init(
        path: String?, keepInMemory: Bool, logger: Logger = Logger(label: "pushworker.simulator")
    ) throws(SimulatorInputError) {
        self.logger = logger
        if let path {
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw SimulatorInputError("cannot open the record file \(path): \(String(cString: strerror(errno)))") }
            descriptor = fd
        } else {
            descriptor = nil
        }
        self.keepInMemory = keepInMemory
        writer = NIOThreadPool(numberOfThreads: 1)
        writer.start()
    }

    var isActive: Bool { descriptor != nil || keepInMemory }

    func append(_ records: [RecordedNotification]) {
        guard !records.isEmpty, isActive else { return }
        var lines: [UInt8] = []
        if descriptor != nil {
            lines.reserveCapacity(records.reduce(0) { $0 + $1.lineCapacity + 1 })
            for record in records {
                record.appendJSONLine(to: &lines)
                lines.append(0x0A)
            }
        }
        append(lines: lines) { $0.records.append(contentsOf: records) }
    }

    func append(request: RecordedRequest) {
        guard isActive else { return }
        var lines: [UInt8] = []
        if descriptor != nil {
            lines = request.jsonLine
            lines.append(0x0A)
        }
        append(lines: lines) { $0.requests.append(request) }
    }

    /// Queues the file's lines (each with its newline; made before the lock is taken) and, when records are kept in
    /// memory, `keep`'s records, under one lock; hands a batch to the writer thread once enough has gathered.
    private func append(lines: [UInt8], keep: (inout Pending) -> Void) {
        let batch: [UInt8]? = pending.withLock { p in
            if keepInMemory { keep(&p) }
            p.bytes.append(contentsOf: lines)
            guard p.bytes.count >= Recorder.writeThreshold else { return nil }
            defer { p.bytes = [] }
            return p.bytes
        }
        if let batch { submit(batch) }
    }

    var requests: [RecordedRequest] { pending.withLock { $0.requests } }

    private func submit(_ batch: [UInt8]) {
        guard let fd = descriptor else { return }
        writer.submit { [self] _ in write(fd, batch) }
    }

    /// Lines of the record file that could not be written, since the start.
    var linesLost: Int { lost.load(ordering: .relaxed) }

    /// Writes out whatever is pending and waits until the file has it.
    func flush() async {
        guard let fd = descriptor else { return }
        let batch = pending.withLock { p in
            defer { p.bytes = [] }
            return p.bytes
        }
        guard !batch.isEmpty else { return }
        do {
            try await writer.runIfActive { [self] in write(fd, batch) }
        } catch {
            // Not written (the flushing task was cancelled, for one): back in front of whatever came since, for the
            // next flush; close() flushes last.
            pending.withLock { $0.bytes = batch + $0.bytes }
        }
    }

    /// Flushes and closes the file.
    func close() async {
        await flush()
        try? await writer.shutdownGracefully()
        if let fd = descriptor { _ = Glibc.close(fd) }
    }

    var records: [RecordedNotification] { pending.withLock { $0.records } }

    /// Writes `bytes` (whole lines) on the writer thread; counts the lines from the first byte not written on.
    private func write(_ fd: Int32, _ bytes: [UInt8]) {
        guard let (written, error) = bytes.withUnsafeBytes({ WholeWrite.write($0, to: fd) }) else { return }
        let lines = bytes[written...].reduce(0) { $1 == 0x0A ? $0 + 1 : $0 }
        if lost.wrappingAdd(lines, ordering: .relaxed).oldValue == 0 {
            logger.error("cannot write the record file: its lines are lost from here on while this lasts (the summary's record_lines_lost counts them)", metadata: [
                "error": "\(String(cString: strerror(error)))",
            ])
        }
    }
}
