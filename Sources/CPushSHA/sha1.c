/*
 * SHA-1 block compression with the x86 SHA extensions (SHA-NI), for the UUID version 5 apns-ids of PushCore.
 * Pure computation, no I/O. The portable Swift compression is used where the CPU lacks the extensions.
 */
#include "CPushSHA.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

int pushsha_sha1_hardware(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int ssse3 = (c >> 9) & 1, sse41 = (c >> 19) & 1;
    if (!ssse3 || !sse41) return 0;
    if (__get_cpuid_max(0, 0) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 29) & 1;
}

/*
 * Four rounds once the message schedule is in full swing (groups 3 to 16): E takes its next value from the A saved
 * four rounds before plus the words W, ABCD is saved for the next group, and W finishes one later group's words
 * (SHA1MSG2), starts another's (SHA1MSG1) and is folded into a third (XOR).
 */
#define GROUP(E, E_NEXT, W, FINISH, START, FOLD, F) \
    do { \
        E = _mm_sha1nexte_epu32(E, W); \
        E_NEXT = abcd; \
        FINISH = _mm_sha1msg2_epu32(FINISH, W); \
        abcd = _mm_sha1rnds4_epu32(abcd, E, F); \
        START = _mm_sha1msg1_epu32(START, W); \
        FOLD = _mm_xor_si128(FOLD, W); \
    } while (0)

/*
 * Four rounds per SHA1RNDS4; SHA1NEXTE derives the next E from the A of four rounds before; SHA1MSG1, XOR and
 * SHA1MSG2 extend the message schedule four words at a time, each group preparing the words of a later one.
 * The state is kept as ABCD with A in the top lane, and E in the top lane of its own register.
 */
__attribute__((target("sha,sse4.1,ssse3")))
void pushsha_sha1_compress(uint32_t state[5], const uint8_t *data, size_t blocks) {
    const __m128i byte_order = _mm_set_epi64x(0x0001020304050607LL, 0x08090a0b0c0d0e0fLL);
    __m128i abcd = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)state), 0x1B);
    __m128i e0 = _mm_set_epi32((int)state[4], 0, 0, 0);
    __m128i e1, m0, m1, m2, m3;
    for (; blocks > 0; blocks--, data += 64) {
        const __m128i abcd_before = abcd, e_before = e0;
        /* rounds 0-3 */
        m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 0)), byte_order);
        e0 = _mm_add_epi32(e0, m0);
        e1 = abcd;
        abcd = _mm_sha1rnds4_epu32(abcd, e0, 0);
        /* rounds 4-7 */
        m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16)), byte_order);
        e1 = _mm_sha1nexte_epu32(e1, m1);
        e0 = abcd;
        abcd = _mm_sha1rnds4_epu32(abcd, e1, 0);
        m0 = _mm_sha1msg1_epu32(m0, m1);
        /* rounds 8-11 */
        m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 32)), byte_order);
        e0 = _mm_sha1nexte_epu32(e0, m2);
        e1 = abcd;
        abcd = _mm_sha1rnds4_epu32(abcd, e0, 0);
        m1 = _mm_sha1msg1_epu32(m1, m2);
        m0 = _mm_xor_si128(m0, m2);
        m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 48)), byte_order);
        GROUP(e1, e0, m3, m0, m2, m1, 0); /* rounds 12-15 */
        GROUP(e0, e1, m0, m1, m3, m2, 0); /* rounds 16-19 */
        GROUP(e1, e0, m1, m2, m0, m3, 1); /* rounds 20-23 */
        GROUP(e0, e1, m2, m3, m1, m0, 1); /* rounds 24-27 */
        GROUP(e1, e0, m3, m0, m2, m1, 1); /* rounds 28-31 */
        GROUP(e0, e1, m0, m1, m3, m2, 1); /* rounds 32-35 */
        GROUP(e1, e0, m1, m2, m0, m3, 1); /* rounds 36-39 */
        GROUP(e0, e1, m2, m3, m1, m0, 2); /* rounds 40-43 */
        GROUP(e1, e0, m3, m0, m2, m1, 2); /* rounds 44-47 */
        GROUP(e0, e1, m0, m1, m3, m2, 2); /* rounds 48-51 */
        GROUP(e1, e0, m1, m2, m0, m3, 2); /* rounds 52-55 */
        GROUP(e0, e1, m2, m3, m1, m0, 2); /* rounds 56-59 */
        GROUP(e1, e0, m3, m0, m2, m1, 3); /* rounds 60-63 */
        GROUP(e0, e1, m0, m1, m3, m2, 3); /* rounds 64-67 */
        /* rounds 68-71 */
        e1 = _mm_sha1nexte_epu32(e1, m1);
        e0 = abcd;
        m2 = _mm_sha1msg2_epu32(m2, m1);
        abcd = _mm_sha1rnds4_epu32(abcd, e1, 3);
        m3 = _mm_xor_si128(m3, m1);
        /* rounds 72-75 */
        e0 = _mm_sha1nexte_epu32(e0, m2);
        e1 = abcd;
        m3 = _mm_sha1msg2_epu32(m3, m2);
        abcd = _mm_sha1rnds4_epu32(abcd, e0, 3);
        /* rounds 76-79 */
        e1 = _mm_sha1nexte_epu32(e1, m3);
        e0 = abcd;
        abcd = _mm_sha1rnds4_epu32(abcd, e1, 3);
        e0 = _mm_sha1nexte_epu32(e0, e_before);
        abcd = _mm_add_epi32(abcd, abcd_before);
    }
    _mm_storeu_si128((__m128i *)state, _mm_shuffle_epi32(abcd, 0x1B));
    state[4] = (uint32_t)_mm_extract_epi32(e0, 3);
}

#else

int pushsha_sha1_hardware(void) { return 0; }

void pushsha_sha1_compress(uint32_t state[5], const uint8_t *data, size_t blocks) {
    (void)state; (void)data; (void)blocks;
}

#endif
