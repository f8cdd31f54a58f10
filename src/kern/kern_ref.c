/* kern_ref.c: the reference kernels: plain C, the specification every ISA
 * table is tested against.
 * Owns: fp16/bf16 conversion, activation quantization (Q8_0, Q8_K),
 * dequantization and dot products for every weight type muser computes with.
 * Numerics follow llama.cpp's CPU backend (its x86 paths where the reference
 * and the SIMD code differ, e.g. Q8_0 activation rounding), because matching
 * llama.cpp's probabilities is the point. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "../base/err.h"
#include "kern.h"

/* ---- conversions ------------------------------------------------------- */

float mu_f16_to_f32(mu_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

mu_f16 mu_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (mu_f16)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (mu_f16)(sign | 0x7c00); /* rounds to inf */
    if (absx < 0x38800000u) { /* result subnormal or zero */
        if (absx < 0x33000000u) return (mu_f16)sign; /* < half the smallest subnormal */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* value / 2^-24 = m * 2^(e-126) */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (mu_f16)(sign | r);
    }
    uint32_t e = (absx >> 23) - 127 + 15;
    uint32_t m = absx & 0x7fffff;
    uint32_t r = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (mu_f16)(sign | r);
}

float mu_bf16_to_f32(mu_bf16 h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

mu_bf16 mu_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (mu_bf16)((x >> 16) | 64); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (mu_bf16)(x >> 16);
}

/* Round to nearest, ties to even (llama.cpp's nearest_int and _mm_round_ps). */
static inline int round_even(float v) { return (int)nearbyintf(v); }

/* ---- activation quantization ------------------------------------------ */

/* Q8_0 (x86 quantize_row_q8_0: _mm256_round_ps, _mm256_cvtps_epi32, then
 * saturating packs): a product that is NaN or outside the int32 range
 * converts to x86's "integer indefinite" INT32_MIN and so packs to -128;
 * amax ignores NaN (fmaxf). Finite products are within +-127 unless 127/amax
 * overflows (amax < ~3.7e-37), where they become +-inf or NaN, i.e. -128 as
 * on x86. docs/llamacpp-numerics.md "Non-finite activations". */
static inline int8_t q8_0_conv(float v) {
    if (!(v >= -2147483648.f && v < 2147483648.f)) return -128;
    const int r = round_even(v);
    return (int8_t)(r > 127 ? 127 : r < -128 ? -128 : r);
}

