import NIOCore
import NIOHPACK
import PushCore

/// The server side of one HTTP/2 connection as the simulated API speaks it (RFC 9113, no I/O): reads the client's
/// bytes frame by frame, keeps the streams, both directions' flow control and the settings, and hands out each
/// complete request; its answers and every control frame collect in ``output``, which the connection writes once per
/// read. Strict as a server must be: what RFC 9113 calls a connection error queues GOAWAY with its code and throws;
/// a stream error resets the stream. Header blocks are decoded by ``HeaderBlockDecoder``; the answers' own header blocks are
/// written here, never indexed and without Huffman coding (an answer's fields are `:status`, `apns-id` and sometimes
/// `content-type`: encoding them costs a few copies).
struct HTTP2ServerSession {
    /// What a read produced for the connection to act on.
    enum Event {
        /// A request is complete (END_STREAM arrived); its stream waits for ``answer(_:status:apnsID:body:)``.
        case request(stream: UInt32, headers: HeaderList, body: [UInt8])
        /// A request's header block broke RFC 9113 section 8's rules: its stream is reset with PROTOCOL_ERROR.
        case malformed(stream: UInt32, problem: HeaderBlockRules.Problem)
    }

    /// Bytes to write, in order.
    private(set) var output: ByteBuffer
    /// The highest stream id the client opened (RFC 9113 section 5.1.1: new ones must be higher).
    private(set) var lastClientStream: UInt32 = 0
    /// Whether the client sent GOAWAY.
    private(set) var clientWentAway = false

    /// The request body kept per stream: more than any push type allows (the rest is counted, not kept).
    let bodyLimit: Int
    /// SETTINGS_MAX_CONCURRENT_STREAMS as last sent.
    private(set) var streamLimit: Int
    /// The limits of SETTINGS frames the client has not acknowledged yet, oldest first, and the limit of the last
    /// one it did: a lowered limit applies once acknowledged (RFC 9113 section 6.5.3), a raised one at once. The
    /// preface's limit holds from the first stream (SPEC section 13): a client that never acknowledges it gets no
    /// more streams than it was told.
    private var unacknowledgedLimits: [Int] = []
    private var acknowledgedLimit: Int
    /// SETTINGS frames this side sent that the client has not acknowledged.
    var settingsAwaitingAck: Int { unacknowledgedLimits.count }
    /// SETTINGS acknowledgements received: the connection's timer sees whether one came in time.
    private(set) var settingsAcknowledged = 0
    private var limits = HTTP2PeerLimits()

    /// The stream limit in force.
    private var effectiveStreamLimit: Int { max(acknowledgedLimit, unacknowledgedLimits.max() ?? 0) }

    private enum Phase { case preface, firstSettings, open }
    private var phase = Phase.preface
    private var decoder = HeaderBlockDecoder()
    private var streams: [UInt32: Stream] = [:]
    /// Streams this side reset: frames the client sent on them before it learnt of it are ignored (RFC 9113
    /// section 5.4.2), up to the newest ``resetMemory`` of them.
    private var resetStreams: Set<UInt32> = []
    private var resetOrder: [UInt32] = []
    private static let resetMemory = 4096
    /// A header block in pieces: HEADERS without END_HEADERS, then CONTINUATION frames on the same stream.
    private var fragments: HTTP2Wire.HeaderBlockInPieces?

    // Flow control, RFC 9113 section 6.9. Receiving: what the client may still send on the connection, and each
    // stream's own window (65,535 by default: this side never changes SETTINGS_INITIAL_WINDOW_SIZE).
    private var receiveWindow = HTTP2Wire.defaultWindow
    /// Sending: the client's windows for this side's DATA.
    private var sendWindow = HTTP2Wire.defaultWindow
    private var peer = HTTP2Wire.PeerSettings()
    /// The client's HEADER_TABLE_SIZE went down: the next header block starts with a size update (RFC 7541 section
    /// 4.2; this side's table stays empty, but decoders such as nghttp2 expect the update).
    private var pendingTableSizeUpdate: Int?
    /// Answer bodies waiting for the client's windows, in order, from `blockedHead` (entries of streams reset
    /// meanwhile are skipped when reached: each operation is constant time).
    private var blocked: [(stream: UInt32, body: [UInt8])] = []
    private var blockedHead = 0

