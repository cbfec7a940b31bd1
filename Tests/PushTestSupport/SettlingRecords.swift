import PushKafka

extension KafkaConsumer {
    /// Reads the consumer's record stream (its default sink) until at least `count` records have come, settling
    /// each, and returns how many came.
    @discardableResult
    public func settleRecords(atLeast count: Int) async -> Int {
        var received = 0
        for await batch in records {
            received += batch.count
            for record in batch { offsets.outcomeKnown(record) }
            if received >= count { break }
        }
        return received
    }
}
