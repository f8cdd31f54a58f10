/* test_spec.c: speculative decoding (docs/speculative.md).
 * Engine: a solo block (mu_batch_item.solo, all logits) yields, bit for
 * bit, the logits of the same tokens decoded one per forward, on every
 * weight type the kernel table rounds by row count (F32, F16, Q8_0, Q4_K
 * mixes), with the sliding ring wrapping, after a truncation, and next to
 * other sessions in the batch.
 * Drafter: the n-gram cache's drafts and thresholds.
 * Scheduler: every event of a job (token ids, log-probabilities and top
 * alternatives as bits, text, stop strings, finish reason) is the same with
 * speculation as without, for drafts that are always right, always wrong,
 * random, half right, and the n-gram drafter; greedy and sampled (same
 * seed, same samples); at length and context limits; several speculating
 * jobs sharing batches (with drafting on, the same events whatever the
 * drafts); and the step counts say the drafts were used. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser_gen.h"
#include "../../include/muser_synth.h"
#include "../../src/gen/ngram.h"
#include "../../src/gen/spec_cost.h"
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

/* The rows before a solo block keep the batch's rounding on every kernel
 * table: a lone decode token ahead of a 6-token block is row 0 of a 7-row
 * Q4_K matmul, which rounds as the batched (per-64) dot; the AVX-512 gemm
 * once rounded it as vec_dot because it was called for that one row. */
static void test_solo_neighbour_tables(void **state) {
    (void)state;
    mu_synth_opts o;
    mu_synth_defaults(&o);
    mu_err err = {0};
    assert_int_equal(mu_synth_preset(&o, "tiny", &err), 0);
    o.type = MU_SYNTH_Q4_K_M;
    o.n_threads = 2;
    char path[512];
    snprintf(path, sizeof path, "%s/qn.gguf", dir);
    assert_int_equal(mu_synth_write(&o, path, NULL, NULL, &err), 0);
    mu_model *m;
    assert_int_equal(mu_model_open(path, &m, &err), 0);
    unlink(path);
    const int V = mu_model_get_info(m)->n_vocab;
    float *got[2][2];
    for (int k = 0; k < 2; k++) {
        mu_engine *e;
        mu_engine_opts eo = {.n_threads = 2, .kern = k ? NULL : "ref"};
        assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
        int32_t p[3][20];
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 20; i++) p[j][i] = (int32_t)((i * 31 + j * 101 + 5) % V);
        mu_session *a, *b;
        assert_int_equal(mu_session_new(e, 128, &a, &err), 0);
        assert_int_equal(mu_session_new(e, 128, &b, &err), 0);
        mu_batch_item pre[2] = {{.s = a, .tokens = p[0], .n_tokens = 20}, {.s = b, .tokens = p[1], .n_tokens = 20}};
        assert_int_equal(mu_forward(e, pre, 2, &err), 0);
        mu_batch_item blk[2] = {{.s = a, .tokens = p[2], .n_tokens = 1},
                                {.s = b, .tokens = p[2] + 1, .n_tokens = 6, .all_logits = true, .solo = true}};
        assert_int_equal(mu_forward(e, blk, 2, &err), 0);
        got[k][0] = malloc((size_t)V * sizeof(float));
        got[k][1] = malloc((size_t)V * 6 * sizeof(float));
        memcpy(got[k][0], mu_session_logits(a, -1), (size_t)V * sizeof(float));
        for (int r = 0; r < 6; r++) memcpy(got[k][1] + (size_t)r * V, mu_session_logits(b, r), (size_t)V * sizeof(float));
        mu_session_free(a);
        mu_session_free(b);
        mu_engine_free(e);
    }
    if (memcmp(got[0][0], got[1][0], (size_t)V * sizeof(float)))
        fail_msg("the lone token ahead of a solo block differs between the ref table and %s", "the best table");
    if (memcmp(got[0][1], got[1][1], (size_t)V * 6 * sizeof(float)))
        fail_msg("the solo block differs between the ref table and %s", "the best table");
    for (int k = 0; k < 2; k++) {
        free(got[k][0]);
        free(got[k][1]);
    }
    mu_model_close(m);
}

/* ---- the n-gram drafter ------------------------------------------------ */

static void push_all(mu_ngram *d, const int32_t *t, int n) {
    for (int i = 0; i < n; i++) mu_ngram_push(d, t[i]);
}

