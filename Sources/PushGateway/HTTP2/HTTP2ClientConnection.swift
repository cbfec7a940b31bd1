import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import PushCore

/// What an HTTP/2 connection reports to its owner, on its event loop.
public enum HTTP2ConnectionEvent: Sendable {
    /// The TLS handshake completed: the connection can carry requests (as the server's SETTINGS allow).
    case ready
    /// Streams are available (the server's SETTINGS arrived, or streams finished): the owner may submit this many.
    case capacity(Int)
    /// Responses arrived (all those of one read from the socket, in order): final or not, the owner decides
    /// (``APNsOutcome``).
    case answered([HTTP2Answer])
    /// Not processed by the server (above a GOAWAY's last stream id, or refused with REFUSED_STREAM): to be sent
    /// again, uncounted a few times in a row (``HTTP2ResponsePolicy/unprocessed(_:reason:now:)``).
    case unprocessed([HTTP2Delivery], reason: String)
    /// Sent and unanswered: the connection was lost, the deadline passed, or the server reset the stream. Retried,
    /// counted.
    case lost([HTTP2Delivery], reason: String)
    /// The connection takes no new streams (GOAWAY, stream ids exhausted); it closes once its streams finish.
    case draining
    /// The server broke the protocol or a limit of SPEC section 13: this side sent GOAWAY with the error's code and
    /// closes the connection (its open streams are lost).
    case connectionError(HTTP2Wire.ConnectionError)
    /// The connection has closed; nothing more comes from it. `tlsRefusal` says why TLS ended it before the server
    /// sent anything (a certificate refused), if it did.
    case closed(tlsRefusal: String?)
}

/// A response to one request, `latency` nanoseconds after its stream opened.
public struct HTTP2Answer: Sendable {
    public var delivery: HTTP2Delivery
    public var response: APNsResponse
    public var latency: Int64
}

/// One HTTP/2 connection to the provider API: the handler behind TLS, speaking HTTP/2 through its
/// ``HTTP2ClientSession`` (frames, flow control, HPACK; no channel per stream). It keeps an ``HTTP2StreamBook`` and
/// carries out its answers: opens a stream per submitted request (HEADERS with the request's fields and the current
/// provider token, then DATA with the body),
/// reads each response's status and JSON body, follows SETTINGS, GOAWAY and RST_STREAM, resets streams whose
/// deadline passed, gives the connection's flow-control window back, sends PING when idle and before reuse after a
/// long idle, and closes a connection whose PING goes unanswered. Everything happens on the channel's event loop; `onEvent` is called there. Responses
/// are reported together once per read from the socket (with one capacity event after them), so that the owner
/// settles and refills in batches rather than once per stream.
public final class HTTP2ClientConnection: ChannelInboundHandler {
    public typealias InboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    /// The connection's settings.
    public struct Settings: Sendable {
        public var maxConcurrentStreams: Int
        /// One stream until a request succeeds (token authentication).
        public var oneStreamUntilSuccess: Bool
        public var requestTimeout: TimeAmount
        /// A connection with nothing received for this long is checked with PING.
        public var pingInterval: TimeAmount = .seconds(60)
        /// A PING unanswered this long closes the connection (silently dropped by a firewall).
        public var pingTimeout: TimeAmount = .seconds(10)
        /// A connection with no stream open and nothing received for this long is checked with PING before it takes
        /// new streams: a path dropped silently while idle would otherwise swallow a batch until its deadline.
        public var reuseCheckAfter: TimeAmount = .seconds(30)
        /// The server must acknowledge this side's SETTINGS within this long, or the connection ends with
        /// SETTINGS_TIMEOUT (SPEC section 13).
        public var settingsTimeout: TimeAmount = .seconds(10)
        /// Every request's `:authority` (RFC 9113 section 8.3.1: a client with authority information sends it): the
        /// API's host, with its port unless 443.
        public var authority: String?

        public init(maxConcurrentStreams: Int, oneStreamUntilSuccess: Bool, requestTimeout: TimeAmount) {
            self.maxConcurrentStreams = maxConcurrentStreams
            self.oneStreamUntilSuccess = oneStreamUntilSuccess
            self.requestTimeout = requestTimeout
        }
    }

