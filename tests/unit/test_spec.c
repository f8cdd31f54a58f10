/* test_spec.c: speculative decoding (docs/speculative.md).
 * Engine: a solo block (mu_batch_item.solo, all logits) yields, bit for
 * bit, the logits of the same tokens decoded one per forward, on every
 * weight type the kernel table rounds by row count (F32, F16, Q8_0, Q4_K
 * mixes), with the sliding ring wrapping, after a truncation, and next to
 * other sessions in the batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser_gen.h"
#include "../../include/muser_synth.h"
#include "mini_model.h"

static char dir[] = "/tmp/mutest_spec_XXXXXX";

static int setup(void **state) {
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rmdir(dir);
    return 0;
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Runs n_pre tokens of prefill, then compares a block of k tokens fed as
 * one solo item (optionally next to a busy neighbour session) with the
 * same tokens fed one per forward. Also truncates back and feeds again. */
static void check_solo(mu_engine *e, int n_pre, int k, bool neighbour, uint64_t seed) {
    const mu_model_info *I = mu_model_get_info(mu_engine_model(e));
    const int V = I->n_vocab;
    mu_err err = {0};
    mu_session *a, *b, *nb = NULL;
    assert_int_equal(mu_session_new(e, 1024, &a, &err), 0);
    assert_int_equal(mu_session_new(e, 1024, &b, &err), 0);
    if (neighbour) assert_int_equal(mu_session_new(e, 1024, &nb, &err), 0);
    int32_t *toks = malloc((size_t)(n_pre + k) * sizeof *toks);
    for (int i = 0; i < n_pre + k; i++) toks[i] = (int32_t)(rng_next(&seed) % (uint64_t)V);
    mu_batch_item it = {.s = a, .tokens = toks, .n_tokens = n_pre};
    assert_int_equal(mu_forward(e, &it, 1, &err), 0);
    it.s = b;
    assert_int_equal(mu_forward(e, &it, 1, &err), 0);
    if (nb) {
        it.s = nb;
        assert_int_equal(mu_forward(e, &it, 1, &err), 0);
    }
    /* reference: one token per forward */
    float *ref = malloc((size_t)k * (size_t)V * sizeof *ref);
    for (int t = 0; t < k; t++) {
        mu_batch_item one = {.s = a, .tokens = toks + n_pre + t, .n_tokens = 1};
        assert_int_equal(mu_forward(e, &one, 1, &err), 0);
        memcpy(ref + (size_t)t * V, mu_session_logits(a, -1), (size_t)V * sizeof *ref);
    }
    for (int round = 0; round < 2; round++) {
        /* the block, after a neighbour's decode token and prompt chunk */
        mu_batch_item items[3];
        int n = 0;
        int32_t nt[5] = {1, 2, 3, 4, 5};
        if (nb) {
            items[n++] = (mu_batch_item){.s = nb, .tokens = nt, .n_tokens = round ? 5 : 1};
        }
        items[n++] = (mu_batch_item){.s = b, .tokens = toks + n_pre, .n_tokens = k, .all_logits = true, .solo = true};
        assert_int_equal(mu_forward(e, items, n, &err), 0);
        for (int t = 0; t < k; t++) {
            const float *l = mu_session_logits(b, t);
            assert_non_null(l);
            if (memcmp(l, ref + (size_t)t * V, (size_t)V * sizeof *l))
                fail_msg("solo block: token %d of %d (prefill %d, round %d) differs from a decode step", t, k, n_pre,
                         round);
        }
        /* roll the block back and verify again: the ring still holds the window */
        assert_int_equal(mu_session_truncate(b, n_pre, &err), 0);
        if (nb) assert_int_equal(mu_session_truncate(nb, n_pre, &err), 0);
    }
    free(ref);
    free(toks);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(nb);
}

static void solo_on(mu_engine *e) {
    /* short prompt, prompts past the window, a block that crosses the
     * ring's end (768 cells for windows up to 255: pad256(window + 513)),
     * lengths around the Q4_K groups of 4 */
    const int cases[][2] = {{1, 2}, {3, 5}, {20, 4}, {37, 8}, {64, 9}, {130, 16}, {300, 3}, {763, 9}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        check_solo(e, cases[i][0], cases[i][1], false, 11 + i);
        check_solo(e, cases[i][0], cases[i][1], true, 23 + i);
    }
}

static void test_solo_mini(void **state) {
    (void)state;
    for (int f16 = 0; f16 < 2; f16++) {
        mini_cfg c = mini_default();
        c.n_ctx = 1024;
        c.wtype = f16 ? MU_T_F16 : MU_T_F32;
        mu_model *m;
        mu_engine *e;
        assert_int_equal(mini_open(dir, &c, 2, &m, &e), 0);
        solo_on(e);
        mu_engine_free(e);
        mu_model_close(m);
    }
}

static void test_solo_quant(void **state) {
    (void)state;
    const mu_synth_type types[] = {MU_SYNTH_Q8_0, MU_SYNTH_Q4_K_M, MU_SYNTH_BF16};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        mu_synth_opts o;
        mu_synth_defaults(&o);
        mu_err err = {0};
        assert_int_equal(mu_synth_preset(&o, "tiny", &err), 0);
        o.type = types[i];
        o.n_swa = 24;
        o.n_ctx = 1024;
        o.n_threads = 2;
        char path[512];
        snprintf(path, sizeof path, "%s/q.gguf", dir);
        assert_int_equal(mu_synth_write(&o, path, NULL, NULL, &err), 0);
        mu_model *m;
        mu_engine *e;
        assert_int_equal(mu_model_open(path, &m, &err), 0);
        unlink(path);
        mu_engine_opts eo = {.n_threads = 2};
        assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
        solo_on(e);
        mu_engine_free(e);
        mu_model_close(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_solo_mini),
        cmocka_unit_test(test_solo_quant),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
