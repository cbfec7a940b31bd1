import Crdkafka
import DequeModule
import Foundation
import Logging
import Synchronization

/// A message for an output topic, and what to do once the broker has it.
struct OutgoingMessage: Sendable {
    var topic: String
    var key: [UInt8]?
    var value: [UInt8]
    var attempts = 0
    let acknowledged: @Sendable () -> Void
}

/// Produces the output events (librdkafka): `acks=all`, idempotence and compression by default. A message is
/// never dropped: a delivery failure puts it back in the outbox and it is produced again; `acknowledged` runs
/// once the broker has it. Everything touching librdkafka happens on the producer's own thread.
public final class KafkaProducer: Sendable {
    private nonisolated(unsafe) let client: OpaquePointer
    private let outbox = Mutex(Deque<OutgoingMessage>())
    private let stopRequested = Atomic<Bool>(false)
    private let wake = Mutex<CheckedContinuation<Void, Never>?>(nil)
    private let logger: Logger
    private let inFlight = Atomic<Int>(0)

    public init(properties: [String: String], logger: Logger = Logger(label: "pushworker.kafka.producer")) throws(KafkaError) {
        try LibRDKafka.checkVersion()
        var properties = properties
        properties["acks"] = properties["acks"] ?? "all"
        properties["enable.idempotence"] = properties["enable.idempotence"] ?? "true"
        properties["compression.type"] = properties["compression.type"] ?? "lz4"
        properties["linger.ms"] = properties["linger.ms"] ?? "5"
        let configuration = try KafkaConfigurationHandle(properties)
        rd_kafka_conf_set_dr_msg_cb(configuration.pointer, deliveryReportCallback)
        client = try configuration.makeClient(RD_KAFKA_PRODUCER)
        self.logger = logger
    }

    /// Queues a message; `acknowledged` runs (on the producer thread) once the broker acknowledged it.
    public func produce(topic: String, key: [UInt8]?, value: [UInt8], acknowledged: @escaping @Sendable () -> Void) {
        outbox.withLock { $0.append(OutgoingMessage(topic: topic, key: key, value: value, acknowledged: acknowledged)) }
    }

    /// Messages handed to librdkafka and not yet acknowledged, plus those waiting in the outbox.
    public var unacknowledged: Int { inFlight.load(ordering: .relaxed) + outbox.withLock { $0.count } }

    /// Produces on a dedicated thread until ``stop()`` or cancellation, then flushes what is queued (up to
    /// `flushTimeout`).
    public func run(flushTimeout: Duration = .seconds(10)) async {
        await runOnDedicatedThread(name: "kafka-producer", onCancel: { [self] in stop() }) { [self] in
            loop(flushTimeout: flushTimeout)
        }
    }

    public func stop() { stopRequested.store(true, ordering: .relaxed) }

    private func loop(flushTimeout: Duration) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        while !stopRequested.load(ordering: .relaxed) {
            drainOutbox(context)
            rd_kafka_poll(client, 20)
        }
        let deadline = ContinuousClock.now.advanced(by: flushTimeout)
        while unacknowledged > 0 && ContinuousClock.now < deadline {
            drainOutbox(context)
            rd_kafka_poll(client, 20)
        }
        rd_kafka_flush(client, 1000)
    }

    private func drainOutbox(_ context: UnsafeMutableRawPointer) {
        while let message = outbox.withLock({ $0.popFirst() }) {
            let box = Unmanaged.passRetained(MessageBox(message, producer: self))
            let error = message.value.withUnsafeBytes { value in
                (message.key ?? []).withUnsafeBytes { key in
                    produceRaw(topic: message.topic, value: value, key: message.key == nil ? nil : key, opaque: box.toOpaque())
                }
            }
            if error == RD_KAFKA_RESP_ERR_NO_ERROR {
                inFlight.add(1, ordering: .relaxed)
                continue
            }
            box.release()
            outbox.withLock { $0.prepend(message) }
            if error != RD_KAFKA_RESP_ERR__QUEUE_FULL {
                logger.warning("produce failed; will retry", metadata: ["topic": "\(message.topic)", "error": "\(String(cString: rd_kafka_err2str(error)))"])
            }
            return  // queue full: serve delivery reports first
        }
    }

    private func produceRaw(
        topic: String, value: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer?, opaque: UnsafeMutableRawPointer
    ) -> rd_kafka_resp_err_t {
        guard let rkt = rd_kafka_topic_new(client, topic, nil) else { return RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC }
        defer { rd_kafka_topic_destroy(rkt) }
        let result = rd_kafka_produce(
            rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, UnsafeMutableRawPointer(mutating: value.baseAddress),
            value.count, key?.baseAddress, key?.count ?? 0, opaque)
        return result == 0 ? RD_KAFKA_RESP_ERR_NO_ERROR : rd_kafka_last_error()
    }

    fileprivate func delivered(_ box: MessageBox, error: rd_kafka_resp_err_t) {
        inFlight.subtract(1, ordering: .relaxed)
        if error == RD_KAFKA_RESP_ERR_NO_ERROR {
            box.message.acknowledged()
            return
        }
        var message = box.message
        message.attempts += 1
        logger.warning("delivery failed; producing it again", metadata: [
            "topic": "\(message.topic)", "attempts": "\(message.attempts)", "error": "\(String(cString: rd_kafka_err2str(error)))",
        ])
        outbox.withLock { $0.append(message) }
    }

    deinit {
        rd_kafka_destroy(client)
    }
}

/// A message handed to librdkafka as `msg_opaque`, retained until its delivery report.
private final class MessageBox: Sendable {
    let message: OutgoingMessage
    let producer: KafkaProducer

    init(_ message: OutgoingMessage, producer: KafkaProducer) {
        self.message = message
        self.producer = producer
    }
}

private func deliveryReportCallback(
    client: OpaquePointer?, message: UnsafePointer<rd_kafka_message_t>?, opaque: UnsafeMutableRawPointer?
) {
    guard let message, let boxPointer = message.pointee._private else { return }
    let box = Unmanaged<MessageBox>.fromOpaque(boxPointer).takeRetainedValue()
    box.producer.delivered(box, error: message.pointee.err)
}
