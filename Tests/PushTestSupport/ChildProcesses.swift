import Foundation
import PushCore

/// Executables built alongside the tests (the test bundle sits in the same folder).
public enum BuiltExecutable {
    public static func path(_ name: String) -> String {
        let folder = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path
        let path = "\(folder)/\(name)"
        precondition(FileManager.default.isExecutableFile(atPath: path), "\(path) is not built (swift build builds it)")
        return path
    }
}

/// A child process whose standard output the test reads.
public final class Child {
    public let process = Process()
    private let output = Pipe()

    /// `standardError`: a file to write its standard error to (else it is the test's).
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, standardError: String? = nil
    ) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = output
        if let standardError {
            _ = FileManager.default.createFile(atPath: standardError, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: standardError)
        }
        if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        try process.run()
    }

    /// The next line it prints (blocking until it does, or EOF).
    public func readLine() -> String {
        var data = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte[0] == UInt8(ascii: "\n") { break }
            data += byte
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Everything it prints until it closes its standard output (blocking until then).
    public func readToEnd() -> String {
        String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    public func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits for it to exit and returns its status.
    @discardableResult
    public func wait() -> Int32 {
        process.waitUntilExit()
        return process.terminationStatus
    }

    public func killNow() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// The port a `pushworker run` child serves its HTTP endpoints on, from its JSON log (`log: {format: json, level:
/// info}`, standard error written to `path`). A worker given `listen: "127.0.0.1:0"` binds a free port itself: a
/// port chosen by the test and bound later by the worker can be taken in between by any process on the machine (a
/// broker's control port, a connection's source port) while tests run in parallel.
public func workerHTTPPort(fromLog path: String, of worker: Child, within limit: Duration = .seconds(60)) async throws -> Int {
    let deadline = ContinuousClock.now.advanced(by: limit)
    while ContinuousClock.now < deadline && worker.process.isRunning {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") where line.contains(#""message":"http endpoints""#) {
            if let listen = try? JSONValue(parsing: String(line))["listen"]?.stringValue,
                let port = listen.split(separator: ":").last.flatMap({ Int($0) })
            {
                return port
            }
        }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw TestSupportError("no \"http endpoints\" line in \(path) (worker running: \(worker.process.isRunning))")
}

/// What a test helper could not do (a child process that did not do what the test waited for, a socket it could not
/// open).
public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
