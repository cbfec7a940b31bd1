import NIOCore
import NIOHPACK
import PushCore

/// The client side of one HTTP/2 connection to the provider API (RFC 9113, no I/O): writes the connection preface,
/// each request's HEADERS and DATA (the body as the server's windows allow, in the order requests were sent), reads
/// the server's frames and hands out what the connection acts on: response headers and bodies, resets, the server's
/// stream limit, GOAWAY. Follows the server's settings, answers its PINGs, gives its receive windows back. Whatever
/// the server sends that RFC 9113 calls a connection error queues GOAWAY and throws. Request header blocks come from
/// ``RequestHeaderEncoder``; response header blocks are decoded with `NIOHPACK`.
struct HTTP2ClientSession {
    /// What a read produced.
    enum Event {
        /// A HEADERS block on a stream this side opened: the response's `:status` (nil when absent or not one RFC 9110
        /// allows) and its `apns-unique-id` (Apple's sandbox), when it has one of at most 64 bytes.
        case headers(stream: UInt32, status: Int?, endStream: Bool, uniqueID: String?)
        case data(stream: UInt32, ByteBuffer, endStream: Bool)
        /// The server reset a stream (RST_STREAM and its error code).
        case reset(stream: UInt32, code: UInt32)
        /// The server's SETTINGS arrived (acknowledged already): its SETTINGS_MAX_CONCURRENT_STREAMS, if it said.
        case settings(maxConcurrentStreams: Int?)
        /// GOAWAY: streams above `lastStream` were not processed (the connection tells the session which it
        /// forgets: ``forget(_:)``).
        case goAway(lastStream: UInt32)
        /// The server broke the protocol on one stream (an informational response that ended it): the stream is
        /// reset with PROTOCOL_ERROR and its request goes again.
        case streamError(stream: UInt32, detail: String)
    }

    typealias ConnectionError = HTTP2Wire.ConnectionError

    /// Bytes to write, in order.
    private(set) var output: ByteBuffer
    /// Whether what this side writes drains (the channel is writable); the connection sets it as that changes.
    var writable = true {
        didSet { if writable { acknowledgementsWhileBlocked = 0 } }
    }
    /// PING and SETTINGS acknowledgements owed since writes stopped draining.
    private var acknowledgementsWhileBlocked = 0
    /// How many acknowledgements may wait while the server reads nothing of what it is sent (swift-nio-http2's
    /// `maximumBufferedControlFrames`): a server that goes on sending PINGs or SETTINGS beyond it would make this side
    /// hold ever more answers, so the connection ends with ENHANCE_YOUR_CALM and its requests go again elsewhere.
    static let maxAcknowledgementsWhileBlocked = 10_000
    private var encoder = RequestHeaderEncoder()
    private var decoder: HPACKDecoder
    private var phase = Phase.firstSettings
    private enum Phase { case firstSettings, open }
    /// The highest stream id this side opened.
    private var lastStream: UInt32 = 0
    private var streams: [UInt32: Stream] = [:]
    /// Request bodies waiting for the server's windows, in order.
    private var blocked: [(stream: UInt32, body: [UInt8], offset: Int)] = []
    private var blockedHead = 0
    private var fragments: HTTP2Wire.HeaderBlockInPieces?
    private var limits = HTTP2PeerLimits()
    /// The last stream id of the server's last GOAWAY: a later one may lower it, never raise it.
    private var goAwayLastStream: UInt32?
    /// SETTINGS frames this side sent that the server has not acknowledged (the preface's, at first).
    private(set) var settingsAwaitingAck = 1
    /// SETTINGS acknowledgements received: the connection's timer sees whether one came in time.
    private(set) var settingsAcknowledged = 0

    private var sendWindow = HTTP2Wire.defaultWindow
    private var peer = HTTP2Wire.PeerSettings()
    private var receiveWindow = HTTP2Wire.defaultWindow

    /// SETTINGS_INITIAL_WINDOW_SIZE this side announces: a response's body is a few dozen bytes.
    static let streamWindow = 1 << 20
    /// The connection's receive window, opened at once and topped up per read.
    static let connectionWindow = 1 << 20
    private static let windowStep = 32 * 1024

