/* attn_neon.c: the attention and activation kernels of the NEON table.
 * Owns: mm_f16 (K.Q and V.softmax over the F16 cache in both of llama.cpp's
 * roundings), softmax_f16 and swiglu with ggml's vector expf, the F16
 * rounding of activations (to_f16, round_f16), for AArch64
 * (base NEON: the F16 conversions are FCVTL/FCVTN, no FP16 arithmetic).
 * Does not: pick the rounding (the engine does) or define it: the numbers
 * are kern_ref.c's (llama.cpp's x86 AVX-512 build), bit for bit, so a
 * 16-lane chain is four 4-lane ones here.
 * Design: every 16-lane accumulator splits into 4-lane "chunks" that are
 * independent FMA chains (tinyBLAS: 4 chunks per step of 16; ggml: 16 per
 * step of 64). A tile of 4 A rows x 4 B rows runs one chunk at a time with
 * 16 accumulators in registers; the chunks are then combined in the order
 * kern_ref.c adds them, and hsum16 runs 4 pairs at a time with each of its
 * additions done as the scalar one does it. expf scales by 2^n in one
 * multiply, or two (exact, then rounding) near over/underflow, so it always
 * rounds once, like ldexpf. */
#include <arm_neon.h>
#include <math.h>

#include "kern.h"

static inline float32x4_t f16x4(const mu_f16 *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

/* hsum16 of 4 pairs from their g[] = (lanes 0..3 + 8..11) + (4..7 + 12..15),
 * i.e. hsum8's h0..h3: out[p] = (g0 + g2) + (g1 + g3) of g[p]. */
static inline float32x4_t hsum_g4(float32x4_t g0, float32x4_t g1, float32x4_t g2, float32x4_t g3) {
    const float32x4_t s01 = vaddq_f32(vcombine_f32(vget_low_f32(g0), vget_low_f32(g1)),
                                      vcombine_f32(vget_high_f32(g0), vget_high_f32(g1)));
    const float32x4_t s23 = vaddq_f32(vcombine_f32(vget_low_f32(g2), vget_low_f32(g3)),
                                      vcombine_f32(vget_high_f32(g2), vget_high_f32(g3)));
    return vpaddq_f32(s01, s23);
}

/* g of one 16-lane vector given as 4 quarters q0..q3 (lanes 0..3, ..., 12..15). */
static inline float32x4_t g_of(float32x4_t q0, float32x4_t q1, float32x4_t q2, float32x4_t q3) {
    return vaddq_f32(vaddq_f32(q0, q2), vaddq_f32(q1, q3));
}

/* ---- mm_f16 ------------------------------------------------------------ */

/* One chunk of a 4 x 4 tile: c[4j + i] = the 4-lane chain of A row i . B row
 * j over the elements off + s * step + (0..3), s < ns. */
static inline void chunk_4x4(int ns, int step, int off, const mu_f16 *const a[4], const float *const b[4],
                             float32x4_t c[16]) {
    float32x4_t acc[16];
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++) acc[p] = vdupq_n_f32(0.f);
    const mu_f16 *a0 = a[0] + off, *a1 = a[1] + off, *a2 = a[2] + off, *a3 = a[3] + off;
    const float *b0 = b[0] + off, *b1 = b[1] + off, *b2 = b[2] + off, *b3 = b[3] + off;
    for (int s = 0; s < ns; s++) {
        const size_t k = (size_t)s * step;
        const float32x4_t x0 = f16x4(a0 + k), x1 = f16x4(a1 + k), x2 = f16x4(a2 + k), x3 = f16x4(a3 + k);
        const float32x4_t y[4] = {vld1q_f32(b0 + k), vld1q_f32(b1 + k), vld1q_f32(b2 + k), vld1q_f32(b3 + k)};
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            acc[4 * j + 0] = vfmaq_f32(acc[4 * j + 0], x0, y[j]);
            acc[4 * j + 1] = vfmaq_f32(acc[4 * j + 1], x1, y[j]);
            acc[4 * j + 2] = vfmaq_f32(acc[4 * j + 2], x2, y[j]);
            acc[4 * j + 3] = vfmaq_f32(acc[4 * j + 3], x3, y[j]);
        }
    }
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++) c[p] = acc[p];
}

