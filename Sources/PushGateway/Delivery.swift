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
    /// The notification in the pool's format, identifier 0.
    let frame: ByteBuffer
    /// Where the identifier sits in `frame` (nil for the simple format, which has none).
    let identifierOffset: Int?
    /// UNIX seconds; 0 never expires.
    public let expiration: UInt32
    /// Times written to a gateway connection.
    public internal(set) var sends = 0
    /// Transient failures (status 1 or 255, or a connection that broke with it in flight).
    public internal(set) var transientFailures = 0

    public init(ticket: UInt64, notification: PushNotification, format: NotificationFormat) {
        self.init(ticket: DeliveryTicket(ticket), notification: notification, format: format)
    }

    public init(ticket: DeliveryTicket, notification: PushNotification, format: NotificationFormat) {
        self.ticket = ticket
        var n = notification
        n.identifier = 0
        frame = NotificationEncoder.encode(n, format: format)
        expiration = notification.expiration
        switch format {
        case .frame: identifierOffset = 5 + 3 + n.token.bytes.count + 3 + n.payload.count + 3
        case .enhanced: identifierOffset = 1
        case .simple: identifierOffset = nil
        }
    }

    /// Writes the frame with `identifier` into `buffer`.
    func write(identifier: UInt32, into buffer: inout ByteBuffer) {
        let start = buffer.writerIndex
        var copy = frame
        buffer.writeBuffer(&copy)
        if let offset = identifierOffset { buffer.setInteger(identifier, at: start + offset) }
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

    public init(ticket: DeliveryTicket, result: Result, attempts: Int) {
        self.ticket = ticket
        self.result = result
        self.attempts = attempts
    }

    static func accepted(_ d: Delivery) -> DeliveryOutcome {
        DeliveryOutcome(ticket: d.ticket, result: .accepted, attempts: d.sends)
    }

    static func failed(_ d: Delivery, _ reason: DeliveryErrorReason, status: GatewayStatus?, _ detail: String) -> DeliveryOutcome {
        DeliveryOutcome(ticket: d.ticket, result: .failed(reason, status: status, detail: detail), attempts: d.sends)
    }
}
