import Foundation

/// The test PKI, made by `scripts/gen-pki` (idempotent) under the checkout's `pki/` the first time a test asks.
public enum TestPKI {
    /// The checkout's root folder.
    public static let root: String = {
        var parts = #filePath.split(separator: "/", omittingEmptySubsequences: false)
        parts.removeLast(3)  // Tests/PushTestSupport/TestPKI.swift
        return parts.joined(separator: "/")
    }()

    public static let directory: String = {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["\(root)/scripts/gen-pki", "\(root)/pki"]
        process.standardOutput = FileHandle.nullDevice
        try! process.run()
        process.waitUntilExit()
        precondition(process.terminationStatus == 0, "scripts/gen-pki failed")
        return "\(root)/pki"
    }()

    public static func path(_ name: String) -> String { "\(directory)/\(name)" }
}
