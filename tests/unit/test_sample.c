/* test_sample.c: every stage of the sampler chain (src/engine/sample*.c)
 * on small hand-computed cases: llama.cpp's generator (std::mt19937 and
 * libstdc++'s uniform reals and discrete distribution), logit bias,
 * penalties and their window, DRY (repeat lengths, restart sequences,
 * single-token breakers), top-n-sigma, typical-p, XTC, min_keep, dynamic
 * temperature, mirostat 1 and 2, the seeded draw, and parameter checks;
 * mu_sampler_sample_best: the given best stands in for the argmax of plain
 * greedy only, every other chain ignores it.
 * Stages that truncate are checked by the set of tokens many seeded draws
 * can reach (deterministic: the generator is seeded). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/engine/sample_int.h"

static mu_sample_params plain(float temp) {
    /* no truncation: every later field zero (off) */
    return (mu_sample_params){.temp = temp, .top_k = 0, .top_p = 1, .min_p = 0, .seed = 42};
}

static mu_sampler *mk(const mu_sample_params *p, int nv) {
    mu_err err = {0};
    mu_sampler *s = NULL;
    assert_int_equal(mu_sampler_new(p, nv, &s, &err), 0);
    return s;
}

/* Which tokens 400 seeded draws reach. */
static unsigned reach(mu_sampler *s, const float *l) {
    unsigned m = 0;
    for (int i = 0; i < 400; i++) {
        int32_t t = mu_sampler_sample(s, l);
        assert_true(t >= 0 && t < 32);
        m |= 1u << t;
    }
    return m;
}

static void logs(float *l, const float *p, int n) {
    for (int i = 0; i < n; i++) l[i] = logf(p[i]);
}

static void test_generator(void **state) {
    (void)state;
    /* the C++ standard: the 10000th output of a default-seeded mt19937 */
    mu_mt19937 m;
    mu_mt_seed(&m, 5489);
    for (int i = 0; i < 9999; i++) mu_mt_next(&m);
    assert_true(mu_mt_next(&m) == 4123659995u);
    /* libstdc++'s uniform_real_distribution<double>, then <float>, seed 42 */
    mu_mt_seed(&m, 42);
    assert_true(mu_mt_double(&m) == 0.79654298428784598);
    assert_true(mu_mt_double(&m) == 0.18343478789336848);
    assert_true(mu_mt_double(&m) == 0.77969099761266125);
    assert_true(mu_mt_float(&m) == 0.598658502f);
    assert_true(mu_mt_float(&m) == 0.596850157f);
}

static void test_dist_seeded(void **state) {
    (void)state;
    /* four equal logits, no truncation: the array stays in index order and
     * the draw is the first i with (i + 1) >= 4 u, u the uniform doubles of
     * seed 42 above: 0.797 -> 3, 0.183 -> 0, 0.780 -> 3 */
    float l[4] = {0, 0, 0, 0};
    mu_sample_params p = plain(1);
    mu_sampler *s = mk(&p, 4);
    assert_int_equal(mu_sampler_sample(s, l), 3);
    assert_int_equal(mu_sampler_sample(s, l), 0);
    assert_int_equal(mu_sampler_sample(s, l), 3);
    mu_sampler_free(s);
}

static void test_logit_bias(void **state) {
    (void)state;
    const mu_logit_bias b[] = {{0, 10}, {0, 0.5f}, {99, 100}, {3, -INFINITY}, {-1, 5}};
    mu_sample_params p = plain(0);
    p.logit_bias = b;
    p.n_logit_bias = 5;
    mu_sampler *s = mk(&p, 4);
    float l[4] = {0, 1, 2, 3};
    mu_sampler_adjust(s, l);
    assert_true(l[0] == 10.5f && l[1] == 1 && l[2] == 2 && l[3] == -INFINITY);
    float r[4] = {0, 1, 2, 3};
    assert_int_equal(mu_sampler_sample(s, r), 0);
    assert_true(r[0] == 0); /* sample() leaves the caller's logits alone */
    mu_sampler_free(s);
}

