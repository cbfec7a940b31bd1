import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// `/metrics` (Prometheus text format), `/healthz` (up while the process runs) and `/readyz` (ready once
/// partitions are assigned and every app has a usable connection or is backing off for a known reason).
public final class HTTPEndpoints: Sendable {
    public typealias Readiness = @Sendable () -> (ready: Bool, detail: String)

    private let metrics: @Sendable () -> [UInt8]
    private let readiness: Readiness
    private let channel = Mutex<(any Channel)?>(nil)

    public init(metrics: @escaping @Sendable () -> [UInt8], readiness: @escaping Readiness) {
        self.metrics = metrics
        self.readiness = readiness
    }

    /// Listens on `host:port` (port 0 picks one); returns the bound port.
    public func start(host: String, port: Int) async throws -> Int {
        let metrics = self.metrics
        let readiness = self.readiness
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMapThrowing {
                    try channel.pipeline.syncOperations.addHandler(EndpointHandler(metrics: metrics, readiness: readiness))
                }
            }
            .bind(host: host, port: port).get()
        channel.withLock { $0 = server }
        return server.localAddress?.port ?? port
    }

    public func stop() async {
        let server = channel.withLock { c in
            defer { c = nil }
            return c
        }
        try? await server?.close()
    }
}

private final class EndpointHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let metrics: @Sendable () -> [UInt8]
    let readiness: HTTPEndpoints.Readiness
    private var path = ""

    init(metrics: @escaping @Sendable () -> [UInt8], readiness: @escaping HTTPEndpoints.Readiness) {
        self.metrics = metrics
        self.readiness = readiness
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): path = String(head.uri.split(separator: "?").first ?? "")
        case .body: break
        case .end:
            let (status, type, body): (HTTPResponseStatus, String, [UInt8])
            switch path {
            case "/metrics": (status, type, body) = (.ok, "text/plain; version=0.0.4", metrics())
            case "/healthz": (status, type, body) = (.ok, "text/plain", Array("ok\n".utf8))
            case "/readyz":
                let r = readiness()
                (status, type, body) = (r.ready ? .ok : .serviceUnavailable, "text/plain", Array((r.detail + "\n").utf8))
            default: (status, type, body) = (.notFound, "text/plain", Array("not found\n".utf8))
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: type)
            headers.add(name: "Content-Length", value: String(body.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
