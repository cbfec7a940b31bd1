import NIOCore
import NIOTestUtils
import PropertyBased
import Testing
@testable import PushCore

@Suite struct NotificationDecoderTests {
    let frameHi = hex("""
        02 0000004e
        01 0020 740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad
        02 0016 7b22617073223a7b22616c657274223a224869227d7d
        03 0004 00000001
        04 0004 00000000
        05 0001 0a
        """)

    func decode(_ input: [UInt8]) -> NotificationDecodingResult? {
        var b = buffer(input)
        return NotificationDecoder.decode(from: &b)
    }

    func rejection(_ input: [UInt8]) -> (UInt8, UInt32)? {
        guard case .rejected(let response, _, _) = decode(input) else { return nil }
        return (response.status.code, response.identifier)
    }

    @Test func decodesAHandWrittenFrame() {
        let expected = DecodedNotification(
            format: .frame, token: sampleToken.bytes, payload: hiPayload, identifier: 1, expiration: 0, priority: 10)
        #expect(decode(frameHi) == .notification(expected))
    }

    @Test func decodesLegacyFormats() {
        let enhanced = hex("01 01020304 5f5e1000 0020 \(sampleTokenHex) 0016") + hiPayload
        #expect(decode(enhanced) == .notification(DecodedNotification(
            format: .enhanced, token: sampleToken.bytes, payload: hiPayload, identifier: 0x0102_0304,
            expiration: 0x5F5E_1000, priority: 10)))
        let simple = hex("00 0020 \(sampleTokenHex) 0016") + hiPayload
        #expect(decode(simple) == .notification(DecodedNotification(
            format: .simple, token: sampleToken.bytes, payload: hiPayload, identifier: 0, expiration: 0, priority: 10)))
    }

    @Test func partialInputNeedsMoreBytesAndConsumesNothing() {
        for length in 0..<frameHi.count {
            var b = buffer(Array(frameHi[..<length]))
            #expect(NotificationDecoder.decode(from: &b) == nil)
            #expect(b.readerIndex == 0)
        }
    }

    @Test func unknownCommandIsAProtocolError() {
        #expect(rejection(hex("09")).map { [$0.0] } == [128])
        #expect(rejection(hex("08 00 00000001"))?.1 == 0)
    }

    @Test func frameViolationsGetTheSeedsStatusesAndTheIdentifier() {
        let id = "03 0004 0000002a"
        let payload = "02 0016 7b22617073223a7b22616c657274223a224869227d7d"
        let token = "01 0020 \(sampleTokenHex)"
        func frame(_ items: String) -> [UInt8] {
            let body = hex(items)
            return [2] + withUnsafeBytes(of: UInt32(body.count).bigEndian, Array.init) + body
        }
        // missing token (2), empty token (2), token over 100 bytes (5)
        #expect(rejection(frame("\(payload) \(id)"))! == (2, 42))
        #expect(rejection(frame("01 0000 \(payload) \(id)"))! == (2, 42))
        let longToken = "01 0065 " + String(repeating: "ab", count: 101)
        #expect(rejection(frame("\(longToken) \(payload) \(id)"))! == (5, 42))
        // missing payload (4), empty payload (4), payload over 2048 bytes (7)
        #expect(rejection(frame("\(token) \(id)"))! == (4, 42))
        #expect(rejection(frame("\(token) 02 0000 \(id)"))! == (4, 42))
        let bigPayload = "02 0801 " + String(repeating: "20", count: 2049)
        #expect(rejection(frame("\(token) \(bigPayload) \(id)"))! == (7, 42))
        // protocol errors (128): unknown item, repeated item, wrong item sizes, bad priority, overrun
        #expect(rejection(frame("\(token) \(payload) \(id) 06 0001 00"))! == (128, 42))
        #expect(rejection(frame("\(token) \(token) \(payload) \(id)"))! == (128, 42))
        #expect(rejection(frame("\(token) \(payload) 03 0002 0001"))! == (128, 0))
        #expect(rejection(frame("\(token) \(payload) \(id) 04 0003 000000"))! == (128, 42))
        #expect(rejection(frame("\(token) \(payload) \(id) 05 0001 07"))! == (128, 42))
        #expect(rejection(frame("\(token) \(payload) \(id) 05 0002 0a0a"))! == (128, 42))
        #expect(rejection(frame("\(id) \(token) 02 0099 7b7d"))! == (128, 42))
        #expect(rejection(frame("\(id) \(token) \(payload) 05"))! == (128, 42))
        // the identifier is reported even when the bad item comes first
        #expect(rejection(frame("07 0000 \(token) \(payload) \(id)"))! == (128, 42))
    }

    @Test func oversizedFrameLengthIsRefusedWithoutWaiting() {
        #expect(rejection(hex("02 7fffffff"))! == (128, 0))
        #expect(rejection(hex("02 ffffffff 01"))! == (128, 0))
    }

    @Test func legacyViolations() {
        let enhanced = "01 0000002a 00000000"
        #expect(rejection(hex("\(enhanced) 0000"))! == (2, 42))
        #expect(rejection(hex("\(enhanced) 0065"))! == (5, 42))
        #expect(rejection(hex("\(enhanced) 0001 ab 0000"))! == (4, 42))
        #expect(rejection(hex("\(enhanced) 0001 ab 0101"))! == (7, 42))
        #expect(rejection(hex("00 0001 ab 0101"))! == (7, 0))
        #expect(rejection(hex("00 0000"))! == (2, 0))
    }

    @Test func streamDecoderStopsAfterARejection() throws {
        var decoder = NotificationStreamDecoder()
        var input = buffer(frameHi + hex("09") + frameHi)
        #expect(try decoder.decode(buffer: &input) == .notification(DecodedNotification(
            format: .frame, token: sampleToken.bytes, payload: hiPayload, identifier: 1, expiration: 0, priority: 10)))
        guard case .rejected(let response, _, _) = try decoder.decode(buffer: &input) else {
            Issue.record("expected a rejection")
            return
        }
        #expect(response == ErrorResponse(status: .protocolError, identifier: 0))
        var more = buffer(frameHi)
        #expect(try decoder.decode(buffer: &more) == nil)
        #expect(more.readableBytes == 0)
    }

    @Test func verifierFeedsByteByByteBatchedAndShuffled() throws {
        let notifications: [(ByteBuffer, [NotificationDecodingResult])] = (0..<6).map { i in
            let n = PushNotification(
                token: try! DeviceToken(bytes: Array(repeating: UInt8(i), count: 1 + i * 19)),
                payload: Array(#"{"aps":{"badge":\#(i)}}"#.utf8), identifier: UInt32(i), expiration: UInt32(i * 1000),
                priority: i % 2 == 0 ? .immediate : .conservePower)
            let format = NotificationFormat.allCases[i % 3]
            let decoded = DecodedNotification(
                format: format, token: n.token.bytes, payload: n.payload,
                identifier: format == .simple ? 0 : n.identifier, expiration: format == .simple ? 0 : n.expiration,
                priority: format == .frame ? n.priority.rawValue : 10)
            return (NotificationEncoder.encode(n, format: format), [.notification(decoded)])
        }
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: notifications) { NotificationStreamDecoder() }
    }
}

