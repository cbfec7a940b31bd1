import Foundation
import Logging
import PushCore
import PushGateway
@testable import PushKafka
import PushTestSupport
import PushWorker
import Testing

/// A poll's records come from several partitions, in runs: each error event names its own record.
@Suite struct ErrorSourceTests {
    @Test(.timeLimit(.minutes(1))) func eachErrorEventNamesItsRecordInABatchOfSeveralPartitions() async throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let cluster = try KafkaMockCluster()
        try cluster.createTopic("notification-errors", partitions: 1)
        let properties = ["bootstrap.servers": cluster.bootstrapServers, "log_level": "3"]
        let producer = try KafkaProducer(properties: properties, logger: quiet)
        // Nothing listens on port 1; no record here gets as far as the gateway.
        let pipeline = try Pipeline(
            configuration: PipelineConfiguration(
                deliveryErrorTopic: "notification-errors", endpoints: [.testBinary(gatewayPort: 1, feedbackPort: 1)]),
            producer: producer, delivery: DeliveryConfiguration(), logger: quiet,
            wallClockMilliseconds: { Int64(Date().timeIntervalSince1970 * 1000) })

        // One batch: runs of two records of partitions 0, 1, 2, 0, 1, 2, each record an error (an unknown app, or
        // malformed), at offsets that differ between partitions.
        var batch: [KafkaRecord] = []
        var expected: [String: (partition: Int64, offset: Int64)] = [:]
        for i in 0..<12 {
            let partition = Int32(i / 2 % 3)
            let offset = Int64(1000 * Int(partition) + i)
            let value = i % 2 == 0
                ? #"{"id":"e\#(i)","app":"com.example.nobody","token":"abcd","payload":{"aps":{}}}"#
                : #"{"id":"e\#(i)","app":"com.example.app""#
            batch.append(KafkaRecord(
                topic: "notifications", partition: partition, offset: offset, timestamp: -1, key: nil, value: Array(value.utf8)))
            expected["e\(i)"] = (Int64(partition), offset)
        }

        await withTaskGroup(of: Void.self) { group in
            group.addTask { await producer.run() }
            let (records, continuation) = AsyncStream.makeStream(of: [KafkaRecord].self)
            continuation.yield(batch)
            continuation.finish()
            try? await pipeline.run(records: records)
            #expect(await pipeline.drain(timeout: .seconds(30)))
            _ = await pipeline.stop()
            producer.stop()
        }

        let errors = try await KafkaReplayReader(properties: properties, topic: "notification-errors", start: .earliest).readAll()
        var named: [String: (partition: Int64, offset: Int64)] = [:]
        for record in errors {
            let e = try JSONValue(parsing: record.value)
            #expect(e["source"]?["topic"]?.stringValue == "notifications")
            named[e["event_id"]?.stringValue ?? "?"] = (e["source"]?["partition"]?.integerValue ?? -1, e["source"]?["offset"]?.integerValue ?? -1)
        }
        #expect(errors.count == expected.count)
        for (id, place) in expected {
            #expect(named[id]?.partition == place.partition && named[id]?.offset == place.offset,
                    "\(id): expected \(place), named \(String(describing: named[id]))")
        }
    }
}
