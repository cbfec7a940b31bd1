import NIOCore
import Testing
@testable import PushCore

private func event(_ extra: String = "", payload: String = #"{"aps":{"alert":"Hi"}}"#, id: String = "e1") -> String {
    #"{"id":"\#(id)","app":"com.example.app","token":"\#(sampleTokenHex)","payload":\#(payload)\#(extra)}"#
}

private func request(_ json: String, mdmTopic: String? = nil) throws -> APNsRequest {
    let e = try EventDecoder.http2.decode(json).get()
    return try APNsRequest(
        event: e, app: HTTP2AppSettings(bundleID: "com.example.app", mdmTopic: mdmTopic), recordTimestamp: 1000,
        defaultTTL: 60)
}

@Suite struct HTTP2EventFieldTests {
    @Test func theNewFieldsAreReadAndKept() throws {
        let e = try EventDecoder.http2.decode(event(
            #","push_type":"voip","collapse_id":"c-1","apns_id":"123E4567-E89B-12D3-A456-426614174000","priority":1"#)).get()
        #expect(e.pushType == .voip)
        #expect(e.collapseID == "c-1")
        #expect(e.apnsID?.description == "123e4567-e89b-12d3-a456-426614174000")
        #expect(e.priority == .lowest)
    }

    @Test(arguments: [
        #","push_type":"banner""#, #","push_type":"Alert""#, #","push_type":5"#, #","collapse_id":12"#,
        #","apns_id":"123e4567e89b12d3a456426614174000""#, #","apns_id":"123e4567-e89b-12d3-a456-42661417400g""#,
        #","apns_id":"{123e4567-e89b-12d3-a456-426614174000}""#, #","push_type":"alert","push_type":"voip""#,
    ])
    func badFieldsAreMalformedForEveryTransport(extra: String) {
        #expect(EventDecoder.http2.decode(event(extra)).failure?.reason == .malformedEvent)
        #expect(EventDecoder().decode(event(extra)).failure?.reason == .malformedEvent)
    }

    @Test func collapseIDsAreCountedInBytes() {
        let sixtyFour = String(repeating: "é", count: 32)  // 64 bytes
        #expect(EventDecoder.http2.decode(event(#","collapse_id":"\#(sixtyFour)""#)).success != nil)
        let sixtyFive = String(repeating: "é", count: 32) + "x"
        let failure = EventDecoder.http2.decode(event(#","collapse_id":"\#(sixtyFive)""#)).failure
        #expect(failure?.reason == .malformedEvent)
        #expect(failure?.detail == "field 'collapse_id' is 65 bytes, more than 64")
    }

    @Test func priorityOneIsForHTTP2AppsOnly() {
        #expect(EventDecoder.http2.decode(event(#","priority":1"#)).success?.priority == .lowest)
        #expect(EventDecoder().decode(event(#","priority":1"#)).failure?.reason == .invalidPriority)
        #expect(EventDecoder.http2.decode(event(#","priority":3"#)).failure?.reason == .invalidPriority)
    }

    @Test func pushTypeBackgroundRulesThePriority() {
        let explicit10 = event(#","push_type":"background","priority":10"#)
        #expect(EventDecoder.http2.decode(explicit10).failure?.detail == "priority 10 is not allowed with push type background")
        // the binary transport ignores the push type
        #expect(EventDecoder().decode(explicit10).success?.priority == .immediate)
        // default priority: 5 for background (given, or content-available only), else 10
        #expect(EventDecoder.http2.decode(event(#","push_type":"background""#)).success?.priority == .conservePower)
        let contentOnly = event(payload: #"{"aps":{"content-available":1}}"#)
        #expect(EventDecoder.http2.decode(contentOnly).success?.priority == .conservePower)
        #expect(EventDecoder.http2.decode(event(#","push_type":"alert""#)).success?.priority == .immediate)
        // content-available only stays a background notification's payload whatever the push type says
        let contentOnly10 = event(#","push_type":"alert","priority":10"#, payload: #"{"aps":{"content-available":1}}"#)
        #expect(EventDecoder.http2.decode(contentOnly10).failure?.reason == .invalidPriority)
    }

    @Test func thePayloadLimitIsThePushTypes() {
        func payload(_ size: Int) -> String { #"{"aps":{"alert":"\#(String(repeating: "x", count: size - 20))"}}"# }
        #expect(payload(4096).utf8.count == 4096)
        #expect(EventDecoder.http2.decode(event(payload: payload(4096))).success != nil)
        #expect(EventDecoder.http2.decode(event(payload: payload(4097))).failure?.reason == .payloadTooLarge)
        #expect(EventDecoder.http2.decode(event(#","push_type":"voip""#, payload: payload(5120))).success != nil)
        #expect(EventDecoder.http2.decode(event(#","push_type":"voip""#, payload: payload(5121))).failure?.reason == .payloadTooLarge)
        // the binary frame format's limit is 2048
        #expect(EventDecoder().decode(event(payload: payload(2049))).failure?.reason == .payloadTooLarge)
        // truncation shortens to the push type's limit
        let truncated = try? EventDecoder.http2.decode(event(#","truncate_alert":true"#, payload: payload(4500))).get()
        #expect(truncated?.payload.count == 4096)
        #expect(truncated?.alertTruncated == true)
        #expect(truncated.map { String(decoding: $0.payload.suffix(6), as: UTF8.self) } == "…\"}}")
    }
}

@Suite struct APNsRequestTests {
    @Test func aPlainAlert() throws {
        let r = try request(event())
        #expect(r.path == "/3/device/\(sampleTokenHex)")
        let fields = r.headerFields()
        #expect(fields.map(\.name) == [
            ":method", ":scheme", ":path", "apns-topic", "apns-push-type", "apns-priority", "apns-expiration", "apns-id",
        ])
        #expect(fields.map(\.value) == [
            "POST", "https", "/3/device/\(sampleTokenHex)", "com.example.app", "alert", "10", "1060",
            APNsID.derived(app: "com.example.app", eventID: "e1").description,
        ])
        #expect(r.body == hiPayload)
    }

    @Test(arguments: [
        (PushType.alert, "com.example.app"), (.background, "com.example.app"), (.voip, "com.example.app.voip"),
        (.complication, "com.example.app.complication"), (.fileprovider, "com.example.app.pushkit.fileprovider"),
        (.location, "com.example.app.location-query"), (.liveactivity, "com.example.app.push-type.liveactivity"),
        (.pushtotalk, "com.example.app.voip-ptt"), (.widgets, "com.example.app.push-type.widgets"),
        (.mdm, "com.apple.mgmt.External.42"),
    ])
    func topicSuffixes(type: PushType, topic: String) throws {
        let priority = type == .background ? #","priority":5"# : ""
        // A Live Activity's aps needs what its event does (SPEC section 9).
        let payload = type == .liveactivity ? #"{"aps":{"event":"end","timestamp":1}}"# : #"{"aps":{"alert":"Hi"}}"#
        let r = try request(
            event(#","push_type":"\#(type.rawValue)"\#(priority)"#, payload: payload), mdmTopic: "com.apple.mgmt.External.42")
        #expect(r.topic == topic)
        #expect(r.pushType == type)
    }

    @Test func mdmNeedsTheAppsTopic() {
        #expect(throws: APNsRequest.BuildError.mdmTopicMissing) { try request(event(#","push_type":"mdm""#)) }
    }

    @Test func pushTypeDefaultsToBackgroundForContentAvailableOnly() throws {
        let r = try request(event(payload: #"{"aps":{"content-available":1}}"#))
        #expect(r.pushType == .background)
        #expect(r.priority == .conservePower)
    }

    @Test func optionalHeaders() throws {
        let r = try request(event(#","collapse_id":"c-9","apns_id":"A1B2C3D4-E5F6-4789-ABCD-EF0123456789","expiration":0,"priority":1"#))
        let fields = Dictionary(uniqueKeysWithValues: r.headerFields(authorization: "tok").map { ($0.name, $0.value) })
        #expect(fields["apns-collapse-id"] == "c-9")
        #expect(fields["apns-id"] == "a1b2c3d4-e5f6-4789-abcd-ef0123456789")
        #expect(fields["apns-expiration"] == "0")
        #expect(fields["apns-priority"] == "1")
        #expect(fields["authorization"] == "bearer tok")
    }

    @Test func theApnsIDOfARedeliveredEventIsTheSame() throws {
        #expect(try request(event()).apnsID == (try request(event())).apnsID)
        #expect(try request(event(id: "e2")).apnsID != (try request(event())).apnsID)
    }

    @Test func writeFieldsSpellsTheSameHeaders() throws {
        let r = try request(event(#","collapse_id":"c""#))
        var buffer = ByteBuffer()
        r.writeFields(into: &buffer)
        let text = String(buffer: buffer)
        let expected = r.headerFields().map { "\($0.name): \($0.value)" }.joined(separator: "\n") + "\n\n"
            + String(decoding: r.body, as: UTF8.self)
        #expect(text == expected)
    }

    /// The token's hex and the expiration's digits as `writeFields` writes them (computed four bytes at a time, into
    /// a reservation counted beforehand), against `headerFields` (`path` and `String`) and `Hex.encode` (a byte at a
    /// time, from a table): every token length from 1 to 100 bytes, every digit count.
    @Test func writeFieldsSpellsEveryTokenLengthAndExpiration() throws {
        var r = try request(event())
        var random = SystemRandomNumberGenerator()
        let expirations: [UInt32] = [0, 7, 42, 999, 1000, 65_535, 1_800_000_000, 4_294_967_295]
            + (0..<20).map { _ in UInt32.random(in: 0...UInt32.max, using: &random) }
        for length in 1...100 {
            r.token = try DeviceToken(bytes: (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) })
            r.expiration = expirations[length % expirations.count]
            var buffer = ByteBuffer()
            r.writeFields(into: &buffer)
            let expected = r.headerFields().map { "\($0.name): \($0.value)" }.joined(separator: "\n") + "\n\n"
                + String(decoding: r.body, as: UTF8.self)
            #expect(String(buffer: buffer) == expected, "token of \(length) bytes, expiration \(r.expiration)")
            // `path` and `writeFields` both spell the token four bytes at a time; `Hex.encode` a byte at a time.
            #expect(r.path == "/3/device/" + Hex.encode(r.token.bytes), "token of \(length) bytes")
        }
        for (index, expiration) in expirations.enumerated() {
            r.expiration = expiration
            var buffer = ByteBuffer()
            r.writeFields(into: &buffer)
            #expect(String(buffer: buffer).contains("\napns-expiration: \(expiration)\n"), "\(index)")
        }
    }

    /// Every push type and priority as `writeFields` spells them (static text) and as `headerFields` does.
    @Test(arguments: PushType.allCases)
    func writeFieldsSpellsEveryPushTypeAndPriority(type: PushType) throws {
        var r = try request(event(), mdmTopic: "com.apple.mgmt.External.1")
        r.pushType = type
        for priority in [Priority.lowest, .conservePower, .immediate] {
            r.priority = priority
            var buffer = ByteBuffer()
            r.writeFields(into: &buffer)
            let expected = r.headerFields().map { "\($0.name): \($0.value)" }.joined(separator: "\n") + "\n\n"
                + String(decoding: r.body, as: UTF8.self)
            #expect(String(buffer: buffer) == expected)
            #expect(String(buffer: buffer).contains("\napns-push-type: \(type.rawValue)\n"))
        }
    }

    @Test func theEncodeObject() throws {
        let r = try request(event())
        let json = try JSONValue(parsing: r.json())
        #expect(json.keys == ["path", "headers", "body"])
        #expect(json["headers"]?.keys == ["apns-topic", "apns-push-type", "apns-priority", "apns-expiration", "apns-id"])
        #expect(json["body"]?.stringValue == #"{"aps":{"alert":"Hi"}}"#)
    }
}

@Suite struct APNsIDTests {
    @Test func uuidVersion5MatchesRFC9562() {
        // uuid.uuid5(UUID("5e1f3c52-8a7d-4b36-9d0e-2f6a41c7b9e3"), "com.example.app\0e1") in Python
        #expect(APNsID.derived(app: "com.example.app", eventID: "e1").description == "55fda682-a0c6-5c20-9596-ccfdb4116be2")
    }

    @Test func sha1KnownAnswers() {
        #expect(Hex.encode(SHA1.digest(Array("abc".utf8))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Hex.encode(SHA1.digest([])) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        let long = Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
        #expect(Hex.encode(SHA1.digest(long)) == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        #expect(
            Hex.encode(SHA1.digest([UInt8](repeating: 0x61, count: 1_000_000)))
                == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    /// Derived apns-ids of names from one block to several, against the UUID built from the whole digest.
    @Test func derivedIDsOfEveryNameLength() {
        for length in [1, 30, 38, 39, 40, 100, 102, 103, 104, 500] {
            let eventID = String(repeating: "e", count: length)
            let name = [0x5E, 0x1F, 0x3C, 0x52, 0x8A, 0x7D, 0x4B, 0x36, 0x9D, 0x0E, 0x2F, 0x6A, 0x41, 0xC7, 0xB9, 0xE3]
                + Array("com.example.app".utf8) + [0] + Array(eventID.utf8)
            var d = SHA1.digest(name)
            d[6] = d[6] & 0x0F | 0x50
            d[8] = d[8] & 0x3F | 0x80
            let hex = Hex.encode(d.prefix(16))
            let expected = "\(hex.prefix(8))-\(hex.dropFirst(8).prefix(4))-\(hex.dropFirst(12).prefix(4))-\(hex.dropFirst(16).prefix(4))-\(hex.dropFirst(20))"
            #expect(APNsID.derived(app: "com.example.app", eventID: eventID).description == expected, "event id of \(length) bytes")
        }
    }

    /// The canonical form against one spelled digit by digit, for random and extreme values.
    @Test func printsEveryDigitInPlace() {
        func reference(_ id: APNsID) -> String {
            func hex(_ word: UInt64, _ digits: Int) -> String {
                let text = String(word, radix: 16)
                return String(repeating: "0", count: digits - text.count) + text
            }
            let high = hex(id.high, 16)
            let low = hex(id.low, 16)
            return "\(high.prefix(8))-\(high.dropFirst(8).prefix(4))-\(high.suffix(4))-\(low.prefix(4))-\(low.suffix(12))"
        }
        var random = SystemRandomNumberGenerator()
        let ids = [APNsID(high: 0, low: 0), APNsID(high: .max, low: .max), APNsID(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210)]
            + (0..<200).map { _ in APNsID(high: random.next(), low: random.next()) }
        for id in ids {
            #expect(id.description == reference(id))
            #expect(APNsID(id.description) == id)
        }
    }

    @Test(arguments: ["123e4567-e89b-12d3-a456-426614174000", "A1B2C3D4-E5F6-4789-ABCD-EF0123456789"])
    func parsesAndPrintsLowercase(text: String) {
        #expect(APNsID(text)?.description == text.lowercased())
    }

    @Test(arguments: ["", "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-4266141740000",
                      "123e4567-e89b-12d3-a456_426614174000", "g23e4567-e89b-12d3-a456-426614174000"])
    func refuses(text: String) {
        #expect(APNsID(text) == nil)
    }
}