void mu_quant_q8_0_ref(const float *x, void *vy, int n) {
    mu_block_q8_0 *y = vy;
    for (int i = 0; i < n / MU_QK8_0; i++) {
        const float *xb = x + i * MU_QK8_0;
        float amax = 0;
        for (int j = 0; j < MU_QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.f ? 127.f / amax : 0.f;
        y[i].d = mu_f32_to_f16(d);
        for (int j = 0; j < MU_QK8_0; j++) y[i].qs[j] = q8_0_conv(xb[j] * id);
    }
}

/* llama.cpp's nearest_int (ggml-quants.c), which quantize_row_q8_K_ref uses
 * and x86 runs: round to nearest even by adding 1.5 * 2^23 and reading the
 * low mantissa bits. Exact for |v| <= 4194303; for NaN, +-inf and larger
 * values it is still defined (bit operations), and this is what it gives. */
static inline int nearest_int(float v) {
    const float t = v + 12582912.f;
    uint32_t i;
    memcpy(&i, &t, 4);
    return (int)(i & 0x007fffffu) - 0x00400000;
}

/* (int8_t) of an int, as GCC defines it (the low byte), without relying on
 * implementation-defined conversion. */
static inline int8_t low_byte(int v) { return (int8_t)((int)(((unsigned)v & 0xffu) ^ 0x80u) - 0x80); }

/* Q8_K (quantize_row_q8_K_ref, which x86 runs): the first element of largest
 * magnitude (NaN never compares larger), iscale = -127/max, nearest_int,
 * MIN(127, v), stored as its low byte; bsums from the stored bytes. For
 * finite inputs with a finite iscale every product is within +-127. */
void mu_quant_q8_K_ref(const float *x, void *vy, int n) {
    mu_block_q8_K *y = vy;
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float *xb = x + i * MU_QK_K;
        float max = 0, amax = 0;
        for (int j = 0; j < MU_QK_K; j++) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < MU_QK_K; j++) {
            int v = nearest_int(iscale * xb[j]);
            y[i].qs[j] = low_byte(v > 127 ? 127 : v);
        }
        for (int j = 0; j < MU_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[j * 16 + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.f / iscale;
    }
}

static void quant_f16_ref(const float *x, void *vy, int n) {
    mu_f16 *y = vy;
    for (int i = 0; i < n; i++) y[i] = mu_f32_to_f16(x[i]);
}

static void quant_bf16_ref(const float *x, void *vy, int n) {
    mu_bf16 *y = vy;
    for (int i = 0; i < n; i++) y[i] = mu_f32_to_bf16(x[i]);
}

static void quant_f32_ref(const float *x, void *vy, int n) { memcpy(vy, x, (size_t)n * sizeof(float)); }

/* ---- dequantization ---------------------------------------------------- */

/* 6-bit scale and min j (0..7) of a Q4_K/Q5_K block. */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_f32_ref(const void *w, float *y, int n) { memcpy(y, w, (size_t)n * sizeof(float)); }

static void dequant_f16_ref(const void *w, float *y, int n) {
    const mu_f16 *x = w;
    for (int i = 0; i < n; i++) y[i] = mu_f16_to_f32(x[i]);
}

static void dequant_bf16_ref(const void *w, float *y, int n) {
    const mu_bf16 *x = w;
    for (int i = 0; i < n; i++) y[i] = mu_bf16_to_f32(x[i]);
}

void mu_dequant_q8_0_ref(const void *w, float *y, int n) {
    const mu_block_q8_0 *x = w;
    for (int i = 0; i < n / MU_QK8_0; i++) {
        const float d = mu_f16_to_f32(x[i].d);
        for (int j = 0; j < MU_QK8_0; j++) y[i * MU_QK8_0 + j] = x[i].qs[j] * d;
    }
}

void mu_dequant_q4_K_ref(const void *w, float *y, int n) {
    const mu_block_q4_K *x = w;
    for (int i = 0; i < n / MU_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = mu_f16_to_f32(x[i].d);
        const float dmin = mu_f16_to_f32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < MU_QK_K; j += 64) {
            scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

void mu_dequant_q5_K_ref(const void *w, float *y, int n) {
    const mu_block_q5_K *x = w;
    for (int i = 0; i < n / MU_QK_K; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = mu_f16_to_f32(x[i].d);
        const float dmin = mu_f16_to_f32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < MU_QK_K; j += 64) {
            scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

void mu_dequant_q6_K_ref(const void *w, float *y, int n) {
    const mu_block_q6_K *x = w;
    for (int i = 0; i < n / MU_QK_K; i++) {
        const float d = mu_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < MU_QK_K; h += 128) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

const int8_t mu_fp4_codes[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* value j of an NVFP4 sub-block s (quant.h): low nibbles first, then high */
static inline int nvfp4_code(const mu_block_nvfp4 *b, int e) {
    const int s = e / MU_QK_NVFP4_SUB, j = e % MU_QK_NVFP4_SUB;
    const uint8_t q = b->qs[s * 8 + (j & 7)];
    return mu_fp4_codes[j < 8 ? q & 0xF : q >> 4];
}

/* dequantize_row_nvfp4: code * scale, exact in float. */
void mu_dequant_nvfp4_ref(const void *w, float *y, int n) {
    const mu_block_nvfp4 *x = w;
    for (int i = 0; i < n / MU_QK_NVFP4; i++)
        for (int e = 0; e < MU_QK_NVFP4; e++)
            y[i * MU_QK_NVFP4 + e] = (float)nvfp4_code(&x[i], e) * mu_nvfp4_scale(x[i].d[e / MU_QK_NVFP4_SUB]);
}

/* ---- dot products ------------------------------------------------------ */

/* ggml_vec_dot_f32 on AVX-512 (GCC 11 build): 4 accumulators of 16 lanes
 * over steps of 64 elements, FMA, combined (0+2, 1+3, then the two) and
 * reduced in float. The tail (n % 64) is added to that float as GCC
 * vectorized the source's `sumf += x[i]*y[i]`: in groups of 16, then one of
 * 8, rounded products added one by one in order; the last < 8 by FMA. */
float mu_vec_dot_f32_ref(int n, const void *w, const void *a) {
    const float *x = w, *y = a;
    float acc[4][16] = {{0}};
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) {
                const int k = i + 16 * j + l;
                acc[j][l] = fmaf(x[k], y[k], acc[j][l]);
            }
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
        acc[0][l] += acc[1][l];
    }
    float s = mu_hsum16(acc[0]);
    int i = np, r = n - np;
    const int grouped = r >= 16 ? (r & ~15) + ((r & 15) >= 8 ? 8 : 0) : (r >= 8 ? 8 : 0);
    for (; i < np + grouped; i++) {
        const float p = x[i] * y[i];
        s += p;
    }
    for (; i < n; i++) s = fmaf(x[i], y[i], s);
    return s;
}

/* llamafile tinyBLAS F32 (AVX-512, KN 16): one 16-lane FMA accumulator per
 * output, then reduced as _mm512_reduce_add_ps. Taken when n % 16 == 0 and
 * the weight has a multiple of 4 rows (forward.c checks both). */
static float vec_dot_f32_batch_ref(int n, const void *w, const void *a) {
    const float *x = w, *y = a;
    float acc[16] = {0};
    for (int i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(x[i + l], y[i + l], acc[l]);
    return mu_hsum16(acc);
}

/* ggml_vec_dot_f16 on AVX-512: 4 accumulators of 16 lanes over steps of 64
 * elements, combined (0+2, 1+3, then the two), the lanes reduced, the tail
 * added in double. A product of two F16 values is exact in float, so
 * "acc + x*y" rounds exactly like the FMA. */
float mu_vec_dot_f16_ref(int n, const void *w, const void *a) {
    const mu_f16 *x = w, *y = a;
    float acc[4][16] = {{0}};
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) {
                const int k = i + 16 * j + l;
                acc[j][l] += mu_f16_to_f32(x[k]) * mu_f16_to_f32(y[k]);
            }
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
        acc[0][l] += acc[1][l];
    }
    double s = mu_hsum16(acc[0]);
    for (int i = np; i < n; i++) s += (double)(mu_f16_to_f32(x[i]) * mu_f16_to_f32(y[i]));
    return (float)s;
}

/* llamafile tinyBLAS F16 x F16 (AVX-512): one 16-lane accumulator per
 * output, then reduced. n % 16 == 0. */
static float vec_dot_f16_batch_ref(int n, const void *w, const void *a) {
    const mu_f16 *x = w, *y = a;
    float acc[16] = {0};
    for (int i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += mu_f16_to_f32(x[i + l]) * mu_f16_to_f32(y[i + l]);
    return mu_hsum16(acc);
}

/* One element pair of VDPBF16PS (_mm512_dpbf16_ps), as measured on Zen 5:
 * acc += x[1]*y[1], then acc += x[0]*y[0], each rounded once to nearest
 * even (the bf16 products are exact: an FMA), with bf16 and accumulator
 * denormals read as zero and denormal results flushed to zero. */
static inline float bf16_daz(mu_bf16 h) { return (h & 0x7f80) ? mu_bf16_to_f32(h) : 0.f; }
static inline float f32_ftz(float v) { return fabsf(v) < 0x1p-126f ? 0.f * v : v; }
static inline float dpbf16_pair(float acc, const mu_bf16 *x, const mu_bf16 *y) {
    acc = f32_ftz(acc);
    acc = f32_ftz(fmaf(bf16_daz(x[1]), bf16_daz(y[1]), acc));
    return f32_ftz(fmaf(bf16_daz(x[0]), bf16_daz(y[0]), acc));
}

/* ggml_vec_dot_bf16 with AVX512BF16: two 16-lane accumulators, the first
 * over elements 0..31 of every 64, the second over 32..63; lane l takes the
 * pair 2l, 2l+1 of its 32 (dpbf16_pair). Each is reduced in float, the two
 * added in double, then the tail (n % 64) in double. */
float mu_vec_dot_bf16_ref(int n, const void *w, const void *a) {
    const mu_bf16 *x = w, *y = a;
    float c[2][16] = {{0}};
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 16; l++) {
                const int k = i + 32 * h + 2 * l;
                c[h][l] = dpbf16_pair(c[h][l], x + k, y + k);
            }
    double s = (double)mu_hsum16(c[0]);
    s += (double)mu_hsum16(c[1]);
    for (int i = np; i < n; i++) s += (double)(mu_bf16_to_f32(x[i]) * mu_bf16_to_f32(y[i]));
    return (float)s;
}

/* llamafile tinyBLAS BF16 x BF16 with AVX512BF16 (KN 32): one 16-lane
 * accumulator per output, lane l takes the pair 2l, 2l+1 of every 32
 * elements (dpbf16_pair), reduced as _mm512_reduce_add_ps. tinyBLAS needs
 * n % 32 == 0 (else ggml's vec_dot runs) and a multiple of 4 weight rows
 * (forward.c checks that). */
static float vec_dot_bf16_batch_ref(int n, const void *w, const void *a) {
    if (n % 32) return mu_vec_dot_bf16_ref(n, w, a);
    const mu_bf16 *x = w, *y = a;
    float acc[16] = {0};
    for (int i = 0; i < n; i += 32)
        for (int l = 0; l < 16; l++) acc[l] = dpbf16_pair(acc[l], x + i + 2 * l, y + i + 2 * l);
    return mu_hsum16(acc);
}

/* ggml_vec_dot_q8_0_q8_0 on x86 (and tinyBLAS_Q0_AVX, the same rounding):
 * lane l of 8 holds the integer sum of bytes 4l..4l+3 of each block, and
 * accumulates d_x*d_y * that sum by FMA; the lanes are then summed. */
float mu_vec_dot_q8_0_ref(int n, const void *w, const void *a) {
    const mu_block_q8_0 *x = w, *y = a;
    float acc[8] = {0};
    for (int i = 0; i < n / MU_QK8_0; i++) {
        const float d = mu_f16_to_f32(x[i].d) * mu_f16_to_f32(y[i].d);
        for (int l = 0; l < 8; l++) {
            int s = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) s += x[i].qs[j] * y[i].qs[j];
            acc[l] = fmaf(d, (float)s, acc[l]);
        }
    }
    return mu_hsum8(acc);
}

/* ggml_vec_dot_nvfp4_q8_0 on x86 (its AVX2 code; NVFP4 is neither repacked
 * nor in tinyBLAS, so every matmul runs it): an NVFP4 block meets two Q8_0
 * activation blocks. Lane l of 8 holds the integer sum of elements
 * 4l..4l+3 of each 32 (lanes 0-3: sub-block 0 resp. 2, lanes 4-7: 1 resp.
 * 3); per block, acc[l] = fma(s01[l], sum over the first 32, acc[l]), then
 * acc[l] = fma(s23[l], sum over the second 32, acc[l]), where s_k =
 * scale(d[k]) * f16(d_a) of the activation block k / 2 (one float
 * multiply). The lanes are summed as hsum8. The byte products are x86's
 * sign trick (fp4_mul), which differs from c * a only for a = -128, an
 * activation only a NaN or inf makes. */
static inline int fp4_mul(int c, int8_t a) { return c < 0 ? -c * low_byte(-a) : c * a; }

float mu_vec_dot_nvfp4_ref(int n, const void *w, const void *a) {
    const mu_block_nvfp4 *x = w;
    const mu_block_q8_0 *y = a;
    float acc[8] = {0};
    for (int i = 0; i < n / MU_QK_NVFP4; i++) {
        for (int h = 0; h < 2; h++) {
            const mu_block_q8_0 *yb = &y[2 * i + h];
            const float dy = mu_f16_to_f32(yb->d);
            const float s0 = mu_nvfp4_scale(x[i].d[2 * h]) * dy, s1 = mu_nvfp4_scale(x[i].d[2 * h + 1]) * dy;
            for (int l = 0; l < 8; l++) {
                int s = 0;
                for (int j = 4 * l; j < 4 * l + 4; j++) s += fp4_mul(nvfp4_code(&x[i], 32 * h + j), yb->qs[j]);
                acc[l] = fmaf(l < 4 ? s0 : s1, (float)s, acc[l]);
            }
        }
    }
    return mu_hsum8(acc);
}

/* Unpacks the 8 six-bit scales and 8 mins of a Q4_K/Q5_K block. */
static inline void unpack_k4_scales(const uint8_t *scales, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 8; j++) scale_min_k4(j, scales, &sc[j], &mn[j]);
}

/* Q4_K weights go through llama.cpp's CPU_REPACK buffer on x86 (q4_K_8x8,
 * Q8_K activations). Integer sums of scale*q.a and of min*bsum are turned
 * into floats and accumulated by FMA with d_x*d_a (dmin_x*d_a), the min part
 * subtracted at the end. gemv (vec_dot: rows past the last multiple of 4 of
 * the matmul, so every row of a 1..3-row one) does this once per super-block;
 * gemm (vec_dot_batch: rows in whole groups of 4) once per 64 elements. */
static float dot_q4_K_repack(int n, const void *w, const void *act, bool per64) {
    const mu_block_q4_K *x = w;
    const mu_block_q8_K *y = act;
    float acc = 0, accm = 0;
    uint8_t sc[8], mn[8];
    for (int i = 0; i < n / MU_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = mu_f16_to_f32(x[i].d) * y[i].d, dm = mu_f16_to_f32(x[i].dmin) * y[i].d;
        unpack_k4_scales(x[i].scales, sc, mn);
        int isum = 0, imin = 0;
        for (int j = 0; j < 4; j++) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 0xF) * y[i].qs[j * 64 + l];
                s1 += (q[l] >> 4) * y[i].qs[j * 64 + 32 + l];
            }
            q += 32;
            isum += sc[2 * j] * s0 + sc[2 * j + 1] * s1;
            imin += mn[2 * j] * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) +
                    mn[2 * j + 1] * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
            if (per64) {
                acc = fmaf((float)isum, d, acc);
                accm = fmaf((float)imin, dm, accm);
                isum = imin = 0;
            }
        }
        if (!per64) {
            acc = fmaf((float)isum, d, acc);
            accm = fmaf((float)imin, dm, accm);
        }
    }
    return acc - accm;
}

