/* test_engine.c: sessions and the forward pass on a small generated model:
 * state round trip, truncation, the context shift, several sessions in one batch, layer
 * streaming (on_layer), argument errors, the samplers, and the matmuls'
 * split over threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser.h"
#include "../../src/engine/engine.h"
#include "mini_model.h"

static char dir[] = "/tmp/mutest_engine_XXXXXX";
static mu_model *M;
static mu_engine *E;
static int V;

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    mini_cfg c = mini_default();
    c.n_ctx = 1024;
    if (mini_open(dir, &c, 2, &M, &E)) return -1;
    V = mu_model_get_info(M)->n_vocab;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    mu_engine_free(E);
    mu_model_close(M);
    rmdir(dir);
    return 0;
}

static void prompt(int32_t *ids, int n, int seed) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + seed * 11 + 3) % 70);
}

static void feed(mu_session *s, const int32_t *ids, int n) {
    mu_err err = {0};
    mu_batch_item it = {.s = s, .tokens = ids, .n_tokens = n};
    if (mu_forward(E, &it, 1, &err)) fail_msg("forward: %s", err.msg);
}

static double max_rel_diff(const float *a, const float *b, int n) {
    double md = 0, mx = 1e-9;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)a[i]));
    }
    return md / mx;
}

/* Saving a session's state and loading it into a new one, or copying the
 * session, continues exactly. */
static void test_state_round_trip(void **state) {
    (void)state;
    mu_err err = {0};
    mu_session *a, *b;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    int32_t ids[20];
    prompt(ids, 20, 1);
    feed(a, ids, 19);
    size_t n = mu_session_state_bytes(a), w;
    uint8_t *buf = malloc(n);
    assert_int_equal(mu_session_state_save(a, buf, n, &w, &err), 0);
    assert_int_equal(w, n);
    /* header as docs/kv-state.md specifies it */
    uint32_t h[6];
    memcpy(h, buf, sizeof h);
    assert_memory_equal(buf, "MUKV", 4);
    assert_int_equal(h[1], 1);
    assert_int_equal(h[2], 4);                  /* n_layer */
    assert_int_equal(h[3], 2 * 32);             /* n_kv */
    assert_int_equal(h[4], 5);                  /* n_swa */
    assert_int_equal(h[5], 19);                 /* n_past */
    uint32_t lo, cnt;
    memcpy(&lo, buf + 24, 4);
    memcpy(&cnt, buf + 28, 4);
    assert_int_equal(lo + cnt, 19);
    assert_int_equal(mu_session_state_load(b, buf, n, &err), 0);
    assert_int_equal(mu_session_n_past(b), 19);
    feed(a, ids + 19, 1);
    feed(b, ids + 19, 1);
    assert_memory_equal(mu_session_logits(a, -1), mu_session_logits(b, -1), (size_t)V * sizeof(float));
    /* corrupted or truncated states are refused and leave the session alone */
    buf[0] = 'X';
    assert_int_equal(mu_session_state_load(b, buf, n, &err), MU_E_FORMAT);
    buf[0] = 'M';
    assert_int_equal(mu_session_state_load(b, buf, n - 1, &err), MU_E_FORMAT);
    assert_int_equal(mu_session_n_past(b), 20);
    /* a copy (n choices' members): continues as the source does, past its
     * ring's wrap (n_swa 5); a context too short for it is refused */
    mu_session *c, *d;
    assert_int_equal(mu_session_new(E, 64, &c, &err), 0);
    assert_int_equal(mu_session_new(E, 16, &d, &err), 0);
    feed(c, ids, 3); /* cells to overwrite */
    assert_int_equal(mu_session_copy(c, a, &err), 0);
    assert_int_equal(mu_session_n_past(c), 20);
    assert_int_equal(mu_session_copy(d, a, &err), MU_E_ARG);
    int32_t more[3];
    prompt(more, 3, 4);
    feed(a, more, 3);
    feed(c, more, 3);
    assert_memory_equal(mu_session_logits(a, -1), mu_session_logits(c, -1), (size_t)V * sizeof(float));
    free(buf);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(c);
    mu_session_free(d);
}

/* Truncating and re-feeding gives the same next-token distribution (within
 * rounding: chunking changes llama.cpp's summation order, and ours). */
