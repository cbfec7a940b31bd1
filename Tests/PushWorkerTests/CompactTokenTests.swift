import PushCore
import Testing
@testable import PushGateway
@testable import PushKafka
@testable import PushWorker

@Suite struct CompactTokenTests {
    @Test(arguments: [1, 2, 31, 32, 33, 64, 100])
    func everyTokenLengthComesBackAsItWent(length: Int) throws {
        let token = try DeviceToken(bytes: (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
        #expect(CompactToken(token).token == token)
        let held = HeldEvent(id: "e1", endpoint: 2, token: token, timestamp: 7)
        #expect(held.token == token && held.endpoint == 2 && held.timestamp == 7 && held.id == "e1")
    }

    @Test func aShortTokenIsKeptInline() {
        // Four words, a count and an optional array: no heap object of its own for 32 bytes.
        #expect(MemoryLayout<CompactToken>.size <= 48)
    }

    /// What each held notification costs besides its frame: its ledger record and its connection's in-flight entry,
    /// laid out so that the small fields fill what the large ones leave (112 and 64 bytes in declaration order).
    @Test func aHeldNotificationsRecordsStayCompact() {
        #expect(MemoryLayout<HeldEvent>.stride <= 72)
        #expect(MemoryLayout<InFlightLedger<HeldEvent>.Record>.stride <= 88)
        #expect(MemoryLayout<ConnectionStateMachine<ContinuousClock.Instant>.Entry>.stride <= 56)
    }
}
