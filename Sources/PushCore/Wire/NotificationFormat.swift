/// The three notification formats of the binary interface.
public enum NotificationFormat: String, CaseIterable, Hashable, Sendable {
    /// Command 2: a frame of items (token, payload, identifier, expiration, priority). Payloads up to 2048 bytes.
    case frame
    /// Command 1, legacy: identifier and expiry, no priority (10 is assumed). Payloads up to 256 bytes.
    case enhanced
    /// Command 0, legacy: token and payload only; errors close the connection without naming a notification.
    case simple

    /// The command byte that starts a notification in this format.
    public var command: UInt8 {
        switch self {
        case .frame: 2
        case .enhanced: 1
        case .simple: 0
        }
    }

    public init?(command: UInt8) {
        switch command {
        case 2: self = .frame
        case 1: self = .enhanced
        case 0: self = .simple
        default: return nil
        }
    }

    /// The largest payload, in bytes, the gateway accepts in this format.
    public var maxPayloadSize: Int {
        switch self {
        case .frame: 2048
        case .enhanced, .simple: 256
        }
    }

    /// The largest device token, in bytes. The frame format allows up to 100 bytes; the legacy formats carry a
    /// 2-byte length as well, and the gateway applies the same limit.
    public static let maxTokenSize = 100
}
