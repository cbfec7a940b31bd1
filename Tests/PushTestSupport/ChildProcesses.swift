import Foundation

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
