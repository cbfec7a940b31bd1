import PushCore
import Testing
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
}
