/* kern_neon.c: the ARM NEON kernel table (AArch64).
 * Owns: NEON dots (vec_dot) for every weight type the engine computes with
 * and the Q8_0 and Q8_K activation quantizers (bit-identical to kern_ref.c).
 * The dequantizers stay the reference ones.
 * Does not own: numerics (kern_ref.c, llama.cpp's x86 orders): the F16,
 * Q8_0, Q4_K, Q5_K, Q6_K and NVFP4 dots here reproduce them bit for bit (integer
 * lanes grouped as the ref groups them, float steps in the ref's order), and
 * so do the F32 and BF16 dots (the BF16 one with VDPBF16PS's DAZ/FTZ done
 * by masks). Nor the gemm entries and the batch-path dots (gemm_neon.c) or
 * the F16 attention pieces (attn_neon.c).
 * Key design choice: the file is built with +dotprod, but the int8 dots come
 * in two variants chosen at fill time from the CPU's HWCAP: SDOT
 * (vdotq_s32) where the CPU has the dot-product extension, widening
 * multiplies (vmull_s8 + vpadalq_s16) where it does not, so the table runs
 * on any ARMv8 CPU. The quantized dots share one block loop, parameterized
 * by the 16-byte int8 dot primitive. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>
#include <sys/auxv.h>

#include "kern.h"

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif

/* ---- int8 dot primitives: acc + sum of 4-byte groups of a*b ------------- */

static inline int32x4_t dot16_sdot(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }

/* Same lanes as SDOT (lane i = bytes 4i..4i+3): adjacent products paired in
 * 16 bits (|pair| <= 2 * 128 * 127 < 2^15: activations are never -128), then
 * pairs of pairs widened. */
static inline int32x4_t dot16_mull(int32x4_t acc, int8x16_t a, int8x16_t b) {
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vaddq_s32(acc, vpaddlq_s16(vpaddq_s16(lo, hi)));
}

static inline float f16_to_f32(mu_f16 h) { return mu_f16_to_f32(h); }

static inline void k4_scales(const uint8_t *scales, uint32_t u[4]) {
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t mins_lo = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = mins_lo;
    u[0] &= 0x3f3f3f3fu;
}

/* sum_j mn[j] * (bsums[2j] + bsums[2j+1]) */
static inline int32_t k4_mins(const uint32_t u[4], const int16_t *bsums) {
    const int16x8_t pairs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8((const uint8_t *)&u[2])));
    const int32x4_t p = vmlal_s16(vmull_s16(vget_low_s16(pairs), vget_low_s16(mins)), vget_high_s16(pairs),
                                  vget_high_s16(mins));
    return vaddvq_s32(p);
}

/* The ref's hsum8 of lanes (a0 | a1). */
static inline float hsum8_neon(float32x4_t a0, float32x4_t a1) {
    float l[8];
    vst1q_f32(l, a0);
    vst1q_f32(l + 4, a1);
    return mu_hsum8(l);
}

/* The codes of NVFP4 sub-blocks 0..3 (quant.h) as signed bytes. */
static inline void nvfp4_codes(const mu_block_nvfp4 *b, int8x16_t c[4]) {
    const int8x16_t tbl = vld1q_s8(mu_fp4_codes);
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    for (int k = 0; k < 2; k++) {
        const uint8x16_t q = vld1q_u8(b->qs + 16 * k);
        const uint8x16_t lo = vandq_u8(q, m4), hi = vshrq_n_u8(q, 4);
        c[2 * k] = vqtbl1q_s8(tbl, vcombine_u8(vget_low_u8(lo), vget_low_u8(hi)));
        c[2 * k + 1] = vqtbl1q_s8(tbl, vcombine_u8(vget_high_u8(lo), vget_high_u8(hi)));
    }
}

/* x86's sign trick (kern_ref.c fp4_mul): a negated (wrapping) where c < 0,
 * to be multiplied by |c| */
static inline int8x16_t fp4_sign(int8x16_t a, int8x16_t c) { return vbslq_s8(vcltzq_s8(c), vnegq_s8(a), a); }

/* ---- quantized dots, one body per primitive ----------------------------- */

