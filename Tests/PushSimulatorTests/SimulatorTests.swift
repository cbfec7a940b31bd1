import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PushCore
import PushTestSupport
import Testing
@testable import PushSimulator

/// Drives the simulator over real TLS with a client certificate from the test PKI.
@Suite(.serialized) struct SimulatorTests {
    @Test func aValidFrameIsRecordedWithItsApp() async throws {
        try await withSimulator { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            let answer = try await TestClient.exchange(frame(identifier: 7) + sentinel, port: addresses.gatewayPort)
            #expect(answer == sentinelAnswer)
            let recorded = simulator.recorded
            #expect(recorded.count == 1)
            #expect(recorded.first?.app == "com.example.app")
            #expect(recorded.first?.identifier == 7)
            #expect(recorded.first?.token == Array(repeating: 0xAB, count: 32))
            #expect(recorded.first?.payload == Array(#"{"aps":{"alert":"Hi"}}"#.utf8))
            #expect(recorded.first?.command == 2)
            #expect(recorded.first?.connection == 1)
        }
    }

    @Test func allThreeFormatsAreAccepted() async throws {
        try await withSimulator { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            let stream = frame(identifier: 1) + frame(identifier: 2, format: .enhanced) + frame(identifier: 3, format: .simple)
            #expect(try await TestClient.exchange(stream + sentinel, port: addresses.gatewayPort) == sentinelAnswer)
            #expect(simulator.recorded.map(\.command) == [2, 1, 0])
            #expect(simulator.recorded.map(\.identifier) == [1, 2, 0])
        }
    }