static void test_penalties(void **state) {
    (void)state;
    mu_sample_params p = plain(0);
    p.penalty_last_n = 64;
    p.penalty_repeat = 2;
    p.penalty_freq = 0.5f;
    p.penalty_present = 0.25f;
    mu_sampler *s = mk(&p, 4);
    mu_sampler_accept(s, 3);
    mu_sampler_accept(s, 2);
    mu_sampler_accept(s, 3);
    mu_sampler_accept(s, 77); /* outside the vocabulary: ignored */
    float l[4] = {2, 0.5f, -1, 3};
    mu_sampler_adjust(s, l);
    /* 3 (twice): 3 / 2 - (2 * 0.5 + 0.25); 2 (once, negative): -1 * 2 - 0.75 */
    assert_true(l[0] == 2 && l[1] == 0.5f && l[2] == -2.75f && l[3] == 0.25f);
    float g[4] = {2, 0.5f, -1, 3};
    assert_int_equal(mu_sampler_sample(s, g), 0);
    mu_sampler_free(s);
    /* a window of 2 over 3, 2, 3 counts 2 and 3 once */
    p.penalty_last_n = 2;
    s = mk(&p, 4);
    mu_sampler_accept(s, 3);
    mu_sampler_accept(s, 2);
    mu_sampler_accept(s, 3);
    float w[4] = {2, 0.5f, -1, 3};
    mu_sampler_adjust(s, w);
    assert_true(w[2] == -2.75f && w[3] == 0.75f);
    mu_sampler_accept(s, 1); /* window now 3, 1: token 2 leaves it */
    float w2[4] = {2, 0.5f, -1, 3};
    mu_sampler_adjust(s, w2);
    assert_true(w2[1] == 0.25f - 0.75f && w2[2] == -1 && w2[3] == 0.75f);
    mu_sampler_free(s);
    /* -1: every accepted token; repeat 0 means off (1) */
    p.penalty_last_n = -1;
    p.penalty_repeat = 0;
    p.penalty_present = 0;
    s = mk(&p, 4);
    for (int i = 0; i < 300; i++) mu_sampler_accept(s, i < 200 ? 0 : 1);
    float a[4] = {0, 0, 0, 0};
    mu_sampler_adjust(s, a);
    assert_true(a[0] == -100.0f && a[1] == -50.0f && a[2] == 0);
    mu_sampler_free(s);
    /* last_n 0: off, nothing kept */
    p.penalty_last_n = 0;
    s = mk(&p, 4);
    mu_sampler_accept(s, 0);
    float z[4] = {1, 1, 1, 1};
    mu_sampler_adjust(s, z);
    assert_true(z[0] == 1);
    mu_sampler_free(s);
}

/* DRY over a history, breakers given as token sequences. */
static void dry_case(const int32_t *hist, int n, float mult, float base, int allowed, int last_n,
                     const int32_t *brk, int n_brk, float *l) {
    mu_sample_params p = plain(0);
    p.dry_multiplier = mult;
    p.dry_base = base;
    p.dry_allowed_length = allowed;
    p.dry_penalty_last_n = last_n;
    static const char *const none[1] = {NULL};
    p.dry_breakers = none;
    p.n_dry_breakers = 0;
    mu_sampler *s = mk(&p, 5);
    mu_err err = {0};
    const int32_t *seqs[1] = {brk};
    int lens[1] = {n_brk};
    assert_int_equal(mu_sampler_set_breaker_tokens(s, seqs, lens, brk ? 1 : 0, &err), 0);
    for (int i = 0; i < n; i++) mu_sampler_accept(s, hist[i]);
    mu_sampler_adjust(s, l);
    mu_sampler_free(s);
}