#define DEFINE_QDOTS(SUF, DOT16)                                                                                   \
    static float vec_dot_q8_0_##SUF(int n, const void *w, const void *a) {                                        \
        const mu_block_q8_0 *x = w, *y = a;                                                                        \
        float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0); /* the ref's lanes 0..3, 4..7 */                   \
        for (int i = 0; i < n / MU_QK8_0; i++) {                                                                   \
            const int32x4_t s0 = DOT16(vdupq_n_s32(0), vld1q_s8(x[i].qs), vld1q_s8(y[i].qs));                      \
            const int32x4_t s1 = DOT16(vdupq_n_s32(0), vld1q_s8(x[i].qs + 16), vld1q_s8(y[i].qs + 16));            \
            const float d = f16_to_f32(x[i].d) * f16_to_f32(y[i].d);                                               \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(s0), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(s1), d);                                                            \
        }                                                                                                          \
        return hsum8_neon(a0, a1);                                                                                 \
    }                                                                                                              \
                                                                                                                   \
    /* the ref's lanes: sub-blocks 0 and 2 in a0, 1 and 3 in a1, FMA per half */                                 \
    static float vec_dot_nvfp4_##SUF(int n, const void *w, const void *a) {                                       \
        const mu_block_nvfp4 *x = w;                                                                               \
        const mu_block_q8_0 *y = a;                                                                                \
        float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);                                                      \
        int8x16_t c[4];                                                                                            \
        for (int i = 0; i < n / MU_QK_NVFP4; i++) {                                                                \
            nvfp4_codes(&x[i], c);                                                                                 \
            for (int h = 0; h < 2; h++) {                                                                          \
                const mu_block_q8_0 *yb = &y[2 * i + h];                                                           \
                const float dy = f16_to_f32(yb->d);                                                                \
                const int32x4_t s0 = DOT16(vdupq_n_s32(0), vabsq_s8(c[2 * h]), fp4_sign(vld1q_s8(yb->qs), c[2 * h])); \
                const int32x4_t s1 =                                                                               \
                    DOT16(vdupq_n_s32(0), vabsq_s8(c[2 * h + 1]), fp4_sign(vld1q_s8(yb->qs + 16), c[2 * h + 1]));   \
                a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(s0), mu_nvfp4_scale(x[i].d[2 * h]) * dy);                      \
                a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(s1), mu_nvfp4_scale(x[i].d[2 * h + 1]) * dy);                  \
            }                                                                                                      \
        }                                                                                                          \
        return hsum8_neon(a0, a1);                                                                                 \
    }                                                                                                              \
                                                                                                                   \
    static float vec_dot_q4_K_##SUF(int n, const void *w, const void *act) {                                      \
        const mu_block_q4_K *x = w;                                                                                \
        const mu_block_q8_K *y = act;                                                                              \
        const uint8x16_t m4 = vdupq_n_u8(0x0f);                                                                    \
        float acc = 0, accm = 0;                                                                                   \
        uint32_t u[4];                                                                                             \
        for (int i = 0; i < n / MU_QK_K; i++) {                                                                    \
            k4_scales(x[i].scales, u);                                                                             \
            const uint8_t *sc = (const uint8_t *)u;                                                                \
            const int32_t summ = k4_mins(u, y[i].bsums);                                                           \
            int32x4_t sumi = vdupq_n_s32(0);                                                                       \
            for (int j = 0; j < 4; j++) {                                                                          \
                const uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * j), b1 = vld1q_u8(x[i].qs + 32 * j + 16);            \
                const int8_t *q8 = y[i].qs + 64 * j;                                                               \
                int32x4_t pl = vdupq_n_s32(0), ph = vdupq_n_s32(0);                                                \
                pl = DOT16(pl, vreinterpretq_s8_u8(vandq_u8(b0, m4)), vld1q_s8(q8));                                \
                pl = DOT16(pl, vreinterpretq_s8_u8(vandq_u8(b1, m4)), vld1q_s8(q8 + 16));                           \
                ph = DOT16(ph, vreinterpretq_s8_u8(vshrq_n_u8(b0, 4)), vld1q_s8(q8 + 32));                          \
                ph = DOT16(ph, vreinterpretq_s8_u8(vshrq_n_u8(b1, 4)), vld1q_s8(q8 + 48));                          \
                sumi = vmlaq_n_s32(sumi, pl, sc[2 * j]);                                                           \
                sumi = vmlaq_n_s32(sumi, ph, sc[2 * j + 1]);                                                       \
            }                                                                                                      \
            const float d = f16_to_f32(x[i].d) * y[i].d, dm = f16_to_f32(x[i].dmin) * y[i].d;                      \
            acc = fmaf((float)vaddvq_s32(sumi), d, acc);                                                           \
            accm = fmaf((float)summ, dm, accm);                                                                    \
        }                                                                                                          \
        return acc - accm;                                                                                         \
    }                                                                                                              \
                                                                                                                   \
    /* ref lanes m (of 8): bytes 4m..4m+3 of every 32-value sub-block, scaled;              \
     * acc = fma(d, lanes, acc); mins in a scalar fma chain; hsum8 + summs. */                  \
    static float vec_dot_q5_K_##SUF(int n, const void *w, const void *act) {                      \
        const mu_block_q5_K *x = w;                                                                \
        const mu_block_q8_K *y = act;                                                              \
        const uint8x16_t m4 = vdupq_n_u8(0x0f), b16 = vdupq_n_u8(16);                              \
        float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);                                      \
        float summs = 0;                                                                           \
        uint32_t u[4];                                                                             \
        for (int i = 0; i < n / MU_QK_K; i++) {                                                    \
            k4_scales(x[i].scales, u);                                                             \
            const uint8_t *sc = (const uint8_t *)u;                                                \
            const float d = y[i].d * f16_to_f32(x[i].d), dmin = -y[i].d * f16_to_f32(x[i].dmin);   \
            summs = fmaf((float)k4_mins(u, y[i].bsums), dmin, summs);                              \
            const uint8x16_t h0 = vld1q_u8(x[i].qh), h1 = vld1q_u8(x[i].qh + 16);                  \
            int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);                                    \
            for (int j = 0; j < 4; j++) {                                                          \
                const uint8x16_t ml = vdupq_n_u8((uint8_t)(1 << (2 * j))), mh = vdupq_n_u8((uint8_t)(2 << (2 * j))); \
                const uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * j), b1 = vld1q_u8(x[i].qs + 32 * j + 16); \
                const uint8x16_t l0 = vorrq_u8(vandq_u8(b0, m4), vandq_u8(vtstq_u8(h0, ml), b16)); \
                const uint8x16_t l1 = vorrq_u8(vandq_u8(b1, m4), vandq_u8(vtstq_u8(h1, ml), b16)); \
                const uint8x16_t u0 = vorrq_u8(vshrq_n_u8(b0, 4), vandq_u8(vtstq_u8(h0, mh), b16)); \
                const uint8x16_t u1 = vorrq_u8(vshrq_n_u8(b1, 4), vandq_u8(vtstq_u8(h1, mh), b16)); \
                const int8_t *q8 = y[i].qs + 64 * j;                                               \
                lo = vmlaq_n_s32(lo, DOT16(vdupq_n_s32(0), vreinterpretq_s8_u8(l0), vld1q_s8(q8)), sc[2 * j]); \
                hi = vmlaq_n_s32(hi, DOT16(vdupq_n_s32(0), vreinterpretq_s8_u8(l1), vld1q_s8(q8 + 16)), sc[2 * j]); \
                lo = vmlaq_n_s32(lo, DOT16(vdupq_n_s32(0), vreinterpretq_s8_u8(u0), vld1q_s8(q8 + 32)), sc[2 * j + 1]); \
                hi = vmlaq_n_s32(hi, DOT16(vdupq_n_s32(0), vreinterpretq_s8_u8(u1), vld1q_s8(q8 + 48)), sc[2 * j + 1]); \
            }                                                                                      \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(lo), d);                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(hi), d);                                            \
        }                                                                                          \
        return hsum8_neon(a0, a1) + summs;                                                         \
    }                                                                                              \
                                                                                                   \
    /* ref lanes: m < 4 from the first 16 bytes of each 32-value chunk (scale                                    \
     * 2c), m >= 4 from the second (scale 2c+1), unsigned codes; minus                                            \
     * 32 * (bsums . scales) of sub-blocks 2m, 2m+1; FMA by d per lane. */                                        \
    static float vec_dot_q6_K_##SUF(int n, const void *w, const void *act) {                                      \
        const mu_block_q6_K *x = w;                                                                                \
        const mu_block_q8_K *y = act;                                                                              \
        const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(0x30);                                             \
        float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);                                                      \
        for (int i = 0; i < n / MU_QK_K; i++) {                                                                    \
            const uint8_t *ql = x[i].ql, *qh = x[i].qh;                                                            \
            const int8_t *sc = x[i].scales, *q8 = y[i].qs;                                                         \
            int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);                                                    \
            for (int h = 0; h < 2; h++) {                                                                          \
                for (int half = 0; half < 2; half++) {                                                             \
                    const int o = 16 * half;                                                                       \
                    const uint8x16_t a = vld1q_u8(ql + o), b = vld1q_u8(ql + 32 + o), hb = vld1q_u8(qh + o);       \
                    uint8x16_t q[4];                                                                               \
                    q[0] = vorrq_u8(vandq_u8(a, m4), vandq_u8(vshlq_n_u8(hb, 4), m3));                             \
                    q[1] = vorrq_u8(vandq_u8(b, m4), vandq_u8(vshlq_n_u8(hb, 2), m3));                             \
                    q[2] = vorrq_u8(vshrq_n_u8(a, 4), vandq_u8(hb, m3));                                           \
                    q[3] = vorrq_u8(vshrq_n_u8(b, 4), vandq_u8(vshrq_n_u8(hb, 2), m3));                            \
                    for (int k = 0; k < 4; k++) {                                                                  \
                        const int32x4_t p = DOT16(vdupq_n_s32(0), vreinterpretq_s8_u8(q[k]), vld1q_s8(q8 + 32 * k + o)); \
                        if (half) hi = vmlaq_n_s32(hi, p, sc[2 * k + 1]);                                          \
                        else lo = vmlaq_n_s32(lo, p, sc[2 * k]);                                                   \
                    }                                                                                              \
                }                                                                                                  \
                ql += 64;                                                                                          \
                qh += 32;                                                                                          \
                q8 += 128;                                                                                         \
                sc += 8;                                                                                           \
            }                                                                                                      \
            const int16x8_t s0 = vmovl_s8(vld1_s8(x[i].scales)), s1 = vmovl_s8(vld1_s8(x[i].scales + 8));         \
            const int16x8_t b0 = vld1q_s16(y[i].bsums), b1 = vld1q_s16(y[i].bsums + 8);                            \
            const int32x4_t c0 = vpaddq_s32(vmull_s16(vget_low_s16(b0), vget_low_s16(s0)),                         \
                                            vmull_high_s16(b0, s0));                                               \
            const int32x4_t c1 = vpaddq_s32(vmull_s16(vget_low_s16(b1), vget_low_s16(s1)),                         \
                                            vmull_high_s16(b1, s1));                                               \
            lo = vsubq_s32(lo, vshlq_n_s32(c0, 5));                                                                \
            hi = vsubq_s32(hi, vshlq_n_s32(c1, 5));                                                                \
            const float d = y[i].d * f16_to_f32(x[i].d);                                                           \
            a0 = vfmaq_n_f32(a0, vcvtq_f32_s32(lo), d);                                                            \
            a1 = vfmaq_n_f32(a1, vcvtq_f32_s32(hi), d);                                                            \
        }                                                                                                          \
        return hsum8_neon(a0, a1);                                                                                 \
    }

