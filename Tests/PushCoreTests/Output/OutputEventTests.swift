import Testing
@testable import PushCore

@Suite struct OutputEventTests {
    let source = RecordSource(topic: "notifications", partition: 3, offset: 77)

    @Test func malformedEventCarriesTheRawMessageCutToOneKiB() throws {
        let raw = Array(("{\"id\":\"x\"," + String(repeating: "é", count: 600)).utf8)  // 1210 bytes, not JSON
        let rejection = EventDecoder().decode(raw).failure!
        let event = DeliveryErrorEvent(rejected: rejection, rawMessage: raw, source: source, occurredAt: 1_795_256_130_123)
        #expect(event.reason == .malformedEvent)
        #expect(event.eventID == "x")
        #expect(event.detail!.utf8.count <= 1024)
        #expect(event.detail!.utf8.count >= 1023)
        #expect(Array(raw.prefix(event.detail!.utf8.count)) == Array(event.detail!.utf8))
        #expect(event.messageKey == "x")
        #expect(event.attempts == 0)
        #expect(event.status == nil)
    }

    @Test func messageKeyIsTheTokenWhenItParsed() {
        let raw = Array(#"{"id":"x","app":"a","token":"<AB CD>","payload":{}}"#.utf8)
        let event = DeliveryErrorEvent(rejected: EventDecoder().decode(raw).failure!, rawMessage: raw, source: source, occurredAt: 0)
        #expect(event.reason == .invalidPayload)
        #expect(event.token == "abcd")
        #expect(event.messageKey == "abcd")
        #expect(event.detail == "payload has no 'aps' object")
        let noID = Array("[]".utf8)
        let anonymous = DeliveryErrorEvent(rejected: EventDecoder().decode(noID).failure!, rawMessage: noID, source: source, occurredAt: 0)
        #expect(anonymous.messageKey == nil)
        #expect(anonymous.token == nil)
        let badToken = Array(#"{"id":"x","app":"a","token":"xyz","payload":{"aps":{}}}"#.utf8)
        let t = DeliveryErrorEvent(rejected: EventDecoder().decode(badToken).failure!, rawMessage: badToken, source: source, occurredAt: 0)
        #expect(t.token == "xyz")
        #expect(t.messageKey == "x")
    }

    /// Found by fuzzing (Fuzz/FuzzEventDecoder): an unknown environment was copied into the delivery-error event,
    /// which then broke the event's own schema (production, sandbox or null).
    @Test func rejectedEventWithUnknownEnvironmentKeepsToTheSchema() throws {
        let raw = Array(#"{"id":"e","app":"com.example.app","token":"ab","payload":{"aps":{}},"environment":"staging"}"#.utf8)
        let rejection = try #require(EventDecoder().decode(raw).failure)
        let event = DeliveryErrorEvent(rejected: rejection, rawMessage: raw, source: source, occurredAt: 0)
        #expect(event.environment == nil)
        #expect(event.detail?.contains("staging") == true)
        _ = try DeliveryErrorEvent(validating: try JSONValue(parsing: event.json()))
        let sandbox = Array(#"{"id":"e","app":"com.example.app","token":"xyz","payload":{"aps":{}},"environment":"sandbox"}"#.utf8)
        let kept = DeliveryErrorEvent(rejected: try #require(EventDecoder().decode(sandbox).failure), rawMessage: sandbox, source: source, occurredAt: 0)
        #expect(kept.environment == "sandbox")
    }

    @Test func deliveryErrorJSONHasEveryFieldInOrder() throws {
        let event = try decodeEvent(#"{"id":"e","app":"com.example.app","environment":"sandbox","token":"ab","payload":{"aps":{}}}"#).get()
        let error = DeliveryErrorEvent(
            failed: event, reason: .invalidToken, status: .invalidToken, detail: "rejected \"by\" the gateway",
            attempts: 1, source: source, occurredAt: 1_795_256_130_123)
        let json = String(decoding: error.json(), as: UTF8.self)
        #expect(json == #"{"event_id":"e","app":"com.example.app","environment":"sandbox","token":"ab","reason":"invalid_token","status":8,"detail":"rejected \"by\" the gateway","attempts":1,"apns_id":null,"apns_unique_id":null,"channel_id":null,"source":{"topic":"notifications","partition":3,"offset":77},"occurred_at":"2026-11-21T10:15:30.123Z"}"#)
        var back = try DeliveryErrorEvent(validating: try JSONValue(parsing: error.json()))
        back.messageKey = error.messageKey
        #expect(back == error)
    }

    @Test func theIdsAppleLooksANotificationUpByAreWrittenAndReadBack() throws {
        let event = try decodeEvent(#"{"id":"e","app":"com.example.app","environment":"sandbox","token":"ab","payload":{"aps":{}}}"#).get()
        var error = DeliveryErrorEvent(
            failed: event, reason: .rejected, status: nil, detail: "BadTopic", attempts: 1, source: source, occurredAt: 0)
        error.ids = NotificationIDs(
            apnsID: "0b5e3a2c-9f1d-5e47-8a6b-3c2d1e0f9a8b", apnsUniqueID: "5c8f2d1e-3b4a-4c6d-9e8f-7a6b5c4d3e2f", channelID: nil)
        let json = String(decoding: error.json(), as: UTF8.self)
        #expect(json.contains(#""attempts":1,"apns_id":"0b5e3a2c-9f1d-5e47-8a6b-3c2d1e0f9a8b","apns_unique_id":"5c8f2d1e-3b4a-4c6d-9e8f-7a6b5c4d3e2f","channel_id":null,"source""#))
        var back = try DeliveryErrorEvent(validating: try JSONValue(parsing: error.json()))
        back.messageKey = error.messageKey
        #expect(back == error)
        let notAUUID = json.replacingOccurrences(of: "0b5e3a2c-9f1d-5e47-8a6b-3c2d1e0f9a8b", with: "evt-1")
        #expect(throws: OutputEventError.self) { try DeliveryErrorEvent(validating: try JSONValue(parsing: notAUUID)) }
    }

    @Test func feedbackJSON() throws {
        let f = FeedbackEvent(app: "com.example.app", environment: .production, token: sampleToken, timestamp: 1_795_161_600, receivedAt: 1_795_256_130_000)
        #expect(String(decoding: f.json(), as: UTF8.self) == #"{"app":"com.example.app","environment":"production","token":"\#(sampleTokenHex)","timestamp":"2026-11-20T08:00:00Z","timestamp_unix":1795161600,"received_at":"2026-11-21T10:15:30.000Z"}"#)
        #expect(f.messageKey == sampleTokenHex)
        #expect(try FeedbackEvent(validating: try JSONValue(parsing: f.json())) == f)
    }

    @Test func jsonWriterEscapes() {
        #expect(JSONWriter.quoted("a\"b\\c\nd\u{1}é") == #""a\"b\\c\nd\u0001é""#)
        var w = JSONWriter()
        w.beginObject()
        w.field("a", Int64(1))
        w.key("o")
        w.beginObject()
        w.field("b", true)
        w.field("n", nil as String?)
        w.endObject()
        w.field("c", "x")
        w.endObject()
        #expect(w.string == #"{"a":1,"o":{"b":true,"n":null},"c":"x"}"#)
    }

    @Test func jsonWriterWritesEveryIntegerAsSwiftDoes() {
        var values: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, Int64.max, Int64.min, Int64.max - 1, Int64.min + 1]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 { values.append(Int64.random(in: .min ... .max, using: &generator)) }
        for power in 0..<19 { values.append(contentsOf: [Int64(pow10(power)), Int64(pow10(power)) - 1, -Int64(pow10(power))]) }
        for n in values {
            var w = JSONWriter()
            w.value(n)
            #expect(w.string == String(n))
        }
    }

    @Test func jsonWriterEscapesEveryControlCharacter() {
        for b in UInt8(0)..<0x20 {
            let expected: String = switch b {
            case 0x0A: #""\n""#
            case 0x0D: #""\r""#
            case 0x09: #""\t""#
            default: "\"\\u00" + String(b >> 4, radix: 16) + String(b & 0xF, radix: 16) + "\""
            }
            #expect(JSONWriter.quoted(String(UnicodeScalar(b))) == expected)
        }
    }

    @Test func jsonValueParsing() throws {
        let v = try JSONValue(parsing: #" {"a": [1, -2.5e1, "x", null, true, {}], "b": {"c": false}} "#)
        #expect(v["a"] == .array([.number(1), .number(-25), .string("x"), .null, .bool(true), .object([])]))
        #expect(v["b"]?["c"] == .bool(false))
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: "[1,]") }
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: "01") }
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: String(repeating: "[", count: 100) + String(repeating: "]", count: 100)) }
    }
}

private func pow10(_ n: Int) -> UInt64 { (0..<n).reduce(1) { acc, _ in acc * 10 } }
