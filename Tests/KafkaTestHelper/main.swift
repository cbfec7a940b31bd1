// A helper process for the Kafka integration tests (not part of the product):
//
//   kafka-test-helper mock-cluster TOPIC:PARTITIONS...   hosts librdkafka's mock cluster as a broker process;
//                                                       prints bootstrap.servers, runs until killed
//   kafka-test-helper member BOOTSTRAP GROUP TOPIC FILE  a consumer group member that settles every record and
//                                                       appends "partition offset value" lines to FILE as it
//                                                       receives them (flushed per batch), until killed
import Foundation
import PushKafka

func say(_ line: String) {
    print(line)
    fflush(nil)
}

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "mock-cluster":
    let cluster = try KafkaMockCluster()
    for spec in arguments.dropFirst() {
        let parts = spec.split(separator: ":")
        try cluster.createTopic(String(parts[0]), partitions: Int32(parts[1])!)
    }
    say(cluster.bootstrapServers)
    while true { pause() }
case "member":
    let a = Array(arguments.dropFirst())
    let consumer = try KafkaConsumer(
        properties: [
            "bootstrap.servers": a[0], "group.id": a[1], "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
            "auto.commit.interval.ms": "100", "log_level": "3",
        ],
        topics: [a[2]], maxHeld: 100_000)
    _ = FileManager.default.createFile(atPath: a[3], contents: nil)
    let file = FileHandle(forWritingAtPath: a[3])!
    await withTaskGroup(of: Void.self) { group in
        group.addTask { await consumer.run() }
        group.addTask {
            for await batch in consumer.records {
                let lines = batch.map { "\($0.partition) \($0.offset) \(String(decoding: $0.value, as: UTF8.self))\n" }.joined()
                file.write(Data(lines.utf8))
                for record in batch { consumer.offsets.outcomeKnown(record) }
            }
        }
    }
default:
    FileHandle.standardError.write(Data("usage: kafka-test-helper mock-cluster TOPIC:N... | member BOOTSTRAP GROUP TOPIC FILE\n".utf8))
    exit(2)
}
