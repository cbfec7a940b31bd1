import Foundation
import NIOCore
import NIOHPACK
import PushCore
import Testing
@testable import PushGateway

struct RequestHeaderEncoderTests {
    /// Random requests through one connection's encoder decode (NIOHPACK, one decoder for the connection) to exactly
    /// the request's fields; repeated values end up as one-byte indexes, changing ones stay out of the table.
    @Test func blocksDecodeToTheRequestsFields() throws {
        var encoder = RequestHeaderEncoder()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        var random = SystemRandomNumberGenerator()
        var lastLength = 0
        for i in 0..<600 {
            let r = request(i, topic: ["com.example.app", "com.example.other"][i / 100 % 2],
                            collapse: i % 7 == 0 ? "c\(i)" : nil,
                            expiration: i % 3 == 0 ? UInt32.random(in: 1...2_000_000_000, using: &random) : 0)
            let bearer = "bearer token-\(i / 250)"
            var block = ByteBuffer()
            encoder.write(r, authority: i % 5 == 0 ? nil : "api.push.apple.com", bearer: bearer, into: &block)
            lastLength = block.readableBytes
            let fields = try decoder.decodeHeaders(from: &block).map { "\($0.name): \($0.value)" }
            let expected = expectedFields(r, authority: i % 5 == 0 ? nil : "api.push.apple.com", bearer: bearer)
            #expect(fields == expected, "request \(i)")
        }
        #expect(encoder.entryCount > 0)
        // The same request three times: the third block is :method and :scheme (2 bytes), the path (76), apns-id (46)
        // and one byte for each of the six repeated fields.
        for _ in 0..<3 {
            var block = ByteBuffer()
            encoder.write(request(600), authority: "api.push.apple.com", bearer: "bearer t", into: &block)
            lastLength = block.readableBytes
            #expect(try decoder.decodeHeaders(from: &block).count == 10)
        }
        #expect(lastLength == 2 + 76 + 46 + 6)
    }

    /// The server's table size followed: 0 (nothing indexed, the update at the next block's start), then 4,096 again.
    @Test func theServersTableSizeIsFollowed() throws {
        var encoder = RequestHeaderEncoder()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        func block(_ i: Int) throws -> (first: UInt8, fields: [String]) {
            var bytes = ByteBuffer()
            encoder.write(request(i), authority: "h", bearer: "bearer t", into: &bytes)
            let first = bytes.getInteger(at: bytes.readerIndex, as: UInt8.self)!
            return (first, try decoder.decodeHeaders(from: &bytes).map { "\($0.name): \($0.value)" })
        }
        for i in 0..<3 { _ = try block(i) }
        #expect(encoder.entryCount == 6)
        encoder.setMaxTableSize(0)
        #expect(encoder.entryCount == 0)
        let afterShrink = try block(3)
        #expect(afterShrink.first == 0x20 && afterShrink.fields == expectedFields(request(3), authority: "h", bearer: "bearer t"))
        for i in 4..<7 { #expect(try block(i).fields == expectedFields(request(i), authority: "h", bearer: "bearer t")) }
        #expect(encoder.entryCount == 0)
        encoder.setMaxTableSize(100_000)  // at most 4,096 used
        let afterGrow = try block(7)
        #expect(afterGrow.first == 0x3F)  // 0x20 | 31, then 4,096 - 31 in the next bytes
        for i in 8..<10 { _ = try block(i) }
        #expect(encoder.entryCount == 6)
        // Down and up between two blocks: the smallest, then the final size.
        encoder.setMaxTableSize(50)
        encoder.setMaxTableSize(4096)
        var bytes = ByteBuffer()
        encoder.write(request(10), authority: "h", bearer: "bearer t", into: &bytes)
        #expect(bytes.getInteger(at: bytes.readerIndex, as: UInt8.self) == 0x3F && bytes.getInteger(at: bytes.readerIndex + 1, as: UInt8.self) == 50 - 31)
        #expect(try decoder.decodeHeaders(from: &bytes).map { "\($0.name): \($0.value)" } == expectedFields(request(10), authority: "h", bearer: "bearer t"))
    }
}

struct HTTP2ClientSessionTests {
    @Test func thePrefaceAnnouncesNoPushAndLargeWindows() {
        var session = HTTP2ClientSession()
        let output = session.takeOutput()!
        #expect(output.readableBytesView.starts(with: HTTP2Wire.preface))
        let frames = Written.all(output)
        #expect(frames.map(\.type) == [HTTP2Wire.settings, HTTP2Wire.windowUpdate])
        var settings = frames[0].payload
        var parameters: [UInt16: UInt32] = [:]
        while let id = settings.readInteger(as: UInt16.self), let value = settings.readInteger(as: UInt32.self) { parameters[id] = value }
        #expect(parameters == [0x2: 0, 0x3: 0, 0x4: UInt32(HTTP2ClientSession.streamWindow)])
    }