DEFINE_QDOTS(sdot, dot16_sdot)
DEFINE_QDOTS(mull, dot16_mull)

/* ---- float dots --------------------------------------------------------- */

static inline float32x4_t f16x4(const mu_f16 *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

/* ggml's combination of 4 accumulators of 16 lanes: (0+2) + (1+3), per lane */
static inline void combine4x16(float32x4_t s[4][4], float l[16]) {
    for (int q = 0; q < 4; q++)
        vst1q_f32(l + 4 * q, vaddq_f32(vaddq_f32(s[0][q], s[2][q]), vaddq_f32(s[1][q], s[3][q])));
}

/* ref (ggml_vec_dot_f16): 4 accumulators of 16 lanes (4 q-registers each)
 * over steps of 64, combined 0+2, 1+3, then the two; hsum16; tail in double.
 * F16 x F16 products are exact in float, so FMA rounds like the ref. */
static float vec_dot_f16_neon(int n, const void *w, const void *a) {
    const mu_f16 *x = w, *y = a;
    float32x4_t s[4][4];
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < 4; q++) s[j][q] = vdupq_n_f32(0);
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int q = 0; q < 4; q++) {
                const int o = i + 16 * j + 4 * q;
                s[j][q] = vfmaq_f32(s[j][q], f16x4(x + o), f16x4(y + o));
            }
    float l[16];
    combine4x16(s, l);
    double r = mu_hsum16(l);
    for (int i = np; i < n; i++) r += (double)(mu_f16_to_f32(x[i]) * mu_f16_to_f32(y[i]));
    return (float)r;
}