static void test_dry(void **state) {
    (void)state;
    /* 0 1 2 0 1: the suffix "0 1" repeats once, followed by 2: length 2,
     * penalty multiplier * base^(2 - 2) */
    const int32_t h1[] = {0, 1, 2, 0, 1};
    float l[5] = {0, 0, 0, 0, 0};
    dry_case(h1, 5, 1, 1.1f, 2, 5, NULL, 0, l);
    assert_true(l[0] == 0 && l[1] == 0 && l[2] == -1 && l[3] == 0);
    float l2[5] = {0, 0, 0, 0, 0};
    dry_case(h1, 5, 2, 1.1f, 2, 5, NULL, 0, l2);
    assert_true(l2[2] == -2);
    /* too short a history for the window (n <= allowed): nothing */
    float l3[5] = {0, 0, 0, 0, 0};
    dry_case(h1, 2, 1, 1.1f, 2, 5, NULL, 0, l3);
    assert_true(l3[2] == 0);
    /* 0 1 2 0 1 2 0 1: the longest repeat before a 2 is "0 1 2 0 1"
     * (length 5): 1 * 2^(5 - 2) = 8 */
    const int32_t h2[] = {0, 1, 2, 0, 1, 2, 0, 1};
    float l4[5] = {0, 0, 0, 0, 0};
    dry_case(h2, 8, 1, 2, 2, 8, NULL, 0, l4);
    assert_true(l4[2] == -8 && l4[0] == 0 && l4[1] == 0);
    /* a window of 4 sees 1 2 0 1: the suffix "1" repeats once, before 2
     * (length 1 < 2): nothing */
    float l5[5] = {0, 0, 0, 0, 0};
    dry_case(h2, 8, 1, 2, 2, 4, NULL, 0, l5);
    assert_true(l5[2] == 0);
    /* a one-token breaker (3) stops the repeat "0 1" from reaching it */
    const int32_t h3[] = {0, 1, 3, 4, 0, 1};
    const int32_t b3[] = {3};
    float l6[5] = {0, 0, 0, 0, 0};
    dry_case(h3, 6, 1, 1.1f, 2, 6, b3, 1, l6);
    assert_true(l6[3] == 0 && l6[4] == 0);
    /* without it, 3 is penalised */
    float l7[5] = {0, 0, 0, 0, 0};
    dry_case(h3, 6, 1, 1.1f, 2, 6, NULL, 0, l7);
    assert_true(l7[3] == -1);
    /* a two-token restart sequence "2 0" two tokens back limits the
     * repeat length to 1 < 2: nothing */
    const int32_t b4[] = {2, 0};
    float l8[5] = {0, 0, 0, 0, 0};
    dry_case(h2, 8, 1, 2, 2, 8, b4, 2, l8);
    assert_true(l8[2] == 0);
    /* allowed length 4 > the repeat: nothing */
    const int32_t h5[] = {0, 1, 2, 3, 4, 0, 1};
    float l9[5] = {0, 0, 0, 0, 0};
    dry_case(h5, 7, 1, 1.1f, 4, 7, NULL, 0, l9);
    for (int i = 0; i < 5; i++) assert_true(l9[i] == 0);
    /* DRY needs the vocabulary for its default breakers */
    mu_sample_params p = plain(0);
    p.dry_multiplier = 1;
    p.dry_base = 1.75f;
    p.dry_allowed_length = 2;
    p.dry_penalty_last_n = 64;
    mu_err err = {0};
    mu_sampler *s = NULL;
    assert_int_equal(mu_sampler_new(&p, 5, &s, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "DRY"));
    assert_null(s);
}

static void test_top_n_sigma(void **state) {
    (void)state;
    /* logits 0 1 2 3: mean 1.5, sd sqrt(1.25) = 1.118; n = 1 keeps
     * logits >= 3 - 1.118: tokens 2 and 3 */
    float l[4] = {0, 1, 2, 3};
    mu_sample_params p = plain(1);
    p.top_n_sigma = 1;
    mu_sampler *s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0xCu);
    mu_sampler_free(s);
    p.top_n_sigma = 3; /* keeps everything */
    s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0xFu);
    mu_sampler_free(s);
}

