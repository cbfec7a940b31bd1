// libFuzzer target: the worker's HTTP/2 client session (what a server, or anything on the path, can send to the
// worker), on arbitrary bytes after the session opened streams 1, 3, 5 and 7 with requests of 5,000-byte bodies.
// The first byte of the input picks how the rest is cut into reads, and with its high bit set the session reads as
// while its writes do not drain (acknowledgements counted against their limit).
//
// The reads go through the session as a connection's do, a sequence of frames per read with the clock advancing 10
// ms per byte of a read (so SPEC section 13's rates are met and exceeded), and what was read is discarded after each.
//
// Whatever comes in, the session must not trap, and:
// - what is kept of the input after a read is at most one frame (the rest of an incomplete one);
// - at most the 4 streams it opened are open;
// - its output is always whole frames, and a connection error leaves GOAWAY as the last of them;
// - a response's status is one RFC 9110 allows (100 to 599) or none;
// - what it hands out names only streams it opened, and a stream that has ended (END_STREAM or RST_STREAM) is
//   never named again; a cancelled stream is never named.
import FuzzSupport
import NIOCore
@testable import PushCore
@testable import PushGateway

private let request: APNsRequest = {
    let token = try! DeviceToken(hex: String(repeating: "ab", count: 32))
    return APNsRequest(
        token: token, topic: "com.example.app", pushType: .alert, priority: .immediate, expiration: 0, collapseID: nil,
        apnsID: APNsID(high: 1, low: 2), body: Array(repeating: UInt8(ascii: "x"), count: 5000))
}()

private func checkFrames(_ output: ByteBuffer?) -> UInt8? {
    guard var output else { return nil }
    if output.readableBytesView.starts(with: HTTP2Wire.preface) { output.moveReaderIndex(forwardBy: HTTP2Wire.preface.count) }
    var last: UInt8?
    while let header = HTTP2Wire.FrameHeader(peekingAt: output) {
        precondition(output.readableBytes >= 9 + header.length, "a frame cut short in the output")
        output.moveReaderIndex(forwardBy: 9 + header.length)
        last = header.type
    }
    precondition(output.readableBytes == 0, "bytes after the last frame in the output")
    return last
}

runFuzzer { bytes in
    guard let first = bytes.first else { return }
    let step = Int(first % 16) + 1
    let input = Array(bytes.dropFirst())
    var session = HTTP2ClientSession()
    session.writable = first & 0x80 == 0
    for id: UInt32 in [1, 3, 5, 7] { session.send(request, stream: id, authority: "api.push.apple.com", bearer: "bearer t") }
    session.cancel(7)
    _ = checkFrames(session.takeOutput())
    var buffer = ByteBuffer()
    var ended = Set<UInt32>([7])
    var offset = 0
    var now: Int64 = 0
    reading: while offset < input.count {
        let end = min(input.count, offset + step)
        buffer.writeBytes(input[offset..<end])
        offset = end
        now += Int64(step) * 10_000_000
        defer {
            buffer.keepOnlyUnread()
            precondition(buffer.readableBytes < 9 + HTTP2Wire.maxFrameSize, "more than a frame kept after a read")
            precondition(session.openStreams <= 4, "\(session.openStreams) streams open")
        }
        while true {
            let event: HTTP2ClientSession.Event?
            do {
                event = try session.next(from: &buffer, now: now)
            } catch {
                precondition(checkFrames(session.takeOutput()) == HTTP2Wire.goAway, "a connection error without GOAWAY last")
                break reading
            }
            guard let event else { break }
            let stream: UInt32
            var ends = false
            switch event {
            case .headers(let id, let status, let endStream):
                precondition(status.map { (100...599).contains($0) } ?? true, "a status outside 100-599")
                (stream, ends) = (id, endStream)
            case .data(let id, _, let endStream): (stream, ends) = (id, endStream)
            case .reset(let id, _): (stream, ends) = (id, true)
            case .streamError(let id, _): (stream, ends) = (id, true)
            case .settings, .goAway: continue
            }
            precondition([1, 3, 5].contains(stream), "an event on stream \(stream), which was not open")
            precondition(!ended.contains(stream), "an event on stream \(stream) after it ended")
            if ends { ended.insert(stream) }
        }
        session.topUpReceiveWindow()
        _ = checkFrames(session.takeOutput())
    }
}