float mu_vec_dot_q4_K_ref(int n, const void *w, const void *act) { return dot_q4_K_repack(n, w, act, false); }
static float vec_dot_q4_K_batch_ref(int n, const void *w, const void *act) { return dot_q4_K_repack(n, w, act, true); }

/* ggml_vec_dot_q5_K_q8_K on x86 (its AVX2 code; Q5_K is not repacked
 * there): lane m of 8 holds, per super-block, the integer sum over the 8
 * sub-blocks of scale * (q5 . a) on bytes 4m..4m+3 of the sub-block; then
 * acc[m] = fma(d_a*d_x, lane, acc[m]). The mins go to a scalar:
 * summs = fma(sum(min_j * (bsum_2j + bsum_2j+1)), -d_a*dmin_x, summs)
 * (GCC contracted the source's `summs += dmin * isum`). Result
 * hsum8(acc) + summs. */
float mu_vec_dot_q5_K_ref(int n, const void *w, const void *act) {
    const mu_block_q5_K *x = w;
    const mu_block_q8_K *y = act;
    float acc[8] = {0}, summs = 0;
    int8_t u[MU_QK_K];
    uint8_t sc[8], mn[8];
    for (int i = 0; i < n / MU_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const uint8_t *qh = x[i].qh;
        uint8_t m = 1;
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++) {
                u[j * 64 + l] = (int8_t)((q[l] & 0xF) + (qh[l] & m ? 16 : 0));
                u[j * 64 + 32 + l] = (int8_t)((q[l] >> 4) + (qh[l] & (m << 1) ? 16 : 0));
            }
            q += 32;
            m <<= 2;
        }
        unpack_k4_scales(x[i].scales, sc, mn);
        const float d = y[i].d * mu_f16_to_f32(x[i].d);
        const float dmin = -y[i].d * mu_f16_to_f32(x[i].dmin);
        int imin = 0;
        for (int j = 0; j < 8; j++) imin += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        summs = fmaf((float)imin, dmin, summs);
        for (int l = 0; l < 8; l++) {
            int s = 0;
            for (int j = 0; j < 8; j++) {
                int t = 0;
                for (int b = 4 * l; b < 4 * l + 4; b++) t += u[32 * j + b] * y[i].qs[32 * j + b];
                s += sc[j] * t;
            }
            acc[l] = fmaf(d, (float)s, acc[l]);
        }
    }
    return mu_hsum8(acc) + summs;
}

