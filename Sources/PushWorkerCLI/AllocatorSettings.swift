import CPushAllocator

#if canImport(Glibc)
import Glibc
#endif

/// The C allocator's settings for this process, made before any other thread starts.
///
/// glibc gives each thread that allocates a heap of its own (an arena of up to 64 MiB regions). A region starts
/// writable only as far as the allocator's top pad (128 KiB by default) and grows by `mprotect`, a page or a few at a
/// time, as allocations reach its end. The worker's consumer thread makes one frame per event and librdkafka's
/// broker threads one buffer per fetch, so every region they fill is grown thousands of times, each a system call
/// that splits and merges the kernel's mappings: 5–7% of the worker's CPU in a backlog, by profile. A top pad of 64 MiB
/// makes each new region writable in one call. It reserves address space and commit charge, not memory: pages are
/// backed when first written. The same pad also means a heap keeps up to 64 MiB of freed memory at its top instead of
/// returning it at once. And setting it stops glibc from raising its mmap threshold (128 KiB) as large blocks are
/// freed: a larger allocation, such as librdkafka's buffer for a large fetch answer, is mapped afresh each time.
///
/// `GLIBC_TUNABLES` in the environment wins: with it set, nothing is changed (`glibc.malloc.top_pad` is this
/// setting).
public enum AllocatorSettings {
    /// The top pad set: 64 MiB, the size of one of glibc's thread heaps.
    public static let topPad = 64 << 20

    /// Applies the settings unless `GLIBC_TUNABLES` is set, and says whether it did (never on a C library other than
    /// glibc). Call first, before any thread is started.
    @discardableResult
    public static func apply(tunablesSet: Bool = getenv("GLIBC_TUNABLES") != nil) -> Bool {
        guard !tunablesSet else { return false }
        return pushworker_set_malloc_top_pad(Int32(topPad)) == 1
    }
}
