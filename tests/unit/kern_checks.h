/* kern_checks.h: the kernel-table checks, shared by the cmocka unit test
 * (tests/unit/test_kern.c, every table this x86 CPU runs) and the
 * self-contained aarch64 driver run under qemu (tests/neon/driver.c).
 * Plain C, no test framework: each check returns its failure count and
 * prints what failed on stderr.
 *
 * Bit-exact: quantizers (activation f32 -> dot type), dequantizers, and
 * every dot of every weight type checked (kc_exact: all of KC_WTYPES),
 * whose float order kern_ref.c pins to llama.cpp's (vec_dot, vec_dot2,
 * vec_dot_batch, gemm, mm_f16), softmax_f16, swiglu, sumsq.
 * Named tolerances remain for a weight type outside kc_exact (none now):
 * |got - ref| <= tol * sum_i |w_i| * |a_i|, the sum of the magnitudes of
 * the terms, with TOL_DOT_FLOAT for F32, F16 and BF16 and TOL_DOT_QUANT
 * for the quantized types. */
#ifndef MU_TESTS_KERN_CHECKS_H
#define MU_TESTS_KERN_CHECKS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/kern/kern.h"
#include "../../src/kern/quant.h"

#define TOL_DOT_QUANT 1e-5
#define TOL_DOT_FLOAT 5e-5

/* set to silence the failure lines (the self-test of the checks) */
static int kc_quiet;
#define KC_LOG(...) ((void)(kc_quiet || fprintf(stderr, __VA_ARGS__)))

static uint64_t kc_state = 0x9e3779b97f4a7c15ull;
static void kc_seed(uint64_t s) { kc_state = s * 0x9e3779b97f4a7c15ull + 1; }
static uint32_t kc_u32(void) {
    kc_state ^= kc_state << 13;
    kc_state ^= kc_state >> 7;
    kc_state ^= kc_state << 17;
    return (uint32_t)(kc_state >> 16);
}
static double kc_unif(void) { return (kc_u32() + 0.5) / 4294967296.0; }
static float kc_gauss(void) {
    return (float)(sqrt(-2 * log(kc_unif())) * cos(6.283185307179586 * kc_unif()));
}

static const int KC_LENS[] = {256, 512, 2048, 6656};
#define KC_NLENS ((int)(sizeof KC_LENS / sizeof KC_LENS[0]))
static const uint32_t KC_WTYPES[] = {MU_T_F32, MU_T_F16, MU_T_BF16, MU_T_Q8_0, MU_T_Q4_K, MU_T_Q5_K, MU_T_Q6_K, MU_T_NVFP4};
/* lengths of 1, 3 and 7 NVFP4 blocks, checked for NVFP4 on top of KC_LENS */
static const int KC_LENS_NVFP4[] = {64, 192, 448};
#define KC_NLENS_OF(t) (KC_NLENS + ((t) == MU_T_NVFP4 ? 3 : 0))
#define KC_LEN(t, li) ((li) < KC_NLENS ? KC_LENS[li] : KC_LENS_NVFP4[(li) - KC_NLENS])
#define KC_NWTYPES ((int)(sizeof KC_WTYPES / sizeof KC_WTYPES[0]))
static const uint32_t KC_DTYPES[] = {MU_T_F32, MU_T_F16, MU_T_BF16, MU_T_Q8_0, MU_T_Q8_K};
#define KC_NDTYPES ((int)(sizeof KC_DTYPES / sizeof KC_DTYPES[0]))

static size_t kc_row_bytes(uint32_t t, int n) {
    switch (t) {
    case MU_T_Q8_K: return (size_t)(n / MU_QK_K) * sizeof(mu_block_q8_K);
    default: return mu_type_row_bytes(t, n);
    }
}

/* Activation f32 rows of several shapes; `kind` picks the distribution. */
#define KC_NKINDS 7
static void kc_fill_act(float *x, int n, int kind) {
    for (int i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = kc_gauss(); break;
        case 1: x[i] = kc_gauss() * 1e-3f * (float)(1 + i % 7); break;
        case 2: x[i] = kc_gauss() * (kc_u32() % 64 == 0 ? 300.f : 1.f); break; /* outliers */
        case 3: /* exact rounding ties: amax 127 makes the scale exactly +-1 */
            x[i] = (i % 32 == 0) ? ((i / 32) % 2 ? 127.f : -127.f) : (float)((int)(kc_u32() % 253) - 126) + 0.5f;
            break;
        case 4: x[i] = (i / 256) % 2 ? 0.f : kc_gauss(); break; /* zero blocks */
        case 5: /* f16 edge cases: subnormals, midpoints, overflow */
            switch (kc_u32() % 6) {
            case 0: x[i] = kc_gauss() * 1e-6f; break;
            case 1: x[i] = kc_gauss() * 3e-8f; break;
            case 2: x[i] = (float)(kc_u32() % 2048) + 0.5f + 2048.f; break; /* f16 ties */
            case 3: x[i] = kc_gauss() * 70000.f; break;
            default: x[i] = kc_gauss(); break;
            }
            break;
        default: x[i] = 0.25f * (float)((i % 5) - 2); break; /* repeated values, +-max ties */
        }
    }
}

static mu_f16 kc_f16_scale(int extreme) {
    switch (extreme) {
    case 1: return mu_f32_to_f16(65504.f * (kc_u32() % 2 ? 1 : -1));
    case 2: return (mu_f16)(1 + kc_u32() % 1023); /* subnormal */
    case 3: return 0;
    default: return mu_f32_to_f16((float)(kc_unif() * 0.02 + 1e-4));
    }
}

/* Weight rows: float types from Gaussians; quant types from random bytes
 * (every code and scale pattern) with the f16 scales controlled. */