@Suite struct ErrorResponseAndFeedbackTests {
    @Test func errorResponseRoundTripAndPartialInput() throws {
        var b = buffer(hex("08 0a 0000162e"))
        #expect(try ErrorResponse.decode(from: &b) == ErrorResponse(status: .shutdown, identifier: 5678))
        #expect(b.readableBytes == 0)
        var partial = buffer(hex("08 08 0000"))
        #expect(try ErrorResponse.decode(from: &partial) == nil)
        #expect(partial.readableBytes == 4)
        var out = ByteBuffer()
        ErrorResponse(status: .invalidToken, identifier: 0x0102_0304).write(into: &out)
        #expect(bytes(out) == hex("08 08 01020304"))
    }

    @Test func errorResponseGarbageIsReportedWithItsBytes() {
        var b = buffer(hex("02 00 00 00"))
        #expect(throws: WireDecodingError(.unexpectedCommand(2), bytes: buffer(hex("02 00 00 00")))) {
            try ErrorResponse.decode(from: &b)
        }
    }

    @Test func unknownStatusCodesAreKept() {
        #expect(GatewayStatus(code: 9) == .unrecognized(9))
        #expect(GatewayStatus(code: 9).deliveryErrorReason == .unknown)
        #expect(GatewayStatus(code: 9).code == 9)
        for code in [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 128, 255] as [UInt8] {
            #expect(GatewayStatus(code: code).code == code)
        }
        #expect(GatewayStatus.invalidToken.deliveryErrorReason == .invalidToken)
        #expect(GatewayStatus.shutdown.deliveryErrorReason == nil)
        #expect(GatewayStatus.processingError.isTransient && GatewayStatus.unknown.isTransient)
        #expect(!GatewayStatus.invalidToken.isTransient)
        #expect(DeliveryErrorReason.allCases.compactMap(\.gatewayStatus).map(\.code) == [1, 2, 3, 4, 5, 6, 7, 8, 128, 255])
    }

    @Test func feedbackTuples() throws {
        var b = buffer(hex("5f5e1000 0020 \(sampleTokenHex)  00000001 0002 abcd  0000"))
        #expect(try FeedbackTuple.decode(from: &b) == FeedbackTuple(timestamp: 0x5F5E_1000, token: sampleToken))
        #expect(try FeedbackTuple.decode(from: &b) == FeedbackTuple(timestamp: 1, token: try DeviceToken(bytes: [0xAB, 0xCD])))
        #expect(try FeedbackTuple.decode(from: &b) == nil)
        #expect(FeedbackTuple.trailingBytesError(b)?.kind == .truncated(2))
        var bad = buffer(hex("00000001 0000 ab"))
        #expect(throws: WireDecodingError.self) { try FeedbackTuple.decode(from: &bad) }
        var tooLong = buffer(hex("00000001 0065"))
        #expect(throws: WireDecodingError.self) { try FeedbackTuple.decode(from: &tooLong) }
        var out = ByteBuffer()
        FeedbackTuple(timestamp: 2, token: try DeviceToken(bytes: [1, 2, 3])).write(into: &out)
        #expect(bytes(out) == hex("00000002 0003 010203"))
    }

    @Test func decodingErrorsShowNoWholeDeviceToken() throws {
        // A tuple cut inside its token: the header shows whole, the token only as its first and last four digits.
        let b = buffer(hex("00000001 0020") + Array(sampleToken.bytes.prefix(20)))
        let error = try #require(FeedbackTuple.trailingBytesError(b))
        let partial = Hex.encode(sampleToken.bytes.prefix(20))
        #expect(error.description == "26 trailing bytes do not make a whole record (bytes: 000000010020 \(partial.prefix(4))…\(partial.suffix(4)), 20 bytes)")
        #expect(!error.description.contains(partial.prefix(12)))
        // Short ones (an error response) show whole.
        #expect(WireDecodingError(.truncated(3), bytes: buffer(hex("08 01 00"))).description.hasSuffix("(bytes: 080100)"))
    }

    @Test func feedbackDecoderReportsAPartialTrailingTupleAtEOF() throws {
        var decoder = FeedbackTupleDecoder()
        var b = buffer(hex("00000001 0002 abcd 0000"))
        #expect(try decoder.decodeLast(buffer: &b, seenEOF: true) == FeedbackTuple(timestamp: 1, token: try DeviceToken(bytes: [0xAB, 0xCD])))
        #expect(throws: WireDecodingError(.truncated(2), bytes: buffer(hex("0000")))) {
            try decoder.decodeLast(buffer: &b, seenEOF: true)
        }
    }

    @Test func verifierOnErrorResponsesAndFeedback() throws {
        let responses = [(buffer(hex("08 01 00000001")), [ErrorResponse(status: .processingError, identifier: 1)]),
                         (buffer(hex("08 0a ffffffff")), [ErrorResponse(status: .shutdown, identifier: .max)]),
                         (buffer(hex("08 80 00000000 08 ff 00000002")), [ErrorResponse(status: .protocolError, identifier: 0), ErrorResponse(status: .unknown, identifier: 2)])]
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: responses) { ErrorResponseDecoder() }
        let tuples = try (1...5).map { i in
            let t = FeedbackTuple(timestamp: UInt32(i * 7), token: try DeviceToken(bytes: Array(repeating: UInt8(i), count: i * 20)))
            var out = ByteBuffer()
            t.write(into: &out)
            return (out, [t])
        }
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: tuples) { FeedbackTupleDecoder() }
    }
}