    private var book: HTTP2StreamBook<HTTP2Delivery>
    private let settings: Settings
    private let authorization: @Sendable () -> String?
    private let onEvent: @Sendable (HTTP2ConnectionEvent) -> Void
    private var context: ChannelHandlerContext?
    private var session = HTTP2ClientSession()
    /// Bytes read but not yet a whole frame: at most one frame and one read, as what was read is discarded after
    /// each read.
    private var inbound = ByteBuffer()
    /// The capacity of the input buffer (for tests).
    var inboundCapacity: Int { inbound.capacity }
    private var settingsTimer: Scheduled<Void>?
    /// A response being read: its status, unique id and body so far.
    private struct PartialResponse {
        var status: Int
        var uniqueID: String?
        var body: [UInt8] = []
    }

    /// Responses being read.
    private var responses: [UInt32: PartialResponse] = [:]
    private var deadlineTimer: Scheduled<Void>?
    private var timerDeadline: Int64?
    private var pingTimer: Scheduled<Void>?
    private var lastRead = NIODeadline.now()
    private var pingOutstanding = false
    /// A PING sent before reuse after a long idle is unanswered: no stream opens until something arrives.
    private var checkingPath = false
    private var pathCheckTimer: Scheduled<Void>?
    private var announcedDraining = false
    /// Responses completed during the current read, reported at its end.
    private var answers: [HTTP2Answer] = []
    /// Streams finished during the current read: capacity to announce at its end.
    private var streamsFreed = false
    /// Whether the channel is active and the connection preface written.
    private var active = false
    /// The server broke the protocol: GOAWAY is written, the connection closing, nothing more read.
    private var failed = false
    /// Whether anything came from the server.
    private var receivedAny = false
    /// Why TLS ended the connection before the server sent anything: a certificate refused, by either side.
    public private(set) var tlsRefusal: String?

    /// - Parameters:
    ///   - authorization: the provider token to send with each request (nil with certificate authentication);
    ///     called per request, so a renewed token is used at once.
    ///   - onEvent: called on the event loop.
    public init(
        settings: Settings, authorization: @escaping @Sendable () -> String?, onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) {
        self.settings = settings
        self.authorization = authorization
        self.onEvent = onEvent
        book = HTTP2StreamBook(
            cap: settings.maxConcurrentStreams, oneStreamUntilSuccess: settings.oneStreamUntilSuccess,
            timeout: settings.requestTimeout.nanoseconds)
    }

    /// Streams that may open now (none before the channel is active: the HTTP/2 preface goes first).
    public var available: Int { active && !checkingPath ? book.available : 0 }
    /// Streams open now.
    public var openStreams: Int { book.openCount }
    /// Our cap on this connection's concurrent streams (at most `Settings.maxConcurrentStreams`).
    public var streamCap: Int {
        get { book.cap }
        set { book.cap = min(newValue, settings.maxConcurrentStreams) }
    }
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS, once announced.
    public var serverStreamLimit: Int? { book.serverLimit }