static void kc_fill_weights(uint32_t t, void *w, int n, int extreme) {
    uint8_t *b = w;
    size_t bytes = kc_row_bytes(t, n);
    for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)kc_u32();
    int nb;
    switch (t) {
    case MU_T_F32:
        for (int i = 0; i < n; i++) ((float *)w)[i] = kc_gauss() * (extreme ? 1e4f : 1.f);
        break;
    case MU_T_F16:
        for (int i = 0; i < n; i++) ((mu_f16 *)w)[i] = mu_f32_to_f16(kc_gauss() * (extreme ? 1e4f : 1.f));
        break;
    case MU_T_BF16:
        for (int i = 0; i < n; i++) ((mu_bf16 *)w)[i] = mu_f32_to_bf16(kc_gauss() * (extreme ? 1e20f : 1.f));
        break;
    case MU_T_Q8_0:
        nb = n / MU_QK8_0;
        for (int i = 0; i < nb; i++) {
            mu_block_q8_0 *q = (mu_block_q8_0 *)w + i;
            q->d = kc_f16_scale(extreme && i % 3 == 0 ? 1 + (int)(kc_u32() % 3) : 0);
            /* -128 is legal in a file; activations never hold it */
        }
        break;
    case MU_T_Q4_K: case MU_T_Q5_K:
        nb = n / MU_QK_K;
        for (int i = 0; i < nb; i++) {
            mu_f16 *d = (mu_f16 *)(b + (size_t)i * mu_type_get(t)->type_bytes);
            d[0] = kc_f16_scale(extreme ? 1 + (int)(kc_u32() % 3) : 0);
            d[1] = kc_f16_scale(extreme ? 1 + (int)(kc_u32() % 3) : 0);
            if (extreme && i % 2) memset(d + 2, 0xff, MU_K_SCALE_SIZE); /* all scales and mins 63 */
        }
        break;
    case MU_T_NVFP4: /* random bytes cover every scale byte; extreme: the largest scales and codes */
        nb = n / MU_QK_NVFP4;
        for (int i = 0; extreme && i < nb; i++) {
            mu_block_nvfp4 *q = (mu_block_nvfp4 *)w + i;
            for (int s = 0; s < 4; s++) q->d[s] = (uint8_t)(i % 3 == 0 ? 0x7e : i % 3 == 1 ? 0xff : 0x7f - s);
            if (i % 2) memset(q->qs, (i % 4 == 1) ? 0x77 : 0xff, sizeof q->qs); /* all +12 / all -12 */
        }
        break;
    case MU_T_Q6_K:
        nb = n / MU_QK_K;
        for (int i = 0; i < nb; i++) {
            mu_block_q6_K *q = (mu_block_q6_K *)w + i;
            q->d = kc_f16_scale(extreme ? 1 + (int)(kc_u32() % 3) : 0);
            if (extreme && i % 2) memset(q->scales, i % 4 == 1 ? 0x80 : 0x7f, sizeof q->scales);
        }
        break;
    }
}

/* Magnitudes of the terms of a dot product: dequantized weights with the
 * K-quant min term counted with the same sign as the scale term. */
static void kc_weight_mag(uint32_t t, const void *w, float *out, int n) {
    const mu_kern *ref = mu_kern_ref();
    if (t == MU_T_Q4_K || t == MU_T_Q5_K) {
        const size_t bytes = kc_row_bytes(t, n);
        uint8_t *c = malloc(bytes);
        memcpy(c, w, bytes);
        const int tb = mu_type_get(t)->type_bytes;
        for (int i = 0; i < n / MU_QK_K; i++) {
            mu_f16 *d = (mu_f16 *)(c + (size_t)i * tb);
            d[1] = (mu_f16)((d[1] & 0x7fff) | ((~d[0]) & 0x8000)); /* dmin sign opposite to d */
        }
        ref->dequant[t](c, out, n);
        free(c);
    } else {
        ref->dequant[t](w, out, n);
    }
    for (int i = 0; i < n; i++) out[i] = fabsf(out[i]);
}

static void kc_act_values(uint32_t dt, const void *a, float *out, int n) {
    const mu_kern *ref = mu_kern_ref();
    if (dt == MU_T_Q8_K) {
        const mu_block_q8_K *q = a;
        for (int i = 0; i < n; i++) out[i] = q[i / MU_QK_K].d * q[i / MU_QK_K].qs[i % MU_QK_K];
    } else {
        ref->dequant[dt](a, out, n);
    }
}

static const char *kc_tname(uint32_t t) { return mu_type_get(t)->name; }
static int kc_same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }

static int check_quant(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    int fails = 0;
    for (int ti = 0; ti < KC_NDTYPES; ti++) {
        const uint32_t t = KC_DTYPES[ti];
        for (int li = 0; li < KC_NLENS; li++) {
            const int n = KC_LENS[li];
            const size_t bytes = kc_row_bytes(t, n);
            float *x = malloc((size_t)n * sizeof *x);
            uint8_t *y0 = malloc(bytes), *y1 = malloc(bytes);
            for (int kind = 0; kind < KC_NKINDS; kind++) {
                kc_seed((uint64_t)(1000 * ti + 10 * li + kind));
                kc_fill_act(x, n, kind);
                memset(y0, 0xa5, bytes);
                memset(y1, 0x5a, bytes);
                ref->quant[t](x, y0, n);
                k->quant[t](x, y1, n);
                if (memcmp(y0, y1, bytes)) {
                    size_t at = 0;
                    while (y0[at] == y1[at]) at++;
                    KC_LOG("%s: quant %s n=%d kind=%d differs from ref at byte %zu (%02x vs %02x)\n", k->name,
                            kc_tname(t), n, kind, at, y1[at], y0[at]);
                    fails++;
                }
            }
            free(x);
            free(y0);
            free(y1);
        }
    }
    return fails;
}

/* Non-finite and extreme activations (a model with garbage weights makes
 * them): every table gives the ref's bytes for the activation quantizers
 * (defined results, docs/llamacpp-numerics.md "Non-finite activations").
 * Block kinds: one NaN, one +inf, one -inf, +inf and -inf, all NaN, NaN with
 * a payload, huge finite values, a tiny (subnormal) maximum, NaN and inf. */
#define KC_NF_KINDS 10
static void kc_fill_nonfinite(float *x, int n, int kind) {
    kc_fill_act(x, n, 0);
    const float nanp = (float)NAN;
    uint32_t payload = 0x7fc00123u;
    float pnan;
    memcpy(&pnan, &payload, 4);
    for (int b = 0; b < n / 32; b++) {
        float *xb = x + 32 * b;
        const int at = (int)(kc_u32() % 32), at2 = (at + 1 + (int)(kc_u32() % 31)) % 32;
        switch ((kind + b) % KC_NF_KINDS) {
        case 0: xb[at] = nanp; break;
        case 1: xb[at] = INFINITY; break;
        case 2: xb[at] = -INFINITY; break;
        case 3: xb[at] = INFINITY; xb[at2] = -INFINITY; break;
        case 4: for (int j = 0; j < 32; j++) xb[j] = nanp; break;
        case 5: xb[at] = pnan; xb[at2] = -nanp; break;
        case 6: for (int j = 0; j < 32; j++) xb[j] = kc_gauss() * 3e38f; xb[at] = 3.4e38f; break;
        case 7: for (int j = 0; j < 32; j++) xb[j] = kc_u32() % 2 ? 0.f : -0.f; xb[at] = 1e-40f; xb[at2] = -1.4e-45f; break;
        case 8: xb[at] = nanp; xb[at2] = -INFINITY; break;
        default: break; /* finite */
        }
    }
}

