import NIOCore
import PushCore

/// The caller's reference to a delivery, echoed in its outcome: a word the engine never reads (the worker keeps
/// its ledger ticket in it).
public struct DeliveryTicket: Hashable, Sendable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    public var value: UInt64

    public init(_ value: UInt64) { self.value = value }
    public init(integerLiteral value: UInt64) { self.init(value) }

    public var description: String { "\(value)" }
}

/// One notification on its way to the gateway: its encoded frame (its identifier is written in at each send) and a
/// few words. This is all the engine holds per notification, so `max_in_flight` of them stay small.
public struct Delivery: Sendable {
    /// The caller's reference, echoed in the outcome.
    public var ticket: DeliveryTicket
    /// The notification in the pool's format, identifier 0, with its size, identifier offset and expiration.
    private let frame: FrameReference
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

    /// A delivery with a frame block of its own (a batch's deliveries share one: ``FrameBlockWriter``).
    public init(ticket: DeliveryTicket, notification: PushNotification, format: NotificationFormat) {
        var writer = FrameBlockWriter(capacity: FrameBlock.room(for: notification, format: format))
        self = writer.delivery(ticket: ticket, notification, format: format)
    }

    fileprivate init(ticket: DeliveryTicket, frame: FrameReference) {
        self.ticket = ticket
        self.frame = frame
    }

    /// UNIX seconds; 0 never expires.
    public var expiration: UInt32 { frame.expiration }

    /// The frame's size in bytes.
    var frameSize: Int { frame.layout.count }

    /// Its device token, read from the frame when asked for.
    public var tokenSource: DeliveryTokenSource { DeliveryTokenSource(frame: frame) }

    /// Copies the frame to `destination`, which has room for ``frameSize`` bytes, with `identifier` in place;
    /// returns its size. A connection copies its batch's frames into one buffer this way, with one access to the
    /// buffer's storage for the batch.
    func write(identifier: UInt32, to destination: UnsafeMutableRawPointer) -> Int {
        let (count, identifierOffset) = frame.layout
        frame.withBytes { bytes in destination.copyMemory(from: bytes, byteCount: count) }
        if identifierOffset != 0 {
            destination.storeBytes(of: identifier.bigEndian, toByteOffset: identifierOffset, as: UInt32.self)
        }
        return count
    }
}

/// Frames in one allocation, one after the other, each as the encoder wrote it (identifier 0): its size, where
/// its identifier sits and its expiration are read back from its bytes (``FrameReference/layout``), so a held
/// notification in the frame or enhanced format costs its frame alone. The simple format carries no expiration, so
/// its frame is preceded by the notification's (4 bytes, host order). The pipeline encodes a poll's notifications
/// for one app into one block, not an object each (16 bytes of object header, 8 of malloc's and its rounding).
/// Each delivery keeps the block alive; it goes with the last of them. A batch's notifications for one app are
/// sent, accepted or failed together, so a block is seldom kept for one frame long after the rest.
///
/// Written only while its writer fills it, before any delivery of it is handed on; read only after.
final class FrameBlock: ManagedBuffer<Int, UInt8> {
    /// The bytes kept before a frame in `format`: the simple format's expiration.
    static func prefixSize(_ format: NotificationFormat) -> Int { format == .simple ? 4 : 0 }

    /// The bytes `notification` takes in a block in `format`.
    static func room(for notification: PushNotification, format: NotificationFormat) -> Int {
        room(tokenCount: notification.token.bytes.count, payloadCount: notification.payload.count, format: format)
    }

    /// The bytes a notification with a token and a payload of these sizes takes in a block in `format`.
    static func room(tokenCount: Int, payloadCount: Int, format: NotificationFormat) -> Int {
        prefixSize(format) + PushNotification.encodedSize(format, tokenCount: tokenCount, payloadCount: payloadCount)
    }
}

/// Fills one ``FrameBlock`` of a known size with frames and makes the deliveries that hold them.
public struct FrameBlockWriter {
    private let block: FrameBlock
    private var used = 0
    private let capacity: Int

    /// A block for frames of `capacity` bytes in all (the sum of ``room(for:format:)``).
    public init(capacity: Int) {
        self.capacity = capacity
        block = unsafeDowncast(FrameBlock.create(minimumCapacity: max(1, capacity)) { _ in 0 }, to: FrameBlock.self)
    }

    /// The largest block a batch's frames are given (a longer run of them takes several): below glibc's mmap
    /// threshold (128 KiB, fixed once the worker sets the allocator's top pad), so that a block is heap memory used
    /// again, not fresh pages mapped, zeroed and faulted in for every batch.
    public static let blockCapacity = 64 << 10

    /// The bytes a notification takes in a block.
    public static func room(for notification: PushNotification, format: NotificationFormat) -> Int {
        FrameBlock.room(for: notification, format: format)
    }

    /// The bytes a notification with a token and a payload of these sizes takes in a block.
    public static func room(tokenCount: Int, payloadCount: Int, format: NotificationFormat) -> Int {
        FrameBlock.room(tokenCount: tokenCount, payloadCount: payloadCount, format: format)
    }

    /// Whether `room` more bytes fit.
    public func fits(_ room: Int) -> Bool { used + room <= capacity }