static void test_ngram(void **state) {
    (void)state;
    mu_ngram *d = mu_ngram_new();
    assert_non_null(d);
    int32_t out[16];
    assert_int_equal(mu_ngram_draft(d, 4, out), 0);
    /* a repeated phrase continues as it went */
    const int32_t a[] = {1, 2, 3, 4, 1, 2, 3};
    push_all(d, a, 7);
    assert_int_equal(mu_ngram_len(d), 7);
    assert_int_equal(mu_ngram_draft(d, 4, out), 4);
    const int32_t want[] = {4, 1, 2, 3};
    assert_memory_equal(out, want, sizeof want);
    assert_int_equal(mu_ngram_draft(d, 2, out), 2);
    assert_int_equal(mu_ngram_draft(d, 0, out), 0);
    /* a 1-gram needs two observations and a 66 % majority: 5 -> {6, 7} is
     * a 50 % split, so nothing is drafted */
    mu_ngram_reset(d);
    assert_int_equal(mu_ngram_len(d), 0);
    const int32_t b[] = {5, 6, 5, 7, 5};
    push_all(d, b, 5);
    assert_int_equal(mu_ngram_draft(d, 4, out), 0);
    /* 5 -> {6, 7, 7}: 66 % of 3, drafted; then 7 -> 5 twice */
    mu_ngram_push(d, 7);
    mu_ngram_push(d, 5);
    assert_int_equal(mu_ngram_draft(d, 2, out), 2);
    assert_int_equal(out[0], 7);
    assert_int_equal(out[1], 5);
    /* the longest n-gram that passes wins: after 9 8 the history says 1
     * (twice), after 8 alone 2 (4 of 6) */
    mu_ngram_reset(d);
    const int32_t c[] = {8, 2, 8, 2, 8, 2, 8, 2, 9, 8, 1, 3, 9, 8, 1, 4, 9, 8};
    push_all(d, c, 18);
    assert_int_equal(mu_ngram_draft(d, 1, out), 1);
    assert_int_equal(out[0], 1);
    /* many distinct tokens grow the tables */
    mu_ngram_reset(d);
    for (int i = 0; i < 20000; i++) mu_ngram_push(d, (int32_t)(i % 7919));
    assert_int_equal(mu_ngram_len(d), 20000);
    assert_int_equal(mu_ngram_draft(d, 3, out), 3);
    assert_int_equal(out[0], 20000 % 7919);
    assert_int_equal(out[2], 20002 % 7919);
    mu_ngram_free(d);
    mu_ngram_free(NULL);
}

/* ---- the scheduler ------------------------------------------------------ */

/* Every event of a job, serialized: compared byte for byte. */
typedef struct {
    char *buf;
    size_t n, cap;
    int32_t ids[4096];
    int n_ids;
    mu_finish finish;
    mu_gen_stats st;
} trace;

static void put(trace *t, const void *p, size_t n) {
    if (n == 0) return; /* p may be NULL then */
    if (t->n + n > t->cap) {
        t->cap = (t->n + n) * 2 + 4096;
        t->buf = realloc(t->buf, t->cap);
        assert_non_null(t->buf);
    }
    memcpy(t->buf + t->n, p, n);
    t->n += n;
}

static void read_trace(mu_job *j, trace *t) {
    free(t->buf);
    memset(t, 0, sizeof *t);
    mu_gen_event ev;
    while (mu_job_next(j, &ev, -1) == 1) {
        put(t, &ev.kind, sizeof ev.kind);
        if (ev.kind == MU_EV_TOKEN) {
            assert_true(t->n_ids < 4096);
            t->ids[t->n_ids++] = ev.tok.id;
            put(t, &ev.tok.id, sizeof ev.tok.id);
            put(t, &ev.tok.logprob, sizeof ev.tok.logprob);
            put(t, ev.tok.top_ids, (size_t)ev.tok.n_top * sizeof *ev.tok.top_ids);
            put(t, ev.tok.top_probs, (size_t)ev.tok.n_top * sizeof *ev.tok.top_probs);
            put(t, ev.tok.top_logprobs, (size_t)ev.tok.n_top * sizeof *ev.tok.top_logprobs);
        } else if (ev.kind == MU_EV_TEXT || ev.kind == MU_EV_TOOL_CALL) {
            put(t, &ev.channel, sizeof ev.channel);
            put(t, ev.text, ev.len);
            if (ev.name) put(t, ev.name, strlen(ev.name));
        } else if (ev.kind == MU_EV_FINISH) {
            put(t, &ev.finish, sizeof ev.finish);
            if (ev.stop_word) put(t, ev.stop_word, strlen(ev.stop_word));
            t->finish = ev.finish;
            t->st = ev.stats;
            break;
        }
    }
}

static void run_trace(mu_sched *s, const mu_gen_req *q, trace *t) {
    mu_job *j;
    mu_err err = {0};
    if (mu_sched_submit(s, q, 1, &j, &err)) fail_msg("submit: %s", err.msg);
    read_trace(j, t);
    mu_job_free(j);
}

static void same(const trace *a, const trace *b, const char *what, int pi) {
    if (a->n != b->n || memcmp(a->buf, b->buf, a->n)) {
        int k = 0;
        while (k < a->n_ids && k < b->n_ids && a->ids[k] == b->ids[k]) k++;
        fail_msg("%s, prompt %d: the events differ from plain decoding (first token difference at %d of %d/%d)",
                 what, pi, k, a->n_ids, b->n_ids);
    }
}

