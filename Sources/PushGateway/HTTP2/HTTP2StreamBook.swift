/// One HTTP/2 connection's streams (SPEC section 9), pure: how many may be open now, which are, and what a
/// SETTINGS frame, a response, a stream reset, a GOAWAY, a request deadline or the connection's end means for the
/// requests on them. The connection's channel handler feeds it events and carries out its answers; it holds no
/// I/O, so every rule is tested without a network.
///
/// - The stream limit is the smallest of our cap (`max_concurrent_streams`), the server's
///   SETTINGS_MAX_CONCURRENT_STREAMS as last announced (followed live, a drop to 1 included: open streams above
///   a lowered limit finish, no new ones start), 1 until the server's first SETTINGS, and, on a token
///   connection, 1 until a request has succeeded (Apple's rule).
/// - Stream ids are the client's odd numbers; when they run out the connection drains and a new one takes over.
/// - Deadlines: every request's response is due `timeout` after its stream opened. Streams open in deadline order,
///   so expiry looks at the oldest only (amortized constant time per request).
public struct HTTP2StreamBook<Request> {
    public enum Phase: Sendable, Equatable {
        /// Takes new streams.
        case active
        /// Takes no new streams (GOAWAY received, the connection retired, or stream ids exhausted); the open ones
        /// may still be answered.
        case draining
        /// The connection has ended.
        case closed
    }

    public private(set) var phase: Phase = .active
    /// Our cap on concurrent streams (the pool lowers it after a connection was lost with many streams open, and
    /// raises it again as requests succeed). Lowering it lets open streams finish; no new ones start above it.
    public var cap: Int {
        didSet { cap = max(1, cap) }
    }
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS; nil until its first SETTINGS frame, `Int.max` when that frame
    /// names none (unlimited, RFC 9113 section 6.5.2).
    public private(set) var serverLimit: Int?
    /// Whether the connection authenticates with provider tokens: one stream until a request succeeds.
    public let oneStreamUntilSuccess: Bool
    /// Whether a request has succeeded (200) on this connection.
    public private(set) var succeeded = false
    /// How long a response may take, in the clock's units (nanoseconds of an uptime clock in the handler).
    public let timeout: Int64

    /// Open streams: the request and when the stream started (the clock's units; response latency).
    private var open: [UInt32: (request: Request, started: Int64)] = [:]
    /// (stream, deadline) in the order the streams opened; entries of finished streams are skipped when reached.
    private var deadlines: [(stream: UInt32, deadline: Int64)] = []
    private var deadlinesHead = 0
    private var nextStreamID: UInt32 = 1
    static var lastStreamID: UInt32 { 0x7FFF_FFFF }

    /// - Parameter firstStreamID: tests start near the end of the id space.
    public init(cap: Int, oneStreamUntilSuccess: Bool, timeout: Int64, firstStreamID: UInt32 = 1) {
        precondition(cap >= 1 && firstStreamID % 2 == 1)
        nextStreamID = firstStreamID
        self.cap = cap
        self.oneStreamUntilSuccess = oneStreamUntilSuccess
        self.timeout = timeout
    }

    /// How many streams may be open at once now.
    public var limit: Int {
        guard let serverLimit, !oneStreamUntilSuccess || succeeded else { return 1 }
        return min(cap, serverLimit)
    }

    /// Streams open now.
    public var openCount: Int { open.count }

    /// How many more streams may open now (0 unless active).
    public var available: Int { phase == .active ? max(0, limit - open.count) : 0 }

    /// The earliest deadline of an open stream, if any (the handler's timer is set for it).
    public var nextDeadline: Int64? {
        var index = deadlinesHead
        while index < deadlines.count {
            if open[deadlines[index].stream] != nil { return deadlines[index].deadline }
            index += 1
        }
        return nil
    }

    /// Whether the connection has nothing left to do: draining (or closed) with no stream open.
    public var isFinished: Bool { phase != .active && open.isEmpty }

    // MARK: Events