    private struct Stream {
        var sendWindow: Int
        var receiveWindow = HTTP2ClientSession.streamWindow
        var unacknowledged = 0
        /// This side's END_STREAM is written (the whole body sent).
        var sent = false
    }

    init(allocator: ByteBufferAllocator = ByteBufferAllocator()) {
        decoder = HPACKDecoder(allocator: allocator)
        output = allocator.buffer(capacity: 16 * 1024)
        output.writeBytes(HTTP2Wire.preface)
        HTTP2Wire.writeSettings(
            [(HTTP2Wire.Setting.enablePush, 0), (HTTP2Wire.Setting.maxConcurrentStreams, 0), (HTTP2Wire.Setting.initialWindowSize, UInt32(Self.streamWindow))],
            to: &output)
        HTTP2Wire.writeWindowUpdate(stream: 0, increment: Self.connectionWindow - HTTP2Wire.defaultWindow, to: &output)
        receiveWindow = Self.connectionWindow
    }

    /// Takes what was queued to write.
    mutating func takeOutput() -> ByteBuffer? {
        guard output.readableBytes > 0 else { return nil }
        let taken = output
        output = ByteBuffer()
        return taken
    }

    /// Streams this side opened that are not finished (for tests).
    var openStreams: Int { streams.count }

    // MARK: Writing

    /// Opens stream `id` (higher than any before) with the request's HEADERS, then its body as DATA when the
    /// server's windows allow.
    mutating func send(_ request: APNsRequest, stream id: UInt32, authority: String?, bearer: String?) {
        precondition(id > lastStream && id & 1 == 1, "client streams are odd and increasing")
        lastStream = id
        let start = output.writerIndex
        HTTP2Wire.writeFrameHeader(length: 0, type: HTTP2Wire.headers, flags: HTTP2Wire.endHeaders, stream: id, to: &output)
        encoder.write(request, authority: authority, bearer: bearer, into: &output)
        let blockLength = output.writerIndex - start - 9
        if blockLength <= peer.maxFrameSize {
            HTTP2Wire.patchLength(ofFrameAt: start, in: &output)
        } else {
            splitHeaderBlock(at: start, stream: id)
        }
        streams[id] = Stream(sendWindow: peer.initialWindow)
        blocked.append((id, request.body, 0))
        sendBlocked()
    }

    /// A header block longer than the server's frame size: HEADERS without END_HEADERS, then CONTINUATION frames.
    private mutating func splitHeaderBlock(at start: Int, stream id: UInt32) {
        var block = output.getSlice(at: start + 9, length: output.writerIndex - start - 9)!
        output.moveWriterIndex(to: start)
        var first = true
        while block.readableBytes > 0 {
            var piece = block.readSlice(length: min(peer.maxFrameSize, block.readableBytes))!
            let last = block.readableBytes == 0
            HTTP2Wire.writeFrameHeader(
                length: piece.readableBytes, type: first ? HTTP2Wire.headers : HTTP2Wire.continuation,
                flags: last ? HTTP2Wire.endHeaders : 0, stream: id, to: &output)
            output.writeBuffer(&piece)
            first = false
        }
    }

    /// Writes the waiting bodies, oldest first, as far as the windows allow (a body may leave in several frames).
    private mutating func sendBlocked() {
        while blockedHead < blocked.count {
            let (id, body, offset) = blocked[blockedHead]
            guard let stream = streams[id], !stream.sent, id <= goAwayLastStream ?? .max else {
                blockedHead += 1
                continue
            }
            let size = min(body.count - offset, stream.sendWindow, sendWindow, peer.maxFrameSize)
            let rest = body.count - offset
            guard size > 0 || rest == 0 else { break }
            let end = size == rest
            HTTP2Wire.writeFrameHeader(length: size, type: HTTP2Wire.data, flags: end ? HTTP2Wire.endStream : 0, stream: id, to: &output)
            _ = body.withUnsafeBytes { output.writeBytes(UnsafeRawBufferPointer(rebasing: $0[offset..<offset + size])) }
            sendWindow -= size
            streams[id]!.sendWindow -= size
            if end {
                streams[id]!.sent = true
                blockedHead += 1
            } else {
                blocked[blockedHead].offset += size
            }
        }
        if blockedHead == blocked.count {
            blocked.removeAll(keepingCapacity: true)
            blockedHead = 0
        } else if blockedHead > 1024 {
            blocked.removeFirst(blockedHead)
            blockedHead = 0
        }
    }

