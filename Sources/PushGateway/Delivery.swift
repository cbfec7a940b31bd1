import NIOCore
import PushCore

/// The caller's reference to a delivery, echoed in its outcome: two words the engine never reads (the worker packs
/// its ledger ticket in them).
public struct DeliveryTicket: Hashable, Sendable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    public var high: UInt64
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    public init(_ value: UInt64) { self.init(high: 0, low: value) }
    public init(integerLiteral value: UInt64) { self.init(value) }

    public var description: String { high == 0 ? "\(low)" : "\(high):\(low)" }
}

/// One notification on its way to the gateway: the encoded frame (its identifier is written in at each send) and a
/// few words. This is all the engine holds per notification, so `max_in_flight` of them stay small.
public struct Delivery: Sendable {
    /// The caller's reference, echoed in the outcome.
    public var ticket: DeliveryTicket
    /// The notification in the pool's format, identifier 0, with its size, identifier offset and expiration.
    private let frame: SharedFrame
    private var sendCount: UInt16 = 0
    private var failureCount: UInt16 = 0
    /// Times written to a gateway connection.
    public internal(set) var sends: Int {
        get { Int(sendCount) }
        set { sendCount = UInt16(clamping: newValue) }
    }
    /// Transient failures (status 1 or 255, or a connection that broke with it in flight).
    public internal(set) var transientFailures: Int {
        get { Int(failureCount) }
        set { failureCount = UInt16(clamping: newValue) }
    }

    public init(ticket: UInt64, notification: PushNotification, format: NotificationFormat) {
        self.init(ticket: DeliveryTicket(ticket), notification: notification, format: format)
    }

    public init(ticket: DeliveryTicket, notification: PushNotification, format: NotificationFormat) {
        self.ticket = ticket
        frame = SharedFrame(EncodedFrame.make(notification, format: format))
    }

    /// UNIX seconds; 0 never expires.
    public var expiration: UInt32 { frame.buffer.header.expiration }

    /// The frame's size in bytes.
    var frameSize: Int { Int(frame.buffer.header.count) }

    /// Its device token, read from the frame when asked for.
    public var tokenSource: DeliveryTokenSource { DeliveryTokenSource(frame: frame) }

    /// Writes the frame with `identifier` into `buffer`.
    func write(identifier: UInt32, into buffer: inout ByteBuffer) {
        let frame = self.frame.buffer
        let count = Int(frame.header.count)
        let identifierOffset = Int(frame.header.identifierOffset)
        frame.withUnsafeMutablePointerToElements { bytes in
            _ = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { out in
                out.baseAddress!.copyMemory(from: bytes, byteCount: count)
                if identifierOffset != 0 {
                    out.storeBytes(of: identifier.bigEndian, toByteOffset: identifierOffset, as: UInt32.self)
                }
                return count
            }
        }
    }
}

/// A notification's frame in one allocation: an object header, eight bytes and the frame (an array's header alone
/// is 32 bytes), with what the engine reads besides the bytes. Written once, when made; read only after.
final class EncodedFrame: ManagedBuffer<EncodedFrame.Header, UInt8> {
    struct Header {
        /// The frame's size in bytes (at most 2,177: a 100-byte token and a 2,048-byte payload).
        let count: UInt16
        /// Where the identifier sits (0 for the simple format, which has none: no identifier is at 0 in the other
        /// formats, whose first byte is the command).
        let identifierOffset: UInt16
        /// UNIX seconds; 0 never expires.
        let expiration: UInt32
    }

    /// `notification` in `format`, its identifier 0 (written in at each send).
    static func make(_ notification: PushNotification, format: NotificationFormat) -> EncodedFrame {
        var n = notification
        n.identifier = 0
        let size = n.encodedSize(format)
        let identifierOffset = switch format {
        case .frame: 5 + 3 + n.token.bytes.count + 3 + n.payload.count + 3
        case .enhanced: 1
        case .simple: 0
        }
        let made = create(minimumCapacity: size) { _ in
            Header(count: UInt16(size), identifierOffset: UInt16(identifierOffset), expiration: n.expiration)
        }
        _ = made.withUnsafeMutablePointerToElements { bytes in
            NotificationEncoder.encode(n, format: format, into: UnsafeMutableRawBufferPointer(start: bytes, count: size))
        }
        return unsafeDowncast(made, to: EncodedFrame.self)
    }

