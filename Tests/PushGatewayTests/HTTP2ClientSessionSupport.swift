import Foundation
import NIOCore
import NIOHPACK
import PushCore
import Testing
@testable import PushGateway

/// What a server sends, frame by frame (HPACK by NIOHPACK's encoder).
struct ServerFrames {
    var bytes = ByteBuffer()
    var encoder = HPACKEncoder(allocator: ByteBufferAllocator())

    static func preface(_ parameters: [(UInt16, UInt32)] = [(0x3, 100)]) -> ServerFrames {
        var frames = ServerFrames()
        HTTP2Wire.writeSettings(parameters, to: &frames.bytes)
        return frames
    }

    mutating func frame(_ type: UInt8, flags: UInt8 = 0, stream: UInt32, _ payload: [UInt8] = []) {
        HTTP2Wire.writeFrameHeader(length: payload.count, type: type, flags: flags, stream: stream, to: &bytes)
        bytes.writeBytes(payload)
    }

    mutating func response(_ stream: UInt32, status: Int, body: String? = nil) {
        response(stream, statusText: String(status), body: body)
    }

    mutating func response(_ stream: UInt32, statusText: String, body: String? = nil) {
        var block = ByteBuffer()
        try! encoder.encode(headers: HPACKHeaders([(":status", statusText), ("apns-id", UUID().uuidString)]), to: &block)
        frame(HTTP2Wire.headers, flags: HTTP2Wire.endHeaders | (body == nil ? HTTP2Wire.endStream : 0), stream: stream, Array(block.readableBytesView))
        if let body { frame(HTTP2Wire.data, flags: HTTP2Wire.endStream, stream: stream, Array(body.utf8)) }
    }

    mutating func windowUpdate(_ stream: UInt32, _ increment: UInt32) {
        var payload = ByteBuffer()
        payload.writeInteger(increment)
        frame(HTTP2Wire.windowUpdate, stream: stream, Array(payload.readableBytesView))
    }
}

/// A frame the client session wrote.
struct Written {
    var type: UInt8
    var flags: UInt8
    var stream: UInt32
    var payload: ByteBuffer

    static func all(_ output: ByteBuffer?) -> [Written] {
        guard var output else { return [] }
        if output.readableBytesView.starts(with: HTTP2Wire.preface) { output.moveReaderIndex(forwardBy: HTTP2Wire.preface.count) }
        var frames: [Written] = []
        while let header = HTTP2Wire.FrameHeader(peekingAt: output) {
            output.moveReaderIndex(forwardBy: 9)
            frames.append(Written(type: header.type, flags: header.flags, stream: header.stream, payload: output.readSlice(length: header.length)!))
        }
        #expect(output.readableBytes == 0)
        return frames
    }
}

func request(_ i: Int, topic: String = "com.example.app", body: Int = 30, collapse: String? = nil, expiration: UInt32 = 0) -> APNsRequest {
    var request = HTTP2ClientConnectionTests.deliveries(1, tokenOf: { _ in i })[0].request
    request.topic = topic
    request.body = Array(repeating: UInt8(ascii: "x"), count: body)
    request.collapseID = collapse
    request.expiration = expiration
    return request
}

/// The header fields a request's block must carry, in order.
func expectedFields(_ request: APNsRequest, authority: String?, bearer: String?) -> [String] {
    var fields: [String] = []
    request.forEachHeaderField(authority: authority, bearer: bearer) { name, value, _ in fields.append("\(name): \(value)") }
    return fields
}

struct Client {
    var session = HTTP2ClientSession()
    var events: [HTTP2ClientSession.Event] = []

    init() { _ = session.takeOutput() }

    mutating func feed(_ frames: ServerFrames, now: Int64 = 0) throws(HTTP2Wire.ConnectionError) -> [Written] {
        var input = frames.bytes
        events = []
        while let event = try session.next(from: &input, now: now) { events.append(event) }
        return Written.all(session.takeOutput())
    }

    mutating func failure(_ frames: ServerFrames, now: Int64 = 0) -> HTTP2Wire.ErrorCode? {
        var input = frames.bytes
        do {
            while try session.next(from: &input, now: now) != nil {}
            return nil
        } catch {
            let goAway = Written.all(session.takeOutput()).last
            #expect(goAway?.type == HTTP2Wire.goAway)
            #expect(goAway.map { $0.payload.getInteger(at: $0.payload.readerIndex + 4, as: UInt32.self) } == error.code.rawValue)
            return error.code
        }
    }
}