/* ref (mu_vec_dot_f32_ref, ggml_vec_dot_f32 on AVX-512): 4 accumulators of
 * 16 lanes (4 q-registers each) over steps of 64, FMA, combined 0+2, 1+3,
 * then the two; hsum16 in float; the tail added to that float as the ref
 * does (rounded products one by one over the grouped part, FMA after). */
static float vec_dot_f32_neon(int n, const void *w, const void *a) {
    const float *x = w, *y = a;
    float32x4_t s[4][4];
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < 4; q++) s[j][q] = vdupq_n_f32(0);
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int q = 0; q < 4; q++) {
                const int o = i + 16 * j + 4 * q;
                s[j][q] = vfmaq_f32(s[j][q], vld1q_f32(x + o), vld1q_f32(y + o));
            }
    float l[16];
    combine4x16(s, l);
    float r = mu_hsum16(l);
    int i = np;
    const int rem = n - np;
    const int grouped = rem >= 16 ? (rem & ~15) + ((rem & 15) >= 8 ? 8 : 0) : (rem >= 8 ? 8 : 0);
    for (; i < np + grouped; i++) {
        const float p = x[i] * y[i];
        r += p;
    }
    for (; i < n; i++) r = fmaf(x[i], y[i], r);
    return r;
}

/* bf16 -> f32 with denormals (zero exponent) read as +0, as VDPBF16PS */
static inline float32x4_t bf16_daz4(uint16x4_t h) {
    const uint32x4_t u = vshll_n_u16(h, 16);
    return vreinterpretq_f32_u32(vandq_u32(u, vtstq_u32(u, vdupq_n_u32(0x7f800000u))));
}

