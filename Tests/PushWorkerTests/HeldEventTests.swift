import Foundation
import NIOCore
import PushCore
import Testing
@testable import PushGateway
@testable import PushKafka
@testable import PushWorker

@Suite struct HeldEventTests {
    /// Output events take the token from the outcome, which reads it from the frame the engine held: every length,
    /// in every binary format, comes back as it went (the HTTP/2 request keeps its token as it is).
    @Test(arguments: [1, 2, 31, 32, 33, 64, 100])
    func anOutcomesTokenIsTheFramesInEveryFormat(length: Int) throws {
        let token = try DeviceToken(bytes: (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
        let notification = PushNotification(token: token, payload: Array("{\"aps\":{}}".utf8), identifier: 9, expiration: 5, priority: .immediate)
        for format in [NotificationFormat.frame, .enhanced, .simple] {
            let delivery = Delivery(ticket: DeliveryTicket(1), notification: notification, format: format)
            #expect(delivery.tokenSource.token == token, "\(format)")
            #expect(DeliveryOutcome.accepted(delivery).tokenSource.token == token, "\(format)")
        }
        let held = HeldEvent(id: "e1", endpoint: 2, timestamp: 7)
        #expect(held.endpoint == 2 && held.timestamp == 7 && held.id == "e1")
    }

    /// A batch's frames share one block of exactly their size: each delivery writes its own frame (the encoder's,
    /// with the identifier of the send) and reads back its own token and expiration, in every format, and the
    /// block lives on while any delivery of it does.
    @Test(arguments: [NotificationFormat.frame, .enhanced, .simple])
    func framesOfABatchShareOneBlockAndStayTheirOwn(format: NotificationFormat) throws {
        var notifications: [PushNotification] = []
        for i in 0..<40 {
            let tokenBytes: [UInt8] = (0..<(1 + i % 40)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) }
            let alert = String(repeating: "x", count: i * 5)
            let payload = Array("{\"aps\":{\"alert\":\"\(alert)\"}}".utf8)
            // The simple format's frame has no expiration: the block keeps it before the frame.
            let expiration = UInt32(1_900_000_000 + i)
            notifications.append(PushNotification(
                token: try DeviceToken(bytes: tokenBytes), payload: payload, identifier: 0, expiration: expiration,
                priority: .immediate))
        }
        var writer = FrameBlockWriter(capacity: notifications.reduce(0) { $0 + FrameBlockWriter.room(for: $1, format: format) })
        var deliveries = notifications.enumerated().map { i, n in
            #expect(writer.fits(FrameBlockWriter.room(for: n, format: format)))
            return writer.delivery(ticket: DeliveryTicket(UInt64(i)), n, format: format)
        }
        #expect(!writer.fits(1))  // made for exactly these
        writer = FrameBlockWriter(capacity: 0)  // the writer's own reference gone: the deliveries keep the block
        for (i, n) in notifications.enumerated().reversed() {
            var sent = n
            sent.identifier = UInt32(1000 + i)
            // Written in place with its size returned, and nothing past it touched.
            let size = deliveries[i].frameSize
            var written = [UInt8](repeating: 0xA5, count: size + 8)
            let count = written.withUnsafeMutableBytes { deliveries[i].write(identifier: sent.identifier, to: $0.baseAddress!) }
            #expect(count == size)
            #expect(Array(written.prefix(size)) == NotificationEncoder.encodeBytes(sent, format: format))
            #expect(written.suffix(8).allSatisfy { $0 == 0xA5 })
            #expect(size == n.encodedSize(format))
            #expect(deliveries[i].tokenSource.token == n.token)
            #expect(deliveries[i].expiration == n.expiration)
            #expect(deliveries[i].ticket == DeliveryTicket(UInt64(i)))
            deliveries.removeLast()
        }
    }

    /// The packed fields come back as they went in, at their extremes, beside every kind of id, and the suppression
    /// flag sharing the id kind's byte changes neither.
    @Test func aHeldEventsFieldsComeBackAtTheirExtremes() {
        let ids = ["", "e1", String(repeating: "z", count: 16), "123e4567-e89b-12d3-a456-426614174000",
                   "123E4567-E89B-12D3-A456-426614174000", "an id longer than sixteen bytes"]
        for id in ids {
            for timestamp: Int64 in [-1, 0, 1_795_784_033_989, Int64(UInt32.max), Int64.max, Int64.min] {
                for endpoint in [0, 1, HeldEvent.endpointLimit] {
                    var held = HeldEvent(id: id, endpoint: endpoint, timestamp: timestamp)
                    #expect(!held.liftsSuppression)
                    held.liftsSuppression = true
                    #expect(held.liftsSuppression)
                    #expect(held.id == id && held.timestamp == timestamp && held.endpoint == endpoint)
                    held.liftsSuppression = false
                    #expect(!held.liftsSuppression && held.id == id)
                }
            }
        }
    }

    /// Every id comes back exactly as it went in, whichever way it is kept.
    @Test(arguments: [
        "e", "e1", "order-1234567890", "é中文🙂ab", "0123456789abcdef",  // up to 16 bytes: inline
        "0123456789abcdefg", "push 2026-11-26 12:00:00",  // longer: overflow
        "123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000",  // UUIDs, one case
        "12345678-1234-1234-1234-123456789012", "ffffffff-ffff-ffff-ffff-ffffffffffff", "00000000-0000-0000-0000-000000000000",
        "123e4567-E89B-12d3-a456-426614174000",  // mixed case: overflow
        "123e4567e89b-12d3-a456-4266141740000", "123e4567-e89b-12d3-a456-42661417400g", "{23e4567-e89b-12d3-a456-42661417400}",
        "123e4567-e89b-12d3-a456-4266141740\u{e9}",
    ])
    func everyIdComesBackAsItWent(id: String) {
        #expect(HeldEvent(id: id, endpoint: 0, timestamp: 1).id == id)
    }

    /// Which ids are kept inline (no heap object for the held event).
    @Test func shortIdsAndCanonicalUUIDsAreKeptInline() {
        func kind(_ id: String) -> CompactIDKind { EventID(id).packed?.kind ?? .overflow }
        #expect(kind("e123") == CompactIDKind(rawValue: 4))
        #expect(kind(String(repeating: "a", count: 16)) == CompactIDKind(rawValue: 16))
        #expect(kind(String(repeating: "a", count: 17)) == .overflow)
        #expect(kind("123e4567-e89b-12d3-a456-426614174000") == .lowercaseUUID)
        #expect(kind("123E4567-E89B-12D3-A456-426614174000") == .uppercaseUUID)
        #expect(kind("12345678-1234-1234-1234-123456789012") == .lowercaseUUID)
        #expect(kind("123e4567-E89B-12d3-a456-426614174000") == .overflow)
        #expect(kind("123e4567-e89b-12d3-a456_426614174000") == .overflow)
        // Random UUIDs, as Foundation spells them (uppercase) and lowercased; and with one letter's case changed,
        // which mixes the cases wherever another letter is (digits are read eight at a time: any two positions).
        for _ in 0..<100 {
            let uuid = UUID().uuidString
            #expect(kind(uuid) == .uppercaseUUID)
            #expect(HeldEvent(id: uuid, endpoint: 0, timestamp: 0).id == uuid)
            #expect(HeldEvent(id: uuid.lowercased(), endpoint: 0, timestamp: 0).id == uuid.lowercased())
            var characters = Array(uuid)
            let letters = characters.indices.filter { characters[$0].isLetter }
            guard let flipped = letters.randomElement() else { continue }
            characters[flipped] = Character(characters[flipped].lowercased())
            let mixed = String(characters)
            #expect(kind(mixed) == (letters.count > 1 ? .overflow : .lowercaseUUID), "\(mixed)")
            #expect(HeldEvent(id: mixed, endpoint: 0, timestamp: 0).id == mixed)
        }
    }

    /// What each held notification costs besides its frame: its ledger record and its connection's in-flight entry
    /// (its delivery alone: its place in the list gives its identifier, and a run of sends shares one send time,
    /// kept apart), laid out so that the small fields fill what the large ones leave; in its block the frame takes
    /// its own bytes alone (the simple format 4 more, for the expiration it does not carry; an object of its own
    /// would add 24 and malloc's 8 and rounding). The ledger keeps no token: the frame has it.
    @Test func aHeldNotificationsRecordsStayCompact() {
        #expect(MemoryLayout<HeldEvent>.size <= 28)
        // An optional held event takes no byte more: the id's case has values to spare.
        #expect(MemoryLayout<HeldEvent?>.size == MemoryLayout<HeldEvent>.size)
        #expect(MemoryLayout<HeldLedger<HeldEvent>.Record>.stride <= 32)
        #expect(MemoryLayout<Delivery>.stride <= 24)
        let notification = PushNotification(
            token: try! DeviceToken(bytes: Array(repeating: 7, count: 32)), payload: Array(repeating: 0x20, count: 300),
            identifier: 0, expiration: 1, priority: .immediate)
        for format in [NotificationFormat.frame, .enhanced, .simple] {
            #expect(FrameBlockWriter.room(for: notification, format: format) == notification.encodedSize(format) + (format == .simple ? 4 : 0))
        }
    }
}
