/// What one end of an HTTP/2 connection tolerates of its peer's frames (SPEC section 13), counted per connection,
/// pure: the caller gives each frame's header and the time. A peer over a limit gets a connection error with
/// ENHANCE_YOUR_CALM. The numbers are swift-nio-http2's defaults: frames that cost this side work but carry no
/// progress (empty DATA, CONTINUATION, control frames, resets) are bounded, so a peer cannot make a connection spin.
public struct HTTP2PeerLimits: Sendable {
    /// Empty DATA frames without END_STREAM in a row (`maximumSequentialEmptyDataFrames`).
    public static let maxEmptyDataInARow = 1
    /// CONTINUATION frames of one header block (`maximumSequentialContinuationFrames`).
    public static let maxContinuationsInARow = 5
    /// PING, SETTINGS, PRIORITY and GOAWAY frames, and RST_STREAM frames, each at most this many per ``rateWindow``.
    public static let maxControlFramesPerWindow = 200
    public static let rateWindowNanoseconds: Int64 = 30_000_000_000

    private var emptyDataInARow = 0
    private var continuationsInARow = 0
    private var controlFrames = FrameRateLimit(count: maxControlFramesPerWindow, windowNanoseconds: rateWindowNanoseconds)
    private var resets = FrameRateLimit(count: maxControlFramesPerWindow, windowNanoseconds: rateWindowNanoseconds)

    public init() {}

    /// Counts one frame the peer sent, at `now` (nanoseconds of a monotonic clock); throws once a limit is passed.
    public mutating func count(_ header: HTTP2Wire.FrameHeader, now: Int64) throws(HTTP2Wire.ConnectionError) {
        switch header.type {
        case HTTP2Wire.data:
            if header.length == 0 && header.flags & HTTP2Wire.endStream == 0 {
                emptyDataInARow += 1
                guard emptyDataInARow <= Self.maxEmptyDataInARow else { throw calm("more than \(Self.maxEmptyDataInARow) empty DATA frame in a row") }
            } else {
                emptyDataInARow = 0
            }
        case HTTP2Wire.headers:
            emptyDataInARow = 0
            continuationsInARow = 0
        case HTTP2Wire.continuation:
            continuationsInARow += 1
            guard continuationsInARow <= Self.maxContinuationsInARow else {
                throw calm("more than \(Self.maxContinuationsInARow) CONTINUATION frames in a header block")
            }
        case HTTP2Wire.ping, HTTP2Wire.settings, HTTP2Wire.priority, HTTP2Wire.goAway:
            guard controlFrames.take(now: now) else {
                throw calm("more than \(Self.maxControlFramesPerWindow) PING, SETTINGS, PRIORITY and GOAWAY frames in 30 s")
            }
        case HTTP2Wire.rstStream:
            guard resets.take(now: now) else { throw calm("more than \(Self.maxControlFramesPerWindow) RST_STREAM frames in 30 s") }
        default:
            break
        }
    }

    private func calm(_ detail: String) -> HTTP2Wire.ConnectionError {
        HTTP2Wire.ConnectionError(code: .enhanceYourCalm, detail: detail)
    }
}

/// A token bucket: `count` frames at once, refilled at `count` per window, in integer nanoseconds (no drift).
public struct FrameRateLimit: Sendable {
    /// Credit in nanoseconds; a frame costs `window / count` of it, and it never exceeds `window`.
    private var credit: Int64
    private let cost: Int64
    private let window: Int64
    private var last: Int64?

    public init(count: Int, windowNanoseconds: Int64) {
        precondition(count > 0 && windowNanoseconds > 0)
        window = windowNanoseconds
        cost = windowNanoseconds / Int64(count)
        credit = windowNanoseconds
    }

    /// Takes one frame's credit at `now`: false when there is none left.
    public mutating func take(now: Int64) -> Bool {
        if let last, now > last { credit = min(window, credit + (now - last)) }
        last = max(last ?? now, now)
        guard credit >= cost else { return false }
        credit -= cost
        return true
    }
}