    /// Drops stream `id` without a frame (above a GOAWAY's last stream id: the server ignores it); what is left of
    /// its body is not sent.
    mutating func forget(_ id: UInt32) {
        streams[id] = nil
    }

    /// Resets stream `id` (its deadline passed): RST_STREAM CANCEL; what the server still sends on it is ignored.
    mutating func cancel(_ id: UInt32) {
        guard streams.removeValue(forKey: id) != nil else { return }
        HTTP2Wire.writeReset(stream: id, code: .cancel, to: &output)
    }

    mutating func ping(_ data: UInt64) {
        HTTP2Wire.writeFrameHeader(length: 8, type: HTTP2Wire.ping, flags: 0, stream: 0, to: &output)
        output.writeInteger(data)
    }

    /// Gives the connection's receive window back once 32 KiB or more of it were used. Called once per read.
    mutating func topUpReceiveWindow() {
        let used = Self.connectionWindow - receiveWindow
        guard used >= Self.windowStep else { return }
        HTTP2Wire.writeWindowUpdate(stream: 0, increment: used, to: &output)
        receiveWindow = Self.connectionWindow
    }

    // MARK: Reading

    /// Reads frames from `input` until one gives an event or a frame is incomplete (what remains stays in `input`).
    /// `now` (nanoseconds of a monotonic clock) paces the peer's control frames (``HTTP2PeerLimits``). Throws after
    /// queuing GOAWAY.
    mutating func next(from input: inout ByteBuffer, now: Int64 = 0) throws(ConnectionError) -> Event? {
        do {
            return try read(&input, now: now)
        } catch {
            fail(error)
            throw error
        }
    }

    /// Ends the connection from this side (a broken rule the session cannot see itself, such as a SETTINGS
    /// acknowledgement that never came): queues GOAWAY with the error's code.
    mutating func fail(_ error: ConnectionError) {
        HTTP2Wire.writeGoAway(lastStream: 0, code: error.code, to: &output)
    }

    private mutating func read(_ input: inout ByteBuffer, now: Int64) throws(ConnectionError) -> Event? {
        while let header = HTTP2Wire.FrameHeader(peekingAt: input) {
            guard header.length <= HTTP2Wire.maxFrameSize else {
                throw ConnectionError(code: .frameSizeError, detail: "frame of \(header.length) bytes")
            }
            guard let payload = input.getSlice(at: input.readerIndex + 9, length: header.length) else { return nil }
            input.moveReaderIndex(forwardBy: 9 + header.length)
            if phase == .firstSettings {
                guard header.type == HTTP2Wire.settings, header.flags & HTTP2Wire.ack == 0 else {
                    throw ConnectionError(code: .protocolError, detail: "the server's first frame is not SETTINGS")
                }
                phase = .open
            }
            try limits.count(header, now: now)
            if let event = try frame(header, payload) { return event }
        }
        return nil
    }

