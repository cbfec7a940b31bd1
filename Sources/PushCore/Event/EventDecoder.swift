import NIOCore

/// Decodes and validates notification events (SPEC section 2) from the raw bytes of a Kafka message.
///
/// One pass over the bytes validates the JSON and every field; the payload's bytes are then copied without their
/// insignificant whitespace. When an event has several problems, the reason reported is the first of: malformed
/// event (fields in the order of the SPEC table), invalid token format, invalid payload, invalid priority,
/// payload too large.
///
/// The HTTP/2 fields (`push_type`, `collapse_id`, `apns_id`) are validated for every event; a decoder for an http2
/// app (``EventDecoder/http2``) also allows priority 1, takes the payload limit from the push type (4096 bytes,
/// 5120 for voip) and checks `aps` against Apple's current key reference (Live Activity rules included) instead of
/// SPEC section 2's list.
public struct EventDecoder: Sendable {
    /// The largest payload allowed, in bytes (2048 for the frame format, 256 for the legacy formats; for HTTP/2 the
    /// limit of the event's push type).
    public var payloadLimit: Int
    /// Whether the payload limit and priorities are HTTP/2's.
    public var usesHTTP2Rules = false
    /// Whether the format carries a priority. The enhanced and simple formats carry none and the gateway takes
    /// them as priority 10 (seeds), which is not allowed for a notification whose `aps` holds only
    /// `content-available`: such an event is `invalid_priority` there, whatever priority it names.
    public var carriesPriority: Bool
    /// Apps whose names are given back as these strings (``KnownNames``); any other name is decoded as written.
    public var knownApps = KnownNames()

    public init(format: NotificationFormat = .frame) {
        self.payloadLimit = format.maxPayloadSize
        self.carriesPriority = format == .frame
    }

    public init(payloadLimit: Int) {
        self.payloadLimit = payloadLimit
        self.carriesPriority = true
    }

    /// A decoder for an HTTP/2 app: priorities 1, 5 and 10, the push type's payload limit.
    public static let http2: EventDecoder = {
        var decoder = EventDecoder(payloadLimit: PushType.largestPayloadSize)
        decoder.usesHTTP2Rules = true
        return decoder
    }()

    public func decode(_ bytes: [UInt8]) -> Result<NotificationEvent, EventRejection> {
        bytes.withUnsafeBytes { decode($0) }
    }

    public func decode(_ buffer: ByteBuffer) -> Result<NotificationEvent, EventRejection> {
        buffer.withUnsafeReadableBytes { decode($0) }
    }

    public func decode(_ text: String) -> Result<NotificationEvent, EventRejection> {
        text.withBorrowedUTF8 { decode($0) }
    }

    public func decode(_ bytes: UnsafeRawBufferPointer) -> Result<NotificationEvent, EventRejection> {
        var scan = EventScan(reader: JSONReader(bytes))
        scan.http2Rules = usesHTTP2Rules
        do {
            try scan.readEvent(knownApps: knownApps)
        } catch {
            return .failure(scan.rejection(.malformedEvent(error.description)))
        }
        return scan.finish(payloadLimit: payloadLimit, carriesPriority: carriesPriority, http2: usesHTTP2Rules)
    }

    /// Decodes and validates as ``decode(_:)-(UnsafeRawBufferPointer)`` does, with the same verdicts, but appends the
    /// token's bytes and then the payload's to `staging` instead of giving them arrays of their own (on a rejection
    /// `staging` is left as it was). The worker stages a poll's notifications in one buffer and encodes their frames
    /// from there.
    public func decode(_ bytes: UnsafeRawBufferPointer, staging: inout [UInt8]) -> Result<StagedNotification, EventRejection> {
        var scan = EventScan(reader: JSONReader(bytes))
        scan.http2Rules = usesHTTP2Rules
        do {
            try scan.readEvent(knownApps: knownApps)
        } catch {
            return .failure(scan.rejection(.malformedEvent(error.description)))
        }
        return scan.finish(payloadLimit: payloadLimit, carriesPriority: carriesPriority, http2: usesHTTP2Rules, staging: &staging)
    }
}

/// A notification event that passed validation, its token and payload bytes in a caller's buffer
/// (``EventDecoder/decode(_:staging:)``): what the binary transport sends and its output events name, without arrays
/// of its own. The HTTP/2 fields (push type, collapse id, apns-id) are validated but not kept: an app on the HTTP/2
/// API is decoded into a ``NotificationEvent``.
public struct StagedNotification: Sendable {
    /// Its id, packed when it fits (a UUID makes no string).
    public var eventID: EventID
    public var id: String { eventID.string }
    public var app: String
    public var environment: APNsEnvironment?
    /// ``knownApp`` plus one, 0 for none: kept in the padding after `environment`, so that it costs the value no
    /// size (a configuration has at most 65,534 endpoints, so as many apps).
    var knownAppPlusOne: UInt16 = 0
    /// Where the token's bytes are in the buffer.
    public var token: Range<Int>
    /// Where the payload's bytes are, right after the token's.
    public var payload: Range<Int>
    /// When it stops being worth delivering, and its priority: the frame's other items.
    public var expiration: Expiration
    public var priority: Priority
    /// The event's `token_registered_at` (SPEC section 10).
    public var tokenRegisteredAt: Int64?
    /// `app`'s position in the decoder's ``EventDecoder/knownApps`` (``KnownNames/all``), when its bytes spelled
    /// one of them: its endpoint is then found without comparing the name again.
    public var knownApp: Int? {
        get { knownAppPlusOne == 0 ? nil : Int(knownAppPlusOne) - 1 }
        set { knownAppPlusOne = newValue.flatMap { UInt16(exactly: $0 + 1) } ?? 0 }
    }

    /// The bytes it took in the buffer.
    public var staged: Range<Int> { token.lowerBound..<payload.upperBound }

    /// Its device token, copied out of `staging`.
    public func deviceToken(in staging: [UInt8]) -> DeviceToken {
        // Staged from a token that parsed.
        try! DeviceToken(bytes: Array(staging[token]))
    }

    /// The event with its token and payload copied out of `staging`, for an error event (without the HTTP/2 fields).
    public func event(in staging: [UInt8]) -> NotificationEvent {
        NotificationEvent(
            id: id, app: app, environment: environment, token: deviceToken(in: staging), payload: Array(staging[payload]),
            expiration: expiration, priority: priority, tokenRegisteredAt: tokenRegisteredAt)
    }
}