static int check_quant_nonfinite(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    static const uint32_t types[] = {MU_T_Q8_0, MU_T_Q8_K};
    int fails = 0;
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t t = types[ti];
        for (int li = 0; li < KC_NLENS; li++) {
            const int n = KC_LENS[li];
            const size_t bytes = kc_row_bytes(t, n);
            float *x = malloc((size_t)n * sizeof *x);
            uint8_t *y0 = malloc(bytes), *y1 = malloc(bytes);
            for (int kind = 0; kind < KC_NF_KINDS; kind++) {
                kc_seed((uint64_t)(7000 + 1000 * ti + 10 * li + kind));
                kc_fill_nonfinite(x, n, kind);
                memset(y0, 0xa5, bytes);
                memset(y1, 0x5a, bytes);
                ref->quant[t](x, y0, n);
                k->quant[t](x, y1, n);
                if (memcmp(y0, y1, bytes)) {
                    size_t at = 0;
                    while (y0[at] == y1[at]) at++;
                    KC_LOG("%s: quant %s n=%d non-finite kind=%d differs from ref at byte %zu (%02x vs %02x)\n",
                           k->name, kc_tname(t), n, kind, at, y1[at], y0[at]);
                    fails++;
                }
            }
            free(x);
            free(y0);
            free(y1);
        }
    }
    return fails;
}

/* NVFP4 dots on activations quantized from non-finite and extreme values
 * (a NaN makes a -128, where the sign trick is not the plain product):
 * every table gives the ref's bits (or NaN where the ref gives NaN). */
static int check_nvfp4_nonfinite(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    int fails = 0;
    for (int li = 0; li < KC_NLENS; li++) {
        const int n = KC_LENS[li];
        void *w = malloc(kc_row_bytes(MU_T_NVFP4, n)), *a = malloc(kc_row_bytes(MU_T_Q8_0, n));
        float *x = malloc((size_t)n * sizeof *x);
        for (int kind = 0; kind < KC_NF_KINDS; kind++) {
            kc_seed((uint64_t)(9000 + 10 * li + kind));
            kc_fill_weights(MU_T_NVFP4, w, n, kind % 2);
            kc_fill_nonfinite(x, n, kind);
            ref->quant[MU_T_Q8_0](x, a, n);
            const float r = ref->vec_dot[MU_T_NVFP4](n, w, a), g = k->vec_dot[MU_T_NVFP4](n, w, a);
            if (!(isnan(r) && isnan(g)) && memcmp(&r, &g, sizeof r)) {
                KC_LOG("%s: vec_dot NVFP4 n=%d non-finite kind=%d: %.9g vs ref %.9g\n", k->name, n, kind, g, r);
                fails++;
            }
            if (k->vec_dot2[MU_T_NVFP4]) {
                float o[2];
                k->vec_dot2[MU_T_NVFP4](n, w, w, a, o);
                if (!(isnan(r) && isnan(o[0])) && memcmp(&r, &o[0], sizeof r)) {
                    KC_LOG("%s: vec_dot2 NVFP4 n=%d non-finite kind=%d: %.9g vs ref %.9g\n", k->name, n, kind, o[0], r);
                    fails++;
                }
            }
        }
        free(w);
        free(a);
        free(x);
    }
    return fails;
}

/* NVFP4 rows whose second half of every block mirrors the first against
 * activations whose second Q8_0 block is the first negated: each block's two
 * FMAs cancel, so the accumulator keeps the rounding of every product and a
 * kernel that rounds the product before adding (mul + add) or reorders the
 * steps gives other bits. vec_dot, vec_dot2 and gemm. */
static int check_nvfp4_cancel(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    int fails = 0;
    for (int li = 0; li < KC_NLENS_OF(MU_T_NVFP4); li++) {
        const int n = KC_LEN(MU_T_NVFP4, li);
        mu_block_nvfp4 *w = malloc(kc_row_bytes(MU_T_NVFP4, n));
        void *a = malloc(kc_row_bytes(MU_T_Q8_0, n));
        float *x = malloc((size_t)n * sizeof *x);
        for (int rep = 0; rep < 8; rep++) {
            kc_seed((uint64_t)(9500 + 10 * li + rep));
            kc_fill_weights(MU_T_NVFP4, w, n, 0);
            kc_fill_act(x, n, rep % 3);
            for (int i = 0; i < n / MU_QK_NVFP4; i++) {
                w[i].d[2] = w[i].d[0], w[i].d[3] = w[i].d[1];
                memcpy(w[i].qs + 16, w[i].qs, 16);
                for (int j = 0; j < 32; j++) x[64 * i + 32 + j] = -x[64 * i + j];
            }
            ref->quant[MU_T_Q8_0](x, a, n);
            const float r = ref->vec_dot[MU_T_NVFP4](n, w, a), g = k->vec_dot[MU_T_NVFP4](n, w, a);
            float o[2] = {r, r}, gm[3] = {r, r, r};
            if (k->vec_dot2[MU_T_NVFP4]) k->vec_dot2[MU_T_NVFP4](n, w, w, a, o);
            if (k->gemm[MU_T_NVFP4]) { /* one weight row, three copies of the activation row */
                const size_t arow = kc_row_bytes(MU_T_Q8_0, n);
                uint8_t *a3 = malloc(3 * arow);
                for (int t = 0; t < 3; t++) memcpy(a3 + t * arow, a, arow);
                k->gemm[MU_T_NVFP4](n, w, kc_row_bytes(MU_T_NVFP4, n), 0, 1, a3, arow, 3, gm, 1);
                free(a3);
            }
            if (!kc_same_bits(r, g) || !kc_same_bits(r, o[0]) || !kc_same_bits(r, o[1]) || !kc_same_bits(r, gm[0]) ||
                !kc_same_bits(r, gm[2])) {
                KC_LOG("%s: vec_dot NVFP4 n=%d cancelling rep=%d: %.9g (dot2 %.9g, gemm %.9g) vs ref %.9g\n", k->name,
                       n, rep, g, o[0], gm[2], r);
                fails++;
            }
        }
        free(w);
        free(a);
        free(x);
    }
    return fails;
}

static int check_dequant(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    int fails = 0;
    for (int ti = 0; ti < KC_NWTYPES; ti++) {
        const uint32_t t = KC_WTYPES[ti];
        for (int li = 0; li < KC_NLENS_OF(t); li++) {
            const int n = KC_LEN(t, li);
            void *w = malloc(kc_row_bytes(t, n));
            float *y0 = malloc((size_t)n * sizeof(float)), *y1 = malloc((size_t)n * sizeof(float));
            for (int ext = 0; ext < 2; ext++) {
                kc_seed((uint64_t)(7000 + 100 * ti + 10 * li + ext));
                kc_fill_weights(t, w, n, ext);
                ref->dequant[t](w, y0, n);
                k->dequant[t](w, y1, n);
                if (memcmp(y0, y1, (size_t)n * sizeof(float))) {
                    int at = 0;
                    while (!memcmp(&y0[at], &y1[at], sizeof(float))) at++;
                    KC_LOG("%s: dequant %s n=%d extreme=%d differs at %d: %.9g vs ref %.9g\n", k->name,
                            kc_tname(t), n, ext, at, y1[at], y0[at]);
                    fails++;
                }
            }
            free(w);
            free(y0);
            free(y1);
        }
    }
    return fails;
}