/* The 16 pairs' sums over the whole steps, out[4j + i]: tb: one 16-lane
 * chain per pair over steps of 16, quarter r = chunk r; else ggml's 4
 * accumulators q over steps of 64, chunk 4q + r = quarter r of q, combined
 * (0+2) + (1+3) per lane. Then hsum16 (g_of, hsum_g4). */
static void tile_4x4(int n, int tb, const mu_f16 *const a[4], const float *const b[4], float out[16]) {
    float32x4_t q[4][16];
    if (tb) {
        for (int r = 0; r < 4; r++) chunk_4x4(n / 16, 16, 4 * r, a, b, q[r]);
    } else {
        float32x4_t c[4][16];
        for (int r = 0; r < 4; r++) {
            for (int qq = 0; qq < 4; qq++) chunk_4x4(n / 64, 64, 16 * qq + 4 * r, a, b, c[qq]);
            for (int p = 0; p < 16; p++)
                q[r][p] = vaddq_f32(vaddq_f32(c[0][p], c[2][p]), vaddq_f32(c[1][p], c[3][p]));
        }
    }
    for (int p0 = 0; p0 < 16; p0 += 4) {
        float32x4_t g[4];
        for (int p = 0; p < 4; p++) g[p] = g_of(q[0][p0 + p], q[1][p0 + p], q[2][p0 + p], q[3][p0 + p]);
        vst1q_f32(out + p0, hsum_g4(g[0], g[1], g[2], g[3]));
    }
}

static void mm_f16_neon(int n, const mu_f16 *A, size_t lda, int na, const float *B, size_t ldb, int nb, float *C,
                        size_t ldc, int tb) {
    const int np = tb ? n : n & ~63;
    /* tiles of 4 A rows x 4 B rows; rows past the end repeat the last one
     * and their results are dropped. A rows outer: the B rows (queries or
     * probabilities) are the smaller operand and stay in cache. */
    const int ahead = n >= 1024 ? 4 : 16; /* rows prefetched ahead: the cache comes from DRAM at depth */
    for (int i0 = 0; i0 < na; i0 += 4) {
        const mu_f16 *a[4];
        for (int q = 0; q < 4; q++) a[q] = A + (size_t)(i0 + q < na ? i0 + q : na - 1) * lda;
        for (int i = i0 + ahead; i < i0 + ahead + 4 && i < na; i++)
            for (int c = 0; c < n * 2; c += 64) __builtin_prefetch((const char *)(A + (size_t)i * lda) + c);
        for (int j0 = 0; j0 < nb; j0 += 4) {
            const float *b[4];
            for (int q = 0; q < 4; q++) b[q] = B + (size_t)(j0 + q < nb ? j0 + q : nb - 1) * ldb;
            float r[16];
            tile_4x4(np, tb, a, b, r);
            for (int j = 0; j < 4 && j0 + j < nb; j++)
                for (int i = 0; i < 4 && i0 + i < na; i++) {
                    float d = r[4 * j + i];
                    if (np < n) { /* ggml's tail, added in double */
                        double s = d;
                        for (int k = np; k < n; k++) s += (double)(mu_f16_to_f32(a[i][k]) * b[j][k]);
                        d = (float)s;
                    }
                    C[(size_t)(j0 + j) * ldc + i0 + i] = d;
                }
        }
    }
}

/* ---- ggml's vector expf, softmax, swiglu -------------------------------- */

static __attribute__((noinline)) float32x4_t expf_lanes_ref(float32x4_t x) {
    float v[4];
    vst1q_f32(v, x);
    for (int l = 0; l < 4; l++) v[l] = mu_expf_ggml(v[l]);
    return vld1q_f32(v);
}

/* kern_ref.c's mu_expf_ggml, operation by operation (vfmaq_f32(c, a, b) is
 * fmaf(a, b, c); vfmsq_f32(x, n, c) is fmaf(-n, c, x)). */
