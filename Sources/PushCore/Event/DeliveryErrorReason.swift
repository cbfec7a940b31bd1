/// The `reason` of a delivery-error event (SPEC section 3). The raw values are the strings on the topic.
public enum DeliveryErrorReason: String, CaseIterable, Hashable, Sendable, Codable {
    case malformedEvent = "malformed_event"
    case invalidTokenFormat = "invalid_token_format"
    case invalidPayload = "invalid_payload"
    case payloadTooLarge = "payload_too_large"
    case invalidPriority = "invalid_priority"
    case unknownApp = "unknown_app"
    case expired = "expired"
    case processingError = "processing_error"
    case missingDeviceToken = "missing_device_token"
    case missingTopic = "missing_topic"
    case missingPayload = "missing_payload"
    case invalidTokenSize = "invalid_token_size"
    case invalidTopicSize = "invalid_topic_size"
    case invalidPayloadSize = "invalid_payload_size"
    case invalidToken = "invalid_token"
    case protocolError = "protocol_error"
    case unknown = "unknown"
    case retriesExhausted = "retries_exhausted"
    /// HTTP/2: 410, the token is no longer active for the topic.
    case unregistered = "unregistered"
    /// HTTP/2: a final 4xx answer other than the token's or the payload size's.
    case rejected = "rejected"
    /// The token was reported gone and has not been registered again since (SPEC section 10): not sent.
    case tokenSuppressed = "token_suppressed"

    /// The gateway status this reason stands for, when it is one of the gateway's.
    public var gatewayStatus: GatewayStatus? {
        switch self {
        case .processingError: .processingError
        case .missingDeviceToken: .missingDeviceToken
        case .missingTopic: .missingTopic
        case .missingPayload: .missingPayload
        case .invalidTokenSize: .invalidTokenSize
        case .invalidTopicSize: .invalidTopicSize
        case .invalidPayloadSize: .invalidPayloadSize
        case .invalidToken: .invalidToken
        case .protocolError: .protocolError
        case .unknown: .unknown
        default: nil
        }
    }
}
