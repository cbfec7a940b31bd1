import PushCore

/// How a connection to the simulated API authenticated.
enum APIAuthentication: Hashable, Sendable {
    /// A client certificate chaining to the CA; the app is its subject's UID.
    case certificate(app: String)
    /// No certificate: every request carries a provider token.
    case token
}

/// The provider-token history of one token connection: Apple refuses a new token within 20 minutes of the
/// previous one on the same connection (429 TooManyProviderTokenUpdates).
struct APITokenHistory: Sendable {
    /// The token in use on the connection, verified, and when it was issued.
    var current: String?
    var issuedAt: Int64 = 0
    var since: Int64 = 0
    /// Seconds a connection's token must be used before another may replace it: Apple's 20 minutes, a third of the
    /// token lifetime.
    static let appleMinimumInterval: Int64 = 20 * 60
}

/// A request the simulated API accepted: what its record line holds.
struct AcceptedRequest: Sendable {
    var token: [UInt8]
    var topic: String
    var pushType: String
    var priority: Int
    var expiration: UInt32
    var collapseID: String?
    var apnsID: String
    var body: [UInt8]
}

/// The answer to one request: `:status`, Apple's reason (none for 200) and, for 410, the timestamp.
struct APIAnswer: Sendable {
    var status: Int
    var reason: APNsReason?
    var timestampMilliseconds: Int64?
    var apnsID: String
    var accepted: AcceptedRequest?

    /// The JSON body Apple sends with an error: `{"reason": ...}`, with `timestamp` for 410.
    var body: [UInt8] {
        guard let reason else { return [] }
        var writer = JSONWriter(capacity: 64)
        writer.beginObject()
        writer.field("reason", reason.rawValue)
        if let timestampMilliseconds { writer.field("timestamp", timestampMilliseconds) }
        writer.endObject()
        return writer.bytes
    }

    /// How the exit summary counts it: `"200"`, `"400 BadDeviceToken"`.
    var summaryKey: String { reason.map { "\(status) \($0.rawValue)" } ?? String(status) }
}

/// Judges one request as Apple's API does (pure: the caller supplies the clock, the token answers and the
/// connection's token history). Checks, in order: method, path and token, duplicate headers, provider token,
/// topic, push type, priority, expiration, apns-id, collapse id, body; then the per-token answers.
struct APIRequestCheck: Sendable {
    var verifier: ProviderTokenVerifier?
    var invalidTokens: Set<[UInt8]>
    /// Token → the 410 timestamp (milliseconds).
    var unregistered: [[UInt8]: Int64]
    /// A connection's token may be replaced only after this many seconds (429 TooManyProviderTokenUpdates before).
    var minimumRenewalInterval: Int64 = APITokenHistory.appleMinimumInterval

    /// The headers the API reads, each at most once.
    private struct Fields {
        var topic, pushType, priority, expiration, id, collapseID, authorization: String?
        var duplicate = false

        mutating func set(_ field: WritableKeyPath<Fields, String?>, _ value: String) {
            if self[keyPath: field] != nil { duplicate = true }
            self[keyPath: field] = value
        }
    }

    /// The header fields the API reads.
    private enum Field {
        case method, path, topic, pushType, priority, expiration, id, collapseID, authorization

        /// Told by the name's length and one comparison (a `switch` over the names compared a name with every case).
        init?(name: String) {
            let field: Field?
            switch name.utf8.count {
            case 5: field = .path
            case 7: field = name.utf8.first == UInt8(ascii: ":") ? .method : .id
            case 10: field = .topic
            case 13: field = name.utf8.first == UInt8(ascii: "a") && name.utf8.last == UInt8(ascii: "n") ? .authorization : .priority
            case 14: field = .pushType
            case 15: field = .expiration
            case 16: field = .collapseID
            default: field = nil
            }
            guard let field, name == field.name else { return nil }
            self = field
        }

        var name: String {
            switch self {
            case .method: ":method"
            case .path: ":path"
            case .topic: "apns-topic"
            case .pushType: "apns-push-type"
            case .priority: "apns-priority"
            case .expiration: "apns-expiration"
            case .id: "apns-id"
            case .collapseID: "apns-collapse-id"
            case .authorization: "authorization"
            }
        }
    }

    private static let devicePath = Array("/3/device/".utf8)
    private static let bearer = Array("bearer ".utf8)

    /// The path's device token: hex digits only (either case), an even number of them, at most 100 bytes.
    private static func token(hex: Substring) -> DeviceToken? {
        hex.withBorrowedUTF8 { text -> DeviceToken? in
            guard text.count % 2 == 0 else { return nil }
            let bytes = [UInt8](unsafeUninitializedCapacity: text.count / 2) { out, count in
                var index = 0
                while index < text.count {
                    guard let high = DeviceToken.nibble(text[index]), let low = DeviceToken.nibble(text[index + 1]) else { return }
                    out[count] = high << 4 | low
                    count += 1
                    index += 2
                }
            }
            guard bytes.count * 2 == text.count else { return nil }
            return try? DeviceToken(bytes: bytes)
        }
    }