static inline float32x4_t v_expf(float32x4_t x) {
    const float32x4_t r = vdupq_n_f32(0x1.8p23f);
    const float32x4_t z = vfmaq_f32(r, x, vdupq_n_f32(0x1.715476p+0f));
    const float32x4_t n = vsubq_f32(z, r);
    const float32x4_t b = vfmsq_f32(vfmsq_f32(x, n, vdupq_n_f32(0x1.62e4p-1f)), n, vdupq_n_f32(0x1.7f7d1cp-20f));
    const float32x4_t u = vmulq_f32(b, b);
    const float32x4_t t1 = vfmaq_f32(vdupq_n_f32(0x1.573e2ep-5f), vdupq_n_f32(0x1.0e4020p-7f), b);
    const float32x4_t t2 = vfmaq_f32(vdupq_n_f32(0x1.fffdb6p-2f), vdupq_n_f32(0x1.555e66p-3f), b);
    const float32x4_t t3 = vfmaq_f32(vdupq_n_f32(1.0f), vdupq_n_f32(0x1.ffffecp-1f), b);
    const float32x4_t j = vfmaq_f32(t3, vfmaq_f32(t2, t1, u), u);
    const uint32x4_t in = vandq_u32(vcgeq_f32(n, vdupq_n_f32(-126.f)), vcleq_f32(n, vdupq_n_f32(127.f)));
    if (vminvq_u32(in) == 0xffffffffu) { /* ldexpf(j, n): j * 2^n, 2^n a normal float */
        const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
        return vmulq_f32(j, vreinterpretq_f32_s32(e));
    }
    if (vminvq_u32(vceqq_f32(x, x)) != 0xffffffffu) return expf_lanes_ref(x); /* NaN: as the scalar */
    /* Near over/underflow: n = n1 + n2 with |n1|, |n2| <= 96. j * 2^n1 is
     * exact (j is about 1), the second multiply rounds once, as ldexpf. */
    const float32x4_t lim = vdupq_n_f32(192.f);
    const int32x4_t ni = vcvtq_s32_f32(vminq_f32(vmaxq_f32(n, vnegq_f32(lim)), lim));
    const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    const float32x4_t res = vmulq_f32(vmulq_f32(j, vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23))),
                                      vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23)));
    /* |n| > 192: 0 or inf */
    const uint32x4_t d = vcagtq_f32(n, lim);
    const float32x4_t alt = vbslq_f32(vcleq_f32(n, vdupq_n_f32(0.f)), vdupq_n_f32(0.f), vdupq_n_f32(INFINITY));
    return vbslq_f32(d, alt, res);
}

/* e = expf(x - mx) of 16 values at p, stored back; returns their g (g_of). */
static inline float32x4_t softmax_chunk(float *p, float32x4_t vm) {
    float32x4_t e[4];
#pragma GCC unroll 4
    for (int l = 0; l < 4; l++) {
        e[l] = v_expf(vsubq_f32(vld1q_f32(p + 4 * l), vm));
        vst1q_f32(p + 4 * l, e[l]);
    }
    return g_of(e[0], e[1], e[2], e[3]);
}

static void softmax_f16_neon(int n, float *x, float mx) {
    const float32x4_t vm = vdupq_n_f32(mx);
    double sum = 0;
    int i = 0;
    /* 4 chunks of 16 share one reduction; their sums are added in order */
    for (; i + 64 <= n; i += 64) {
        const float32x4_t g0 = softmax_chunk(x + i, vm), g1 = softmax_chunk(x + i + 16, vm),
                          g2 = softmax_chunk(x + i + 32, vm), g3 = softmax_chunk(x + i + 48, vm);
        float r[4];
        vst1q_f32(r, hsum_g4(g0, g1, g2, g3));
        for (int c = 0; c < 4; c++) sum += (double)r[c];
    }
    for (; i < n; i += 16) {
        float g[4];
        vst1q_f32(g, softmax_chunk(x + i, vm));
        sum += (double)((g[0] + g[2]) + (g[1] + g[3]));
    }
    const float32x4_t inv = vdupq_n_f32((float)(1.0 / sum));
    for (i = 0; i < n; i += 4) vst1q_f32(x + i, vcvt_f32_f16(vcvt_f16_f32(vmulq_f32(vld1q_f32(x + i), inv))));
}

