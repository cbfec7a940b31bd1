import Foundation
import Testing
@testable import PushCore

/// The worker's validators agree with the JSON Schemas on every example under `schemas/` (`scripts/check-schemas`
/// checks the same examples against the schemas themselves).
@Suite struct SchemaExamplesTests {
    static func examples(_ kind: String, _ validity: String) -> [String] {
        let dir = "\(schemasDirectory)/\(kind)/examples/\(validity)"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return names.filter { $0.hasSuffix(".json") }.sorted().map { "\(dir)/\($0)" }
    }

    static func load(_ path: String) -> [UInt8] {
        Array(FileManager.default.contents(atPath: path)!)
    }

    @Test func thereAreEnoughExamples() {
        #expect(Self.examples("notification-event", "valid").count >= 10)
        #expect(Self.examples("notification-event", "invalid").count >= 15)
        #expect(Self.examples("delivery-error-event", "valid").count >= 3)
        #expect(Self.examples("feedback-event", "invalid").count >= 3)
    }

    @Test(arguments: examples("notification-event", "valid"))
    func validNotificationEvent(path: String) {
        // Examples named http2-* are valid for apps on the http2 transport only (priority 1); the others for both.
        let http2Only = path.split(separator: "/").last!.hasPrefix("http2-")
        for decoder in http2Only ? [EventDecoder.http2] : [EventDecoder(), .http2] {
            let result = decoder.decode(Self.load(path))
            #expect(result.success != nil, "\(path): \(result.failure?.description ?? "")")
        }
    }

    /// Each invalid example is named `REASON--rule.json`; the validator must refuse it with that reason, for apps on
    /// either transport (a rule named `http2-…` or `binary-…`: that transport's apps only).
    @Test(arguments: examples("notification-event", "invalid"))
    func invalidNotificationEvent(path: String) {
        let name = path.split(separator: "/").last!
        let reason = String(name[..<name.range(of: "--")!.lowerBound])
        let rule = name[name.range(of: "--")!.upperBound...]
        if !rule.hasPrefix("http2-") {
            #expect(EventDecoder().decode(Self.load(path)).failure?.reason.rawValue == reason, "\(path)")
        }
        if !rule.hasPrefix("binary-") {
            #expect(EventDecoder.http2.decode(Self.load(path)).failure?.reason.rawValue == reason, "\(path) (http2)")
        }
    }

    @Test(arguments: examples("delivery-error-event", "valid"))
    func validDeliveryErrorEvent(path: String) throws {
        let event = try DeliveryErrorEvent(validating: try JSONValue(parsing: Self.load(path)))
        // what the worker writes back reads the same
        let again = try DeliveryErrorEvent(validating: try JSONValue(parsing: event.json()))
        #expect(again == event)
    }

    @Test(arguments: examples("delivery-error-event", "invalid"))
    func invalidDeliveryErrorEvent(path: String) throws {
        #expect(throws: OutputEventError.self) { try DeliveryErrorEvent(validating: try JSONValue(parsing: Self.load(path))) }
    }

    @Test(arguments: examples("feedback-event", "valid"))
    func validFeedbackEvent(path: String) throws {
        let event = try FeedbackEvent(validating: try JSONValue(parsing: Self.load(path)))
        #expect(try FeedbackEvent(validating: try JSONValue(parsing: event.json())) == event)
    }

    @Test(arguments: examples("feedback-event", "invalid"))
    func invalidFeedbackEvent(path: String) throws {
        #expect(throws: OutputEventError.self) { try FeedbackEvent(validating: try JSONValue(parsing: Self.load(path))) }
    }
}
