import DequeModule

/// The producer's messages from ``KafkaProducer/produce(_:)`` until the broker acknowledges them, counted in one
/// place: queued, or handed over (taken for producing, or produced and awaiting the broker's answer). A message
/// counts as unacknowledged at every step, so a shutdown that waits for ``unacknowledged`` to reach 0 cannot see 0
/// while a batch is in the producer's hands between the queue and librdkafka, or while a failed message is on its
/// way back to the queue, or before the records an acknowledgement settles have heard of it. Pure: the producer
/// keeps it behind one lock.
struct ProducerOutbox {
    private(set) var queued = Deque<OutgoingMessage>()
    /// Taken by ``take(max:)`` and neither given back nor answered yet.
    private(set) var handedOver = 0

    /// Messages not yet acknowledged by the broker (queued or handed over).
    var unacknowledged: Int { queued.count + handedOver }

    mutating func append(_ message: OutgoingMessage) { queued.append(message) }

    mutating func append(contentsOf messages: some Sequence<OutgoingMessage>) { queued.append(contentsOf: messages) }

    /// Up to `max` messages from the front, handed over to be produced.
    mutating func take(max: Int) -> [OutgoingMessage] {
        let n = Swift.min(queued.count, max)
        defer { queued.removeFirst(n) }
        handedOver += n
        return Array(queued.prefix(n))
    }

    /// Messages taken and not produced (librdkafka's queue was full): back to the front, in their order.
    mutating func giveBack(_ messages: some Collection<OutgoingMessage>) {
        queued.insert(contentsOf: messages, at: 0)
        handedOver -= messages.count
    }

    /// Produced messages the broker did not take: queued again at the back, to be produced again.
    mutating func failed(_ messages: some Collection<OutgoingMessage>) {
        queued.append(contentsOf: messages)
        handedOver -= messages.count
    }

    /// Produced messages the broker acknowledged, once whoever waits for them has been told.
    mutating func acknowledged(_ count: Int) {
        precondition(count <= handedOver, "more acknowledgements than messages handed over")
        handedOver -= count
    }
}