static double kc_tol(uint32_t t) {
    return (t == MU_T_F32 || t == MU_T_F16 || t == MU_T_BF16) ? TOL_DOT_FLOAT : TOL_DOT_QUANT;
}

/* Types whose dots must equal the ref bit for bit. */
static int kc_exact(uint32_t t) {
    return t == MU_T_F32 || t == MU_T_F16 || t == MU_T_BF16 || t == MU_T_Q8_0 || t == MU_T_Q4_K || t == MU_T_Q5_K ||
           t == MU_T_Q6_K || t == MU_T_NVFP4;
}


static int check_vec_dot(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    int fails = 0;
    for (int ti = 0; ti < KC_NWTYPES; ti++) {
        const uint32_t t = KC_WTYPES[ti], dt = mu_kern_dot_type(t);
        for (int li = 0; li < KC_NLENS_OF(t); li++) {
            const int n = KC_LEN(t, li);
            void *w = malloc(kc_row_bytes(t, n));
            void *a = malloc(kc_row_bytes(dt, n));
            float *x = malloc((size_t)n * sizeof(float)), *wm = malloc((size_t)n * sizeof(float));
            for (int ext = 0; ext < 2; ext++) {
                for (int kind = 0; kind < KC_NKINDS; kind++) {
                    kc_seed((uint64_t)(20000 + 1000 * ti + 100 * li + 10 * ext + kind));
                    kc_fill_weights(t, w, n, ext);
                    kc_fill_act(x, n, kind);
                    ref->quant[dt](x, a, n);
                    for (int batch = 0; batch < 2; batch++) {
                    const mu_vec_dot_fn rf = batch ? ref->vec_dot_batch[t] : ref->vec_dot[t];
                    const mu_vec_dot_fn gf = batch ? k->vec_dot_batch[t] : k->vec_dot[t];
                    if (!rf) continue;
                    const float r = rf(n, w, a);
                    const float g = gf(n, w, a);
                    if (kc_exact(t)) {
                        if (!kc_same_bits(g, r)) {
                            KC_LOG("%s: vec_dot%s %s n=%d extreme=%d kind=%d: %.9g vs ref %.9g (must be bit-identical)\n",
                                   k->name, batch ? "_batch" : "", kc_tname(t), n, ext, kind, g, r);
                            fails++;
                        }
                        continue;
                    }
                    kc_weight_mag(t, w, wm, n);
                    kc_act_values(dt, a, x, n);
                    double mag = 0;
                    for (int i = 0; i < n; i++) mag += (double)wm[i] * fabs((double)x[i]);
                    if (!isfinite(mag) || !isfinite(r)) continue; /* overflowed inputs: nothing to compare */
                    const double err = fabs((double)g - (double)r);
                    if (!(err <= kc_tol(t) * mag)) {
                        KC_LOG("%s: vec_dot %s n=%d extreme=%d kind=%d: %.9g vs ref %.9g (err %.3g, bound %.3g)\n",
                                k->name, kc_tname(t), n, ext, kind, g, r, err, kc_tol(t) * mag);
                        fails++;
                    }
                    }
                }
            }
            free(w);
            free(a);
            free(x);
            free(wm);
        }
    }
    return fails;
}

/* vec_dot2, where a table has it: both results bit-identical to the ref's
 * vec_dot of each row (lengths with 1, 2, 8 and 26 super-blocks). */
static int check_vec_dot2(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    int fails = 0;
    for (int ti = 0; ti < KC_NWTYPES; ti++) {
        const uint32_t t = KC_WTYPES[ti], dt = mu_kern_dot_type(t);
        if (!k->vec_dot2[t]) continue;
        for (int li = 0; li < KC_NLENS_OF(t); li++) {
            const int n = KC_LEN(t, li);
            void *w0 = malloc(kc_row_bytes(t, n)), *w1 = malloc(kc_row_bytes(t, n));
            void *a = malloc(kc_row_bytes(dt, n));
            float *x = malloc((size_t)n * sizeof(float));
            for (int ext = 0; ext < 2; ext++)
                for (int kind = 0; kind < KC_NKINDS; kind++) {
                    kc_seed((uint64_t)(25000 + 1000 * ti + 100 * li + 10 * ext + kind));
                    kc_fill_weights(t, w0, n, ext);
                    kc_fill_weights(t, w1, n, !ext);
                    kc_fill_act(x, n, kind);
                    ref->quant[dt](x, a, n);
                    float o[2];
                    k->vec_dot2[t](n, w0, w1, a, o);
                    const float r0 = ref->vec_dot[t](n, w0, a), r1 = ref->vec_dot[t](n, w1, a);
                    if (!kc_same_bits(o[0], r0) || !kc_same_bits(o[1], r1)) {
                        KC_LOG("%s: vec_dot2 %s n=%d extreme=%d kind=%d: %.9g %.9g vs ref %.9g %.9g\n", k->name,
                               kc_tname(t), n, ext, kind, o[0], o[1], r0, r1);
                        fails++;
                    }
                }
            free(w0);
            free(w1);
            free(a);
            free(x);
        }
    }
    return fails;
}

/* vec_dotn: 1..3 weight rows (strided, the extreme and ordinary fills
 * mixed) against 1..MU_DOTN_MAX activation rows (strided, of every kind),
 * results strided: each bit for bit the same table's vec_dot (which
 * check_vec_dot pins to the ref's), what a solo verification row must
 * equal; nothing else of the output is written. */