/* ggml_vec_dot_q6_K_q8_K on x86 (AVX2; Q6_K is not repacked there): lane m
 * of 8 holds, per super-block, the integer sum over its 8 chunks of 32 of
 * scale * (q6 unsigned . a) on bytes 4m..4m+3, minus 32 * (the bsums of
 * sub-blocks 2m, 2m+1 times their scales); then FMA by d_x*d_a, lanes summed. */
float mu_vec_dot_q6_K_ref(int n, const void *w, const void *act) {
    const mu_block_q6_K *x = w;
    const mu_block_q8_K *y = act;
    float acc[8] = {0};
    uint8_t u[MU_QK_K];
    for (int i = 0; i < n / MU_QK_K; i++) {
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        uint8_t *pu = u;
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                pu[l + 0] = (uint8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                pu[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                pu[l + 64] = (uint8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4));
                pu[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
            pu += 128;
            ql += 64;
            qh += 32;
        }
        const int8_t *sc = x[i].scales;
        const float d = y[i].d * mu_f16_to_f32(x[i].d);
        for (int m = 0; m < 8; m++) {
            int s = 0;
            for (int c = 0; c < 8; c++) {
                int t = 0;
                for (int b = 4 * m; b < 4 * m + 4; b++) t += u[32 * c + b] * y[i].qs[32 * c + b];
                s += sc[2 * c + (m >= 4)] * t;
            }
            s -= 32 * (y[i].bsums[2 * m] * sc[2 * m] + y[i].bsums[2 * m + 1] * sc[2 * m + 1]);
            acc[m] = fmaf(d, (float)s, acc[m]);
        }
    }
    return mu_hsum8(acc);
}

/* ---- ggml's expf ------------------------------------------------------- */

float mu_expf_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.f) return n <= 0.f ? 0.f : INFINITY;
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n); /* _mm512_scalef_ps */
}