    @Test func requestsGoOutAndResponsesComeBack() throws {
        var client = Client()
        var server = ServerFrames.preface()
        var written = try client.feed(server)
        #expect(written.map(\.type) == [HTTP2Wire.settings] && written[0].flags == HTTP2Wire.ack)
        guard case .settings(100) = client.events.first else { Issue.record("\(client.events)"); return }
        client.session.send(request(1), stream: 1, authority: nil, bearer: nil)
        client.session.send(request(2), stream: 3, authority: nil, bearer: nil)
        written = Written.all(client.session.takeOutput())
        #expect(written.map(\.type) == [HTTP2Wire.headers, HTTP2Wire.data, HTTP2Wire.headers, HTTP2Wire.data])
        #expect(written.map(\.stream) == [1, 1, 3, 3])
        #expect(written[1].flags == HTTP2Wire.endStream && written[1].payload.readableBytes == 30)
        server = ServerFrames()
        server.response(3, status: 200)
        server.response(1, status: 400, body: #"{"reason":"BadTopic"}"#)
        _ = try client.feed(server)
        #expect(client.events.count == 3)
        if case .headers(3, 200, true, nil) = client.events[0] {} else { Issue.record("\(client.events[0])") }
        if case .headers(1, 400, false, nil) = client.events[1] {} else { Issue.record("\(client.events[1])") }
        if case .data(1, let body, true) = client.events[2] {
            #expect(String(buffer: body) == #"{"reason":"BadTopic"}"#)
        } else {
            Issue.record("\(client.events[2])")
        }
        #expect(client.session.openStreams == 0)
    }

    /// A server that sends PINGs and SETTINGS and reads none of the answers (this side's writes do not drain): past
    /// the limit the connection ends with ENHANCE_YOUR_CALM. While writes drain any number is answered, and the count
    /// starts again each time they drain.
    @Test func aServerSendingControlFramesWhileItReadsNothingEndsTheConnection() throws {
        let limit = HTTP2ClientSession.maxAcknowledgementsWhileBlocked
        func flood(_ count: Int) -> ServerFrames {
            var frames = ServerFrames()
            for i in 0..<count {
                if i % 2 == 0 {
                    frames.frame(HTTP2Wire.ping, stream: 0, Array(repeating: UInt8(truncatingIfNeeded: i), count: 8))
                } else {
                    frames.frame(HTTP2Wire.settings, stream: 0)
                }
            }
            return frames
        }
        // Sent no faster than the control-frame rate allows (100 frames each 15 s), so only this limit applies.
        var clock: Int64 = 0
        func paced(_ client: inout Client, _ count: Int) throws -> [Written] {
            var written: [Written] = []
            for start in stride(from: 0, to: count, by: 100) {
                clock += 15_000_000_000
                written += try client.feed(flood(min(100, count - start)), now: clock)
            }
            return written
        }
        var draining = Client()
        _ = try draining.feed(.preface())
        let answers = try paced(&draining, limit + 1)
        #expect(answers.count == limit + 1 && answers.allSatisfy { $0.flags == HTTP2Wire.ack })

        var blocked = Client()
        _ = try blocked.feed(.preface())
        blocked.session.writable = false
        _ = try paced(&blocked, limit)
        clock += 15_000_000_000
        #expect(blocked.failure(flood(1), now: clock) == .enhanceYourCalm)

        var drainedBetween = Client()
        _ = try drainedBetween.feed(.preface())
        drainedBetween.session.writable = false
        _ = try paced(&drainedBetween, limit)
        drainedBetween.session.writable = true
        drainedBetween.session.writable = false
        #expect(try paced(&drainedBetween, limit).count == limit)
    }

    /// A `:status` that is not three digits from 100 to 599 is no status: the request counts as not answered.
    @Test func aStatusOutsideRFC9110sFormIsNoStatus() throws {
        let cases: [(String, Int?)] = [
            ("200", 200), ("299", 299), ("599", 599), ("410", 410), ("+200", nil), ("0200", nil), ("2000", nil),
            ("600", nil), ("099", nil), ("20", nil), ("-20", nil), (" 200", nil), ("2 0", nil), ("", nil), ("\u{0662}00", nil),
        ]
        for (text, expected) in cases {
            var client = Client()
            _ = try client.feed(.preface())
            client.session.send(request(1), stream: 1, authority: nil, bearer: nil)
            _ = client.session.takeOutput()
            var server = ServerFrames()
            server.response(1, statusText: text)
            _ = try client.feed(server)
            guard case .headers(1, let status, true, nil)? = client.events.last else {
                Issue.record("\(text): \(client.events)")
                continue
            }
            #expect(status == expected, "\(text)")
        }
    }

    /// Bodies larger than the connection's window: sent as far as it goes, the rest once the server opens it, in the
    /// order the requests were sent.
    @Test func bodiesWaitForTheServersWindowsInOrder() throws {
        var client = Client()
        _ = try client.feed(.preface([(0x3, 100), (0x5, 16_384)]))
        for i in 0..<15 { client.session.send(request(i, body: 5000), stream: UInt32(2 * i + 1), authority: nil, bearer: nil) }
        let first = Written.all(client.session.takeOutput()).filter { $0.type == HTTP2Wire.data }
        #expect(first.reduce(0) { $0 + $1.payload.readableBytes } == 65_535)
        let streams: [UInt32] = (0..<14).map { (i: Int) -> UInt32 in UInt32(2 * i + 1) }
        #expect(first.map(\.stream) == streams)
        #expect(first.last!.flags == 0 && first.last!.payload.readableBytes == 535)
        var server = ServerFrames()
        server.windowUpdate(0, 10_000)
        let rest = try client.feed(server).filter { $0.type == HTTP2Wire.data }
        #expect(rest.map(\.stream) == [27, 29] && rest.allSatisfy { $0.flags == HTTP2Wire.endStream })
        #expect(rest.map(\.payload.readableBytes) == [4465, 5000])
    }

    @Test func aStreamWindowOfZeroHoldsTheBodyUntilOpened() throws {
        var client = Client()
        _ = try client.feed(.preface([(0x4, 0)]))
        client.session.send(request(1, body: 10), stream: 1, authority: nil, bearer: nil)
        #expect(Written.all(client.session.takeOutput()).map(\.type) == [HTTP2Wire.headers])
        var server = ServerFrames()
        server.windowUpdate(1, 4)
        let part = try client.feed(server)
        #expect(part.map(\.type) == [HTTP2Wire.data] && part[0].payload.readableBytes == 4 && part[0].flags == 0)
        server = ServerFrames()
        server.windowUpdate(1, 100)
        let end = try client.feed(server)
        #expect(end.map(\.payload.readableBytes) == [6] && end[0].flags == HTTP2Wire.endStream)
    }

    @Test func aLongHeaderBlockGoesInContinuationFrames() throws {
        var client = Client()
        _ = try client.feed(.preface())
        let bearer = "bearer " + String(repeating: "t", count: 40_000)
        client.session.send(request(1), stream: 1, authority: nil, bearer: bearer)
        let frames = Written.all(client.session.takeOutput())
        #expect(frames.map(\.type) == [HTTP2Wire.headers, HTTP2Wire.continuation, HTTP2Wire.continuation, HTTP2Wire.data])
        #expect(frames.map(\.flags) == [0, 0, HTTP2Wire.endHeaders, HTTP2Wire.endStream])
        var block = ByteBuffer()
        for var frame in frames.prefix(3) { block.writeBuffer(&frame.payload) }
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator(), maxDynamicTableSize: 4096, maxHeaderListSize: 1 << 20)
        #expect(try decoder.decodeHeaders(from: &block).first(name: "authorization") == bearer)
    }

