import Benchmark
import BenchmarkSamples
import NIOCore
import PushCore

/// A validated event with a 200-byte payload, as the HTTP/2 benchmarks start from.
func http2Event() -> NotificationEvent {
    var body = Array(#"{"aps":{"alert":{"title":"Your order has shipped","body":"Order #48213 is on its way"}}}"#.utf8)
    while body.count < 200 { body.insert(UInt8(ascii: "x"), at: body.count - 3) }
    return NotificationEvent(
        id: "order-shipped-0", app: "com.example.app", environment: nil,
        token: try! DeviceToken(hex: "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"),
        payload: body, expiration: .unspecified, priority: .immediate)
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.throughput, .wallClock, .mallocCountTotal, .instructions],
        scalingFactor: .mega,
        maxDuration: .seconds(3),
        maxIterations: 20
    )

    Benchmark("Frame encoding, 200-byte payload") { benchmark in
        let payload = Array(repeating: UInt8(ascii: "x"), count: 200)
        let notification = PushNotification(
            token: try! DeviceToken(hex: "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"),
            payload: payload, identifier: 1, expiration: 1_893_456_000, priority: .immediate)
        var buffer = ByteBufferAllocator().buffer(capacity: 1 << 20)
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            var n = notification
            n.identifier = UInt32(truncatingIfNeeded: i)
            NotificationEncoder.encode(n, format: .frame, into: &buffer)
            if buffer.writerIndex > (1 << 20) - 512 { buffer.clear() }
        }
        blackHole(buffer.writerIndex)
    }

    // The HTTP/2 request of a validated event (topic, push type, priority, expiration, derived apns-id by UUID
    // version 5) and its header fields and body written into a buffer; HPACK is not part of it.
    Benchmark("HTTP/2 request encoding, 200-byte payload") { benchmark in
        var event = http2Event()
        let app = HTTP2AppSettings(bundleID: "com.example.app")
        let ids = (0..<1024).map { "order-shipped-\($0)" }
        var buffer = ByteBufferAllocator().buffer(capacity: 1 << 20)
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            event.id = ids[i & 1023]
            let request = try! APNsRequest(event: event, app: app, recordTimestamp: 1_800_000_000, defaultTTL: 86400)
            request.writeFields(into: &buffer)
            if buffer.writerIndex > (1 << 20) - 1024 { buffer.clear() }
        }
        blackHole(buffer.writerIndex)
    }

    // The same with the event's own apns_id: no derivation.
    Benchmark("HTTP/2 request encoding, 200-byte payload, apns-id given") { benchmark in
        var event = http2Event()
        let app = HTTP2AppSettings(bundleID: "com.example.app")
        var buffer = ByteBufferAllocator().buffer(capacity: 1 << 20)
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            event.apnsID = APNsID(high: UInt64(truncatingIfNeeded: i), low: 0x8000_0000_0000_0001)
            let request = try! APNsRequest(event: event, app: app, recordTimestamp: 1_800_000_000, defaultTTL: 86400)
            request.writeFields(into: &buffer)
            if buffer.writerIndex > (1 << 20) - 1024 { buffer.clear() }
        }
        blackHole(buffer.writerIndex)
    }

    // A connection's header block for one request (HPACK: :path and apns-id literals, the repeated fields and the
    // provider token as indexes once the table holds them), as the worker writes one per stream.
    Benchmark("HTTP/2 request header block (HPACK), after the connection's first requests") { benchmark in
        let event = http2Event()
        let app = HTTP2AppSettings(bundleID: "com.example.app")
        let requests = (0..<1024).map { i in
            var event = event
            event.apnsID = APNsID(high: UInt64(i), low: 0x8000_0000_0000_0001)
            return try! APNsRequest(event: event, app: app, recordTimestamp: 1_800_000_000, defaultTTL: 86400)
        }
        let bearer = "bearer " + String(repeating: "e", count: 160)
        var encoder = RequestHeaderEncoder()
        var buffer = ByteBufferAllocator().buffer(capacity: 1 << 20)
        for request in requests.prefix(2) { encoder.write(request, authority: "api.push.apple.com", bearer: bearer, into: &buffer) }
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            encoder.write(requests[i & 1023], authority: "api.push.apple.com", bearer: bearer, into: &buffer)
            if buffer.writerIndex > (1 << 20) - 1024 { buffer.clear() }
        }
        blackHole(buffer.writerIndex)
    }

    Benchmark("HTTP/2 apns-id derivation (UUID version 5)") { benchmark in
        let ids = (0..<1024).map { "order-shipped-\($0)" }
        var sum: UInt64 = 0
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            sum &+= APNsID.derived(app: "com.example.app", eventID: ids[i & 1023]).low
        }
        blackHole(sum)
    }

    Benchmark("Event decode + validate + encode, from JSON bytes", configuration: .init(scalingFactor: .kilo)) { benchmark in
        let decoder = EventDecoder(format: .frame)
        var buffer = ByteBufferAllocator().buffer(capacity: 1 << 20)
        var identifier: UInt32 = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            guard case .success(let event) = decoder.decode(typicalEvent) else { fatalError("the sample event is valid") }
            identifier &+= 1
            let n = event.notification(identifier: identifier, recordTimestamp: 1_800_000_000, defaultTTL: 86400)
            NotificationEncoder.encode(n, format: .frame, into: &buffer)
            if buffer.writerIndex > (1 << 20) - 4096 { buffer.clear() }
        }
        blackHole(buffer.writerIndex)
    }

    // Token suppression (SPEC section 10): building the table from a topic of 1,000,000 records, and the check
    // each event to a token makes.
    let suppressed = (0..<1_000_000).map { i in
        var bytes = [UInt8](repeating: 0xAB, count: 32)
        for b in 0..<8 { bytes[b] = UInt8(truncatingIfNeeded: i >> (8 * b)) }
        return SuppressionKey(app: "com.example.app", environment: .production, token: try! DeviceToken(bytes: bytes))
    }

    Benchmark(
        "Suppression table, 1,000,000 tokens suppressed",
        configuration: .init(metrics: [.wallClock, .peakMemoryResidentDelta], scalingFactor: .one, maxIterations: 5)
    ) { benchmark in
        benchmark.startMeasurement()
        var table = SuppressionTable()
        for key in suppressed { table.suppress(key, invalidatedAt: 1_790_000_000, reason: .unregistered) }
        benchmark.stopMeasurement()
        precondition(table.count == 1_000_000)
        print("suppression table: \(table.count) tokens in \(table.memoryBytes) bytes (\(Double(table.memoryBytes) / 1e6) bytes per token)")
        blackHole(table)
    }

    Benchmark("Suppression check of an event's token (key digest and lookup), table of 1,000,000") { benchmark in
        var table = SuppressionTable()
        for key in suppressed { table.suppress(key, invalidatedAt: 1_790_000_000, reason: .unregistered) }
        // Half the tokens checked are suppressed, half are not.
        let tokens: [DeviceToken] = (0..<4096).map { (i: Int) -> DeviceToken in
            var bytes = [UInt8](repeating: 0xAB, count: 32)
            let n = i % 2 == 0 ? i * 211 : 2_000_000 + i
            for b in 0..<8 { bytes[b] = UInt8(truncatingIfNeeded: n >> (8 * b)) }
            return try! DeviceToken(bytes: bytes)
        }
        var found = 0
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            let key = SuppressionKey(app: "com.example.app", environment: .production, token: tokens[i & 4095])
            if case .suppressed = table.verdict(key, registeredAt: nil) { found += 1 }
        }
        precondition(found > 0)
        blackHole(found)
    }
}
