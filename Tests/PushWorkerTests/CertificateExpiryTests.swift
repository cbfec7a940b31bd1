import Foundation
import Logging
import Prometheus
import PushCore
import PushGateway
import PushTestSupport
import Testing

@testable import PushDemo
@testable import PushWorker

@Suite struct CertificateExpiryTests {
    static let app = AppKey(app: "com.example.app", environment: .production)

    /// Quiet while more than 30 days remain, a warning naming what is left within them, an error once passed.
    @Test func theStartWarnsWithinThirtyDaysAndErrsOnceExpired() throws {
        let now: Int64 = 1_800_000_000
        func notice(_ remaining: Int64) -> (level: Logger.Level, message: String)? {
            CertificateExpiry(app: Self.app, notAfter: now + remaining).notice(now: now).map { ($0.level, "\($0.message)") }
        }
        #expect(notice(365 * 86_400) == nil)
        #expect(notice(30 * 86_400) == nil, "thirty days left is not yet within them")
        let warning = try #require(notice(30 * 86_400 - 1))
        #expect(warning.level == .warning)
        #expect(warning.message.contains("expires in 29 days"))
        #expect(try #require(notice(86_400 + 5)).message.contains("expires in 1 day:"))
        #expect(try #require(notice(5 * 3600 + 5)).message.contains("expires in 5 hours:"))
        #expect(try #require(notice(3600)).message.contains("expires in 1 hour:"))
        #expect(try #require(notice(3599)).message.contains("expires in less than an hour:"))
        for passed: Int64 in [0, -1, -400 * 86_400] {
            let error = try #require(notice(passed))
            #expect(error.level == .error)
            #expect(error.message.contains("has expired"))
        }
        #expect(CertificateExpiry(app: Self.app, notAfter: 1_800_000_000).notAfterText == "2027-01-15T08:00:00Z")
    }

    /// A worker whose app's certificate ends in two days (the throw-away PKI's) or ended a day ago: its start says
    /// so in the log, and `/metrics` carries the end as UNIX seconds.
    @Test(arguments: [false, true]) func aWorkerReportsWhenItsCertificateEnds(expired: Bool) throws {
        let folder = NSTemporaryDirectory() + "certificate-expiry-\(getpid())-\(expired)"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Whole seconds: a certificate's validity has no fraction.
        let made = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - (expired ? 3 * 86_400 : 0)).rounded(.down))
        try ThrowawayPKI.make(in: folder, now: made)
        let notAfter = Int64(made.timeIntervalSince1970) + 2 * 86_400
        let configuration = try WorkerConfiguration(yaml: """
            kafka: {brokers: "127.0.0.1:1", properties: {"log_level": "0"}}
            apps:
              - bundle_id: com.example.app
                certificate: \(folder)/app.pem
                private_key: \(folder)/app-key.pem
            """, environment: [:])
        let capture = CapturingLogHandler()
        let registry = PrometheusCollectorRegistry()
        let worker = try Worker(configuration: configuration, logger: Logger(label: "worker") { _ in capture }, registry: registry)
        #expect(worker.certificateExpiries == [CertificateExpiry(app: Self.app, notAfter: notAfter)])

        var text: [UInt8] = []
        registry.emit(into: &text)
        let line = try #require(String(decoding: text, as: UTF8.self).split(separator: "\n").first {
            $0.hasPrefix(#"pushworker_certificate_expiry_timestamp_seconds{app="com.example.app/production"} "#)
        })
        #expect(Double(line.split(separator: " ").last!) == Double(notAfter))

        // check-config says the same beside the certificate's line.
        let check = try configuration.check()
        #expect(check.contains(expired ? "WARNING: the client certificate has expired" : "WARNING: the client certificate expires in "), "\(check)")

        worker.logStart()
        let notices = capture.lines.withLock { $0 }.filter { $0.message.contains("client certificate") }
        #expect(notices.count == 1)
        #expect(notices.first?.level == (expired ? .error : .warning))
        #expect(notices.first?.metadata["app"] == "com.example.app/production")
        // Two days less the moments since it was made: 1 day left, or 2 within the same second.
        let said = notices.first?.message ?? ""
        #expect(expired ? said.contains("has expired") : said.contains("expires in 1 day:") || said.contains("expires in 2 days:"), "\(said)")
    }
}
