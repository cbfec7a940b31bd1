import PushCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads lines of raw bytes from a file descriptor in large chunks (no decoding, so invalid UTF-8 reaches the
/// validator as it is). A final line without a newline counts.
struct LineReader {
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var start = 0
    /// `buffer[start..<scanned]` holds no newline: a line longer than a read is searched once, not once per read.
    private var scanned = 0
    private var eof = false
    private let ownsDescriptor: Bool

    /// Opens `path`, or standard input when it is nil or `-`.
    init(path: String?) throws(CLIError) {
        if let path, path != "-" {
            let fd = open(path, O_RDONLY)
            guard fd >= 0 else { throw CLIError.usage("cannot open \(path): \(String(cString: strerror(errno)))") }
            self.fd = fd
            ownsDescriptor = true
        } else {
            fd = 0
            ownsDescriptor = false
        }
    }

    func close() {
        if ownsDescriptor { _ = Glibc.close(fd) }
    }

    /// The next line without its `\n`, or nil at the end of the input.
    mutating func next() throws(CLIError) -> ArraySlice<UInt8>? {
        while true {
            if let newline = buffer[max(start, scanned)...].firstIndex(of: 0x0A) {
                let line = buffer[start..<newline]
                start = newline + 1
                scanned = start
                return line
            }
            scanned = buffer.count
            if eof {
                guard start < buffer.count else { return nil }
                let line = buffer[start...]
                start = buffer.count
                return line
            }
            if start > 0 {
                buffer.removeFirst(start)
                scanned -= start
                start = 0
            }
            let chunk = 1 << 16
            let oldCount = buffer.count
            buffer.append(contentsOf: repeatElement(0, count: chunk))
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + oldCount, chunk) }
            guard n >= 0 else { throw CLIError.failure("read failed: \(String(cString: strerror(errno)))") }
            buffer.removeLast(chunk - n)
            if n == 0 { eof = true }
        }
    }
}

/// Buffered standard output. Output that cannot be written (a full disk, a closed descriptor) is an error, not a
/// silently shorter result: ``write(_:)`` and ``flush()`` throw once a write fails.
struct OutputWriter {
    private var buffer: [UInt8] = []
    private let fd: Int32

    init(fd: Int32 = 1) {
        self.fd = fd
        buffer.reserveCapacity(1 << 16)
    }

    mutating func write(_ text: String) throws(CLIError) {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= 1 << 16 { try flush() }
    }

    mutating func write(bytes: [UInt8]) throws(CLIError) {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 16 { try flush() }
    }

    mutating func flush() throws(CLIError) {
        let failure = buffer.withUnsafeBytes { WholeWrite.write($0, to: fd) }
        buffer.removeAll(keepingCapacity: true)
        if let failure { throw CLIError.failure("cannot write the output: \(String(cString: strerror(failure.error)))") }
    }
}

/// A failure with the SPEC's exit codes: usage (2) or anything else (1).
enum CLIError: Error, CustomStringConvertible {
    case usage(String)
    case failure(String)

    var description: String {
        switch self {
        case .usage(let m), .failure(let m): m
        }
    }

    var isUsage: Bool {
        if case .usage = self { return true }
        return false
    }
}

/// Whether a line holds nothing but JSON whitespace (such lines are skipped, keeping the line count).
func isBlank(_ line: ArraySlice<UInt8>) -> Bool {
    line.allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }
}
