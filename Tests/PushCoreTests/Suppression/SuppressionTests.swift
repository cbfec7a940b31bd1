import PushCore
import Testing

/// The suppression table and the topic's records (SPEC section 10).
struct SuppressionTableTests {
    static func token(_ i: Int) -> DeviceToken {
        var bytes = [UInt8](repeating: 0xAB, count: 32)
        for b in 0..<8 { bytes[b] = UInt8(truncatingIfNeeded: i >> (8 * b)) }
        return try! DeviceToken(bytes: bytes)
    }

    static func key(_ i: Int, app: String = "com.example.app", environment: APNsEnvironment = .production) -> SuppressionKey {
        SuppressionKey(app: app, environment: environment, token: token(i))
    }

    @Test func aSuppressedTokenIsFoundWithItsTimeAndReasonAndOthersAreNot() {
        var table = SuppressionTable()
        table.suppress(Self.key(1), invalidatedAt: 1_790_000_000, reason: .unregistered)
        #expect(table.lookup(Self.key(1))! == (1_790_000_000, .unregistered))
        #expect(table.lookup(Self.key(2)) == nil)
        // The same token of another app or environment is another entry.
        #expect(table.lookup(Self.key(1, app: "com.example.other")) == nil)
        #expect(table.lookup(Self.key(1, environment: .sandbox)) == nil)
        #expect(table.count == 1)
    }

    @Test func aLaterRecordForTheSameTokenReplacesTheEarlier() {
        var table = SuppressionTable()
        table.suppress(Self.key(1), invalidatedAt: 100, reason: .invalidToken)
        table.suppress(Self.key(1), invalidatedAt: 200, reason: .feedback)
        #expect(table.lookup(Self.key(1))! == (200, .feedback))
        #expect(table.count == 1)
    }

    @Test func aRegistrationAfterTheInvalidationLetsTheNotificationThrough() {
        var table = SuppressionTable()
        table.suppress(Self.key(1), invalidatedAt: 1000, reason: .badDeviceToken)
        #expect(table.verdict(Self.key(2), registeredAt: nil) == .send)
        #expect(table.verdict(Self.key(1), registeredAt: nil) == .suppressed(invalidatedAt: 1000, reason: .badDeviceToken))
        #expect(table.verdict(Self.key(1), registeredAt: 999) == .suppressed(invalidatedAt: 1000, reason: .badDeviceToken))
        #expect(table.verdict(Self.key(1), registeredAt: 1000) == .suppressed(invalidatedAt: 1000, reason: .badDeviceToken))
        #expect(table.verdict(Self.key(1), registeredAt: 1001) == .sendAndLift(invalidatedAt: 1000, reason: .badDeviceToken))
    }

    /// Many inserts and lifts in a random order agree with a dictionary, through growth and backward shifts.
    @Test func itAgreesWithADictionaryThroughGrowthAndDeletion() {
        var table = SuppressionTable()
        var reference: [Int: (Int64, SuppressionReason)] = [:]
        var random = SplitMix64(seed: 42)
        for step in 0..<60_000 {
            let i = Int(random.next() % 5_000)
            if random.next() % 3 == 0 {
                #expect(table.lift(Self.key(i)) == (reference.removeValue(forKey: i) != nil))
            } else {
                let reason = SuppressionReason.allCases[Int(random.next() % UInt64(SuppressionReason.allCases.count))]
                table.suppress(Self.key(i), invalidatedAt: Int64(step), reason: reason)
                reference[i] = (Int64(step), reason)
            }
        }
        #expect(table.count == reference.count)
        for i in 0..<5_000 {
            let found = table.lookup(Self.key(i))
            let expected = reference[i]
            #expect(found?.invalidatedAt == expected?.0 && found?.reason == expected?.1, "token \(i)")
        }
    }

    @Test func aMillionTokensTakeAtMost32BytesEach() {
        var table = SuppressionTable()
        for i in 0..<1_000_000 { table.suppress(Self.key(i), invalidatedAt: 1_790_000_000, reason: .unregistered) }
        #expect(table.count == 1_000_000)
        #expect(table.memoryBytes <= 32 * 1_000_000)
        #expect(table.lookup(Self.key(999_999)) != nil && table.lookup(Self.key(1_000_000)) == nil)
    }
}

struct SuppressionRecordTests {
    static let token = try! DeviceToken(hex: String(repeating: "ab", count: 32))

    @Test func aRecordIsWrittenAndReadBack() throws {
        let record = SuppressionRecord(
            app: "com.example.app", environment: .sandbox, token: Self.token, invalidatedAtMilliseconds: 1_790_000_000_001, reason: .unregistered)
        // A time with milliseconds is rounded up: a registration in the same second is not later.
        #expect(record.invalidatedAt == 1_790_000_001)
        #expect(String(decoding: record.key, as: UTF8.self) == "com.example.app/sandbox/" + String(repeating: "ab", count: 32))
        #expect(String(decoding: record.json(), as: UTF8.self)
            == #"{"app":"com.example.app","environment":"sandbox","token":"\#(String(repeating: "ab", count: 32))","invalidated_at":"2026-09-21T14:13:21Z","reason":"unregistered"}"#)
        #expect(try SuppressionEntry(key: record.key, value: record.json()) == .suppress(record))
    }

