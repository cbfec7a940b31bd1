import Crdkafka
import Foundation
import Logging
import Synchronization

/// An output topic registered with a producer: produced to by number, its librdkafka handle kept for the producer's
/// life (no lookup by name per message).
public struct ProducerTopic: Hashable, Sendable {
    let index: Int
}

/// What to do once the broker has a message.
enum Acknowledgement: Sendable {
    case none
    /// Handed, with the others of the same poll, to the producer's acknowledgement handler.
    case tag(UInt64)
    case callback(@Sendable () -> Void)
}

/// A message for an output topic, and what to do once the broker has it.
public struct OutgoingMessage: Sendable {
    var topic: ProducerTopic
    var key: [UInt8]?
    /// nil: a tombstone (a compacted topic forgets the key).
    var value: [UInt8]?
    var attempts = 0
    let acknowledgement: Acknowledgement

    /// A message whose acknowledgement hands `tag` (the sender's number for what it settles) back to the
    /// acknowledgement handler.
    public init(topic: ProducerTopic, key: [UInt8]?, value: [UInt8]?, tag: UInt64) {
        self.topic = topic
        self.key = key
        self.value = value
        acknowledgement = .tag(tag)
    }

    /// The tag it carries, if any.
    public var tag: UInt64? {
        if case .tag(let tag) = acknowledgement { tag } else { nil }
    }
}

/// Produces the output events (librdkafka): `acks=all`, idempotence and compression by default. A message is
/// never dropped: a delivery failure puts it back in the outbox and it is produced again. Acknowledgements of
/// messages carrying a tag go to the acknowledgement handler in one batch per poll; others run their callback.
/// Everything touching librdkafka happens on the producer's own thread, which keeps the topic handles. That thread
/// sleeps in `rd_kafka_poll` until a delivery report arrives, a message is queued or it is stopped (both wake it
/// through the poll's queue), or a second passes.
public final class KafkaProducer: Sendable {
    private nonisolated(unsafe) let client: OpaquePointer
    /// The queue `rd_kafka_poll` serves; ``produce(_:)`` and ``stop()`` wake the producer thread's poll through it
    /// (`rd_kafka_queue_yield`, safe from any thread; a wake before the poll makes it return at once).
    private nonisolated(unsafe) let pollQueue: OpaquePointer
    private let outbox = Mutex(ProducerOutbox())
    private let topicNames = Mutex<[String]>([])
    private let tagHandler = Mutex<(@Sendable ([UInt64]) -> Void)?>(nil)
    private let thread: ProducerThreadState
    private let stopRequested = Atomic<Bool>(false)
    private let logger: Logger

    public init(properties: [String: String], logger: Logger = Logger(label: "pushworker.kafka.producer")) throws(KafkaError) {
        try LibRDKafka.checkVersion()
        var properties = properties
        properties["acks"] = properties["acks"] ?? "all"
        properties["enable.idempotence"] = properties["enable.idempotence"] ?? "true"
        properties["compression.type"] = properties["compression.type"] ?? "lz4"
        properties["linger.ms"] = properties["linger.ms"] ?? "5"
        let configuration = try KafkaConfigurationHandle(properties)
        let thread = ProducerThreadState()
        rd_kafka_conf_set_opaque(configuration.pointer, Unmanaged.passUnretained(thread).toOpaque())
        rd_kafka_conf_set_dr_msg_cb(configuration.pointer, deliveryReportCallback)
        client = try configuration.makeClient(RD_KAFKA_PRODUCER)
        pollQueue = rd_kafka_queue_get_main(client)
        self.thread = thread
        self.logger = logger
    }

    /// The topic's number for ``produce(_:)`` (registered once; the same name gives the same topic).
    public func topic(_ name: String) -> ProducerTopic {
        topicNames.withLock { names in
            if let index = names.firstIndex(of: name) { return ProducerTopic(index: index) }
            names.append(name)
            return ProducerTopic(index: names.count - 1)
        }
    }

    /// Sets who hears of acknowledged messages that carry a tag (on the producer thread, a batch per poll).
    public func onAcknowledged(_ handler: @escaping @Sendable ([UInt64]) -> Void) {
        tagHandler.withLock { $0 = handler }
    }

    /// Queues messages, under one lock.
    public func produce(_ messages: [OutgoingMessage]) {
        guard !messages.isEmpty else { return }
        outbox.withLock { $0.append(contentsOf: messages) }
        rd_kafka_queue_yield(pollQueue)
    }

