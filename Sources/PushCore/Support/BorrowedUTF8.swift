extension StringProtocol {
    /// Calls `body` with the text's UTF-8 bytes in place, without copying the text (what `String.withUTF8` needs a
    /// `var` for, and so a retained copy); text without contiguous UTF-8 storage is copied first. Inlinable, so that
    /// callers in other modules get it specialized for their `String` or `Substring` (not the generic witness calls).
    @inlinable @inline(__always)
    public func withBorrowedUTF8<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let result = try utf8.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        var copy = String(self)
        return try copy.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
    }
}