    /// Each violation gets its status and identifier, the connection closes, and nothing after it is recorded.
    @Test(arguments: [
        ("unknown command", [UInt8]([0x07, 1, 2, 3]), errorResponse(128, 0)),
        ("payload not JSON", frame(identifier: 11, payload: "hello"), errorResponse(128, 11)),
        ("payload without aps", frame(identifier: 12, payload: #"{"alert":"x"}"#), errorResponse(128, 12)),
        ("aps not an object", frame(identifier: 13, payload: #"{"aps":1}"#), errorResponse(128, 13)),
        ("priority 10, content-available only", frame(identifier: 14, payload: #"{"aps":{"content-available":1}}"#), errorResponse(128, 14)),
        ("token over 100 bytes", frame(identifier: 15, tokenLength: 101), errorResponse(5, 15)),
        ("payload over 2048 bytes", frame(identifier: 16, payload: #"{"aps":{},"x":"\#(String(repeating: "y", count: 2040))"}"#), errorResponse(7, 16)),
        ("legacy payload over 256 bytes", frame(identifier: 17, payload: #"{"aps":{},"x":"\#(String(repeating: "y", count: 250))"}"#, format: .enhanced), errorResponse(7, 17)),
        ("frame without payload", [2, 0, 0, 0, 42, 1, 0, 32] + Array(repeating: 0xAB, count: 32) + [3, 0, 4, 0, 0, 0, 18], errorResponse(4, 18)),
        ("frame without token", [2, 0, 0, 0, 7, 3, 0, 4, 0, 0, 0, 19], errorResponse(2, 19)),
    ] as [(String, [UInt8], [UInt8])])
    func malformedInput(name: String, bad: [UInt8], expected: [UInt8]) async throws {
        try await withSimulator { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            let stream = frame(identifier: 1) + bad + frame(identifier: 2) + frame(identifier: 3)
            let answer = try await TestClient.exchange(stream, port: addresses.gatewayPort)
            #expect(answer == expected, "\(name)")
            #expect(simulator.recorded.map(\.identifier) == [1], "\(name)")
            #expect(simulator.summary.errorResponses[expected[1]] == 1)
        }
    }

    @Test func invalidTokensGetStatusEightAndJoinTheFeedbackList() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        configuration.invalidTokens = [Array(repeating: 0xEE, count: 32)]
        try await withSimulator(configuration) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            let stream = frame(identifier: 1) + frame(identifier: 2, tokenByte: 0xEE) + frame(identifier: 3)
            #expect(try await TestClient.exchange(stream, port: addresses.gatewayPort) == errorResponse(8, 2))
            #expect(simulator.recorded.map(\.identifier) == [1])
            var feedback = ByteBuffer(bytes: try await TestClient.exchange([], port: addresses.feedbackPort, untilErrorResponse: false))
            let tuple = try FeedbackTuple.decode(from: &feedback)
            #expect(tuple?.token.bytes == Array(repeating: 0xEE, count: 32))
            #expect(feedback.readableBytes == 0)
            // Sent once, then cleared.
            #expect(try await TestClient.exchange([], port: addresses.feedbackPort, untilErrorResponse: false).isEmpty)
            // Another app's list never held it.
            #expect(try await TestClient.exchange([], port: addresses.feedbackPort, certificate: "other-app", untilErrorResponse: false).isEmpty)
        }
    }

    @Test func shutdownEveryNamesTheLastAcceptedNotification() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        configuration.shutdownEvery = 3
        try await withSimulator(configuration) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            let stream = (1...5).flatMap { frame(identifier: UInt32(100 + $0)) }
            #expect(try await TestClient.exchange(stream, port: addresses.gatewayPort) == errorResponse(10, 103))
            #expect(simulator.recorded.map(\.identifier) == [101, 102, 103])
            // A new connection starts counting again.
            #expect(try await TestClient.exchange(stream, port: addresses.gatewayPort) == errorResponse(10, 103))
            // (Compared with each other, not with 1 and 2: tests run in parallel, and another test's client may
            // have been given this port for a connection of its own.)
            let connections = simulator.recorded.map(\.connection)
            #expect(Set(connections[0..<3]).count == 1 && Set(connections[3...]).count == 1)
            #expect(connections[3] > connections[0])
        }
    }

    @Test func closeEveryClosesWithoutAnErrorResponse() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        configuration.closeEvery = 2
        try await withSimulator(configuration) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            let stream = (1...5).flatMap { frame(identifier: UInt32($0)) }
            #expect(try await TestClient.exchange(stream, port: addresses.gatewayPort).isEmpty)
            #expect(simulator.recorded.map(\.identifier) == [1, 2])
            #expect(simulator.summary.abruptCloses == 1)
        }
    }

    @Test func processingErrorsAreDrawnFromTheSeed() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        configuration.processingErrorRate = 1
        try await withSimulator(configuration) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            #expect(try await TestClient.exchange(frame(identifier: 9), port: addresses.gatewayPort) == errorResponse(1, 9))
            #expect(simulator.recorded.isEmpty)
        }
        // At rate 0.5: about half fail, and which ones is the seed's choice (another seed, other verdicts).
        func verdicts(seed: UInt64) -> [Bool] {
            var half = TestPKI.simulatorConfiguration()
            half.processingErrorRate = 0.5
            half.seed = seed
            var session = GatewaySession(configuration: half, connection: 1)
            let n = DecodedNotification(format: .frame, token: [1], payload: Array(#"{"aps":{}}"#.utf8), identifier: 1, expiration: 0, priority: 10)
            return (1...1000).map { _ in session.receive(.notification(n)) != .accept }
        }
        let failures = verdicts(seed: 1).count { $0 }
        #expect((400...600).contains(failures), "\(failures) of 1000")
        #expect(verdicts(seed: 1) != verdicts(seed: 2))
    }

    /// The simple format has no error responses: a bad command-0 notification closes the connection silently.
    @Test func aBadSimpleFormatNotificationClosesTheConnectionWithoutAnAnswer() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        configuration.invalidTokens = [Array(repeating: 0xEE, count: 32)]
        try await withSimulator(configuration) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            let stream = frame(identifier: 0, format: .simple) + frame(identifier: 0, tokenByte: 0xEE, format: .simple)
                + frame(identifier: 0, format: .simple)
            #expect(try await TestClient.exchange(stream, port: addresses.gatewayPort).isEmpty)
            #expect(simulator.recorded.count == 1)
            #expect(simulator.summary.errorResponses.isEmpty)
            #expect(simulator.summary.silentCloses == [8: 1])
            // A malformed command-0 notification too (token length 0).
            #expect(try await TestClient.exchange([0, 0, 0, 0, 2, 0x7B, 0x7D], port: addresses.gatewayPort).isEmpty)
            #expect(simulator.summary.silentCloses == [8: 1, 2: 1])
        }
    }

    @Test func refusedConnectionsFailThenTheGatewayAnswers() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        configuration.refuseConnections = 2
        try await withSimulator(configuration) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            for _ in 1...2 {
                // The connection is reset before any TLS: depending on when the reset lands, the connect, the read or
                // the handshake fails.
                let error = await #expect(throws: (any Error).self) {
                    _ = try await TestClient.exchange([], port: addresses.gatewayPort, untilErrorResponse: false)
                }
                let kind = error is NIOSSLError || error is IOError || error is NIOConnectionError || error is ChannelError
                #expect(kind, "\(String(describing: error))")
            }
            #expect(try await TestClient.exchange(frame(identifier: 1) + sentinel, port: addresses.gatewayPort) == sentinelAnswer)
            #expect(simulator.summary.refusedConnections == 2)
            #expect(simulator.recorded.map(\.connection) == [3])
        }
    }

    @Test func aClientCertificateFromAnUnrelatedCAIsRefused() async throws {
        try await withSimulator { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            for port in [addresses.gatewayPort, addresses.feedbackPort] {
                // Nothing is written: a write could fail on the closed channel before the read reports the alert.
                let error = await #expect(throws: BoringSSLError.self) {
                    _ = try await TestClient.exchange([], port: port, certificate: "rogue-client", untilErrorResponse: false)
                }
                #expect(String(describing: error).contains("UNKNOWN_CA"), "\(String(describing: error))")
            }
            #expect(simulator.recorded.isEmpty)
            #expect(simulator.summary.feedbackConnections == 0)
        }
    }

    @Test func feedbackFileTuplesArriveOncePerApp() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        let everyone = FeedbackTuple(timestamp: 1_700_000_000, token: try DeviceToken(hex: "aabb"))
        let onlyApp = FeedbackTuple(timestamp: 1_700_000_001, token: try DeviceToken(hex: "ccdd"))
        configuration.feedback = try FeedbackEntry.parseFile("""
            # token time [app]
            aabb 1700000000
            ccdd 1700000001 com.example.app
            """)
        try await withSimulator(configuration) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            var first = ByteBuffer(bytes: try await TestClient.exchange([], port: addresses.feedbackPort, untilErrorResponse: false))
            #expect(try FeedbackTuple.decode(from: &first) == everyone)
            #expect(try FeedbackTuple.decode(from: &first) == onlyApp)
            #expect(first.readableBytes == 0)
            #expect(try await TestClient.exchange([], port: addresses.feedbackPort, untilErrorResponse: false).isEmpty)
            var other = ByteBuffer(bytes: try await TestClient.exchange([], port: addresses.feedbackPort, certificate: "other-app", untilErrorResponse: false))
            #expect(try FeedbackTuple.decode(from: &other) == everyone)
            #expect(other.readableBytes == 0)
            #expect(simulator.summary.feedbackTuplesSent == 3)
        }
    }

    @Test func recordFileHoldsOneJSONLinePerAcceptedNotification() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        let path = "\(TestPKI.directory)/../.build/test-record-\(getpid()).jsonl"
        configuration.recordPath = path
        try await withSimulator(configuration) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            let stream = (1...3).flatMap { frame(identifier: UInt32($0)) }
            #expect(try await TestClient.exchange(stream + sentinel, port: addresses.gatewayPort) == sentinelAnswer)
            await simulator.flushRecord()
        }
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 3)
        let first = try JSONValue(parsing: String(lines[0]))
        #expect(first["identifier"] == JSONValue.number(1))
        #expect(first["token"] == JSONValue.string(String(repeating: "ab", count: 32)))
        #expect(first["payload"]?["aps"]?["alert"] == JSONValue.string("Hi"))
        #expect(first["command"] == JSONValue.number(2))
        #expect(first["app"] == JSONValue.string("com.example.app"))
        try? FileManager.default.removeItem(atPath: path)
    }

    /// A record file that cannot take its lines (a full device) loses them counted and logged, not silently.
    @Test func recordLinesThatCannotBeWrittenAreCountedAndLogged() async throws {
        var configuration = TestPKI.simulatorConfiguration()
        configuration.recordPath = "/dev/full"
        let log = CapturingLogHandler()
        try await withSimulator(configuration, logger: Logger(label: "test") { _ in log }) { (simulator: GatewaySimulator, addresses: SimulatorAddresses) async throws in
            #expect(simulator.summary.recordLinesLost == 0)
            let stream = (1...3).flatMap { frame(identifier: UInt32($0)) }
            #expect(try await TestClient.exchange(stream + sentinel, port: addresses.gatewayPort) == sentinelAnswer)
            await simulator.flushRecord()
            #expect(simulator.summary.accepted == 3)
            #expect(simulator.summary.recordLinesLost == 3)
            #expect(simulator.summary.json.hasSuffix(#""record_lines_lost": 3}"#))
            let stream2 = (4...5).flatMap { frame(identifier: UInt32($0)) }
            #expect(try await TestClient.exchange(stream2 + sentinel, port: addresses.gatewayPort) == sentinelAnswer)
            await simulator.flushRecord()
            #expect(simulator.summary.recordLinesLost == 5)
        }
        let errors = log.lines.withLock { $0.filter { $0.level == .error } }
        #expect(errors.count == 1, "logged once, however many batches fail")
        #expect(errors.first?.metadata["error"] == "No space left on device")
    }
}

