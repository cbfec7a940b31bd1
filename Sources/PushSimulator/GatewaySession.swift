import PushCore

/// What the gateway does with one notification on one connection. Pure: no I/O, no clock, no shared state.
///
/// The order of checks: the decoder's structural verdict, then the payload (a JSON object holding an `aps` object,
/// and no priority 10 with `content-available` only: status 128, as the seeds name no status for these), then the
/// invalid-token list (8), then the processing-error draw (1). An accepted notification may then trigger the
/// `shutdownEvery` (status 10 naming it) or `closeEvery` (abrupt close) faults.
struct GatewaySession {
    enum Action: Equatable {
        /// Record it; the connection stays open.
        case accept
        /// Record it, answer status 10 naming it, and close.
        case acceptThenShutdown
        /// Record it and close at once, without an error response.
        case acceptThenDrop
        /// Answer with this error response and close; the notification is not recorded.
        case reject(ErrorResponse, reason: String)
    }

    let shutdownEvery: Int?
    let closeEvery: Int?
    let invalidTokens: Set<[UInt8]>
    let processingErrorRate: Double
    private(set) var random: SplitMix64
    private(set) var accepted = 0

    init(configuration: SimulatorConfiguration, connection: Int) {
        shutdownEvery = configuration.shutdownEvery
        closeEvery = configuration.closeEvery
        invalidTokens = configuration.invalidTokens
        processingErrorRate = configuration.processingErrorRate
        random = SplitMix64(seed: configuration.seed ^ (UInt64(connection) &* 0x9E37_79B9_7F4A_7C15))
    }

    mutating func receive(_ result: NotificationDecodingResult) -> Action {
        let notification: DecodedNotification
        switch result {
        case .rejected(let response, let detail, _): return .reject(response, reason: detail)
        case .notification(let n): notification = n
        }
        let inspection = PayloadInspection(notification.payload)
        if let problem = inspection.problem {
            return .reject(ErrorResponse(status: .protocolError, identifier: notification.identifier), reason: problem)
        }
        if inspection.contentAvailableOnly && notification.priority == 10 {
            return .reject(
                ErrorResponse(status: .protocolError, identifier: notification.identifier),
                reason: "priority 10 with content-available only")
        }
        if !invalidTokens.isEmpty && invalidTokens.contains(notification.token) {
            return .reject(ErrorResponse(status: .invalidToken, identifier: notification.identifier), reason: "invalid token")
        }
        if processingErrorRate > 0 && random.nextUnitInterval() < processingErrorRate {
            return .reject(
                ErrorResponse(status: .processingError, identifier: notification.identifier), reason: "injected processing error")
        }
        accepted += 1
        if let n = shutdownEvery, accepted % n == 0 { return .acceptThenShutdown }
        if let n = closeEvery, accepted % n == 0 { return .acceptThenDrop }
        return .accept
    }
}