    /// The connection's receive window after ``topUpReceiveWindow()``.
    static let connectionWindow = 16 << 20
    private static let windowStep = 32 * 1024

    private struct Stream {
        var headers: HeaderList?
        var body: [UInt8] = []
        var receiveWindow = HTTP2Wire.defaultWindow
        var unacknowledged = 0
        var sendWindow: Int
        /// END_STREAM arrived: half-closed (remote), waiting for the answer.
        var complete = false
        /// Answered, the body still waiting for the client's windows: takes no second answer.
        var answered = false
    }

    init(streamLimit: Int, bodyLimit: Int, allocator: ByteBufferAllocator = ByteBufferAllocator()) {
        self.streamLimit = streamLimit
        self.acknowledgedLimit = streamLimit
        self.bodyLimit = bodyLimit
        self.output = allocator.buffer(capacity: 16 * 1024)
        // The server's preface: SETTINGS, then the connection window opened to 16 MiB at once (many requests'
        // bodies arrive back to back).
        HTTP2Wire.writeSettings(
            [(HTTP2Wire.Setting.maxConcurrentStreams, UInt32(streamLimit)),
             (HTTP2Wire.Setting.maxHeaderListSize, UInt32(HPACKDecoder.defaultMaxHeaderListSize))],
            to: &output)
        unacknowledgedLimits = [streamLimit]
        HTTP2Wire.writeWindowUpdate(stream: 0, increment: Self.connectionWindow - HTTP2Wire.defaultWindow, to: &output)
        receiveWindow = Self.connectionWindow
    }

    /// Streams open or waiting for their answer: what counts against SETTINGS_MAX_CONCURRENT_STREAMS.
    var openStreams: Int { streams.count }

    /// Takes what was queued to write.
    mutating func takeOutput() -> ByteBuffer? {
        guard output.readableBytes > 0 else { return nil }
        let taken = output
        output = ByteBuffer()
        return taken
    }

    // MARK: Reading

    /// Reads frames from `input` until a request is complete or a frame is incomplete (what remains stays in
    /// `input`). `now` (nanoseconds of a monotonic clock) paces the client's control frames (``HTTP2PeerLimits``).
    /// Throws ``ConnectionError`` after queuing GOAWAY.
    mutating func next(from input: inout ByteBuffer, now: Int64 = 0) throws(ConnectionError) -> Event? {
        do {
            return try read(&input, now: now)
        } catch {
            fail(error)
            throw error
        }
    }

    /// Ends the connection from this side (a rule the session cannot see itself, such as a SETTINGS
    /// acknowledgement that never came): queues GOAWAY with the error's code.
    mutating func fail(_ error: ConnectionError) {
        writeGoAway(lastStream: lastClientStream, code: error.code)
    }

    private mutating func read(_ input: inout ByteBuffer, now: Int64) throws(ConnectionError) -> Event? {
        if phase == .preface {
            guard input.readableBytes >= Self.preface.count else {
                guard input.readableBytesView.elementsEqual(Self.preface.prefix(input.readableBytes)) else {
                    throw ConnectionError(code: .protocolError, detail: "not the HTTP/2 client preface")
                }
                return nil
            }
            guard input.readableBytesView.prefix(Self.preface.count).elementsEqual(Self.preface) else {
                throw ConnectionError(code: .protocolError, detail: "not the HTTP/2 client preface")
            }
            input.moveReaderIndex(forwardBy: Self.preface.count)
            phase = .firstSettings
        }
        while let header = HTTP2Wire.FrameHeader(peekingAt: input) {
            let length = header.length, type = header.type, flags = header.flags, stream = header.stream
            guard length <= HTTP2Wire.maxFrameSize else {
                throw ConnectionError(code: .frameSizeError, detail: "frame of \(length) bytes")
            }
            guard let payload = input.getSlice(at: input.readerIndex + 9, length: length) else { return nil }
            input.moveReaderIndex(forwardBy: 9 + length)
            if phase == .firstSettings {
                guard type == HTTP2Wire.settings, flags & HTTP2Wire.ack == 0 else {
                    throw ConnectionError(code: .protocolError, detail: "the preface's first frame is not SETTINGS")
                }
                phase = .open
            }
            try limits.count(header, now: now)
            if let event = try frame(type: type, flags: flags, stream: stream, payload: payload) { return event }
        }
        return nil
    }

