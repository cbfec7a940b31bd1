import Foundation
import PushTestSupport
import Synchronization
import Testing
@testable import PushCore
@testable import PushWorkerCLI

/// The output lines of `validate` and `encode` are parsed by other tools: their exact form is tested here.
@Suite struct CLIOutputTests {
    @Test func validateLines() {
        let decoder = EventDecoder()
        let ok = ValidateCommand.verdict(line: 3, event: ArraySlice(#"{"id":"a\"1","app":"x","token":"ab","payload":{"aps":{}}}"#.utf8), decoder: decoder, now: 1_800_000_000)
        #expect(ok.valid)
        #expect(String(decoding: ok.json, as: UTF8.self) == #"{"line": 3, "id": "a\"1", "valid": true}"#)
        let bad = ValidateCommand.verdict(line: 4, event: ArraySlice(#"{"id":"b","app":"x","token":"zz","payload":{"aps":{}}}"#.utf8), decoder: decoder, now: 1_800_000_000)
        #expect(!bad.valid)
        #expect(String(decoding: bad.json, as: UTF8.self) == #"{"line": 4, "id": "b", "valid": false, "reason": "invalid_token_format", "detail": "token is not hex: unexpected character at position 0"}"#)
        let anonymous = ValidateCommand.verdict(line: 1, event: ArraySlice("nope".utf8), decoder: decoder, now: 1_800_000_000)
        #expect(String(decoding: anonymous.json, as: UTF8.self).hasPrefix(#"{"line": 1, "id": null, "valid": false, "reason": "malformed_event", "detail": "#))
    }

    @Test func validateJudgesExpirationAgainstNow() {
        let decoder = EventDecoder()
        let event = ArraySlice(#"{"id":"e","app":"x","token":"ab","payload":{"aps":{}},"expiration":1000}"#.utf8)
        let before = ValidateCommand.verdict(line: 1, event: event, decoder: decoder, now: 999)
        #expect(before.valid)
        let at = ValidateCommand.verdict(line: 1, event: event, decoder: decoder, now: 1000)
        #expect(at.valid)  // the worker sends up to and including the second of its expiration
        let after = ValidateCommand.verdict(line: 1, event: event, decoder: decoder, now: 1001)
        #expect(String(decoding: after.json, as: UTF8.self) == #"{"line": 1, "id": "e", "valid": false, "reason": "expired", "detail": "expiration 1970-01-01T00:16:40Z is before now (1970-01-01T00:16:41Z)"}"#)
        // No expiration: now plus the time-to-live, never expired.
        let open = ValidateCommand.verdict(
            line: 1, event: ArraySlice(#"{"id":"e","app":"x","token":"ab","payload":{"aps":{}}}"#.utf8), decoder: decoder,
            now: .max)
        #expect(open.valid)
    }

    @Test func encodeLines() {
        let encoder = LineEncoder(format: .simple, now: 1000, defaultTTL: 10)
        let line = encoder.encode(ArraySlice(#"{"id":"e","app":"x","token":"ABCD","payload":{"aps":{}}}"#.utf8), identifier: 1)
        #expect(line.ok)
        #expect(line.line == "e 000002abcd000a7b22617073223a7b7d7d")
        let expired = encoder.encode(ArraySlice(#"{"id":"e","app":"x","token":"ab","payload":{"aps":{}},"expiration":999}"#.utf8), identifier: 2)
        #expect(!expired.ok)
        #expect(expired.line == "e error:expired")
        let frame = LineEncoder(format: .frame, now: 1000, defaultTTL: 10)
            .encode(ArraySlice(#"{"id":"f","app":"x","token":"ab","payload":{"aps":{}}}"#.utf8), identifier: 0x0A0B_0C0D)
        // identifier 0a0b0c0d, expiration now + ttl = 1010 = 0x3f2, priority 10; frame length 4 + 13 + 7 + 7 + 4 = 35
        #expect(frame.line == "f 02000000230100" + "01ab" + "02000a7b22617073223a7b7d7d" + "0300040a0b0c0d" + "040004000003f2" + "0500010a")
    }

    @Test func printableIDs() {
        #expect(LineEncoder.printable(id: nil) == "-")
        #expect(LineEncoder.printable(id: "abc") == "abc")
        #expect(LineEncoder.printable(id: "é😀") == "é😀")
        #expect(LineEncoder.printable(id: "a b") == #""a b""#)
        #expect(LineEncoder.printable(id: "a\tb") == #""a\tb""#)
        #expect(LineEncoder.printable(id: "\"q") == #""\"q""#)
        #expect(LineEncoder.printable(id: "-") == #""-""#)
    }

    @Test func expirationsNearTheLimitsDoNotTrap() {
        let late = LineEncoder(format: .frame, now: Int64(UInt32.max) - 10, defaultTTL: .max)
            .encode(ArraySlice(#"{"id":"f","app":"x","token":"ab","payload":{"aps":{}}}"#.utf8), identifier: 1)
        #expect(late.ok)
        #expect(late.line.hasSuffix("040004ffffffff0500010a"))  // the largest expiration the frame can carry
        let early = LineEncoder(format: .frame, now: .min, defaultTTL: 0)
            .encode(ArraySlice(#"{"id":"f","app":"x","token":"ab","payload":{"aps":{}}}"#.utf8), identifier: 1)
        #expect(early.line.hasSuffix("04000400000001" + "0500010a"))  // clamped to 1: never 0, which means none
    }
}

/// The exit statuses of the real binary (SPEC: 0 success, 1 failure, 2 usage or configuration).
@Suite struct ExitStatusTests {
    /// Runs `pushworker` with `arguments` (standard input: `input`) and returns its exit status and output. The
    /// output is read while the input is written, so neither pipe's buffer limits their sizes. With `output` given,
    /// standard output goes there instead (and the returned output is empty).
    func run(
        _ arguments: [String], input: String = "", output: FileHandle? = nil
    ) throws -> (status: Int32, output: String, errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltExecutable.path("pushworker"))
        process.arguments = arguments
        let stdin = Pipe()
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = output ?? stdout
        process.standardError = stderr
        try process.run()
        let errors = PipeReader(stderr.fileHandleForReading)
        let printed = output == nil ? PipeReader(stdout.fileHandleForReading) : nil
        // A command that fails stops reading: the rest of the input meets a closed pipe (EPIPE, not a signal).
        signal(SIGPIPE, SIG_IGN)
        try? stdin.fileHandleForWriting.write(contentsOf: Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        process.waitUntilExit()
        let outputText = String(decoding: printed?.readToEnd() ?? Data(), as: UTF8.self)
        let errorText = String(decoding: errors.readToEnd(), as: UTF8.self)
        #expect(process.terminationReason == .exit, "\(arguments) died of a signal")
        return (process.terminationStatus, outputText, errorText)
    }

    @Test func runNamesAKeyThatDoesNotLoadBeforeItTouchesKafka() throws {
        let folder = NSTemporaryDirectory() + "bad-key-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try writeWorkerConfiguration(in: folder, privateKey: "app-key-encrypted.pem")
        let result = try run(["run", "--config", "\(folder)/worker.yaml"])
        #expect(result.status == 2)
        #expect(result.errors.contains("configuration error: apps[0].private_key: cannot load"), "\(result.errors)")
        #expect(!result.errors.contains("rdkafka"), "nothing touched Kafka: \(result.errors)")
    }

    @Test func runStopsNamingTheListenKeyWhenItsPortIsTaken() throws {
        let folder = NSTemporaryDirectory() + "taken-port-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let taken = try ListeningSocket()
        try writeWorkerConfiguration(in: folder, extra: """
            tls: {ca_file: \(TestPKI.path("ca.pem"))}
            feedback: {spool_dir: \(folder)/spool}
            http: {listen: "127.0.0.1:\(taken.port)"}
            """)
        let result = try run(["run", "--config", "\(folder)/worker.yaml"])
        #expect(result.status == 1)
        #expect(result.errors.contains("http.listen: cannot listen on 127.0.0.1:\(taken.port)"), "\(result.errors)")
    }

    @Test(arguments: [
        ["frobnicate"],
        ["encode", "--format", "binary"],
        ["encode", "--default-ttl", "-1"],
        ["validate", "--now", "soon"],
        ["replay", "--config", "x.yaml"],
        ["replay", "--config", "x.yaml", "--from-timestamp", "9223372036854775807"],
        ["replay", "--config", "x.yaml", "--from-offset", "zero"],
        ["replay", "--config", "x.yaml", "--from-offset", "t:1:2:3"],
        ["replay", "--config", "x.yaml", "--from-offset", ":1:2"],
        ["check-config", "--config", "/nonexistent/pushworker.yaml"],
    ])
    func usageAndConfigurationErrorsExitTwo(arguments: [String]) throws {
        #expect(try run(arguments).status == 2)
    }

    /// Deadlines are checked before the configuration is read (the file here does not exist): out of range, the
    /// message names the option. Near Int.max a deadline would overflow the clock's arithmetic and trap.
    @Test(arguments: [
        (["run", "--config", "/nonexistent/pushworker.yaml", "--shutdown-deadline", "9223372036854775807"], "--shutdown-deadline"),
        (["run", "--config", "/nonexistent/pushworker.yaml", "--shutdown-deadline=-1"], "--shutdown-deadline"),
        (["replay", "--config", "/nonexistent/pushworker.yaml", "--to-earliest", "--drain-deadline", "9223372036854775807"], "--drain-deadline"),
        (["replay", "--config", "/nonexistent/pushworker.yaml", "--to-earliest", "--drain-deadline", "0"], "--drain-deadline"),
    ])
    func deadlinesOutOfRangeExitTwoNamingTheOption(arguments: [String], option: String) throws {
        let result = try run(arguments)
        #expect(result.status == 2)
        #expect(result.errors.contains("\(option): must be"), "\(result.errors)")
    }

    /// The simulator's delays and times, past what its timers can count, exit 2 naming the option (checked before
    /// its certificates are read: these files do not exist).
    @Test(arguments: ["--read-delay-ms", "--error-delay-ms", "--response-delay-ms", "--token-lifetime-s", "--token-renewal-s", "--unregistered-after-s"])
    func simulatorDelaysOutOfRangeExitTwoNamingTheOption(option: String) throws {
        let result = try run(["simulate", "--cert", "/nonexistent/c.pem", "--key", "/nonexistent/k.pem", "--ca", "/nonexistent/ca.pem",
                              option, "9223372036854775807"])
        #expect(result.status == 2)
        #expect(result.errors.contains("\(option) must be"), "\(result.errors)")
    }

    @Test func validateExitsOneForAnInvalidOrExpiredEventAndZeroOtherwise() throws {
        let valid = #"{"id":"v","app":"x","token":"ab","payload":{"aps":{}},"expiration":2000}"#
        let ok = try run(["validate", "--now", "1000"], input: valid + "\n")
        #expect(ok.status == 0)
        let late = try run(["validate", "--now", "3000"], input: valid + "\n")
        #expect(late.status == 1)
        #expect(late.output.contains(#""reason": "expired""#))
        #expect(try run(["validate"], input: "nope\n").status == 1)
    }

    /// Lines longer than a read (64 KiB) arrive whole and keep their numbers, wherever the reads cut them, from a
    /// file and from standard input.
    @Test func linesLongerThanAReadAreJudgedWholeWithTheirNumbers() throws {
        let valid = #"{"id":"v","app":"x","token":"ab","payload":{"aps":{}}}"#
        let long = #"{"id":"long","app":"x","token":"ab","payload":{"aps":{},"pad":""# + String(repeating: "a", count: 200_000) + #""}}"#
        let input = [long, valid, "", long].joined(separator: "\n") + "\n" + valid
        let path = NSTemporaryDirectory() + "long-lines-\(getpid()).jsonl"
        try input.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        for result in [try run(["validate", path]), try run(["validate"], input: input)] {
            let lines = result.output.split(separator: "\n").map { try! JSONValue(parsing: String($0)) }
            #expect(lines.map { $0["line"] } == [1, 2, 4, 5].map { JSONValue.number(Double($0)) })
            #expect(lines.map { $0["id"] } == ["long", "v", "long", "v"].map(JSONValue.string))
            #expect(lines.map { $0["reason"] } == [JSONValue.string("payload_too_large"), nil, .string("payload_too_large"), nil])
        }
    }

    /// Output that cannot be written (here a full device) fails the command, naming why, instead of leaving a
    /// shorter result behind a success: with little output (written at the end) and with more than the buffer.
    @Test(arguments: [1, 5_000])
    func anOutputThatCannotBeWrittenExitsOne(events: Int) throws {
        let valid = #"{"id":"v","app":"x","token":"ab","payload":{"aps":{}}}"#
        let input = String(repeating: valid + "\n", count: events)
        for command in [["validate"], ["encode", "--now", "1000"]] {
            let full = try #require(FileHandle(forWritingAtPath: "/dev/full"))
            defer { try? full.close() }
            let result = try run(command, input: input, output: full)
            #expect(result.status == 1, "\(command)")
            #expect(result.errors.contains("cannot write the output: No space left on device"), "\(command): \(result.errors)")
            // The same input to a pipe succeeds: the failure is the output's.
            #expect(try run(command, input: input).status == 0)
        }
    }

    @Test func helpExitsZero() throws {
        let help = try run(["--help"])
        #expect(help.status == 0)
        #expect(help.output.contains("USAGE"))
    }
}

/// `pushworker run` with `log.format: json`: every line on standard error is one JSON object, librdkafka's too.
@Suite struct LogStreamTests {
    @Test func librdkafkasLinesAreJSONLikeEveryOther() throws {
        let folder = NSTemporaryDirectory() + "log-stream-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Nothing listens on the broker's port: librdkafka logs its connection failures.
        try writeWorkerConfiguration(in: folder, extra: """
            tls: {ca_file: \(TestPKI.path("ca.pem"))}
            feedback: {spool_dir: \(folder)/spool}
            http: {listen: "127.0.0.1:0"}
            log: {format: json, level: info}
            """)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltExecutable.path("pushworker"))
        process.arguments = ["run", "--config", "\(folder)/worker.yaml"]
        let stderr = Pipe()
        process.standardError = stderr
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let text = PipeReader(stderr.fileHandleForReading)
        let deadline = Date().addingTimeInterval(60)
        while !text.text.contains(#""facility""#) && Date() < deadline && process.isRunning {
            Thread.sleep(forTimeInterval: 0.05)
        }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        let lines = String(decoding: text.readToEnd(), as: UTF8.self).split(separator: "\n")
        #expect(lines.contains { $0.contains(#""facility""#) }, "librdkafka logged through the worker's logger")
        for line in lines {
            #expect((try? JSONValue(parsing: String(line))) != nil, "not JSON: \(line)")
        }
    }
}

/// Writes `folder`/worker.yaml: one app with the test PKI's certificate and `privateKey`, the broker and the
/// gateways on port 1 of loopback (privileged, outside the ephemeral range: nothing listens there, and no other
/// test's server can be given it while the worker keeps reconnecting), then `extra`.
func writeWorkerConfiguration(in folder: String, privateKey: String = "app-key.pem", extra: String = "") throws {
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    let config = """
        kafka: {brokers: "127.0.0.1:1"}
        apps:
          - bundle_id: com.example.app
            certificate: \(TestPKI.path("app.pem"))
            private_key: \(TestPKI.path(privateKey))
            gateway: "127.0.0.1:1"
            feedback: "127.0.0.1:1"
        \(extra)
        """
    try config.write(toFile: "\(folder)/worker.yaml", atomically: true, encoding: .utf8)
}
