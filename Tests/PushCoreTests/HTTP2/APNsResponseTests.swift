import Testing
@testable import PushCore

@Suite struct APNsResponseTests {
    @Test func readsReasonAndTimestamp() {
        let r = APNsResponse(status: 410, body: Array(#"{"reason":"Unregistered","timestamp":1795000000123}"#.utf8))
        #expect(r.reason == "Unregistered")
        #expect(r.knownReason == .unregistered)
        #expect(r.timestampMilliseconds == 1_795_000_000_123)
        #expect(r.outcome == .unregistered)
    }

    @Test(arguments: ["", "not json", "[1]", #"{"reason":5}"#, #"{"timestamp":"x","reason":"Whatever"}"#, #"{"reason":"#])
    func oddBodiesLeaveTheStatusToDecide(body: String) {
        let r = APNsResponse(status: 400, body: Array(body.utf8))
        #expect(r.timestampMilliseconds == nil)
        #expect(r.outcome == .rejected)
    }

    @Test func aNegativeOrHugeTimestampIsIgnored() {
        #expect(APNsResponse(status: 410, body: Array(#"{"timestamp":-5}"#.utf8)).timestampMilliseconds == nil)
        #expect(APNsResponse(status: 410, body: Array(#"{"timestamp":1e300}"#.utf8)).timestampMilliseconds == nil)
    }

    /// SPEC section 9's table, reason by reason: every reason Apple documents, with the status it comes with.
    @Test(arguments: APNsReason.allCases)
    func everyReasonHasItsOutcome(reason: APNsReason) {
        let outcome = APNsResponse(status: reason.status, reason: reason.rawValue).outcome
        let expected: APNsOutcome
        switch reason {
        case .badDeviceToken, .deviceTokenNotForTopic: expected = .invalidToken
        case .unregistered, .expiredToken: expected = .unregistered
        case .payloadTooLarge: expected = .payloadTooLarge
        case .expiredProviderToken: expected = .renewProviderToken
        case .badCertificate, .badCertificateEnvironment, .forbidden, .invalidProviderToken, .missingProviderToken,
            .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken:
            expected = .credentialsRefused
        case .tooManyRequests, .tooManyProviderTokenUpdates: expected = .tooManyRequests
        case .internalServerError, .serviceUnavailable: expected = .serverError(retireConnection: false)
        case .shutdown: expected = .serverError(retireConnection: true)
        case .badCollapseId, .badExpirationDate, .badMessageId, .badPriority, .badTopic, .duplicateHeaders,
            .idleTimeout, .invalidPushType, .missingDeviceToken, .missingTopic, .payloadEmpty, .topicDisallowed,
            .badPath, .methodNotAllowed:
            expected = .rejected
        }
        #expect(outcome == expected, "\(reason.rawValue)")
    }

    @Test func statusesWithoutAReason() {
        #expect(APNsResponse(status: 200).outcome == .accepted)
        #expect(APNsResponse(status: 400).outcome == .rejected)
        #expect(APNsResponse(status: 403).outcome == .credentialsRefused)
        #expect(APNsResponse(status: 404).outcome == .rejected)
        #expect(APNsResponse(status: 410).outcome == .unregistered)
        #expect(APNsResponse(status: 413).outcome == .payloadTooLarge)
        #expect(APNsResponse(status: 429).outcome == .tooManyRequests)
        #expect(APNsResponse(status: 502).outcome == .serverError(retireConnection: false))
        #expect(APNsResponse(status: 418).outcome == .rejected)
    }

    @Test func finalOutcomesAndTheirReasons() {
        #expect(APNsOutcome.accepted.isFinal && APNsOutcome.accepted.deliveryErrorReason == nil)
        #expect(APNsOutcome.invalidToken.deliveryErrorReason == .invalidToken)
        #expect(APNsOutcome.unregistered.deliveryErrorReason == .unregistered)
        #expect(APNsOutcome.rejected.deliveryErrorReason == .rejected)
        #expect(APNsOutcome.payloadTooLarge.deliveryErrorReason == .payloadTooLarge)
        #expect(!APNsOutcome.tooManyRequests.isFinal && APNsOutcome.tooManyRequests.countsAttempt)
        #expect(!APNsOutcome.renewProviderToken.isFinal && !APNsOutcome.renewProviderToken.countsAttempt)
        #expect(!APNsOutcome.serverError(retireConnection: true).isFinal)
    }
}

@Suite struct ProviderTokenFormatTests {
    @Test func base64URLRoundTripsWithoutPadding() {
        for count in 0..<40 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 250) }
            let text = Base64URL.encode(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(Base64URL.decode(text) == bytes)
        }
        #expect(Base64URL.encode(Array("\u{FB}\u{FF}".utf8)) == "w7vDvw")
        #expect(Base64URL.decode("a") == nil)
        #expect(Base64URL.decode("ab==") == nil)
        #expect(Base64URL.decode("a+b/") == nil)
    }

    @Test func signingInputIsHeaderDotClaims() {
        let input = ProviderTokenFormat.signingInput(teamID: "TEAM123456", keyID: "KEY1234567", issuedAt: 1_795_000_000)
        let parts = input.split(separator: ".")
        #expect(parts.count == 2)
        #expect(Base64URL.decode(parts[0]).map { String(decoding: $0, as: UTF8.self) } == #"{"alg":"ES256","kid":"KEY1234567"}"#)
        #expect(Base64URL.decode(parts[1]).map { String(decoding: $0, as: UTF8.self) } == #"{"iss":"TEAM123456","iat":1795000000}"#)
    }

    @Test func parseTakesATokenApart() throws {
        let input = ProviderTokenFormat.signingInput(teamID: "T", keyID: "K", issuedAt: 42)
        let token = ProviderTokenFormat.token(signingInput: input, signature: [UInt8](repeating: 7, count: 64))
        let parsed = try #require(ProviderTokenFormat.parse(token))
        #expect(parsed.algorithm == "ES256" && parsed.keyID == "K" && parsed.teamID == "T" && parsed.issuedAt == 42)
        #expect(parsed.signingInput == Array(input.utf8))
        #expect(parsed.signature == [UInt8](repeating: 7, count: 64))
        for bad in ["", "a.b", "a.b.c.d", input + ".", "!!.x.y", input + ".###"] {
            #expect(ProviderTokenFormat.parse(bad) == nil, "\(bad)")
        }
    }
}