    private static let preface = HTTP2Wire.preface

    private mutating func frame(type: UInt8, flags: UInt8, stream: UInt32, payload: ByteBuffer) throws(ConnectionError) -> Event? {
        if let fragments, type != HTTP2Wire.continuation || stream != fragments.stream {
            throw ConnectionError(code: .protocolError, detail: "frame type \(type) inside the header block of stream \(fragments.stream)")
        }
        switch type {
        case HTTP2Wire.data: return try data(flags: flags, stream: stream, payload: payload)
        case HTTP2Wire.headers: return try headers(flags: flags, stream: stream, payload: payload)
        case HTTP2Wire.priority:
            try requireStream(stream, "PRIORITY")
            // Stream errors, but RST_STREAM is never sent on an idle stream (RFC 9113 section 6.4): there they end
            // the connection instead.
            let idle = stream > lastClientStream
            guard payload.readableBytes == 5 else {
                if idle { throw ConnectionError(code: .frameSizeError, detail: "PRIORITY of \(payload.readableBytes) bytes on idle stream \(stream)") }
                resetByThisSide(stream, .frameSizeError)
                return nil
            }
            if payload.getInteger(at: payload.readerIndex, as: UInt32.self)! & 0x7FFF_FFFF == stream {
                if idle { throw ConnectionError(code: .protocolError, detail: "idle stream \(stream) depends on itself") }
                resetByThisSide(stream, .protocolError)
            }
        case HTTP2Wire.rstStream:
            try requireStream(stream, "RST_STREAM")
            guard payload.readableBytes == 4 else { throw ConnectionError(code: .frameSizeError, detail: "RST_STREAM of \(payload.readableBytes) bytes") }
            guard stream <= lastClientStream else { throw ConnectionError(code: .protocolError, detail: "RST_STREAM on idle stream \(stream)") }
            streams[stream] = nil
        case HTTP2Wire.settings: try settings(flags: flags, stream: stream, payload: payload)
        case HTTP2Wire.pushPromise: throw ConnectionError(code: .protocolError, detail: "PUSH_PROMISE from a client")
        case HTTP2Wire.ping: try HTTP2Wire.answerPing(flags: flags, stream: stream, payload: payload, to: &output)
        case HTTP2Wire.goAway:
            _ = try HTTP2Wire.goAwayLastStream(stream: stream, payload: payload)
            clientWentAway = true
        case HTTP2Wire.windowUpdate: try windowUpdate(stream: stream, payload: payload)
        case HTTP2Wire.continuation:
            guard let whole = try HTTP2Wire.HeaderBlockInPieces.take(&fragments, flags: flags, payload: payload) else { return nil }
            return try headerBlock(whole.block, stream: whole.stream, endStream: whole.endStream)
        default:
            break  // unknown frame types are ignored (RFC 9113 section 4.1)
        }
        return nil
    }

    private func requireStream(_ stream: UInt32, _ name: String) throws(ConnectionError) {
        guard stream != 0 else { throw ConnectionError(code: .protocolError, detail: "\(name) on stream 0") }
    }

