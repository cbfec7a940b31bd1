import Foundation
import PushKafka
import Synchronization

/// A noida-db broker process started by `scripts/kafka-broker` for the suite and stopped afterwards. noida-db is
/// used here because, unlike the in-process mock cluster, it is a separate process with real group coordination
/// and fast rebalances (~1 s); it does not evict a member that was killed, so that case is not tested on it.
public final class Broker: Sendable {
    public let bootstrapServers: String
    public let dataDirectory: String
    static var root: String { TestPKI.root }

    /// Suites run in parallel: every broker gets a port and a folder of its own.
    private static let instances = Atomic<Int>(0)

    public init() throws {
        let instance = Broker.instances.add(1, ordering: .relaxed).newValue
        dataDirectory = NSTemporaryDirectory() + "pushworker-broker-\(getpid())-\(instance)"
        let output = try Broker.start(dataDirectory)
        bootstrapServers = output.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").last.map(String.init) ?? ""
        precondition(bootstrapServers.hasPrefix("127.0.0.1:"), "scripts/kafka-broker start printed \(output)")
    }

    /// A port nothing listens on now, from the kernel (a listening socket's, closed again).
    public static func freePort() throws -> Int { try ListeningSocket().port }

    /// Starts noida-db on a free port and returns what the script printed. noida-db needs the port as a number: it is
    /// chosen here and bound by the broker a moment later, and any process can take it in between (another broker's
    /// control port, a connection's source port). Starting fails cleanly then ("port is already in use"), and another
    /// port is tried.
    private static func start(_ dataDirectory: String, attempts: Int = 5) throws -> String {
        for _ in 1..<attempts {
            if let output = try? script(["start", dataDirectory, String(try freePort())]) { return output }
        }
        return try script(["start", dataDirectory, String(try freePort())])
    }

    public func stop() {
        _ = try? Broker.script(["stop", dataDirectory])
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }

    @discardableResult
    static func script(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["\(root)/scripts/kafka-broker"] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw KafkaError("scripts/kafka-broker \(arguments) failed") }
        return String(decoding: data, as: UTF8.self)
    }
}