#define KC_DOTN_W 3
static int check_vec_dotn(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    int fails = 0;
    for (int ti = 0; ti < KC_NWTYPES; ti++) {
        const uint32_t t = KC_WTYPES[ti], dt = mu_kern_dot_type(t);
        if (!k->vec_dotn[t]) continue;
        /* float types also at lengths with a tail after the last 64; Q8_0
         * also past the blocks whose scales a table converts ahead
         * (MU_DOTN_NB in simd_x86.h: 512) */
        static const int FLOAT_TAIL_LENS[] = {80, 272}, Q8_0_LONG[] = {513 * 32};
        const int is_float = t == MU_T_F32 || t == MU_T_F16 || t == MU_T_BF16;
        const int n_extra = is_float ? 2 : t == MU_T_Q8_0 ? 1 : 0;
        for (int li = 0; li < KC_NLENS_OF(t) + n_extra; li++) {
            const int n = li < KC_NLENS_OF(t) ? KC_LEN(t, li)
                          : is_float        ? FLOAT_TAIL_LENS[li - KC_NLENS_OF(t)]
                                            : Q8_0_LONG[li - KC_NLENS_OF(t)];
            const size_t as = kc_row_bytes(dt, n) + 64, ws = kc_row_bytes(t, n) + 32;
            uint8_t *w = malloc(ws * KC_DOTN_W);
            uint8_t *a = malloc(as * MU_DOTN_MAX);
            float *x = malloc((size_t)n * sizeof(float));
            for (int ext = 0; ext < 2; ext++)
                for (int kind = 0; kind < KC_NKINDS; kind++) {
                    kc_seed((uint64_t)(27000 + 1000 * ti + 100 * li + 10 * ext + kind));
                    for (int r = 0; r < KC_DOTN_W; r++) kc_fill_weights(t, w + (size_t)r * ws, n, (ext + r) % 2);
                    for (int j = 0; j < MU_DOTN_MAX; j++) {
                        kc_fill_act(x, n, (kind + j) % KC_NKINDS);
                        ref->quant[dt](x, a + (size_t)j * as, n);
                    }
                    /* Q8_0 activation code -128 (what a non-finite value
                     * quantizes to), where the sign trick of vec_dot is not
                     * the true product (and AVX2's maddubs saturates, unlike
                     * the ref: garbage either way, but dotn must still be
                     * its table's vec_dot): in one row of the extreme fills */
                    if (t == MU_T_Q8_0 && ext)
                        for (int i = 0; i < n / MU_QK8_0; i += 3)
                            ((mu_block_q8_0 *)(a + (size_t)(kind % MU_DOTN_MAX) * as))[i].qs[(i * 7) % MU_QK8_0] = -128;
                    float rr[KC_DOTN_W][MU_DOTN_MAX];
                    for (int r = 0; r < KC_DOTN_W; r++)
                        for (int j = 0; j < MU_DOTN_MAX; j++)
                            rr[r][j] = k->vec_dot[t](n, w + (size_t)r * ws, a + (size_t)j * as);
                    for (int nw = 1; nw <= KC_DOTN_W; nw++)
                        for (int na = 1; na <= MU_DOTN_MAX; na++) {
                            const size_t os = KC_DOTN_W + 2;
                            float o[(KC_DOTN_W + 2) * MU_DOTN_MAX];
                            for (size_t j = 0; j < os * MU_DOTN_MAX; j++) o[j] = -7.0f;
                            k->vec_dotn[t](n, w, ws, nw, a, as, na, o, os);
                            for (size_t j = 0; j < os * MU_DOTN_MAX; j++) {
                                const int ai = (int)(j / os), r = (int)(j % os);
                                const float want = ai < na && r < nw ? rr[r][ai] : -7.0f;
                                if (!kc_same_bits(o[j], want)) {
                                    KC_LOG("%s: vec_dotn %s n=%d extreme=%d kind=%d n_w=%d n_a=%d out[%d][%d]: %.9g "
                                           "vs %.9g\n",
                                           k->name, kc_tname(t), n, ext, kind, nw, na, ai, r, o[j], want);
                                    fails++;
                                }
                            }
                        }
                }
            free(w);
            free(a);
            free(x);
        }
    }
    return fails;
}

/* gemm against the ref's dot for a matmul of several rows (vec_dot_batch
 * where the ref has one, else vec_dot; for Q4_K the last n_t % 4 activation
 * rows use vec_dot, llama.cpp's gemv): bit-identical for the exact types,
 * else within tolerance of it and of this table's vec_dot. Also checks that
 * it writes exactly Y[t][r0..r1) for t < n_t and nothing else. */
static int check_gemm(const mu_kern *k) {
    int fails = 0;
    static const int NTS[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 21};
    for (int ti = 0; ti < KC_NWTYPES; ti++) {
        const uint32_t t = KC_WTYPES[ti], dt = mu_kern_dot_type(t);
        if (!k->gemm[t]) continue;
        /* float types also at lengths that are whole 16s but not 32s / 64s
         * (the BF16 batch path's fallback to vec_dot, the tile tails) */
        static const int FLOAT_LENS[] = {80, 272};
        const int is_float = t == MU_T_F32 || t == MU_T_F16 || t == MU_T_BF16;
        for (int li = 0; li < (is_float ? 5 : 3); li++) {
            const int n = li < 3 ? KC_LENS[li] : FLOAT_LENS[li - 3];
            const int rows = 19, maxt = 21, ys = rows + 3;
            const size_t wrow = kc_row_bytes(t, n), arow = kc_row_bytes(dt, n);
            uint8_t *w = malloc(wrow * rows), *a = malloc(arow * maxt);
            float *x = malloc((size_t)n * sizeof(float));
            float *y = malloc((size_t)maxt * ys * sizeof(float));
            kc_seed((uint64_t)(50000 + 100 * ti + li));
            for (int r = 0; r < rows; r++) kc_fill_weights(t, w + r * wrow, n, r % 5 == 4);
            for (int tt = 0; tt < maxt; tt++) {
                kc_fill_act(x, n, tt % KC_NKINDS == 5 ? 0 : tt % KC_NKINDS);
                k->quant[dt](x, a + tt * arow, n);
            }
            for (size_t ni = 0; ni < sizeof NTS / sizeof NTS[0]; ni++) {
                const int nt = NTS[ni];
                const int r0 = (int)(ni % 3), r1 = rows - (int)(ni % 2);
                for (int i = 0; i < maxt * ys; i++) y[i] = -12345.f;
                k->gemm[t](n, w, wrow, r0, r1, a, arow, nt, y, ys);
                for (int tt = 0; tt < maxt; tt++) {
                    for (int r = 0; r < ys; r++) {
                        const float g = y[tt * ys + r];
                        if (tt >= nt || r < r0 || r >= r1) {
                            if (g != -12345.f) {
                                KC_LOG("%s: gemm %s wrote outside its tile at t=%d r=%d\n", k->name, kc_tname(t), tt, r);
                                fails++;
                                goto next;
                            }
                            continue;
                        }
                        const mu_kern *rk = mu_kern_ref();
                        mu_vec_dot_fn rf = rk->vec_dot_batch[t] ? rk->vec_dot_batch[t] : rk->vec_dot[t];
                        /* Q4_K: the last n_t % 4 rows of a matmul are llama.cpp's gemv */
                        if (t == MU_T_Q4_K && tt >= (nt & ~3)) rf = rk->vec_dot[t];
                        const float e2 = rf(n, w + r * wrow, a + tt * arow);
                        if (kc_exact(t)) {
                            if (!kc_same_bits(g, e2)) {
                                KC_LOG("%s: gemm %s n=%d n_t=%d t=%d r=%d: %.9g vs ref %.9g (must be bit-identical)\n",
                                       k->name, kc_tname(t), n, nt, tt, r, g, e2);
                                fails++;
                                goto next;
                            }
                            continue;
                        }
                        const float e = k->vec_dot[t](n, w + r * wrow, a + tt * arow);
                        /* bound: the tolerance relative to the largest of the two, times rows' magnitude proxy */
                        float *wm = malloc((size_t)n * sizeof(float)), *av = malloc((size_t)n * sizeof(float));
                        kc_weight_mag(t, w + r * wrow, wm, n);
                        kc_act_values(dt, a + tt * arow, av, n);
                        double mag = 0;
                        for (int i = 0; i < n; i++) mag += (double)wm[i] * fabs((double)av[i]);
                        free(wm);
                        free(av);
                        if (!isfinite(mag)) continue;
                        if (!(fabs((double)g - e) <= kc_tol(t) * mag) || !(fabs((double)g - e2) <= kc_tol(t) * mag)) {
                            KC_LOG("%s: gemm %s n=%d n_t=%d t=%d r=%d: %.9g vs vec_dot %.9g ref %.9g\n", k->name,
                                    kc_tname(t), n, nt, tt, r, g, e, e2);
                            fails++;
                            goto next;
                        }
                    }
                }
            next:;
            }
            free(w);
            free(a);
            free(x);
            free(y);
        }
    }
    return fails;
}