    private mutating func data(flags: UInt8, stream id: UInt32, payload: ByteBuffer) throws(ConnectionError) -> Event? {
        try requireStream(id, "DATA")
        let length = payload.readableBytes
        receiveWindow -= length
        guard receiveWindow >= 0 else { throw ConnectionError(code: .flowControlError, detail: "DATA beyond the connection's window") }
        guard id <= lastClientStream else { throw ConnectionError(code: .protocolError, detail: "DATA on idle stream \(id)") }
        guard var stream = streams[id], !stream.complete else {
            if !resetStreams.contains(id) { resetByThisSide(id, .streamClosed) }
            return nil
        }
        streams[id] = nil  // in place: a copy would make the append copy the body so far
        let content = try HTTP2Wire.unpadded(payload, flags: flags)
        stream.receiveWindow -= length
        guard stream.receiveWindow >= 0 else { throw ConnectionError(code: .flowControlError, detail: "DATA beyond stream \(id)'s window") }
        stream.body.append(contentsOf: content.readableBytesView.prefix(bodyLimit - stream.body.count))
        stream.unacknowledged += length
        if flags & HTTP2Wire.endStream != 0 {
            let request = Event.request(stream: id, headers: stream.headers ?? HeaderList(), body: stream.body)
            streams[id] = Stream(sendWindow: stream.sendWindow, complete: true)
            return request
        }
        if stream.unacknowledged >= Self.windowStep {
            HTTP2Wire.writeWindowUpdate(stream: id, increment: stream.unacknowledged, to: &output)
            stream.receiveWindow += stream.unacknowledged
            stream.unacknowledged = 0
        }
        streams[id] = stream
        return nil
    }

    private mutating func headers(flags: UInt8, stream id: UInt32, payload: ByteBuffer) throws(ConnectionError) -> Event? {
        try requireStream(id, "HEADERS")
        let prioritised = flags & HTTP2Wire.priorityFlag != 0
        let block = try HTTP2Wire.unpadded(payload, flags: flags, skipping: prioritised ? 5 : 0)
        if prioritised, let dependency = payload.getInteger(at: payload.readerIndex + (flags & HTTP2Wire.padded != 0 ? 1 : 0), as: UInt32.self),
           dependency & 0x7FFF_FFFF == id {
            // A stream error by RFC 9113 section 5.3.1, made a connection error (section 5.4 allows it): the block
            // may continue in CONTINUATION frames, and the HPACK table would have to see it all.
            throw ConnectionError(code: .protocolError, detail: "stream \(id) depends on itself")
        }
        let endStream = flags & HTTP2Wire.endStream != 0
        guard flags & HTTP2Wire.endHeaders != 0 else {
            fragments = HTTP2Wire.HeaderBlockInPieces(stream: id, endStream: endStream, first: block)
            return nil
        }
        return try headerBlock(block, stream: id, endStream: endStream)
    }

    private mutating func decode(_ block: ByteBuffer) throws(ConnectionError) -> HeaderList {
        do {
            return try decoder.decode(block)
        } catch {
            throw ConnectionError(code: .compressionError, detail: "header block: \(error)")
        }
    }

    /// A whole header block on stream `id`: a new request, a request's trailers, or a block on a stream this side
    /// reset (decoded for the table's sake, then dropped).
    private mutating func headerBlock(_ block: ByteBuffer, stream id: UInt32, endStream: Bool) throws(ConnectionError) -> Event? {
        let headers = try decode(block)
        if id <= lastClientStream {
            if resetStreams.contains(id) { return nil }
            guard var stream = streams[id], !stream.complete else {
                throw ConnectionError(code: .streamClosed, detail: "HEADERS on closed stream \(id)")
            }
            // Trailers: they end the stream and carry no pseudo-header.
            if let problem = endStream ? HeaderBlockRules.problem(inTrailers: headers) : .trailersWithoutEndStream {
                return malformed(id, problem)
            }
            stream.headers!.append(contentsOf: headers)
            streams[id] = Stream(sendWindow: stream.sendWindow, complete: true)
            return .request(stream: id, headers: stream.headers!, body: stream.body)
        }
        guard id & 1 == 1 else { throw ConnectionError(code: .protocolError, detail: "client stream \(id) is even") }
        guard !clientWentAway else { throw ConnectionError(code: .protocolError, detail: "a stream after the client's GOAWAY") }
        lastClientStream = id
        guard streams.count < effectiveStreamLimit else {
            resetByThisSide(id, .refusedStream)
            return nil
        }
        if let problem = HeaderBlockRules.problem(inRequest: headers) { return malformed(id, problem) }
        guard endStream else {
            streams[id] = Stream(headers: headers, sendWindow: peer.initialWindow)
            return nil
        }
        streams[id] = Stream(sendWindow: peer.initialWindow, complete: true)
        return .request(stream: id, headers: headers, body: [])
    }

