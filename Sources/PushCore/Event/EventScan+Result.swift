// What an event's scan makes of what it read: the event, its staged form, or the rejection.

extension EventScan {
    func rejection(_ error: EventError, token: DeviceToken? = nil) -> EventRejection {
        EventRejection(
            error: error, eventID: idToken.map { reader.string($0) }, app: app, environment: environmentToken.map { reader.string($0) }, token: token,
            rawToken: tokenString.map { reader.string($0) })
    }

    func finish(payloadLimit: Int, carriesPriority: Bool, http2: Bool) -> Result<NotificationEvent, EventRejection> {
        if let fieldProblem { return .failure(rejection(.malformedEvent(fieldProblem.text))) }
        let token: DeviceToken
        do {
            token = try parseToken()
        } catch {
            return .failure(rejection(.invalidTokenFormat(error.description)))
        }
        if let problem = problem(carriesPriority: carriesPriority, http2: http2) {
            return .failure(rejection(problem, token: token))
        }
        let payloadLimit = limit(payloadLimit, http2: http2)
        var payload = compactPayload()
        var truncated = false
        if payload.count > payloadLimit {
            switch shortened(payload.count, limit: payloadLimit) {
            case .success(let shortened): payload = shortened
            case .failure(let error): return .failure(rejection(error, token: token))
            }
            truncated = true
        }
        return .success(NotificationEvent(
            id: reader.string(idToken!), app: app!, environment: environment, token: token, payload: payload, expiration: expiration,
            priority: resolvedPriority(http2: http2), alertTruncated: truncated, pushType: pushType, collapseID: collapseID,
            apnsID: apnsID, contentAvailableOnly: contentAvailableOnly, tokenRegisteredAt: tokenRegisteredAt))
    }

    /// ``finish(payloadLimit:carriesPriority:http2:)`` with the token's and the payload's bytes appended to `staging`
    /// (left as it was on a rejection).
    func finish(
        payloadLimit: Int, carriesPriority: Bool, http2: Bool, staging: inout [UInt8]
    ) -> Result<StagedNotification, EventRejection> {
        if let fieldProblem { return .failure(rejection(.malformedEvent(fieldProblem.text))) }
        let start = staging.count
        do {
            try appendToken(to: &staging)
        } catch {
            return .failure(rejection(.invalidTokenFormat(error.description)))
        }
        let tokenEnd = staging.count
        func refuse(_ error: EventError, _ staging: inout [UInt8]) -> Result<StagedNotification, EventRejection> {
            let token = try! DeviceToken(bytes: Array(staging[start..<tokenEnd]))  // it parsed
            staging.removeSubrange(start...)
            return .failure(rejection(error, token: token))
        }
        if let problem = problem(carriesPriority: carriesPriority, http2: http2) { return refuse(problem, &staging) }
        let payloadLimit = limit(payloadLimit, http2: http2)
        if payloadHasWhitespace {
            JSONCompaction.append(reader.bytes, from: payloadStart, to: payloadEnd, into: &staging)
        } else {
            // As typed bytes: a slice of raw bytes is appended through a generic iterator.
            staging.append(contentsOf: UnsafeRawBufferPointer(rebasing: reader.bytes[payloadStart..<payloadEnd])
                .assumingMemoryBound(to: UInt8.self))
        }
        if staging.count - tokenEnd > payloadLimit {
            switch shortened(staging.count - tokenEnd, limit: payloadLimit) {
            case .success(let shortened):
                staging.removeSubrange(tokenEnd...)
                staging.append(contentsOf: shortened)
            case .failure(let error): return refuse(error, &staging)
            }
        }
        var staged = StagedNotification(
            eventID: eventID(idToken!), app: app!, environment: environment, token: start..<tokenEnd, payload: tokenEnd..<staging.count,
            expiration: expiration, priority: resolvedPriority(http2: http2), tokenRegisteredAt: tokenRegisteredAt)
        staged.knownApp = knownApp
        return .success(staged)
    }

