import Foundation
import NIOSSL
import PushTestSupport
import Synchronization
import Testing
@testable import PushDemo
@testable import PushWorker

/// The demo runs the worker's pipeline end to end (mock cluster, simulator over TLS); its summary is checked here.
@Suite struct DemoTests {
    @Test func theDemoDeliversEveryValidEventAndReportsEveryBadOne() async throws {
        let lines = Mutex<[String]>([])
        try await Demo.run(pkiDirectory: TestPKI.directory) { line in lines.withLock { $0.append(line) } }
        let output = lines.withLock { $0.joined(separator: "\n") }
        #expect(output.contains("121 notifications recorded"), "\(output)")
        #expect(output.contains("each notification recorded exactly once"))
        #expect(!output.contains("status-10 shutdowns: 0"))
        // The HTTP/2 app: 44 accepted (the 3000-byte payload, priority 1, a critical alert and a Live Activity update
        // included), the gone token a delivery error, with Apple's ids, and a feedback event.
        #expect(output.contains("44 requests accepted on"))
        let gone = try #require(output.split(separator: "\n").first { $0.contains("e.g.") && $0.contains(#""reason":"unregistered""#) })
        #expect(gone.contains(#""apns_id":""#) && gone.contains(#""apns_unique_id":""#), "\(gone)")
        #expect(output.contains("the largest body 3020 bytes; 410 Unregistered: 1"))
        #expect(output.contains("'notification-errors': 9 events"))
        for reason in ["expired", "invalid_token", "invalid_token_format", "malformed_event", "payload_too_large", "unknown_app", "unregistered"] {
            #expect(output.contains("  \(reason): 1"), "\(reason)")
        }
        // The two tokens reported gone, sent to again: suppressed, not sent.
        #expect(output.contains("suppressed now: 2 tokens"))
        #expect(output.contains("  token_suppressed: 2"))
        #expect(output.contains("'suppressed-tokens': 2 records"))
        #expect(output.contains("'notification-feedback': 3 events"))
        #expect(output.contains("(0 left without an outcome)"))
        // Every one of the 174 records is committed: the three partitions' offsets add up to it.
        let committedLine = output.split(separator: "\n").first { $0.contains("offsets committed") }!
        let offsets = committedLine.split(separator: "]").dropFirst().compactMap { Int($0.split(separator: " ").first!.split(separator: ",").first!) }
            .filter { $0 >= 0 }
        #expect(offsets.reduce(0, +) == 174, "\(committedLine)")
    }

    /// `pushworker demo` as a user runs it: its last line is the summary's, and nothing is logged at error level
    /// (no Kafka client is left to see the in-process cluster go away).
    @Test func theDemoCommandEndsWithItsSummaryAndNoError() throws {
        let log = NSTemporaryDirectory() + "demo-stderr-\(getpid()).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let demo = try Child(BuiltExecutable.path("pushworker"), ["demo", "--pki", TestPKI.directory], standardError: log)
        let lines = demo.readToEnd().split(separator: "\n")
        #expect(demo.wait() == 0)
        #expect(lines.last?.hasPrefix("done in ") == true, "\(lines.suffix(3))")
        let stderr = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(!stderr.lowercased().contains("error") && !stderr.contains("brokers are down"), "\(stderr.suffix(2000))")
    }

    /// With no --pki the demo makes its own certificates: the same run, with nothing prepared beforehand.
    @Test func theDemoRunsOnAThrowAwayPKI() async throws {
        let directory = NSTemporaryDirectory() + "throwaway-pki-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try ThrowawayPKI.make(in: directory)
        let app = try NIOSSLCertificate.fromPEMFile("\(directory)/app.pem")[0]
        #expect(app.subjectName.first { $0.type == .userId }?.value == "com.example.app")
        let lines = Mutex<[String]>([])
        try await Demo.run(pkiDirectory: directory) { line in lines.withLock { $0.append(line) } }
        let output = lines.withLock { $0.joined(separator: "\n") }
        #expect(output.contains("121 notifications recorded"), "\(output)")
        #expect(output.contains("44 requests accepted on"))
        #expect(output.contains("(0 left without an outcome)"))
    }
}
