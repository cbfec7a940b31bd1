// libFuzzer target: the feedback-service decoder (tuples of timestamp, token length, token) on arbitrary bytes.
//
// It must not trap; every tuple it reads writes back as the bytes it consumed and becomes a feedback event whose
// JSON passes the feedback validator; leftovers are reported as a trailing-bytes error exactly when there are any.
import FuzzSupport
import NIOCore
import PushCore

runFuzzer { bytes in
    var buffer = ByteBuffer(bytes: bytes)
    while true {
        let before = buffer.readerIndex
        let tuple: FeedbackTuple?
        do {
            tuple = try FeedbackTuple.decode(from: &buffer)
        } catch {
            precondition(buffer.readerIndex == before, "a refused stream was consumed")
            break
        }
        guard let tuple else {
            precondition((FeedbackTuple.trailingBytesError(buffer) != nil) == (buffer.readableBytes > 0), "leftovers misreported")
            break
        }
        var again = ByteBuffer()
        tuple.write(into: &again)
        precondition(Array(again.readableBytesView) == Array(bytes[before..<buffer.readerIndex]), "tuple changed when written back")
        let event = FeedbackEvent(app: "com.example.app", environment: .production, token: tuple.token,
                                  timestamp: tuple.timestamp, receivedAt: 1_800_000_000_000)
        guard let json = try? JSONValue(parsing: event.json()) else { fatalError("the feedback event is not JSON") }
        precondition((try? FeedbackEvent(validating: json)) != nil, "the feedback event does not validate")
    }
}