/* The per-position counts agree with the totals: position 0 is checked once
 * per verification step, a position only after the one before it was
 * accepted, and the accepted ones add up. */
static void pos_counts(const mu_gen_stats *st) {
    assert_int_equal(st->n_draft_pos[0], st->n_spec_steps);
    int sum = 0;
    for (int k = 0; k < MU_SPEC_DRAFT_MAX; k++) {
        assert_true(st->n_accept_pos[k] <= st->n_draft_pos[k]);
        if (k + 1 < MU_SPEC_DRAFT_MAX) assert_true(st->n_draft_pos[k + 1] <= st->n_accept_pos[k]);
        sum += st->n_accept_pos[k];
    }
    assert_int_equal(sum, st->n_draft_accepted);
}

enum { D_RIGHT, D_WRONG, D_RANDOM, D_HALF, D_NGRAM, D_SHORT, D_COUNT };
#define ALL ((1u << D_COUNT) - 1)
static const char *const D_NAMES[D_COUNT] = {"drafts always right", "drafts always wrong", "random drafts",
                                             "drafts half right",   "n-gram drafts",       "right, draft max 2"};

/* A request q with the draft method v, given the plain output ref. */
static mu_gen_req with_drafts(const mu_gen_req *q, int v, const trace *ref, int32_t *script, int V, uint64_t seed) {
    mu_gen_req r = *q;
    r.spec = v == D_NGRAM ? MU_SPEC_NGRAM : MU_SPEC_SCRIPT;
    r.draft_max = v == D_SHORT ? 2 : 8;
    int n = ref->n_ids + 16;
    for (int i = 0; i < n; i++) {
        int32_t right = i < ref->n_ids ? ref->ids[i] : 0;
        int32_t wrong = (right + 1) % V;
        switch (v) {
        case D_RIGHT: case D_SHORT: script[i] = right; break;
        case D_WRONG: script[i] = wrong; break;
        case D_RANDOM: script[i] = (int32_t)(rng_next(&seed) % (uint64_t)V); break;
        case D_HALF: script[i] = rng_next(&seed) % 2 ? right : wrong; break;
        default: break;
        }
    }
    r.spec_script = script;
    r.n_spec_script = n;
    return r;
}

/* Plain, then every draft method, on one request: identical events. */
static void check_request(mu_engine *e, int n_ctx, const mu_gen_req *q, int pi, unsigned mask) {
    const int V = mu_model_get_info(mu_engine_model(e))->n_vocab;
    mu_err err = {0};
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = n_ctx};
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    static trace ref, t;
    static int32_t script[4096 + 16];
    run_trace(s, q, &ref);
    assert_int_equal(ref.st.n_draft, 0);
    for (int v = 0; v < D_COUNT; v++) {
        if (!(mask >> v & 1)) continue;
        mu_gen_req r = with_drafts(q, v, &ref, script, V, 99 + (uint64_t)pi);
        mu_sched_metrics m0, m1;
        mu_sched_get_metrics(s, &m0);
        run_trace(s, &r, &t);
        mu_sched_get_metrics(s, &m1);
        same(&ref, &t, D_NAMES[v], pi);
        const int n = ref.n_ids;
        const uint64_t steps = m1.n_forward - m0.n_forward;
        if (v == D_RIGHT || v == D_SHORT) {
            /* every draft accepted: the first token from the prompt, then
             * steps of draft max + 1 */
            const int k = v == D_SHORT ? 2 : 8, prompt_steps = (q->n_prompt + 511) / 512;
            if (t.finish == MU_FINISH_LENGTH || t.finish == MU_FINISH_CTX) { /* not ended inside a block */
                assert_int_equal(t.st.n_draft_accepted, t.st.n_draft);
                assert_int_equal(steps, prompt_steps + (n - 1 + k) / (k + 1));
            }
        } else if (v == D_WRONG) {
            /* a step per token, but the last has no room to draft */
            assert_int_equal(t.st.n_draft_accepted, 0);
            if (t.finish == MU_FINISH_LENGTH) assert_int_equal(t.st.n_spec_steps, n > 2 ? n - 2 : 0);
        }
        assert_true(t.st.n_draft_accepted <= t.st.n_draft);
        pos_counts(&t.st);
        for (int k = 0; k < MU_SPEC_DRAFT_MAX; k++)
            if (v == D_RIGHT || v == D_SHORT) assert_int_equal(t.st.n_accept_pos[k], t.st.n_draft_pos[k]);
            else if (v == D_WRONG) assert_int_equal(t.st.n_accept_pos[k], 0);
        assert_int_equal(m1.n_draft_tokens - m0.n_draft_tokens, (uint64_t)t.st.n_draft);
        assert_int_equal(m1.n_draft_accepted - m0.n_draft_accepted, (uint64_t)t.st.n_draft_accepted);
    }
    mu_sched_free(s);
    free(ref.buf);
    free(t.buf);
    ref.buf = t.buf = NULL;
}