/* ---- attention pieces -------------------------------------------------- */

/* Both orders of kern.h's mm_f16. B holds exact F16 values, so every
 * product is exact in float and "acc + x*y" rounds like the FMA. */
static float dot_f16_tb(int n, const mu_f16 *x, const float *y) {
    float acc[16] = {0};
    for (int i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += mu_f16_to_f32(x[i + l]) * y[i + l];
    return mu_hsum16(acc);
}

static float dot_f16_ggml(int n, const mu_f16 *x, const float *y) {
    float acc[4][16] = {{0}};
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] += mu_f16_to_f32(x[i + 16 * j + l]) * y[i + 16 * j + l];
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
        acc[0][l] += acc[1][l];
    }
    double s = mu_hsum16(acc[0]);
    for (int i = np; i < n; i++) s += (double)(mu_f16_to_f32(x[i]) * y[i]);
    return (float)s;
}

static void mm_f16_ref(int n, const mu_f16 *A, size_t lda, int na, const float *B, size_t ldb, int nb, float *C,
                       size_t ldc, int tb) {
    for (int j = 0; j < nb; j++)
        for (int i = 0; i < na; i++)
            C[(size_t)j * ldc + i] = tb ? dot_f16_tb(n, A + (size_t)i * lda, B + (size_t)j * ldb)
                                        : dot_f16_ggml(n, A + (size_t)i * lda, B + (size_t)j * ldb);
}

