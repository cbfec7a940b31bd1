import Foundation
import Synchronization

/// Reads a pipe to its end on a thread of its own, with blocking reads. `FileHandle.readabilityHandler` is not used:
/// it installs a libdispatch read source, and tearing such sources down while other tests open and close pipes
/// crashes libdispatch's manager thread on Linux (`_dispatch_event_loop_drain`, swift-corelibs-libdispatch#949; it
/// took down a whole test run once).
public final class PipeReader: Sendable {
    private let data = Mutex(Data())
    private let finished = DispatchSemaphore(value: 0)

    /// Starts reading `handle` (the read end of a pipe whose write end the child holds).
    public init(_ handle: FileHandle) {
        let thread = Thread { [self] in
            while true {
                let chunk = handle.availableData  // blocks until something arrives; empty at the end
                if chunk.isEmpty { break }
                data.withLock { $0.append(chunk) }
            }
            finished.signal()
        }
        thread.name = "pipe-reader"
        thread.start()
    }

    /// What was read so far.
    public var text: String { String(decoding: data.withLock { $0 }, as: UTF8.self) }

    /// Waits for the end of the pipe (every writer has closed it) and returns everything read.
    public func readToEnd() -> Data {
        finished.wait()
        finished.signal()
        return data.withLock { $0 }
    }
}