static void mk_prompt(int32_t *p, int n, int V, uint64_t seed, bool repetitive) {
    for (int i = 0; i < n; i++)
        p[i] = repetitive && i >= 12 ? p[i - 12 + (int)(rng_next(&seed) % 3 == 0)] : (int32_t)(rng_next(&seed) % (uint64_t)V);
}

/* Greedy and sampled, many prompts, on the mini model (no tokenizer: ids,
 * log-probabilities and top alternatives). */
static void test_sched_mini(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    c.n_ctx = 1024;
    mu_model *m;
    mu_engine *e;
    assert_int_equal(mini_open(dir, &c, 1, &m, &e), 0);
    const int V = mu_model_get_info(m)->n_vocab;
    static int32_t p[700];
    for (int pi = 0; pi < 16; pi++) {
        int np = 1 + (pi * 53) % 90 + (pi == 5 ? 600 : 0);
        mk_prompt(p, np, V, (uint64_t)pi, pi % 2);
        mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = 30 + pi % 7, .ignore_eos = true, .no_text = true,
                        .logprobs = true, .n_top = 3};
        q.sp.temp = pi % 3 == 2 ? 0.9f : 0;
        q.sp.top_k = 40;
        q.sp.seed = (uint64_t)pi;
        check_request(e, 1024, &q, pi, ALL);
    }
    /* the context fills inside a block; n_predict 1 leaves no room to draft */
    mk_prompt(p, 40, V, 5, true);
    mu_gen_req q = {.prompt = p, .n_prompt = 40, .n_predict = -1, .ignore_eos = true, .no_text = true, .logprobs = true};
    check_request(e, 63, &q, 100, ALL);
    q.n_predict = 1;
    check_request(e, 63, &q, 101, ALL);
    mu_engine_free(e);
    mu_model_close(m);
}

/* Text, stop strings cut inside a verified block at every position, and
 * end-of-generation tokens, on the bundled model (it has a tokenizer). */
static void test_sched_text(void **state) {
    (void)state;
    mu_model *m;
    mu_engine *e;
    mu_err err = {0};
    if (mu_model_open("models/muser-default.gguf", &m, &err)) skip();
    mu_engine_opts eo = {.n_threads = 1};
    assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
    const char *texts[] = {"The tar command", "ls -la lists ls -la lists ls -la", "def f(x):\n    return x\ndef g(x):\n",
                           "Hello"};
    for (int ti = 0; ti < 4; ti++) {
        int32_t *p;
        int np;
        assert_int_equal(mu_tokenize(m, texts[ti], strlen(texts[ti]), mu_model_get_info(m)->add_bos, false, &p, &np, &err), 0);
        mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = 48, .logprobs = true};
        q.sp.temp = ti == 3 ? 1.0f : 0;
        q.sp.seed = 7;
        check_request(e, 512, &q, ti, ALL);
        /* stop strings at every 11th byte of two plain answers */
        mu_sched *s;
        mu_sched_opts so = {.n_slots = 1, .n_ctx = 512};
        assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
        static trace full;
        run_trace(s, &q, &full);
        mu_sched_free(s);
        char text[8192];
        size_t n_text = 0;
        for (int i = 0; i < full.n_ids; i++) {
            int k = mu_tok_piece(mu_model_tokenizer(m), full.ids[i], false, text + n_text, sizeof text - n_text);
            assert_true(k >= 0);
            n_text += (size_t)k;
        }
        for (size_t at = 1 + (size_t)ti; ti % 2 == 0 && at + 3 <= n_text; at += 11) {
            char stop[4];
            memcpy(stop, text + at, 3);
            stop[3] = 0;
            if (strlen(stop) < 3) continue;
            const char *stops[1] = {stop};
            q.stops = stops;
            q.n_stops = 1;
            check_request(e, 512, &q, (int)(ti * 1000 + at), 1u << D_RIGHT | 1u << D_HALF);
        }
        q.stops = NULL;
        q.n_stops = 0;
        free(full.buf);
        full.buf = NULL;
        free(p);
    }
    mu_engine_free(e);
    mu_model_close(m);
}

/* Structured output (the constraint picks each row's token in turn) and
 * the n choices of one request (the others copy the leader's prompt
 * state) with speculation: the events of plain decoding. */
