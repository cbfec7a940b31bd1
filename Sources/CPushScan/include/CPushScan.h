#ifndef CPUSHSCAN_H
#define CPUSHSCAN_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/// How many of the first `count` bytes at `bytes` need no attention inside a JSON string (printable ASCII other than
/// `"` and `\`), read sixteen at a time: the index of the first byte that does, or the largest multiple of sixteen
/// not past `count` when none of those bytes does. It never passes a byte that needs attention; the caller reads the
/// rest (under sixteen bytes) its own way. 0 without SSE2.
static inline size_t pushscan_plain_string_prefix(const void *bytes, size_t count) {
    size_t index = 0;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    while (index + 16 <= count) {
        const __m128i chunk = _mm_loadu_si128((const __m128i *)((const uint8_t *)bytes + index));
        // Signed: a byte of 0x80 or above is negative, so "below 0x20" also finds the non-ASCII bytes.
        const __m128i stops = _mm_or_si128(_mm_cmplt_epi8(chunk, space),
                                           _mm_or_si128(_mm_cmpeq_epi8(chunk, quote), _mm_cmpeq_epi8(chunk, backslash)));
        const unsigned mask = (unsigned)_mm_movemask_epi8(stops);
        if (mask != 0) return index + (size_t)__builtin_ctz(mask);
        index += 16;
    }
#else
    (void)bytes;
    (void)count;
#endif
    return index;
}

#endif