    /// The device token it carries: every format has the token's length at a fixed place after its command.
    var token: DeviceToken {
        withUnsafeMutablePointerToElements { bytes in
            let lengthOffset = switch bytes[0] {
            case 0: 1  // command, length
            case 1: 9  // command, identifier, expiration, length
            default: 6  // command, frame length, item id, item length
            }
            let count = Int(bytes[lengthOffset]) << 8 | Int(bytes[lengthOffset + 1])
            // Written from a valid token when the frame was made.
            return try! DeviceToken(bytes: Array(UnsafeBufferPointer(start: bytes + lengthOffset + 2, count: count)))
        }
    }
}

/// The terminal outcome of a delivery: exactly one per submitted delivery.
public struct DeliveryOutcome: Sendable, Hashable {
    public enum Result: Sendable, Hashable {
        case accepted
        case failed(DeliveryErrorReason, status: GatewayStatus?, detail: String)
    }

    public var ticket: DeliveryTicket
    /// The delivery's device token, for the output events (the caller need not keep a copy).
    public var tokenSource: DeliveryTokenSource
    public var result: Result
    /// How many times it was written to the gateway.
    public var attempts: Int
    /// HTTP/2: the response's status of a failure (the binary transport's status is in `result`).
    public var httpStatus: UInt16?
    /// HTTP/2 410: when Apple says the token stopped being valid (UNIX milliseconds): a feedback event follows.
    public var unregisteredAt: Int64?

    /// Whether the gateway accepted it (read in place: no copy of the result).
    @inlinable public var isAccepted: Bool {
        if case .accepted = result { true } else { false }
    }

    public init(
        ticket: DeliveryTicket, tokenSource: DeliveryTokenSource, result: Result, attempts: Int, httpStatus: UInt16? = nil,
        unregisteredAt: Int64? = nil
    ) {
        self.ticket = ticket
        self.tokenSource = tokenSource
        self.result = result
        self.attempts = attempts
        self.httpStatus = httpStatus
        self.unregisteredAt = unregisteredAt
    }

    static func accepted(_ d: Delivery) -> DeliveryOutcome {
        DeliveryOutcome(ticket: d.ticket, tokenSource: d.tokenSource, result: .accepted, attempts: d.sends)
    }

    static func failed(_ d: Delivery, _ reason: DeliveryErrorReason, status: GatewayStatus?, _ detail: String) -> DeliveryOutcome {
        DeliveryOutcome(
            ticket: d.ticket, tokenSource: d.tokenSource, result: .failed(reason, status: status, detail: detail), attempts: d.sends)
    }
}

/// A delivery's device token where the engine already holds it (the binary frame, the HTTP/2 request), copied out
/// only when asked for. Outcomes and send checks carry it, so the worker keeps no copy of its own per notification.
/// Equal when the tokens are.
public struct DeliveryTokenSource: Sendable, Hashable {
    private enum Storage: Sendable {
        case frame(SharedFrame)
        case token(DeviceToken)
    }

    private let storage: Storage

    public init(_ token: DeviceToken) { storage = .token(token) }
    init(frame: SharedFrame) { storage = .frame(frame) }

    public var token: DeviceToken {
        switch storage {
        case .frame(let frame): frame.buffer.token
        case .token(let token): token
        }
    }

    public static func == (a: Self, b: Self) -> Bool { a.token == b.token }
    public func hash(into hasher: inout Hasher) { hasher.combine(token) }
}

/// An `EncodedFrame` shared between threads: it is written only while it is made, before anyone else sees it
/// (`ManagedBuffer` cannot say so itself).
struct SharedFrame: @unchecked Sendable {
    let buffer: EncodedFrame

    init(_ buffer: EncodedFrame) { self.buffer = buffer }
}
