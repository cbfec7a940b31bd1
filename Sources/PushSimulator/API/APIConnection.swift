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

/// One HTTP/2 connection of the simulated API: numbers its requests, applies the faults, raises the stream limit
/// after a token connection's first success, sends GOAWAY and closes.
///
/// Touched only on its channel's event loop (the connection channel and its stream channels share it); `Sendable`
/// so that NIO's stream initializer, which runs on that loop, may capture it.
final class APIConnection: @unchecked Sendable {
    let number: Int
    let authentication: APIAuthentication
    private let context: APIServerContext
    private let channel: any Channel
    private var tokenHistory = APITokenHistory()
    private var random: SplitMix64
    private var received = 0
    private var answered = 0
    private var succeeded = false
    private var closing = false

    init(number: Int, authentication: APIAuthentication, context: APIServerContext, channel: any Channel) {
        self.number = number
        self.authentication = authentication
        self.context = context
        self.channel = channel
        self.random = SplitMix64(seed: context.configuration.seed &+ UInt64(number) &* 0x9E37_79B9)
    }

    /// SETTINGS_MAX_CONCURRENT_STREAMS to start with: 1 on a token connection until a request succeeds.
    var initialStreamLimit: Int {
        authentication == .token ? 1 : context.configuration.maxConcurrentStreams
    }

    /// A complete request arrived on `stream`.
    func received(
        headers: HPACKHeaders, body: [UInt8], bodyTooLong: Bool, on stream: any Channel, id: HTTP2StreamID
    ) {
        guard !closing else { return }
        received += 1
        let configuration = context.configuration
        if let every = configuration.closeEvery, received % every == 0 {
            closing = true
            context.state.countAPI(abruptClose: true)
            context.logger.debug("api: cutting the connection (close-every)", metadata: ["connection": "\(number)"])
            channel.close(promise: nil)
            return
        }
        var answer: APIAnswer
        var retire = false
        if let every = configuration.shutdownEvery, received % every == 0 {
            answer = APIAnswer(status: 503, reason: .shutdown, apnsID: Self.newID(&random))
            retire = true
        } else {
            let fields = headers.map { (name: $0.name, value: $0.value) }
            answer = context.check.answer(
                headers: fields, body: bodyTooLong ? [UInt8](repeating: 0x20, count: 5121) : body,
                authentication: authentication, tokenHistory: &tokenHistory, now: unixMilliseconds() / 1000,
                newID: { Self.newID(&random) })
            if answer.status == 200 {
                if configuration.rate429 > 0, random.nextUnitInterval() < configuration.rate429 {
                    answer = APIAnswer(status: 429, reason: .tooManyRequests, apnsID: answer.apnsID)
                } else if configuration.rate503 > 0, random.nextUnitInterval() < configuration.rate503 {
                    answer = APIAnswer(status: 503, reason: .serviceUnavailable, apnsID: answer.apnsID)
                }
            }
        }
        let delay = configuration.responseDelayMilliseconds
        if delay > 0 {
            stream.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(delay))) { [self] in
                respond(answer, on: stream, id: id, retire: retire)
            }
        } else {
            respond(answer, on: stream, id: id, retire: retire)
        }
    }

    private func respond(_ answer: APIAnswer, on stream: any Channel, id: HTTP2StreamID, retire: Bool) {
        guard !closing else { return }
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(answer.status))
        headers.add(name: "apns-id", value: answer.apnsID)
        let body = answer.body
        if !body.isEmpty { headers.add(name: "content-type", value: "application/json") }
        let head = HTTP2Frame.FramePayload.headers(.init(headers: headers, endStream: body.isEmpty))
        let written: EventLoopFuture<Void>
        if body.isEmpty {
            written = stream.writeAndFlush(head)
        } else {
            stream.write(head, promise: nil)
            written = stream.writeAndFlush(
                HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(ByteBuffer(bytes: body)), endStream: true)))
        }
        answered += 1
        context.state.countAPI(answer: answer.summaryKey)
        if let accepted = answer.accepted {
            context.recorder.append(request: RecordedRequest(accepted: accepted, connection: number, time: unixMilliseconds()))
            if !succeeded {
                succeeded = true
                if authentication == .token {
                    let limit = HTTP2Setting(parameter: .maxConcurrentStreams, value: context.configuration.maxConcurrentStreams)
                    channel.writeAndFlush(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([limit]))), promise: nil)
                }
            }
        }
        if retire || context.configuration.goawayEvery.map({ answered % $0 == 0 }) == true {
            // Takes no new streams from now on; GOAWAY goes out once the answer has (a stream's frames can queue
            // behind connection frames).
            closing = true
            written.whenComplete { [self] _ in goAway(lastStreamID: id) }
        }
    }

    /// GOAWAY naming `lastStreamID`, then close: streams above it go unanswered.
    private func goAway(lastStreamID: HTTP2StreamID) {
        closing = true
        context.state.countAPI(goaway: true)
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: lastStreamID, errorCode: .noError, opaqueData: nil))
        let channel = self.channel
        channel.writeAndFlush(frame).whenComplete { _ in channel.close(promise: nil) }
    }

    static func newID(_ random: inout SplitMix64) -> String {
        var id = APNsID(high: random.next(), low: random.next())
        id.high = id.high & ~0xF000 | 0x4000  // version 4
        id.low = id.low & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
        return id.description
    }
}

/// One request stream: gathers the HEADERS and DATA frames, hands the request to its connection at END_STREAM.
final class APIStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let connection: APIConnection
    private var headers = HPACKHeaders()
    private var body: [UInt8] = []
    private var bodyTooLong = false
    /// More than any push type allows: the rest of a longer body is dropped and the request answered 413.
    static let bodyLimit = PushType.largestPayloadSize + 1

    init(connection: APIConnection) {
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let endStream: Bool
        switch unwrapInboundIn(data) {
        case .headers(let frame):
            headers.add(contentsOf: frame.headers)
            endStream = frame.endStream
        case .data(let frame):
            if case .byteBuffer(let buffer) = frame.data {
                if body.count + buffer.readableBytes > Self.bodyLimit {
                    bodyTooLong = true
                } else {
                    body.append(contentsOf: buffer.readableBytesView)
                }
            }
            endStream = frame.endStream
        default:
            return
        }
        guard endStream else { return }
        let id = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)) ?? .rootStream
        connection.received(headers: headers, body: body, bodyTooLong: bodyTooLong, on: context.channel, id: id)
    }
}
