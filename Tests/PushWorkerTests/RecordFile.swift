import Foundation
import PushCore

/// The simulator's `--record` file, read on from where the last read stopped, up to its last complete line: the
/// device token of every notification recorded, with repeats, and the distinct ones. (Reading and parsing the
/// whole file every time a test polls it took a core from the worker under test.)
final class RecordFile {
    let path: String
    private(set) var tokens: [String] = []
    private(set) var distinct: Set<String> = []
    private var offset: UInt64 = 0

    init(_ path: String) { self.path = path }

    /// Reads what was recorded since the last call; returns self.
    @discardableResult
    func update() -> RecordFile {
        guard let file = FileHandle(forReadingAtPath: path) else { return self }
        defer { try? file.close() }
        guard (try? file.seek(toOffset: offset)) != nil, let data = try? file.readToEnd(),
              let end = data.lastIndex(of: UInt8(ascii: "\n"))
        else { return self }
        offset += UInt64(data.distance(from: data.startIndex, to: end) + 1)
        for line in data[..<end].split(separator: UInt8(ascii: "\n")) {
            guard let token = try? JSONValue(parsing: String(decoding: line, as: UTF8.self))["token"]?.stringValue
            else { continue }
            tokens.append(token)
            distinct.insert(token)
        }
        return self
    }
}
