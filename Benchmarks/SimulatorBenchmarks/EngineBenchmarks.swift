import Benchmark
import Foundation
import NIOCore
import PushCore
import PushGateway

/// `pushworker simulate` as a child process (release build; `scripts/bench` sets PUSHWORKER_BIN).
final class SimulatorProcess {
    let process = Process()
    let gatewayPort: Int
    private let output = Pipe()

    init() throws {
        let binary = ProcessInfo.processInfo.environment["PUSHWORKER_BIN"] ?? ".build/release/pushworker"
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [
            "simulate", "--cert", "\(pki)/server.pem", "--key", "\(pki)/server-key.pem", "--ca", "\(pki)/ca.pem",
            "--gateway-port", "0", "--feedback-port", "0",
        ]
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
            let engine = try DeliveryEngine(endpoints: [endpoint], configuration: configuration) { _ in }
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
