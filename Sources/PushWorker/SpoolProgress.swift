import Foundation
import Logging
import PushCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How far into a spool file every line's records are acknowledged, from the blocks produced out of it. A block's
/// lines are those whose newline falls in it; blocks finish (their last record acknowledged) in any order, and the
/// prefix grows to a block's end only when every block before it has finished too. Pure.
struct AcknowledgedPrefix {
    /// Every line before this byte offset has all its records acknowledged.
    private(set) var end: Int64
    /// The number of the first block not in the prefix.
    private var first = 0
    /// From block `first` on, each begun block's end and whether it has finished.
    private var blocks: [(end: Int64, finished: Bool)] = []
    /// Whether the file has been read to its end: no block will begin after those begun.
    private var readToEnd = false

    /// The file has been read to its end and every block begun has finished: all its records are acknowledged.
    var isComplete: Bool { readToEnd && blocks.isEmpty }

    init(start: Int64) { end = start }

    /// Starts a block whose lines end at byte offset `end`; returns its number.
    mutating func begin(end: Int64) -> Int {
        assert(!readToEnd, "a block begun after the end of the file")
        blocks.append((end, false))
        return first + blocks.count - 1
    }

    /// Notes that block `number` has finished; returns the prefix's new end if it grew.
    mutating func finish(_ number: Int) -> Int64? {
        let index = number - first
        guard blocks.indices.contains(index), !blocks[index].finished else { return nil }
        blocks[index].finished = true
        let done = blocks.prefix { $0.finished }.count
        guard done > 0 else { return nil }
        let grown = blocks[done - 1].end
        blocks.removeFirst(done)
        first += done
        guard grown > end else { return nil }
        end = grown
        return end
    }

    /// Notes that the file has been read to its end.
    mutating func endOfFile() { readToEnd = true }
}

/// A spool file's production progress, kept beside it (`FILE.acked`: the acknowledged prefix's end, in decimal), so
/// that production cut short (a shutdown, a crash) goes on where it was instead of producing the file's first events
/// again. Written when the prefix grows (once per block read, by whichever thread finishes the block; never on the
/// cooperative pool), replaced whole by a rename. Once the file has been read to its end (``endOfFile()``) and its
/// last block finishes, the spool file and its progress are removed, and no progress is written after that.
///
/// Its only promise is the one that matters: the recorded offset never runs ahead of what was acknowledged. A
/// progress file that is missing, unreadable or not at a line's end means starting from the beginning: duplicates,
/// never a loss.
final class SpoolProgress: Sendable {
    /// The progress file beside `spool`.
    static func path(for spool: String) -> String { spool + ".acked" }

    let spool: String
    private let state: Mutex<(prefix: AcknowledgedPrefix, finished: Bool)>

    init(spool: String, start: Int64) {
        self.spool = spool
        state = Mutex((AcknowledgedPrefix(start: start), false))
    }

    /// Starts a block whose lines end at byte offset `end`; returns its number for ``finish(_:)``.
    func begin(end: Int64) -> Int { state.withLock { $0.prefix.begin(end: end) } }

    /// Block `number`'s records are all acknowledged: records the grown prefix, if it grew, or removes the file
    /// when this was its last block. Blocks the calling thread for a small write and a rename, or two unlinks.
    func finish(_ number: Int) {
        state.withLock { s in
            guard !s.finished else { return }
            let grown = s.prefix.finish(number)
            if s.prefix.isComplete {
                remove(&s)
            } else if let grown {
                Self.write(grown, to: Self.path(for: spool))
            }
        }
    }

    /// The file has been read to its end: no block begins after this one. Removes the file and its progress when
    /// every block has finished already (else the last to finish does). Blocks the calling thread.
    func endOfFile() {
        state.withLock { s in
            s.prefix.endOfFile()
            if !s.finished, s.prefix.isComplete { remove(&s) }
        }
    }

    private func remove(_ s: inout (prefix: AcknowledgedPrefix, finished: Bool)) {
        s.finished = true
        unlink(spool)
        unlink(Self.path(for: spool))
    }

    /// The acknowledged prefix's end recorded for `spool`: 0 without a usable record (none, unreadable, beyond
    /// the file, or not just after a newline), with `problem` saying why when there was a record. Blocks.
    static func resumeOffset(for spool: String) -> (offset: Int64, problem: String?) {
        guard let text = try? String(contentsOfFile: path(for: spool), encoding: .utf8) else { return (0, nil) }
        guard let offset = Int64(text.trimmingCharacters(in: .whitespacesAndNewlines)), offset >= 0 else {
            return (0, "the progress file does not hold an offset")
        }
        guard offset > 0 else { return (0, nil) }
        let fd = open(spool, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return (0, "the spool file cannot be opened: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var byte: UInt8 = 0
        guard pread(fd, &byte, 1, off_t(offset - 1)) == 1, byte == 0x0A else {
            return (0, "offset \(offset) is not the end of a line of the spool file")
        }
        return (offset, nil)
    }

    /// Replaces `path` with `offset` in decimal (a new file, renamed over the old one); a failure leaves the old.
    private static func write(_ offset: Int64, to path: String) {
        let temporary = path + ".new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        let bytes = Array("\(offset)\n".utf8)
        let failure = bytes.withUnsafeBytes { WholeWrite.write($0, to: fd) }
        close(fd)
        if failure == nil { rename(temporary, path) } else { unlink(temporary) }
    }
}