    /// Queues a message; `acknowledged` runs (on the producer thread) once the broker acknowledged it.
    public func produce(topic: String, key: [UInt8]?, value: [UInt8], acknowledged: @escaping @Sendable () -> Void) {
        let message = OutgoingMessage(topic: self.topic(topic), key: key, value: value, acknowledgement: .callback(acknowledged))
        outbox.withLock { $0.append(message) }
        rd_kafka_queue_yield(pollQueue)
    }

    /// Messages not yet acknowledged by the broker: waiting in the outbox, being produced, or produced and awaiting
    /// the broker's answer (``ProducerOutbox``). An acknowledged message stops counting once the acknowledgement handler or
    /// its callback has run.
    public var unacknowledged: Int { outbox.withLock { $0.unacknowledged } }

    /// Produces on a dedicated thread until ``stop()`` or cancellation, then flushes what is queued (up to
    /// `flushTimeout`). With nothing to do the thread waits up to `idlePollMilliseconds` for a delivery report;
    /// queued messages and ``stop()`` end the wait at once.
    public func run(flushTimeout: Duration = .seconds(10), idlePollMilliseconds: Int32 = 1000) async {
        await runOnDedicatedThread(name: "kafka-producer", onCancel: { [self] in stop() }) { [self] in
            loop(flushTimeout: flushTimeout, idleMilliseconds: idlePollMilliseconds)
        }
    }

    public func stop() {
        stopRequested.store(true, ordering: .relaxed)
        rd_kafka_queue_yield(pollQueue)
    }

    private func loop(flushTimeout: Duration, idleMilliseconds: Int32) {
        while !stopRequested.load(ordering: .relaxed) {
            drainOutbox()
            poll(idleMilliseconds)
        }
        let deadline = ContinuousClock.now.advanced(by: flushTimeout)
        while unacknowledged > 0 && ContinuousClock.now < deadline {
            drainOutbox()
            poll(20)
        }
        rd_kafka_flush(client, 1000)
        handOver()
        for handle in thread.handles { rd_kafka_topic_destroy(handle) }
        thread.handles = []
    }

    /// Serves delivery reports, then hands over what they acknowledged and produces again what failed.
    private func poll(_ timeout: Int32) {
        rd_kafka_poll(client, timeout)
        handOver()
    }

    private func handOver() {
        if !thread.acknowledged.isEmpty {
            let count = thread.acknowledged.count
            let tags = thread.acknowledged.compactMap { m -> UInt64? in
                if case .tag(let tag) = m.acknowledgement { return tag }
                if case .callback(let callback) = m.acknowledgement { callback() }
                return nil
            }
            thread.acknowledged.removeAll(keepingCapacity: true)
            if !tags.isEmpty, let handler = tagHandler.withLock({ $0 }) { handler(tags) }
            outbox.withLock { $0.acknowledged(count) }
        }
        if !thread.failed.isEmpty {
            // One line per topic and error, not per message: a broker away fails a whole queue at once.
            var failures: [FailureKey: (messages: Int, attempts: Int)] = [:]
            for (message, error) in thread.failed {
                let key = FailureKey(topic: message.topic, error: error.rawValue)
                let seen = failures[key, default: (0, 0)]
                failures[key] = (seen.messages + 1, max(seen.attempts, message.attempts))
            }
            for (key, failure) in failures.sorted(by: { ($0.key.topic.index, $0.key.error) < ($1.key.topic.index, $1.key.error) }) {
                logger.warning("delivery failed; producing it again", metadata: [
                    "topic": "\(topicName(key.topic))", "messages": "\(failure.messages)", "attempts": "\(failure.attempts)",
                    "error": "\(String(cString: rd_kafka_err2str(rd_kafka_resp_err_t(rawValue: key.error))))",
                ])
            }
            let again = thread.failed.map(\.0)
            thread.failed.removeAll(keepingCapacity: true)
            outbox.withLock { $0.failed(again) }
        }
    }

    /// Failed deliveries of one poll are logged by topic and error.
    private struct FailureKey: Hashable {
        var topic: ProducerTopic
        var error: rd_kafka_resp_err_t.RawValue
    }

    private func topicName(_ topic: ProducerTopic) -> String { topicNames.withLock { $0[topic.index] } }

