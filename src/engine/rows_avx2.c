/* rows_avx2.c: the 16x16 transposes of 16-bit elements that move V rows
 * into and out of a session's cache (session.c cpu_rows keeps V
 * transposed): four rounds of unpacks and a 128-bit lane exchange instead
 * of 256 scalar loads and stores.
 * Owns: the AVX2 transpose. Does not own: when it runs (session.c checks
 * the CPU; test_kvengine compares it with the scalar rows). */
#include <immintrin.h>

#include "engine.h"

/* dst[c * ds + r] = src[r * ss + c] for r, c < 16 */
void mu_rows_tr16_avx2(const uint16_t *src, size_t ss, uint16_t *dst, size_t ds) {
    __m256i r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm256_loadu_si256((const __m256i *)(src + (size_t)i * ss));
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm256_unpacklo_epi16(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi16(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm256_unpacklo_epi32(t[i], t[i + 2]);
        r[i + 1] = _mm256_unpackhi_epi32(t[i], t[i + 2]);
        r[i + 2] = _mm256_unpacklo_epi32(t[i + 1], t[i + 3]);
        r[i + 3] = _mm256_unpackhi_epi32(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + 2 * j] = _mm256_unpacklo_epi64(r[i + j], r[i + j + 4]);
            t[i + 2 * j + 1] = _mm256_unpackhi_epi64(r[i + j], r[i + j + 4]);
        }
    for (int j = 0; j < 8; j++) {
        _mm256_storeu_si256((__m256i *)(dst + (size_t)j * ds), _mm256_permute2x128_si256(t[j], t[j + 8], 0x20));
        _mm256_storeu_si256((__m256i *)(dst + (size_t)(j + 8) * ds), _mm256_permute2x128_si256(t[j], t[j + 8], 0x31));
    }
}
