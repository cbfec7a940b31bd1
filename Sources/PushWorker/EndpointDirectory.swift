import PushCore
import PushGateway

/// Which endpoint an event goes to: its environment's if it names one, else production's if configured, else the
/// app's only (or first) environment's. Built once from the endpoints: per app, the index of each environment's
/// endpoint; an event whose app the decoder knew finds it by that app's position, any other by its name.
struct EndpointDirectory: Sendable {
    private struct Choices {
        var production: Int?
        var sandbox: Int?
        let first: Int
    }

    /// Each app's place in `choices`.
    private var slots: [String: Int] = [:]
    private var choices: [Choices] = []
    /// Per name of the decoders' known apps (by its position there), the endpoints it goes to with no
    /// environment, production and sandbox named, three in a row, -1 for none: one load for an event.
    private var endpointsOfKnown: [Int32] = []

    /// - Parameter knownApps: the names the decoders know, so that an event's ``StagedNotification/knownApp`` finds
    ///   its endpoint without a comparison of names.
    init(_ endpoints: [AppEndpoint], knownApps: KnownNames = KnownNames()) {
        for (index, endpoint) in endpoints.enumerated() {
            let slot: Int
            if let known = slots[endpoint.app] {
                slot = known
            } else {
                slot = choices.count
                slots[endpoint.app] = slot
                choices.append(Choices(first: index))
            }
            switch endpoint.environment {
            case .production: choices[slot].production = choices[slot].production ?? index
            case .sandbox: choices[slot].sandbox = choices[slot].sandbox ?? index
            }
        }
        for name in knownApps.all {
            for environment in [nil, APNsEnvironment.production, .sandbox] {
                endpointsOfKnown.append(Int32(index(app: name, environment: environment) ?? -1))
            }
        }
    }

    /// The index of the endpoint in the configuration, or nil when the app (or its named environment) has none.
    func index(app: String, environment: APNsEnvironment?) -> Int? {
        slots[app].flatMap { index(slot: $0, environment: environment) }
    }

    /// As ``index(app:environment:)`` for the app at this position among the known apps it was built with.
    func index(knownApp: Int, environment: APNsEnvironment?) -> Int? {
        let column = switch environment {
        case nil: 0
        case .production?: 1
        case .sandbox?: 2
        }
        let endpoint = endpointsOfKnown[3 * knownApp + column]
        return endpoint < 0 ? nil : Int(endpoint)
    }

    private func index(slot: Int, environment: APNsEnvironment?) -> Int? {
        let app = choices[slot]
        switch environment {
        case .production?: return app.production
        case .sandbox?: return app.sandbox
        case nil: return app.production ?? app.first
        }
    }
}
