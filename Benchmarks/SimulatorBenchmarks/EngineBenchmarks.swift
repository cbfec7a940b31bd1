import Benchmark
import Foundation
import NIOCore
import PushCore
import PushGateway
import Synchronization

/// `pushworker simulate` as a child process (release build; `scripts/bench` sets PUSHWORKER_BIN).
final class SimulatorProcess {
    let process = Process()
    let gatewayPort: Int
    /// The HTTP/2 API's port, when `--api-port` was among the arguments.
    let apiPort: Int?
    private let output = Pipe()

    init(_ extraArguments: [String] = []) throws {
        let binary = ProcessInfo.processInfo.environment["PUSHWORKER_BIN"] ?? ".build/release/pushworker"
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [
            "simulate", "--cert", "\(pki)/server.pem", "--key", "\(pki)/server-key.pem", "--ca", "\(pki)/ca.pem",
            "--gateway-port", "0", "--feedback-port", "0",
        ] + extraArguments
        process.standardOutput = output
        try process.run()
        // The start-up line: {"gateway": "127.0.0.1:A", "feedback": "127.0.0.1:B"}
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw NSError(domain: "simulate exited before listening", code: 1) }
            line += chunk
        }
        let json = try JSONSerialization.jsonObject(with: line.prefix { $0 != UInt8(ascii: "\n") }) as! [String: String]
        gatewayPort = Int(json["gateway"]!.split(separator: ":").last!)!
        apiPort = json["api"].flatMap { Int($0.split(separator: ":").last!) }
    }

    /// Stops it and returns how many notifications it accepted (from its summary line).
    @discardableResult
    func stop() -> Int {
        guard process.isRunning else { return -1 }
        process.terminate()
        process.waitUntilExit()
        let rest = output.fileHandleForReading.readDataToEndOfFile()
        guard let line = String(decoding: rest, as: UTF8.self).split(separator: "\n").last(where: { $0.contains("summary") }),
            let data = String(line).data(using: .utf8),
            let json = try? JSONSerialization.jsonObject(with: data) as? [String: [String: Any]],
            let accepted = json["summary"]?["accepted"] as? Int
        else { return -1 }
        return accepted
    }
}