static void test_sched_schema_choices(void **state) {
    (void)state;
    mu_model *m;
    mu_engine *e;
    mu_err err = {0};
    if (mu_model_open("models/muser-default.gguf", &m, &err)) skip();
    mu_engine_opts eo = {.n_threads = 1};
    assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
    const char *text = "{\"name\": \"ls\", \"name\": \"ls\", \"name\":";
    int32_t *p;
    int np;
    assert_int_equal(mu_tokenize(m, text, strlen(text), mu_model_get_info(m)->add_bos, false, &p, &np, &err), 0);
    mu_schema *sc;
    assert_int_equal(mu_schema_new("{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}}}", true,
                                   "schema", &sc, &err),
                     0);
    mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = 40, .logprobs = true, .schema = sc};
    check_request(e, 512, &q, 0, ALL);
    mu_schema_unref(sc);
    /* two choices, greedy and sampled: each is the single plain job */
    for (int sampled = 0; sampled < 2; sampled++) {
        mu_gen_req one = {.prompt = p, .n_prompt = np, .n_predict = 32, .logprobs = true, .ignore_eos = true};
        one.sp.temp = sampled ? 0.8f : 0;
        one.sp.seed = 3;
        mu_sched *s;
        mu_sched_opts so = {.n_slots = 2, .n_ctx = 512, .queue_max = 2};
        assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
        static trace ref, t;
        run_trace(s, &one, &ref);
        mu_gen_req two[2] = {one, one};
        two[0].spec = two[1].spec = MU_SPEC_NGRAM;
        mu_job *j[2];
        assert_int_equal(mu_sched_submit(s, two, 2, j, &err), 0);
        for (int k = 0; k < 2; k++) {
            read_trace(j[k], &t);
            mu_job_free(j[k]);
            same(&ref, &t, "two choices, n-gram drafts", k);
        }
        mu_sched_free(s);
        free(ref.buf);
        free(t.buf);
        ref.buf = t.buf = NULL;
    }
    free(p);
    mu_engine_free(e);
    mu_model_close(m);
}

/* Chat turns (keep_prefix): the second turn reuses the first turn's KV,
 * where rejected drafts were rolled back; plain and speculating sessions
 * (half-right drafts) give the same events and reuse the same prefix. */
static void test_sched_turns(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    c.n_ctx = 1024;
    mu_model *m;
    mu_engine *e;
    assert_int_equal(mini_open(dir, &c, 1, &m, &e), 0);
    const int V = mu_model_get_info(m)->n_vocab;
    mu_err err = {0};
    static trace t1[2], t2[2];
    static int32_t p1[100], p2[2][200], script[4096 + 16];
    mk_prompt(p1, 60, V, 77, true);
    for (int sp = 0; sp < 2; sp++) {
        mu_sched *s;
        mu_sched_opts so = {.n_slots = 1, .n_ctx = 1024};
        assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
        mu_gen_req q = {.prompt = p1, .n_prompt = 60, .n_predict = 40, .ignore_eos = true, .no_text = true,
                        .logprobs = true, .keep_prefix = true};
        mu_gen_req r = sp ? with_drafts(&q, D_HALF, &t1[0], script, V, 3) : q;
        run_trace(s, &r, &t1[sp]);
        memcpy(p2[sp], p1, 60 * sizeof *p1);
        memcpy(p2[sp] + 60, t1[sp].ids, 40 * sizeof *p1);
        mk_prompt(p2[sp] + 100, 30, V, 78, true);
        q.prompt = p2[sp];
        q.n_prompt = 130;
        r = sp ? with_drafts(&q, D_HALF, &t2[0], script, V, 4) : q;
        run_trace(s, &r, &t2[sp]);
        mu_sched_free(s);
    }
    same(&t1[0], &t1[1], "first turn, half-right drafts", 0);
    same(&t2[0], &t2[1], "second turn, half-right drafts", 1);
    assert_int_equal(t2[0].st.n_reused, 99);
    assert_int_equal(t2[1].st.n_reused, 99);
    assert_true(t1[1].st.n_draft_accepted < t1[1].st.n_draft); /* drafts were rejected and rolled back */
    for (int k = 0; k < 2; k++) {
        free(t1[k].buf);
        free(t2[k].buf);
        t1[k].buf = t2[k].buf = NULL;
    }
    mu_engine_free(e);
    mu_model_close(m);
}

/* The scheduler's default (the server's --spec) applies to requests that
 * name no method, and not to those that do. */