/// Random split points over a stream of mixed notifications: the decoded sequence never depends on how the
/// bytes arrive.
@Suite struct ChunkedFeedingTests {
    @Test func randomChunkingGivesTheSameNotifications() async {
        await propertyCheck(count: 200, input: Gen.int(in: 1...40).array(of: 1...60)) { chunkSizes in
            let notifications = (0..<12).map { i in
                PushNotification(
                    token: try! DeviceToken(bytes: Array(repeating: UInt8(i), count: 32)),
                    payload: Array(#"{"aps":{"alert":"n\#(i)"}}"#.utf8), identifier: UInt32(100 + i),
                    expiration: UInt32(i), priority: .immediate)
            }
            var stream = ByteBuffer()
            for (i, n) in notifications.enumerated() {
                NotificationEncoder.encode(n, format: NotificationFormat.allCases[i % 3], into: &stream)
            }
            var pending = ByteBuffer()
            var identifiers: [UInt32] = []
            var sizes = chunkSizes[...]
            while stream.readableBytes > 0 {
                let size = min(sizes.popFirst() ?? 7, stream.readableBytes)
                var chunk = stream.readSlice(length: size)!
                pending.writeBuffer(&chunk)
                while case .notification(let n)? = NotificationDecoder.decode(from: &pending) {
                    identifiers.append(n.identifier)
                }
            }
            let expected: [UInt32] = (0..<12).map { (i: Int) -> UInt32 in i % 3 == 2 ? 0 : UInt32(100 + i) }
            #expect(identifiers == expected)
            #expect(pending.readableBytes == 0)
        }
    }
}

/// Random bytes: the decoders return, consume only what they read, and never trap.
@Suite struct GarbageTests {
    @Test func notificationDecoderNeverTrapsOnGarbage() async {
        await propertyCheck(count: 3000, input: Gen.uint8().array(of: 0...400)) { garbage in
            var b = buffer(garbage)
            var rounds = 0
            while let result = NotificationDecoder.decode(from: &b) {
                rounds += 1
                if case .rejected(let r, _, _) = result {
                    #expect([2, 4, 5, 7, 128].contains(r.status.code))
                    break
                }
                #expect(rounds <= garbage.count)
            }
        }
    }