static void test_typical(void **state) {
    (void)state;
    /* p = .4 .2 .2 .2: entropy 1.332; |-log p - H| = .416 for the .4 and
     * .277 for the .2s: the three .2s come first, and reach .6 > .5 */
    const float pr[4] = {0.4f, 0.2f, 0.2f, 0.2f};
    float l[4];
    logs(l, pr, 4);
    mu_sample_params p = plain(1);
    p.typical_p = 0.5f;
    mu_sampler *s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0xEu);
    mu_sampler_free(s);
    /* .97 .01 .01 .01: the .97 is the typical one */
    const float pr2[4] = {0.97f, 0.01f, 0.01f, 0.01f};
    logs(l, pr2, 4);
    s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0x1u);
    mu_sampler_free(s);
    /* greedy still runs typical: the best token is not among the kept */
    logs(l, pr, 4);
    p.temp = 0;
    s = mk(&p, 4);
    int32_t t = mu_sampler_sample(s, l);
    assert_true(t >= 1 && t <= 3);
    mu_sampler_free(s);
}

static void test_xtc(void **state) {
    (void)state;
    /* p = .4 .3 .2 .1, probability 1: every token at or above the
     * threshold but the least likely of them goes */
    const float pr[4] = {0.4f, 0.3f, 0.2f, 0.1f};
    float l[4];
    logs(l, pr, 4);
    mu_sample_params p = plain(1);
    p.xtc_probability = 1;
    p.xtc_threshold = 0.19f;
    mu_sampler *s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0xCu);
    mu_sampler_free(s);
    p.temp = 0; /* greedy after XTC: the best of what is left */
    s = mk(&p, 4);
    assert_int_equal(mu_sampler_sample(s, l), 2);
    mu_sampler_free(s);
    p.xtc_threshold = 0.39f; /* only one token above: nothing removed */
    s = mk(&p, 4);
    assert_int_equal(mu_sampler_sample(s, l), 0);
    mu_sampler_free(s);
    p.xtc_threshold = 0.6f; /* > 0.5: off */
    p.temp = 1;
    s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0xFu);
    mu_sampler_free(s);
    /* min_keep 3: removing two would leave two: kept */
    p.xtc_threshold = 0.19f;
    p.min_keep = 3;
    s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0xFu);
    mu_sampler_free(s);
}

static void test_min_keep(void **state) {
    (void)state;
    const float pr[4] = {0.4f, 0.3f, 0.2f, 0.1f};
    float l[4];
    logs(l, pr, 4);
    /* min-p 0.6 keeps p >= .24: tokens 0 and 1; min_keep 3 adds token 2 */
    mu_sample_params p = plain(1);
    p.min_p = 0.6f;
    mu_sampler *s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0x3u);
    mu_sampler_free(s);
    p.min_keep = 3;
    s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0x7u);
    mu_sampler_free(s);
    /* top-p 0.1 keeps one token; min_keep 2 keeps two */
    p = plain(1);
    p.top_p = 0.1f;
    s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0x1u);
    mu_sampler_free(s);
    p.min_keep = 2;
    s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0x3u);
    mu_sampler_free(s);
}

static void test_dynatemp(void **state) {
    (void)state;
    /* temp 1, range 1: [0, 2] mapped by (H / H_max)^exponent; a huge
     * exponent gives ~0 (greedy), exponent 0 gives 2 */
    float l[4] = {1, 0, 0, 0};
    mu_sample_params p = plain(1);
    p.dynatemp_range = 1;
    p.dynatemp_exponent = 200;
    mu_sampler *s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0x1u);
    mu_sampler_free(s);
    p.dynatemp_exponent = 0;
    s = mk(&p, 4);
    assert_int_equal(reach(s, l), 0xFu);
    mu_sampler_free(s);
}