    public func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        lastRead = context.eventLoop.now
        schedulePing(context: context)
        armSettingsTimer(context: context)
        if context.channel.isActive { start(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
        onEvent(.capacity(available))
    }

    /// Writes the connection preface (once).
    private func start(context: ChannelHandlerContext) {
        guard !active else { return }
        active = true
        writeOutput(context: context)
    }

    private func writeOutput(context: ChannelHandlerContext) {
        if let output = session.takeOutput() { context.writeAndFlush(wrapOutboundOut(output), promise: nil) }
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        settingsTimer?.cancel()
        deadlineTimer?.cancel()
        pingTimer?.cancel()
        pathCheckTimer?.cancel()
        self.context = nil
    }

    // MARK: Sending

    /// Opens a stream for each request, as many as are available (the rest are returned), and writes to the socket
    /// once.
    public func submit(_ deliveries: [HTTP2Delivery]) -> [HTTP2Delivery] {
        guard let context, available > 0 else { return deliveries }
        if book.openCount == 0, context.eventLoop.now - lastRead >= settings.reuseCheckAfter {
            checkPath(context: context)
            return deliveries
        }
        let now = NIODeadline.now().uptimeNanoseconds
        var rest: [HTTP2Delivery] = []
        let token = authorization()
        let bearer = token.map { "bearer " + $0 }
        for var delivery in deliveries {
            guard book.available > 0 else {
                rest.append(delivery)
                continue
            }
            delivery.sends += 1
            delivery.authorization = token
            let request = delivery.request
            let id = book.start(delivery, now: Int64(now))
            session.send(request, stream: id, authority: settings.authority, bearer: bearer)
        }
        writeOutput(context: context)
        armDeadlineTimer(context: context)
        announceDrainingIfNeeded()
        return rest
    }

    /// Takes no new streams; the connection closes once the open ones finish.
    public func retire() {
        book.retire()
        announceDrainingIfNeeded()
        closeIfFinished()
    }

    // MARK: Receiving

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        var buffer = unwrapInboundIn(data)
        receivedAny = true
        lastRead = context.eventLoop.now
        pingOutstanding = false
        if checkingPath {
            // Anything from the server proves the path: the streams wait no longer (announced at the read's end).
            checkingPath = false
            pathCheckTimer?.cancel()
            streamsFreed = true
        }
        if inbound.readableBytes == 0 {
            inbound = buffer
        } else {
            inbound.writeBuffer(&buffer)
        }
        let now = Int64(context.eventLoop.now.uptimeNanoseconds)
        do {
            while let event = try session.next(from: &inbound, now: now) { handle(event) }
            inbound.keepOnlyUnread()
        } catch {
            // The server broke the protocol (GOAWAY with the error's code is written): what was open is lost.
            failed = true
            onEvent(.connectionError(error))
            writeOutput(context: context)
            context.close(promise: nil)
        }
    }

    private func handle(_ event: HTTP2ClientSession.Event) {
        switch event {
        case .headers(let id, let status, let endStream, let uniqueID):
            if let status, (100..<200).contains(status) { return }  // informational: the final headers follow
            if endStream {
                // Most answers are one HEADERS frame that ends the stream: they make no entry in `responses`.
                var response = responses.isEmpty ? nil : responses.removeValue(forKey: id)
                if let status { response = PartialResponse(status: status, uniqueID: uniqueID, body: response?.body ?? []) }
                complete(id, response)
            } else if let status {
                responses[id] = PartialResponse(status: status, uniqueID: uniqueID, body: responses[id]?.body ?? [])
            }
        case .data(let id, let buffer, let endStream):
            // Apple's bodies are a few dozen bytes; a larger one is cut (the reason is at its start).
            if var response = responses[id], response.body.count < 4096 {
                response.body.append(contentsOf: buffer.readableBytesView.prefix(4096 - response.body.count))
                responses[id] = response
            }
            if endStream { complete(id, responses.removeValue(forKey: id)) }
        case .reset(let id, let code):
            responses[id] = nil
            guard let delivery = book.reset(id) else { return }
            if code == HTTP2Wire.ErrorCode.refusedStream.rawValue {
                onEvent(.unprocessed([delivery], reason: "stream refused by the server (REFUSED_STREAM)"))
            } else {
                let name = HTTP2Wire.ErrorCode(rawValue: code).map { "\($0)" } ?? "0x\(String(code, radix: 16))"
                onEvent(.lost([delivery], reason: "stream reset by the server (\(name))"))
            }
            streamFreed()
        case .settings(let limit):
            let before = book.available
            book.settings(maxConcurrentStreams: limit)
            if book.available > before || before == 0 { onEvent(.capacity(book.available)) }
        case .goAway(let lastStreamID):
            let unprocessed = book.goAway(lastStreamID: lastStreamID)
            for (stream, _) in unprocessed {
                session.forget(stream)
                responses[stream] = nil
            }
            announceDrainingIfNeeded()
            if !unprocessed.isEmpty {
                onEvent(.unprocessed(unprocessed.map(\.request), reason: "above the last stream id of the server's GOAWAY"))
            }
            closeIfFinished()
        case .streamError(let id, let detail):
            responses[id] = nil
            guard let delivery = book.reset(id) else { return }
            onEvent(.lost([delivery], reason: detail))
            streamFreed()
        }
    }

