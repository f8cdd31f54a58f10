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
static void test_nvfp4_nonfinite(void **st) { (void)st; run_all(check_nvfp4_nonfinite); }
static void test_nvfp4_cancel(void **st) { (void)st; run_all(check_nvfp4_cancel); }
static void test_vec_dot(void **st) { (void)st; run_all(check_vec_dot); }
static void test_gemm(void **st) { (void)st; run_all(check_gemm); }
static void test_mm_f16(void **st) { (void)st; run_all(check_mm_f16); }
static void test_vec_dot2(void **st) { (void)st; run_all(check_vec_dot2); }
static void test_vec_dotn(void **st) { (void)st; run_all(check_vec_dotn); }
static void test_softmax_swiglu(void **st) { (void)st; run_all(check_softmax_swiglu); }
static void test_sumsq(void **st) { (void)st; run_all(check_sumsq); }

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

/* the right dots, but the activation rows' results swapped */
static void broken_dotn(int n, const void *w, size_t ws, int n_w, const void *a, size_t as, int n_a, float *out,
                        size_t os) {
    for (int r = 0; r < n_w; r++)
        for (int j = 0; j < n_a; j++)
            out[(size_t)j * os + (size_t)r] = mu_kern_ref()->vec_dot[MU_T_Q8_0](
                n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)(n_a - 1 - j) * as);
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
    bad.vec_dotn[MU_T_Q8_0] = broken_dotn;
    kc_quiet = 1;
    mu_kern bad_bf16 = *mu_kern_ref();
    bad_bf16.name = "unflushed-bf16";
    bad_bf16.vec_dot_batch[MU_T_BF16] = unflushed_bf16_dot;
    assert_true(check_bf16_tiny(&bad_bf16) > 0);
    assert_true(check_vec_dot(&bad) > 0);
    assert_true(check_quant(&bad) > 0);
    assert_true(check_vec_dot2(&bad) > 0);
    assert_true(check_vec_dotn(&bad) > 0);
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

/* NVFP4 against values decoded by hand from ggml's definition: UE4M3 scales
 * (bias 7, 0x7f read as 0, bit 7 ignored) held as half their value, E2M1
 * codes doubled; sub-block s takes the low nibbles of qs[8s..8s+7], then the
 * high ones. */
static void test_nvfp4_values(void **st) {
    (void)st;
    assert_true(mu_nvfp4_scale(0x38) == 0.5f);         /* 1.0 */
    assert_true(mu_nvfp4_scale(0x40) == 1.0f);         /* 2.0 */
    assert_true(mu_nvfp4_scale(0x7e) == 224.0f);       /* 448, the largest */
    assert_true(mu_nvfp4_scale(0x01) == 0x1p-10f);     /* 2^-9, the smallest subnormal */
    assert_true(mu_nvfp4_scale(0x07) == 7 * 0x1p-10f);
    assert_true(mu_nvfp4_scale(0x08) == 0x1p-7f);      /* 2^-6, the smallest normal */
    assert_true(mu_nvfp4_scale(0x7f) == 0.0f && mu_nvfp4_scale(0x00) == 0.0f);
    assert_true(mu_nvfp4_scale(0xb8) == 0.5f && mu_nvfp4_scale(0xff) == 240.0f && mu_nvfp4_scale(0x80) == 0.0f);
    const mu_kern *ref = mu_kern_ref();
    mu_block_nvfp4 b;
    memset(&b, 0, sizeof b);
    b.d[0] = 0x38, b.d[1] = 0x40, b.d[2] = 0x30, b.d[3] = 0x01; /* 1.0, 2.0, 0.5, 2^-9 */
    b.qs[0] = 0x1f;  /* value 0: -6.0 * 1.0; value 8: 0.5 * 1.0 */
    b.qs[7] = 0x5a;  /* value 7: -1.0; value 15: 3.0 */
    b.qs[8] = 0x07;  /* sub-block 1, value 0: 6.0 * 2.0 */
    b.qs[20] = 0xc3; /* sub-block 2, value 4: 1.5 * 0.5; value 12: -2.0 * 0.5 */
    b.qs[31] = 0x09; /* sub-block 3, value 7: -0.5 * 2^-9 */
    float y[64];
    ref->dequant[MU_T_NVFP4](&b, y, 64);
    float want[64] = {0};
    want[0] = -6.0f, want[8] = 0.5f, want[7] = -1.0f, want[15] = 3.0f, want[16] = 12.0f;
    want[32 + 4] = 0.75f, want[32 + 12] = -1.0f, want[48 + 7] = -0x1p-10f;
    for (int i = 0; i < 64; i++) assert_true(y[i] == want[i]);
    /* the dot against two Q8_0 blocks (d 1 and 0.5): all sums are exact */
    mu_block_q8_0 a[2];
    a[0].d = mu_f32_to_f16(1.0f), a[1].d = mu_f32_to_f16(0.5f);
    for (int j = 0; j < 32; j++) a[0].qs[j] = (int8_t)(j + 1), a[1].qs[j] = (int8_t)(-2 * j);
    double dot = 0;
    for (int i = 0; i < 64; i++) dot += (double)want[i] * (i < 32 ? a[0].qs[i] : 0.5 * a[1].qs[i - 32]);
    assert_true(ref->vec_dot[MU_T_NVFP4](64, &b, a) == (float)dot);
    /* an activation of -128 (a NaN's) against a negative code: x86's sign
     * trick makes |c| * -128, not c * -128 */
    a[0].qs[7] = -128;
    const float with_trick = (float)(dot - (double)want[7] * 8 + (double)want[7] * 128);
    assert_true(ref->vec_dot[MU_T_NVFP4](64, &b, a) == with_trick);
    assert_int_equal(mu_kern_dot_type(MU_T_NVFP4), MU_T_Q8_0);
}

