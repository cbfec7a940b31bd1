// libFuzzer target: the notification-event decoder (SPEC section 2) on arbitrary bytes.
//
// Whatever comes in, the decoder must not trap, and:
// - a valid event encodes to a frame that the strict gateway decoder (the simulator's) accepts with the same token,
//   payload, priority and identifier, leaving no byte over;
// - a rejected event becomes a delivery-error event whose JSON parses and passes the delivery-error validator;
// - decoded for an http2 app, a valid event's request (headers and body) is answered 200 by the simulator's strict
//   check of the HTTP/2 provider API, as Apple's would be;
// - decoded as the worker decodes a poll's binary notifications (into a staging buffer that already holds bytes, with
//   the configured apps known: a few, and more than are searched one by one), the verdict is the plain decoder's, the
//   staged token, payload and fields are the event's, the bytes before are untouched, and a rejection stages nothing.
import FuzzSupport
import NIOCore
import PushCore
@testable import PushSimulator

private let decoder = EventDecoder()
private let http2Decoder = EventDecoder.http2
private let source = RecordSource(topic: "notifications", partition: 0, offset: 0)
private let app = HTTP2AppSettings(bundleID: "com.example.app", mdmTopic: "com.apple.mgmt.External.0123")
private let apiCheck = APIRequestCheck(verifier: nil, invalidTokens: [], unregistered: [:])
/// The worker's decoders know the configured apps' names: a few (compared one by one) and many (found by a hash).
private let stagedDecoders: [EventDecoder] = [["com.example.app", "a", "com.example.other"], (0..<12).map { "app\($0)" } + ["com.example.app"]]
    .map { apps in
        var decoder = EventDecoder()
        decoder.knownApps = KnownNames(apps)
        return decoder
    }

/// The staged decoding's verdict and fields are the plain decoder's (`plain`, from the same bytes).
private func checkStaged(_ bytes: [UInt8], _ plain: Result<NotificationEvent, EventRejection>) {
    let before: [UInt8] = [7, 7, 7]
    for decoder in stagedDecoders {
        var staging = before
        let staged = bytes.withUnsafeBytes { decoder.decode($0, staging: &staging) }
        switch (plain, staged) {
        case (.success(let event), .success(let s)):
            var binary = event
            (binary.alertTruncated, binary.pushType, binary.collapseID, binary.apnsID) = (false, nil, nil, nil)
            binary.contentAvailableOnly = false
            precondition(s.event(in: staging) == binary, "the staged event differs from the decoded one")
            precondition(s.staged == before.count..<staging.count, "the staged bytes are not what was appended")
            precondition(staging.prefix(before.count).elementsEqual(before), "staging overwrote bytes before it")
        case (.failure(let rejection), .failure(let stagedRejection)):
            precondition(stagedRejection == rejection, "the staged rejection differs: \(stagedRejection) against \(rejection)")
            precondition(staging == before, "a rejected event left bytes in staging")
        default:
            fatalError("the staged verdict differs from the decoder's")
        }
    }
}

/// A rejected event's delivery-error event parses and passes the delivery-error validator.
private func checkDeliveryError(_ rejection: EventRejection, _ bytes: [UInt8]) {
    let output = DeliveryErrorEvent(rejected: rejection, rawMessage: bytes, source: source, occurredAt: 1_800_000_000_000)
    guard let json = try? JSONValue(parsing: output.json()) else { fatalError("the delivery-error event is not JSON") }
    precondition((try? DeliveryErrorEvent(validating: json)) != nil, "the delivery-error event does not validate")
}

runFuzzer { bytes in
    switch http2Decoder.decode(bytes) {
    case .failure(let rejection):
        checkDeliveryError(rejection, bytes)
    case .success(let event):
        let request: APNsRequest
        do {
            request = try APNsRequest(event: event, app: app, recordTimestamp: 1_800_000_000_000, defaultTTL: 86_400)
        } catch {
            fatalError("no request for a valid event: \(error)")
        }
        var history = APITokenHistory()
        let answer = apiCheck.answer(
            headers: request.headerFields(), body: request.body, authentication: .certificate(app: "com.example.app"),
            tokenHistory: &history, now: 1_800_000_000, newID: { "00000000-0000-4000-8000-000000000000" })
        precondition(answer.status == 200, "the API refuses the request of a valid event: \(answer.status) \(answer.reason.map { "\($0)" } ?? "")")
    }
    let plain = decoder.decode(bytes)
    checkStaged(bytes, plain)
    switch plain {
    case .success(let event):
        let notification = event.notification(identifier: 7, recordTimestamp: 1_800_000_000_000, defaultTTL: 86_400)
        var frame = NotificationEncoder.encode(notification, format: .frame)
        guard case .notification(let decoded)? = NotificationDecoder.decode(from: &frame) else {
            fatalError("the gateway decoder refuses the frame of a valid event")
        }
        precondition(frame.readableBytes == 0, "bytes left over after the frame")
        precondition(decoded.token == event.token.bytes, "token changed on the wire")
        precondition(decoded.payload == event.payload, "payload changed on the wire")
        precondition(decoded.priority == event.priority.rawValue && decoded.identifier == 7, "fields changed on the wire")
        precondition((try? JSONValue(parsing: event.payload)) != nil, "a valid event's payload is not JSON")
    case .failure(let rejection):
        checkDeliveryError(rejection, bytes)
    }
}
