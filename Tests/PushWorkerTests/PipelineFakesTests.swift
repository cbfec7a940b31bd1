import Foundation
import PushCore
import Synchronization
import Testing
@testable import PushGateway
@testable import PushKafka
@testable import PushWorker

/// The pipeline around a fake engine and a fake output sink: no Kafka, no TLS, no simulator.
@Suite struct PipelineFakesTests {
    /// Answers every delivery at once: accepted, or status 8 for the tokens it refuses.
    final class FakeDelivery: BinaryOnlyDelivery {
        let hooks: DeliveryHooks
        let refused: Set<DeviceToken>
        let enqueued = Atomic<Int>(0)

        init(hooks: DeliveryHooks, refused: Set<DeviceToken>) {
            self.hooks = hooks
            self.refused = refused
        }


        func enqueue(binary deliveries: [Delivery]) {
            enqueued.add(deliveries.count, ordering: .relaxed)
            hooks.onOutcomes(deliveries.map { d in
                refused.contains(d.tokenSource.token)
                    ? .failed(d, .invalidToken, status: .invalidToken, "status 8") : .accepted(d)
            })
        }
    }

    /// Holds every delivery until the test answers them all, accepted.
    final class HoldingDelivery: BinaryOnlyDelivery {
        let hooks: DeliveryHooks
        private let held = Mutex<[Delivery]>([])

        init(hooks: DeliveryHooks) { self.hooks = hooks }

        func enqueue(binary deliveries: [Delivery]) { held.withLock { $0 += deliveries } }

        var count: Int { held.withLock { $0.count } }

        func acceptAll() {
            let answered = held.withLock { h in
                defer { h = [] }
                return h
            }
            hooks.onOutcomes(answered.map { .accepted($0) })
        }
    }

    /// Keeps what is produced; acknowledges it when the test says so.
    final class FakeSink: OutputSink {
        private let state = Mutex<(names: [String], messages: [OutgoingMessage], handler: (@Sendable ([UInt64]) -> Void)?)>(([], [], nil))
        private let signal = IdleSignal()

        func topic(_ name: String) -> ProducerTopic {
            state.withLock { s in
                if let index = s.names.firstIndex(of: name) { return ProducerTopic(index: index) }
                s.names.append(name)
                return ProducerTopic(index: s.names.count - 1)
            }
        }

        func produce(_ messages: [OutgoingMessage]) {
            state.withLock { $0.messages += messages }
            signal.signal()
        }

        func onAcknowledged(_ handler: @escaping @Sendable ([UInt64]) -> Void) { state.withLock { $0.handler = handler } }

        /// Waits until `count` messages were produced (within a minute); returns them by topic name.
        func messages(count: Int) async -> [(topic: String, message: OutgoingMessage)] {
            _ = await signal.wait(until: { [self] in state.withLock { $0.messages.count } >= count }, timeout: .seconds(60))
            return state.withLock { s in s.messages.map { (s.names[$0.topic.index], $0) } }
        }

        func acknowledgeAll() {
            let (tags, handler) = state.withLock { s in (s.messages.compactMap(\.tag), s.handler) }
            handler?(tags)
        }
    }