    private mutating func frame(_ header: HTTP2Wire.FrameHeader, _ payload: ByteBuffer) throws(ConnectionError) -> Event? {
        let id = header.stream, flags = header.flags
        if let fragments, header.type != HTTP2Wire.continuation || id != fragments.stream {
            throw ConnectionError(code: .protocolError, detail: "frame type \(header.type) inside a header block")
        }
        switch header.type {
        case HTTP2Wire.data:
            try requireStream(id, "DATA")
            receiveWindow -= payload.readableBytes
            guard receiveWindow >= 0 else { throw ConnectionError(code: .flowControlError, detail: "DATA beyond the connection's window") }
            try requireOpened(id, "DATA")
            guard var stream = streams[id] else { return nil }  // finished or cancelled: ignored
            let content = try HTTP2Wire.unpadded(payload, flags: flags)
            stream.receiveWindow -= payload.readableBytes
            guard stream.receiveWindow >= 0 else { throw ConnectionError(code: .flowControlError, detail: "DATA beyond stream \(id)'s window") }
            stream.unacknowledged += payload.readableBytes
            if stream.unacknowledged >= Self.windowStep {
                HTTP2Wire.writeWindowUpdate(stream: id, increment: stream.unacknowledged, to: &output)
                stream.receiveWindow += stream.unacknowledged
                stream.unacknowledged = 0
            }
            streams[id] = stream
            let end = flags & HTTP2Wire.endStream != 0
            if end { finish(id) }
            return .data(stream: id, content, endStream: end)
        case HTTP2Wire.headers:
            try requireStream(id, "HEADERS")
            let skip = flags & HTTP2Wire.priorityFlag != 0 ? 5 : 0
            let block = try HTTP2Wire.unpadded(payload, flags: flags, skipping: skip)
            let end = flags & HTTP2Wire.endStream != 0
            guard flags & HTTP2Wire.endHeaders != 0 else {
                fragments = HTTP2Wire.HeaderBlockInPieces(stream: id, endStream: end, first: block)
                return nil
            }
            return try headerBlock(block, stream: id, endStream: end)
        case HTTP2Wire.continuation:
            guard let whole = try HTTP2Wire.HeaderBlockInPieces.take(&fragments, flags: flags, payload: payload) else { return nil }
            return try headerBlock(whole.block, stream: whole.stream, endStream: whole.endStream)
        case HTTP2Wire.priority:
            try requireStream(id, "PRIORITY")
            guard payload.readableBytes == 5 else { throw ConnectionError(code: .frameSizeError, detail: "PRIORITY of \(payload.readableBytes) bytes") }
        case HTTP2Wire.rstStream:
            try requireStream(id, "RST_STREAM")
            guard payload.readableBytes == 4 else { throw ConnectionError(code: .frameSizeError, detail: "RST_STREAM of \(payload.readableBytes) bytes") }
            try requireOpened(id, "RST_STREAM")
            guard streams.removeValue(forKey: id) != nil else { return nil }
            return .reset(stream: id, code: payload.getInteger(at: payload.readerIndex, as: UInt32.self)!)
        case HTTP2Wire.settings:
            guard let parameters = try HTTP2Wire.settingsParameters(flags: flags, stream: id, payload: payload) else {
                if settingsAwaitingAck > 0 { settingsAwaitingAck -= 1 }
                settingsAcknowledged += 1
                return nil
            }
            var limit: Int?
            for (parameter, value) in parameters {
                switch parameter {
                case HTTP2Wire.Setting.headerTableSize:
                    encoder.setMaxTableSize(Int(value))
                case HTTP2Wire.Setting.enablePush where value != 0:
                    throw ConnectionError(code: .protocolError, detail: "SETTINGS_ENABLE_PUSH from a server")
                case HTTP2Wire.Setting.maxConcurrentStreams:
                    limit = Int(value)
                default:
                    break
                }
            }
            try peer.apply(parameters, to: &streams, \.sendWindow)
            HTTP2Wire.writeFrameHeader(length: 0, type: HTTP2Wire.settings, flags: HTTP2Wire.ack, stream: 0, to: &output)
            try acknowledged()
            sendBlocked()
            return .settings(maxConcurrentStreams: limit)
        case HTTP2Wire.pushPromise:
            throw ConnectionError(code: .protocolError, detail: "PUSH_PROMISE with push disabled")
        case HTTP2Wire.ping:
            try HTTP2Wire.answerPing(flags: flags, stream: id, payload: payload, to: &output)
            if flags & HTTP2Wire.ack == 0 { try acknowledged() }
        case HTTP2Wire.goAway:
            // Streams above its last id were not processed and will not be (the connection forgets them). A later
            // GOAWAY may lower the last id, never raise it (RFC 9113 section 6.8).
            let last = try HTTP2Wire.goAwayLastStream(stream: id, payload: payload)
            if let previous = goAwayLastStream, last > previous {
                throw ConnectionError(code: .protocolError, detail: "GOAWAY's last stream id grew from \(previous) to \(last)")
            }
            goAwayLastStream = last
            return .goAway(lastStream: last)
        case HTTP2Wire.windowUpdate:
            let increment = try HTTP2Wire.windowIncrement(payload)
            if id == 0 {
                try HTTP2Wire.creditConnection(&sendWindow, by: increment)
            } else {
                try requireOpened(id, "WINDOW_UPDATE")
                guard streams[id] != nil else { return nil }
                guard increment > 0 else { throw ConnectionError(code: .protocolError, detail: "WINDOW_UPDATE of 0 on stream \(id)") }
                streams[id]!.sendWindow += increment
                guard streams[id]!.sendWindow <= HTTP2Wire.maxWindow else { throw ConnectionError(code: .flowControlError, detail: "stream \(id)'s window over 2^31-1") }
            }
            sendBlocked()
        default:
            break  // unknown frame types are ignored (RFC 9113 section 4.1)
        }
        return nil
    }