static void test_sched_default(void **state) {
    (void)state;
    mu_model *m;
    mu_engine *e;
    mu_err err = {0};
    if (mu_model_open("models/muser-default.gguf", &m, &err)) skip();
    mu_engine_opts eo = {.n_threads = 1};
    assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
    const char *text = "ls -la lists files. ls -la lists files. ls -la lists files. ls -la";
    int32_t *p;
    int np;
    assert_int_equal(mu_tokenize(m, text, strlen(text), mu_model_get_info(m)->add_bos, false, &p, &np, &err), 0);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 256, .spec = MU_SPEC_NGRAM, .draft_max = 4};
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = 32, .ignore_eos = true, .no_text = true};
    static trace t;
    run_trace(s, &q, &t);
    assert_true(t.st.n_spec_steps > 0);
    assert_true(t.st.n_draft <= 4 * t.st.n_spec_steps);
    q.spec = MU_SPEC_SCRIPT; /* names a method: the default does not apply */
    run_trace(s, &q, &t);
    assert_int_equal(t.st.n_draft, 0);
    mu_sched_free(s);
    so.draft_max = MU_SPEC_DRAFT_MAX + 1;
    assert_int_equal(mu_sched_new(e, &so, &s, &err), MU_E_ARG);
    free(t.buf);
    t.buf = NULL;
    free(p);
    mu_engine_free(e);
    mu_model_close(m);
}

/* Four speculating jobs sharing every batch: whatever the drafts, each
 * job's events are the same (a job whose drafting is on rounds solo on
 * every step, and the prompts are evaluated in the same first batch both
 * times). The scripted drafts never pause, unlike the n-gram drafter, whose
 * paused steps round with the batch as plain decoding does. */
static void run_shared(mu_engine *e, mu_gen_req *q, const int *kinds, trace *ref, trace *t) {
    const int V = mu_model_get_info(mu_engine_model(e))->n_vocab;
    static int32_t scripts[4][4096 + 16];
    mu_err err = {0};
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 4, .n_ctx = 1024, .hold_until = 4, .queue_max = 4};
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    mu_job *j[4];
    for (int k = 0; k < 4; k++) {
        mu_gen_req r = with_drafts(&q[k], kinds[k], &ref[k], scripts[k], V, 5 + (uint64_t)k);
        assert_int_equal(mu_sched_submit(s, &r, 1, &j[k], &err), 0);
    }
    for (int k = 0; k < 4; k++) {
        read_trace(j[k], &t[k]);
        mu_job_free(j[k]);
    }
    mu_sched_free(s);
}

static void test_sched_shared(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    c.n_ctx = 1024;
    mu_model *m;
    mu_engine *e;
    assert_int_equal(mini_open(dir, &c, 1, &m, &e), 0);
    const int V = mu_model_get_info(m)->n_vocab;
    static int32_t p[4][200];
    mu_gen_req q[4];
    static trace none[4], a[4], b[4];
    for (int k = 0; k < 4; k++) {
        mk_prompt(p[k], 20 + 30 * k, V, (uint64_t)k + 40, true);
        q[k] = (mu_gen_req){.prompt = p[k], .n_prompt = 20 + 30 * k, .n_predict = 40, .ignore_eos = true,
                            .no_text = true, .logprobs = true};
    }
    const int wrong[4] = {D_WRONG, D_WRONG, D_WRONG, D_WRONG}, mixed[4] = {D_RIGHT, D_SHORT, D_HALF, D_RANDOM};
    run_shared(e, q, wrong, none, a);     /* scripts from an empty trace: drafts of token 1 */
    run_shared(e, q, mixed, a, b);        /* "right" is a's output */
    for (int k = 0; k < 4; k++) {
        same(&a[k], &b[k], D_NAMES[mixed[k]], k);
    }
    assert_int_equal(b[0].st.n_draft_accepted, b[0].st.n_draft);
    assert_true(b[0].st.n_draft > 30);
    for (int k = 0; k < 4; k++) {
        free(a[k].buf);
        free(b[k].buf);
        a[k].buf = b[k].buf = NULL;
    }
    mu_engine_free(e);
    mu_model_close(m);
}

/* The cost model's decisions (spec_cost.h), by counts: alone the threshold
 * is MU_SPEC_P_MIN; with other jobs' rows in the forward a draft must beat
 * the batch's tokens per cost, so middling acceptance stops drafting and
 * high acceptance keeps it. */
