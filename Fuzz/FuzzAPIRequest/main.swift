// libFuzzer target: the simulator's check of an HTTP/2 provider-API request (what any client can send it), on
// arbitrary header lists and bodies. The input is lines `name:value` (a leading `:` belongs to the name), then a
// NUL byte and the body; the first byte picks the authentication (certificate, or token with no key configured).
//
// Whatever comes in, the check must not trap, and:
// - every answer carries an apns-id that is a UUID, and a status that agrees with its reason (200 exactly when
//   there is none);
// - the same request is answered the same way twice;
// - an accepted request has a POST, a token path, a body within its push type's limit, and is accepted again when
//   rebuilt from what was recorded of it (so the record says what was accepted).
import FuzzSupport
import PushCore
@testable import PushSimulator

private let listed = try! DeviceToken(hex: String(repeating: "ab", count: 32))
private let unregistered = try! DeviceToken(hex: String(repeating: "cd", count: 32))
private let check = APIRequestCheck(
    verifier: nil, invalidTokens: [listed.bytes], unregistered: [unregistered.bytes: 1_800_000_000_123])

private func answer(_ headers: [(name: String, value: String)], _ body: [UInt8], _ authentication: APIAuthentication) -> APIAnswer {
    var history = APITokenHistory()
    return check.answer(
        headers: headers, body: body, authentication: authentication, tokenHistory: &history, now: 1_800_000_000,
        newID: { "00000000-0000-4000-8000-000000000000" })
}

runFuzzer { bytes in
    guard let first = bytes.first else { return }
    let authentication: APIAuthentication = first & 1 == 0 ? .certificate(app: "com.example.app") : .token
    let rest = bytes.dropFirst()
    let split = rest.firstIndex(of: 0) ?? rest.endIndex
    let body = Array(rest[split...].dropFirst())
    var headers: [(name: String, value: String)] = []
    for line in rest[..<split].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
        let searchFrom = line.first == UInt8(ascii: ":") ? line.index(after: line.startIndex) : line.startIndex
        let colon = line[searchFrom...].firstIndex(of: UInt8(ascii: ":")) ?? line.endIndex
        headers.append((String(decoding: line[..<colon], as: UTF8.self), String(decoding: line[colon...].dropFirst(), as: UTF8.self)))
    }

    let result = answer(headers, body, authentication)
    precondition(APNsID(result.apnsID) != nil, "the answer's apns-id is not a UUID: \(result.apnsID)")
    if let reason = result.reason {
        precondition(result.status == reason.status && result.status != 200, "status \(result.status) with reason \(reason)")
        precondition(result.accepted == nil, "a refused request was recorded")
        precondition((result.timestampMilliseconds != nil) == (reason == .unregistered), "a 410 timestamp out of place")
    } else {
        precondition(result.status == 200, "status \(result.status) without a reason")
    }
    let again = answer(headers, body, authentication)
    precondition(again.status == result.status && again.reason == result.reason, "the same request answered differently")

    guard let accepted = result.accepted else { return }
    precondition(headers.contains { $0.name == ":method" && $0.value == "POST" }, "accepted without POST")
    precondition(!body.isEmpty && accepted.body == body, "accepted body differs")
    let pushType = PushType(rawValue: accepted.pushType)!
    precondition(body.count <= pushType.maxPayloadSize, "accepted a body over its limit")
    precondition(accepted.token != listed.bytes && accepted.token != unregistered.bytes, "accepted a refused token")
    var rebuilt: [(name: String, value: String)] = [
        (":method", "POST"), (":path", "/3/device/" + Hex.encode(accepted.token)), ("apns-topic", accepted.topic),
        ("apns-push-type", accepted.pushType), ("apns-priority", String(accepted.priority)),
        ("apns-expiration", String(accepted.expiration)), ("apns-id", accepted.apnsID),
    ]
    if let collapse = accepted.collapseID { rebuilt.append(("apns-collapse-id", collapse)) }
    let replay = answer(rebuilt, body, authentication)
    precondition(replay.status == 200 || authentication == .token, "the recorded request is refused: \(replay.status) \(replay.reason.map { "\($0)" } ?? "")")
}