    /// SPEC section 10 fixes the entry's fields, not the values of `reason`: an entry another service wrote with a
    /// reason of its own suppresses the token (class `other`) and keeps the text; it is written back as read.
    @Test func aReasonWrittenByAnotherServiceIsApplied() throws {
        let key = Array("com.example.app/production/abab".utf8)
        let value = #"{"app":"com.example.app","environment":"production","token":"abab","invalidated_at":"2026-01-01T00:00:00Z","reason":"app_uninstalled"}"#
        guard case .suppress(let record) = try SuppressionEntry(key: key, value: Array(value.utf8)) else {
            Issue.record("not a suppression")
            return
        }
        #expect(record.reason == .other && record.reasonText == "app_uninstalled")
        #expect(String(decoding: record.json(), as: UTF8.self) == value)
        var table = SuppressionTable()
        table.apply(.suppress(record))
        #expect(table.verdict(record.tableKey, registeredAt: nil) == .suppressed(invalidatedAt: record.invalidatedAt, reason: .other))
    }

    @Test func aTombstoneLiftsTheKeysToken() throws {
        let key = Array(("com.example.app/production/" + String(repeating: "ab", count: 32)).utf8)
        #expect(try SuppressionEntry(key: key, value: nil) == .lift(SuppressionKey(app: "com.example.app", environment: .production, token: Self.token)))
    }

    @Test(arguments: [
        ("com.example.app/production", "{}"),
        ("com.example.app/staging/abab", "{}"),
        ("com.example.app/production/xyz", "{}"),
        ("/production/abab", "{}"),
        ("com.example.app/production/abab", "not json"),
        ("com.example.app/production/abab", #"{"app":"com.example.other","environment":"production","token":"abab","invalidated_at":"2026-01-01T00:00:00Z","reason":"feedback"}"#),
        ("com.example.app/production/abab", #"{"app":"com.example.app","environment":"production","token":"abab","invalidated_at":"yesterday","reason":"feedback"}"#),
        ("com.example.app/production/abab", #"{"app":"com.example.app","environment":"production","token":"abab","invalidated_at":"2026-01-01T00:00:00Z","reason":""}"#),
        ("com.example.app/production/abab", #"{"app":"com.example.app","environment":"production","token":"abab","invalidated_at":"2026-01-01T00:00:00Z","reason":3}"#),
        ("com.example.app/production/abab", #"{"app":"com.example.app","environment":"production","token":"abab","invalidated_at":"2026-01-01T00:00:00Z"}"#),
    ])
    func aRecordThatIsNotTheSpecsIsAnError(key: String, value: String) {
        #expect(throws: SuppressionRecordError.self) { try SuppressionEntry(key: Array(key.utf8), value: Array(value.utf8)) }
    }

    /// Every skipped record is logged with its error: a producer's 100 KB app name must not become a 100 KB line.
    @Test func anErrorNamesAtMostTheStartOfALongApp() {
        let app = String(repeating: "a", count: 100_000)
        let key = Array("\(app)/production/abab".utf8)
        for value in ["not json", #"{"app":"\#(app)","environment":"production","token":"abab","invalidated_at":"yesterday","reason":"feedback"}"#] {
            #expect {
                try SuppressionEntry(key: key, value: Array(value.utf8))
            } throws: { error in
                let description = (error as? SuppressionRecordError)?.description ?? ""
                return description.contains(String(repeating: "a", count: 120) + "/production") && description.utf8.count < 300
            }
        }
    }
}

struct TokenRegisteredAtTests {
    static func decode(_ field: String) -> Result<NotificationEvent, EventRejection> {
        EventDecoder(format: .frame).decode(
            #"{"id":"e1","app":"com.example.app","token":"\#(String(repeating: "ab", count: 32))","payload":{"aps":{"alert":"hi"}}\#(field)}"#)
    }

    @Test func itIsReadAsUNIXSecondsOrAnRFC3339Time() throws {
        #expect(try Self.decode(#","token_registered_at":1790000000"#).get().tokenRegisteredAt == 1_790_000_000)
        #expect(try Self.decode(#","token_registered_at":"2026-09-21T14:13:20Z""#).get().tokenRegisteredAt == 1_790_000_000)
        #expect(try Self.decode("").get().tokenRegisteredAt == nil)
    }

    @Test(arguments: [#","token_registered_at":-1"#, #","token_registered_at":1.5"#, #","token_registered_at":true"#, #","token_registered_at":"soon""#])
    func anythingElseIsAMalformedEvent(field: String) {
        guard case .failure(let rejection) = Self.decode(field) else {
            Issue.record("accepted \(field)")
            return
        }
        #expect(rejection.reason == .malformedEvent)
        #expect(rejection.detail.contains("token_registered_at"))
    }
}
