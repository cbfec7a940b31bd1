import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// `/metrics` (Prometheus text format), `/healthz` (up while the process runs) and `/readyz` (ready once
/// partitions are assigned and every app has a usable connection or is backing off for a known reason).
///
/// They answer `GET` and `HEAD`, keep a connection open between requests unless the client asks to close it (HTTP/1.0
/// without keep-alive, `Connection: close`), answer requests sent together one at a time, each once the client has
/// read the one before, close a connection idle for `idleTimeout` or whose request is not whole `requestTimeout`
/// after its first byte, and close at once any connection beyond `maxConnections`: a client that sends without
/// reading holds one answer in memory, and clients that never let go (or trickle a request a byte at a time) can
/// neither take the file descriptors the worker needs for Kafka and the gateway nor keep a scraper or a probe out.
/// The idle time (90 s) is longer than the usual scrape intervals, so that a scraper polling once a minute keeps its
/// connection rather than meeting its close.
public final class HTTPEndpoints: Sendable {
    public typealias Readiness = @Sendable () -> (ready: Bool, detail: String)

    private let metrics: @Sendable () -> [UInt8]
    private let readiness: Readiness
    private let idleTimeout: TimeAmount
    private let requestTimeout: TimeAmount
    private let maxConnections: Int
    private let channel = Mutex<(any Channel)?>(nil)

    public init(
        metrics: @escaping @Sendable () -> [UInt8], readiness: @escaping Readiness,
        idleTimeout: TimeAmount = .seconds(90), requestTimeout: TimeAmount = .seconds(10), maxConnections: Int = 64
    ) {
        self.metrics = metrics
        self.readiness = readiness
        self.idleTimeout = idleTimeout
        self.requestTimeout = requestTimeout
        self.maxConnections = maxConnections
    }

    /// Listens on `host:port` (port 0 picks one); returns the bound port.
    public func start(host: String, port: Int) async throws -> Int {
        let metrics = self.metrics
        let readiness = self.readiness
        let idleTimeout = self.idleTimeout
        let requestTimeout = self.requestTimeout
        let maxConnections = self.maxConnections
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ConnectionLimit(maxConnections: maxConnections))
                }
            }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try Self.configureConnection(
                        channel, metrics: metrics, readiness: readiness, idleTimeout: idleTimeout, requestTimeout: requestTimeout)
                }
            }
            .bind(host: host, port: port).get()
        channel.withLock { $0 = server }
        return server.localAddress?.port ?? port
    }

    /// One connection's handlers: the idle timer, the request deadline, NIO's HTTP/1 server (which hands over one
    /// request at a time and reads no more from the socket until its answer is written), and the endpoints.
    static func configureConnection(
        _ channel: any Channel, metrics: @escaping @Sendable () -> [UInt8], readiness: @escaping Readiness,
        idleTimeout: TimeAmount, requestTimeout: TimeAmount
    ) throws {
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(IdleStateHandler(allTimeout: idleTimeout))
        try pipeline.addHandler(RequestDeadline(timeout: requestTimeout))
        try pipeline.configureHTTPServerPipeline()
        try pipeline.addHandler(EndpointHandler(metrics: metrics, readiness: readiness))
    }

    public func stop() async {
        let server = channel.withLock { c in
            defer { c = nil }
            return c
        }
        try? await server?.close()
    }
}

/// On the listening channel: closes an accepted connection at once when `maxConnections` are already open.
private final class ConnectionLimit: ChannelInboundHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    /// Accepted connections not yet closed; a connection's close runs on its own event loop.
    final class OpenConnections: Sendable {
        let count = Atomic<Int>(0)
    }

    let maxConnections: Int
    private let open = OpenConnections()

    init(maxConnections: Int) { self.maxConnections = maxConnections }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let child = unwrapInboundIn(data)
        guard open.count.add(1, ordering: .relaxed).newValue <= maxConnections else {
            open.count.subtract(1, ordering: .relaxed)
            child.close(promise: nil)
            return
        }
        child.closeFuture.whenComplete { [open] _ in open.count.subtract(1, ordering: .relaxed) }
        context.fireChannelRead(data)
    }
}

/// Before NIO's HTTP server, on the connection's bytes: closes the connection when a request is not whole `timeout`
/// after its first byte arrived. Every read resets the idle timer, so a client that trickles its request (a header
/// line every few seconds, or a body that never ends) would otherwise keep its connection for good. The time counts
/// from a request's first byte, not from the previous answer: a client quiet between requests is the idle timer's.
final class RequestDeadline: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Sent toward the socket by the endpoint handler when it has a whole request: the deadline is off until the
    /// next byte.
    struct RequestWhole {}

    let timeout: TimeAmount
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if deadline == nil {
            let channel = context.channel
            deadline = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        }
        context.fireChannelRead(data)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard event is RequestWhole else { return context.triggerUserOutboundEvent(event, promise: promise) }
        deadline?.cancel()
        deadline = nil
        promise?.succeed()
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        context.fireChannelInactive()
    }
}

private final class EndpointHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let metrics: @Sendable () -> [UInt8]
    let readiness: HTTPEndpoints.Readiness
    private var request: HTTPRequestHead?
    /// A whole request whose answer waits until the client has read the previous ones (the channel is writable
    /// again). Until it is written NIO's HTTP server hands over no other request and reads nothing more, so a client
    /// that sends requests and reads no answers holds one answer here, not one per request.
    private var waiting: HTTPRequestHead?

    init(metrics: @escaping @Sendable () -> [UInt8], readiness: @escaping HTTPEndpoints.Readiness) {
        self.metrics = metrics
        self.readiness = readiness
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): request = head
        case .body: break
        case .end:
            context.triggerUserOutboundEvent(RequestDeadline.RequestWhole(), promise: nil)
            guard let request else { return }
            self.request = nil
            if context.channel.isWritable {
                respond(to: request, context: context)
            } else {
                waiting = request
            }
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, let waiting {
            self.waiting = nil
            respond(to: waiting, context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    private func respond(to request: HTTPRequestHead, context: ChannelHandlerContext) {
        let (status, type, body) = answer(to: request)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: String(body.count))
        if status == .methodNotAllowed { headers.add(name: "Allow", value: "GET, HEAD") }
        let keepAlive = request.isKeepAlive
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let version: HTTPVersion = request.version == .http1_0 ? .http1_0 : .http1_1
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: version, status: status, headers: headers))), promise: nil)
        // NIO's encoder leaves the body out of an answer to HEAD.
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        if keepAlive {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        } else {
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// The status, content type and body that answer `request`.
    private func answer(to request: HTTPRequestHead) -> (HTTPResponseStatus, String, [UInt8]) {
        guard request.method == .GET || request.method == .HEAD else {
            return (.methodNotAllowed, "text/plain", Array("only GET and HEAD\n".utf8))
        }
        switch request.uri.split(separator: "?").first ?? "" {
        case "/metrics": return (.ok, "text/plain; version=0.0.4", metrics())
        case "/healthz": return (.ok, "text/plain", Array("ok\n".utf8))
        case "/readyz":
            let r = readiness()
            return (r.ready ? .ok : .serviceUnavailable, "text/plain", Array((r.detail + "\n").utf8))
        default: return (.notFound, "text/plain", Array("not found\n".utf8))
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }
}
