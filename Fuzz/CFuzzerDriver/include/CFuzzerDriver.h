// libFuzzer's driver, for fuzz targets that bring their own entry point (SwiftPM names an executable's entry point
// itself, so libFuzzer's `main` is never linked in).
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
