import Testing
@testable import PushCore
@testable import PushWorkerCLI

/// The output lines of `validate` and `encode` are parsed by other tools: their exact form is tested here.
@Suite struct CLIOutputTests {
    @Test func validateLines() {
        let decoder = EventDecoder()
        let ok = ValidateCommand.verdict(line: 3, event: ArraySlice(#"{"id":"a\"1","app":"x","token":"ab","payload":{"aps":{}}}"#.utf8), decoder: decoder)
        #expect(ok.valid)
        #expect(String(decoding: ok.json, as: UTF8.self) == #"{"line": 3, "id": "a\"1", "valid": true}"#)
        let bad = ValidateCommand.verdict(line: 4, event: ArraySlice(#"{"id":"b","app":"x","token":"zz","payload":{"aps":{}}}"#.utf8), decoder: decoder)
        #expect(!bad.valid)
        #expect(String(decoding: bad.json, as: UTF8.self) == #"{"line": 4, "id": "b", "valid": false, "reason": "invalid_token_format", "detail": "token is not hex: unexpected character at position 0"}"#)
        let anonymous = ValidateCommand.verdict(line: 1, event: ArraySlice("nope".utf8), decoder: decoder)
        #expect(String(decoding: anonymous.json, as: UTF8.self).hasPrefix(#"{"line": 1, "id": null, "valid": false, "reason": "malformed_event", "detail": "#))
    }

    @Test func encodeLines() {
        let encoder = LineEncoder(format: .simple, now: 1000, defaultTTL: 10)
        let line = encoder.encode(ArraySlice(#"{"id":"e","app":"x","token":"ABCD","payload":{"aps":{}}}"#.utf8), identifier: 1)
        #expect(line.ok)
        #expect(line.line == "e 000002abcd000a7b22617073223a7b7d7d")
        let expired = encoder.encode(ArraySlice(#"{"id":"e","app":"x","token":"ab","payload":{"aps":{}},"expiration":999}"#.utf8), identifier: 2)
        #expect(!expired.ok)
        #expect(expired.line == "e error:expired")
        let frame = LineEncoder(format: .frame, now: 1000, defaultTTL: 10)
            .encode(ArraySlice(#"{"id":"f","app":"x","token":"ab","payload":{"aps":{}}}"#.utf8), identifier: 0x0A0B_0C0D)
        // identifier 0a0b0c0d, expiration now + ttl = 1010 = 0x3f2, priority 10; frame length 4 + 13 + 7 + 7 + 4 = 35
        #expect(frame.line == "f 02000000230100" + "01ab" + "02000a7b22617073223a7b7d7d" + "0300040a0b0c0d" + "040004000003f2" + "0500010a")
    }

    @Test func printableIDs() {
        #expect(LineEncoder.printable(id: nil) == "-")
        #expect(LineEncoder.printable(id: "abc") == "abc")
        #expect(LineEncoder.printable(id: "é😀") == "é😀")
        #expect(LineEncoder.printable(id: "a b") == #""a b""#)
        #expect(LineEncoder.printable(id: "a\tb") == #""a\tb""#)
        #expect(LineEncoder.printable(id: "\"q") == #""\"q""#)
        #expect(LineEncoder.printable(id: "-") == #""-""#)
    }

    @Test func usageErrorsExitTwo() throws {
        #expect(PushWorkerCommand.exitCode(for: CLIError.usage("x")).rawValue != 0)
        #expect(CLIError.usage("x").isUsage)
        #expect(!CLIError.failure("x").isUsage)
        #expect(throws: (any Error).self) { try PushWorkerCommand.parseAsRoot(["encode", "--format", "binary"]) }
        #expect(throws: (any Error).self) { try PushWorkerCommand.parseAsRoot(["encode", "--default-ttl", "-1"]) }
    }
}
