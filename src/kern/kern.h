/* kern.h: the CPU kernel table.
 * Owns: the signatures every ISA implements and the dispatch that picks a
 * table at start-up. kern_ref.c is the specification and the test oracle;
 * per ISA, kern_<isa>.c (dots, quantizers, dequantizers), gemm_<isa>.c (the
 * tiled matrix-matrix kernels; for AVX2 and NEON also most batch-path dots)
 * and attn_<isa>.c (attention and activation pieces) fill what they
 * accelerate; the table they fill starts as a copy of the next lower one
 * (kern_dispatch.c), so the rest falls back to it.
 *
 * Numerics follow llama.cpp's CPU backend so results match it: a weight of
 * type T is multiplied with activations first converted to T's "dot type"
 * (F32->F32, F16->F16, BF16->BF16, Q8_0->Q8_0, Q4_K/Q5_K/Q6_K->Q8_K,
 * NVFP4->Q8_0). */
#ifndef MU_KERN_KERN_H
#define MU_KERN_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* dot(n, weight row, prepared activation row) -> float */
typedef float (*mu_vec_dot_fn)(int n, const void *w, const void *a);
/* two weight rows (w0, w1) against one activation row: out[i] is exactly
 * vec_dot(n, w_i, a); lets a decode step stream two rows at once */
typedef void (*mu_vec_dot2_fn)(int n, const void *w0, const void *w1, const void *a, float out[2]);
/* n_w weight rows (w + r * w_stride) against n_a (1..MU_DOTN_MAX)
 * activation rows (a + i * a_stride): out[i * out_stride + r] is exactly
 * vec_dot(n, w_r, a_i). Each weight block is loaded and decoded once for all
 * activation rows, and what belongs to an activation row alone (its scales
 * as floats) is prepared once per call, not per weight row: a solo
 * verification block, whose rows must each round as a decode step. */
#define MU_DOTN_MAX 16
typedef void (*mu_vec_dotn_fn)(int n, const void *w, size_t w_stride, int n_w, const void *a, size_t a_stride,
                               int n_a, float *out, size_t out_stride);
/* activation f32 -> dot-type row of n elements */
typedef void (*mu_quant_fn)(const float *x, void *y, int n);
/* weight row -> f32 */
typedef void (*mu_dequant_fn)(const void *w, float *y, int n);
/* Y[t][r] = dot(W row r, A row t) for rows [r0, r1) and t in [0, n_t):
 * W has row stride w_stride bytes, A rows a_stride bytes, Y row stride y_stride floats.
 * The tiled matrix-matrix path for prefill; NULL means loop over vec_dot. */
typedef void (*mu_gemm_fn)(int n, const void *w, size_t w_stride, int r0, int r1,
                           const void *a, size_t a_stride, int n_t, float *y, int y_stride);

/* Activations prepared once per matmul for gemm_p (a table whose gemm would
 * otherwise rearrange all of them in every call, i.e. on every thread):
 * prep writes the prepared form of one dot-type row of n values, n bytes
 * (a Q8_K row's codes, rearranged); gemm_p is gemm reading them from p,
 * row t at p + t * n, with p's rows allocated up to n_t rounded up to 16. */
typedef void (*mu_prep_fn)(int n, const void *a, void *p);
typedef void (*mu_gemm_p_fn)(int n, const void *w, size_t w_stride, int r0, int r1, const void *a,
                             size_t a_stride, const void *p, int n_t, float *y, int y_stride);