    @Test func resetsGoAwayAndCancelledStreams() throws {
        var client = Client()
        _ = try client.feed(.preface())
        for id: UInt32 in [1, 3, 5, 7] { client.session.send(request(Int(id)), stream: id, authority: nil, bearer: nil) }
        _ = client.session.takeOutput()
        client.session.cancel(5)
        let cancel = Written.all(client.session.takeOutput())
        #expect(cancel.map(\.type) == [HTTP2Wire.rstStream] && cancel[0].stream == 5)
        var server = ServerFrames()
        server.frame(HTTP2Wire.rstStream, stream: 1, [0, 0, 0, 7])
        server.response(5, status: 200)  // the cancelled stream's answer: decoded, not reported
        server.frame(HTTP2Wire.rstStream, stream: 1, [0, 0, 0, 2])  // on a stream already reset: nothing
        server.frame(HTTP2Wire.goAway, stream: 0, [0, 0, 0, 3, 0, 0, 0, 0])
        server.response(3, status: 200)
        _ = try client.feed(server)
        #expect(client.events.count == 3)
        if case .reset(1, 7) = client.events[0] {} else { Issue.record("\(client.events[0])") }
        if case .goAway(3) = client.events[1] {} else { Issue.record("\(client.events[1])") }
        if case .headers(3, 200, true, nil) = client.events[2] {} else { Issue.record("\(client.events[2])") }
        // 1 reset, 3 answered, 5 cancelled, 7 above the GOAWAY (forgotten as the connection does): none open.
        client.session.forget(7)
        #expect(client.session.openStreams == 0)
    }