    /// The topic's librdkafka handle, made on first use and kept.
    private func handle(_ topic: ProducerTopic) -> OpaquePointer? {
        if topic.index < thread.handles.count { return thread.handles[topic.index] }
        let names = topicNames.withLock { $0 }
        while thread.handles.count < names.count {
            guard let rkt = rd_kafka_topic_new(client, names[thread.handles.count], nil) else { return nil }
            thread.handles.append(rkt)
        }
        return thread.handles[topic.index]
    }

    private func drainOutbox() {
        while true {
            let batch = outbox.withLock { $0.take(max: 1024) }
            if batch.isEmpty { return }
            for (index, message) in batch.enumerated() {
                let slot = thread.hold(message)
                let error = (message.value ?? []).withUnsafeBytes { value in
                    (message.key ?? []).withUnsafeBytes { key in
                        produceRaw(topic: message.topic, value: message.value == nil ? nil : value, key: message.key == nil ? nil : key, opaque: slot)
                    }
                }
                if error == RD_KAFKA_RESP_ERR_NO_ERROR { continue }
                _ = thread.release(slot)
                outbox.withLock { $0.giveBack(batch[index...]) }
                if error != RD_KAFKA_RESP_ERR__QUEUE_FULL {
                    logger.warning("produce failed; will retry", metadata: ["topic": "\(topicName(message.topic))", "error": "\(String(cString: rd_kafka_err2str(error)))"])
                }
                return  // queue full: serve delivery reports first
            }
        }
    }

    private func produceRaw(
        topic: ProducerTopic, value: UnsafeRawBufferPointer?, key: UnsafeRawBufferPointer?, opaque: UnsafeMutableRawPointer
    ) -> rd_kafka_resp_err_t {
        guard let rkt = handle(topic) else { return RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC }
        // A null payload is a tombstone; an empty value needs an address all the same.
        let payload = value.map { $0.baseAddress ?? UnsafeRawPointer(Self.emptyValue) }
        let result = rd_kafka_produce(
            rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, UnsafeMutableRawPointer(mutating: payload),
            value?.count ?? 0, key?.baseAddress, key?.count ?? 0, opaque)
        return result == 0 ? RD_KAFKA_RESP_ERR_NO_ERROR : rd_kafka_last_error()
    }

    private nonisolated(unsafe) static let emptyValue = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)  // never written

    deinit {
        for handle in thread.handles { rd_kafka_topic_destroy(handle) }
        rd_kafka_queue_destroy(pollQueue)
        rd_kafka_destroy(client)
    }
}

extension OutgoingMessage {
    init(topic: ProducerTopic, key: [UInt8]?, value: [UInt8], acknowledgement: Acknowledgement) {
        self.topic = topic
        self.key = key
        self.value = value
        self.acknowledgement = acknowledgement
    }
}

/// What only the producer thread touches: the messages librdkafka holds (by slot number, the message's opaque, so
/// that no object is allocated per message), the topic handles, and the delivery reports of the current poll.
private final class ProducerThreadState: @unchecked Sendable {
    var slots: [OutgoingMessage?] = []
    var free: [Int] = []
    var handles: [OpaquePointer] = []
    var acknowledged: [OutgoingMessage] = []
    var failed: [(OutgoingMessage, rd_kafka_resp_err_t)] = []

    /// Keeps the message until its delivery report; returns its opaque (slot + 1, never null).
    func hold(_ message: OutgoingMessage) -> UnsafeMutableRawPointer {
        let slot: Int
        if let f = free.popLast() {
            slot = f
            slots[slot] = message
        } else {
            slot = slots.count
            slots.append(message)
        }
        return UnsafeMutableRawPointer(bitPattern: slot + 1)!
    }

    func release(_ opaque: UnsafeMutableRawPointer) -> OutgoingMessage {
        let slot = Int(bitPattern: opaque) - 1
        let message = slots[slot]!
        slots[slot] = nil
        free.append(slot)
        return message
    }
}

private func deliveryReportCallback(
    client: OpaquePointer?, message: UnsafePointer<rd_kafka_message_t>?, opaque: UnsafeMutableRawPointer?
) {
    guard let message, let slot = message.pointee._private, let opaque else { return }
    let thread = Unmanaged<ProducerThreadState>.fromOpaque(opaque).takeUnretainedValue()
    var held = thread.release(slot)
    if message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR {
        thread.acknowledged.append(held)
    } else {
        held.attempts += 1
        thread.failed.append((held, message.pointee.err))
    }
}
