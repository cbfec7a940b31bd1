import Crdkafka
import Testing

@testable import PushKafka

/// The consumer's screen for records librdkafka fetched again (fake messages: the screen reads only the topic
/// handle, partition and offset).
struct FetchPositionsTests {
    /// Stand-ins for two librdkafka topic handles (never dereferenced).
    let topicA = OpaquePointer(bitPattern: 0x1000)!
    let topicB = OpaquePointer(bitPattern: 0x2000)!

    static func name(of handle: OpaquePointer) -> String {
        handle == OpaquePointer(bitPattern: 0x1000)! ? "a" : "b"
    }

    /// Messages of (topic, partition, offset), owned by the test.
    final class Batch {
        let storage: UnsafeMutableBufferPointer<rd_kafka_message_t>
        let pointers: UnsafeMutableBufferPointer<UnsafeMutablePointer<rd_kafka_message_t>>
        var destroyed: [Int64] = []

        init(_ records: [(OpaquePointer, Int32, Int64)]) {
            storage = .allocate(capacity: records.count)
            pointers = .allocate(capacity: records.count)
            for (i, (topic, partition, offset)) in records.enumerated() {
                var message = rd_kafka_message_t()
                message.rkt = topic
                message.partition = partition
                message.offset = offset
                storage[i] = message
                pointers[i] = storage.baseAddress! + i
            }
        }

        deinit {
            storage.deallocate()
            pointers.deallocate()
        }

        func screen(_ positions: inout FetchPositions, generation: Int = 1, high: Int64? = 1_000) -> (offsets: [Int64], rewinds: [FetchPositions.Rewind]) {
            let result = positions.screen(
                pointers, count: pointers.count, generation: generation, highWatermark: { _ in high },
                topicName: FetchPositionsTests.name(of:), destroy: { self.destroyed.append($0.pointee.offset) })
            return (pointers[..<result.count].map(\.pointee.offset), result.rewinds)
        }
    }

    /// Positions known after a first batch of the assignment (the first batch of an assignment only starts it).
    func started(_ records: [(OpaquePointer, Int32, Int64)]) -> FetchPositions {
        var positions = FetchPositions()
        _ = Batch([]).screen(&positions)
        _ = Batch(records).screen(&positions)
        return positions
    }

    @Test func recordsInOrderGoThrough() {
        var positions = started([(topicA, 0, 0), (topicA, 0, 1), (topicA, 1, 0)])
        let batch = Batch([(topicA, 0, 2), (topicA, 1, 1), (topicA, 0, 3), (topicB, 0, 0)])
        let (offsets, rewinds) = batch.screen(&positions)
        #expect(offsets == [2, 1, 3, 0])
        #expect(rewinds.isEmpty)
        #expect(batch.destroyed.isEmpty)
    }

    @Test func recordsFetchedAgainAfterAResumeAreDroppedAndTheRestOfTheRunKept() {
        var positions = started([(topicA, 0, 0), (topicA, 0, 1), (topicA, 0, 2), (topicA, 1, 5)])
        positions.resumed([TopicPartition(topic: "a", partition: 0), TopicPartition(topic: "a", partition: 1)])
        // Partition 0 resumed from its earliest offset: 0...2 again, then 3 and 4 are new.
        let batch = Batch([(topicA, 1, 6), (topicA, 0, 0), (topicA, 0, 1), (topicA, 0, 2), (topicA, 0, 3), (topicA, 0, 4)])
        let (offsets, rewinds) = batch.screen(&positions)
        #expect(offsets == [6, 3, 4])
        #expect(batch.destroyed == [0, 1, 2])
        #expect(rewinds == [FetchPositions.Rewind(key: .init(topic: topicA, partition: 0), offset: 0, expected: 3, dropped: true)])
        // A later run that goes back is screened too (librdkafka#4686: a resume can send the fetcher back to where
        // an earlier pause left it once the fetch is under way; a CI run saw a partition at 790 go back to 212).
        let again = Batch([(topicA, 0, 4), (topicA, 0, 5)])
        #expect(again.screen(&positions).offsets == [5])
        #expect(again.destroyed == [4])
    }

    @Test func aRewindOutsideAResumeGoesThrough() {
        // An offset reset after the broker lost records: the offsets may hold new records now.
        var positions = started([(topicA, 0, 10), (topicA, 0, 11)])
        let batch = Batch([(topicA, 0, 0), (topicA, 0, 1)])
        let (offsets, rewinds) = batch.screen(&positions)
        #expect(offsets == [0, 1])
        #expect(rewinds.map(\.dropped) == [false])
    }

    @Test func aTruncatedLogGoesThrough() {
        var positions = started([(topicA, 0, 7), (topicA, 0, 8), (topicA, 0, 9)])
        positions.resumed([TopicPartition(topic: "a", partition: 0)])
        // The log now ends at 8 (below the position 10): the records from 8 on are new ones.
        let batch = Batch([(topicA, 0, 8), (topicA, 0, 9)])
        let (offsets, rewinds) = batch.screen(&positions, high: 9)
        #expect(offsets == [8, 9])
        #expect(batch.destroyed.isEmpty)
        #expect(rewinds.map(\.dropped) == [false])
        // An unknown watermark is treated the same way: nothing is dropped on a guess.
        positions.resumed([TopicPartition(topic: "a", partition: 0)])
        let unknown = Batch([(topicA, 0, 9)])
        #expect(unknown.screen(&positions, high: nil).offsets == [9])
    }

    @Test func aNewAssignmentForgetsThePositions() {
        var positions = started([(topicA, 0, 0), (topicA, 0, 1)])
        // The assignment changed during the poll: the batch goes through and starts the new positions.
        let batch = Batch([(topicA, 0, 0), (topicA, 0, 1)])
        #expect(batch.screen(&positions, generation: 2).offsets == [0, 1])
        #expect(Batch([(topicA, 0, 2)]).screen(&positions, generation: 2).offsets == [2])
    }
}