static void test_truncate(void **state) {
    (void)state;
    mu_err err = {0};
    mu_session *a, *b;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    int32_t ids[30], other[30];
    prompt(ids, 30, 2);
    prompt(other, 30, 5);
    feed(a, ids, 30);
    feed(b, ids, 12);
    feed(b, other, 10);
    assert_int_equal(mu_session_truncate(b, 12, &err), 0);
    feed(b, ids + 12, 18);
    assert_true(max_rel_diff(mu_session_logits(a, -1), mu_session_logits(b, -1), V) < 1e-4);
    assert_int_equal(mu_session_truncate(b, 31, &err), MU_E_ARG);
    mu_session_free(a);
    mu_session_free(b);
}

static void noop_layer(void *user, int il, int pos0, int n) { (void)user, (void)il, (void)pos0, (void)n; }

/* Context shift (shift.c; its tokens are checked against llama.cpp by the
 * model tier's shift-check.py): a shifted session refuses every access by
 * position, a truncation re-places tokens in the cells they had (the same
 * logits, bit for bit), several tokens in one forward land as one at a time
 * do (within rounding), a truncation past rows the ring gave up is refused,
 * and an emptied session is plain again. */
static void test_shift(void **state) {
    (void)state;
    mu_err err = {0};
    mu_session *a;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    int32_t ids[70];
    prompt(ids, 70, 3);
    feed(a, ids, 60);
    assert_int_equal(mu_session_shift(a, 1, 0, &err), MU_E_ARG);
    assert_int_equal(mu_session_shift(a, 40, 21, &err), MU_E_ARG);
    assert_false(mu_session_shifted(a));
    assert_int_equal(mu_session_shift(a, 1, 29, &err), 0);
    assert_true(mu_session_shifted(a));
    assert_int_equal(mu_session_n_past(a), 31);
    uint16_t row[2 * 2 * 32];
    assert_int_equal(mu_session_kv_read(a, 0, 0, 1, row, row + 64, &err), MU_E_STATE);
    assert_non_null(strstr(err.msg, "shifted"));
    assert_int_equal(mu_session_kv_write(a, 0, 0, 1, row, row + 64, &err), MU_E_STATE);
    assert_int_equal(mu_session_kv_commit(a, 31, &err), MU_E_STATE);
    size_t n = mu_session_state_bytes(a), w;
    uint8_t *buf = malloc(n);
    assert_int_equal(mu_session_state_save(a, buf, n, &w, &err), MU_E_STATE);
    free(buf);
    mu_batch_item it = {.s = a, .tokens = ids, .n_tokens = 1, .on_layer = noop_layer};
    assert_int_equal(mu_forward(E, &it, 1, &err), MU_E_STATE);
    /* five decode steps, twice: truncation frees the cells, the tokens take them again */
    float *l1 = malloc((size_t)V * sizeof(float));
    for (int i = 0; i < 5; i++) feed(a, ids + 60 + i, 1);
    memcpy(l1, mu_session_logits(a, -1), (size_t)V * sizeof(float));
    assert_true(mu_session_can_truncate(a, 31));
    assert_int_equal(mu_session_truncate(a, 31, &err), 0);
    for (int i = 0; i < 5; i++) feed(a, ids + 60 + i, 1);
    assert_memory_equal(l1, mu_session_logits(a, -1), (size_t)V * sizeof(float));
    /* a second shift on top; then b, with the same history, takes five
     * tokens in one forward where a takes them one at a time */
    mu_session *b;
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    feed(b, ids, 60);
    assert_int_equal(mu_session_shift(b, 1, 29, &err), 0);
    for (int i = 0; i < 5; i++) feed(b, ids + 60 + i, 1);
    assert_int_equal(mu_session_shift(a, 3, 10, &err), 0);
    assert_int_equal(mu_session_shift(b, 3, 10, &err), 0);
    assert_int_equal(mu_session_n_past(a), 26);
    for (int i = 0; i < 5; i++) feed(a, ids + i, 1);
    mu_batch_item bi = {.s = b, .tokens = ids, .n_tokens = 5, .all_logits = true};
    assert_int_equal(mu_forward(E, &bi, 1, &err), 0);
    /* within rounding: one forward of 5 rounds as a batch, and on this
     * small random model batched and lone rows part by up to ~3e-4 without
     * any shift too */
    assert_true(max_rel_diff(mu_session_logits(a, -1), mu_session_logits(b, 4), V) < 1e-3);
    /* after a shift the ring reuses the first cell outside the window, as
     * llama.cpp's does: five steps later the rows before them are gone */
    assert_false(mu_session_can_truncate(a, 26));
    assert_int_equal(mu_session_truncate(a, 26, &err), MU_E_STATE);
    assert_int_equal(mu_session_n_past(a), 31);
    mu_session_free(b);
    /* emptied: plain again, rows readable by position */
    assert_int_equal(mu_session_truncate(a, 0, &err), 0);
    assert_false(mu_session_shifted(a));
    feed(a, ids, 3);
    assert_int_equal(mu_session_kv_read(a, 0, 0, 1, row, row + 64, &err), 0);
    free(l1);
    mu_session_free(a);
}