/* mm_f16 in both roundings: bit-identical to the ref, and the ref equal to
 * the single-dot kernels it generalizes (the F16 vec_dot / its batch form
 * with B rounded to F16). Shapes cover the register tiles' edges, the ggml tail and
 * an A stride larger than n. */
static int check_mm_f16(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    static const int NS[] = {16, 32, 48, 64, 100, 128, 256, 1088};
    static const int NA[] = {1, 3, 4, 5, 9, 2, 3};
    static const int NB[] = {1, 2, 4, 7, 8, 13, 9};
    /* then products over many cells (a table's blocked path, e.g.
     * attn_avx512.c's mm_long): n past a block edge, head-sized na, a
     * decode step's and a prefill item's B rows, ragged tiles of both;
     * and a prefill item's K.Q over thousands of cells (n a head's size,
     * ragged in cells and query rows) */
    static const int LN[][3] = {{16448, 9, 13}, {16640, 128, 8}, {16896, 128, 20}, {16448, 5, 3}, {16576, 3, 2},
                                {8256, 9, 13}, {16512, 126, 7}, {16448, 66, 6}, {128, 4099, 61}, {64, 2053, 64},
                                {256, 1027, 9}, {2112, 130, 8}};
    const size_t n_a = sizeof NA / sizeof NA[0], n_short = sizeof NS / sizeof NS[0] * n_a;
    int fails = 0;
    for (size_t si = 0; si < n_short + sizeof LN / sizeof LN[0]; si++)
            for (int tb = 0; tb < 2; tb++) {
                const size_t ni = si / n_a, ai = si % n_a;
                const int n = si < n_short ? NS[ni] : LN[si - n_short][0];
                const int na = si < n_short ? NA[ai] : LN[si - n_short][1];
                const int nb = si < n_short ? NB[ai] : LN[si - n_short][2];
                const int lda = n + 32, ldb = n + 16, ldc = na + 3;
                if (tb && n % 16) continue; /* tinyBLAS takes whole steps of 16 only */
                mu_f16 *A = malloc((size_t)lda * na * 2), *b16 = malloc((size_t)n * 2);
                float *B = malloc((size_t)ldb * nb * 4), *c0 = calloc((size_t)ldc * nb, 4),
                      *c1 = calloc((size_t)ldc * nb, 4);
                kc_seed(91000 + 97 * ni + 13 * ai + tb);
                for (int i = 0; i < lda * na; i++) A[i] = mu_f32_to_f16(kc_gauss());
                for (int i = 0; i < ldb * nb; i++) B[i] = mu_f16_to_f32(mu_f32_to_f16(kc_gauss() * 3.87f));
                ref->mm_f16(n, A, (size_t)lda, na, B, (size_t)ldb, nb, c0, (size_t)ldc, tb);
                k->mm_f16(n, A, (size_t)lda, na, B, (size_t)ldb, nb, c1, (size_t)ldc, tb);
                for (int j = 0; j < nb; j++) {
                    for (int l = 0; l < n; l++) b16[l] = mu_f32_to_f16(B[(size_t)j * ldb + l]);
                    for (int i = 0; i < na; i++) {
                        const float got = c1[(size_t)j * ldc + i], want = c0[(size_t)j * ldc + i];
                        const float single = tb ? ref->vec_dot_batch[MU_T_F16](n, A + (size_t)i * lda, b16)
                                                : ref->vec_dot[MU_T_F16](n, A + (size_t)i * lda, b16);
                        if (!kc_same_bits(got, want) || !kc_same_bits(want, single)) {
                            KC_LOG("%s: mm_f16 n=%d na=%d nb=%d tb=%d (%d,%d): %.9g vs ref %.9g vs dot %.9g\n",
                                   k->name, n, na, nb, tb, i, j, got, want, single);
                            fails++;
                            goto next;
                        }
                    }
                }
            next:
                free(A);
                free(b16);
                free(B);
                free(c0);
                free(c1);
            }
    /* signed zeros: an A row of -0 against positive B makes every product
     * -0; ggml's accumulators start at +0, so the dot is +0, not -0 */
    for (int n = 64; n <= 128; n += 64) {
        mu_f16 A[2 * 128];
        float B[8 * 128], c0[16], c1[16];
        for (int i = 0; i < 2 * n; i++) A[i] = i < n ? 0x8000 : mu_f32_to_f16(0.5f);
        for (int i = 0; i < 8 * n; i++) B[i] = 0.25f;
        for (int tb = 0; tb < 2; tb++) {
            ref->mm_f16(n, A, (size_t)n, 2, B, (size_t)n, 8, c0, 2, tb);
            k->mm_f16(n, A, (size_t)n, 2, B, (size_t)n, 8, c1, 2, tb);
            for (int i = 0; i < 16; i++)
                if (!kc_same_bits(c0[i], c1[i]) || (i % 2 == 0 && signbit(c0[i]))) {
                    KC_LOG("%s: mm_f16 signed zero n=%d tb=%d [%d]: %g vs ref %g\n", k->name, n, tb, i, c1[i], c0[i]);
                    fails++;
                    break;
                }
        }
    }
    return fails;
}

/* sumsq: bit-identical to the ref for 1 .. 70 rows (the SIMD tables' groups
 * of 32, 16, 8 and 4 rows and the rows left over), widths around their blocks of 8
 * elements and a model's 2048 and 4096, a row stride past the width, on
 * rows whose values span 2^-60 .. 2^20 (their double sums round, so an add
 * out of order shows: the check makes sure the data does that, by summing
 * one row backwards). */
