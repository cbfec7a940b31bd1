// libFuzzer target: the error-response decoder (what the worker reads from the gateway) on arbitrary bytes.
//
// It must not trap; each response it reads takes exactly 6 bytes and writes back as the same bytes (a status the
// table does not define keeps its code); a stream that is not error responses throws without consuming.
import FuzzSupport
import NIOCore
import PushCore

runFuzzer { bytes in
    var buffer = ByteBuffer(bytes: bytes)
    while true {
        let before = buffer.readerIndex
        let response: ErrorResponse?
        do {
            response = try ErrorResponse.decode(from: &buffer)
        } catch {
            precondition(buffer.readerIndex == before, "a refused stream was consumed")
            break
        }
        guard let response else {
            precondition(buffer.readableBytes < 6, "nil with a whole response there")
            break
        }
        precondition(buffer.readerIndex == before + 6, "a response is 6 bytes")
        var again = ByteBuffer()
        response.write(into: &again)
        let original = Array(bytes[before..<(before + 6)])
        precondition(Array(again.readableBytesView) == original, "response changed when written back")
    }
}
