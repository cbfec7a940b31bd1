import Testing
@testable import PushCore

/// An http2 app's `aps` by Apple's current payload key reference (SPEC section 9); a binary app keeps section 2's.
@Suite struct CurrentApsTests {
    static func event(_ aps: String, _ extra: String = "") -> String {
        #"{"id":"e1","app":"com.example.app","token":"\#(sampleTokenHex)","payload":{"aps":\#(aps)}\#(extra)}"#
    }

    static func verdict(_ aps: String, _ extra: String = "", decoder: EventDecoder = .http2) -> (DeliveryErrorReason?, String?) {
        switch decoder.decode(event(aps, extra)) {
        case .success: (nil, nil)
        case .failure(let rejection): (rejection.reason, rejection.error.detail)
        }
    }

    @Test(arguments: [
        #"{"alert":{"title":"Flight","subtitle":"BA 117","body":"Boarding","subtitle-loc-key":"K","subtitle-loc-args":["a"]}}"#,
        #"{"alert":"Hi","sound":{"critical":1,"name":"siren.caf","volume":0.8}}"#,
        #"{"alert":"Hi","sound":{"critical":0,"name":"default","volume":0,"future-key":true}}"#,
        #"{"alert":"Hi","interruption-level":"time-sensitive","relevance-score":0.75,"thread-id":"t","target-content-id":"c","filter-criteria":"work"}"#,
        #"{"alert":"Hi","mutable-content":1,"category":"c","badge":3}"#,
        #"{"alert":"Hi","some-future-key":{"anything":[1,2]}}"#,
        #"{"alert":{"action-loc-key":7}}"#,
    ])
    func currentKeysAreAccepted(_ aps: String) {
        #expect(Self.verdict(aps).0 == nil, "\(Self.verdict(aps).1 ?? "")")
    }

    @Test(arguments: [
        (#"{"alert":"Hi","sound":{"critical":2}}"#, "aps.sound.critical"),
        (#"{"alert":"Hi","sound":{"volume":1.5}}"#, "aps.sound.volume"),
        (#"{"alert":"Hi","sound":{"name":3}}"#, "aps.sound.name"),
        (#"{"alert":"Hi","sound":7}"#, "aps.sound"),
        (#"{"alert":"Hi","interruption-level":"urgent"}"#, "aps.interruption-level"),
        (#"{"alert":"Hi","relevance-score":"high"}"#, "aps.relevance-score"),
        (#"{"alert":"Hi","mutable-content":true}"#, "aps.mutable-content"),
        (#"{"alert":"Hi","thread-id":1}"#, "aps.thread-id"),
        (#"{"alert":{"subtitle":["x"]}}"#, "aps.alert.subtitle"),
        (#"{"alert":"Hi","target-content-id":null}"#, "aps.target-content-id"),
        (#"{"alert":"Hi","interruption-level":"active","interruption-level":"passive"}"#, "aps.interruption-level"),
    ])
    func aKnownKeyOfTheWrongTypeOrValueIsAnInvalidPayloadNamingIt(_ aps: String, _ key: String) {
        let (reason, detail) = Self.verdict(aps)
        #expect(reason == .invalidPayload)
        #expect(detail?.contains("'\(key)'") == true, "\(detail ?? "accepted")")
    }

    @Test func aBinaryAppKeepsTheSeedsList() {
        // A critical alert's sound object is not in SPEC section 2's list: invalid there.
        #expect(Self.verdict(#"{"alert":"Hi","sound":{"critical":1}}"#, decoder: EventDecoder()).0 == .invalidPayload)
        // Keys only the current reference defines pass through a binary app's decoder unchecked.
        #expect(Self.verdict(#"{"alert":"Hi","interruption-level":7}"#, decoder: EventDecoder()).0 == nil)
        #expect(Self.verdict(#"{"alert":{"subtitle":7}}"#, decoder: EventDecoder()).0 == nil)
    }

    static let start = #"{"event":"start","timestamp":1733650000,"content-state":{"score":"0-0"},"attributes-type":"MatchAttributes","attributes":{"home":"A"},"alert":{"title":"Kick-off"}}"#
    static let liveActivity = #","push_type":"liveactivity""#

    @Test(arguments: [
        start,
        #"{"event":"update","timestamp":1733650100,"content-state":{"score":"1-0"},"stale-date":1733653600,"relevance-score":50}"#,
        #"{"event":"end","timestamp":1733656000,"dismissal-date":1733659600}"#,
        #"{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{},"input-push-token":1}"#,
        #"{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{},"input-push-channel":"dHdvIGNo"}"#,
    ])
    func liveActivityUpdatesThatHaveWhatTheirEventNeedsAreAccepted(_ aps: String) {
        #expect(Self.verdict(aps, Self.liveActivity).0 == nil, "\(Self.verdict(aps, Self.liveActivity).1 ?? "")")
        #expect(Self.verdict(aps, Self.liveActivity + #","priority":5"#).0 == nil)
    }

    @Test(arguments: [
        (#"{"timestamp":1,"content-state":{}}"#, "'aps.event'"),
        (#"{"event":"update","content-state":{}}"#, "'aps.timestamp'"),
        (#"{"event":"update","timestamp":1}"#, "'aps.content-state'"),
        (#"{"event":"start","timestamp":1,"content-state":{},"attributes":{}}"#, "'aps.attributes-type'"),
        (#"{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T"}"#, "'aps.attributes'"),
        (#"{"event":"pause","timestamp":1,"content-state":{}}"#, "'aps.event'"),
        (#"{"event":"update","timestamp":1.5,"content-state":{}}"#, "'aps.timestamp'"),
        (#"{"event":"update","timestamp":1,"content-state":"1-0"}"#, "'aps.content-state'"),
        (#"{"event":"end","timestamp":1,"stale-date":"soon"}"#, "'aps.stale-date'"),
    ])
    func aLiveActivityUpdateMissingWhatItsEventNeedsIsAnInvalidPayload(_ aps: String, _ named: String) {
        let (reason, detail) = Self.verdict(aps, Self.liveActivity)
        #expect(reason == .invalidPayload)
        #expect(detail?.contains(named) == true, "\(detail ?? "accepted")")
    }

    @Test func liveActivityKeysOutsideALiveActivityAreOnlyTypeChecked() {
        #expect(Self.verdict(#"{"alert":"Hi","event":"update"}"#).0 == nil)
        #expect(Self.verdict(#"{"alert":"Hi","event":"later"}"#).0 == .invalidPayload)
    }

    @Test func aLiveActivityTakesPriority5Or10Only() {
        let (reason, detail) = Self.verdict(Self.start, Self.liveActivity + #","priority":1"#)
        #expect(reason == .invalidPriority)
        #expect(detail?.contains("liveactivity") == true)
    }
}