/* Two sessions in one batch compute what each computes alone. */
static void test_batch_of_sessions(void **state) {
    (void)state;
    mu_err err = {0};
    mu_session *a, *b, *c, *d;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &c, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &d, &err), 0);
    int32_t p1[9], p2[14];
    prompt(p1, 9, 3);
    prompt(p2, 14, 4);
    feed(a, p1, 9);
    feed(b, p2, 14);
    mu_batch_item items[2] = {{.s = c, .tokens = p1, .n_tokens = 9}, {.s = d, .tokens = p2, .n_tokens = 14}};
    assert_int_equal(mu_forward(E, items, 2, &err), 0);
    assert_true(max_rel_diff(mu_session_logits(a, -1), mu_session_logits(c, -1), V) < 1e-4);
    assert_true(max_rel_diff(mu_session_logits(b, -1), mu_session_logits(d, -1), V) < 1e-4);
    /* all_logits: one row per token */
    mu_batch_item all = {.s = a, .tokens = p1, .n_tokens = 3, .all_logits = true};
    assert_int_equal(mu_forward(E, &all, 1, &err), 0);
    assert_non_null(mu_session_logits(a, 2));
    assert_null(mu_session_logits(a, 3));
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(c);
    mu_session_free(d);
}

/* Embedding rows (mu_batch_item.embd): the same rows alone or next to a
 * generating session, no logits for their session, and the other session's
 * logits as when it runs alone. */
static void test_embd_rows(void **state) {
    (void)state;
    mu_err err = {0};
    const int D = mu_model_get_info(M)->n_embd;
    mu_session *a, *b, *c, *d;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &c, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &d, &err), 0);
    int32_t p1[9], p2[14];
    prompt(p1, 9, 5);
    prompt(p2, 14, 6);
    float *e1 = calloc((size_t)9 * D, sizeof(float)), *e2 = calloc((size_t)9 * D, sizeof(float));
    assert_non_null(e1);
    assert_non_null(e2);
    mu_batch_item one = {.s = a, .tokens = p1, .n_tokens = 9, .embd = e1};
    assert_int_equal(mu_forward(E, &one, 1, &err), 0);
    assert_null(mu_session_logits(a, -1));
    assert_int_equal(mu_session_n_past(a), 9);
    feed(c, p2, 14);
    mu_batch_item two[2] = {{.s = b, .tokens = p1, .n_tokens = 9, .embd = e2}, {.s = d, .tokens = p2, .n_tokens = 14}};
    assert_int_equal(mu_forward(E, two, 2, &err), 0);
    assert_null(mu_session_logits(b, -1));
    assert_true(max_rel_diff(e1, e2, 9 * D) < 1e-5);
    assert_true(max_rel_diff(mu_session_logits(c, -1), mu_session_logits(d, -1), V) < 1e-4);
    /* every row was written, and each is RMS-normed times the norm weights:
     * not all zero */
    for (int t = 0; t < 9; t++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)e1[(size_t)t * D + i] * e1[(size_t)t * D + i];
        assert_true(ss > 0 && isfinite(ss));
    }
    free(e1);
    free(e2);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(c);
    mu_session_free(d);
}

