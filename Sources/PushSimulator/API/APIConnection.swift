import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import PushCore

/// What every API connection shares: the request check, the faults, the record and the summary.
struct APIServerContext: Sendable {
    var check: APIRequestCheck
    var configuration: SimulatorConfiguration
    var state: SimulatorState
    var recorder: Recorder
    var logger: Logger
}

/// One HTTP/2 connection of the simulated API, a handler on the connection's channel behind `NIOHTTP2Handler`
/// (frame level: no channel per stream): gathers each stream's HEADERS and DATA, answers at END_STREAM, numbers the
/// requests, applies the faults, raises the stream limit after a token connection's first success, sends GOAWAY
/// and closes. Answers are flushed once per read.
final class APIConnection: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    let number: Int
    let authentication: APIAuthentication
    private let context: APIServerContext
    private var tokenHistory = APITokenHistory()
    private var random: SplitMix64
    private var received = 0
    private var answered = 0
    /// The highest stream id answered: a GOAWAY names it (streams may finish out of order: a client's DATA frames
    /// leave in its flow controller's order, not the streams').
    private var highestAnswered = HTTP2StreamID(0)
    /// The last stream id of the GOAWAY this connection sent (or is about to send): streams up to it are still
    /// answered, later ones ignored, as RFC 9113 section 6.8 has it.
    private var goAwayLastStreamID: HTTP2StreamID?
    private var succeeded = false
    private var closing = false
    private var needsFlush = false
    /// Answers of this read waiting for `--response-delay-ms`: they leave together, in one flush, that long after the
    /// read (as a WAN delivers a burst of responses: one segment, not one write per response).
    private var delayed: [DelayedAnswer] = []
    /// Requests whose END_STREAM has not arrived yet.
    private var partial: [HTTP2StreamID: PartialRequest] = [:]

    /// More than any push type allows: a longer body is kept up to here (the rest dropped), and answered 413.
    static let bodyLimit = PushType.largestPayloadSize + 1

    private struct DelayedAnswer {
        var answer: APIAnswer
        var id: HTTP2StreamID
        var retire: Bool
    }

    private struct PartialRequest {
        var headers = HPACKHeaders()
        var body: [UInt8] = []
        var unacknowledged = 0
    }

    init(number: Int, authentication: APIAuthentication, context: APIServerContext) {
        self.number = number
        self.authentication = authentication
        self.context = context
        self.random = SplitMix64(seed: context.configuration.seed &+ UInt64(number) &* 0x9E37_79B9)
    }

    /// SETTINGS_MAX_CONCURRENT_STREAMS to start with: 1 on a token connection until a request succeeds.
    var initialStreamLimit: Int {
        authentication == .token ? 1 : context.configuration.maxConcurrentStreams
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let id = frame.streamID
        let endStream: Bool
        switch frame.payload {
        case .headers(let headers):
            // The connection's HTTP/2 handler does not validate header blocks (see `HeaderBlockRules`).
            if partial[id] == nil {
                if let problem = HeaderBlockRules.problem(inRequest: headers.headers) {
                    return reset(id, problem, context: context)
                }
                partial[id] = PartialRequest(headers: headers.headers)
            } else {
                if let problem = HeaderBlockRules.problem(inTrailers: headers.headers) {
                    partial[id] = nil
                    return reset(id, problem, context: context)
                }
                partial[id]!.headers.add(contentsOf: headers.headers)
            }
            endStream = headers.endStream
        case .data(let data):
            if case .byteBuffer(let buffer) = data.data {
                // In place: a copy taken out of the dictionary would make the append copy the body so far. A
                // stream reset for a malformed header block has no entry (the connection's window counts it anyway).
                if partial[id] != nil, let increment = Self.take(buffer, padding: data.paddingBytes ?? 0, into: &partial[id]!) {
                    context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
                    needsFlush = true
                }
            }
            endStream = data.endStream
        case .rstStream:
            partial[id] = nil
            return
        default:
            return
        }
        guard endStream, let request = partial.removeValue(forKey: id) else { return }
        received(request, id: id, context: context)
    }

    /// A malformed request (RFC 9113 section 8.1.1): its stream is reset with PROTOCOL_ERROR, unanswered, and counted
    /// in the summary as `RST_STREAM PROTOCOL_ERROR`.
    private func reset(_ id: HTTP2StreamID, _ problem: HeaderBlockRules.Problem, context: ChannelHandlerContext) {
        self.context.logger.debug("api: malformed header block; resetting the stream", metadata: [
            "connection": "\(number)", "stream": "\(id)", "problem": "\(problem)",
        ])
        self.context.state.countAPI(answer: Self.malformedKey)
        context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.protocolError))), promise: nil)
        needsFlush = true
    }

    /// How the exit summary counts a stream reset for a malformed header block.
    static let malformedKey = "RST_STREAM PROTOCOL_ERROR"

    /// Opens the connection's flow-control window to 16 MiB at once: many concurrent requests' bodies arrive
    /// back to back, so streams finish in the order they were opened (NIO's stream bookkeeping is cheapest then).
    func handlerAdded(context: ChannelHandlerContext) {
        let frame = HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: Self.connectionWindow - 65_535))
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }

    static let connectionWindow = 16 << 20

    /// The connection's inbound flow-control window as swift-nio-http2 last reported it. Without a stream
    /// multiplexer nothing else gives the window back: the connection's is topped up once per read when 32 KiB or
    /// more were taken, a stream's for bodies longer than that. The connection's is read from the handler's events,
    /// not counted here: DATA of a stream already reset (by the client, for a malformed request, or by the handler
    /// itself) takes from it too, and never reaches this handler.
    private var inboundWindow = connectionWindow
    private static let windowStep = 32 * 1024

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let update = event as? NIOHTTP2WindowUpdatedEvent, update.streamID == .rootStream, let window = update.inboundWindowSize {
            inboundWindow = window
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Gives the connection's window back up to ``connectionWindow`` once 32 KiB or more of it were used. Called after
    /// a read: the last event of the read counts every DATA frame of it.
    private func topUpConnectionWindow(context: ChannelHandlerContext) {
        let used = Self.connectionWindow - inboundWindow
        guard used >= Self.windowStep else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: used))), promise: nil)
        inboundWindow = Self.connectionWindow
        needsFlush = true
    }

    /// Appends a DATA frame's bytes to its request (up to ``bodyLimit``) and counts them against the stream's
    /// window; returns the stream's WINDOW_UPDATE increment when one is due.
    private static func take(_ buffer: ByteBuffer, padding: Int, into request: inout PartialRequest) -> Int? {
        request.body.append(contentsOf: buffer.readableBytesView.prefix(bodyLimit - request.body.count))
        request.unacknowledged += buffer.readableBytes + padding
        guard request.unacknowledged >= windowStep else { return nil }
        defer { request.unacknowledged = 0 }
        return request.unacknowledged
    }

    /// 200s answered since they were last added to the summary (once per read, not once per request).
    private var uncountedAccepted = 0

    private func countAccepted() {
        if uncountedAccepted > 0 {
            self.context.state.countAPI(answer: "200", times: uncountedAccepted)
            uncountedAccepted = 0
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        countAccepted()
        context.fireChannelInactive()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        topUpConnectionWindow(context: context)
        if !delayed.isEmpty {
            let batch = delayed
            delayed.removeAll(keepingCapacity: true)
            let delay = TimeAmount.milliseconds(Int64(self.context.configuration.responseDelayMilliseconds))
            context.eventLoop.assumeIsolated().scheduleTask(in: delay) { [self] in
                for item in batch { respond(item.answer, id: item.id, retire: item.retire, context: context) }
                answersWritten(context: context)
            }
        }
        answersWritten(context: context)
        context.fireChannelReadComplete()
    }

    /// After a read's answers (or a delayed batch of them): the 200s into the summary, one flush.
    private func answersWritten(context: ChannelHandlerContext) {
        countAccepted()
        if needsFlush {
            needsFlush = false
            context.flush()
        }
    }

    /// A complete request arrived on stream `id`.
    private func received(_ request: PartialRequest, id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard mayAnswer(id) else { return }
        received += 1
        let configuration = self.context.configuration
        if let every = configuration.closeEvery, received % every == 0 {
            closing = true
            self.context.state.countAPI(abruptClose: true)
            self.context.logger.debug("api: cutting the connection (close-every)", metadata: ["connection": "\(number)"])
            context.close(promise: nil)
            return
        }
        var answer: APIAnswer
        var retire = false
        if let every = configuration.shutdownEvery, received % every == 0 {
            answer = APIAnswer(status: 503, reason: .shutdown, apnsID: Self.newID(&random))
            retire = true
        } else {
            let fields = request.headers.lazy.map { (name: $0.name, value: $0.value) }
            let now = unixMilliseconds() / 1000
            answer = self.context.check.answer(
                headers: fields, body: request.body,
                authentication: authentication, tokenHistory: &tokenHistory, now: now,
                newID: { Self.newID(&random) })
            if answer.status == 200 {
                if configuration.rate429 > 0, random.nextUnitInterval() < configuration.rate429 {
                    answer = APIAnswer(status: 429, reason: .tooManyRequests, apnsID: answer.apnsID)
                } else if configuration.rate503 > 0, random.nextUnitInterval() < configuration.rate503 {
                    answer = APIAnswer(status: 503, reason: .serviceUnavailable, apnsID: answer.apnsID)
                }
            }
            // Last: only what would be accepted counts against its device token's rate.
            if let accepted = answer.accepted,
               !self.context.state.withinTokenRate(accepted.token, second: now) {
                answer = APIAnswer(status: 429, reason: .tooManyRequests, apnsID: answer.apnsID)
            }
        }
        if configuration.responseDelayMilliseconds > 0 {
            delayed.append(DelayedAnswer(answer: answer, id: id, retire: retire))
        } else {
            respond(answer, id: id, retire: retire, context: context)
        }
    }

    /// Whether a stream is still answered: always before a GOAWAY, then only up to its last stream id (an abrupt
    /// close answers nothing more).
    private func mayAnswer(_ id: HTTP2StreamID) -> Bool {
        guard closing else { return true }
        guard let last = goAwayLastStreamID else { return false }
        return id <= last
    }

    private func respond(_ answer: APIAnswer, id: HTTP2StreamID, retire: Bool, context: ChannelHandlerContext) {
        guard mayAnswer(id) else { return }
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(answer.status))
        // A value unique to the response is not indexed: it would only push the shared ones out of the client's
        // HPACK table, and make the encoder's table search longer.
        headers.add(name: "apns-id", value: answer.apnsID, indexing: .nonIndexable)
        let body = answer.body
        if !body.isEmpty { headers.add(name: "content-type", value: "application/json") }
        answered += 1
        highestAnswered = max(highestAnswered, id)
        let goesAway = !closing && (retire || self.context.configuration.goawayEvery.map({ answered % $0 == 0 }) == true)
        // Only an answer a GOAWAY waits for needs to say when it is written.
        let written = goesAway ? context.eventLoop.makePromise(of: Void.self) : nil
        let head = HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: body.isEmpty)))
        if body.isEmpty {
            context.write(wrapOutboundOut(head), promise: written)
        } else {
            context.write(wrapOutboundOut(head), promise: nil)
            let data = HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(ByteBuffer(bytes: body)), endStream: true)))
            context.write(wrapOutboundOut(data), promise: written)
        }
        needsFlush = true
        if answer.status == 200 { uncountedAccepted += 1 } else { self.context.state.countAPI(answer: answer.summaryKey) }
        if let accepted = answer.accepted {
            if self.context.recorder.isActive {
                self.context.recorder.append(request: RecordedRequest(accepted: accepted, connection: number, time: unixMilliseconds()))
            }
            if !succeeded {
                succeeded = true
                if authentication == .token {
                    let limit = HTTP2Setting(parameter: .maxConcurrentStreams, value: self.context.configuration.maxConcurrentStreams)
                    context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([limit])))), promise: nil)
                }
            }
        }
        if let written {
            // Takes no new streams from now on; GOAWAY goes out once the answer has. Streams up to its last id that
            // are still on their way are answered; the connection closes once the client has had time to finish
            // them (closing at once with requests unread would reset it, and the client would lose answers).
            closing = true
            let last = highestAnswered
            goAwayLastStreamID = last
            countAccepted()
            self.context.state.countAPI(goaway: true)
            written.futureResult.assumeIsolated().whenComplete { [self] _ in
                let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil))
                context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
                context.eventLoop.assumeIsolated().scheduleTask(in: Self.closeGrace) { context.close(promise: nil) }
            }
            needsFlush = false
            context.flush()
        }
    }

    /// How long a connection stays open after its GOAWAY (the client closes it sooner once its streams are done).
    static let closeGrace: TimeAmount = .seconds(2)

    static func newID(_ random: inout SplitMix64) -> String {
        var id = APNsID(high: random.next(), low: random.next())
        id.high = id.high & ~0xF000 | 0x4000  // version 4
        id.low = id.low & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
        return id.description
    }
}
