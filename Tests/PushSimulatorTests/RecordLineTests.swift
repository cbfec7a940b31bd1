import Foundation
import Testing
@testable import PushSimulator

/// The record file's lines are read by other tools (the end-to-end harness, users' checks): their exact bytes.
@Suite struct RecordLineTests {
    @Test func aNotificationsLine() {
        let record = RecordedNotification(
            app: "com.example.\"app\"", token: [0x00, 0xAB, 0x7F, 0xFF], payload: Array(#"{"aps":{"alert":"Hi"}}"#.utf8),
            identifier: 4_294_967_295, expiry: 0, priority: 10, command: 2, connection: 12, time: 1_795_256_130_007)
        let expected = #"{"app":"com.example.\"app\"","token":"00ab7fff","payload":{"aps":{"alert":"Hi"}},"identifier":4294967295,"expiry":0,"priority":10,"command":2,"connection":12,"time":"2026-11-21T10:15:30.007Z","time_ms":1795256130007}"#
        #expect(String(decoding: record.jsonLine, as: UTF8.self) == expected)
        var appended = Array("before\n".utf8)
        record.appendJSONLine(to: &appended)
        #expect(String(decoding: appended, as: UTF8.self) == "before\n" + expected)
    }

    @Test func anAPIRequestsLine() {
        let accepted = AcceptedRequest(
            token: [0xDE, 0xAD], topic: "com.example.app", pushType: "alert", priority: 5, expiration: 1_800_000_000,
            collapseID: "c\\1", apnsID: "123E4567-E89B-12D3-A456-426614174000", body: Array(#"{"aps":{}}"#.utf8))
        let request = RecordedRequest(accepted: accepted, connection: 3, time: -1)
        let expected = #"{"api":true,"topic":"com.example.app","token":"dead","push_type":"alert","priority":5,"expiration":1800000000,"collapse_id":"c\\1","apns_id":"123E4567-E89B-12D3-A456-426614174000","payload":{"aps":{}},"connection":3,"time":"1969-12-31T23:59:59.999Z","time_ms":-1}"#
        #expect(String(decoding: request.jsonLine, as: UTF8.self) == expected)
        var withoutCollapse = accepted
        withoutCollapse.collapseID = nil
        #expect(String(decoding: RecordedRequest(accepted: withoutCollapse, connection: 3, time: -1).jsonLine, as: UTF8.self)
            == expected.replacingOccurrences(of: #""c\\1""#, with: "null"))
    }
}
