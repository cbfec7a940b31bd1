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
    /// The notification in the pool's format, identifier 0, in an array of exactly its size.
    let frame: [UInt8]
    /// Where the identifier sits in `frame` (0 for the simple format, which has none: no identifier is at 0 in the
    /// other formats, whose first byte is the command).
    let identifierOffset: UInt16
    /// UNIX seconds; 0 never expires.
    public let expiration: UInt32
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
        var n = notification
        n.identifier = 0
        frame = NotificationEncoder.encodeBytes(n, format: format)
        expiration = notification.expiration
        switch format {
        case .frame: identifierOffset = UInt16(5 + 3 + n.token.bytes.count + 3 + n.payload.count + 3)
        case .enhanced: identifierOffset = 1
        case .simple: identifierOffset = 0
        }
    }

    /// Writes the frame with `identifier` into `buffer`.
    func write(identifier: UInt32, into buffer: inout ByteBuffer) {
        let start = buffer.writerIndex
        buffer.writeBytes(frame)
        if identifierOffset != 0 { buffer.setInteger(identifier, at: start + Int(identifierOffset)) }
    }
}

/// The terminal outcome of a delivery: exactly one per submitted delivery.
public struct DeliveryOutcome: Sendable, Hashable {
    public enum Result: Sendable, Hashable {
        case accepted
        case failed(DeliveryErrorReason, status: GatewayStatus?, detail: String)
    }

    public var ticket: DeliveryTicket
    public var result: Result
    /// How many times it was written to the gateway.
    public var attempts: Int
    /// HTTP/2: the response's status of a failure (the binary transport's status is in `result`).
    public var httpStatus: UInt16?
    /// HTTP/2 410: when Apple says the token stopped being valid (UNIX milliseconds): a feedback event follows.
    public var unregisteredAt: Int64?

    public init(ticket: DeliveryTicket, result: Result, attempts: Int, httpStatus: UInt16? = nil, unregisteredAt: Int64? = nil) {
        self.ticket = ticket
        self.result = result
        self.attempts = attempts
        self.httpStatus = httpStatus
        self.unregisteredAt = unregisteredAt
    }

    static func accepted(_ d: Delivery) -> DeliveryOutcome {
        DeliveryOutcome(ticket: d.ticket, result: .accepted, attempts: d.sends)
    }

    static func failed(_ d: Delivery, _ reason: DeliveryErrorReason, status: GatewayStatus?, _ detail: String) -> DeliveryOutcome {
        DeliveryOutcome(ticket: d.ticket, result: .failed(reason, status: status, detail: detail), attempts: d.sends)
    }
}