@Suite struct SimulatorInputTests {
    @Test func feedbackFileLines() throws {
        #expect(try FeedbackEntry.parseFile("aabb 5\n\n# c\n<ccdd> 6 com.x\n").count == 2)
        #expect(throws: SimulatorInputError.self) { try FeedbackEntry.parseFile("aabb\n") }
        #expect(throws: SimulatorInputError.self) { try FeedbackEntry.parseFile("zz 5\n") }
        #expect(try parseTokenList("aabb\n <cc dd> \n# x\n") == [[0xAA, 0xBB], [0xCC, 0xDD]])
        #expect(throws: SimulatorInputError.self) { try parseTokenList("xyz\n") }
    }

    @Test func payloadInspection() {
        #expect(PayloadInspection(Array(#"{"aps":{}}"#.utf8)).problem == nil)
        #expect(PayloadInspection(Array(#"{"aps":{"content-available":1}}"#.utf8)).contentAvailableOnly)
        #expect(!PayloadInspection(Array(#"{"aps":{"content-available":1,"badge":1}}"#.utf8)).contentAvailableOnly)
        #expect(PayloadInspection(Array("[1]".utf8)).problem != nil)
        #expect(PayloadInspection(Array(#"{"aps":[]}"#.utf8)).problem != nil)
        #expect(PayloadInspection(Array(#"{"x":1}"#.utf8)).problem != nil)
        #expect(PayloadInspection(Array(#"{"aps":{}"#.utf8)).problem != nil)
    }
}