    @Test func garbageLedByEachCommandByte() async {
        await propertyCheck(count: 3000, input: Gen.uint8(in: 0...2), Gen.uint8().array(of: 0...300)) { command, rest in
            var b = buffer([command] + rest)
            _ = NotificationDecoder.decode(from: &b)
            #expect(b.readerIndex <= 1 + rest.count)
        }
    }

    @Test func errorResponseAndFeedbackDecodersNeverTrap() async {
        await propertyCheck(count: 3000, input: Gen.uint8().array(of: 0...300)) { garbage in
            var b = buffer(garbage)
            // What decodes is exactly what was read: written again, it gives the same six bytes.
            var start = b.readerIndex
            while let r = try? ErrorResponse.decode(from: &b) {
                var out = ByteBuffer()
                r.write(into: &out)
                #expect(bytes(out) == Array(garbage[start..<b.readerIndex]))
                start = b.readerIndex
            }
            var f = buffer(garbage)
            while let t = try? FeedbackTuple.decode(from: &f) { #expect((1...100).contains(t.token.bytes.count)) }
            _ = FeedbackTuple.trailingBytesError(f)
        }
    }

    @Test func eventDecoderNeverTrapsOnGarbage() async {
        let decoder = EventDecoder()
        await propertyCheck(count: 3000, input: Gen.uint8().array(of: 0...300)) { garbage in
            if case .failure(let r) = decoder.decode(garbage) {
                #expect(!r.detail.isEmpty)
            }
        }
    }

    @Test func eventDecoderNeverTrapsOnMutatedEvents() async {
        let base = Array(#"{"id":"e","app":"a","token":"<ab cd>","payload":{"aps":{"alert":{"body":"h\u00e9\ud83d\ude00","loc-args":["x"]},"badge":1e0},"k":[1,{"z":null}]},"expiration":"2030-01-01T00:00:00Z","priority":5,"truncate_alert":true}"#.utf8)
        let decoder = EventDecoder(payloadLimit: 40)
        await propertyCheck(count: 5000, input: Gen.int(in: 0...(base.count - 1)).array(of: 1...4), Gen.uint8().array(of: 4...4)) { positions, values in
            var mutated = base
            for (p, v) in zip(positions, values) { mutated[p] = v }
            switch decoder.decode(mutated) {
            case .success(let event): #expect(event.payload.count <= 40)
            case .failure(let r): #expect(!r.detail.isEmpty)
            }
        }
    }
}
