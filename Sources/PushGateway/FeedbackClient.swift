import NIOCore
import NIOPosix
import NIOSSL
import PushCore
import Synchronization

/// What one visit to the feedback service returned, read whole.
public struct FeedbackList: Sendable {
    public var tuples: [FeedbackTuple]
    /// Garbage or a partial trailing tuple, reported rather than fatal: the tuples before it stand.
    public var problem: String?
}

/// How one visit to the feedback service went, its tuples handed on as they arrived.
public struct FeedbackReport: Sendable {
    /// Tuples handed to the visit's `onTuples`.
    public var count: Int
    /// Garbage or a partial trailing tuple, reported rather than fatal: the tuples before it stand.
    public var problem: String?
}

/// Connects to the feedback service with the app's certificate and reads tuples until the service closes.
public struct FeedbackClient: Sendable {
    public let endpoint: AppEndpoint
    private let tls: NIOSSLContext
    private let group: any EventLoopGroup
    /// How long the visit waits for the service to send something (the handshake and every read; not the time
    /// `onTuples` takes): a list that keeps coming is read however long it is.
    public var timeout: Duration = .seconds(60)

    public init(endpoint: AppEndpoint, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) throws {
        self.endpoint = endpoint
        self.tls = try endpoint.tlsContext()
        self.group = group
    }

    /// Reads the whole list into memory. Tuples are lost if the read ends badly, and a long list takes its size in
    /// memory: use ``fetch(onTuples:)`` to keep them and to hold only a few reads' worth.
    public func fetch() async throws -> FeedbackList {
        let collected = Mutex<[FeedbackTuple]>([])
        let report = try await fetch { tuples in collected.withLock { $0 += tuples } }
        return FeedbackList(tuples: collected.withLock { $0 }, problem: report.problem)
    }

    /// Reads the list, handing each read's tuples to `onTuples` as they arrive, so that a timeout, an I/O error or a
    /// cancellation mid-stream loses none that arrived. Reading waits for `onTuples` to return, so however long the
    /// list, the visit holds one read's tuples and the few reads the channel buffers (the service waits meanwhile:
    /// TCP's window).
    public func fetch(onTuples: @escaping @Sendable ([FeedbackTuple]) async throws -> Void) async throws -> FeedbackReport {
        let host = endpoint.feedbackHost
        let serverName = (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
        let tls = self.tls
        let channel = try await ClientBootstrap(group: group)
            .connectTimeout(.seconds(10))
            .connect(host: host, port: endpoint.feedbackPort) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: tls, serverHostname: serverName))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        let timeout = self.timeout
        let watch = StallWatch()
        return try await channel.executeThenClose { inbound, _ in
            try await withThrowingTaskGroup(of: FeedbackReport?.self) { group in
                group.addTask {
                    var buffer = ByteBuffer()
                    var report = FeedbackReport(count: 0, problem: nil)
                    var tuples: [FeedbackTuple] = []
                    do {
                        for try await var chunk in inbound {
                            watch.busy()
                            defer { watch.waiting() }
                            buffer.writeBuffer(&chunk)
                            var problem: WireDecodingError?
                            do throws(WireDecodingError) {
                                try FeedbackClient.drain(&buffer, into: &tuples)
                            } catch {
                                problem = error
                            }
                            if !tuples.isEmpty {
                                try await onTuples(tuples)
                                report.count += tuples.count
                                tuples.removeAll(keepingCapacity: true)
                            }
                            if let problem { throw problem }
                        }
                    } catch let error as WireDecodingError {
                        report.problem = error.description
                        return report
                    } catch let error as NIOSSLError where error == .uncleanShutdown {
                        report.problem = "the feedback service closed the connection without a TLS close_notify"
                    }
                    if let trailing = FeedbackTuple.trailingBytesError(buffer) { report.problem = trailing.description }
                    return report
                }
                group.addTask {
                    try await watch.stalled(after: timeout)
                    return nil
                }
                guard let report = try await group.next()! else {
                    group.cancelAll()
                    throw FeedbackError("the feedback service sent nothing for \(timeout), before the end of its list")
                }
                group.cancelAll()
                return report
            }
        }
    }

    private static func drain(_ buffer: inout ByteBuffer, into tuples: inout [FeedbackTuple]) throws(WireDecodingError) {
        while let tuple = try FeedbackTuple.decode(from: &buffer) { tuples.append(tuple) }
        buffer.discardReadBytes()
    }
}

/// When a visit last began to wait for the service, to tell a service that stalls from a list that keeps coming.
final class StallWatch: Sendable {
    /// nil while the visit handles what arrived (its wait has not begun).
    private let waitingSince = Mutex<ContinuousClock.Instant?>(.now)

    /// The visit waits for the service from now.
    func waiting() { waitingSince.withLock { $0 = .now } }

    /// The visit handles what arrived; it is not waiting.
    func busy() { waitingSince.withLock { $0 = nil } }

    /// Returns once one wait has lasted `timeout`; throws when cancelled.
    func stalled(after timeout: Duration) async throws {
        while true {
            let since = waitingSince.withLock { $0 }
            try await Task.sleep(until: (since ?? .now) + timeout)
            if let current = waitingSince.withLock({ $0 }), current + timeout <= .now { return }
        }
    }
}

public struct FeedbackError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
