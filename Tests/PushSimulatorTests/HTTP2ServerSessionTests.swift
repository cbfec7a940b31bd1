import Logging
import NIOCore
import NIOEmbedded
import NIOHPACK
import Testing
@testable import PushSimulator

struct HTTP2ServerSessionTests {
    @Test func thePrefaceSaysTheStreamLimitAndOpensTheConnectionWindow() {
        var session = HTTP2ServerSession(streamLimit: 7, bodyLimit: 100)
        let frames = ServerFrame.all(in: session.takeOutput())
        #expect(frames.map(\.type) == [0x4, 0x8])
        var payload = frames[0].payload
        #expect(payload.readableBytes == 12)
        #expect(payload.readInteger(as: UInt16.self) == 3 && payload.readInteger(as: UInt32.self) == 7)
        #expect(payload.readInteger(as: UInt16.self) == 6)
        #expect(frames[1].words == [UInt32(HTTP2ServerSession.connectionWindow - 65_535)])
    }

    @Test func aRequestIsHandedOutAtEndStreamAndItsAnswersAreDecodable() throws {
        var client = ClientFrames.opened()
        client.headers(1)
        client.data(1, "{\"aps\":{}}")
        client.headers(3, endStream: true)
        var session = Session()
        let frames = try session.feed(client)
        #expect(frames.map(\.type) == [0x4])  // the SETTINGS ACK
        #expect(frames[0].flags == 0x1)
        guard case .request(1, let headers, let body) = session.events.first else { Issue.record("no request"); return }
        #expect(headers[":path"] == ["/3/device/abc"] && body == Array("{\"aps\":{}}".utf8))
        #expect(session.requests == [1, 3])
        #expect(session.session.openStreams == 2)

        let first = session.session.answer(1, status: 200, apnsID: "A-1", body: [])
        let second = session.session.answer(3, status: 410, apnsID: "A-3", body: Array(#"{"reason":"Unregistered"}"#.utf8))
        let again = session.session.answer(1, status: 200, apnsID: "again", body: [])
        #expect(first && second && !again)
        let answers = ServerFrame.all(in: session.session.takeOutput())
        #expect(answers.map(\.type) == [0x1, 0x1, 0x0])
        #expect(answers.map(\.flags) == [0x5, 0x4, 0x1])
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        var okBlock = answers[0].payload, goneBlock = answers[1].payload
        let ok = try decoder.decodeHeaders(from: &okBlock)
        #expect(ok.map(\.name) == [":status", "apns-id"] && ok[":status"] == ["200"] && ok["apns-id"] == ["A-1"])
        let gone = try decoder.decodeHeaders(from: &goneBlock)
        #expect(gone[":status"] == ["410"] && gone["apns-id"] == ["A-3"] && gone["content-type"] == ["application/json"])
        #expect(String(buffer: answers[2].payload) == #"{"reason":"Unregistered"}"#)
        #expect(session.session.openStreams == 0)
    }

    @Test func everyStatusTheSimulatorSendsDecodes() throws {
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        for status in [200, 400, 403, 405, 410, 413, 429, 500, 503] {
            var client = ClientFrames.opened()
            client.headers(1, endStream: true)
            var session = Session()
            _ = try session.feed(client)
            session.session.answer(1, status: status, apnsID: "id", body: [])
            var block = try #require(ServerFrame.all(in: session.session.takeOutput()).first).payload
            #expect(try decoder.decodeHeaders(from: &block)[":status"] == [String(status)])
        }
    }

    @Test func bytesArrivingOneAtATimeGiveTheSameRequests() throws {
        var client = ClientFrames.opened()
        client.headers(1)
        client.data(1, String(repeating: "x", count: 40), endStream: false)
        client.data(1, "y")
        client.headers(3, endStream: true)
        var session = HTTP2ServerSession(streamLimit: 4, bodyLimit: 100)
        var input = ByteBuffer()
        var bodies: [UInt32: [UInt8]] = [:]
        for byte in client.bytes.readableBytesView {
            input.writeInteger(byte)
            while let event = try session.next(from: &input) {
                if case .request(let stream, _, let body) = event { bodies[stream] = body }
            }
        }
        #expect(bodies == [1: Array((String(repeating: "x", count: 40) + "y").utf8), 3: []])
    }

    @Test func aHeaderBlockInContinuationFramesIsOneRequest() throws {
        var client = ClientFrames.opened()
        let block = client.block(ClientFrames.request)
        client.frame(0x1, flags: 0x1, stream: 1, Array(block.prefix(5)))
        client.frame(0x9, stream: 1, Array(block.dropFirst(5).prefix(3)))
        client.frame(0x9, flags: 0x4, stream: 1, Array(block.dropFirst(8)))
        var session = Session()
        _ = try session.feed(client)
        #expect(session.requests == [1])
    }

    @Test func aBodyIsKeptUpToTheLimitAndCountedWhole() throws {
        var client = ClientFrames.opened()
        client.headers(1)
        client.data(1, String(repeating: "z", count: 300))
        var session = Session()
        _ = try session.feed(client)
        guard case .request(_, _, let body) = session.events.first else { Issue.record("no request"); return }
        #expect(body.count == 100)
    }

    @Test func connectionErrorsSendGoAwayWithTheirCode() {
        func check(_ name: String, _ expected: ErrorCode, _ write: (inout ClientFrames) -> Void,
                   opened: Bool = true) {
            var client = opened ? ClientFrames.opened() : ClientFrames()
            write(&client)
            var session = Session()
            let failure = session.failure(client)
            #expect(failure?.0 == expected, "\(name)")
            #expect(failure?.1 == expected.rawValue, "\(name): GOAWAY")
        }
        check("not the preface", .protocolError, { $0.bytes.writeString("GET / HTTP/1.1\r\n\r\n") }, opened: false)
        check("first frame not SETTINGS", .protocolError, {
            $0.bytes.writeString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            $0.frame(0x6, stream: 0, Array(repeating: 0, count: 8))
        }, opened: false)
        check("frame over 16,384 bytes", .frameSizeError, { $0.frame(0x0, stream: 1, Array(repeating: 0, count: 16_385)) })
        check("DATA on stream 0", .protocolError, { $0.data(0) })
        check("DATA on an idle stream", .protocolError, { $0.data(5) })
        check("HEADERS on stream 0", .protocolError, { $0.headers(0) })
        check("HEADERS on an even stream", .protocolError, { $0.headers(2) })
        check("a stream id going down", .streamClosed, { $0.headers(5, endStream: true); $0.headers(3, endStream: true) })
        check("HEADERS after END_STREAM", .streamClosed, { $0.headers(1, endStream: true); $0.headers(1, endStream: true) })
        check("PUSH_PROMISE", .protocolError, { $0.frame(0x5, stream: 1, [0, 0, 0, 2]) })
        check("CONTINUATION without HEADERS", .protocolError, { $0.frame(0x9, flags: 0x4, stream: 1, [0x82]) })
        check("a frame inside a header block", .protocolError, {
            $0.frame(0x1, stream: 1, [0x83])
            $0.frame(0x6, stream: 0, Array(repeating: 0, count: 8))
        })
        check("CONTINUATION on another stream", .protocolError, {
            $0.frame(0x1, stream: 1, [0x83])
            $0.frame(0x9, flags: 0x4, stream: 3, [0x84])
        })
        check("an HPACK index of 0", .compressionError, { $0.frame(0x1, flags: 0x5, stream: 1, [0x80]) })
        check("an HPACK index past the tables", .compressionError, { $0.frame(0x1, flags: 0x5, stream: 1, [0xFF, 0x40]) })
        check("padding longer than the frame", .protocolError, { $0.frame(0x1, flags: 0x5 | 0x8, stream: 1, [9, 0x82]) })
        check("a stream depending on itself", .protocolError, { $0.frame(0x1, flags: 0x5 | 0x20, stream: 1, [0, 0, 0, 1, 16]) })
        check("SETTINGS of 5 bytes", .frameSizeError, { $0.frame(0x4, stream: 0, [0, 2, 0, 0, 0]) })
        check("SETTINGS on a stream", .protocolError, { $0.frame(0x4, stream: 1) })
        check("SETTINGS ACK with a payload", .frameSizeError, { $0.frame(0x4, flags: 0x1, stream: 0, [0, 2, 0, 0, 0, 0]) })
        check("ENABLE_PUSH 2", .protocolError, { $0.settings([(0x2, 2)]) })
        check("INITIAL_WINDOW_SIZE over 2^31-1", .flowControlError, { $0.settings([(0x4, 1 << 31)]) })
        check("MAX_FRAME_SIZE under 16,384", .protocolError, { $0.settings([(0x5, 100)]) })
        check("PING of 7 bytes", .frameSizeError, { $0.frame(0x6, stream: 0, Array(repeating: 0, count: 7)) })
        check("PING on a stream", .protocolError, { $0.frame(0x6, stream: 1, Array(repeating: 0, count: 8)) })
        check("RST_STREAM on an idle stream", .protocolError, { $0.frame(0x3, stream: 9, [0, 0, 0, 8]) })
        check("RST_STREAM of 3 bytes", .frameSizeError, { $0.headers(1); $0.frame(0x3, stream: 1, [0, 0, 8]) })
        check("GOAWAY on a stream", .protocolError, { $0.frame(0x7, stream: 1, Array(repeating: 0, count: 8)) })
        check("WINDOW_UPDATE of 0 on the connection", .protocolError, { $0.windowUpdate(0, 0) })
        check("the connection's send window over 2^31-1", .flowControlError, { $0.windowUpdate(0, 0x7FFF_FFFF) })
        check("WINDOW_UPDATE on an idle stream", .protocolError, { $0.windowUpdate(7, 1) })
        check("a stream after the client's GOAWAY", .protocolError, {
            $0.frame(0x7, stream: 0, Array(repeating: 0, count: 8))
            $0.headers(1, endStream: true)
        })
        // SPEC section 13.
        check("SETTINGS of 33 parameters", .enhanceYourCalm, { $0.settings(Array(repeating: (0x3, 1), count: 33)) })
        check("PRIORITY of 4 bytes on an idle stream", .frameSizeError, { $0.frame(0x2, stream: 9, [0, 0, 0, 0]) })
        check("an idle stream depending on itself", .protocolError, { $0.frame(0x2, stream: 9, [0, 0, 0, 9, 16]) })
        check("two empty DATA frames in a row", .enhanceYourCalm, {
            $0.headers(1)
            $0.data(1, "", endStream: false)
            $0.data(1, "", endStream: false)
        })
        check("six CONTINUATION frames", .enhanceYourCalm, {
            $0.frame(0x1, stream: 1, [])
            for _ in 0..<6 { $0.frame(0x9, stream: 1, []) }
        })
        check("201 PINGs at once", .enhanceYourCalm, { for _ in 0..<201 { $0.frame(0x6, stream: 0, Array(repeating: 0, count: 8)) } })
        check("201 SETTINGS at once", .enhanceYourCalm, { for _ in 0..<200 { $0.settings([]) } })  // and the preface's
        check("201 PRIORITY frames at once", .enhanceYourCalm, { for i: UInt32 in 0..<201 { $0.frame(0x2, stream: 2 * i + 1, [0, 0, 0, 0, 16]) } })
        check("rapid reset: 201 streams opened and reset at once", .enhanceYourCalm, {
            for i: UInt32 in 0..<201 {
                $0.headers(2 * i + 1)
                $0.frame(0x3, stream: 2 * i + 1, [0, 0, 0, 8])
            }
        })
    }

    /// The control-frame and reset limits are rates: 400 PINGs and 400 opened-and-reset streams over 60 s pass.
    @Test func controlFramesAtTheRateAreServed() throws {
        var session = Session(streamLimit: 1000)
        var client = ClientFrames.opened()
        _ = try session.feed(client)
        for i: UInt32 in 0..<400 {
            client = ClientFrames(bytes: ByteBuffer(), encoder: client.encoder)
            client.frame(0x6, stream: 0, Array(repeating: 0, count: 8))
            client.headers(2 * i + 1)
            client.frame(0x3, stream: 2 * i + 1, [0, 0, 0, 8])
            let frames = try session.feed(client, now: Int64(i) * 150_000_000)
            #expect(frames.map(\.type) == [0x6])
        }
    }

    /// SETTINGS_INITIAL_WINDOW_SIZE named twice in one frame: the last value applies, once. Applied one by one, the
    /// first would have pushed the waiting stream's window past 2^31-1 and reset it.
    @Test func theLastInitialWindowSizeOfAFrameWins() throws {
        var client = ClientFrames.opened(settings: [(0x4, 0)])
        client.headers(1, endStream: true)
        var session = Session()
        _ = try session.feed(client)
        var more = ClientFrames()
        more.windowUpdate(1, 0x7FFF_FFF0)
        more.settings([(0x4, 1000), (0x4, 0)])
        #expect(try session.feed(more).map(\.type) == [0x4])
        #expect(session.session.isWaiting(1))
    }

    @Test func aStreamOverTheLimitIsRefusedAndWhatFollowsOnItIgnored() throws {
        var client = ClientFrames.opened()
        client.headers(1)
        client.headers(3)
        client.headers(5, endStream: true)
        client.data(5)  // a stream refused: its DATA ignored, not reset again
        client.data(1)
        var session = Session(streamLimit: 2)
        let frames = try session.feed(client)
        #expect(resets(frames) == [5: ErrorCode.refusedStream.rawValue])
        #expect(session.requests == [1])
        session.session.answer(1, status: 200, apnsID: "a", body: [])
        var next = ClientFrames()
        next.encoder = client.encoder
        next.headers(7, endStream: true)
        _ = try session.feed(next)
        #expect(session.requests == [7])
    }

    @Test func aMalformedBlockResetsItsStreamOnlyAndItsDataIsIgnored() throws {
        var client = ClientFrames.opened()
        client.headers(1, [(":method", "POST"), (":scheme", "https"), (":path", "/3/device/abc"), ("Upper", "x")])
        client.data(1)
        client.headers(3, endStream: true)
        var session = Session()
        let frames = try session.feed(client)
        #expect(resets(frames) == [1: ErrorCode.protocolError.rawValue])
        #expect(session.events.count == 2)
        if case .malformed(1, .invalidName) = session.events[0] {} else { Issue.record("\(session.events[0])") }
        #expect(session.requests == [3])
    }

    /// A name HPACK carries as bytes that are not ASCII: the request is malformed, not the connection.
    @Test func aNameThatIsNotASCIIResetsItsStream() throws {
        var client = ClientFrames.opened()
        let block = client.block(ClientFrames.request) + [0x00, 0x02, 0xC3, 0xA9, 0x01, 0x76, 0x00, 0x01, 0xFF, 0x00]
        client.frame(0x1, flags: 0x5, stream: 1, block)
        client.headers(3, endStream: true)
        var session = Session()
        let frames = try session.feed(client)
        #expect(resets(frames) == [1: ErrorCode.protocolError.rawValue])
        #expect(session.requests == [3])
    }

    @Test func trailersMustEndTheStreamAndCarryNoPseudoHeader() throws {
        var client = ClientFrames.opened()
        client.headers(1)
        client.headers(1, [("x-trailer", "1")])
        client.headers(3)
        client.headers(3, [(":path", "/")], endStream: true)
        client.headers(5)
        client.data(5, endStream: false)
        client.headers(5, [("x-trailer", "1")], endStream: true)
        var session = Session()
        let frames = try session.feed(client)
        #expect(resets(frames) == [1: ErrorCode.protocolError.rawValue, 3: ErrorCode.protocolError.rawValue])
        guard case .request(5, let headers, _) = session.events.last else { Issue.record("no request"); return }
        #expect(headers["x-trailer"] == ["1"])
    }

    @Test func dataAfterEndStreamResetsTheStreamAndDropsItsAnswer() throws {
        var client = ClientFrames.opened()
        client.headers(1, endStream: true)
        client.data(1)
        var session = Session()
        let frames = try session.feed(client)
        #expect(resets(frames) == [1: ErrorCode.streamClosed.rawValue])
        let answered = session.session.answer(1, status: 200, apnsID: "a", body: [])
        #expect(!answered)
    }

    @Test func aStreamTheClientResetIsNotAnswered() throws {
        var client = ClientFrames.opened()
        client.headers(1, endStream: true)
        client.frame(0x3, stream: 1, [0, 0, 0, 8])
        var session = Session()
        _ = try session.feed(client)
        #expect(session.requests == [1])
        #expect(!session.session.isWaiting(1))
        let answered = session.session.answer(1, status: 200, apnsID: "a", body: [])
        #expect(!answered)
        #expect(session.session.takeOutput() == nil)
    }

    @Test func anAnswerBodyWaitsForTheClientsWindow() throws {
        var client = ClientFrames.opened(settings: [(0x4, 0)])
        client.headers(1, endStream: true)
        var session = Session()
        _ = try session.feed(client)
        session.session.answer(1, status: 400, apnsID: "a", body: Array(#"{"reason":"BadTopic"}"#.utf8))
        #expect(ServerFrame.all(in: session.session.takeOutput()).map(\.type) == [0x1])
        // Answered, its body waiting: the stream no longer waits for an answer and takes no second one.
        #expect(!session.session.isWaiting(1))
        let again = session.session.answer(1, status: 200, apnsID: "b", body: [])
        #expect(!again)
        #expect(session.session.takeOutput() == nil)
        #expect(session.session.openStreams == 1)
        var update = ClientFrames()
        update.windowUpdate(1, 10)
        #expect(try session.feed(update).isEmpty)  // 10 bytes: not the whole body
        update = ClientFrames()
        update.windowUpdate(1, 100)
        let frames = try session.feed(update)
        #expect(frames.map(\.type) == [0x0] && frames[0].flags == 0x1)
        #expect(String(buffer: frames[0].payload) == #"{"reason":"BadTopic"}"#)
        #expect(session.session.openStreams == 0)
    }

    @Test func aSmallerHeaderTableIsAnnouncedInTheNextAnswer() throws {
        var client = ClientFrames.opened(settings: [(0x1, 0)])
        client.headers(1, endStream: true)
        client.headers(3, endStream: true)
        var session = Session()
        _ = try session.feed(client)
        session.session.answer(1, status: 200, apnsID: "a", body: [])
        session.session.answer(3, status: 200, apnsID: "b", body: [])
        let frames = ServerFrame.all(in: session.session.takeOutput())
        #expect(frames.map { $0.payload.getInteger(at: $0.payload.readerIndex, as: UInt8.self) } == [0x20, 0x88])
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        for frame in frames {
            var block = frame.payload
            #expect(try decoder.decodeHeaders(from: &block)[":status"] == ["200"])
        }
    }

    @Test func pingIsAnsweredWithItsPayload() throws {
        var client = ClientFrames.opened()
        client.frame(0x6, stream: 0, [1, 2, 3, 4, 5, 6, 7, 8])
        client.frame(0x6, flags: 0x1, stream: 0, [1, 2, 3, 4, 5, 6, 7, 8])  // an ACK is not answered
        var session = Session()
        let frames = try session.feed(client).filter { $0.type == 0x6 }
        #expect(frames.count == 1 && frames[0].flags == 0x1)
        #expect(Array(frames[0].payload.readableBytesView) == [1, 2, 3, 4, 5, 6, 7, 8])
    }

    @Test func bodiesGiveBackStreamAndConnectionWindows() throws {
        var client = ClientFrames.opened()
        client.headers(1)
        for _ in 0..<4 { client.frame(0x0, stream: 1, Array(repeating: 0, count: 16_384)) }
        var session = Session()
        let frames = try session.feed(client)
        #expect(frames.filter { $0.type == 0x8 }.map { [$0.stream] + $0.words } == [[1, 32_768], [1, 32_768]])
        session.session.topUpReceiveWindow()
        let topUp = ServerFrame.all(in: session.session.takeOutput())
        #expect(topUp.map { [$0.stream] + $0.words } == [[0, 65_536]])
    }

    @Test func theRaisedLimitIsSentAndApplies() throws {
        var client = ClientFrames.opened()
        client.headers(1)
        client.headers(3)
        var session = Session(streamLimit: 1)
        #expect(resets(try session.feed(client)) == [3: ErrorCode.refusedStream.rawValue])
        session.session.raiseStreamLimit(to: 3)
        let settings = ServerFrame.all(in: session.session.takeOutput())
        #expect(settings.map(\.type) == [0x4] && settings[0].payload.readableBytes == 6)
        var more = ClientFrames()
        more.encoder = client.encoder
        more.headers(5)  // at once, before the client acknowledged it
        more.headers(7)
        more.acknowledgeSettings()
        more.headers(9)
        #expect(resets(try session.feed(more)) == [9: ErrorCode.refusedStream.rawValue])
        #expect(session.session.openStreams == 3)
    }

    /// The preface's limit holds from the first stream, before the client acknowledges it (SPEC section 13): a
    /// client that never does cannot open more streams than it was told.
    @Test func theFirstLimitAppliesFromTheFirstStream() throws {
        var client = ClientFrames.opened(acknowledged: false)
        client.headers(1)
        client.headers(3)
        var session = Session(streamLimit: 1)
        #expect(session.session.settingsAwaitingAck == 1)
        #expect(resets(try session.feed(client)) == [3: ErrorCode.refusedStream.rawValue])
        #expect(session.session.openStreams == 1)
        var more = ClientFrames()
        more.encoder = client.encoder
        more.acknowledgeSettings()
        more.headers(5)
        #expect(resets(try session.feed(more)) == [5: ErrorCode.refusedStream.rawValue])
        #expect(session.session.settingsAwaitingAck == 0 && session.session.settingsAcknowledged == 1)
    }

    /// A bad PRIORITY on a stream that was opened resets it; RST_STREAM is never sent on an idle one (RFC 9113
    /// section 6.4: there it is a connection error).
    @Test func aBadPriorityResetsOnlyAStreamThatWasOpened() throws {
        var client = ClientFrames.opened()
        client.headers(1)
        client.frame(0x2, stream: 1, [0, 0, 0, 0])
        var session = Session()
        #expect(resets(try session.feed(client)) == [1: ErrorCode.frameSizeError.rawValue])
    }

    /// Answer bodies waiting for the client's window leave in order when it opens; those of streams the client
    /// reset meanwhile are skipped.
    @Test func waitingBodiesOfResetStreamsAreSkipped() throws {
        var client = ClientFrames.opened(settings: [(0x4, 0)])
        for stream: UInt32 in [1, 3, 5, 7] { client.headers(stream, endStream: true) }
        var session = Session()
        _ = try session.feed(client)
        for stream: UInt32 in [1, 3, 5, 7] {
            session.session.answer(stream, status: 400, apnsID: "a", body: Array("body \(stream)".utf8))
        }
        _ = session.session.takeOutput()
        var more = ClientFrames()
        more.frame(0x3, stream: 3, [0, 0, 0, 8])
        more.frame(0x3, stream: 5, [0, 0, 0, 8])
        more.settings([(0x4, 100)])
        let frames = try session.feed(more).filter { $0.type == 0x0 }
        #expect(frames.map(\.stream) == [1, 7])
        #expect(frames.map { String(buffer: $0.payload) } == ["body 1", "body 7"])
        #expect(session.session.openStreams == 0)
    }
}
