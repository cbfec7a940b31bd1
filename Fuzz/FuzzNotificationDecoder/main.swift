// libFuzzer target: the simulator's binary gateway reading notifications (`simulate`'s TLS port), on any bytes a
// client can send. The first byte of the input picks how the rest is cut into reads (1 to 16 bytes each).
//
// Whatever comes in, the decoder must not trap, and:
// - the stream read at once and read as it arrives in pieces gives the same notifications and the same rejection;
// - a rejection carries one of the statuses Apple's gateway answers a malformed notification with (2, 4, 5, 7, 128);
// - a notification has a token of 1 to 100 bytes and a payload within its format's limit, and encoded again in its
//   format it reads back the same; in the two legacy formats (fixed layouts) that encoding is the bytes it came from.
import FuzzSupport
import NIOCore
import PushCore

/// Reads notifications off `buffer` until one is not all there or one is rejected; returns them and the rejection,
/// and the bytes each notification took.
private func readAll(_ buffer: inout ByteBuffer, into results: inout [NotificationDecodingResult], spans: inout [[UInt8]]) -> Bool {
    while true {
        let start = buffer.readerIndex
        let before = buffer
        guard let result = NotificationDecoder.decode(from: &buffer) else {
            precondition(buffer.readerIndex == start, "an incomplete notification was consumed")
            return false
        }
        results.append(result)
        if case .rejected = result { return true }
        spans.append(before.getBytes(at: start, length: buffer.readerIndex - start)!)
    }
}

runFuzzer { bytes in
    guard let first = bytes.first else { return }
    let step = Int(first % 16) + 1
    let input = Array(bytes.dropFirst())

    var whole = ByteBuffer(bytes: input)
    var atOnce: [NotificationDecodingResult] = []
    var spans: [[UInt8]] = []
    _ = readAll(&whole, into: &atOnce, spans: &spans)

    var pending = ByteBuffer()
    var inPieces: [NotificationDecodingResult] = []
    var unused: [[UInt8]] = []
    var offset = 0
    while offset < input.count {
        let end = min(offset + step, input.count)
        pending.writeBytes(input[offset..<end])
        offset = end
        if readAll(&pending, into: &inPieces, spans: &unused) { break }
    }
    precondition(inPieces == atOnce, "read in pieces, the stream gave other results")

    for (result, span) in zip(atOnce, spans + [[]]) {
        switch result {
        case .rejected(let response, _, _):
            precondition([2, 4, 5, 7, 128].contains(response.status.code), "a rejection with status \(response.status.code)")
        case .notification(let n):
            precondition((1...NotificationFormat.maxTokenSize).contains(n.token.count), "a token of \(n.token.count) bytes")
            precondition((1...n.format.maxPayloadSize).contains(n.payload.count), "a payload of \(n.payload.count) bytes")
            guard let priority = Priority(rawValue: n.priority) else { preconditionFailure("priority \(n.priority)") }
            let again = PushNotification(
                token: try! DeviceToken(bytes: n.token), payload: n.payload, identifier: n.identifier,
                expiration: n.expiration, priority: priority)
            var encoded = NotificationEncoder.encode(again, format: n.format)
            let encodedBytes = Array(encoded.readableBytesView)
            guard case .notification(let decoded)? = NotificationDecoder.decode(from: &encoded), encoded.readableBytes == 0 else {
                preconditionFailure("a notification encoded again does not read back")
            }
            precondition(decoded == n, "a notification encoded again reads back otherwise")
            if n.format != .frame { precondition(encodedBytes == span, "a legacy notification encoded again is other bytes") }
        }
    }
}
