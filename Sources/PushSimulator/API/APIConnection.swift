import Logging
import NIOCore
import PushCore

/// What every API connection shares: the request check, the faults, the record and the summary.
struct APIServerContext: Sendable {
    var check: APIRequestCheck
    var configuration: SimulatorConfiguration
    var state: SimulatorState
    var recorder: Recorder
    var logger: Logger
}

/// One HTTP/2 connection of the simulated API, the handler behind TLS: its ``HTTP2ServerSession`` reads the frames
/// and keeps the streams; this numbers the requests, judges them, applies the faults, raises the stream limit after a
/// token connection's first success, sends GOAWAY and closes. What the session queues is written once per read.
final class APIConnection: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let number: Int
    let authentication: APIAuthentication
    private let context: APIServerContext
    private var session: HTTP2ServerSession
    /// Bytes read but not yet taken as frames: what was read is discarded after each read, so this holds at most
    /// one frame and one read (and what waits while the client reads no answers, which stops the socket's reads).
    private var inbound = ByteBuffer()
    /// The capacity of the input buffer (for tests).
    var inboundCapacity: Int { inbound.capacity }
    private var settingsTimer: Scheduled<Void>?
    /// How long the client has to acknowledge this side's SETTINGS (SPEC section 13).
    static let settingsTimeout: TimeAmount = .seconds(10)
    private var tokenHistory = APITokenHistory()
    private var random: SplitMix64
    private var received = 0
    private var answered = 0
    /// The highest stream id answered: a GOAWAY names it (streams may finish out of order: a client's DATA frames
    /// leave in its flow controller's order, not the streams').
    private var highestAnswered: UInt32 = 0
    /// The last stream id of the GOAWAY this connection sent: streams up to it are still answered, later ones
    /// ignored, as RFC 9113 section 6.8 has it.
    private var goAwayLastStreamID: UInt32?
    private var succeeded = false
    private var closing = false
    /// A connection error was found: nothing more is read.
    private var failed = false
    /// Answers of this read waiting for `--response-delay-ms`: they leave together, in one flush, that long after the
    /// read (as a WAN delivers a burst of responses: one segment, not one write per response).
    private var delayed: [DelayedAnswer] = []

    /// More than any push type allows: a longer body is kept up to here (the rest dropped), and answered 413.
    static let bodyLimit = PushType.largestPayloadSize + 1

    private struct DelayedAnswer {
        var answer: APIAnswer
        var id: UInt32
        var retire: Bool
    }

    init(number: Int, authentication: APIAuthentication, context: APIServerContext) {
        self.number = number
        self.authentication = authentication
        self.context = context
        self.random = SplitMix64(seed: context.configuration.seed &+ UInt64(number) &* 0x9E37_79B9)
        // SETTINGS_MAX_CONCURRENT_STREAMS to start with: 1 on a token connection until a request succeeds.
        let limit = authentication == .token ? 1 : context.configuration.maxConcurrentStreams
        self.session = HTTP2ServerSession(streamLimit: limit, bodyLimit: Self.bodyLimit)
    }

    /// The server's connection preface (SETTINGS, the connection window opened), written at once.
    func handlerAdded(context: ChannelHandlerContext) {
        writeOutput(context: context)
        armSettingsTimer(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        settingsTimer?.cancel()
    }

    /// Ends the connection with SETTINGS_TIMEOUT unless the client acknowledges this side's SETTINGS in time:
    /// until it does, a lowered stream limit would never apply.
    private func armSettingsTimer(context: ChannelHandlerContext) {
        guard settingsTimer == nil, session.settingsAwaitingAck > 0 else { return }
        let acknowledgedBefore = session.settingsAcknowledged
        settingsTimer = context.eventLoop.assumeIsolated().scheduleTask(in: Self.settingsTimeout) { [self] in
            settingsTimer = nil
            guard !failed, session.settingsAwaitingAck > 0 else { return }
            guard session.settingsAcknowledged == acknowledgedBefore else {
                armSettingsTimer(context: context)
                return
            }
            let error = HTTP2Wire.ConnectionError(code: .settingsTimeout, detail: "SETTINGS not acknowledged within 10 s")
            session.fail(error)
            closeAfter(error, context: context)
        }
    }

    /// A connection error whose GOAWAY the session queued: it is written, then the connection closes; nothing more
    /// is read.
    private func closeAfter(_ error: HTTP2Wire.ConnectionError, context: ChannelHandlerContext) {
        failed = true
        self.context.state.countAPI(connectionError: error.code)
        self.context.logger.notice("api: connection error; closing", metadata: [
            "connection": "\(number)", "code": "\(error.code.name)", "detail": "\(error.detail)",
        ])
        writeOutput(context: context)
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        var buffer = unwrapInboundIn(data)
        if inbound.readableBytes == 0 {
            inbound = buffer
        } else {
            inbound.writeBuffer(&buffer)
        }
        readFrames(context: context)
    }

    /// The client reads the answers again: the frames left unread go on, answered as after a read.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, !failed, inbound.readableBytes > 0 {
            readFrames(context: context)
            answerRead(context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    /// Reads the whole frames that have arrived, while what this side writes drains. A client that sends requests
    /// and reads no answers is not read further (NIO's `BackPressureHandler` in front holds the socket's reads as
    /// well), so the answers waiting for it are those of what was already read, not one per request it sent.
    private func readFrames(context: ChannelHandlerContext) {
        let now = Int64(context.eventLoop.now.uptimeNanoseconds)
        do {
            defer { inbound.keepOnlyUnread() }
            while context.channel.isWritable, let event = try session.next(from: &inbound, now: now) {
                switch event {
                case .request(let stream, let headers, let body):
                    received(headers: headers, body: body, id: stream, context: context)
                case .malformed(let stream, let problem):
                    self.context.logger.debug("api: malformed header block; resetting the stream", metadata: [
                        "connection": "\(number)", "stream": "\(stream)", "problem": "\(problem)",
                    ])
                    self.context.state.countAPI(answer: Self.malformedKey)
                }
            }
        } catch {
            closeAfter(error, context: context)
        }
    }

    /// How the exit summary counts a stream reset for a malformed header block.
    static let malformedKey = "RST_STREAM PROTOCOL_ERROR"

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.context.logger.debug("api: connection failed", metadata: ["connection": "\(number)", "error": "\(error)"])
        context.close(promise: nil)
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
        answerRead(context: context)
        context.fireChannelReadComplete()
    }

    /// After a read: the receive window topped up, and the read's answers written (or scheduled with
    /// `--response-delay-ms`).
    private func answerRead(context: ChannelHandlerContext) {
        if !failed { session.topUpReceiveWindow() }
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
    }

    /// After a read's answers (or a delayed batch of them): the 200s into the summary, one write and flush.
    private func answersWritten(context: ChannelHandlerContext) {
        countAccepted()
        writeOutput(context: context)
    }

    private func writeOutput(context: ChannelHandlerContext) {
        if let output = session.takeOutput() {
            context.writeAndFlush(wrapOutboundOut(output), promise: nil)
        }
    }

    /// A complete request arrived on stream `id`.
    private func received(headers: HeaderList, body: [UInt8], id: UInt32, context: ChannelHandlerContext) {
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
            let fields = headers.lazy.map { (name: $0.name, value: $0.value) }
            let now = unixMilliseconds() / 1000
            let tokenInUse = tokenHistory.current
            answer = self.context.check.answer(
                headers: fields, body: body,
                authentication: authentication, tokenHistory: &tokenHistory, now: now,
                newID: { Self.newID(&random) })
            if let taken = tokenHistory.current, taken != tokenInUse { self.context.state.providerTokenTaken(taken) }
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
    private func mayAnswer(_ id: UInt32) -> Bool {
        guard closing else { return true }
        guard let last = goAwayLastStreamID else { return false }
        return id <= last
    }

    private func respond(_ answer: APIAnswer, id: UInt32, retire: Bool, context: ChannelHandlerContext) {
        // Apple's sandbox names each notification for its console with an id of its own (a UUID here).
        let uniqueID = self.context.configuration.sandbox ? APNsID(high: random.next(), low: random.next()).description : nil
        guard mayAnswer(id), session.answer(id, status: answer.status, apnsID: answer.apnsID, uniqueID: uniqueID, body: answer.body)
        else { return }
        answered += 1
        highestAnswered = max(highestAnswered, id)
        if answer.status == 200 { uncountedAccepted += 1 } else { self.context.state.countAPI(answer: answer.summaryKey) }
        if let accepted = answer.accepted {
            if self.context.recorder.isActive {
                self.context.recorder.append(request: RecordedRequest(accepted: accepted, connection: number, time: unixMilliseconds()))
            }
            if !succeeded {
                succeeded = true
                if authentication == .token {
                    session.raiseStreamLimit(to: self.context.configuration.maxConcurrentStreams)
                    armSettingsTimer(context: context)
                }
            }
        }
        if !closing && (retire || self.context.configuration.goawayEvery.map({ answered % $0 == 0 }) == true) {
            // Takes no new streams from now on; GOAWAY follows the answer. Streams up to its last id that are still on
            // their way are answered; the connection closes once the client has had time to finish them (closing at
            // once with requests unread would reset it, and the client would lose answers).
            closing = true
            goAwayLastStreamID = highestAnswered
            session.writeGoAway(lastStream: highestAnswered)
            countAccepted()
            self.context.state.countAPI(goaway: true)
            writeOutput(context: context)
            context.eventLoop.assumeIsolated().scheduleTask(in: Self.closeGrace) { context.close(promise: nil) }
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
