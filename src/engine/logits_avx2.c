/* logits_avx2.c: the scans over a step's logits that every token takes,
 * eight lanes at a time: the finiteness check, greedy's argmax and top-k's
 * search for the next logit above its current k-th (a 200K vocabulary is
 * 0.8 MB a row, read once per token per slot).
 * Owns: the AVX2 scans. Does not own: when they run (sample_chain.c
 * checks the CPU) or what they must equal (the _ref loops of
 * sample_chain.c, which test_sample compares them with). */
#include <immintrin.h>
#include <math.h>

#include "sample_int.h"

/* One lane's step: keep v where it is greater (ordered: NaN never is). */
static inline void amax_step(__m256 v, __m256i idx, __m256 *bv, __m256i *bi) {
    const __m256 gt = _mm256_cmp_ps(v, *bv, _CMP_GT_OQ);
    *bv = _mm256_blendv_ps(*bv, v, gt);
    *bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(*bi), _mm256_castsi256_ps(idx), gt));
}

/* The first index of the largest value, as mu_logits_argmax_ref: each of
 * 32 lanes (four chains of eight, so the compares do not wait on each
 * other) keeps the first index of its own largest value (ordered greater:
 * NaN never wins, -0 and +0 tie), then the lanes meet (largest value, then
 * smallest index) and the tail goes on from there. */
int mu_logits_argmax_avx2(const float *l, int n) {
    if (n < 16 || isnan(l[0])) return mu_logits_argmax_ref(l, n); /* NaN first: the reference keeps 0 */
    __m256 bv[4];
    __m256i bi[4], idx[4];
    for (int c = 0; c < 4; c++) {
        bv[c] = _mm256_set1_ps(-INFINITY);
        bi[c] = _mm256_set1_epi32(-1);
        idx[c] = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * c));
    }
    const __m256i step4 = _mm256_set1_epi32(32), step = _mm256_set1_epi32(8);
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int c = 0; c < 4; c++) {
            amax_step(_mm256_loadu_ps(l + i + 8 * c), idx[c], &bv[c], &bi[c]);
            idx[c] = _mm256_add_epi32(idx[c], step4);
        }
    for (; i + 8 <= n; i += 8) {
        amax_step(_mm256_loadu_ps(l + i), idx[0], &bv[0], &bi[0]);
        idx[0] = _mm256_add_epi32(idx[0], step);
    }
    float vs[32];
    int is[32];
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps(vs + 8 * c, bv[c]);
        _mm256_storeu_si256((__m256i *)(is + 8 * c), bi[c]);
    }
    int best = -1;
    for (int k = 0; k < 32; k++)
        if (is[k] >= 0 && (best < 0 || vs[k] > l[best] || (vs[k] == l[best] && is[k] < best))) best = is[k];
    if (best < 0) best = 0; /* nothing above -inf so far: l[0] is -inf, the reference's best still */
    for (; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

/* Every value finite: no lane's exponent field all ones. */
bool mu_logits_finite_avx2(const float *l, int n) {
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    __m256i bad = _mm256_setzero_si256();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(l + i));
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(b, e), e));
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
    for (; i < n; i++)
        if (!isfinite(l[i])) return false;
    return true;
}

/* The first index >= i whose value is above thr (ordered: NaN never is),
 * or n. */
int mu_logits_next_above_avx2(const float *l, int n, int i, float thr) {
    const __m256 t = _mm256_set1_ps(thr);
    for (; i + 8 <= n; i += 8) {
        const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), t, _CMP_GT_OQ));
        if (m) return i + __builtin_ctz((unsigned)m);
    }
    for (; i < n; i++)
        if (l[i] > thr) return i;
    return n;
}