let engineBenchmarks: @Sendable () -> Void = {
    for connections in [1, 2, 4] {
        // One iteration sends scaledIterations.count x 300 notifications and waits for every outcome.
        Benchmark(
            "Engine to simulator process, \(connections) connection\(connections == 1 ? "" : "s")",
            configuration: .init(metrics: [.throughput, .wallClock, .cpuTotal, .peakMemoryResident], scalingFactor: .kilo, maxDuration: .seconds(30), maxIterations: 5)
        ) { benchmark in
            let count = benchmark.scaledIterations.count * 300
            let simulator = try SimulatorProcess()
            defer { simulator.stop() }
            var configuration = DeliveryConfiguration()
            configuration.acceptanceWindow = .milliseconds(100)
            configuration.maxInFlight = 100_000
            let endpoint = AppEndpoint(
                app: "com.example.app", environment: .production, gatewayHost: "127.0.0.1",
                gatewayPort: simulator.gatewayPort, feedbackHost: "127.0.0.1", feedbackPort: 1, connections: connections,
                format: .frame, certificatePath: "\(pki)/app.pem", privateKeyPath: "\(pki)/app-key.pem",
                caPath: "\(pki)/ca.pem")
            let engine = try BoundedDeliveryEngine(endpoints: [endpoint], configuration: configuration) { _ in }
            let payload = Array(#"{"aps":{"alert":{"title":"Your order has shipped","body":"Order #48213 is on its way and arrives Tuesday."},"badge":3,"sound":"default"},"order":{"id":48213,"carrier":"ups","eta":"2026-11-24"},"x":"0123456789"}"#.utf8)
            let deliveries = (0..<count).map { i in
                Delivery(
                    ticket: UInt64(i),
                    notification: PushNotification(
                        token: try! DeviceToken(bytes: [UInt8(i & 0xFF), UInt8(i >> 8 & 0xFF)] + Array(repeating: 7, count: 30)),
                        payload: payload, identifier: 0, expiration: 0, priority: .immediate),
                    format: .frame)
            }
            engine.start()
            let key = AppKey(app: "com.example.app", environment: .production)
            // Connections are up before the clock starts.
            while engine.status(of: key)!.readyConnections < connections { await Task.yield() }
            benchmark.startMeasurement()
            try await engine.submit(deliveries, to: key)
            let drained = await engine.drain(timeout: .seconds(120))
            benchmark.stopMeasurement()
            precondition(drained, "not every notification was settled")
            _ = await engine.stop()
            let received = simulator.stop()
            precondition(received == count, "the simulator accepted \(received) of \(count)")
        }
    }
}

/// The engine over the HTTP/2 provider API into the simulator's API (another process, token authentication).
let http2EngineBenchmarks: @Sendable () -> Void = {
    for (connections, delay) in [(1, 0), (2, 0), (4, 0), (2, 50), (4, 50), (8, 50)] {
        // One iteration sends scaledIterations.count x 200 notifications and waits for every outcome.
        Benchmark(
            "HTTP/2 engine to simulator process, \(connections) connection\(connections == 1 ? "" : "s")\(delay > 0 ? ", responses after \(delay) ms" : "")",
            configuration: .init(metrics: [.throughput, .wallClock, .cpuTotal, .peakMemoryResident], scalingFactor: .kilo, maxDuration: .seconds(30), maxIterations: 5)
        ) { benchmark in
            let count = benchmark.scaledIterations.count * 200
            let simulator = try SimulatorProcess([
                "--api-port", "0", "--token-key", "\(pki)/token-key.pub.pem", "--team-id", "TEAM123456", "--key-id", "KEY1234567",
                "--response-delay-ms", "\(delay)",
            ])
            defer { simulator.stop() }
            var configuration = DeliveryConfiguration()
            configuration.maxAttempts = 1
            let endpoint = AppEndpoint(
                app: "com.example.app", environment: .production, gatewayHost: "127.0.0.1", gatewayPort: 1,
                feedbackHost: "127.0.0.1", feedbackPort: 1, connections: connections, format: .frame,
                certificatePath: nil, privateKeyPath: nil, caPath: "\(pki)/ca.pem",
                http2: HTTP2Endpoint(
                    host: "127.0.0.1", port: simulator.apiPort!,
                    authentication: .token(teamID: "TEAM123456", keyID: "KEY1234567", signingKeyPath: "\(pki)/AuthKey_KEY1234567.p8")))
            let failures = Atomic<Int>(0)
            let engine = try BoundedDeliveryEngine(endpoints: [endpoint], configuration: configuration) { outcomes in
                let failed = outcomes.count { $0.result != .accepted }
                if failed > 0 { failures.add(failed, ordering: .relaxed) }
            }
            let payload = #"{"aps":{"alert":{"title":"Your order has shipped","body":"Order #48213 is on its way and arrives Tuesday."},"badge":3,"sound":"default"},"order":{"id":48213,"carrier":"ups","eta":"2026-11-24"},"x":"0123456789"}"#
            let now = Int64(Date().timeIntervalSince1970)
            let deliveries = (0..<count).map { i in
                let json = #"{"id":"e\#(i)","app":"com.example.app","token":"\#(String(format: "%064x", i + 1))","payload":\#(payload)}"#
                guard case .success(let event) = EventDecoder.http2.decode(json),
                    let request = try? APNsRequest(event: event, app: HTTP2AppSettings(bundleID: "com.example.app"), recordTimestamp: now, defaultTTL: 86400)
                else { fatalError("sample event") }
                return HTTP2Delivery(ticket: DeliveryTicket(UInt64(i)), request: request)
            }
            engine.start()
            let key = AppKey(app: "com.example.app", environment: .production)
            while engine.status(of: key)!.readyConnections < connections { await Task.yield() }
            benchmark.startMeasurement()
            try await engine.submit(deliveries, to: key)
            let drained = await engine.drain(timeout: .seconds(120))
            benchmark.stopMeasurement()
            precondition(drained, "not every notification was settled")
            precondition(failures.load(ordering: .relaxed) == 0, "\(failures.load(ordering: .relaxed)) notifications failed")
            _ = await engine.stop()
        }
    }
}