    /// The server's SETTINGS frame: its stream limit, when it names one.
    public mutating func settings(maxConcurrentStreams: Int?) {
        if let maxConcurrentStreams {
            serverLimit = maxConcurrentStreams
        } else if serverLimit == nil {
            serverLimit = .max
        }
    }

    /// Opens a stream for `request` (the caller checked `available`); returns its id.
    public mutating func start(_ request: Request, now: Int64) -> UInt32 {
        precondition(available > 0, "no stream available")
        let id = nextStreamID
        open[id] = (request, now)
        deadlines.append((id, now &+ timeout))
        if id >= Self.lastStreamID {
            phase = .draining
        } else {
            nextStreamID = id + 2
        }
        return id
    }

    /// A stream's response arrived (`success`: a 200): returns its request, or nil for a stream not open here.
    public mutating func finish(_ stream: UInt32, success: Bool) -> Request? {
        finish(stream, success: success, now: nil)?.request
    }

    /// As ``finish(_:success:)``, with how long the stream was open at `now` (nil when `now` is).
    public mutating func finish(_ stream: UInt32, success: Bool, now: Int64?) -> (request: Request, elapsed: Int64?)? {
        guard let entry = open.removeValue(forKey: stream) else { return nil }
        defer { compactDeadlines() }
        if success { succeeded = true }
        return (entry.request, now.map { $0 - entry.started })
    }

    private mutating func removeOpen(_ stream: UInt32) -> Request? {
        open.removeValue(forKey: stream)?.request
    }

    /// The server reset a stream (RST_STREAM): its request, to be sent again (uncounted when the code was
    /// REFUSED_STREAM: the server did not process it).
    public mutating func reset(_ stream: UInt32) -> Request? {
        finish(stream, success: false)
    }

    /// GOAWAY: the connection takes no new streams; the requests on streams above `lastStreamID` were not processed
    /// and are returned with their streams, in stream order (to be sent on another connection). The others may still
    /// be answered. Costs one step per stream it removes: streams opened in id order, so those above the last id are
    /// the newest entries of `deadlines` (a GOAWAY that changes nothing looks at one entry).
    public mutating func goAway(lastStreamID: UInt32) -> [(stream: UInt32, request: Request)] {
        if phase == .active { phase = .draining }
        var unprocessed: [(stream: UInt32, request: Request)] = []
        while deadlines.count > deadlinesHead, let newest = deadlines.last, newest.stream > lastStreamID {
            deadlines.removeLast()
            if let request = removeOpen(newest.stream) { unprocessed.append((newest.stream, request)) }
        }
        return unprocessed.reversed()
    }

    /// The connection is to take no new streams (503 Shutdown, a renewal): the open ones finish.
    public mutating func retire() {
        if phase == .active { phase = .draining }
    }

    /// The requests whose deadline has passed at `now`, oldest first; their streams count as finished (the handler
    /// resets them).
    public mutating func expire(now: Int64) -> [(stream: UInt32, request: Request)] {
        var expired: [(stream: UInt32, request: Request)] = []
        while deadlinesHead < deadlines.count, deadlines[deadlinesHead].deadline <= now {
            let stream = deadlines[deadlinesHead].stream
            deadlinesHead += 1
            if let request = removeOpen(stream) { expired.append((stream, request)) }
        }
        compactDeadlines()
        return expired
    }

    /// The connection ended: the requests still open, in stream order (they may or may not have reached the server).
    public mutating func closed() -> [Request] {
        phase = .closed
        let lost = open.keys.sorted().map { open[$0]!.request }
        open = [:]
        deadlines = []
        deadlinesHead = 0
        return lost
    }

    private mutating func compactDeadlines() {
        while deadlinesHead < deadlines.count, open[deadlines[deadlinesHead].stream] == nil { deadlinesHead += 1 }
        if deadlinesHead > 1024, deadlinesHead * 2 > deadlines.count {
            deadlines.removeFirst(deadlinesHead)
            deadlinesHead = 0
        }
    }
}
