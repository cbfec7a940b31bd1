import Benchmark
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import PushCore
import PushSimulator

/// The test PKI (`scripts/bench` runs `scripts/gen-pki` first).
let pki = ProcessInfo.processInfo.environment["PUSHWORKER_PKI"] ?? FileManager.default.currentDirectoryPath + "/pki"

/// `count` frames of a typical 200-byte payload, identifiers 1...count, in one buffer.
func encodedFrames(_ count: Int) -> ByteBuffer {
    let payload = Array(#"{"aps":{"alert":{"title":"Your order has shipped","body":"Order #48213 is on its way and arrives Tuesday."},"badge":3,"sound":"default"},"order":{"id":48213,"carrier":"ups","eta":"2026-11-24"},"x":"0123456789"}"#.utf8)
    let token = try! DeviceToken(hex: "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad")
    var buffer = ByteBufferAllocator().buffer(capacity: count * 260)
    for i in 1...count {
        NotificationEncoder.encode(
            PushNotification(token: token, payload: payload, identifier: UInt32(i), expiration: 0, priority: .immediate),
            format: .frame, into: &buffer)
    }
    return buffer
}

func clientContext() throws -> NIOSSLContext {
    var tls = TLSConfiguration.makeClientConfiguration()
    tls.trustRoots = .file("\(pki)/ca.pem")
    tls.certificateChain = try NIOSSLCertificate.fromPEMFile("\(pki)/app.pem").map { .certificate($0) }
    tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: "\(pki)/app-key.pem", format: .pem))
    return try NIOSSLContext(configuration: tls)
}

/// Sends `frames` on one connection in 64 KiB writes and returns when the gateway's status-10 answer arrives: with
/// `shutdownEvery` equal to the count, that answer names the last notification, so every one was handled.
func blast(_ frames: ByteBuffer, port: Int, context: NIOSSLContext) async throws {
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
            }
        }
    try await channel.executeThenClose { inbound, outbound in
        var rest = frames
        while rest.readableBytes > 0 {
            try await outbound.write(rest.readSlice(length: min(65536, rest.readableBytes))!)
        }
        var answer: [UInt8] = []
        for try await chunk in inbound {
            answer += chunk.readableBytesView
            if answer.count >= 6 { break }
        }
        precondition(answer.count == 6 && answer[1] == 10, "expected a status-10 answer, got \(answer)")
    }
}

let benchmarks: @Sendable () -> Void = {
    engineBenchmarks()
    http2EngineBenchmarks()
    Benchmark.defaultConfiguration = .init(
        metrics: [.throughput, .wallClock, .cpuTotal, .peakMemoryResident],
        scalingFactor: .kilo, maxDuration: .seconds(20), maxIterations: 10)

    for recording in [false, true] {
        let name = "Simulator, one TLS connection, 200-byte payloads" + (recording ? ", with --record" : "")
        // One iteration sends scaledIterations.count x 200 notifications.
        Benchmark(name) { benchmark in
            let count = benchmark.scaledIterations.count * 200
            let frames = encodedFrames(count)
            var configuration = SimulatorConfiguration(
                certificatePath: "\(pki)/server.pem", privateKeyPath: "\(pki)/server-key.pem", caPath: "\(pki)/ca.pem")
            configuration.shutdownEvery = count
            if recording { configuration.recordPath = NSTemporaryDirectory() + "simulator-bench-record.jsonl" }
            let simulator = try GatewaySimulator(configuration: configuration)
            let addresses = try await simulator.start()
            let context = try clientContext()
            benchmark.startMeasurement()
            try await blast(frames, port: addresses.gatewayPort, context: context)
            benchmark.stopMeasurement()
            await simulator.stop()
        }
    }
}
