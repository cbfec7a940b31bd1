import PushCore
import PushGateway
import PushKafka

/// A poll's records, decoded outside the lifecycle's lock. What a record became (``RecordLifecycle/Batch``) is kept
/// apart from the notification, request or error event it carries, each kind in an array of its own in record
/// order, so that admitting and encoding read them where they are: an element copied out retains its token,
/// payload and strings.
struct DecodedBatch {
    /// A binary notification waiting to be encoded, with its endpoint and its room in a frame block.
    struct PendingFrame {
        let endpoint: Int
        let room: Int
        let frame: EventAdmission.StagedFrame
    }

    let now: Int64
    /// The records as the lifecycle admits them.
    private(set) var admission: RecordLifecycle.Batch
    private(set) var frames: [PendingFrame] = []
    private(set) var requests: [HTTP2Delivery] = []
    private(set) var rejects: [DeliveryErrorEvent] = []
    /// The tokens' and payloads' bytes of `frames`, one after the other: no arrays of their own per record.
    private(set) var staging: [UInt8]

    init(now: Int64, capacity: Int, staging: [UInt8] = []) {
        self.now = now
        self.staging = staging
        admission = RecordLifecycle.Batch(capacity: capacity)
        frames.reserveCapacity(capacity)
    }

    /// The staging buffer, for the next poll.
    mutating func takeStaging() -> [UInt8] {
        var taken = [UInt8]()
        swap(&taken, &staging)
        return taken
    }

    /// The records added next are `partition`'s (until the next run starts).
    mutating func startRun(_ partition: TopicPartition) { admission.startRun(partition) }

    /// Decodes one record of the current run.
    mutating func add(offset: Int64, timestamp: Int64, value: UnsafeRawBufferPointer, _ decoder: EventAdmission) {
        let partition = admission.currentPartition
        let decoded = decoder.decode(value, timestamp: timestamp, now: now, staging: &staging, requests: &requests) {
            RecordSource(topic: partition.topic, partition: partition.partition, offset: offset)
        }
        switch consume decoded {
        case .deliver(let held, let frame):
            let room = FrameBlockWriter.room(
                tokenCount: frame.token.count, payloadCount: frame.payload.count, format: decoder.endpointFormats[held.endpoint])
            frames.append(PendingFrame(endpoint: held.endpoint, room: room, frame: frame))
            admission.append(offset: offset, held: held)
        case .deliverHTTP2(let held):
            admission.append(offset: offset, held: held)
        case .reject(let event):
            rejects.append(event)
            admission.append(offset: offset, held: nil)
        }
    }

    /// The batch's deliveries by endpoint, in record order, with the tickets the lifecycle gave their records
    /// (`tickets`, one per record): binary ones encoded into frame blocks, HTTP/2 ones as decoded.
    func deliveries(
        tickets: [LedgerTicket], formats: [NotificationFormat], http2: [Bool]
    ) -> (binary: [[Delivery]], http2: [[HTTP2Delivery]]) {
        // Each endpoint's deliveries are in record order: the next one of `held.endpoint` is the record's, and its
        // ticket is written in place (a copy out and back would retain and release its frame block).
        var binary = encodeFrames(formats: formats)
        var nextFrame = Array(repeating: 0, count: binary.count)
        var nextRequest = 0
        var byHTTP2Endpoint = Array(repeating: [HTTP2Delivery](), count: formats.count)
        for i in admission.records.indices {
            guard let held = admission.records[i].held else { continue }
            let ticket = DeliveryTicket(tickets[i])
            if http2[held.endpoint] {
                var delivery = requests[nextRequest]
                nextRequest += 1
                delivery.ticket = ticket
                byHTTP2Endpoint[held.endpoint].append(delivery)
            } else {
                binary[held.endpoint][nextFrame[held.endpoint]].ticket = ticket
                nextFrame[held.endpoint] += 1
            }
        }
        return (binary, byHTTP2Endpoint)
    }

    /// The rejected records' error events with their tickets (`tickets`, one per record).
    func rejected(tickets: [LedgerTicket]) -> [(event: DeliveryErrorEvent, ticket: LedgerTicket)] {
        var next = 0
        var result: [(event: DeliveryErrorEvent, ticket: LedgerTicket)] = []
        result.reserveCapacity(rejects.count)
        for i in admission.records.indices where admission.records[i].held == nil {
            result.append((rejects[next], tickets[i]))
            next += 1
        }
        return result
    }


    /// The batch's notifications encoded, by endpoint, each endpoint's in the batch's order: each endpoint's into
    /// blocks of exactly their size (up to ``FrameBlockWriter/blockCapacity`` each), outside the ledger's lock.
    private func encodeFrames(formats endpointFormats: [NotificationFormat]) -> [[Delivery]] {
        var remaining = Array(repeating: 0, count: endpointFormats.count)
        var counts = Array(repeating: 0, count: endpointFormats.count)
        for i in frames.indices {
            remaining[frames[i].endpoint] += frames[i].room
            counts[frames[i].endpoint] += 1
        }
        var byEndpoint = counts.map { count in
            var deliveries: [Delivery] = []
            deliveries.reserveCapacity(count)
            return deliveries
        }
        var writers: [FrameBlockWriter?] = Array(repeating: nil, count: endpointFormats.count)
        // The writer of the endpoint being written is held here, not in `writers`: a write through the array's
        // optional would copy it out and back, retaining and releasing its block for every frame.
        var current = -1
        var writer: FrameBlockWriter?
        staging.withUnsafeBytes { staging in
            for i in frames.indices {
                let endpoint = frames[i].endpoint
                if endpoint != current {
                    if current >= 0 { writers[current] = writer.take() }
                    writer = writers[endpoint].take()
                    current = endpoint
                }
                let room = frames[i].room
                if !(writer?.fits(room) ?? false) {
                    writer = FrameBlockWriter(capacity: max(room, min(remaining[endpoint], FrameBlockWriter.blockCapacity)))
                }
                remaining[endpoint] -= room
                let frame = frames[i].frame
                byEndpoint[endpoint].append(writer!.delivery(
                    ticket: DeliveryTicket(0), token: UnsafeRawBufferPointer(rebasing: staging[frame.token]),
                    payload: UnsafeRawBufferPointer(rebasing: staging[frame.payload]), expiration: frame.expiration,
                    priority: frame.priority, format: endpointFormats[endpoint]))
            }
        }
        return byEndpoint
    }
}