/* denormal results flushed to zero of the same sign (ref f32_ftz) */
static inline float32x4_t ftz4(float32x4_t v) {
    const uint32x4_t tiny = vcaltq_f32(v, vdupq_n_f32(0x1p-126f));
    const uint32x4_t sgn = vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x80000000u));
    return vreinterpretq_f32_u32(vbslq_u32(tiny, sgn, vreinterpretq_u32_f32(v)));
}

/* ref (mu_vec_dot_bf16_ref, ggml_vec_dot_bf16 with AVX512BF16): two 16-lane
 * accumulators (4 q-registers each), the first over elements 0..31 of every
 * 64, the second over 32..63; lane l takes the pair 2l, 2l+1 (vld2q_u16
 * splits evens and odds): acc += odd product, then even, each one FMA with
 * inputs DAZ and results FTZ. Each reduced as hsum16, added in double, the
 * tail in double. */
static float vec_dot_bf16_neon(int n, const void *w, const void *a) {
    const mu_bf16 *x = w, *y = a;
    float32x4_t c[2][4];
    for (int h = 0; h < 2; h++)
        for (int q = 0; q < 4; q++) c[h][q] = vdupq_n_f32(0);
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 2; p++) { /* lanes 8p..8p+7 */
                const int o = i + 32 * h + 16 * p;
                const uint16x8x2_t xv = vld2q_u16(x + o), yv = vld2q_u16(y + o);
                for (int hi = 0; hi < 2; hi++) {
                    const int q = 2 * p + hi;
                    const uint16x4_t xe = hi ? vget_high_u16(xv.val[0]) : vget_low_u16(xv.val[0]);
                    const uint16x4_t xo = hi ? vget_high_u16(xv.val[1]) : vget_low_u16(xv.val[1]);
                    const uint16x4_t ye = hi ? vget_high_u16(yv.val[0]) : vget_low_u16(yv.val[0]);
                    const uint16x4_t yo = hi ? vget_high_u16(yv.val[1]) : vget_low_u16(yv.val[1]);
                    float32x4_t acc = ftz4(vfmaq_f32(c[h][q], bf16_daz4(xo), bf16_daz4(yo)));
                    c[h][q] = ftz4(vfmaq_f32(acc, bf16_daz4(xe), bf16_daz4(ye)));
                }
            }
    float l[2][16];
    for (int h = 0; h < 2; h++)
        for (int q = 0; q < 4; q++) vst1q_f32(l[h] + 4 * q, c[h][q]);
    double s = (double)mu_hsum16(l[0]);
    s += (double)mu_hsum16(l[1]);
    for (int i = np; i < n; i++) s += (double)(mu_bf16_to_f32(x[i]) * mu_bf16_to_f32(y[i]));
    return (float)s;
}

/* ---- activation quantizers (bit-identical to kern_ref.c) ---------------- */