    /// A stream above a GOAWAY's last id sends no more of its body when the window opens.
    @Test func nothingMoreIsSentOnStreamsAboveAGoAway() throws {
        var client = Client()
        _ = try client.feed(.preface([(0x4, 10)]))
        client.session.send(request(1, body: 20), stream: 1, authority: nil, bearer: nil)
        client.session.send(request(2, body: 20), stream: 3, authority: nil, bearer: nil)
        _ = client.session.takeOutput()
        var server = ServerFrames()
        server.frame(HTTP2Wire.goAway, stream: 0, [0, 0, 0, 1, 0, 0, 0, 0])
        server.windowUpdate(1, 100)
        server.windowUpdate(3, 100)
        let data = try client.feed(server).filter { $0.type == HTTP2Wire.data }
        #expect(data.map(\.stream) == [1] && data[0].flags == HTTP2Wire.endStream)
    }

    @Test func aPingIsAnsweredAndOursGoOut() throws {
        var client = Client()
        var server = ServerFrames.preface()
        server.frame(HTTP2Wire.ping, stream: 0, [1, 2, 3, 4, 5, 6, 7, 8])
        let written = try client.feed(server).filter { $0.type == HTTP2Wire.ping }
        #expect(written.count == 1 && written[0].flags == HTTP2Wire.ack)
        let echoed: [UInt8] = Array(written[0].payload.readableBytesView)
        #expect(echoed == [1, 2, 3, 4, 5, 6, 7, 8])
        client.session.ping(2)
        let ours = Written.all(client.session.takeOutput())
        #expect(ours.count == 1 && ours[0].type == HTTP2Wire.ping && ours[0].flags == 0)
    }

