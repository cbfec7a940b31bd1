import Logging
import NIOCore
import NIOSSL
import NIOTLS
import PushCore

#if canImport(Glibc)
import Glibc
#endif

/// UNIX time in milliseconds.
func unixMilliseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

/// The app (APNs topic) of a client certificate: its subject's UID, as Apple issues them.
func appOfPeer(_ context: ChannelHandlerContext) -> String? {
    (try? context.pipeline.syncOperations.nioSSL_peerCertificate()).flatMap(app(of:))
}

/// The app a client certificate names: its subject's UID.
func app(of certificate: NIOSSLCertificate) -> String? {
    certificate.subjectName.first { $0.type == .userId }?.value
}

/// One gateway connection: a thin shell that applies ``GatewaySession``'s verdicts. Records and counts are handed to
/// the shared state once per read batch.
final class GatewayConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = NotificationDecodingResult
    typealias OutboundOut = ByteBuffer

    private var session: GatewaySession
    private let connection: Int
    private let state: SimulatorState
    private let recorder: Recorder
    private let logger: Logger
    private var app = ""
    private var closing = false
    private var records: [RecordedNotification] = []
    private var counts = SimulatorSummary()
    private let errorResponseDelay: TimeAmount

    init(
        session: GatewaySession, connection: Int, state: SimulatorState, recorder: Recorder, logger: Logger,
        errorResponseDelay: TimeAmount = .zero
    ) {
        self.errorResponseDelay = errorResponseDelay
        self.session = session
        self.connection = connection
        self.state = state
        self.recorder = recorder
        self.logger = logger
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted = event {
            guard let app = appOfPeer(context) else {
                logger.notice("client certificate names no app (no UID in its subject); closing", metadata: ["connection": "\(connection)"])
                closing = true
                context.close(promise: nil)
                return
            }
            self.app = app
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        let result = unwrapInboundIn(data)
        let action = session.receive(result)
        switch action {
        case .accept, .acceptThenShutdown, .acceptThenDrop:
            guard case .notification(let n) = result else { return }
            counts.accepted += 1
            if recorder.isActive {
                records.append(RecordedNotification(
                    app: app, token: n.token, payload: n.payload, identifier: n.identifier, expiry: n.expiration,
                    priority: n.priority, command: n.format.command, connection: connection, time: unixMilliseconds()))
            }
            if action == .acceptThenShutdown {
                respond(context, ErrorResponse(status: .shutdown, identifier: n.identifier))
            } else if action == .acceptThenDrop {
                counts.abruptCloses += 1
                closing = true
                flushBatch()
                context.close(promise: nil)
            }
        case .reject(let response, let reason):
            if response.status == .invalidToken, case .notification(let n) = result {
                state.tokenRejected(app: app, token: n.token, at: UInt32(clamping: unixMilliseconds() / 1000))
            }
            logger.debug("rejecting", metadata: ["connection": "\(connection)", "status": "\(response.status)", "identifier": "\(response.identifier)", "reason": "\(reason)"])
            if result.isSimpleFormat {
                // The simple format has no error responses: the gateway closes the connection (seeds, 2010 guide).
                counts.silentCloses[response.status.code, default: 0] += 1
                closing = true
                flushBatch()
                context.close(promise: nil)
            } else {
                respond(context, response)
            }
        }
    }

    /// Sends an error response (after `errorResponseDelay`, if one is set); everything the client sends after the
    /// notification it names is discarded. The connection closes when the client closes it, or a second after the
    /// response: closing with the client's data unread would make the kernel reset the connection, and a reset can
    /// destroy the response before the client reads it.
    private func respond(_ context: ChannelHandlerContext, _ response: ErrorResponse) {
        closing = true
        counts.errorResponses[response.status.code, default: 0] += 1
        flushBatch()
        var buffer = context.channel.allocator.buffer(capacity: ErrorResponse.size)
        response.write(into: &buffer)
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let send: @Sendable () -> Void = { [buffer] in
            let context = loopBound.value
            context.writeAndFlush(NIOAny(buffer)).whenComplete { _ in
                loopBound.value.eventLoop.scheduleTask(in: .seconds(1)) { loopBound.value.close(promise: nil) }
            }
        }
        if errorResponseDelay > .zero {
            context.eventLoop.scheduleTask(in: errorResponseDelay) { send() }
        } else {
            send()
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushBatch()
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        flushBatch()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("gateway connection error", metadata: ["connection": "\(connection)", "error": "\(error)"])
        context.close(promise: nil)
    }

    private func flushBatch() {
        if !records.isEmpty {
            recorder.append(records)
            records.removeAll(keepingCapacity: true)
        }
        if counts != SimulatorSummary() {
            state.add(counts)
            counts = SimulatorSummary()
        }
    }
}

/// One feedback connection: once the handshake names the app, writes its feedback list and closes.
final class FeedbackConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let state: SimulatorState
    private let stallAfter: Int?
    private let logger: Logger

    init(state: SimulatorState, stallAfter: Int?, logger: Logger) {
        self.state = state
        self.stallAfter = stallAfter
        self.logger = logger
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case TLSUserEvent.handshakeCompleted = event else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        guard let app = appOfPeer(context) else {
            context.close(promise: nil)
            return
        }
        let tuples = state.takeFeedback(app: app, now: unixMilliseconds() / 1000)
        var buffer = context.channel.allocator.buffer(capacity: tuples.count * 38)
        for tuple in tuples.prefix(stallAfter ?? tuples.count) { tuple.write(into: &buffer) }
        logger.debug("feedback", metadata: ["app": "\(app)", "tuples": "\(tuples.count)"])
        if let stallAfter, stallAfter < tuples.count {
            context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)  // and nothing more, never a close
            return
        }
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(buffer)).whenComplete { _ in loopBound.value.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // The feedback service expects nothing from the client; whatever arrives is ignored.
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// With `--read-delay-ms`, reads happen one small buffer at a time, each after the delay: a slow reader whose TCP
/// window fills, so that the client meets backpressure.
final class ReadPacer: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer

    private let delay: TimeAmount

    init(delay: TimeAmount) {
        self.delay = delay
    }

    func channelActive(context: ChannelHandlerContext) {
        context.read()
        context.fireChannelActive()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.fireChannelReadComplete()
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: delay) {
            let context = loopBound.value
            if context.channel.isActive { context.read() }
        }
    }
}

extension NotificationDecodingResult {
    /// Whether it is a command-0 (simple format) notification, valid or not.
    var isSimpleFormat: Bool {
        switch self {
        case .notification(let n): n.format == .simple
        case .rejected(_, _, let command): command == 0
        }
    }
}
