// Declarations only: LLVMFuzzerRunDriver comes from libFuzzer (linked by -sanitize=fuzzer).
#include "CFuzzerDriver.h"
