// Records/s through pushworker's consumer into a no-op sink, next to kcat's raw consume rate of the same topic on
// the same broker in the same run. `scripts/bench-kafka` starts the broker and runs this.
//
// usage: KafkaConsumeBenchmark BOOTSTRAP [RECORDS] [PAYLOAD_BYTES]
import Foundation
import PushKafka
import Synchronization

let arguments = CommandLine.arguments
let servers = arguments[1]
let count = arguments.count > 2 ? Int(arguments[2])! : 500_000
let size = arguments.count > 3 ? Int(arguments[3])! : 300
let topic = "bench-\(getpid())"

func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18 }

try KafkaAdmin.createTopics(bootstrapServers: servers, [(topic, 6)])

// 1. Produce the backlog.
let producer = try KafkaProducer(properties: ["bootstrap.servers": servers, "log_level": "3", "linger.ms": "20"])
let acknowledged = Atomic<Int>(0)
let produceStart = ContinuousClock.now
await withTaskGroup(of: Void.self) { group in
    group.addTask { await producer.run(flushTimeout: .seconds(300)) }
    let filler = String(repeating: "x", count: max(0, size - 20))
    for i in 0..<count {
        let value = Array("{\"n\":\(i),\"f\":\"\(filler)\"}".utf8.prefix(size))
        producer.produce(topic: topic, key: Array("k\(i)".utf8), value: value) { acknowledged.add(1, ordering: .relaxed) }
    }
    producer.stop()
}
let produceTime = ContinuousClock.now - produceStart
precondition(acknowledged.load(ordering: .relaxed) == count, "not every record was acknowledged")

// 2. kcat's raw consume rate of the whole topic.
let kcat = Process()
kcat.executableURL = URL(fileURLWithPath: "/usr/bin/kcat")
kcat.arguments = ["-C", "-b", servers, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%o\n",
                  "-X", "receive.message.max.bytes=1000000000"]
let sink = Pipe()
kcat.standardOutput = sink
let kcatStart = ContinuousClock.now
try kcat.run()
var kcatLines = 0
while true {
    let data = sink.fileHandleForReading.availableData
    if data.isEmpty { break }
    kcatLines += data.reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
}
kcat.waitUntilExit()
let kcatTime = ContinuousClock.now - kcatStart
precondition(kcatLines == count, "kcat read \(kcatLines) of \(count)")

// 3. pushworker's consumer, settling every record at once (a no-op sink), in a new group.
let consumer = try KafkaConsumer(
    properties: ["bootstrap.servers": servers, "group.id": "bench-\(getpid())", "log_level": "3",
                 "session.timeout.ms": "6000", "receive.message.max.bytes": "1000000000"],
    topics: [topic], maxHeld: 100_000)
let consumeStart = ContinuousClock.now
var firstRecord: ContinuousClock.Instant?
var received = 0
await withTaskGroup(of: Void.self) { group in
    group.addTask { await consumer.run() }
    for await batch in consumer.records {
        if firstRecord == nil { firstRecord = ContinuousClock.now }
        received += batch.count
        for record in batch { consumer.offsets.outcomeKnown(record) }
        if received >= count { break }
    }
    consumer.stop()
}
let consumeEnd = ContinuousClock.now
let fromFirst = consumeEnd - firstRecord!
let total = consumeEnd - consumeStart

let kcatRate = Double(count) / seconds(kcatTime)
let oursRate = Double(count) / seconds(fromFirst)
print("""
    records: \(count) x \(size) B on 6 partitions
    produce (pushworker's producer, acks=all): \(Int(Double(count) / seconds(produceTime))) records/s
    kcat consume (whole run, from process start): \(Int(kcatRate)) records/s (\(kcatTime))
    pushworker consumer (first record to last): \(Int(oursRate)) records/s (\(fromFirst)); with the group join: \(Int(Double(count) / seconds(total))) records/s
    ratio to kcat: \(String(format: "%.2f", oursRate / kcatRate))
    """)
