// libFuzzer target: the simulator's HTTP/2 server session (what any client can send to `simulate --api-port`), on
// arbitrary bytes after the client's connection preface. The first byte of the input picks how the rest is cut
// into reads (so frames and header blocks arrive split anywhere); every request handed out is answered, alternately
// 200 and 400 with a body (so the flow-controlled path runs too).
//
// The reads go through the session as a connection's do, a sequence of frames per read with the clock advancing 10
// ms per byte of a read (so SPEC section 13's rates are met and exceeded), and what was read is discarded after each.
//
// Whatever comes in, the session must not trap, and:
// - what is kept of the input after a read is at most one frame (the rest of an incomplete one, or the preface);
// - at most the advertised 4 streams are open, acknowledged or not;
// - its output is always whole frames, and a connection error leaves GOAWAY as the last of them;
// - a request is handed out only for an odd stream id the client opened, each stream at most once, never one reset
//   as malformed; its stream waits for the answer until answered, and takes it.
import FuzzSupport
import NIOCore
import PushCore
@testable import PushSimulator

private let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

/// The frames of a session's output, (type, stream) each; traps unless the bytes are whole frames.
private func frames(_ output: ByteBuffer?) -> [(type: UInt8, stream: UInt32)] {
    guard var output else { return [] }
    var frames: [(UInt8, UInt32)] = []
    while output.readableBytes >= 9 {
        let length = Int(output.readInteger(as: UInt8.self)!) << 16 | Int(output.readInteger(as: UInt16.self)!)
        let type = output.readInteger(as: UInt8.self)!
        _ = output.readInteger(as: UInt8.self)
        let stream = output.readInteger(as: UInt32.self)! & 0x7FFF_FFFF
        precondition(output.readableBytes >= length, "a frame cut short in the output")
        output.moveReaderIndex(forwardBy: length)
        frames.append((type, stream))
    }
    precondition(output.readableBytes == 0, "bytes after the last frame in the output")
    return frames
}

runFuzzer { bytes in
    guard let first = bytes.first else { return }
    let step = Int(first % 16) + 1
    let input = preface + bytes.dropFirst()
    var session = HTTP2ServerSession(streamLimit: 4, bodyLimit: 64)
    _ = frames(session.takeOutput())
    var buffer = ByteBuffer()
    var handedOut = Set<UInt32>()
    var answered = 0
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
            let event: HTTP2ServerSession.Event?
            do {
                event = try session.next(from: &buffer, now: now)
            } catch {
                let written = frames(session.takeOutput())
                precondition(written.last?.type == 0x7, "a connection error without GOAWAY last")
                break reading
            }
            guard let event else { break }
            switch event {
            case .request(let stream, _, _):
                precondition(stream & 1 == 1, "a request on even stream \(stream)")
                precondition(handedOut.insert(stream).inserted, "stream \(stream) handed out twice")
                precondition(stream <= session.lastClientStream, "a request past the last stream")
                precondition(session.isWaiting(stream), "a request not waiting for its answer")
                answered += 1
                let ok = answered % 2 == 0
                precondition(session.answer(stream, status: ok ? 200 : 400, apnsID: "00000000-0000-4000-8000-000000000000",
                                            body: ok ? [] : Array(#"{"reason":"BadTopic"}"#.utf8)))
                precondition(!session.isWaiting(stream), "answered and still waiting")
            case .malformed(let stream, _):
                precondition(stream & 1 == 1 && !handedOut.contains(stream), "a malformed stream \(stream) handed out")
            }
        }
        session.topUpReceiveWindow()
        _ = frames(session.takeOutput())
    }
}