    @Test func whatAServerMustNotSendEndsTheConnection() {
        func check(_ name: String, _ expected: HTTP2Wire.ErrorCode, preface: Bool = true, _ write: (inout ServerFrames) -> Void) {
            var client = Client()
            client.session.send(request(1), stream: 1, authority: nil, bearer: nil)
            _ = client.session.takeOutput()
            var server = preface ? ServerFrames.preface() : ServerFrames()
            write(&server)
            #expect(client.failure(server) == expected, "\(name)")
        }
        check("first frame not SETTINGS", .protocolError, preface: false) { $0.frame(HTTP2Wire.ping, stream: 0, Array(repeating: 0, count: 8)) }
        check("PUSH_PROMISE", .protocolError) { $0.frame(HTTP2Wire.pushPromise, flags: HTTP2Wire.endHeaders, stream: 1, [0, 0, 0, 2, 0x88]) }
        check("SETTINGS_ENABLE_PUSH 1", .protocolError) { $0.frame(HTTP2Wire.settings, stream: 0, [0, 2, 0, 0, 0, 1]) }
        check("a frame over 16,384 bytes", .frameSizeError) { $0.frame(HTTP2Wire.data, stream: 1, Array(repeating: 0, count: 16_385)) }
        check("DATA on stream 0", .protocolError) { $0.frame(HTTP2Wire.data, stream: 0, [1]) }
        check("HEADERS on a stream never opened", .protocolError) { $0.response(5, status: 200) }
        check("HEADERS on an even stream", .protocolError) { $0.response(2, status: 200) }
        check("an HPACK index past the tables", .compressionError) { $0.frame(HTTP2Wire.headers, flags: 0x5, stream: 1, [0xFF, 0x40]) }
        check("CONTINUATION without HEADERS", .protocolError) { $0.frame(HTTP2Wire.continuation, flags: HTTP2Wire.endHeaders, stream: 1, [0x88]) }
        check("a frame inside a header block", .protocolError) {
            $0.frame(HTTP2Wire.headers, stream: 1, [0x88])
            $0.frame(HTTP2Wire.ping, stream: 0, Array(repeating: 0, count: 8))
        }
        check("WINDOW_UPDATE of 0 on the connection", .protocolError) { $0.windowUpdate(0, 0) }
        check("the send window over 2^31-1", .flowControlError) { $0.windowUpdate(0, 0x7FFF_FFFF) }
        check("DATA beyond the connection's window", .flowControlError) {
            for _ in 0..<65 { $0.frame(HTTP2Wire.data, stream: 1, Array(repeating: 0, count: 16_384)) }
        }
        check("GOAWAY of 7 bytes", .frameSizeError) { $0.frame(HTTP2Wire.goAway, stream: 0, Array(repeating: 0, count: 7)) }
        check("RST_STREAM on stream 0", .protocolError) { $0.frame(HTTP2Wire.rstStream, stream: 0, [0, 0, 0, 8]) }
        check("GOAWAY whose last stream id grows", .protocolError) {
            $0.frame(HTTP2Wire.goAway, stream: 0, [0, 0, 0, 1, 0, 0, 0, 0])
            $0.frame(HTTP2Wire.goAway, stream: 0, [0, 0, 0, 3, 0, 0, 0, 0])
        }
    }

    // MARK: SPEC section 13: what a server may cost this side

    /// A SETTINGS frame of more than 32 parameters ends the connection with ENHANCE_YOUR_CALM; 32 are taken.
    @Test func aSettingsFrameOfMoreThan32ParametersEndsTheConnection() throws {
        var client = Client()
        _ = try client.feed(.preface())
        var ok = ServerFrames()
        HTTP2Wire.writeSettings(Array(repeating: (HTTP2Wire.Setting.maxConcurrentStreams, 10), count: 32), to: &ok.bytes)
        #expect(try client.feed(ok).map(\.type) == [HTTP2Wire.settings])
        var tooMany = ServerFrames()
        HTTP2Wire.writeSettings(Array(repeating: (HTTP2Wire.Setting.maxConcurrentStreams, 10), count: 33), to: &tooMany.bytes)
        #expect(client.failure(tooMany) == .enhanceYourCalm)
    }

    /// SETTINGS_INITIAL_WINDOW_SIZE named twice in one frame: the last value applies, once. Applied one by one, the
    /// first would have pushed the open stream's window past 2^31-1 (a FLOW_CONTROL_ERROR).
    @Test func theLastInitialWindowSizeOfAFrameWins() throws {
        var client = Client()
        _ = try client.feed(.preface())
        client.session.send(request(1, body: 100_000), stream: 1, authority: nil, bearer: nil)
        _ = client.session.takeOutput()
        var server = ServerFrames()
        server.windowUpdate(1, 0x7FFF_FFFF - 65_535 - 10)
        server.windowUpdate(0, 1_000_000)
        HTTP2Wire.writeSettings([(HTTP2Wire.Setting.initialWindowSize, 1_000_000), (HTTP2Wire.Setting.initialWindowSize, 65_535)], to: &server.bytes)
        let written = try client.feed(server)
        #expect(written.contains { $0.type == HTTP2Wire.settings && $0.flags == HTTP2Wire.ack })
        #expect(client.session.openStreams == 1)
    }