    private func requireStream(_ id: UInt32, _ name: String) throws(ConnectionError) {
        guard id != 0 else { throw ConnectionError(code: .protocolError, detail: "\(name) on stream 0") }
    }

    /// Counts an acknowledgement written while writes do not drain.
    private mutating func acknowledged() throws(ConnectionError) {
        guard !writable else { return }
        acknowledgementsWhileBlocked += 1
        guard acknowledgementsWhileBlocked <= Self.maxAcknowledgementsWhileBlocked else {
            throw ConnectionError(
                code: .enhanceYourCalm,
                detail: "more than \(Self.maxAcknowledgementsWhileBlocked) PINGs and SETTINGS while the server read none of their answers")
        }
    }

    /// A stream the server names must be one this side opened (a server opens none: push is disabled).
    private func requireOpened(_ id: UInt32, _ name: String) throws(ConnectionError) {
        guard id & 1 == 1, id <= lastStream else {
            throw ConnectionError(code: .protocolError, detail: "\(name) on stream \(id), which this side never opened")
        }
    }

    private mutating func headerBlock(_ block: ByteBuffer, stream id: UInt32, endStream: Bool) throws(ConnectionError) -> Event? {
        var block = block
        let headers: HPACKHeaders
        do {
            headers = try decoder.decodeHeaders(from: &block)
        } catch {
            throw ConnectionError(code: .compressionError, detail: "header block: \(error)")
        }
        try requireOpened(id, "HEADERS")
        guard streams[id] != nil else { return nil }
        let status = headers.first(name: ":status").flatMap(Self.statusCode)
        if endStream, let status, status < 200 {
            // RFC 9113 section 8.1: an informational response never ends a stream.
            streams[id] = nil
            HTTP2Wire.writeReset(stream: id, code: .protocolError, to: &output)
            return .streamError(stream: id, detail: "an informational response (\(status)) ended the stream")
        }
        if endStream { finish(id) }
        let uniqueID = headers.first(name: "apns-unique-id").flatMap { $0.utf8.count <= 64 ? $0 : nil }
        return .headers(stream: id, status: status, endStream: endStream, uniqueID: uniqueID)
    }

    /// A `:status` as RFC 9110 section 15 allows it: three digits, 100 to 599. Anything else (`+200`, `0200`, `2000`,
    /// `600`) is no status: the stream's request is retried as one the server did not answer.
    /// Read from the string's own UTF-8, with no array made per response.
    static func statusCode(_ text: String) -> Int? {
        guard text.utf8.count == 3 else { return nil }
        var value = 0
        for byte in text.utf8 {
            let digit = byte &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            value = value * 10 + Int(digit)
        }
        return (100...599).contains(value) ? value : nil
    }

    /// The server ended a stream: finished once this side's body is all sent; otherwise the rest is not sent and the
    /// stream is reset (RFC 9113 section 8.1: a server may answer before it read the whole request).
    private mutating func finish(_ id: UInt32) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        if !stream.sent { HTTP2Wire.writeReset(stream: id, code: .cancel, to: &output) }
    }
}
