import Testing
@testable import PushKafka

/// The producer's count of unacknowledged messages (what a graceful shutdown waits on) holds every message at every
/// step from the queue to the broker's acknowledgement.
@Suite struct ProducerOutboxTests {
    static func message(_ n: Int) -> OutgoingMessage {
        OutgoingMessage(topic: ProducerTopic(index: 0), key: Array("m\(n)".utf8), value: [], tag: UInt64(n))
    }

    static func keys(_ messages: some Sequence<OutgoingMessage>) -> [String] {
        messages.map { String(decoding: $0.key ?? [], as: UTF8.self) }
    }

    @Test func aMessageCountsFromQueuedToAcknowledged() {
        var outbox = ProducerOutbox()
        outbox.append(contentsOf: (0..<5).map(Self.message))
        #expect(outbox.unacknowledged == 5)

        let batch = outbox.take(max: 3)
        #expect(Self.keys(batch) == ["m0", "m1", "m2"])
        #expect(outbox.unacknowledged == 5, "taken for producing: still unacknowledged")

        // librdkafka's queue was full after the first: the other two go back to the front, in order.
        outbox.giveBack(batch[1...])
        #expect(Self.keys(outbox.queued) == ["m1", "m2", "m3", "m4"])
        #expect(outbox.unacknowledged == 5)

        // The broker refused m0: queued again at the back.
        outbox.failed([batch[0]])
        #expect(Self.keys(outbox.queued) == ["m1", "m2", "m3", "m4", "m0"])
        #expect(outbox.unacknowledged == 5)

        let all = outbox.take(max: 1024)
        #expect(all.count == 5 && outbox.queued.isEmpty)
        #expect(outbox.unacknowledged == 5)
        outbox.acknowledged(2)
        #expect(outbox.unacknowledged == 3)
        outbox.append(Self.message(5))
        outbox.acknowledged(3)
        #expect(outbox.unacknowledged == 1)
        #expect(outbox.take(max: 0).isEmpty && outbox.unacknowledged == 1)
    }
}