/* Layer streaming (mu_batch_item.on_layer): per chunk, every layer in
 * order, each of the item's positions once per layer; the rows read inside
 * the callback are the rows the session holds afterwards, and listening
 * changes no result (the logits and rows of a session run without it, bit
 * for bit, next to another session in the same batch). */
#define LS_N 21
#define LS_MAX_CALLS 64
typedef struct {
    mu_session *s;
    int calls, il[LS_MAX_CALLS], pos0[LS_MAX_CALLS], n[LS_MAX_CALLS];
    int bad_read;
    uint16_t *k, *v; /* [layer][LS_N][n_kv], as read in the callback */
} ls_rec;

static void ls_on_layer(void *user, int il, int pos0, int n) {
    ls_rec *r = user;
    if (r->calls < LS_MAX_CALLS) {
        r->il[r->calls] = il;
        r->pos0[r->calls] = pos0;
        r->n[r->calls] = n;
    }
    r->calls++;
    mu_err err = {0};
    size_t w = (size_t)E->n_kv;
    if (pos0 + n > LS_N || mu_session_kv_read(r->s, il, pos0, n, r->k + ((size_t)il * LS_N + pos0) * w,
                                              r->v + ((size_t)il * LS_N + pos0) * w, &err))
        r->bad_read++;
}

static void test_layer_stream(void **state) {
    (void)state;
    mu_err err = {0};
    const int L = mu_model_get_info(M)->n_layer, ub = E->ubatch;
    const size_t w = (size_t)E->n_kv;
    mu_session *a, *b, *o1, *o2;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &o1, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &o2, &err), 0);
    int32_t p[LS_N], q[7];
    prompt(p, LS_N, 8);
    prompt(q, 7, 9);
    ls_rec r = {.s = a};
    r.k = calloc((size_t)L * LS_N * w, sizeof(uint16_t));
    r.v = calloc((size_t)L * LS_N * w, sizeof(uint16_t));
    assert_non_null(r.k);
    assert_non_null(r.v);
    E->ubatch = 8; /* several chunks: 7 + 8 + 8 + 5 tokens, the item's positions split 1 | 8 | 8 | 4 */
    mu_batch_item pre = {.s = b, .tokens = q, .n_tokens = 7};
    mu_batch_item ref[2] = {{.s = o2, .tokens = q, .n_tokens = 7}, {.s = o1, .tokens = p, .n_tokens = LS_N}};
    mu_batch_item two[2] = {pre, {.s = a, .tokens = p, .n_tokens = LS_N, .on_layer = ls_on_layer, .on_layer_user = &r}};
    int rc1 = mu_forward(E, ref, 2, &err), rc2 = mu_forward(E, two, 2, &err);
    E->ubatch = ub;
    assert_int_equal(rc1, 0);
    assert_int_equal(rc2, 0);
    static const int want_pos0[4] = {0, 1, 9, 17}, want_n[4] = {1, 8, 8, 4};
    assert_int_equal(r.calls, 4 * L);
    assert_int_equal(r.bad_read, 0);
    for (int c = 0; c < 4; c++)
        for (int il = 0; il < L; il++) {
            const int i = c * L + il;
            assert_int_equal(r.il[i], il);
            assert_int_equal(r.pos0[i], want_pos0[c]);
            assert_int_equal(r.n[i], want_n[c]);
        }
    /* the rows as read in the callback are the session's (where a sliding
     * layer's ring still holds them) and the reference's, bit for bit */
    uint16_t *k = malloc(w * sizeof *k), *v = malloc(w * sizeof *v), *k2 = malloc(w * sizeof *k2),
             *v2 = malloc(w * sizeof *v2);
    assert_non_null(k);
    assert_non_null(v2);
    int compared = 0;
    for (int il = 0; il < L; il++)
        for (int pos = 0; pos < LS_N; pos++) {
            if (mu_session_kv_read(a, il, pos, 1, k, v, &err)) continue;
            assert_int_equal(mu_session_kv_read(o1, il, pos, 1, k2, v2, &err), 0);
            const size_t at = ((size_t)il * LS_N + pos) * w;
            assert_memory_equal(k, r.k + at, w * sizeof *k);
            assert_memory_equal(v, r.v + at, w * sizeof *v);
            assert_memory_equal(k2, r.k + at, w * sizeof *k);
            assert_memory_equal(v2, r.v + at, w * sizeof *v);
            compared++;
        }
    assert_true(compared >= 2 * LS_N);
    assert_memory_equal(mu_session_logits(a, -1), mu_session_logits(o1, -1), (size_t)V * sizeof(float));
    assert_memory_equal(mu_session_logits(b, -1), mu_session_logits(o2, -1), (size_t)V * sizeof(float));
    free(k);
    free(v);
    free(k2);
    free(v2);
    free(r.k);
    free(r.v);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(o1);
    mu_session_free(o2);
}