static int check_sumsq(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    static const int NS[] = {1, 7, 8, 9, 64, 100, 128, 2048, 4099};
    static const int RS[] = {1, 3, 8, 13, 16, 32, 41, 57, 70};
    int fails = 0, orders = 0;
    for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++)
        for (size_t ri = 0; ri < sizeof RS / sizeof RS[0]; ri++) {
            const int n = NS[ni], rows = RS[ri];
            const size_t stride = (size_t)n + 5;
            float *x = malloc((size_t)rows * stride * sizeof *x);
            double *a = malloc((size_t)rows * sizeof *a), *b = malloc((size_t)rows * sizeof *b);
            kc_seed(94000 + 100 * ni + ri);
            for (size_t i = 0; i < (size_t)rows * stride; i++)
                x[i] = ldexpf(kc_gauss(), (int)(kc_u32() % 81) - 60);
            ref->sumsq(n, x, stride, rows, a);
            k->sumsq(n, x, stride, rows, b);
            if (memcmp(a, b, (size_t)rows * sizeof *a)) {
                KC_LOG("%s: sumsq n=%d rows=%d differs from ref\n", k->name, n, rows);
                fails++;
            }
            double back = 0;
            for (int i = n - 1; i >= 0; i--) back += (double)(x[i] * x[i]);
            orders += back != a[0];
            free(x);
            free(a);
            free(b);
        }
    if (orders < 10) {
        KC_LOG("%s: sumsq's data rounds the same in any order (%d rows of 81 do not): it cannot see the order\n",
               k->name, orders);
        fails++;
    }
    return fails;
}

/* softmax_f16 and swiglu: bit-identical to the ref over inputs that reach
 * ggml's expf special cases (masked -inf, results far below the smallest
 * normal, overflow), and the ref close to the textbook formulas. */
static int check_softmax_swiglu(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    static const int NS[] = {16, 32, 272, 2048, 4112};
    int fails = 0;
    for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++) {
        const int n = NS[ni];
        float *x0 = malloc((size_t)n * 4), *x1 = malloc((size_t)n * 4), *u = malloc((size_t)n * 4);
        kc_seed(92000 + ni);
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) {
            const int kind = (int)(kc_u32() % 8);
            x0[i] = kind == 0 ? -INFINITY : kind == 1 ? -90.f - 60.f * (float)kc_unif() : 4.f * kc_gauss();
            if (x0[i] > mx) mx = x0[i];
        }
        memcpy(x1, x0, (size_t)n * 4);
        double want_sum = 0;
        for (int i = 0; i < n; i++) want_sum += exp((double)x0[i] - mx);
        const float e0 = (float)(exp((double)x0[0] - mx) / want_sum);
        ref->softmax_f16(n, x0, mx);
        k->softmax_f16(n, x1, mx);
        double sum = 0;
        for (int i = 0; i < n; i++) sum += x0[i];
        if (memcmp(x0, x1, (size_t)n * 4) || fabs(sum - 1) > 1e-3 * (1 + n / 256.0) || fabsf(x0[0] - e0) > 1e-3f) {
            KC_LOG("%s: softmax_f16 n=%d differs from ref (or ref sum %.6f)\n", k->name, n, sum);
            fails++;
        }
        for (int i = 0; i < n; i++) {
            x0[i] = x1[i] = (float)(kc_unif() * 240 - 120) * (kc_u32() % 4 ? 0.05f : 1.f);
            u[i] = kc_gauss();
        }
        x0[0] = x1[0] = -INFINITY;
        x0[1] = x1[1] = 0.f;
        ref->swiglu(n, x0, u);
        k->swiglu(n, x1, u);
        if (memcmp(x0, x1, (size_t)n * 4)) {
            KC_LOG("%s: swiglu n=%d differs from ref\n", k->name, n);
            fails++;
        }
        free(x0);
        free(x1);
        free(u);
    }
    /* F16 rounding: every table as the scalar conversion, over normals,
     * subnormals, overflow, infinities and NaN */
    {
        const int n = 1000;
        float *x = malloc((size_t)n * 4), *r0 = malloc((size_t)n * 4), *r1 = malloc((size_t)n * 4);
        mu_f16 *h0 = malloc((size_t)n * 2), *h1 = malloc((size_t)n * 2);
        kc_seed(93000);
        for (int i = 0; i < n; i++) {
            const int kind = (int)(kc_u32() % 6);
            x[i] = kind == 0 ? kc_gauss() * 1e-6f : kind == 1 ? kc_gauss() * 7e4f : kind == 2 ? ldexpf(kc_gauss(), -20) : kc_gauss() * 100.f;
        }
        x[0] = INFINITY;
        x[1] = -INFINITY;
        x[2] = 65520.f;
        x[3] = 0x1p-25f;
        x[4] = -0.f;
        ref->to_f16(n, x, h0);
        k->to_f16(n, x, h1);
        ref->round_f16(n, x, r0);
        k->round_f16(n, x, r1);
        for (int i = 0; i < n; i++)
            if (h0[i] != mu_f32_to_f16(x[i]) || h1[i] != h0[i] || !kc_same_bits(r0[i], mu_f16_to_f32(h0[i])) ||
                !kc_same_bits(r1[i], r0[i])) {
                KC_LOG("%s: f16 rounding of %.9g: %04x / %04x, ref %04x\n", k->name, x[i], h1[i], h0[i],
                       mu_f32_to_f16(x[i]));
                fails++;
                break;
            }
        free(x);
        free(r0);
        free(r1);
        free(h0);
        free(h1);
    }
    /* the ref itself against double precision */
    float g[17], u1[17];
    for (int i = 0; i < 17; i++) {
        g[i] = (float)i * 0.75f - 6.f;
        u1[i] = 1.f;
    }
    ref->swiglu(17, g, u1);
    for (int i = 0; i < 17; i++) {
        const double x = (double)i * 0.75 - 6, want = x / (1 + exp(-x));
        if (fabs(g[i] - want) > 1e-6 * (1 + fabs(want))) {
            KC_LOG("ref swiglu(%g) = %.9g, want %.9g\n", x, g[i], want);
            fails++;
        }
    }
    return fails;
}

/* The prefill gemm at engine-like shapes, bit for bit: n = 256 .. 8192,
 * every n_t from 1 to 70 (all token-tile remainders and the Q4_K gemv tail),
 * row ranges that are whole, odd, or not multiples of 16, Y rows wider than
 * the slice; and the same for gemm_p from prepared rows where the table has
 * it. The ref answers are computed once per (token, row). */