/* The block-of-32 gemms (Q8_0, NVFP4) at the shapes the AMX tiles make
 * ragged: lengths of an odd number of blocks, weight ranges that start and
 * end inside a group of 16, activation counts around the tile size and the
 * AMX threshold (32); and activation code -128 (a NaN's), where NVFP4's
 * ref takes x86's sign trick and Q8_0's ref the plain product. Every table
 * with a gemm against the ref's vec_dot, bit for bit, except Q8_0 with
 * -128: there against the table's own vec_dot (the SIMD tables keep x86's
 * sign trick there, as llama.cpp does; garbage either way, but a table's
 * gemm and vec_dot must agree). */
static int check_gemm_q32(const mu_kern *k) {
    static const int NQ8[] = {32, 96, 224, 288, 2080}, NFP4[] = {64, 192, 320, 2112};
    static const int RANGES[][2] = {{0, 37}, {3, 36}, {15, 17}, {0, 1}, {16, 32}, {1, 31}};
    static const int NTS[] = {31, 32, 33, 47, 48, 49, 64, 70, 1, 2, 3, 4, 5, 9, 10, 11};
    enum { ROWS = 37, MAXT = 70, YS = ROWS + 3 };
    const mu_kern *rk = mu_kern_ref();
    int fails = 0;
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t t = ti ? MU_T_NVFP4 : MU_T_Q8_0;
        if (!k->gemm[t]) continue;
        const int *ns = ti ? NFP4 : NQ8, nn = ti ? 4 : 5;
        for (int li = 0; li < nn; li++)
            for (int m128 = 0; m128 < 2; m128++) {
                /* the oracle: the ref's vec_dot, or the table's own for Q8_0 with -128 */
                const mu_vec_dot_fn od = m128 && t == MU_T_Q8_0 ? k->vec_dot[t] : rk->vec_dot[t];
                const int n = ns[li];
                const size_t wrow = mu_type_row_bytes(t, n), arow = mu_type_row_bytes(MU_T_Q8_0, n);
                uint8_t *w = malloc(wrow * ROWS), *a = malloc(arow * MAXT);
                float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)MAXT * YS * sizeof(float));
                kc_seed((uint64_t)(91000 + 100 * ti + 10 * li + m128));
                for (int r = 0; r < ROWS; r++) kc_fill_weights(t, w + r * wrow, n, r % 7 == 6);
                for (int tt = 0; tt < MAXT; tt++) {
                    kc_fill_act(x, n, tt % KC_NKINDS);
                    k->quant[MU_T_Q8_0](x, a + tt * arow, n);
                    if (m128) /* a -128 in some rows, early and late in the row */
                        for (int i = tt % 3; i < n / MU_QK8_0; i += 5)
                            ((mu_block_q8_0 *)(a + tt * arow))[i].qs[(7 * i + tt) % MU_QK8_0] = -128;
                }
                for (size_t ni = 0; ni < sizeof NTS / sizeof NTS[0]; ni++) {
                    const int nt = NTS[ni], r0 = RANGES[ni % 6][0], r1 = RANGES[ni % 6][1];
                    for (int i = 0; i < MAXT * YS; i++) y[i] = -12345.f;
                    k->gemm[t](n, w, wrow, r0, r1, a, arow, nt, y, YS);
                    for (int tt = 0; tt < MAXT; tt++)
                        for (int r = 0; r < YS; r++) {
                            const float g = y[tt * YS + r];
                            const float e = tt < nt && r >= r0 && r < r1
                                                ? od(n, w + r * wrow, a + tt * arow)
                                                : -12345.f;
                            if (!kc_same_bits(g, e)) {
                                KC_LOG("%s: gemm %s n=%d m128=%d n_t=%d rows [%d,%d) t=%d r=%d: %.9g vs ref %.9g\n",
                                       k->name, kc_tname(t), n, m128, nt, r0, r1, tt, r, g, e);
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
            }
    }
    return fails;
}
static void test_gemm_q32(void **st) { (void)st; run_all(check_gemm_q32); }

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
        cmocka_unit_test(test_vec_dot),  cmocka_unit_test(test_gemm),           cmocka_unit_test(test_gemm_wide), cmocka_unit_test(test_gemm_q32),
        cmocka_unit_test(test_bf16_tiny),
        cmocka_unit_test(test_mm_f16),   cmocka_unit_test(test_vec_dot2),   cmocka_unit_test(test_vec_dotn),   cmocka_unit_test(test_softmax_swiglu), cmocka_unit_test(test_sumsq),
        cmocka_unit_test(test_quant_nonfinite), cmocka_unit_test(test_quant_nonfinite_values),
        cmocka_unit_test(test_nvfp4_nonfinite), cmocka_unit_test(test_nvfp4_cancel), cmocka_unit_test(test_nvfp4_values),
        cmocka_unit_test(test_select),   cmocka_unit_test(test_checks_catch_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
