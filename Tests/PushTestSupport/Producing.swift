import PushKafka
import Synchronization

/// Produces `values` to `topic` (each its own key), waits for every acknowledgement, and returns how many came.
public func produceAcknowledged(_ servers: String, topic: String, _ values: [String]) async throws -> Int {
    let producer = try KafkaProducer(properties: ["bootstrap.servers": servers, "log_level": "3"])
    let acknowledged = Atomic<Int>(0)
    await withTaskGroup(of: Void.self) { group in
        group.addTask { await producer.run(flushTimeout: .seconds(60)) }
        for value in values {
            producer.produce(topic: topic, key: Array(value.utf8), value: Array(value.utf8)) { acknowledged.add(1, ordering: .relaxed) }
        }
        producer.stop()
    }
    return acknowledged.load(ordering: .relaxed)
}