static void test_forward_errors(void **state) {
    (void)state;
    mu_err err = {0};
    mu_session *a;
    assert_int_equal(mu_session_new(E, 8, &a, &err), 0);
    int32_t bad = V, ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    mu_batch_item it = {.s = a, .tokens = &bad, .n_tokens = 1};
    assert_int_equal(mu_forward(E, &it, 1, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "token id out of range"));
    it = (mu_batch_item){.s = a, .tokens = ids, .n_tokens = 9};
    assert_int_equal(mu_forward(E, &it, 1, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "context full"));
    mu_batch_item twice[2] = {{.s = a, .tokens = ids, .n_tokens = 1}, {.s = a, .tokens = ids, .n_tokens = 1}};
    assert_int_equal(mu_forward(E, twice, 2, &err), MU_E_ARG);
    assert_int_equal(mu_session_n_past(a), 0); /* nothing half-done */
    mu_session *big;
    assert_int_equal(mu_session_new(E, 1 << 20, &big, &err), MU_E_ARG);
    mu_session_free(a);
}

static void test_sampling(void **state) {
    (void)state;
    float l[8] = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f, 0.5f, -3.0f, 1.0f};
    mu_err err = {0};
    mu_sampler *s;
    mu_sample_params p = mu_sample_defaults();
    p.temp = 0;
    assert_int_equal(mu_sampler_new(&p, 8, &s, &err), 0);
    assert_int_equal(mu_sampler_sample(s, l), 1);
    mu_sampler_free(s);
    /* top-k 1 is greedy at any temperature */
    p = mu_sample_defaults();
    p.temp = 5;
    p.top_k = 1;
    assert_int_equal(mu_sampler_new(&p, 8, &s, &err), 0);
    for (int i = 0; i < 20; i++) assert_int_equal(mu_sampler_sample(s, l), 1);
    mu_sampler_free(s);
    /* no truncation, temperature 1: frequencies follow the softmax */
    p = (mu_sample_params){.temp = 1, .top_k = 0, .top_p = 1, .min_p = 0, .seed = 42};
    assert_int_equal(mu_sampler_new(&p, 8, &s, &err), 0);
    int cnt[8] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++) cnt[mu_sampler_sample(s, l)]++;
    mu_sampler_free(s);
    int32_t ids[8];
    float pr[8];
    mu_top_probs(l, 8, 8, ids, pr);
    for (int k = 0; k < 8; k++) {
        double f = (double)cnt[ids[k]] / N;
        assert_true(fabs(f - pr[k]) < 0.01);
        if (k) assert_true(pr[k] <= pr[k - 1]);
    }
    /* min-p 0.5 keeps only tokens with p >= p_max / 2: ids 1 and 3 */
    p = (mu_sample_params){.temp = 1, .top_k = 0, .top_p = 1, .min_p = 0.5f, .seed = 1};
    assert_int_equal(mu_sampler_new(&p, 8, &s, &err), 0);
    for (int i = 0; i < 200; i++) {
        int32_t t = mu_sampler_sample(s, l);
        assert_true(t == 1 || t == 3);
    }
    mu_sampler_free(s);
    /* same seed, same sequence */
    p = (mu_sample_params){.temp = 1.5f, .top_k = 0, .top_p = 1, .min_p = 0, .seed = 9};
    mu_sampler *s2;
    assert_int_equal(mu_sampler_new(&p, 8, &s, &err), 0);
    assert_int_equal(mu_sampler_new(&p, 8, &s2, &err), 0);
    for (int i = 0; i < 100; i++) assert_int_equal(mu_sampler_sample(s, l), mu_sampler_sample(s2, l));
    mu_sampler_free(s);
    mu_sampler_free(s2);
}

