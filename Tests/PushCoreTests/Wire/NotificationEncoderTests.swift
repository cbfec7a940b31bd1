import NIOCore
import Testing
@testable import PushCore

/// Expected bytes are written out by hand from the seeds' tables (Tables A-1 to A-3, Figures A-1 and A-2 of the
/// legacy formats), never produced by the encoder under test.
@Suite struct NotificationEncoderTests {
    @Test func frameWithThirtyTwoByteToken() {
        let n = PushNotification(token: sampleToken, payload: hiPayload, identifier: 1, expiration: 0, priority: .immediate)
        let expected = hex("""
            02 | 0000004e
            01 0020 740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad
            02 0016 7b22617073223a7b22616c657274223a224869227d7d
            03 0004 00000001
            04 0004 00000000
            05 0001 0a
            """)
        #expect(bytes(NotificationEncoder.encode(n, format: .frame)) == expected)
        #expect(NotificationEncoder.encodeBytes(n, format: .frame) == expected)
    }

    @Test func frameWithHundredByteTokenAndMaximalPayload() throws {
        let tokenBytes = (0..<100).map { UInt8($0) }
        let alert = String(repeating: "x", count: 2048 - 20)
        let payload = Array(#"{"aps":{"alert":"\#(alert)"}}"#.utf8)
        #expect(payload.count == 2048)
        let n = PushNotification(
            token: try DeviceToken(bytes: tokenBytes), payload: payload, identifier: 0xDEAD_BEEF,
            expiration: 0x7FFF_FFFF, priority: .conservePower)
        var tokenHex = ""
        for i in 0..<100 { tokenHex += String(format2: i) }
        let expected =
            hex("02 0000087c  01 0064") + hex(tokenHex) + hex("02 0800") + payload
            + hex("03 0004 deadbeef  04 0004 7fffffff  05 0001 05")
        #expect(bytes(NotificationEncoder.encode(n, format: .frame)) == expected)
        #expect(NotificationEncoder.encodeBytes(n, format: .frame) == expected)
    }

    @Test func eventWithMultiByteAlertPriorityFiveAndExpirationZero() throws {
        // Whitespace in the event is insignificant and goes; the characters are kept as the producer wrote them.
        let event = try decodeEvent("""
            {"id": "m", "app": "com.example.app", "token": "\(sampleTokenHex)",
             "payload": {"aps": {"alert": "Grüße 👋"}}, "expiration": 0, "priority": 5}
            """).get()
        let frame = NotificationEncoder.encode(
            event.notification(identifier: 7, recordTimestamp: 1_700_000_000, defaultTTL: 86400), format: .frame)
        // {"aps":{"alert":"  G  r  ü     ß     e  ␠  👋           "}}
        let payloadHex = "7b22617073223a7b22616c657274223a22 47 72 c3bc c39f 65 20 f09f918b 227d7d"
        let expected = hex("""
            02 00000058
            01 0020 740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad
            02 0020 \(payloadHex)
            03 0004 00000007
            04 0004 00000000
            05 0001 05
            """)
        #expect(bytes(frame) == expected)
    }

    @Test func enhancedFormatWritesTheIdentifierBigEndian() {
        let n = PushNotification(
            token: sampleToken, payload: hiPayload, identifier: 0x0102_0304, expiration: 0x5F5E_1000, priority: .immediate)
        let expected = hex("""
            01 | 01020304 | 5f5e1000
            0020 740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad
            0016 7b22617073223a7b22616c657274223a224869227d7d
            """)
        #expect(bytes(NotificationEncoder.encode(n, format: .enhanced)) == expected)
        #expect(NotificationEncoder.encodeBytes(n, format: .enhanced) == expected)
    }

    @Test func simpleFormat() {
        let n = PushNotification(token: sampleToken, payload: hiPayload, identifier: 99, expiration: 5, priority: .conservePower)
        let expected = hex("""
            00
            0020 740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad
            0016 7b22617073223a7b22616c657274223a224869227d7d
            """)
        #expect(bytes(NotificationEncoder.encode(n, format: .simple)) == expected)
        #expect(NotificationEncoder.encodeBytes(n, format: .simple) == expected)
    }

    @Test func encodingAppendsToWhatIsInTheBuffer() {
        let n = PushNotification(token: try! DeviceToken(bytes: [0xAB]), payload: Array("{}".utf8), identifier: 1, expiration: 2, priority: .immediate)
        var out = ByteBuffer(bytes: [0xFF])
        NotificationEncoder.encode(n, format: .simple, into: &out)
        NotificationEncoder.encode(n, format: .simple, into: &out)
        #expect(bytes(out) == hex("ff 00 0001 ab 0002 7b7d 00 0001 ab 0002 7b7d"))
        #expect(n.encodedSize(.simple) == 8)
        #expect(n.encodedSize(.enhanced) == 16)
        #expect(n.encodedSize(.frame) == 5 + 4 + 5 + 7 + 7 + 4)
    }

    @Test func formatsAndLimits() {
        #expect(NotificationFormat.frame.command == 2)
        #expect(NotificationFormat.enhanced.command == 1)
        #expect(NotificationFormat.simple.command == 0)
        #expect(NotificationFormat.frame.maxPayloadSize == 2048)
        #expect(NotificationFormat.enhanced.maxPayloadSize == 256)
        #expect(NotificationFormat.simple.maxPayloadSize == 256)
    }
}

extension String {
    /// Two lowercase hex digits.
    init(format2 value: Int) {
        let digits = Array("0123456789abcdef")
        self = String([digits[value >> 4], digits[value & 15]])
    }
}
