import NIOCore
@testable import PushCore

/// Bytes from hex written by hand; spaces, newlines and `|` separators are ignored.
func hex(_ text: String) -> [UInt8] {
    let digits = text.filter { $0.isHexDigit }
    precondition(digits.count % 2 == 0, "odd number of hex digits in test data")
    return Hex.decode(digits)!
}

func bytes(_ buffer: ByteBuffer) -> [UInt8] { Array(buffer.readableBytesView) }

func buffer(_ bytes: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: bytes) }

let sampleTokenHex = "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"
let sampleToken = try! DeviceToken(hex: sampleTokenHex)

/// `{"aps":{"alert":"Hi"}}`, 22 bytes.
let hiPayload = Array(#"{"aps":{"alert":"Hi"}}"#.utf8)

/// The `schemas/` folder of this checkout.
let schemasDirectory: String = {
    var parts = #filePath.split(separator: "/", omittingEmptySubsequences: false)
    parts.removeLast(3)  // Tests/PushCoreTests/TestSupport.swift
    return parts.joined(separator: "/") + "/schemas"
}()

func decodeEvent(_ json: String, format: NotificationFormat = .frame) -> Result<NotificationEvent, EventRejection> {
    EventDecoder(format: format).decode(json)
}

extension Result {
    var success: Success? {
        if case .success(let s) = self { return s }
        return nil
    }

    var failure: Failure? {
        if case .failure(let f) = self { return f }
        return nil
    }
}