static void swiglu_neon(int n, float *g, const float *u) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const int n16 = n & ~15;
    for (int i = 0; i < n16; i += 4) {
        const float32x4_t x = vld1q_f32(g + i);
        const float32x4_t s = vdivq_f32(x, vaddq_f32(one, v_expf(vnegq_f32(x))));
        vst1q_f32(g + i, vmulq_f32(s, vld1q_f32(u + i)));
    }
    for (int i = n16; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void to_f16_neon(int n, const float *x, mu_f16 *y) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) y[i] = mu_f32_to_f16(x[i]);
}

static void round_f16_neon(int n, const float *x, float *y) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) y[i] = mu_f16_to_f32(mu_f32_to_f16(x[i]));
}

/* sumsq (kern.h): rows side by side, 4 rows a group (their squares in one
 * float32x4, widened to two float64x2 chains), two groups at once; each 4
 * x 4 block transposed in registers, each lane adding its row's squares in
 * element order: sumsq_ref's chain per row, bit for bit. */
static inline __attribute__((always_inline)) void sumsq_group_neon(int n, const float *x, size_t stride, double *out,
                                                                   const int G) {
    float64x2_t lo[2], hi[2];
    for (int g = 0; g < G; g++) lo[g] = hi[g] = vdupq_n_f64(0);
    const int n4 = n & ~3;
    for (int i = 0; i < n4; i += 4)
        for (int g = 0; g < G; g++) {
            const float *b = x + (size_t)(4 * g) * stride + i;
            const float32x4_t r0 = vld1q_f32(b), r1 = vld1q_f32(b + stride), r2 = vld1q_f32(b + 2 * stride),
                              r3 = vld1q_f32(b + 3 * stride);
            const float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1)),
                              t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1)),
                              t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3)),
                              t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
            const float32x4_t c[4] = {
                vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)), vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)),
                vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)), vreinterpretq_f32_f64(vtrn2q_f64(t1, t3))};
            for (int e = 0; e < 4; e++) { /* element i + e of the 4 rows */
                const float32x4_t sq = vmulq_f32(c[e], c[e]);
                lo[g] = vaddq_f64(lo[g], vcvt_f64_f32(vget_low_f32(sq)));
                hi[g] = vaddq_f64(hi[g], vcvt_high_f64_f32(sq));
            }
        }
    for (int g = 0; g < G; g++) {
        double s[4];
        vst1q_f64(s, lo[g]);
        vst1q_f64(s + 2, hi[g]);
        for (int j = 0; j < 4; j++) {
            const float *xr = x + (size_t)(4 * g + j) * stride;
            for (int i = n4; i < n; i++) s[j] += (double)(xr[i] * xr[i]);
            out[4 * g + j] = s[j];
        }
    }
}

static void sumsq_neon(int n, const float *x, size_t stride, int n_rows, double *out) {
    int r = 0;
    for (; r + 8 <= n_rows; r += 8) sumsq_group_neon(n, x + (size_t)r * stride, stride, out + r, 2);
    for (; r + 4 <= n_rows; r += 4) sumsq_group_neon(n, x + (size_t)r * stride, stride, out + r, 1);
    if (r < n_rows) mu_kern_ref()->sumsq(n, x + (size_t)r * stride, stride, n_rows - r, out + r); /* rows alone */
}

void mu_kern_fill_attn_neon(mu_kern *k) {
    k->to_f16 = to_f16_neon;
    k->round_f16 = round_f16_neon;
    k->mm_f16 = mm_f16_neon;
    k->softmax_f16 = softmax_f16_neon;
    k->swiglu = swiglu_neon;
    k->sumsq = sumsq_neon;
}
