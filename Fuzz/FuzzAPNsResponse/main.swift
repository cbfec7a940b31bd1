// libFuzzer target: the decoder of the HTTP/2 provider API's answers (what the worker reads from Apple): the first
// two bytes are the status, the rest the body.
//
// It must not trap; the status is kept; every status has an outcome; a reason and timestamp it reads, written back
// as Apple's JSON, read again as the same.
import FuzzSupport
import PushCore

runFuzzer { bytes in
    guard bytes.count >= 2 else { return }
    let status = Int(bytes[0]) << 8 | Int(bytes[1])
    let body = Array(bytes[2...])
    let response = APNsResponse(status: status, body: body)
    precondition(response.status == status, "the status changed")
    _ = response.outcome
    _ = response.outcome.isFinal
    var writer = JSONWriter(capacity: 64)
    writer.beginObject()
    if let reason = response.reason { writer.field("reason", reason) }
    if let timestamp = response.timestampMilliseconds { writer.field("timestamp", timestamp) }
    writer.endObject()
    let again = APNsResponse(status: status, body: writer.bytes)
    precondition(again.reason == response.reason, "the reason changed when written back")
    precondition(again.timestampMilliseconds == response.timestampMilliseconds, "the timestamp changed when written back")
}