    /// Frames that carry no progress are bounded: a second empty DATA frame in a row, a sixth CONTINUATION of one
    /// header block, a 201st control frame or RST_STREAM within 30 s end the connection with ENHANCE_YOUR_CALM.
    @Test func framesWithoutProgressAreBounded() throws {
        func opened() throws -> Client {
            var client = Client()
            _ = try client.feed(.preface())
            for id: UInt32 in stride(from: 1, through: 401, by: 2) { client.session.send(request(Int(id)), stream: id, authority: nil, bearer: nil) }
            _ = client.session.takeOutput()
            return client
        }
        var empty = try opened()
        var one = ServerFrames()
        one.frame(HTTP2Wire.data, stream: 1)
        _ = try empty.feed(one)
        #expect(empty.failure(one) == .enhanceYourCalm)
        var separated = try opened()
        var between = ServerFrames()
        between.frame(HTTP2Wire.data, stream: 1)
        between.frame(HTTP2Wire.data, stream: 1, [0x20])
        between.frame(HTTP2Wire.data, stream: 1)
        _ = try separated.feed(between)

        var continued = try opened()
        var pieces = ServerFrames()
        pieces.frame(HTTP2Wire.headers, stream: 1, [])
        for _ in 0..<5 { pieces.frame(HTTP2Wire.continuation, stream: 1, []) }
        _ = try continued.feed(pieces)
        var sixth = ServerFrames()
        sixth.frame(HTTP2Wire.continuation, stream: 1, [])
        #expect(continued.failure(sixth) == .enhanceYourCalm)

        for (name, write) in [
            ("PING", { (f: inout ServerFrames, _: UInt32) in f.frame(HTTP2Wire.ping, stream: 0, Array(repeating: 0, count: 8)) }),
            ("SETTINGS", { (f: inout ServerFrames, _: UInt32) in f.frame(HTTP2Wire.settings, stream: 0) }),
            ("PRIORITY", { (f: inout ServerFrames, _: UInt32) in f.frame(HTTP2Wire.priority, stream: 1, [0, 0, 0, 0, 16]) }),
            ("RST_STREAM", { (f: inout ServerFrames, i: UInt32) in f.frame(HTTP2Wire.rstStream, stream: 2 * i + 1, [0, 0, 0, 8]) }),
        ] as [(String, (inout ServerFrames, UInt32) -> Void)] {
            var client = try opened()
            var burst = ServerFrames()
            for i: UInt32 in 0..<200 { write(&burst, i) }
            _ = try client.feed(burst, now: 1_000_000_000)  // the preface's credit back: a full 200
            var more = ServerFrames()
            write(&more, 200)
            #expect(client.failure(more, now: 1_000_000_000) == .enhanceYourCalm, "\(name)")
            // Paced at the rate, the same frames go on.
            var paced = try opened()
            for i: UInt32 in 0..<400 {
                var frame = ServerFrames()
                write(&frame, i % 200)
                _ = try paced.feed(frame, now: Int64(i) * 150_000_000)
            }
        }
    }

    /// An informational response that ends its stream is a stream error: RST_STREAM PROTOCOL_ERROR and an event
    /// that sends the request again, not a stream left waiting for its deadline.
    @Test func anInformationalResponseThatEndsTheStreamIsAStreamError() throws {
        var client = Client()
        _ = try client.feed(.preface())
        client.session.send(request(1), stream: 1, authority: nil, bearer: nil)
        _ = client.session.takeOutput()
        var server = ServerFrames()
        server.response(1, status: 103)
        let written = try client.feed(server)
        #expect(written.map(\.type) == [HTTP2Wire.rstStream])
        #expect(written.first.map { $0.payload.getInteger(at: $0.payload.readerIndex, as: UInt32.self) } == HTTP2Wire.ErrorCode.protocolError.rawValue)
        guard case .streamError(1, _)? = client.events.first else { Issue.record("\(client.events)"); return }
        #expect(client.session.openStreams == 0)
    }

    /// The SETTINGS acknowledgements are counted for the connection's timer.
    @Test func settingsAcknowledgementsAreCounted() throws {
        var client = Client()
        #expect(client.session.settingsAwaitingAck == 1)
        var server = ServerFrames.preface()
        server.frame(HTTP2Wire.settings, flags: HTTP2Wire.ack, stream: 0)
        _ = try client.feed(server)
        #expect(client.session.settingsAwaitingAck == 0 && client.session.settingsAcknowledged == 1)
    }
}
