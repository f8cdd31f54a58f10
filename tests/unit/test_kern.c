/* test_kern.c: every kernel table this CPU can run (mu_kern_available)
 * against kern_ref.c, bit for bit (quantizers, dequantizers, dots, gemm
 * tiles, attention pieces: kern_checks.h), on seeded random inputs at
 * block-boundary lengths (1, 2, 8 and 26 blocks of 256) including blocks
 * with extreme scales and exact rounding ties. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kern_checks.h"

static const mu_kern *tables[8];
static int n_tables;

static void run_all(int (*check)(const mu_kern *)) {
    for (int i = 0; i < n_tables; i++) {
        const int f = check(tables[i]);
        if (f) fail_msg("table %s: %d failures (see stderr)", tables[i]->name, f);
    }
}

static void test_complete(void **st) { (void)st; run_all(check_complete); }
static void test_quant(void **st) { (void)st; run_all(check_quant); }
static void test_quant_nonfinite(void **st) { (void)st; run_all(check_quant_nonfinite); }
static void test_dequant(void **st) { (void)st; run_all(check_dequant); }
static void test_vec_dot(void **st) { (void)st; run_all(check_vec_dot); }
static void test_gemm(void **st) { (void)st; run_all(check_gemm); }
static void test_mm_f16(void **st) { (void)st; run_all(check_mm_f16); }
static void test_vec_dot2(void **st) { (void)st; run_all(check_vec_dot2); }
static void test_softmax_swiglu(void **st) { (void)st; run_all(check_softmax_swiglu); }

static void test_gemm_wide(void **st) { (void)st; run_all(check_gemm_wide); }
static void test_bf16_tiny(void **st) { (void)st; run_all(check_bf16_tiny); }

/* The checks must be able to fail: a deliberately broken table is caught. */
static float broken_dot(int n, const void *w, const void *a) { return mu_vec_dot_q4_K_ref(n, w, a) * 1.0001f + 1e-3f; }
static void broken_quant(const float *x, void *y, int n) {
    mu_quant_q8_K_ref(x, y, n);
    ((mu_block_q8_K *)y)[0].qs[17] ^= 1;
}
/* swaps the two results: right numbers, wrong rows */
static void broken_dot2(int n, const void *w0, const void *w1, const void *a, float out[2]) {
    out[1] = mu_vec_dot_q6_K_ref(n, w0, a);
    out[0] = mu_vec_dot_q6_K_ref(n, w1, a);
}

/* a BF16 dot in plain float arithmetic: no flushing of subnormals */
static float unflushed_bf16_dot(int n, const void *w, const void *a) {
    const mu_bf16 *x = w, *y = a;
    float s = 0;
    for (int i = 0; i < n; i++) s += mu_bf16_to_f32(x[i]) * mu_bf16_to_f32(y[i]);
    return s;
}

static void test_checks_catch_errors(void **st) {
    (void)st;
    mu_kern bad = *mu_kern_ref();
    bad.name = "broken";
    bad.vec_dot[MU_T_Q4_K] = broken_dot;
    bad.quant[MU_T_Q8_K] = broken_quant;
    bad.vec_dot2[MU_T_Q6_K] = broken_dot2;
    kc_quiet = 1;
    mu_kern bad_bf16 = *mu_kern_ref();
    bad_bf16.name = "unflushed-bf16";
    bad_bf16.vec_dot_batch[MU_T_BF16] = unflushed_bf16_dot;
    assert_true(check_bf16_tiny(&bad_bf16) > 0);
    assert_true(check_vec_dot(&bad) > 0);
    assert_true(check_quant(&bad) > 0);
    assert_true(check_vec_dot2(&bad) > 0);
    kc_quiet = 0;
}

/* The ref's defined results for non-finite activations
 * (docs/llamacpp-numerics.md "Non-finite activations"). */
static void test_quant_nonfinite_values(void **st) {
    (void)st;
    const mu_kern *ref = mu_kern_ref();
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 7) - 3.f;
    /* Q8_0, +inf in the block: scale f16(inf), id 0: finite -> 0, inf -> -128 */
    mu_block_q8_0 b0[8];
    x[5] = INFINITY;
    x[40] = NAN; /* second block: NaN ignored by amax (3), NaN * id -> -128 */
    ref->quant[MU_T_Q8_0](x, b0, 256);
    assert_int_equal(b0[0].d, 0x7c00);
    assert_int_equal(b0[0].qs[5], -128);
    assert_int_equal(b0[0].qs[4], 0);
    assert_int_equal(b0[1].d, mu_f32_to_f16(3.f / 127.f));
    assert_int_equal(b0[1].qs[8], -128);
    assert_int_equal(b0[1].qs[9], 127 * ((float)(41 % 7) - 3.f) / 3);
    /* Q8_K (nearest_int of llama.cpp): NaN -> 0, max inf -> iscale -0, d -inf */
    mu_block_q8_K bk;
    ref->quant[MU_T_Q8_K](x, &bk, 256);
    assert_true(isinf(bk.d) && bk.d < 0);
    for (int i = 0; i < 256; i++) assert_int_equal(bk.qs[i], 0);
    x[5] = 1.f;
    ref->quant[MU_T_Q8_K](x, &bk, 256); /* max -3 (x[0]): iscale 127/3 */
    assert_int_equal(bk.qs[40], 0);
    assert_int_equal(bk.qs[6], 127);
    /* every value NaN: amax 0, an all-zero block */
    for (int i = 0; i < 256; i++) x[i] = NAN;
    ref->quant[MU_T_Q8_K](x, &bk, 256);
    assert_true(bk.d == 0.f && bk.qs[0] == 0 && bk.bsums[0] == 0);
}

static void test_select(void **st) {
    (void)st;
    assert_non_null(mu_kern_select("ref"));
    assert_string_equal(mu_kern_select("ref")->name, "ref");
    assert_null(mu_kern_select("nonsense"));
    for (int i = 0; i < n_tables; i++) assert_ptr_equal(mu_kern_select(tables[i]->name), tables[i]);
}

int main(void) {
    n_tables = mu_kern_available(tables, 8);
    fprintf(stderr, "test_kern: tables:");
    for (int i = 0; i < n_tables; i++) fprintf(stderr, " %s", tables[i]->name);
    fprintf(stderr, "\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_complete), cmocka_unit_test(test_quant),  cmocka_unit_test(test_dequant),
        cmocka_unit_test(test_vec_dot),  cmocka_unit_test(test_gemm),           cmocka_unit_test(test_gemm_wide), cmocka_unit_test(test_bf16_tiny),
        cmocka_unit_test(test_mm_f16),   cmocka_unit_test(test_vec_dot2),   cmocka_unit_test(test_softmax_swiglu),
        cmocka_unit_test(test_quant_nonfinite), cmocka_unit_test(test_quant_nonfinite_values),
        cmocka_unit_test(test_select),   cmocka_unit_test(test_checks_catch_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