    @Test(.timeLimit(.minutes(1))) func everyRecordEndsAcceptedOrAsAnErrorEventAndIsCommittedOnceAcknowledged() async throws {
        let good = try DeviceToken(hex: String(repeating: "ab", count: 32))
        let refused = try DeviceToken(hex: String(repeating: "cd", count: 32))
        var configuration = PipelineConfiguration(
            deliveryErrorTopic: "errors", deliveryReportTopic: "reports", endpoints: [.testBinary(gatewayPort: 1, feedbackPort: 1)])
        configuration.defaultTTLSeconds = 3600
        let app = configuration.endpoints[0].app
        let sink = FakeSink()
        let engine = Mutex<FakeDelivery?>(nil)
        let pipeline = try Pipeline(
            configuration: configuration, output: sink, maxInFlight: 100,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) }
        ) { hooks in
            let fake = FakeDelivery(hooks: hooks, refused: [refused])
            engine.withLock { $0 = fake }
            return fake
        }
        let values = [
            #"{"id":"ok","app":"\#(app)","token":"\#(good.hex)","payload":{"aps":{"alert":"hi"}}}"#,
            #"{"id":"broken","app":"\#(app)""#,
            #"{"id":"refused","app":"\#(app)","token":"\#(refused.hex)","payload":{"aps":{"alert":"hi"}}}"#,
        ]
        let partition = TopicPartition(topic: "notifications", partition: 0)
        pipeline.assigned([partition])
        let (records, continuation) = AsyncStream.makeStream(of: [KafkaRecord].self)
        continuation.yield(values.enumerated().map { i, value in
            KafkaRecord(topic: partition.topic, partition: 0, offset: Int64(i), timestamp: -1, key: nil, value: Array(value.utf8))
        })
        continuation.finish()
        try await pipeline.run(records: records)

        let produced = await sink.messages(count: 3)
        #expect(produced.map(\.topic).sorted() == ["errors", "errors", "reports"])
        #expect(engine.withLock { $0!.enqueued.load(ordering: .relaxed) } == 2)
        // Every outcome is known, but nothing is settled before the broker has its output events.
        #expect(pipeline.held == 3)
        #expect(pipeline.takeCommittable().isEmpty)
        sink.acknowledgeAll()
        #expect(await pipeline.drain(timeout: .seconds(60)))
        #expect(pipeline.takeCommittable().map(\.1) == [3])
        let counts = pipeline.snapshot
        #expect(counts.consumed == 3 && counts.submitted == 2)
        #expect(counts.errorsByReason == [.malformedEvent: 1, .invalidToken: 1])
        // Counted before their output events are handed over.
        #expect(counts.accepted == 1)
    }

    /// A replay's records go in a quarter of `max_in_flight` at a time, each once fewer than `max_in_flight` are
    /// held: with nothing answered, reading stops at the bound, and goes on once the held records settle.
    @Test(.timeLimit(.minutes(1))) func aReplayWaitsWhileMaxInFlightRecordsAreHeld() async throws {
        let configuration = PipelineConfiguration(deliveryErrorTopic: "errors", endpoints: [.testBinary(gatewayPort: 1, feedbackPort: 1)])
        let app = configuration.endpoints[0].app
        let engine = Mutex<HoldingDelivery?>(nil)
        let pipeline = try Pipeline(
            configuration: configuration, output: FakeSink(), maxInFlight: 8,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) }
        ) { hooks in
            let fake = HoldingDelivery(hooks: hooks)
            engine.withLock { $0 = fake }
            return fake
        }
        let fake = engine.withLock { $0! }
        let token = String(repeating: "ab", count: 32)
        let records = (0..<20).map { i in
            KafkaRecord(
                topic: "notifications", partition: 0, offset: Int64(i), timestamp: -1, key: nil,
                value: Array(#"{"id":"e\#(i)","app":"\#(app)","token":"\#(token)","payload":{"aps":{"alert":"hi"}}}"#.utf8))
        }
        let (stream, continuation) = AsyncStream.makeStream(of: [KafkaRecord].self)
        continuation.yield(records)
        continuation.finish()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pipeline.run(records: stream) }
            // Chunks of two until eight are held; then reading waits.
            while pipeline.snapshot.consumed < 8 { await Task.yield() }
            for _ in 0..<100 { await Task.yield() }
            #expect(pipeline.snapshot.consumed == 8)
            #expect(pipeline.held == 8 && fake.count == 8)
            // Answered and settled (no output event to wait for): the rest goes in as room appears.
            while pipeline.snapshot.consumed < 20 {
                fake.acceptAll()
                await Task.yield()
            }
            try await group.waitForAll()
        }
        fake.acceptAll()
        #expect(await pipeline.drain(timeout: .seconds(60)))
        #expect(pipeline.snapshot.accepted == 20)
    }
}

/// A fake engine for one binary app: nothing to start, stop or report.
protocol BinaryOnlyDelivery: NotificationDelivery {
    func enqueue(binary deliveries: [Delivery])
}

extension BinaryOnlyDelivery {
    func start() {}
    var apps: [AppKey] { [] }
    func isDown(_ app: AppKey) -> Bool { false }
    func status(of app: AppKey) -> PoolStatus? { nil }
    func stop() async -> Unsettled { Unsettled() }

    func enqueue(_ deliveries: Deliveries, to app: AppKey) {
        guard case .binary(let deliveries) = deliveries else {
            Issue.record("no HTTP/2 app is configured")
            return
        }
        enqueue(binary: deliveries)
    }
}