typedef struct mu_kern {
    const char *name;
    mu_vec_dot_fn vec_dot[MU_T_COUNT];  /* indexed by weight type */
    mu_gemm_fn gemm[MU_T_COUNT];        /* indexed by weight type */
    mu_quant_fn quant[MU_T_COUNT];      /* indexed by dot type */
    mu_dequant_fn dequant[MU_T_COUNT];  /* indexed by weight type */
    /* Attention products in llama.cpp's rounding (its non-flash path, where
     * K.Q and V.softmax are F16 matmuls): C[j * ldc + i] = dot(A row i,
     * B row j) for i < na, j < nb over n values; A rows are F16 (the cache,
     * lda elements apart), B rows floats that are exact F16 values (ldb
     * apart). tb != 0: llamafile tinyBLAS, one 16-lane FMA accumulator over
     * steps of 16, reduced as hsum16 (n % 16 == 0). tb == 0:
     * ggml_vec_dot_f16, 4 accumulators of 16 lanes over steps of 64, combined
     * 0+2, 1+3, then the two, reduced as hsum16, and the n % 64 tail added in
     * double. */
    void (*mm_f16)(int n, const mu_f16 *A, size_t lda, int na, const float *B, size_t ldb, int nb, float *C,
                   size_t ldc, int tb);
    /* The softmax of one row of n % 16 == 0 scores with maximum mx, rounded
     * to F16 (ggml_vec_soft_max_f32, then ggml_vec_scale_f32 by 1/sum, then
     * the conversion to the V product's F16): e = expf_ggml(x - mx); sum =
     * the 16-element chunks' hsum16 added in double, in order; x = f16(e *
     * (float)(1 / sum)). -INFINITY scores become 0. */
    void (*softmax_f16)(int n, float *x, float mx);
    /* y = x rounded to F16 (nearest even), as F16 or back as floats */
    void (*to_f16)(int n, const float *x, mu_f16 *y);
    void (*round_f16)(int n, const float *x, float *y);
    /* g = silu(g) * u (ggml_vec_swiglu_f32: ggml's vector silu on whole
     * groups of 16, libm's expf on the tail). */
    void (*swiglu)(int n, float *g, const float *u);
    /* RMS norm's sums of squares of n_rows rows of n floats (row r at x + r
     * * stride): out[r] = the sum, in order, of (double)(x[i] * x[i]) (the
     * square in float, added in double), llama.cpp's rms_norm. Each row is
     * one chain of adds; a SIMD table runs rows side by side in its lanes,
     * never one row's elements. */
    void (*sumsq)(int n, const float *x, size_t stride, int n_rows, double *out);
    /* Dots that llama.cpp's x86 CPU backend computes with other rounding
     * in a matmul of two activation rows or more. NULL: same as vec_dot.
     *  F16: llamafile tinyBLAS, one 16-lane FMA accumulator reduced as
     *       _mm512_reduce_add_ps; every row, when n % 16 == 0 and the weight
     *       has a multiple of 4 rows (else tinyBLAS declines: vec_dot).
     *  Q4_K: the repack gemm (FMA per 64 elements, see kern_ref.c); only the
     *       rows inside whole groups of 4 of the matmul, the rest use vec_dot
     *       (the repack gemv).
     *  BF16: tinyBLAS (VDPBF16PS steps of 32) when n % 32 == 0 and rows % 4
     *       == 0, else the function itself returns the vec_dot result.
     *  F32: tinyBLAS, one 16-lane FMA accumulator, when n % 16 == 0 and
     *       rows % 4 == 0.
     * docs/llamacpp-numerics.md has the full facts. */
    mu_vec_dot_fn vec_dot_batch[MU_T_COUNT];
    /* vec_dot on two rows at once (decode); NULL: vec_dot twice */
    mu_vec_dot2_fn vec_dot2[MU_T_COUNT];
    /* vec_dot of several weight rows against several activation rows
     * (mu_vec_dotn_fn); NULL: vec_dot per pair */
    mu_vec_dotn_fn vec_dotn[MU_T_COUNT];
    /* see mu_prep_fn; NULL where the gemm takes its activations as they
     * are. Worth it from prep_min_t activation rows. */
    mu_prep_fn prep[MU_T_COUNT];
    mu_gemm_p_fn gemm_p[MU_T_COUNT];
    int prep_min_t;
} mu_kern;

/* llama.cpp's horizontal sums on x86: 8 lanes as hsum_float_8 (and
 * tinyBLAS's hsum(__m256)), 16 lanes as GCC's _mm512_reduce_add_ps. */
static inline float mu_hsum8(const float *a) {
    float h0 = a[0] + a[4], h1 = a[1] + a[5], h2 = a[2] + a[6], h3 = a[3] + a[7];
    return (h0 + h2) + (h1 + h3);
}
static inline float mu_hsum16(const float *a) {
    float h[8];
    for (int i = 0; i < 8; i++) h[i] = a[i] + a[i + 8];
    return mu_hsum8(h);
}
/* ggml's vectorized expf (ggml_v_expf, AVX-512 variant), bit for bit in
 * scalar code; used for the softmax and SiLU as llama.cpp does. */