    /// A stream's response is complete: its status and body, nil when no status came.
    private func complete(_ id: UInt32, _ response: PartialResponse?) {
        guard let response else {
            // END_STREAM without a status: not a response; the stream's request is retried, counted.
            if let delivery = book.reset(id) { onEvent(.lost([delivery], reason: "a response without :status")) }
            streamFreed()
            return
        }
        let now = Int64(NIODeadline.now().uptimeNanoseconds)
        guard let (delivery, latency) = book.finish(id, success: response.status == 200, now: now) else { return }
        var answer = APNsResponse(status: response.status, body: response.body)
        answer.uniqueID = response.uniqueID
        answers.append(HTTP2Answer(delivery: delivery, response: answer, latency: latency ?? 0))
        streamFreed()
    }

    /// A stream finished during a read: reported at the read's end, or now if it was a draining connection's last.
    private func streamFreed() {
        streamsFreed = true
        if book.isFinished, book.phase == .draining { streamsFinished() }
    }

    /// Reports what the current read (or timer) finished: the responses, then the capacity they freed. A draining
    /// connection whose streams are all finished closes.
    private func streamsFinished() {
        if !answers.isEmpty {
            let batch = answers
            answers.removeAll(keepingCapacity: true)
            onEvent(.answered(batch))
        }
        streamsFreed = false
        if available > 0 { onEvent(.capacity(available)) }
        closeIfFinished()
    }

    public func channelWritabilityChanged(context: ChannelHandlerContext) {
        session.writable = context.channel.isWritable
        context.fireChannelWritabilityChanged()
    }

    public func channelReadComplete(context: ChannelHandlerContext) {
        if streamsFreed || !answers.isEmpty { streamsFinished() }
        if !failed { session.topUpReceiveWindow() }
        writeOutput(context: context)
        context.fireChannelReadComplete()
    }

