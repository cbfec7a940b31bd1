/// A status code of the gateway's error-response packet (command 8), as listed in the binary provider API.
///
/// Codes that the table does not list are kept as ``unrecognized(_:)`` so that nothing read off the wire is lost.
public enum GatewayStatus: Hashable, Sendable, CustomStringConvertible {
    case noErrors
    case processingError
    case missingDeviceToken
    case missingTopic
    case missingPayload
    case invalidTokenSize
    case invalidTopicSize
    case invalidPayloadSize
    case invalidToken
    case shutdown
    case protocolError
    case unknown
    /// A code the table does not define.
    case unrecognized(UInt8)

    public init(code: UInt8) {
        switch code {
        case 0: self = .noErrors
        case 1: self = .processingError
        case 2: self = .missingDeviceToken
        case 3: self = .missingTopic
        case 4: self = .missingPayload
        case 5: self = .invalidTokenSize
        case 6: self = .invalidTopicSize
        case 7: self = .invalidPayloadSize
        case 8: self = .invalidToken
        case 10: self = .shutdown
        case 128: self = .protocolError
        case 255: self = .unknown
        default: self = .unrecognized(code)
        }
    }

    /// The byte on the wire.
    public var code: UInt8 {
        switch self {
        case .noErrors: 0
        case .processingError: 1
        case .missingDeviceToken: 2
        case .missingTopic: 3
        case .missingPayload: 4
        case .invalidTokenSize: 5
        case .invalidTopicSize: 6
        case .invalidPayloadSize: 7
        case .invalidToken: 8
        case .shutdown: 10
        case .protocolError: 128
        case .unknown: 255
        case .unrecognized(let code): code
        }
    }

    /// The `reason` a delivery-error event carries for a notification the gateway rejected with this status.
    /// `shutdown` and `noErrors` reject nothing, so they have none; an unrecognized code counts as `unknown`.
    public var deliveryErrorReason: DeliveryErrorReason? {
        switch self {
        case .noErrors, .shutdown: nil
        case .processingError: .processingError
        case .missingDeviceToken: .missingDeviceToken
        case .missingTopic: .missingTopic
        case .missingPayload: .missingPayload
        case .invalidTokenSize: .invalidTokenSize
        case .invalidTopicSize: .invalidTopicSize
        case .invalidPayloadSize: .invalidPayloadSize
        case .invalidToken: .invalidToken
        case .protocolError: .protocolError
        case .unknown, .unrecognized: .unknown
        }
    }

    /// Whether a notification rejected with this status may succeed when sent again (SPEC section 4: 1 and 255).
    public var isTransient: Bool {
        switch self {
        case .processingError, .unknown, .unrecognized: true
        default: false
        }
    }

    public var description: String {
        switch self {
        case .noErrors: "no_errors(0)"
        case .shutdown: "shutdown(10)"
        default: "\(deliveryErrorReason!.rawValue)(\(code))"
        }
    }
}