    private mutating func malformed(_ id: UInt32, _ problem: HeaderBlockRules.Problem) -> Event {
        resetByThisSide(id, .protocolError)
        return .malformed(stream: id, problem: problem)
    }

    private mutating func settings(flags: UInt8, stream: UInt32, payload: ByteBuffer) throws(ConnectionError) {
        guard let parameters = try HTTP2Wire.settingsParameters(flags: flags, stream: stream, payload: payload) else {
            if !unacknowledgedLimits.isEmpty { acknowledgedLimit = unacknowledgedLimits.removeFirst() }
            settingsAcknowledged += 1
            return
        }
        for (parameter, value) in parameters where parameter == HTTP2Wire.Setting.headerTableSize {
            pendingTableSizeUpdate = min(pendingTableSizeUpdate ?? 4096, Int(value))
        }
        // MAX_CONCURRENT_STREAMS (this side opens none), MAX_HEADER_LIST_SIZE and unknown ones change nothing.
        try peer.apply(parameters, to: &streams, \.sendWindow)
        HTTP2Wire.writeFrameHeader(length: 0, type: HTTP2Wire.settings, flags: HTTP2Wire.ack, stream: 0, to: &output)
        sendBlocked()
    }

    private mutating func windowUpdate(stream id: UInt32, payload: ByteBuffer) throws(ConnectionError) {
        let increment = try HTTP2Wire.windowIncrement(payload)
        if id == 0 {
            try HTTP2Wire.creditConnection(&sendWindow, by: increment)
        } else {
            guard id <= lastClientStream else { throw ConnectionError(code: .protocolError, detail: "WINDOW_UPDATE on idle stream \(id)") }
            guard streams[id] != nil else { return }
            guard increment > 0 else { resetByThisSide(id, .protocolError); return }
            streams[id]!.sendWindow += increment
            guard streams[id]!.sendWindow <= HTTP2Wire.maxWindow else { resetByThisSide(id, .flowControlError); return }
        }
        sendBlocked()
    }

    /// Resets a stream (a stream error, RFC 9113 section 5.4.2) and remembers it, so that what the client sent on
    /// it meanwhile is ignored.
    private mutating func resetByThisSide(_ id: UInt32, _ code: ErrorCode) {
        streams[id] = nil
        HTTP2Wire.writeReset(stream: id, code: code, to: &output)
        if resetStreams.insert(id).inserted {
            resetOrder.append(id)
            if resetOrder.count > Self.resetMemory {
                let forgotten = resetOrder.prefix(Self.resetMemory / 2)
                resetStreams.subtract(forgotten)
                resetOrder.removeFirst(Self.resetMemory / 2)
            }
        }
    }

    /// Gives the connection's receive window back up to ``connectionWindow`` once 32 KiB or more of it were used
    /// (by any DATA, including DATA on streams already reset). Called once per read.
    mutating func topUpReceiveWindow() {
        let used = Self.connectionWindow - receiveWindow
        guard used >= Self.windowStep else { return }
        HTTP2Wire.writeWindowUpdate(stream: 0, increment: used, to: &output)
        receiveWindow = Self.connectionWindow
    }

    // MARK: Writing

    /// Whether stream `id` waits for its answer (the client may have reset it meanwhile).
    func isWaiting(_ id: UInt32) -> Bool { streams[id].map { $0.complete && !$0.answered } ?? false }

