/* test_quantize.c: quantize -> dequantize round trips for every type the
 * generator writes, checked with the lead's reference dequantizers (which
 * read ggml's block layouts), so a layout or packing mistake shows up as a
 * large error. Named per-type RMS bounds, relative to the input's RMS. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../src/kern/kern.h"
#include "../src/kern/quant.h"
#include "../src/synth/quantize.h"

/* Relative RMS error bounds on Gaussian data (measured values are about
 * 60% of these, NVFP4's about 75%; see docs/gen.md). */
typedef struct {
    uint32_t type;
    double careful, fast;
} bound;
static const bound BOUNDS[] = {
    {MU_T_F32, 0, 0},          {MU_T_F16, 0.0005, 0.0005}, {MU_T_BF16, 0.004, 0.004},
    {MU_T_Q8_0, 0.008, 0.008}, {MU_T_Q6_K, 0.03, 0.035},   {MU_T_Q5_K, 0.05, 0.065},
    {MU_T_Q4_K, 0.10, 0.13},      {MU_T_NVFP4, 0.13, 0.13},
};
#define N_BOUNDS (sizeof BOUNDS / sizeof BOUNDS[0])

static uint64_t rng_state = 42;
static double uniform01(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) {
    double u = uniform01(), v = uniform01();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static void dequant(uint32_t type, const void *q, float *y, int n) {
    switch (type) {
    case MU_T_Q4_K: mu_dequant_q4_K_ref(q, y, n); return;
    case MU_T_Q5_K: mu_dequant_q5_K_ref(q, y, n); return;
    case MU_T_Q6_K: mu_dequant_q6_K_ref(q, y, n); return;
    case MU_T_Q8_0: mu_dequant_q8_0_ref(q, y, n); return;
    default: mu_kern_ref()->dequant[type](q, y, n); return;
    }
}

/* Relative RMS error of one round trip; also checks the last byte of the
 * row is written (the buffer is poisoned) and nothing past it. */
static double round_trip(uint32_t type, const float *x, int n, int fast) {
    size_t bytes = mu_type_row_bytes(type, n);
    assert_true(bytes > 0);
    uint8_t *q = malloc(bytes + 16);
    float *y = malloc((size_t)n * sizeof(float));
    memset(q, 0xA5, bytes + 16);
    if (fast) mu_quantize_row_fast(type, x, q, n);
    else mu_quantize_row(type, x, q, n);
    for (int i = 0; i < 16; i++) assert_int_equal(q[bytes + i], 0xA5);
    dequant(type, q, y, n);
    double se = 0, sx = 0;
    for (int i = 0; i < n; i++) {
        assert_true(isfinite(y[i]));
        se += (double)(y[i] - x[i]) * (y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    free(q);
    free(y);
    return sx > 0 ? sqrt(se / sx) : sqrt(se);
}

static void test_gaussian_bounds(void **state) {
    (void)state;
    const int n = 256 * 64;
    float *x = malloc(n * sizeof(float));
    for (int s = 0; s < 3; s++) {
        float scale = s == 0 ? 1.0f : s == 1 ? 0.02f : 30.0f;
        for (int i = 0; i < n; i++) x[i] = gauss() * scale;
        for (size_t t = 0; t < N_BOUNDS; t++) {
            for (int fast = 0; fast < 2; fast++) {
                double e = round_trip(BOUNDS[t].type, x, n, fast);
                double lim = fast ? BOUNDS[t].fast : BOUNDS[t].careful;
                if (e > lim)
                    fail_msg("%s%s scale %g: rel rms %g > %g", mu_type_get(BOUNDS[t].type)->name,
                             fast ? " fast" : "", scale, e, lim);
            }
        }
    }
    free(x);
}

/* The careful path must be at least as good as the fast one overall. */
static void test_careful_beats_fast(void **state) {
    (void)state;
    const int n = 256 * 64;
    float *x = malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) x[i] = gauss();
    uint32_t kt[] = {MU_T_Q4_K, MU_T_Q5_K, MU_T_Q6_K};
    for (int t = 0; t < 3; t++) assert_true(round_trip(kt[t], x, n, 0) <= round_trip(kt[t], x, n, 1));
    free(x);
}

/* Zero rows, constant rows, all-positive rows, one outlier per block. */
static void test_special_rows(void **state) {
    (void)state;
    const int n = 512;
    float x[512];
    for (size_t t = 0; t < N_BOUNDS; t++) {
        uint32_t type = BOUNDS[t].type;
        memset(x, 0, sizeof x);
        assert_true(round_trip(type, x, n, 0) == 0);
        for (int i = 0; i < n; i++) x[i] = 0.75f;
        assert_true(round_trip(type, x, n, 0) < 0.02);
        for (int i = 0; i < n; i++) x[i] = 1.0f + (float)uniform01();
        /* NVFP4: values in [1/3, 1] of the block max fall between E2M1's 2, 3, 4, 6 */
        assert_true(round_trip(type, x, n, 0) < (type == MU_T_NVFP4 ? 0.12 : 0.05));
        for (int i = 0; i < n; i++) x[i] = (i % 256 == 7) ? 50.0f : gauss() * 0.1f;
        double e = round_trip(type, x, n, 0);
        if (e > 0.05) fail_msg("%s outlier rows: rel rms %g", mu_type_get(type)->name, e);
    }
}

/* F16/BF16 must be exactly the kernel table's conversion. */
static void test_half_exact(void **state) {
    (void)state;
    float x[64];
    mu_f16 h[64];
    mu_bf16 b[64];
    for (int i = 0; i < 64; i++) x[i] = gauss() * (float)pow(10, (i % 9) - 4);
    mu_quantize_row(MU_T_F16, x, h, 64);
    mu_quantize_row(MU_T_BF16, x, b, 64);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(h[i], mu_f32_to_f16(x[i]));
        assert_int_equal(b[i], mu_f32_to_bf16(x[i]));
    }
}

/* Same input, same bytes; K-quant sub-block levels are within range. */
static void test_deterministic(void **state) {
    (void)state;
    const int n = 1024;
    float x[1024];
    for (int i = 0; i < n; i++) x[i] = gauss();
    uint32_t types[] = {MU_T_Q8_0, MU_T_Q4_K, MU_T_Q5_K, MU_T_Q6_K};
    for (int t = 0; t < 4; t++) {
        size_t bytes = mu_type_row_bytes(types[t], n);
        uint8_t *a = malloc(bytes), *b = malloc(bytes);
        mu_quantize_row(types[t], x, a, n);
        mu_quantize_row(types[t], x, b, n);
        assert_memory_equal(a, b, bytes);
        free(a);
        free(b);
    }
}

/* NVFP4 is llama.cpp's quantize_row_nvfp4_ref byte for byte (checked
 * against its library when this was written); these are its rules by hand:
 * scale byte ue4m3(amax / 6) with the mantissa rounded half up on one bit,
 * then each value's first nearest code. */
static void test_nvfp4_bytes(void **state) {
    (void)state;
    static const struct {
        float amax;
        uint8_t d;
    } SC[] = {
        {6.0f, 0x38},                  /* 1.0 */
        {6.375f, 0x39},                /* 1.0625: a tie, rounded up to 1.125 (not to even) */
        {6.3f, 0x38},                  /* 1.05: down */
        {11.625f, 0x40},               /* 1.9375: the carry makes 2.0 */
        {3000.0f, 0x7e},               /* past 448: 448 */
        {2688.0f, 0x7e},               /* 448 exactly */
        {18 * 0x1p-9f, 0x03},          /* 3 * 2^-9: subnormal */
        {6 * 1.5f * 0x1p-6f, 0x0c},    /* 1.5 * 2^-6: the smallest exponent */
        {6 * 0x1p-11f, 0x00},          /* below half the smallest subnormal: 0 */
        {0.0f, 0x00},
    };
    float x[64];
    mu_block_nvfp4 b;
    for (size_t k = 0; k < sizeof SC / sizeof SC[0]; k++) {
        memset(x, 0, sizeof x);
        x[16 + 3] = -SC[k].amax; /* sub-block 1 */
        mu_quantize_row(MU_T_NVFP4, x, &b, 64);
        assert_int_equal(b.d[1], SC[k].d);
        assert_int_equal(b.d[0], 0);
        assert_int_equal(b.qs[8 + 3] & 0xf, SC[k].d ? 15 : 0); /* -12 * (scale / 2): -amax's code */
    }
    /* codes against scale 1.0 (half 0.5): the first nearest wins ties */
    const float v[16] = {6, 5, -5, 0.25f, -0.25f, -0.0f, 2.5f, 1.75f, 0.7f, -6, 3.5f, 100, -100, 0.5f, 1.25f, -2.9f};
    const int want[16] = {7, 6, 14, 0, 0, 0, 4, 3, 1, 15, 5, 7, 15, 1, 2, 13};
    memcpy(x, v, sizeof v);
    x[11] = 6, x[12] = -6; /* keep amax 6 */
    mu_quantize_row(MU_T_NVFP4, x, &b, 64);
    assert_int_equal(b.d[0], 0x38);
    for (int j = 0; j < 16; j++) {
        const int code = j < 8 ? b.qs[j] & 0xf : b.qs[j - 8] >> 4;
        if (j == 11 || j == 12) continue;
        if (code != want[j]) fail_msg("value %d (%g): code %d, want %d", j, v[j], code, want[j]);
    }
}

static void test_supported(void **state) {
    (void)state;
    assert_true(mu_quantize_supported(MU_T_Q4_K));
    assert_true(mu_quantize_supported(MU_T_NVFP4));
    assert_false(mu_quantize_supported(MU_T_Q4_0));
    assert_false(mu_quantize_supported(MU_T_Q8_K));
    assert_false(mu_quantize_supported(999));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gaussian_bounds), cmocka_unit_test(test_careful_beats_fast),
        cmocka_unit_test(test_special_rows),    cmocka_unit_test(test_half_exact),
        cmocka_unit_test(test_deterministic),   cmocka_unit_test(test_supported),
        cmocka_unit_test(test_nvfp4_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
