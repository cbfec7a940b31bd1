#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes a buffer whole through `write(2)` (or a stand-in with its contract), going on after short writes and
/// retrying an interrupted call: every writer of files and standard streams shares this one loop.
public enum WholeWrite {
    /// Nil when every byte was written; else how many were and the error that stopped the rest (EIO for a write
    /// that wrote nothing and reported nothing).
    public static func write(
        _ bytes: UnsafeRawBufferPointer, using write: (UnsafeRawBufferPointer) -> Int
    ) -> (written: Int, error: Int32)? {
        var offset = 0
        while offset < bytes.count {
            let n = write(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return (offset, n < 0 ? errno : EIO) }
            offset += n
        }
        return nil
    }

    /// The same to file descriptor `fd`.
    public static func write(_ bytes: UnsafeRawBufferPointer, to fd: Int32) -> (written: Int, error: Int32)? {
        write(bytes) { Glibc.write(fd, $0.baseAddress!, $0.count) }
    }
}