    /// Answers stream `id`: HEADERS with `:status`, `apns-id`, `apns-unique-id` when given (the sandbox) and, with a
    /// body, `content-type: application/json`, then the body as DATA when the client's windows allow. Returns false
    /// when the stream no longer waits.
    @discardableResult
    mutating func answer(_ id: UInt32, status: Int, apnsID: String, uniqueID: String? = nil, body: [UInt8]) -> Bool {
        guard let stream = streams[id], stream.complete, !stream.answered else { return false }
        let start = output.writerIndex
        let flags = HTTP2Wire.endHeaders | (body.isEmpty ? HTTP2Wire.endStream : 0)
        HTTP2Wire.writeFrameHeader(length: 0, type: HTTP2Wire.headers, flags: flags, stream: id, to: &output)
        if let size = pendingTableSizeUpdate {
            pendingTableSizeUpdate = nil
            HTTP2Wire.writeHPACKInteger(size, prefixBits: 5, pattern: 0x20, to: &output)
        }
        writeStatus(status)
        // apns-id: a literal without indexing, with a new name (never indexed: each value is unique).
        output.writeInteger(UInt8(0))
        output.writeInteger(UInt8(7))
        output.writeStaticString("apns-id")
        HTTP2Wire.writeHPACKInteger(apnsID.utf8.count, prefixBits: 7, pattern: 0, to: &output)
        output.writeString(apnsID)
        if let uniqueID {
            output.writeInteger(UInt8(0))
            output.writeInteger(UInt8(14))
            output.writeStaticString("apns-unique-id")
            HTTP2Wire.writeHPACKInteger(uniqueID.utf8.count, prefixBits: 7, pattern: 0, to: &output)
            output.writeString(uniqueID)
        }
        if !body.isEmpty {
            // content-type (static index 31), literal without indexing.
            output.writeInteger(UInt8(0x0F))
            output.writeInteger(UInt8(31 - 15))
            output.writeInteger(UInt8(16))
            output.writeStaticString("application/json")
        }
        HTTP2Wire.patchLength(ofFrameAt: start, in: &output)
        if body.isEmpty {
            streams[id] = nil
        } else {
            streams[id]!.answered = true
            blocked.append((id, body))
            sendBlocked()
        }
        return true
    }

    /// `:status`: the static table's entry for 200, 204, 206, 304, 400, 404 and 500, otherwise a literal without
    /// indexing on the static name.
    private mutating func writeStatus(_ status: Int) {
        let indexed: UInt8? = switch status {
        case 200: 8
        case 204: 9
        case 206: 10
        case 304: 11
        case 400: 12
        case 404: 13
        case 500: 14
        default: nil
        }
        if let indexed {
            output.writeInteger(0x80 | indexed)
        } else {
            let text = String(status)
            output.writeInteger(UInt8(0x08))
            output.writeInteger(UInt8(text.utf8.count))
            output.writeString(text)
        }
    }

    /// Sends the answer bodies that fit the client's windows, in order: a body waits whole for its stream's and the
    /// connection's window (Apple's bodies are a few dozen bytes, smaller than any frame).
    private mutating func sendBlocked() {
        while blockedHead < blocked.count {
            let first = blocked[blockedHead]
            guard let window = streams[first.stream]?.sendWindow else {
                blockedHead += 1  // reset meanwhile
                continue
            }
            let size = first.body.count
            guard size <= window, size <= sendWindow, size <= peer.maxFrameSize else { break }
            blockedHead += 1
            sendWindow -= size
            HTTP2Wire.writeFrameHeader(length: size, type: HTTP2Wire.data, flags: HTTP2Wire.endStream, stream: first.stream, to: &output)
            output.writeBytes(first.body)
            streams[first.stream] = nil
        }
        if blockedHead == blocked.count {
            blocked.removeAll(keepingCapacity: true)
            blockedHead = 0
        } else if blockedHead >= 1024, blockedHead * 2 >= blocked.count {
            blocked.removeFirst(blockedHead)
            blockedHead = 0
        }
    }

    /// Sends SETTINGS_MAX_CONCURRENT_STREAMS anew (a token connection's after its first success).
    mutating func raiseStreamLimit(to limit: Int) {
        streamLimit = limit
        HTTP2Wire.writeSettings([(HTTP2Wire.Setting.maxConcurrentStreams, UInt32(limit))], to: &output)
        unacknowledgedLimits.append(limit)
    }

    /// Queues GOAWAY naming `lastStream`: streams up to it are still answered.
    mutating func writeGoAway(lastStream: UInt32, code: ErrorCode = .noError) {
        HTTP2Wire.writeGoAway(lastStream: lastStream, code: code, to: &output)
    }
}

extension HTTP2ServerSession {
    typealias ConnectionError = HTTP2Wire.ConnectionError
    typealias ErrorCode = HTTP2Wire.ErrorCode
}
