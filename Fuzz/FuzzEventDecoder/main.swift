// libFuzzer target: the notification-event decoder (SPEC section 2) on arbitrary bytes.
//
// Whatever comes in, the decoder must not trap, and:
// - a valid event encodes to a frame that the strict gateway decoder (the simulator's) accepts with the same token,
//   payload, priority and identifier, leaving no byte over;
// - a rejected event becomes a delivery-error event whose JSON parses and passes the delivery-error validator.
import FuzzSupport
import NIOCore
import PushCore

private let decoder = EventDecoder()
private let source = RecordSource(topic: "notifications", partition: 0, offset: 0)

runFuzzer { bytes in
    switch decoder.decode(bytes) {
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
        let output = DeliveryErrorEvent(rejected: rejection, rawMessage: bytes, source: source, occurredAt: 1_800_000_000_000)
        guard let json = try? JSONValue(parsing: output.json()) else { fatalError("the delivery-error event is not JSON") }
        precondition((try? DeliveryErrorEvent(validating: json)) != nil, "the delivery-error event does not validate")
    }
}
