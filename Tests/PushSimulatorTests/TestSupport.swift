import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PushCore
import PushTestSupport
@testable import PushSimulator

extension TestPKI {
    static func simulatorConfiguration() -> SimulatorConfiguration {
        var c = SimulatorConfiguration(
            certificatePath: path("server.pem"), privateKeyPath: path("server-key.pem"), caPath: path("ca.pem"))
        c.recordInMemory = true
        return c
    }
}

/// Runs `body` against a started simulator and stops it afterwards, whatever happens.
func withSimulator<T: Sendable>(
    _ configuration: SimulatorConfiguration = TestPKI.simulatorConfiguration(),
    logger: Logger = Logger(label: "pushworker.simulator"),
    _ body: (GatewaySimulator, SimulatorAddresses) async throws -> T
) async throws -> T {
    let simulator = try GatewaySimulator(configuration: configuration, logger: logger)
    let addresses = try await simulator.start()
    do {
        let result = try await body(simulator, addresses)
        await simulator.stop()
        return result
    } catch {
        await simulator.stop()
        throw error
    }
}

/// A minimal TLS client: connects with a client certificate, writes bytes, and reads until the server closes.
enum TestClient {
    static func tlsContext(certificate: String = "app") throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(TestPKI.path("ca.pem"))
        tls.certificateChain = try NIOSSLCertificate.fromPEMFile(TestPKI.path("\(certificate).pem")).map { .certificate($0) }
        tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: TestPKI.path("\(certificate)-key.pem"), format: .pem))
        return try NIOSSLContext(configuration: tls)
    }

    static func connect(port: Int, certificate: String = "app") async throws -> NIOAsyncChannel<ByteBuffer, ByteBuffer> {
        let context = try tlsContext(certificate: certificate)
        return try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
    }

    /// Sends `bytes` and returns what the server sent until it closed the connection, or, once a whole error
    /// response (6 bytes) arrived, closes it as a provider does.
    static func exchange(_ bytes: [UInt8], port: Int, certificate: String = "app", untilErrorResponse: Bool = true) async throws -> [UInt8] {
        let channel = try await connect(port: port, certificate: certificate)
        return try await channel.executeThenClose { inbound, outbound in
            if !bytes.isEmpty { try await outbound.write(ByteBuffer(bytes: bytes)) }
            var received: [UInt8] = []
            do {
                for try await chunk in inbound {
                    received += chunk.readableBytesView
                    if untilErrorResponse && received.first == 8 && received.count >= ErrorResponse.size { break }
                }
            } catch let error as NIOSSLError where error == .uncleanShutdown {
                // An abrupt close: what arrived before it stands.
            }
            return received
        }
    }
}

/// A notification in `format` with a token of `tokenLength` bytes made from `tokenByte`. Built by hand rather than
/// by the encoder, so that tokens the encoder would never write (over 100 bytes) can be sent too.
func frame(
    identifier: UInt32, tokenByte: UInt8 = 0xAB, payload: String = #"{"aps":{"alert":"Hi"}}"#,
    priority: Priority = .immediate, format: NotificationFormat = .frame, tokenLength: Int = 32
) -> [UInt8] {
    func u16(_ v: Int) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }
    func u32(_ v: UInt32) -> [UInt8] { withUnsafeBytes(of: v.bigEndian, Array.init) }
    let token = Array(repeating: tokenByte, count: tokenLength)
    let body = Array(payload.utf8)
    switch format {
    case .frame:
        let items = [1] + u16(token.count) + token + [2] + u16(body.count) + body + [3, 0, 4] + u32(identifier)
            + [4, 0, 4, 0, 0, 0, 0] + [5, 0, 1, priority.rawValue]
        return [2] + u32(UInt32(items.count)) + items
    case .enhanced:
        return [1] + u32(identifier) + u32(0) + u16(token.count) + token + u16(body.count) + body
    case .simple:
        return [0] + u16(token.count) + token + u16(body.count) + body
    }
}

/// An unknown command: the gateway answers 128 naming identifier 0 and closes, after everything before it. Tests
/// end a stream of valid notifications with it, so that the answer proves the notifications were handled.
let sentinel: [UInt8] = [0x09]
let sentinelAnswer: [UInt8] = [8, 128, 0, 0, 0, 0]

func errorResponse(_ status: UInt8, _ identifier: UInt32) -> [UInt8] {
    [8, status] + withUnsafeBytes(of: identifier.bigEndian, Array.init)
}