    func answer(
        headers: some Sequence<(name: String, value: String)>, body: [UInt8], authentication: APIAuthentication,
        tokenHistory: inout APITokenHistory, now: Int64, newID: () -> String
    ) -> APIAnswer {
        var single = Fields()
        var method: String?
        var path: String?
        for (name, value) in headers {
            switch Field(name: name) {
            case .method: method = value
            case .path: path = value
            case .topic: single.set(\.topic, value)
            case .pushType: single.set(\.pushType, value)
            case .priority: single.set(\.priority, value)
            case .expiration: single.set(\.expiration, value)
            case .id: single.set(\.id, value)
            case .collapseID: single.set(\.collapseID, value)
            case .authorization: single.set(\.authorization, value)
            case nil: continue
            }
        }
        let duplicate = single.duplicate
        let requestID = single.id
        // Every answer carries apns-id: the request's when it is a UUID, else a new one.
        let requestIDIsUUID = requestID.map { APNsID($0) != nil }
        let answerID = requestIDIsUUID == true ? requestID! : newID()
        func fail(_ reason: APNsReason, timestamp: Int64? = nil) -> APIAnswer {
            APIAnswer(status: reason.status, reason: reason, timestampMilliseconds: timestamp, apnsID: answerID)
        }

        guard method == "POST" else { return fail(.methodNotAllowed) }
        guard let path, path.utf8.starts(with: Self.devicePath) else { return fail(.badPath) }
        let hex = Substring(path.utf8.dropFirst(Self.devicePath.count))
        guard !hex.isEmpty else { return fail(.missingDeviceToken) }
        guard let token = Self.token(hex: hex) else { return fail(.badDeviceToken) }
        if duplicate { return fail(.duplicateHeaders) }

        if authentication == .token {
            guard let verifier else { return fail(.missingProviderToken) }
            guard let authorization = single.authorization else { return fail(.missingProviderToken) }
            guard authorization.utf8.starts(with: Self.bearer) else { return fail(.invalidProviderToken) }
            let jwt = Substring(authorization.utf8.dropFirst(Self.bearer.count))
            if tokenHistory.current.map({ $0 == jwt }) == true {
                // The connection's token, verified already: only its age can change.
                if now - tokenHistory.issuedAt > verifier.maximumAge { return fail(.expiredProviderToken) }
            } else {
                // The renewal rate first: a client that switches tokens on every request costs a comparison, not
                // a signature check, each time.
                if tokenHistory.current != nil, now - tokenHistory.since < minimumRenewalInterval {
                    return fail(.tooManyProviderTokenUpdates)
                }
                let token = String(jwt)
                let issuedAt: Int64
                switch verifier.verify(token, now: now) {
                case .failure(let refusal): return fail(refusal)
                case .success(let time): issuedAt = time
                }
                tokenHistory.current = token
                tokenHistory.issuedAt = issuedAt
                tokenHistory.since = now
            }
        }

        let topic: String
        switch (single.topic, authentication) {
        case (nil, .token): return fail(.missingTopic)
        case (nil, .certificate(let app)): topic = app
        case (let given?, _): topic = given
        }

        let pushType: PushType
        if let text = single.pushType {
            guard let parsed = PushType(rawValue: text) else { return fail(.invalidPushType) }
            pushType = parsed
        } else {
            pushType = .alert
        }

        let priority: Int
        if let text = single.priority {
            guard let value = Int(text), [1, 5, 10].contains(value) else { return fail(.badPriority) }
            priority = value
        } else {
            priority = 10
        }
        if priority == 10 && pushType == .background { return fail(.badPriority) }

        var expiration: UInt32 = 0
        if let text = single.expiration {
            guard let value = UInt32(text), text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                return fail(.badExpirationDate)
            }
            expiration = value
        }
        if requestIDIsUUID == false { return fail(.badMessageId) }
        if let collapse = single.collapseID, collapse.utf8.count > 64 { return fail(.badCollapseId) }

        if pushType != .mdm {
            let suffix = pushType.topicSuffix
            if !suffix.isEmpty && !topic.hasSuffix(suffix) { return fail(.badTopic) }
            if case .certificate(let app) = authentication, topic != app + suffix { return fail(.topicDisallowed) }
        }

        guard !body.isEmpty else { return fail(.payloadEmpty) }
        if body.count > pushType.maxPayloadSize { return fail(.payloadTooLarge) }

        if !invalidTokens.isEmpty, invalidTokens.contains(token.bytes) { return fail(.badDeviceToken) }
        if !unregistered.isEmpty, let timestamp = unregistered[token.bytes] { return fail(.unregistered, timestamp: timestamp) }

        return APIAnswer(
            status: 200, reason: nil, apnsID: answerID,
            accepted: AcceptedRequest(
                token: token.bytes, topic: topic, pushType: pushType.rawValue, priority: priority,
                expiration: expiration, collapseID: single.collapseID, apnsID: answerID, body: body))
    }
}