    /// The id as a staged notification keeps it: packed straight from the event's bytes when it has no escapes.
    private func eventID(_ token: JSONString) -> EventID {
        token.hasEscapes
            ? EventID(reader.string(token))
            : EventID(validUTF8: UnsafeRawBufferPointer(rebasing: reader.bytes[token.start..<token.end]))
    }

    /// Whether the payload's `aps` holds only `content-available` (a background notification).
    private var contentAvailableOnly: Bool { apsKeyCount == 1 && apsHasContentAvailable }

    /// Whether it is a background notification: its push type says so, or it names none and is content-available only.
    private var isBackground: Bool { pushType == .background || (pushType == nil && contentAvailableOnly) }

    /// The priority sent: the event's, else 5 for a background notification, else 10.
    private func resolvedPriority(http2: Bool) -> Priority {
        priority ?? (contentAvailableOnly || (http2 && isBackground) ? .conservePower : .immediate)
    }

    /// The payload limit: the format's, or on HTTP/2 the push type's.
    private func limit(_ formatLimit: Int, http2: Bool) -> Int {
        http2 ? (pushType ?? .alert).maxPayloadSize : formatLimit
    }

    /// The first problem of the payload and the priority, once the fields and the token passed.
    private func problem(carriesPriority: Bool, http2: Bool) -> EventError? {
        if let payloadProblem { return .invalidPayload(payloadProblem) }
        if http2, pushType == .liveactivity, let problem = liveActivityProblem { return .invalidPayload(problem) }
        if let priorityProblem { return .invalidPriority(priorityProblem) }
        if http2, pushType == .liveactivity, priority == .lowest {
            return .invalidPriority("push type liveactivity takes priority 5 or 10, not 1")
        }
        if priority == .lowest && !http2 {
            return .invalidPriority("priority 1 is only for apps on the http2 transport")
        }
        if http2 && isBackground && priority == .immediate {
            return .invalidPriority("priority 10 is not allowed with push type background")
        }
        if contentAvailableOnly && priority == .immediate {
            return .invalidPriority("priority 10 is not allowed when 'aps' holds only 'content-available'")
        }
        if contentAvailableOnly && !carriesPriority {
            return .invalidPriority(
                "the app's legacy format carries no priority and the gateway takes it as 10, which is not allowed when 'aps' holds only 'content-available'")
        }
        return nil
    }

    /// A payload of `count` bytes (compacted) over `limit`: shortened by truncating the alert text when the event
    /// asks for it and that is enough, else why not.
    private func shortened(_ count: Int, limit: Int) -> Result<[UInt8], EventError> {
        guard truncateAlert, let alertText,
            let shortened = PayloadTruncation.truncate(
                reader: reader, payloadStart: payloadStart, payloadEnd: payloadEnd, alert: alertText, limit: limit)
        else {
            let hint = truncateAlert ? " and no alert text can be shortened enough" : ""
            return .failure(.payloadTooLarge("payload is \(count) bytes, more than \(limit)\(hint)"))
        }
        return .success(shortened)
    }

    private func appendToken(to staging: inout [UInt8]) throws(DeviceTokenError) {
        let t = tokenString!
        if t.hasEscapes {
            staging.append(contentsOf: try DeviceToken(hex: reader.string(t)).bytes)
        } else {
            try DeviceToken.appendHex(UnsafeRawBufferPointer(rebasing: reader.bytes[t.start..<t.end]), to: &staging)
        }
    }

    private func parseToken() throws(DeviceTokenError) -> DeviceToken {
        let t = tokenString!
        if t.hasEscapes { return try DeviceToken(hex: reader.string(t)) }
        return try DeviceToken(hexUTF8: UnsafeRawBufferPointer(rebasing: reader.bytes[t.start..<t.end]))
    }

    private func compactPayload() -> [UInt8] {
        if !payloadHasWhitespace {
            return Array(reader.bytes[payloadStart..<payloadEnd])
        }
        var out: [UInt8] = []
        out.reserveCapacity(payloadEnd - payloadStart)
        JSONCompaction.append(reader.bytes, from: payloadStart, to: payloadEnd, into: &out)
        return out
    }

    static func format(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}