float mu_expf_ggml(float x);

/* The dot type llama.cpp's CPU backend pairs with weight type t. */
uint32_t mu_kern_dot_type(uint32_t t);

/* Tables, each complete after dispatch fills gaps from the level below. */
const mu_kern *mu_kern_ref(void);
/* Best table for this CPU, or the one named by `name` / $MUSER_KERN
 * ("ref", "avx2", "avx512", "amx", "amxsim", "neon"; amx and amxsim are
 * chosen only by name, see kern_dispatch.c); NULL if the named one cannot
 * run here. */
const mu_kern *mu_kern_select(const char *name);
/* Every table this CPU can run, for tests; returns the count. */
int mu_kern_available(const mu_kern **out, int cap);

/* Filled by ISA files (declared here, defined only where built: x86-64 or
 * AArch64); kern_dispatch.c calls them. */
void mu_kern_fill_avx2(mu_kern *k);
void mu_kern_fill_avx512(mu_kern *k);
void mu_kern_fill_neon(mu_kern *k);
void mu_kern_fill_attn_avx2(mu_kern *k);
void mu_kern_fill_attn_avx512(mu_kern *k);
void mu_kern_fill_attn_neon(mu_kern *k);
void mu_kern_fill_gemm_avx2(mu_kern *k);
void mu_kern_fill_gemm_avx512(mu_kern *k);
void mu_kern_fill_gemm_neon(mu_kern *k);
/* sim != 0: the tile instructions emulated in C (the "amxsim" table) */
void mu_kern_fill_gemm_amx(mu_kern *k, int sim);

/* fp16 / bf16 conversions (round to nearest even), scalar. */
float mu_f16_to_f32(mu_f16 h);
mu_f16 mu_f32_to_f16(float f);
float mu_bf16_to_f32(mu_bf16 h);
mu_bf16 mu_f32_to_bf16(float f);

/* NVFP4 (ggml's kvalues_fp4 and ggml_ue4m3_to_fp32): the E2M1 codes as
 * doubled values (so they are integers), and the sub-block scale as half the
 * UE4M3 value, so value = code * scale exactly. UE4M3: bits 6..3 the
 * exponent (bias 7), 2..0 the mantissa, exponent 0 subnormal (man * 2^-9);
 * bit 7 is ignored, 0x7f (E4M3's NaN) reads as 0, 0xff as 240. Every byte
 * is a finite scale. */
extern const int8_t mu_fp4_codes[16];
static inline float mu_nvfp4_scale(uint8_t x) {
    if (x == 0x7f) return 0.f;
    const uint32_t e = (x >> 3) & 15, m = x & 7;
    if (!e) return (float)m * 0x1p-10f;
    union { uint32_t u; float f; } v = {((e + 119) << 23) | (m << 20)}; /* (1 + m/8) 2^(e-7) / 2 */
    return v.f;
}

/* Reference kernels, exported for the ISA files' tails and for tests. */
float mu_vec_dot_f32_ref(int n, const void *w, const void *a);
float mu_vec_dot_f16_ref(int n, const void *w, const void *a);
float mu_vec_dot_bf16_ref(int n, const void *w, const void *a);
float mu_vec_dot_q8_0_ref(int n, const void *w, const void *a);
float mu_vec_dot_q4_K_ref(int n, const void *w, const void *a);
float mu_vec_dot_q5_K_ref(int n, const void *w, const void *a);
float mu_vec_dot_q6_K_ref(int n, const void *w, const void *a);
float mu_vec_dot_nvfp4_ref(int n, const void *w, const void *a);
void mu_quant_q8_0_ref(const float *x, void *y, int n);
void mu_quant_q8_K_ref(const float *x, void *y, int n);
void mu_dequant_q4_K_ref(const void *w, float *y, int n);
void mu_dequant_q5_K_ref(const void *w, float *y, int n);
void mu_dequant_q6_K_ref(const void *w, float *y, int n);
void mu_dequant_q8_0_ref(const void *w, float *y, int n);
void mu_dequant_nvfp4_ref(const void *w, float *y, int n);

#endif
