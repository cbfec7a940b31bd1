// The entry point the fuzz targets share: SwiftPM names an executable's entry point itself, so libFuzzer's own
// `main` is never linked in; this hands the command line to libFuzzer's driver instead.
import CFuzzerDriver
#if canImport(Glibc)
import Glibc
#endif

/// The target's body, set once before the driver starts (a C function pointer cannot capture it).
nonisolated(unsafe) private var fuzzBody: (([UInt8]) -> Void)?

/// Runs libFuzzer with the process's command line (-max_total_time=, corpus folders, ...), calling `body` with
/// every input's bytes; exits with the driver's status.
public func runFuzzer(_ body: @escaping ([UInt8]) -> Void) -> Never {
    fuzzBody = body
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        fuzzBody!(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
        return 0
    })
}
