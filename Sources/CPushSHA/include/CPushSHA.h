#ifndef CPUSHSHA_H
#define CPUSHSHA_H

#include <stddef.h>
#include <stdint.h>

/// 1 when this CPU has the SHA extensions (with SSSE3 and SSE4.1) that `pushsha_sha1_compress` needs, else 0.
int pushsha_sha1_hardware(void);

/// Compresses `blocks` whole 64-byte blocks of `data` into the SHA-1 `state` (h0...h4) with the SHA extensions.
/// Only to be called when `pushsha_sha1_hardware()` returned 1.
void pushsha_sha1_compress(uint32_t state[5], const uint8_t *data, size_t blocks);

#endif