static int check_gemm_wide(const mu_kern *k) {
    static const int LENS[] = {256, 2048, 6144, 8192};
    static const int RANGES[][2] = {{0, 40}, {3, 37}, {16, 32}, {5, 6}, {1, 34}, {8, 40}};
    enum { ROWS = 40, MAXT = 70, YS = ROWS + 5 };
    const mu_kern *rk = mu_kern_ref();
    int fails = 0;
    if (!strcmp(k->name, "ref")) return 0;
    for (int ti = 0; ti < KC_NWTYPES; ti++) {
        const uint32_t t = KC_WTYPES[ti], dt = mu_kern_dot_type(t);
        if (!k->gemm[t]) continue;
        for (size_t li = 0; li < sizeof LENS / sizeof LENS[0]; li++) {
            const int n = LENS[li];
            const size_t wrow = kc_row_bytes(t, n), arow = kc_row_bytes(dt, n);
            uint8_t *w = malloc(wrow * ROWS), *a = malloc(arow * MAXT);
            float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)MAXT * YS * sizeof(float));
            float *eb = malloc((size_t)MAXT * ROWS * sizeof(float)), *ed = malloc((size_t)MAXT * ROWS * sizeof(float));
            kc_seed((uint64_t)(70000 + 100 * ti + li));
            for (int r = 0; r < ROWS; r++) kc_fill_weights(t, w + r * wrow, n, r % 13 == 12);
            for (int tt = 0; tt < MAXT; tt++) {
                kc_fill_act(x, n, tt % 11 == 10 ? tt % KC_NKINDS : 0);
                k->quant[dt](x, a + tt * arow, n);
            }
            mu_vec_dot_fn rb = rk->vec_dot_batch[t] ? rk->vec_dot_batch[t] : rk->vec_dot[t];
            for (int tt = 0; tt < MAXT; tt++)
                for (int r = 0; r < ROWS; r++) {
                    eb[tt * ROWS + r] = rb(n, w + r * wrow, a + tt * arow);
                    ed[tt * ROWS + r] = rk->vec_dot[t](n, w + r * wrow, a + tt * arow);
                }
            /* a table's prepared activations (kern.h mu_prep_fn): every row
             * prepared, so rows past n_t hold data, as in the engine */
            uint8_t *pa = NULL;
            if (k->gemm_p[t] && k->prep[t]) {
                pa = malloc((size_t)(MAXT + 16) * n);
                memset(pa, 0xa5, (size_t)(MAXT + 16) * n);
                for (int tt = 0; tt < MAXT; tt++) k->prep[t](n, a + tt * arow, pa + (size_t)tt * n);
            }
            for (int pass = 0; pass < (pa ? 2 : 1); pass++)
            for (int nt = 1; nt <= MAXT; nt++) {
                const int r0 = RANGES[nt % 6][0], r1 = RANGES[nt % 6][1];
                for (int i = 0; i < MAXT * YS; i++) y[i] = -12345.f;
                if (pass)
                    k->gemm_p[t](n, w, wrow, r0, r1, a, arow, pa, nt, y, YS);
                else
                    k->gemm[t](n, w, wrow, r0, r1, a, arow, nt, y, YS);
                for (int tt = 0; tt < MAXT; tt++)
                    for (int r = 0; r < YS; r++) {
                        const float g = y[tt * YS + r];
                        if (tt >= nt || r < r0 || r >= r1) {
                            if (g != -12345.f) {
                                KC_LOG("%s: gemm %s n=%d n_t=%d wrote outside its tile at t=%d r=%d\n", k->name,
                                       kc_tname(t), n, nt, tt, r);
                                fails++;
                                goto next;
                            }
                            continue;
                        }
                        /* Q4_K: the last n_t % 4 rows of a matmul are llama.cpp's gemv */
                        const float e = (t == MU_T_Q4_K && tt >= (nt & ~3)) ? ed[tt * ROWS + r] : eb[tt * ROWS + r];
                        if (!kc_same_bits(g, e)) {
                            KC_LOG("%s: gemm%s %s n=%d n_t=%d rows [%d,%d) t=%d r=%d: %.9g vs ref %.9g\n", k->name,
                                   pass ? "_p" : "", kc_tname(t), n, nt, r0, r1, tt, r, g, e);
                            fails++;
                            goto next;
                        }
                    }
            next:;
            }
            free(pa);
            free(w);
            free(a);
            free(x);
            free(y);
            free(eb);
            free(ed);
        }
    }
    return fails;
}
/* BF16 at the bottom of the range: the ref follows VDPBF16PS, which reads
 * subnormal inputs as zero and flushes subnormal results, in vec_dot,
 * vec_dot_batch and the gemm. Every third element pairs a subnormal weight
 * with an activation near 2^100 (read as it is, the product would be
 * normal); the others pair values near 2^-63 (products and sums near the
 * smallest normal). */
static int check_bf16_tiny(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    enum { N = 256, ROWS = 8, NT = 4 };
    mu_bf16 w[ROWS * N], a[NT * N];
    float y[NT * ROWS];
    int fails = 0;
    kc_seed(93000);
    for (int i = 0; i < ROWS * N; i++) {
        const uint32_t m = kc_u32() % 128, sgn = (kc_u32() & 1) << 15;
        w[i] = (mu_bf16)(sgn | (i % N % 3 == 0 ? m : ((uint32_t)(127 - 63 + (int)(kc_u32() % 3)) << 7 | m)));
    }
    for (int i = 0; i < NT * N; i++) {
        const uint32_t m = kc_u32() % 128, sgn = (kc_u32() & 1) << 15;
        const int e = i % N % 3 == 0 ? 127 + 100 : 127 - 63 - (int)(kc_u32() % 2);
        a[i] = (mu_bf16)(sgn | (uint32_t)e << 7 | m);
    }
    if (k->gemm[MU_T_BF16]) k->gemm[MU_T_BF16](N, w, N * 2, 0, ROWS, a, N * 2, NT, y, ROWS);
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < ROWS; r++) {
            const float d = k->vec_dot[MU_T_BF16](N, w + r * N, a + t * N);
            const float dr = ref->vec_dot[MU_T_BF16](N, w + r * N, a + t * N);
            const float b = k->vec_dot_batch[MU_T_BF16](N, w + r * N, a + t * N);
            const float br = ref->vec_dot_batch[MU_T_BF16](N, w + r * N, a + t * N);
            if (!kc_same_bits(d, dr) || !kc_same_bits(b, br) ||
                (k->gemm[MU_T_BF16] && !kc_same_bits(y[t * ROWS + r], br))) {
                KC_LOG("%s: bf16 tiny t=%d r=%d: dot %g vs ref %g, batch %g vs ref %g, gemm %g\n", k->name, t, r, d,
                       dr, b, br, k->gemm[MU_T_BF16] ? y[t * ROWS + r] : 0.f);
                fails++;
            }
        }
    return fails;
}

/* Every table entry the ref has is filled in every table. */
static int check_complete(const mu_kern *k) {
    const mu_kern *ref = mu_kern_ref();
    int fails = 0;
    for (int t = 0; t < MU_T_COUNT; t++) {
        if ((ref->vec_dot[t] && !k->vec_dot[t]) || (ref->quant[t] && !k->quant[t]) ||
            (ref->dequant[t] && !k->dequant[t]) || (ref->vec_dot_batch[t] && !k->vec_dot_batch[t])) {
            KC_LOG("%s: entry for type %d missing\n", k->name, t);
            fails++;
        }
    }
    if (!k->mm_f16 || !k->softmax_f16 || !k->swiglu || !k->to_f16 || !k->round_f16) fails++;
    return fails;
}

#endif