    /// Encodes `notification` in `format`, its identifier 0 (written in at each send), into the block, and returns the
    /// delivery of it.
    public mutating func delivery(ticket: DeliveryTicket, _ notification: PushNotification, format: NotificationFormat) -> Delivery {
        notification.token.bytes.withUnsafeBytes { token in
            notification.payload.withUnsafeBytes { payload in
                delivery(
                    ticket: ticket, token: token, payload: payload, expiration: notification.expiration,
                    priority: notification.priority, format: format)
            }
        }
    }

    /// Encodes the notification with this token and payload (where they already are: the pipeline's staged bytes)
    /// in `format`, its identifier 0 (written in at each send), into the block, and returns the delivery of it.
    public mutating func delivery(
        ticket: DeliveryTicket, token: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, expiration: UInt32,
        priority: Priority, format: NotificationFormat
    ) -> Delivery {
        let size = PushNotification.encodedSize(format, tokenCount: token.count, payloadCount: payload.count)
        let prefix = FrameBlock.prefixSize(format)
        precondition(used + prefix + size <= capacity, "a frame block written past the room it was made with")
        let start = used + prefix
        block.withUnsafeMutablePointerToElements { base in
            let frame = UnsafeMutableRawPointer(base + start)
            if prefix != 0 { (frame - prefix).storeBytes(of: expiration, as: UInt32.self) }
            _ = NotificationEncoder.encode(
                token: token, payload: payload, identifier: 0, expiration: expiration, priority: priority, format: format,
                into: UnsafeMutableRawBufferPointer(start: frame, count: size))
        }
        used = start + size
        return Delivery(ticket: ticket, frame: FrameReference(block: block, offset: UInt32(start)))
    }
}

/// Where a delivery's frame is: its block and the offset of its first byte there. Shared between threads: the
/// block is written only while its writer fills it, before anyone else sees it (`ManagedBuffer` cannot say so
/// itself).
struct FrameReference: @unchecked Sendable {
    let block: FrameBlock
    let offset: UInt32

    /// Calls `body` with the frame's first byte.
    func withBytes<R>(_ body: (UnsafeRawPointer) -> R) -> R {
        block.withUnsafeMutablePointerToElements { base in body(UnsafeRawPointer(base + Int(offset))) }
    }

    /// The frame's size, and where its identifier sits (0 for the simple format, which has none: no identifier is at
    /// 0 in the other formats, whose first byte is the command), read from the lengths the encoder wrote.
    var layout: (count: Int, identifierOffset: Int) {
        withBytes { bytes in
            let command = bytes.load(as: UInt8.self)
            let tokenAt = Self.tokenLengthOffset(command)
            // The payload's length follows the token in every format (in the frame format, after its item id).
            let payloadAt = tokenAt + 2 + Self.u16(bytes, tokenAt) + (command >= 2 ? 1 : 0)
            let payloadEnd = payloadAt + 2 + Self.u16(bytes, payloadAt)
            return switch command {
            case 0, 1: (payloadEnd, Int(command))  // the enhanced format's identifier right after its command
            default: (5 + Int(Self.u32(bytes, 1)), payloadEnd + 3)  // the identifier item follows the payload
            }
        }
    }

    /// UNIX seconds; 0 never expires. From the frame, or for the simple format from the 4 bytes before it.
    var expiration: UInt32 {
        withBytes { bytes in
            switch bytes.load(as: UInt8.self) {
            case 0: (bytes - 4).loadUnaligned(as: UInt32.self)
            case 1: Self.u32(bytes, 5)
            default: Self.u32(bytes, layout.identifierOffset + 4 + 3)  // the identifier, then the expiration item's value
            }
        }
    }

    /// Where the token's 2-byte length sits in a frame of `command`'s format.
    private static func tokenLengthOffset(_ command: UInt8) -> Int {
        switch command {
        case 0: 1  // command, length
        case 1: 9  // command, identifier, expiration, length
        default: 6  // command, frame length, item id, item length
        }
    }

    private static func u16(_ bytes: UnsafeRawPointer, _ at: Int) -> Int {
        Int(UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt16.self)))
    }

    private static func u32(_ bytes: UnsafeRawPointer, _ at: Int) -> UInt32 {
        UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self))
    }

    /// The device token it carries.
    var token: DeviceToken {
        withBytes { bytes in
            let lengthOffset = Self.tokenLengthOffset(bytes.load(as: UInt8.self))
            // Written from a valid token when the frame was made.
            return try! DeviceToken(
                bytes: Array(UnsafeRawBufferPointer(start: bytes + lengthOffset + 2, count: Self.u16(bytes, lengthOffset))))
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
    /// HTTP/2, once sent: the request's `apns-id`; and Apple's `apns-unique-id` from the final response, when it sent
    /// one (the sandbox). Output events carry both (SPEC section 3).
    public var apnsID: APNsID?
    public var apnsUniqueID: String?

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
        case frame(FrameReference)
        case token(DeviceToken)
    }

    private let storage: Storage

    public init(_ token: DeviceToken) { storage = .token(token) }
    init(frame: FrameReference) { storage = .frame(frame) }

    public var token: DeviceToken {
        switch storage {
        case .frame(let frame): frame.token
        case .token(let token): token
        }
    }

    public static func == (a: Self, b: Self) -> Bool { a.token == b.token }
    public func hash(into hasher: inout Hasher) { hasher.combine(token) }
}
