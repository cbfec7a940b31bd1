import Logging
import PushTestSupport
import Synchronization
import Testing
@testable import PushKafka

/// A graceful shutdown waits until the producer has nothing unacknowledged; the records an acknowledgement settles
/// must have heard of it by then, so a message stops counting only after its ticket was handed over.
@Suite struct ProducerAcknowledgementTests {
    @Test(.timeLimit(.minutes(1))) func messagesCountAsUnacknowledgedUntilTheirTagsAreHandedOver() async throws {
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("outputs", partitions: 2)
        let producer = try KafkaProducer(properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"])
        let count = 500
        let (handedOver, continuation) = AsyncStream.makeStream(of: (tickets: Int, unacknowledged: Int).self)
        // The handler runs on the producer thread; the producer is read there, not retained by it.
        producer.onAcknowledged { [weak producer] tickets in
            continuation.yield((tickets.count, producer?.unacknowledged ?? -1))
        }
        let topic = producer.topic("outputs")
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            producer.produce((0..<count).map {
                OutgoingMessage(topic: topic, key: Array("k\($0)".utf8), value: Array("v\($0)".utf8), tag: UInt64($0))
            })
            var tickets = 0
            for await (n, unacknowledged) in handedOver {
                #expect(unacknowledged >= n, "the messages whose tags are being handed over still count")
                tickets += n
                if tickets >= count { break }
            }
            #expect(tickets == count)
            producer.stop()
            try await group.waitForAll()
        }
        #expect(producer.unacknowledged == 0)
    }

    /// Messages the broker refuses are produced again until acknowledged, and their failures are logged by topic
    /// and error, not one line per message (a broker away fails a whole queue at once).
    @Test(.timeLimit(.minutes(1))) func refusedMessagesAreProducedAgainAndLoggedByTopicAndError() async throws {
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("outputs", partitions: 1)
        let capture = CapturingLogHandler()
        // No retries inside librdkafka: each refused request fails its messages back to the producer.
        let producer = try KafkaProducer(
            properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3", "enable.idempotence": "false", "retries": "0"],
            logger: Logger(label: "test") { _ in capture })
        let count = 300
        let (handedOver, continuation) = AsyncStream.makeStream(of: Int.self)
        producer.onAcknowledged { tickets in continuation.yield(tickets.count) }
        let topic = producer.topic("outputs")
        cluster.failNextRequests(.produce, count: 2, permanent: true)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            producer.produce((0..<count).map {
                OutgoingMessage(topic: topic, key: nil, value: Array("v\($0)".utf8), tag: UInt64($0))
            })
            var tickets = 0
            for await n in handedOver {
                tickets += n
                if tickets >= count { break }
            }
            #expect(tickets == count)
            producer.stop()
            try await group.waitForAll()
        }
        let failures = capture.lines.withLock { $0 }.filter { $0.message == "delivery failed; producing it again" }
        let failed = failures.reduce(0) { $0 + (Int($1.metadata["messages"] ?? "") ?? 0) }
        #expect(!failures.isEmpty && failures.count <= 2, "a line per refused request: \(failures.map(\.metadata))")
        #expect(failed > failures.count, "each line stands for the refused request's messages")
        #expect(failures.allSatisfy { $0.metadata["topic"] == "outputs" })
    }

    /// An idle producer thread sleeps in its poll for `idlePollMilliseconds` (here far longer than the time limit):
    /// a queued message must wake it, round after round, each after the thread has gone back to sleep.
    @Test(.timeLimit(.minutes(1))) func aQueuedMessageWakesTheIdleProducerThread() async throws {
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("outputs", partitions: 1)
        let producer = try KafkaProducer(properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"])
        let (acknowledged, continuation) = AsyncStream.makeStream(of: Int.self)
        let topic = producer.topic("outputs")
        producer.onAcknowledged { tags in for tag in tags { continuation.yield(Int(tag)) } }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run(idlePollMilliseconds: 3_600_000) }
            var heard = acknowledged.makeAsyncIterator()
            for round in 0..<20 {
                producer.produce([OutgoingMessage(topic: topic, key: nil, value: Array("v\(round)".utf8), tag: UInt64(round))])
                #expect(await heard.next() == round)
            }
            producer.stop()
            try await group.waitForAll()
        }
    }

    /// ``KafkaProducer/stop()`` wakes the idle thread too: the run ends without waiting out `idlePollMilliseconds`.
    @Test(.timeLimit(.minutes(1))) func stoppingWakesTheIdleProducerThread() async throws {
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("outputs", partitions: 1)
        let producer = try KafkaProducer(properties: ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"])
        let (acknowledged, continuation) = AsyncStream.makeStream(of: Int.self)
        producer.onAcknowledged { tickets in continuation.yield(tickets.count) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run(idlePollMilliseconds: 3_600_000) }
            // One message through first: the thread is running and then goes back to its idle poll.
            producer.produce([OutgoingMessage(topic: producer.topic("outputs"), key: nil, value: [1], tag: 1)])
            var heard = acknowledged.makeAsyncIterator()
            #expect(await heard.next() == 1)
            producer.stop()
            try await group.waitForAll()
        }
        #expect(producer.unacknowledged == 0)
    }
}
