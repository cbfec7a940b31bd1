import PushCore
import Synchronization
import Testing
@testable import PushGateway

/// The send check (token suppression at the last moment, SPEC section 10) sees each notification's ticket, sends and
/// token, read from the frame the engine holds; what it stops ends with an outcome carrying that token.
@Suite struct SendCheckTests {
    static let app = AppKey(app: "com.example.app", environment: .production)

    static func delivery(_ ticket: UInt64, token byte: UInt8, sends: Int) -> Delivery {
        let token = try! DeviceToken(bytes: Array(repeating: byte, count: 32))
        let notification = PushNotification(
            token: token, payload: Array(#"{"aps":{}}"#.utf8), identifier: 0, expiration: 0, priority: .immediate)
        var d = Delivery(ticket: DeliveryTicket(ticket), notification: notification, format: .frame)
        d.sends = sends
        return d
    }

    @Test func theCheckSeesEveryCandidatesTokenAndStopsOnlyThoseItNames() {
        let batch = (0..<6).map { Self.delivery(UInt64($0), token: UInt8($0 % 3), sends: $0) }
        let gone = try! DeviceToken(bytes: Array(repeating: 1, count: 32))
        let seen = Mutex<[(ticket: DeliveryTicket, sends: Int, token: DeviceToken)]>([])
        let check: SendCheck = { app, candidates in
            #expect(app == Self.app)
            seen.withLock { $0 = candidates.map { ($0.ticket, $0.sends, $0.tokenSource.token) } }
            return candidates.enumerated().compactMap { index, c in
                guard c.tokenSource.token == gone else { return nil }
                return (index, DeliveryOutcome(
                    ticket: c.ticket, tokenSource: c.tokenSource,
                    result: .failed(.tokenSuppressed, status: nil, detail: "suppressed"), attempts: c.sends))
            }
        }
        let (kept, stopped) = batch.passing(check, app: Self.app) {
            SendCandidate(ticket: $0.ticket, sends: $0.sends, tokenSource: $0.tokenSource)
        }
        let candidates = seen.withLock { $0 }
        #expect(candidates.map(\.ticket) == (0..<6).map { DeliveryTicket(UInt64($0)) })
        #expect(candidates.map(\.sends) == Array(0..<6))
        #expect(candidates.map { $0.token.bytes[0] } == [0, 1, 2, 0, 1, 2])
        // Tickets 1 and 4 have the token gone: they end here, with it; the rest go out in their order.
        #expect(kept.map(\.ticket) == [0, 2, 3, 5].map { DeliveryTicket(UInt64($0)) })
        #expect(stopped.map(\.ticket) == [1, 4].map { DeliveryTicket(UInt64($0)) })
        #expect(stopped.allSatisfy { $0.tokenSource.token == gone && $0.result == .failed(.tokenSuppressed, status: nil, detail: "suppressed") })
        #expect(stopped.map(\.attempts) == [1, 4])
    }

    @Test func withoutACheckEverythingGoesOut() {
        let batch = (0..<3).map { Self.delivery(UInt64($0), token: 7, sends: 0) }
        let (kept, stopped) = batch.passing(nil, app: Self.app) {
            SendCandidate(ticket: $0.ticket, sends: $0.sends, tokenSource: $0.tokenSource)
        }
        #expect(kept.map(\.ticket) == [0, 1, 2] && stopped.isEmpty)
    }
}