static void test_spec_cost(void **state) {
    (void)state;
    int acc[MU_SPEC_DRAFT_MAX] = {0}, n[MU_SPEC_DRAFT_MAX] = {0};
    assert_true(mu_spec_batch_rate(1, MU_SPEC_P_MIN) == 1.0);
    for (int r = 1; r < 64; r++)
        assert_true(mu_spec_batch_rate(r + 1, MU_SPEC_P_MIN) > mu_spec_batch_rate(r, MU_SPEC_P_MIN));
    assert_true(mu_spec_batch_rate(64, MU_SPEC_P_MIN) < 1 / MU_SPEC_P_MIN);
    assert_int_equal(mu_spec_draft_len(acc, n, 8, MU_SPEC_P_MIN), 3); /* the prior: a new job drafts 3 */
    assert_int_equal(mu_spec_draft_len(acc, n, 8, MU_SPEC_P_MIN * mu_spec_batch_rate(4, MU_SPEC_P_MIN)), 1);
    acc[0] = 6, n[0] = 10; /* 60 % of first drafts accepted */
    assert_true(mu_spec_draft_len(acc, n, 8, MU_SPEC_P_MIN) >= 1);
    assert_int_equal(mu_spec_draft_len(acc, n, 8, MU_SPEC_P_MIN * mu_spec_batch_rate(2, MU_SPEC_P_MIN)), 1);
    assert_int_equal(mu_spec_draft_len(acc, n, 8, MU_SPEC_P_MIN * mu_spec_batch_rate(4, MU_SPEC_P_MIN)), 0);
    for (int k = 0; k < MU_SPEC_DRAFT_MAX; k++) acc[k] = 199, n[k] = 200; /* nearly always right */
    assert_int_equal(mu_spec_draft_len(acc, n, 8, MU_SPEC_P_MIN * mu_spec_batch_rate(4, MU_SPEC_P_MIN)), 8);
    /* a full batch leaves a shorter draft: only the nearly sure positions pay */
    const int full = mu_spec_draft_len(acc, n, 64, MU_SPEC_P_MIN * mu_spec_batch_rate(64, MU_SPEC_P_MIN));
    assert_true(full >= 1 &&
                full < mu_spec_draft_len(acc, n, 64, MU_SPEC_P_MIN * mu_spec_batch_rate(4, MU_SPEC_P_MIN)));
    /* in a busy batch a draft also pays for its solo block's own forward:
     * nearly always right, 8 drafts still pay with 4 rows; right 94 % of the
     * time they do not, though each position alone clears the threshold */
    const double r4 = mu_spec_batch_rate(4, MU_SPEC_P_MIN);
    const double fx = mu_spec_solo_fixed(MU_SPEC_P_MIN, false);
    assert_true(fabs(fx - 0.6) < 1e-12 && mu_spec_solo_fixed(MU_SPEC_P_MIN_DEVICE, true) == 0);
    assert_int_equal(mu_spec_block_len(acc, n, 8, r4 * fx, r4 * MU_SPEC_P_MIN), 8);
    int acc94[MU_SPEC_DRAFT_MAX], n94[MU_SPEC_DRAFT_MAX];
    for (int k = 0; k < MU_SPEC_DRAFT_MAX; k++) acc94[k] = 188, n94[k] = 200;
    assert_int_equal(mu_spec_draft_len(acc94, n94, 4, MU_SPEC_P_MIN * r4), 4);
    assert_int_equal(mu_spec_block_len(acc94, n94, 4, r4 * fx, r4 * MU_SPEC_P_MIN), 0);
    /* cheaper rows (a GPU's): more rows per cost, 4 / (0.9 + 0.4) at 0.1 */
    assert_true(fabs(mu_spec_batch_rate(4, 0.1) - 4 / 1.3) < 1e-12);
    assert_true(mu_spec_draft_expect(acc, n, 8) > 7.5 && mu_spec_draft_expect(acc, n, 8) < 8);
    acc[0] = 0, n[0] = 50; /* never right: drafts nothing, alone or busy */
    assert_int_equal(mu_spec_draft_len(acc, n, 8, MU_SPEC_P_MIN), 0);

    /* a DFlash job (mu_spec_block_len): a pass of 0.5 step and 0.45 a draft */
    memset(acc, 0, sizeof acc);
    memset(n, 0, sizeof n);
    assert_int_equal(mu_spec_block_len(acc, n, 15, 0, 0.45), 2);   /* the prior, no pass to pay */
    assert_int_equal(mu_spec_block_len(acc, n, 15, 0.5, 0.45), 0);  /* the prior does not cover a pass */
    n[0] = 1; /* one rejected first draft: does not pay */
    assert_int_equal(mu_spec_block_len(acc, n, 15, 0.5, 0.45), 0);
    for (int k = 0; k < MU_SPEC_DRAFT_MAX; k++) acc[k] = 30, n[k] = 32; /* after that, right 94 % of the time */
    acc[0] = 29;
    const int nd = mu_spec_block_len(acc, n, 15, 0.5, 0.45);
    assert_true(nd >= 8 && nd <= 15);
    assert_int_equal(mu_spec_block_len(acc, n, 4, 0.5, 0.45), 4); /* capped at k */
    /* 70 % at every position (the bundled drafter on free text): the draft
     * length pays (2 positions) but not with a pass of 0.5; a cheaper pass
     * (0.2) does */
    for (int k = 0; k < MU_SPEC_DRAFT_MAX; k++) acc[k] = 21, n[k] = 30;
    assert_int_equal(mu_spec_block_len(acc, n, 15, 0, 0.45), 2);
    assert_int_equal(mu_spec_block_len(acc, n, 15, 0.5, 0.45), 0);
    assert_int_equal(mu_spec_block_len(acc, n, 15, 0.2, 0.45), 2);
}

