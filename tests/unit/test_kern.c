/* test_kern.c: every kernel table this CPU can run (mu_kern_available)
 * against kern_ref.c: quantizers and dequantizers bit-identical, dots and
 * gemm tiles within the named tolerances of kern_checks.h, on seeded random
 * inputs at block-boundary lengths (1, 2, 8 and 26 blocks of 256) including
 * blocks with extreme scales and exact rounding ties. */
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
static void test_dequant(void **st) { (void)st; run_all(check_dequant); }
static void test_vec_dot(void **st) { (void)st; run_all(check_vec_dot); }
static void test_gemm(void **st) { (void)st; run_all(check_gemm); }
static void test_mm_f16(void **st) { (void)st; run_all(check_mm_f16); }
static void test_vec_dot2(void **st) { (void)st; run_all(check_vec_dot2); }
static void test_softmax_swiglu(void **st) { (void)st; run_all(check_softmax_swiglu); }

/* The prefill gemm at engine-like shapes, bit for bit: n = 256 .. 8192,
 * every n_t from 1 to 70 (all token-tile remainders and the Q4_K gemv tail),
 * row ranges that are whole, odd, or not multiples of 16, Y rows wider than
 * the slice. The ref answers are computed once per (token, row). */
static int check_gemm_wide(const mu_kern *k) {
    static const uint32_t TYPES[] = {MU_T_Q4_K, MU_T_Q6_K};
    static const int LENS[] = {256, 2048, 6144, 8192};
    static const int RANGES[][2] = {{0, 40}, {3, 37}, {16, 32}, {5, 6}, {1, 34}, {8, 40}};
    enum { ROWS = 40, MAXT = 70, YS = ROWS + 5 };
    const mu_kern *rk = mu_kern_ref();
    int fails = 0;
    if (!strcmp(k->name, "ref")) return 0;
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const uint32_t t = TYPES[ti], dt = mu_kern_dot_type(t);
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
            for (int nt = 1; nt <= MAXT; nt++) {
                const int r0 = RANGES[nt % 6][0], r1 = RANGES[nt % 6][1];
                for (int i = 0; i < MAXT * YS; i++) y[i] = -12345.f;
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
                            KC_LOG("%s: gemm %s n=%d n_t=%d rows [%d,%d) t=%d r=%d: %.9g vs ref %.9g\n", k->name,
                                   kc_tname(t), n, nt, r0, r1, tt, r, g, e);
                            fails++;
                            goto next;
                        }
                    }
            next:;
            }
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
static void test_gemm_wide(void **st) { (void)st; run_all(check_gemm_wide); }

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

static void test_checks_catch_errors(void **st) {
    (void)st;
    mu_kern bad = *mu_kern_ref();
    bad.name = "broken";
    bad.vec_dot[MU_T_Q4_K] = broken_dot;
    bad.quant[MU_T_Q8_K] = broken_quant;
    bad.vec_dot2[MU_T_Q6_K] = broken_dot2;
    kc_quiet = 1;
    assert_true(check_vec_dot(&bad) > 0);
    assert_true(check_quant(&bad) > 0);
    assert_true(check_vec_dot2(&bad) > 0);
    kc_quiet = 0;
}

static void test_select(void **st) {
    (void)st;
    assert_non_null(mu_kern_select("ref"));
    assert_string_equal(mu_kern_select("ref")->name, "ref");
    assert_null(mu_kern_select("nonsense"));
    for (int i = 0; i < n_tables; i++) assert_ptr_equal(mu_kern_select(tables[i]->name), tables[i]);
}

/* The dispatch declares the ISA fill functions weak, which does not pull
 * their objects out of libmuser.a; a strong reference here does. */
#if defined(__x86_64__)
void (*const force_link[])(mu_kern *) = {mu_kern_fill_avx2, mu_kern_fill_avx512};
#endif

int main(void) {
    n_tables = mu_kern_available(tables, 8);
    fprintf(stderr, "test_kern: tables:");
    for (int i = 0; i < n_tables; i++) fprintf(stderr, " %s", tables[i]->name);
    fprintf(stderr, "\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_complete), cmocka_unit_test(test_quant),  cmocka_unit_test(test_dequant),
        cmocka_unit_test(test_vec_dot),  cmocka_unit_test(test_gemm),           cmocka_unit_test(test_gemm_wide),
        cmocka_unit_test(test_mm_f16),   cmocka_unit_test(test_vec_dot2),   cmocka_unit_test(test_softmax_swiglu),
        cmocka_unit_test(test_select),   cmocka_unit_test(test_checks_catch_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