/* The matmuls' rows split over the threads (forward.c, job_matmul), counted
 * by the engine's per-thread work counters: every multiply-add of the
 * model's matmuls is done exactly once, and the logits and the decode step
 * after them are bit-identical at every thread count (at 3 and 5 threads
 * the decode step's full layers take attn.c's three-pass split); also when
 * thread 1 starts each matmul job only after the others have taken every
 * block, its share included (the hook mm_hold: a thread that is slow or
 * descheduled), when it does none of their multiply-adds, and each
 * per-token job (quantization, norms, q/k) only after they have taken
 * every token, when it takes none. */
static void test_thread_split(void **state) {
    (void)state;
    const mini_cfg c = mini_default(); /* rows: q, gate 128, k, v, wo, down 64, up 96, vocab 80 */
    const int T = 21, E_ = c.n_embd, F = c.n_ff, NQ = c.n_head * c.head_dim, NKV = c.n_head_kv * c.head_dim;
    /* T tokens through every layer but the last FFN (output rows only: 1),
     * then the output matrix for one row; then one decode step */
    const uint64_t per_tok = (uint64_t)E_ * (2 * NQ + 2 * NKV) + (uint64_t)NQ * E_;
    const uint64_t ffn = (uint64_t)E_ * 2 * F + (uint64_t)F * E_;
    const uint64_t want = c.n_layer * per_tok * (T + 1) + ((uint64_t)(c.n_layer - 1) * T + 1 + c.n_layer) * ffn +
                          2 * (uint64_t)c.n_vocab * E_;
    float *ref = malloc(2 * (size_t)V * sizeof(float));
    assert_non_null(ref);
    const int nths[] = {1, 2, 3, 5, 2, 3, 5}, holds[] = {-1, -1, -1, -1, 1, 1, 1};
    for (size_t k = 0; k < sizeof nths / sizeof nths[0]; k++) {
        char d[] = "/tmp/mutest_split_XXXXXX";
        assert_non_null(mkdtemp(d));
        mu_model *m;
        mu_engine *e;
        assert_int_equal(mini_open(d, &c, nths[k], &m, &e), 0);
        rmdir(d);
        e->attn_split_min = 0; /* the decode step's full layers split over 3 and 5 threads (attn.c) */
        e->mm_hold = holds[k];
        mu_err err = {0};
        mu_session *s;
        assert_int_equal(mu_session_new(e, 64, &s, &err), 0);
        int32_t ids[T];
        prompt(ids, T, 6);
        mu_batch_item it = {.s = s, .tokens = ids, .n_tokens = T};
        assert_int_equal(mu_forward(e, &it, 1, &err), 0);
        float *got = malloc(2 * (size_t)V * sizeof(float));
        assert_non_null(got);
        memcpy(got, mu_session_logits(s, -1), (size_t)V * sizeof(float));
        it = (mu_batch_item){.s = s, .tokens = ids + 3, .n_tokens = 1};
        assert_int_equal(mu_forward(e, &it, 1, &err), 0);
        memcpy(got + V, mu_session_logits(s, -1), (size_t)V * sizeof(float));
        uint64_t sum = 0;
        int stolen = 0, toks = 0;
        for (int i = 0; i < nths[k]; i++) {
            sum += e->work[i].macs;
            stolen += e->work[i].stolen;
            toks += e->work[i].toks;
        }
        assert_int_equal(sum, want);
        assert_true(toks > 0);
        if (holds[k] >= 0) {
            assert_true(e->work[holds[k]].macs == 0);
            assert_true(stolen > 0); /* of the last job: thread 1's share, taken by the others */
            assert_int_equal(e->work[holds[k]].toks, 0);
        }
        if (k == 0)
            memcpy(ref, got, 2 * (size_t)V * sizeof(float));
        else
            assert_memory_equal(got, ref, 2 * (size_t)V * sizeof(float));
        free(got);
        mu_session_free(s);
        mu_engine_free(e);
        mu_model_close(m);
    }
    free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_shift),
        cmocka_unit_test(test_batch_of_sessions),
        cmocka_unit_test(test_embd_rows),
        cmocka_unit_test(test_layer_stream),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_thread_split),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
