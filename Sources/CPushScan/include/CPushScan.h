#ifndef CPUSHSCAN_H
#define CPUSHSCAN_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/// Whether a byte inside a JSON string needs attention: below 0x20, non-ASCII, `"` or `\\`.
static inline int pushscan_string_stop(uint8_t byte) {
    return byte < 0x20 || byte >= 0x80 || byte == '"' || byte == '\\';
}

/// A bit for each of the sixteen bytes at `bytes` that needs attention inside a JSON string
/// (``pushscan_string_stop``), the first byte's lowest: one test with SSE2, a byte at a time without.
static inline unsigned pushscan_string_stops16(const void *bytes) {
#if defined(__SSE2__)
    const __m128i chunk = _mm_loadu_si128((const __m128i *)bytes);
    const __m128i quoteOrBackslash =
        _mm_or_si128(_mm_cmpeq_epi8(chunk, _mm_set1_epi8('"')), _mm_cmpeq_epi8(chunk, _mm_set1_epi8('\\')));
    // Signed: a byte of 0x80 or above is negative, so "below 0x20" also finds the non-ASCII bytes.
    const __m128i stops = _mm_or_si128(_mm_cmplt_epi8(chunk, _mm_set1_epi8(0x20)), quoteOrBackslash);
    return (unsigned)_mm_movemask_epi8(stops);
#else
    unsigned mask = 0;
    for (int i = 0; i < 16; i++) mask |= (unsigned)pushscan_string_stop(((const uint8_t *)bytes)[i]) << i;
    return mask;
#endif
}

/// The index of the first of the bytes `buffer[start..<count]` that needs attention inside a JSON string
/// (``pushscan_string_stop``), or `count` when none does. It reads sixteen at a time; the last sixteen of the
/// buffer once more for the bytes after the last whole sixteen, so a string at a buffer's end (an event's last
/// value) needs no byte at a time. A buffer of fewer than sixteen bytes, or a CPU without SSE2, is read a byte at
/// a time.
static inline size_t pushscan_plain_string_end(const void *buffer, size_t start, size_t count) {
    const uint8_t *bytes = (const uint8_t *)buffer;
    size_t index = start;
#if defined(__SSE2__)
    if (count >= 16) {
        while (index + 16 <= count) {
            const unsigned mask = pushscan_string_stops16(bytes + index);
            if (mask != 0) return index + (size_t)__builtin_ctz(mask);
            index += 16;
        }
        if (index == count) return count;
        // The bytes of the last sixteen before `index` were read already: shifted out.
        const unsigned mask = pushscan_string_stops16(bytes + count - 16) >> (index + 16 - count);
        return mask != 0 ? index + (size_t)__builtin_ctz(mask) : count;
    }
#endif
    while (index < count && !pushscan_string_stop(bytes[index])) index += 1;
    return index;
}

/// Decodes hex digits (either case) sixteen at a time from `text` (`count` bytes) into `out`, eight bytes for each
/// sixteen digits, the first digit of a pair the high nibble, and stops before the first sixteen that hold any other
/// byte or run past `count`: returns how many digits it decoded (a multiple of sixteen; `out` needs room for half as
/// many bytes). The caller reads the rest its own way, and finds there any byte that is not a digit. 0 without SSE2.
static inline size_t pushscan_hex_pairs(const void *text, size_t count, uint8_t *out) {
    size_t index = 0;
#if defined(__SSE2__)
    const __m128i zeroDigit = _mm_set1_epi8('0');
    const __m128i nine = _mm_set1_epi8(9);
    const __m128i caseBit = _mm_set1_epi8(0x20);
    const __m128i letterA = _mm_set1_epi8('a');
    const __m128i five = _mm_set1_epi8(5);
    const __m128i ten = _mm_set1_epi8(10);
    const __m128i lowBytes = _mm_set1_epi16(0x00FF);
    while (index + 16 <= count) {
        const __m128i chunk = _mm_loadu_si128((const __m128i *)((const uint8_t *)text + index));
        // Unsigned "at most": x <= n exactly when min(x, n) == x.
        const __m128i digit = _mm_sub_epi8(chunk, zeroDigit);
        const __m128i isDigit = _mm_cmpeq_epi8(_mm_min_epu8(digit, nine), digit);
        const __m128i letter = _mm_sub_epi8(_mm_or_si128(chunk, caseBit), letterA);
        const __m128i isLetter = _mm_cmpeq_epi8(_mm_min_epu8(letter, five), letter);
        if (_mm_movemask_epi8(_mm_or_si128(isDigit, isLetter)) != 0xFFFF) break;
        const __m128i values = _mm_or_si128(_mm_and_si128(isDigit, digit),
                                            _mm_and_si128(isLetter, _mm_add_epi8(letter, ten)));
        // Each 16-bit lane holds a pair, its first digit in the low byte.
        const __m128i high = _mm_slli_epi16(_mm_and_si128(values, lowBytes), 4);
        const __m128i low = _mm_srli_epi16(values, 8);
        const __m128i bytes = _mm_packus_epi16(_mm_or_si128(high, low), _mm_setzero_si128());
        _mm_storel_epi64((__m128i *)(out + index / 2), bytes);
        index += 16;
    }
#else
    (void)text;
    (void)count;
    (void)out;
#endif
    return index;
}

#endif