static void softmax_f16_ref(int n, float *x, float mx) {
    double sum = 0;
    for (int i = 0; i < n; i += 16) {
        for (int l = 0; l < 16; l++) x[i + l] = mu_expf_ggml(x[i + l] - mx);
        sum += (double)mu_hsum16(x + i);
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] = mu_f16_to_f32(mu_f32_to_f16(x[i] * inv));
}

static void to_f16_ref(int n, const float *x, mu_f16 *y) {
    for (int i = 0; i < n; i++) y[i] = mu_f32_to_f16(x[i]);
}

static void round_f16_ref(int n, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = mu_f16_to_f32(mu_f32_to_f16(x[i]));
}

static void sumsq_ref(int n, const float *x, size_t stride, int n_rows, double *out) {
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * stride;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += (double)(xr[i] * xr[i]);
        out[r] = sum;
    }
}

static void swiglu_ref(int n, float *g, const float *u) {
    const int n16 = n & ~15;
    for (int i = 0; i < n16; i++) g[i] = g[i] / (1.0f + mu_expf_ggml(-g[i])) * u[i];
    for (int i = n16; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---- the table --------------------------------------------------------- */

uint32_t mu_kern_dot_type(uint32_t t) {
    switch (t) {
    case MU_T_Q8_0: case MU_T_NVFP4: return MU_T_Q8_0;
    case MU_T_Q4_K: case MU_T_Q5_K: case MU_T_Q6_K: return MU_T_Q8_K;
    default: return t; /* F32, F16, BF16 */
    }
}

static const mu_kern REF = {
    .name = "ref",
    .vec_dot = {
        [MU_T_F32] = mu_vec_dot_f32_ref, [MU_T_F16] = mu_vec_dot_f16_ref, [MU_T_BF16] = mu_vec_dot_bf16_ref,
        [MU_T_Q8_0] = mu_vec_dot_q8_0_ref, [MU_T_Q4_K] = mu_vec_dot_q4_K_ref, [MU_T_Q5_K] = mu_vec_dot_q5_K_ref,
        [MU_T_Q6_K] = mu_vec_dot_q6_K_ref, [MU_T_NVFP4] = mu_vec_dot_nvfp4_ref,
    },
    .quant = {
        [MU_T_F32] = quant_f32_ref, [MU_T_F16] = quant_f16_ref, [MU_T_BF16] = quant_bf16_ref,
        [MU_T_Q8_0] = mu_quant_q8_0_ref, [MU_T_Q8_K] = mu_quant_q8_K_ref,
    },
    .dequant = {
        [MU_T_F32] = dequant_f32_ref, [MU_T_F16] = dequant_f16_ref, [MU_T_BF16] = dequant_bf16_ref,
        [MU_T_Q8_0] = mu_dequant_q8_0_ref, [MU_T_Q4_K] = mu_dequant_q4_K_ref, [MU_T_Q5_K] = mu_dequant_q5_K_ref,
        [MU_T_Q6_K] = mu_dequant_q6_K_ref, [MU_T_NVFP4] = mu_dequant_nvfp4_ref,
    },
    .mm_f16 = mm_f16_ref,
    .softmax_f16 = softmax_f16_ref,
    .swiglu = swiglu_ref,
    .sumsq = sumsq_ref,
    .to_f16 = to_f16_ref,
    .round_f16 = round_f16_ref,
    .vec_dot_batch = {
        [MU_T_F32] = vec_dot_f32_batch_ref, [MU_T_F16] = vec_dot_f16_batch_ref, [MU_T_BF16] = vec_dot_bf16_batch_ref,
        [MU_T_Q4_K] = vec_dot_q4_K_batch_ref,
    },
};

const mu_kern *mu_kern_ref(void) { return &REF; }