/* Four n-gram jobs sharing every batch of the bundled model: the busy rule
 * turns drafting off for steps where it does not pay (counted; at these
 * jobs' rates a solo block's own forward is not paid for in a batch of 4,
 * so they decode plainly), while the same jobs alone draft and never count
 * a busy step. */
static void test_sched_busy(void **state) {
    (void)state;
    mu_model *m;
    mu_engine *e;
    mu_err err = {0};
    if (mu_model_open("models/muser-default.gguf", &m, &err)) skip();
    mu_engine_opts eo = {.n_threads = 1};
    assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
    static const char *const texts[4] = {
        "Rename x to count.\n\ndef f(x):\n    total = 0\n    for i in range(x):\n        total += i * x\n\ndef f(count):\n",
        "import os\nimport sys\n\ndef main():\n    print(os.listdir(sys.argv[1]))\n\nimport os\nimport sys\n",
        "ls -la lists all files. ls -la lists all files in long format. The ls command",
        "The history of the printing press"};
    int32_t *p[4];
    int np[4];
    for (int k = 0; k < 4; k++)
        assert_int_equal(mu_tokenize(m, texts[k], strlen(texts[k]), mu_model_get_info(m)->add_bos, false, &p[k], &np[k], &err), 0);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 4, .n_ctx = 512, .hold_until = 4, .queue_max = 4, .spec = MU_SPEC_NGRAM, .draft_max = 8};
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    mu_job *j[4];
    int busy = 0, drafted = 0;
    for (int k = 0; k < 4; k++) {
        mu_gen_req q = {.prompt = p[k], .n_prompt = np[k], .n_predict = 96, .ignore_eos = true, .no_text = true};
        assert_int_equal(mu_sched_submit(s, &q, 1, &j[k], &err), 0);
    }
    static trace t[4];
    for (int k = 0; k < 4; k++) {
        read_trace(j[k], &t[k]);
        mu_job_free(j[k]);
        busy += t[k].st.n_spec_busy;
        drafted += t[k].st.n_draft;
    }
    mu_sched_free(s);
    assert_true(busy > 0);
    int drafted_busy = drafted;
    drafted = 0;
    so.n_slots = 1, so.hold_until = 0;
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    for (int k = 0; k < 4; k++) {
        mu_gen_req q = {.prompt = p[k], .n_prompt = np[k], .n_predict = 96, .ignore_eos = true, .no_text = true};
        run_trace(s, &q, &t[k]);
        assert_int_equal(t[k].st.n_spec_busy, 0);
        drafted += t[k].st.n_draft;
    }
    assert_true(drafted > drafted_busy); /* the repetitive ones draft when alone */
    mu_sched_free(s);
    for (int k = 0; k < 4; k++) {
        free(t[k].buf);
        t[k].buf = NULL;
        free(p[k]);
    }
    mu_engine_free(e);
    mu_model_close(m);
}

static void test_sched_args(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    mu_model *m;
    mu_engine *e;
    assert_int_equal(mini_open(dir, &c, 1, &m, &e), 0);
    mu_err err = {0};
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 128};
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    int32_t p[3] = {1, 2, 3};
    mu_job *j;
    mu_gen_req q = {.prompt = p, .n_prompt = 3, .n_predict = 4, .no_text = true, .spec = MU_SPEC_NGRAM,
                    .draft_max = MU_SPEC_DRAFT_MAX + 1};
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "draft max"));
    q.draft_max = 4;
    q.draft_min = -1;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), MU_E_ARG);
    q.draft_min = 0;
    q.spec = (mu_spec)7;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), MU_E_ARG);
    mu_sched_free(s);
    mu_engine_free(e);
    mu_model_close(m);
    assert_int_equal(mu_spec_parse("ngram"), MU_SPEC_NGRAM);
    assert_int_equal(mu_spec_parse("none"), MU_SPEC_NONE);
    assert_int_equal(mu_spec_parse("script"), -1);
    assert_int_equal(mu_spec_parse("dflash"), MU_SPEC_DFLASH);
    assert_int_equal(mu_spec_parse("eagle3"), -1);
    assert_string_equal(mu_spec_name(MU_SPEC_NGRAM), "ngram");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_solo_mini),
        cmocka_unit_test(test_solo_quant),
        cmocka_unit_test(test_solo_neighbour_tables),
        cmocka_unit_test(test_ngram),
        cmocka_unit_test(test_sched_mini),
        cmocka_unit_test(test_sched_text),
        cmocka_unit_test(test_sched_schema_choices),
        cmocka_unit_test(test_sched_turns),
        cmocka_unit_test(test_sched_default),
        cmocka_unit_test(test_sched_shared),
        cmocka_unit_test(test_spec_cost),
        cmocka_unit_test(test_sched_busy),
        cmocka_unit_test(test_sched_args),
    };
    if (getenv("MU_T")) cmocka_set_test_filter(getenv("MU_T"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