static void quant_q8_0_neon(const float *x, void *vy, int n) {
    mu_block_q8_0 *y = vy;
    for (int i = 0; i < n / MU_QK8_0; i++) {
        const float *xb = x + i * MU_QK8_0;
        float32x4_t m = vdupq_n_f32(0);
        for (int k = 0; k < 8; k++) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(xb + 4 * k))); /* NaN ignored, as fmaxf */
        const float amax = vmaxnmvq_f32(m);
        const float d = amax / 127.f;
        const float id = amax != 0.f ? 127.f / amax : 0.f;
        y[i].d = mu_f32_to_f16(d);
        for (int k = 0; k < 8; k++) {
            const float32x4_t v = vmulq_n_f32(vld1q_f32(xb + 4 * k), id);
            /* ties to even; NaN and |v| >= 2^31 give INT32_MIN as x86 does (the ref) */
            const uint32x4_t ok = vcaltq_f32(v, vdupq_n_f32(2147483648.f));
            const int32x4_t q = vbslq_s32(ok, vcvtnq_s32_f32(v), vdupq_n_s32(INT32_MIN));
            const int16x4_t q16 = vqmovn_s32(q);
            const int8x8_t q8 = vqmovn_s16(vcombine_s16(q16, q16));
            vst1_lane_s32((int32_t *)(void *)(y[i].qs + 4 * k), vreinterpret_s32_s8(q8), 0);
        }
    }
}

static void quant_q8_K_neon(const float *x, void *vy, int n) {
    mu_block_q8_K *y = vy;
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float *xb = x + i * MU_QK_K;
        float32x4_t m = vdupq_n_f32(0);
        uint32x4_t bad = vdupq_n_u32(0);
        for (int k = 0; k < 64; k++) {
            const float32x4_t a = vabsq_f32(vld1q_f32(xb + 4 * k));
            m = vmaxq_f32(m, a);
            bad = vorrq_u32(bad, vmvnq_u32(vcltq_f32(a, vdupq_n_f32(INFINITY)))); /* NaN or inf */
        }
        if (vmaxvq_u32(bad)) { /* non-finite: the ref defines it */
            mu_quant_q8_K_ref(xb, &y[i], MU_QK_K);
            continue;
        }
        const float amax = vmaxvq_f32(m);
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0;
        for (int j = 0; j < MU_QK_K; j++) /* first element of largest magnitude, as the ref */
            if (fabsf(xb[j]) == amax) {
                max = xb[j];
                break;
            }
        const float iscale = -127.f / max;
        if (isinf(iscale)) { /* |max| below ~3.7e-37: products overflow, the ref defines them */
            mu_quant_q8_K_ref(xb, &y[i], MU_QK_K);
            continue;
        }
        const int32x4_t lim = vdupq_n_s32(127);
        for (int g = 0; g < 16; g++) {
            int32x4_t q[4];
            for (int k = 0; k < 4; k++)
                q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xb + 16 * g + 4 * k), iscale)), lim);
            const int16x8_t a = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
            const int16x8_t b = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
            vst1q_s8(y[i].qs + 16 * g, vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
            y[i].bsums[g] = (int16_t)vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
        }
        y[i].d = 1.f / iscale;
    }
}

void mu_kern_fill_neon(mu_kern *k) {
    const int sdot = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    k->vec_dot[MU_T_Q8_0] = sdot ? vec_dot_q8_0_sdot : vec_dot_q8_0_mull;
    k->vec_dot[MU_T_Q4_K] = sdot ? vec_dot_q4_K_sdot : vec_dot_q4_K_mull;
    k->vec_dot[MU_T_Q5_K] = sdot ? vec_dot_q5_K_sdot : vec_dot_q5_K_mull;
    k->vec_dot[MU_T_Q6_K] = sdot ? vec_dot_q6_K_sdot : vec_dot_q6_K_mull;
    k->vec_dot[MU_T_NVFP4] = sdot ? vec_dot_nvfp4_sdot : vec_dot_nvfp4_mull;
    k->vec_dot[MU_T_F16] = vec_dot_f16_neon;
    k->vec_dot[MU_T_F32] = vec_dot_f32_neon;
    k->vec_dot[MU_T_BF16] = vec_dot_bf16_neon;
    k->quant[MU_T_Q8_0] = quant_q8_0_neon;
    k->quant[MU_T_Q8_K] = quant_q8_K_neon;
}

/* 1 when the filled table uses SDOT (for the test driver's report). */
int mu_kern_neon_has_sdot(void);
int mu_kern_neon_has_sdot(void) { return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
#endif