    public func channelInactive(context: ChannelHandlerContext) {
        settingsTimer?.cancel()
        deadlineTimer?.cancel()
        pingTimer?.cancel()
        pathCheckTimer?.cancel()
        if !answers.isEmpty {
            let batch = answers
            answers = []
            onEvent(.answered(batch))
        }
        responses = [:]
        let lost = book.closed()
        if !lost.isEmpty { onEvent(.lost(lost, reason: "connection lost")) }
        onEvent(.closed(tlsRefusal: tlsRefusal))
        context.fireChannelInactive()
    }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted = event { onEvent(.ready) }
        context.fireUserInboundEventTriggered(event)
    }

    public func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if tlsRefusal == nil, !receivedAny {
            // With TLS 1.3 a refused client certificate arrives as an alert on the first read (its code is private
            // to swift-nio-ssl): any TLS error before the server's first byte counts as the refusal.
            switch error {
            case NIOSSLError.handshakeFailed, BoringSSLError.sslError: tlsRefusal = String(describing: error)
            default: break
            }
        }
        context.close(promise: nil)
    }

    // MARK: Flow control, deadlines, PING

    /// Ends the connection with SETTINGS_TIMEOUT unless the server acknowledges this side's SETTINGS in time: a
    /// server that never does could otherwise hold the connection with settings this side cannot rely on.
    private func armSettingsTimer(context: ChannelHandlerContext) {
        guard settingsTimer == nil, session.settingsAwaitingAck > 0 else { return }
        let acknowledgedBefore = session.settingsAcknowledged
        settingsTimer = context.eventLoop.assumeIsolated().scheduleTask(in: settings.settingsTimeout) { [self] in
            settingsTimer = nil
            guard let context = self.context, !failed, session.settingsAwaitingAck > 0 else { return }
            guard session.settingsAcknowledged == acknowledgedBefore else {
                armSettingsTimer(context: context)
                return
            }
            failed = true
            let error = HTTP2Wire.ConnectionError(code: .settingsTimeout, detail: "SETTINGS not acknowledged within \(settings.settingsTimeout.nanoseconds / 1_000_000_000) s")
            session.fail(error)
            onEvent(.connectionError(error))
            writeOutput(context: context)
            context.close(promise: nil)
        }
    }

    private func armDeadlineTimer(context: ChannelHandlerContext) {
        guard let next = book.nextDeadline else { return }
        if let timerDeadline, timerDeadline <= next { return }
        deadlineTimer?.cancel()
        timerDeadline = next
        deadlineTimer = context.eventLoop.assumeIsolated().scheduleTask(deadline: NIODeadline.uptimeNanoseconds(UInt64(max(0, next)))) { [self] in
            timerDeadline = nil
            expireDeadlines()
        }
    }

    private func expireDeadlines() {
        guard let context else { return }
        let expired = book.expire(now: Int64(NIODeadline.now().uptimeNanoseconds))
        for (stream, _) in expired {
            responses[stream] = nil
            session.cancel(stream)
        }
        if !expired.isEmpty {
            writeOutput(context: context)
            onEvent(.lost(expired.map(\.request), reason: "no response within \(settings.requestTimeout.nanoseconds / 1_000_000) ms"))
            streamsFinished()
        }
        armDeadlineTimer(context: context)
    }

    private func schedulePing(context: ChannelHandlerContext) {
        pingTimer = context.eventLoop.assumeIsolated().scheduleTask(in: settings.pingInterval) { [self] in
            guard let context = self.context else { return }
            if pingOutstanding {
                // Nothing came back within the PING's timeout: the path is gone (a silently dropped connection).
                context.close(promise: nil)
                return
            }
            if context.eventLoop.now - lastRead >= settings.pingInterval {
                pingOutstanding = true
                session.ping(1)
                writeOutput(context: context)
                pingTimer = context.eventLoop.assumeIsolated().scheduleTask(in: settings.pingTimeout) { [self] in
                    guard let context = self.context else { return }
                    if pingOutstanding { context.close(promise: nil) } else { schedulePing(context: context) }
                }
                return
            }
            schedulePing(context: context)
        }
    }

    /// Sends PING before a long-idle connection takes streams again; closes it if nothing comes back in time.
    private func checkPath(context: ChannelHandlerContext) {
        checkingPath = true
        session.ping(2)
        writeOutput(context: context)
        pathCheckTimer = context.eventLoop.assumeIsolated().scheduleTask(in: settings.pingTimeout) { [self] in
            if checkingPath { self.context?.close(promise: nil) }
        }
    }

    private func announceDrainingIfNeeded() {
        if book.phase == .draining, !announcedDraining {
            announcedDraining = true
            onEvent(.draining)
        }
    }

    private func closeIfFinished() {
        if book.isFinished, book.phase == .draining { context?.close(promise: nil) }
    }
}

extension HTTP2ClientConnection {
    /// Opens a connection to `host:port`: TCP, TLS (the endpoint's context, ALPN `h2`) and the connection handler.
    /// The handler is bound to the channel's event loop: call it there.
    public static func connect(
        host: String, port: Int, tls: NIOSSLContext, group: any EventLoopGroup,
        connectTimeout: TimeAmount, settings: Settings, authorization: @escaping @Sendable () -> String?,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) -> EventLoopFuture<(any Channel, NIOLoopBound<HTTP2ClientConnection>)> {
        ClientBootstrap.gateway(group: group, connectTimeout: connectTimeout, tls: tls, host: host) { sync in
            try sync.addHandler(HTTP2ClientConnection(settings: settings, authorization: authorization, onEvent: onEvent))
        }
            .connect(host: host, port: port)
            .flatMapThrowing { channel in
                let handler = try channel.pipeline.syncOperations.handler(type: HTTP2ClientConnection.self)
                return (channel, NIOLoopBound(handler, eventLoop: channel.eventLoop))
            }
    }
}