static void test_mirostat(void **state) {
    (void)state;
    float l[4] = {1, 0, 0, 0};
    for (int v = 1; v <= 2; v++) {
        /* a tiny target surprise keeps only the best token */
        mu_sample_params p = plain(1);
        p.mirostat = v;
        p.mirostat_tau = 0.1f;
        p.mirostat_eta = 0; /* mu stays 2 tau */
        mu_sampler *s = mk(&p, 4);
        assert_int_equal(reach(s, l), 0x1u);
        mu_sampler_free(s);
        /* a large one keeps them all (v2: mu = 20 bits) */
        if (v == 2) {
            p.mirostat_tau = 10;
            s = mk(&p, 4);
            assert_int_equal(reach(s, l), 0xFu);
            mu_sampler_free(s);
        }
        /* penalties are not part of mirostat's chain */
        p.mirostat_tau = 0.1f;
        p.penalty_last_n = 64;
        p.penalty_repeat = 100;
        s = mk(&p, 4);
        mu_sampler_accept(s, 0);
        float a[4] = {1, 0, 0, 0};
        mu_sampler_adjust(s, a);
        assert_true(a[0] == 1);
        mu_sampler_free(s);
    }
}

static void test_greedy_and_params(void **state) {
    (void)state;
    float l[4] = {0, 3, 3, 1};
    mu_sample_params p = mu_sample_defaults();
    p.temp = 0;
    mu_sampler *s = mk(&p, 4);
    assert_int_equal(mu_sampler_sample(s, l), 1); /* ties: lower id */
    mu_sampler_free(s);
    mu_err err = {0};
    struct {
        mu_sample_params p;
        const char *field;
    } bad[] = {
        {.p = {.temp = NAN}, .field = "temp"},
        {.p = {.min_p = 2}, .field = "min_p"},
        {.p = {.min_keep = -1}, .field = "min_keep"},
        {.p = {.xtc_probability = 2}, .field = "xtc_probability"},
        {.p = {.penalty_last_n = -2}, .field = "penalty_last_n"},
        {.p = {.penalty_repeat = -1}, .field = "penalty_repeat"},
        {.p = {.dry_allowed_length = -1}, .field = "dry_allowed_length"},
        {.p = {.mirostat = 3}, .field = "mirostat"},
        {.p = {.n_logit_bias = 2}, .field = "n_logit_bias"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = NULL;
        assert_int_equal(mu_sampler_new(&bad[i].p, 4, &s, &err), MU_E_ARG);
        assert_null(s);
        assert_non_null(strstr(err.msg, bad[i].field));
    }
    const mu_logit_bias nanb[] = {{1, NAN}};
    p = plain(0);
    p.logit_bias = nanb;
    p.n_logit_bias = 1;
    assert_int_equal(mu_sampler_new(&p, 4, &s, &err), MU_E_ARG);
}

/* The scans greedy, top-k and the finiteness check take: the AVX2 forms
 * (where the CPU has AVX2) equal the plain loops on rows of every length
 * up to 70 and a 200K-vocabulary row, with ties between lanes and in the
 * tail, -0 and +0, -inf rows, NaN first and NaN later, +inf, and top-k's
 * search from every start against thresholds that are in the row, above
 * it, -inf and NaN. */
static uint32_t lcg(uint32_t *x) { return *x = *x * 1664525u + 1013904223u; }
static void test_logit_scans(void **state) {
    (void)state;
    enum { BIG = 201088 };
    float *l = malloc(BIG * sizeof *l);
    assert_non_null(l);
    uint32_t x = 7;
    int cases = 0;
    for (int kind = 0; kind < 9; kind++)
        for (int n = 1; n <= BIG; n += n < 70 ? 1 : BIG - 70) {
            for (int i = 0; i < n; i++) /* few distinct values: ties everywhere */
                l[i] = (float)(int)(lcg(&x) >> 28) - 8.0f;
            const int at = (int)(lcg(&x) % (uint32_t)n), at2 = (int)(lcg(&x) % (uint32_t)n);
            switch (kind) {
            case 0: break;
            case 1: l[at] = 100.0f, l[at2] = 100.0f; break;   /* the max twice */
            case 2: for (int i = 0; i < n; i++) l[i] = i % 3 ? 0.0f : -0.0f; break;
            case 3: for (int i = 0; i < n; i++) l[i] = -INFINITY; l[at] = at2 % 2 ? -INFINITY : -1.0f; break;
            case 4: l[0] = NAN; break;
            case 5: l[at] = NAN; l[at2] = 50.0f; break;
            case 6: l[at] = INFINITY; break;
            case 7: l[n - 1] = 1e30f; break;                  /* in the tail */
            case 8: l[at] = -INFINITY; break;
            }
            assert_int_equal(mu_logits_argmax(l, n), mu_logits_argmax_ref(l, n));
            assert_int_equal(mu_logits_finite(l, n), mu_logits_finite_ref(l, n));
            const float thr[] = {l[at], l[at2], 7.0f, 99.0f, -INFINITY, NAN, -0.0f};
            for (int ti = 0; ti < 7; ti++)
                for (int from = 0; from < n; from += n < 70 ? 1 : 4099)
                    assert_int_equal(mu_logits_next_above(l, n, from, thr[ti]), mu_logits_next_above_ref(l, n, from, thr[ti]));
#if defined(__x86_64__)
            if (__builtin_cpu_supports("avx2")) {
                assert_int_equal(mu_logits_argmax_avx2(l, n), mu_logits_argmax_ref(l, n));
                assert_int_equal(mu_logits_finite_avx2(l, n), mu_logits_finite_ref(l, n));
                for (int ti = 0; ti < 7; ti++)
                    for (int from = 0; from <= n; from += n < 70 ? 1 : 4099)
                        assert_int_equal(mu_logits_next_above_avx2(l, n, from, thr[ti]),
                                         mu_logits_next_above_ref(l, n, from, thr[ti]));
            }
#endif
            cases++;
        }
    assert_int_equal(cases, 9 * 71);
    /* the reference itself: first of ties, NaN never wins after l[0] */
    const float t[] = {1, NAN, 3, 3, -0.0f, 3};
    assert_int_equal(mu_logits_argmax_ref(t, 6), 2);
    assert_false(mu_logits_finite_ref(t, 6));
    free(l);
}

static void test_sample_best(void **state) {
    (void)state;
    const float l[6] = {0.5f, 2.0f, -1.0f, 1.0f, 2.0f, 0.0f};
    const mu_logit_bias bias = {.id = 3, .bias = 5.0f};
    mu_sample_params ps[4] = {{.temp = 0}, {.temp = 0, .logit_bias = &bias, .n_logit_bias = 1},
                              {.temp = 0.8f, .seed = 3}, {.temp = 0, .xtc_probability = 1, .xtc_threshold = 0.1f}};
    for (int k = 0; k < 4; k++) {
        mu_sampler *a, *b;
        mu_err err;
        assert_int_equal(mu_sampler_new(&ps[k], 6, &a, &err), 0);
        assert_int_equal(mu_sampler_new(&ps[k], 6, &b, &err), 0);
        for (int32_t best = -1; best < 6; best++) { /* best 1 is right; the others tell whether it was taken */
            const int32_t got = mu_sampler_sample_best(a, l, best), want = mu_sampler_sample(b, l);
            if (k == 0 && best >= 0) assert_int_equal(got, best);
            else assert_int_equal(got, want);
            if (got != want) continue; /* a wrong best taken: what it reports is its own */
            int32_t ia[4], ib[4];
            float pa[4], pb[4], qa, qb;
            const int na = mu_sampler_final_probs(a, got, 4, ia, pa, &qa), nb = mu_sampler_final_probs(b, got, 4, ib, pb, &qb);
            assert_int_equal(na, nb);
            assert_memory_equal(ia, ib, (size_t)na * sizeof *ia);
            assert_true(qa == qb);
        }
        mu_sampler_free(a);
        mu_sampler_free(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_best),
        cmocka_unit_test(test_logit_scans),
        cmocka_unit_test(test_generator),   cmocka_unit_test(test_dist_seeded), cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_penalties),   cmocka_unit_test(test_dry),         cmocka_unit_test(test_top_n_sigma),
        cmocka_unit_test(test_typical),     cmocka_unit_test(test_xtc),         cmocka_unit_test(test_min_keep),
        cmocka_unit_test(test_dynatemp),    cmocka_unit_test(test_mirostat),
        cmocka_unit_test(test_greedy_and_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
