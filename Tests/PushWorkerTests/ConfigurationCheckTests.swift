import Foundation
import PushTestSupport
import Testing
@testable import PushWorker

@Suite struct ConfigurationCheckTests {
    func configuration(
        certificate: String = "app.pem", key: String = "app-key.pem", app: String = "", extra: String = "",
        environment: [String: String] = [:]
    ) throws -> WorkerConfiguration {
        try WorkerConfiguration(yaml: """
            apps:
              - bundle_id: com.example.app
                certificate: \(TestPKI.path(certificate))
                private_key: \(TestPKI.path(key))
                gateway: "127.0.0.1:2195"
            \(app)
            \(extra)
            """, environment: environment)
    }

    func checkError(_ c: WorkerConfiguration) -> ConfigurationError? {
        do {
            _ = try c.check()
            return nil
        } catch {
            return error
        }
    }

    @Test func aGoodConfigurationDescribesThePlan() throws {
        let plan = try configuration(extra: "tls: {ca_file: \(TestPKI.path("ca.pem"))}").check()
        #expect(plan.contains("com.example.app (production): gateway 127.0.0.1:2195, feedback feedback.push.apple.com:2196, 2 connections, frame format"))
        #expect(plan.contains("at most 100000 notifications/s per process"))
        #expect(!plan.contains("WARNING"))
    }

    @Test func unloadableFilesAreNamedByTheirKey() throws {
        #expect(checkError(try configuration(key: "missing.pem"))?.key == "apps[0].private_key")
        #expect(checkError(try configuration(certificate: "missing.pem"))?.key == "apps[0].certificate")
        #expect(checkError(try configuration(key: "other-app-key.pem"))?.key == "apps[0].private_key")  // not the certificate's key
        #expect(checkError(try configuration(extra: "tls: {ca_file: /nonexistent.pem}"))?.key == "tls.ca_file")
        let passphrase = try configuration()
        var withPassphrase = passphrase
        withPassphrase.apps[0].privateKeyPassphraseFile = "/nonexistent-passphrase"
        #expect(checkError(withPassphrase)?.key == "apps[0].private_key_passphrase_file")
    }

    @Test func aCertificateForAnotherAppIsFlagged() throws {
        let plan = try configuration(certificate: "other-app.pem", key: "other-app-key.pem").check()
        #expect(plan.contains("WARNING: the certificate is for com.example.other, not com.example.app"))
    }

    @Test func anEncryptedKeyLoadsWithItsPassphraseFromAFileOrTheEnvironment() throws {
        let passphrase = try String(contentsOfFile: TestPKI.path("app-key-passphrase.txt"), encoding: .utf8)
            .trimmingCharacters(in: .newlines)
        let fromFile = try configuration(
            key: "app-key-encrypted.pem", app: "    private_key_passphrase_file: \(TestPKI.path("app-key-passphrase.txt"))")
        #expect(try fromFile.loadCredentials().count == 1)
        let variable = "PUSHWORKER_APPS_0_PRIVATE_KEY_PASSPHRASE"
        let fromEnvironment = try configuration(key: "app-key-encrypted.pem", environment: [variable: passphrase])
        #expect(try fromEnvironment.loadCredentials().count == 1)
        let plan = try fromEnvironment.check()
        #expect(plan.contains("key passphrase from \(variable)"))
        #expect(!plan.contains(passphrase))
        #expect(!"\(fromEnvironment)".contains(passphrase))  // the configuration never prints it
        // The environment wins over the file.
        let both = try configuration(
            key: "app-key-encrypted.pem", app: "    private_key_passphrase_file: \(TestPKI.path("app-key-passphrase.txt"))",
            environment: [variable: "wrong"])
        let wrong = checkError(both)
        #expect(wrong?.key == "apps[0].private_key")
        #expect(wrong?.problem.contains("wrong passphrase?") == true)
        let none = checkError(try configuration(key: "app-key-encrypted.pem"))
        #expect(none?.key == "apps[0].private_key")
        #expect(none?.problem.contains("needs a passphrase") == true)
    }

    @Test func aPassphraseIsNeverReadFromTheFile() throws {
        let error = try #require(throws: ConfigurationError.self) {
            try configuration(key: "app-key-encrypted.pem", app: "    private_key_passphrase: hunter2")
        }
        #expect(error.key == "apps[0].private_key_passphrase")
        #expect("\(error)".contains("PUSHWORKER_APPS_0_PRIVATE_KEY_PASSPHRASE"))
        #expect(!"\(error)".contains("hunter2"))
    }
}
