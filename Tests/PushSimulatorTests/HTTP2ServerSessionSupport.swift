import Logging
import NIOCore
import NIOEmbedded
import NIOHPACK
import Testing
@testable import PushSimulator

typealias ErrorCode = HTTP2ServerSession.ErrorCode

/// A client's bytes, written frame by frame (HPACK by `NIOHPACK`'s encoder, independent of the session's).
struct ClientFrames {
    var bytes = ByteBuffer()
    var encoder = HPACKEncoder(allocator: ByteBufferAllocator())

    /// The preface, the client's SETTINGS and the acknowledgement of the server's.
    static func opened(settings: [(UInt16, UInt32)] = [], acknowledged: Bool = true) -> ClientFrames {
        var frames = ClientFrames()
        frames.bytes.writeString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        frames.settings(settings)
        if acknowledged { frames.acknowledgeSettings() }
        return frames
    }

    mutating func acknowledgeSettings() { frame(0x4, flags: 0x1, stream: 0) }

    mutating func frame(_ type: UInt8, flags: UInt8 = 0, stream: UInt32, _ payload: [UInt8] = []) {
        bytes.writeInteger(UInt8(payload.count >> 16))
        bytes.writeInteger(UInt16(truncatingIfNeeded: payload.count))
        bytes.writeInteger(type)
        bytes.writeInteger(flags)
        bytes.writeInteger(stream)
        bytes.writeBytes(payload)
    }

    mutating func settings(_ parameters: [(UInt16, UInt32)]) {
        var payload = ByteBuffer()
        for (parameter, value) in parameters {
            payload.writeInteger(parameter)
            payload.writeInteger(value)
        }
        frame(0x4, stream: 0, Array(payload.readableBytesView))
    }

    func block(_ fields: [(String, String)]) -> [UInt8] {
        var encoder = encoder
        var buffer = ByteBuffer()
        try! encoder.encode(headers: HPACKHeaders(fields), to: &buffer)
        return Array(buffer.readableBytesView)
    }

    mutating func headers(_ stream: UInt32, _ fields: [(String, String)] = request, endStream: Bool = false) {
        var buffer = ByteBuffer()
        try! encoder.encode(headers: HPACKHeaders(fields), to: &buffer)
        frame(0x1, flags: 0x4 | (endStream ? 0x1 : 0), stream: stream, Array(buffer.readableBytesView))
    }

    mutating func data(_ stream: UInt32, _ body: String = "{}", endStream: Bool = true) {
        frame(0x0, flags: endStream ? 0x1 : 0, stream: stream, Array(body.utf8))
    }

    mutating func windowUpdate(_ stream: UInt32, _ increment: UInt32) {
        var payload = ByteBuffer()
        payload.writeInteger(increment)
        frame(0x8, stream: stream, Array(payload.readableBytesView))
    }

    static let request = [(":method", "POST"), (":scheme", "https"), (":path", "/3/device/abc"), ("apns-topic", "t")]
}

/// A frame the session wrote.
struct ServerFrame {
    var type: UInt8
    var flags: UInt8
    var stream: UInt32
    var payload: ByteBuffer

    static func all(in output: ByteBuffer?) -> [ServerFrame] {
        guard var output else { return [] }
        var frames: [ServerFrame] = []
        while output.readableBytes >= 9 {
            let length = Int(output.readInteger(as: UInt8.self)!) << 16 | Int(output.readInteger(as: UInt16.self)!)
            let type = output.readInteger(as: UInt8.self)!, flags = output.readInteger(as: UInt8.self)!
            let stream = output.readInteger(as: UInt32.self)!
            frames.append(ServerFrame(type: type, flags: flags, stream: stream, payload: output.readSlice(length: length)!))
        }
        #expect(output.readableBytes == 0)
        return frames
    }

    var words: [UInt32] {
        var payload = payload
        var words: [UInt32] = []
        while let word = payload.readInteger(as: UInt32.self) { words.append(word) }
        return words
    }
}

struct Session {
    var session = HTTP2ServerSession(streamLimit: 4, bodyLimit: 100)
    var events: [HTTP2ServerSession.Event] = []

    init(streamLimit: Int = 4) {
        session = HTTP2ServerSession(streamLimit: streamLimit, bodyLimit: 100)
        _ = session.takeOutput()
    }

    mutating func feed(_ frames: ClientFrames, now: Int64 = 0) throws(HTTP2ServerSession.ConnectionError) -> [ServerFrame] {
        var input = frames.bytes
        events = []
        while let event = try session.next(from: &input, now: now) { events.append(event) }
        return ServerFrame.all(in: session.takeOutput())
    }

    /// Feeds the bytes and expects a connection error: returns its code and the GOAWAY's code.
    mutating func failure(_ frames: ClientFrames, now: Int64 = 0) -> (ErrorCode, UInt32?)? {
        var input = frames.bytes
        do {
            while try session.next(from: &input, now: now) != nil {}
            return nil
        } catch {
            let goAway = ServerFrame.all(in: session.takeOutput()).last { $0.type == 0x7 }
            return (error.code, goAway?.words.last)
        }
    }

    var requests: [UInt32] {
        events.compactMap { if case .request(let stream, _, _) = $0 { stream } else { nil } }
    }
}

func resets(_ frames: [ServerFrame]) -> [UInt32: UInt32] {
    Dictionary(uniqueKeysWithValues: frames.filter { $0.type == 0x3 }.map { ($0.stream, $0.words[0]) })
}
