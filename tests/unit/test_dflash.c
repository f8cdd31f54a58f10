/* test_dflash.c: DFlash drafters (docs/speculative.md "DFlash").
 * File: `muser gen --dflash`'s writer makes a drafter the binding reads
 * back with the keys it was given (target layers, block size, mask token),
 * and the binding refuses what muser cannot run, and broken files, with
 * one precise message each.
 * Engine: capturing the target's layer inputs (mu_batch_item.feat) changes
 * no logit bit, the layer-0 input is the normed embedding, and each layer's
 * row is what the next layer reads. Drafter: drafting is deterministic,
 * depends on the injected rows (present positions only), and forgets the
 * truncated ones.
 * Scheduler: every event of a job with --spec dflash equals plain
 * decoding's (greedy and sampled, many prompts, limits inside blocks), the
 * counters add up, and drafts do get accepted on a small vocabulary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "../../include/muser_gen.h"
#include "../../include/muser_synth.h"
#include "../../src/model/dflash.h"
#include "../../src/model/model.h"
#include "mini_model.h"

static char dir[] = "/tmp/mutest_dflash_XXXXXX";
static char tpath[600], dpath[600];

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    snprintf(tpath, sizeof tpath, "%s/t.gguf", dir);
    snprintf(dpath, sizeof dpath, "%s/d.gguf", dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(tpath);
    unlink(dpath);
    rmdir(dir);
    return 0;
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* The mini target at tpath and a drafter for it at dpath. */
static void write_pair(const mini_cfg *c, const mu_synth_dflash_opts *o) {
    assert_int_equal(mini_write(tpath, c), 0);
    mu_synth_dflash_opts d = *o;
    d.target = tpath;
    mu_err err = {0};
    if (mu_synth_dflash_write(&d, dpath, &err)) fail_msg("dflash write: %s", err.msg);
}

static void open_target(const mini_cfg *c, mu_model **m, mu_engine **e) {
    mu_err err = {0};
    assert_int_equal(mu_model_open(tpath, m, &err), 0);
    mu_engine_opts eo = {.n_threads = 2};
    assert_int_equal(mu_engine_new(*m, &eo, e, &err), 0);
    (void)c;
}

/* ---- file -------------------------------------------------------------- */

static void test_write_bind(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    mu_synth_dflash_opts o;
    mu_synth_dflash_defaults(&o);
    int tl[2] = {1, 3};
    o.target_layers = tl;
    o.n_target_layers = 2;
    o.block_size = 9;
    o.n_layer = 2;
    o.mask_id = 77;
    write_pair(&c, &o);
    mu_dflash_model *m;
    mu_err err = {0};
    if (mu_dflash_open(dpath, &m, &err)) fail_msg("open: %s", err.msg);
    assert_int_equal(m->n_layer, 2);
    assert_int_equal(m->n_embd, c.n_embd);
    assert_int_equal(m->block_size, 9);
    assert_int_equal(m->n_target, 2);
    assert_int_equal(m->target_layers[0], 1);
    assert_int_equal(m->target_layers[1], 3);
    assert_int_equal(m->mask_id, 77);
    assert_null(m->tok_embd); /* the target's embedding and head */
    assert_null(m->output);
    assert_int_equal(m->fc->ne[0], 2 * c.n_embd);
    assert_false(m->causal);
    mu_dflash_close(m);

    /* defaults: three layers spread over the target's, the last id as mask
     * (the mini target has no tokenizer); own head */
    mu_synth_dflash_defaults(&o);
    o.own_head = true;
    write_pair(&c, &o);
    if (mu_dflash_open(dpath, &m, &err)) fail_msg("open: %s", err.msg);
    assert_int_equal(m->n_target, 3);
    assert_int_equal(m->target_layers[0], 1);
    assert_int_equal(m->target_layers[1], 2);
    assert_int_equal(m->target_layers[2], 3);
    assert_int_equal(m->mask_id, c.n_vocab - 1);
    assert_int_equal(m->block_size, 16);
    assert_non_null(m->tok_embd);
    assert_int_equal(m->n_vocab, c.n_vocab);
    mu_dflash_close(m);

    /* the writer's own checks */
    mu_synth_dflash_defaults(&o);
    o.target = tpath;
    int bad[1] = {4};
    o.target_layers = bad;
    o.n_target_layers = 1;
    assert_int_equal(mu_synth_dflash_write(&o, dpath, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "target layer 4"));
    o.n_target_layers = 0;
    o.type = MU_SYNTH_Q4_K;
    assert_int_equal(mu_synth_dflash_write(&o, dpath, &err), MU_E_ARG);
    o.type = MU_SYNTH_F16;
    o.target = NULL;
    assert_int_equal(mu_synth_dflash_write(&o, dpath, &err), MU_E_ARG);
}

/* A drafter file written key by key, to break one thing at a time. */
typedef struct {
    const char *skip_key, *extra_tensor, *arch;
    int64_t fc_rows;  /* 0: right */
    int block_size;   /* 0: 16 */
    int target_layer; /* -1: 1 */
} bad_cfg;

static int write_bad(const bad_cfg *b) {
    mu_gguf_writer *w;
    mu_err err;
    if (mu_gguf_writer_new(&w, &err)) return -1;
    const int E = 32, F = 64, H = 1, HD = 32;
    const char *arch = b->arch ? b->arch : "dflash";
    mu_gguf_writer_set_str(w, "general.architecture", arch, strlen(arch), &err);
#define U(k, v) if (!b->skip_key || strcmp(b->skip_key, k)) mu_gguf_writer_set_u32(w, k, v, &err)
    U("dflash.block_count", 1);
    U("dflash.embedding_length", E);
    U("dflash.feed_forward_length", F);
    U("dflash.attention.head_count", H);
    U("dflash.block_size", (uint32_t)(b->block_size ? b->block_size : 16));
    U("tokenizer.ggml.mask_token_id", 3);
#undef U
    if (!b->skip_key || strcmp(b->skip_key, "dflash.attention.layer_norm_rms_epsilon"))
        mu_gguf_writer_set_f32(w, "dflash.attention.layer_norm_rms_epsilon", 1e-6f, &err);
    int32_t tl[1] = {b->target_layer >= 0 ? b->target_layer : 1};
    if (!b->skip_key || strcmp(b->skip_key, "dflash.target_layers"))
        mu_gguf_writer_set_arr(w, "dflash.target_layers", MU_GGUF_I32, tl, 1, &err);
    struct { const char *n; int64_t a, b; } ts[] = {
        {"fc.weight", E, b->fc_rows ? b->fc_rows : E}, {"enc.output_norm.weight", E, 0}, {"output_norm.weight", E, 0},
        {"blk.0.attn_norm.weight", E, 0}, {"blk.0.attn_q.weight", E, HD}, {"blk.0.attn_k.weight", E, HD},
        {"blk.0.attn_v.weight", E, HD}, {"blk.0.attn_output.weight", HD, E}, {"blk.0.attn_q_norm.weight", HD, 0},
        {"blk.0.attn_k_norm.weight", HD, 0}, {"blk.0.ffn_norm.weight", E, 0}, {"blk.0.ffn_gate.weight", E, F},
        {"blk.0.ffn_up.weight", E, F}, {"blk.0.ffn_down.weight", F, E}, {b->extra_tensor, E, 0}};
    const int nt = b->extra_tensor ? 15 : 14;
    uint64_t total = 0;
    for (int i = 0; i < nt; i++) {
        int64_t ne[2] = {ts[i].a, ts[i].b};
        mu_gguf_writer_add_tensor(w, ts[i].n, MU_T_F32, ts[i].b ? 2 : 1, ne, &err);
        total += mu_gguf_writer_tensor_bytes(w, i);
    }
    if (mu_gguf_writer_open(w, dpath, &err)) return -1;
    float *z = calloc(total / 4 + 1, 4);
    for (int i = 0; i < nt; i++) mu_gguf_writer_write(w, z, mu_gguf_writer_tensor_bytes(w, i), &err);
    free(z);
    int rc = mu_gguf_writer_close(w, &err);
    mu_gguf_writer_free(w);
    return rc;
}

static void expect_refusal(const bad_cfg *b, const char *want) {
    assert_int_equal(write_bad(b), 0);
    mu_dflash_model *m;
    mu_err err = {0};
    int rc = mu_dflash_open(dpath, &m, &err);
    if (rc == 0) fail_msg("accepted a drafter that should fail with: %s", want);
    if (!strstr(err.msg, want)) fail_msg("message '%s' lacks '%s'", err.msg, want);
}

static void test_refusals(void **state) {
    (void)state;
    bad_cfg ok = {.target_layer = -1};
    assert_int_equal(write_bad(&ok), 0);
    mu_dflash_model *m;
    mu_err err = {0};
    if (mu_dflash_open(dpath, &m, &err)) fail_msg("the good file: %s", err.msg);
    mu_dflash_close(m);
    expect_refusal(&(bad_cfg){.target_layer = -1, .arch = "muse-glimmer"}, "not a DFlash drafter");
    expect_refusal(&(bad_cfg){.target_layer = -1, .skip_key = "dflash.target_layers"}, "dflash.target_layers");
    expect_refusal(&(bad_cfg){.target_layer = -1, .skip_key = "tokenizer.ggml.mask_token_id"}, "mask_token_id");
    expect_refusal(&(bad_cfg){.target_layer = -1, .skip_key = "dflash.block_count"}, "dflash.block_count");
    expect_refusal(&(bad_cfg){.target_layer = -1, .fc_rows = 31}, "fc.weight");
    expect_refusal(&(bad_cfg){.target_layer = -1, .block_size = 1}, "block_size");
    expect_refusal(&(bad_cfg){.target_layer = -1, .extra_tensor = "d2t"}, "reduced draft vocabulary");
    expect_refusal(&(bad_cfg){.target_layer = -1, .extra_tensor = "selector_hidden.weight"}, "DFlash2");
    expect_refusal(&(bad_cfg){.target_layer = -1, .extra_tensor = "markov_w1.weight"}, "DSpark");

    /* against a target: a target layer it does not have */
    mini_cfg c = mini_default();
    assert_int_equal(mini_write(tpath, &c), 0);
    mu_model *tm;
    mu_engine *e;
    open_target(&c, &tm, &e);
    assert_int_equal(write_bad(&(bad_cfg){.target_layer = 9}), 0);
    mu_drafter *d;
    assert_int_equal(mu_drafter_open(dpath, e, &d, &err), MU_E_MODEL);
    assert_non_null(strstr(err.msg, "target layer 9"));
    /* a width the target's features do not have (fc reads 32, the target gives 64) */
    assert_int_equal(write_bad(&ok), 0);
    assert_int_equal(mu_drafter_open(dpath, e, &d, &err), MU_E_MODEL);
    mu_engine_free(e);
    mu_model_close(tm);
}

/* ---- engine: the layer inputs ------------------------------------------ */

static void test_capture(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    assert_int_equal(mini_write(tpath, &c), 0);
    mu_model *m;
    mu_engine *e;
    open_target(&c, &m, &e);
    const mu_model_info *I = mu_model_get_info(m);
    const int E = I->n_embd, V = I->n_vocab, N = 37;
    mu_err err = {0};
    mu_session *a, *b;
    assert_int_equal(mu_session_new(e, 256, &a, &err), 0);
    assert_int_equal(mu_session_new(e, 256, &b, &err), 0);
    int32_t toks[N];
    uint64_t seed = 5;
    for (int i = 0; i < N; i++) toks[i] = (int32_t)(rng_next(&seed) % (uint64_t)V);
    const int layers[4] = {0, 1, 2, 3};
    float *feat = calloc((size_t)N * 4 * E, sizeof(float));
    mu_batch_item plain = {.s = a, .tokens = toks, .n_tokens = N, .all_logits = true};
    mu_batch_item cap = {.s = b, .tokens = toks, .n_tokens = N, .all_logits = true, .feat = feat,
                         .feat_layers = layers, .n_feat_layers = 4};
    assert_int_equal(mu_forward(e, &plain, 1, &err), 0);
    assert_int_equal(mu_forward(e, &cap, 1, &err), 0);
    for (int t = 0; t < N; t++)
        assert_memory_equal(mu_session_logits(a, t), mu_session_logits(b, t), (size_t)V * sizeof(float));
    /* layer 0's input is the embedding row after an unweighted RMS norm */
    const mu_gguf_tensor *te = m->tok_embd;
    float *row = malloc((size_t)E * sizeof *row);
    for (int t = 0; t < N; t++) {
        mu_kern_ref()->dequant[te->type]((const uint8_t *)te->data + (size_t)toks[t] * (te->bytes / (size_t)V), row, E);
        double ss = 0;
        for (int i = 0; i < E; i++) ss += (double)row[i] * row[i];
        const float sc = 1.0f / sqrtf((float)(ss / E) + I->eps);
        for (int i = 0; i < E; i++) assert_float_equal(feat[(size_t)t * 4 * E + i], row[i] * sc, 1e-5);
        /* later layers add to the residual stream: their rows differ */
        for (int k = 1; k < 4; k++)
            assert_memory_not_equal(feat + (size_t)t * 4 * E, feat + ((size_t)t * 4 + k) * E, (size_t)E * sizeof(float));
    }
    /* a decode step captures the same layers for its one token; bad layer ids are refused */
    int32_t nx = 3;
    mu_batch_item one = {.s = b, .tokens = &nx, .n_tokens = 1, .feat = feat, .feat_layers = layers + 2,
                         .n_feat_layers = 1};
    assert_int_equal(mu_forward(e, &one, 1, &err), 0);
    const int bad_layer = I->n_layer;
    one.feat_layers = &bad_layer;
    assert_int_equal(mu_forward(e, &one, 1, &err), MU_E_ARG);
    free(row);
    free(feat);
    mu_session_free(a);
    mu_session_free(b);
    mu_engine_free(e);
    mu_model_close(m);
}

/* ---- drafter ------------------------------------------------------------- */

static void test_drafter(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    mu_synth_dflash_opts o;
    mu_synth_dflash_defaults(&o);
    o.block_size = 8;
    o.n_layer = 2;
    write_pair(&c, &o);
    mu_model *m;
    mu_engine *e;
    open_target(&c, &m, &e);
    mu_err err = {0};
    mu_drafter *d;
    if (mu_drafter_open(dpath, e, &d, &err)) fail_msg("drafter: %s", err.msg);
    const mu_drafter_info *di = mu_drafter_get_info(d);
    assert_int_equal(di->block_size, 8);
    assert_int_equal(di->n_feat, 3 * c.n_embd);
    mu_draft_seq *q;
    assert_int_equal(mu_draft_seq_new(d, 128, &q, &err), 0);
    const int N = 40;
    float *feat = malloc((size_t)N * di->n_feat * sizeof(float));
    uint64_t seed = 11;
    for (int i = 0; i < N * di->n_feat; i++) feat[i] = (float)((int)(rng_next(&seed) % 2001) - 1000) / 500.0f;
    int32_t d1[7], d2[7], d3[7];
    /* no rows yet: the block attends to itself only */
    assert_int_equal(mu_draft_seq_draft(q, 5, 0, 7, d1, &err), 7);
    for (int i = 0; i < 7; i++) assert_true(d1[i] >= 0 && d1[i] < c.n_vocab);
    assert_int_equal(mu_draft_seq_inject(q, 0, N, feat, &err), 0);
    assert_int_equal(mu_draft_seq_draft(q, 5, N, 7, d1, &err), 7);
    assert_int_equal(mu_draft_seq_draft(q, 5, N, 7, d2, &err), 7);
    assert_memory_equal(d1, d2, sizeof d1); /* deterministic */
    /* the rows matter: other features at the same positions, other drafts
     * (for some last token) */
    bool differs = false;
    float *f2 = malloc((size_t)N * di->n_feat * sizeof(float));
    for (int i = 0; i < N * di->n_feat; i++) f2[i] = -feat[i] * 0.5f + 0.25f;
    for (int32_t last = 0; last < 20 && !differs; last++) {
        assert_int_equal(mu_draft_seq_draft(q, last, N, 7, d1, &err), 7);
        assert_int_equal(mu_draft_seq_inject(q, 0, N, f2, &err), 0);
        assert_int_equal(mu_draft_seq_draft(q, last, N, 7, d2, &err), 7);
        assert_int_equal(mu_draft_seq_inject(q, 0, N, feat, &err), 0);
        assert_int_equal(mu_draft_seq_draft(q, last, N, 7, d3, &err), 7);
        assert_memory_equal(d1, d3, sizeof d1); /* re-injecting the same rows restores the drafts */
        differs = memcmp(d1, d2, sizeof d1) != 0;
    }
    assert_true(differs);
    /* truncation forgets rows: drafting at 20 after truncating to 20 equals
     * drafting from a sequence that only ever had 20 rows */
    mu_draft_seq *q2;
    assert_int_equal(mu_draft_seq_new(d, 128, &q2, &err), 0);
    assert_int_equal(mu_draft_seq_inject(q2, 0, 20, feat, &err), 0);
    mu_draft_seq_truncate(q, 20);
    assert_int_equal(mu_draft_seq_draft(q, 9, 20, 7, d1, &err), 7);
    assert_int_equal(mu_draft_seq_draft(q2, 9, 20, 7, d2, &err), 7);
    assert_memory_equal(d1, d2, sizeof d1);
    /* the pass over the whole block whatever the count: the first 3 drafts
     * are the 7-draft pass's first 3; the two halves give what draft does,
     * row by row; past the kept rows, nothing */
    assert_int_equal(mu_draft_seq_draft(q, 9, 20, 3, d2, &err), 3);
    assert_memory_equal(d1, d2, 3 * sizeof *d1);
    assert_int_equal(mu_draft_seq_pass(q, 9, 20, 7, &err), 7);
    for (int r = 0; r < 7; r++) {
        int32_t t = -1;
        assert_int_equal(mu_draft_seq_tokens(q, r, 1, &t), 1);
        assert_int_equal(t, d1[r]);
    }
    assert_int_equal(mu_draft_seq_tokens(q, 5, 4, d3), 2);
    assert_memory_equal(d3, d1 + 5, 2 * sizeof *d1);
    assert_int_equal(mu_draft_seq_tokens(q, 7, 1, d3), 0);
    /* errors */
    assert_int_equal(mu_draft_seq_draft(q, 9, 20, 8, d1, &err), MU_E_ARG); /* > block_size - 1 */
    assert_int_equal(mu_draft_seq_draft(q, c.n_vocab, 20, 3, d1, &err), MU_E_ARG);
    assert_int_equal(mu_draft_seq_inject(q, 120, 9, feat, &err), MU_E_ARG);
    free(f2);
    free(feat);
    mu_draft_seq_free(q);
    mu_draft_seq_free(q2);
    mu_drafter_free(d);
    mu_engine_free(e);
    mu_model_close(m);
}

/* ---- the reference: PyTorch's drafter (llama.cpp's dflash graph) ----------- */

#define DATA "tests/data/dflash/"

/* tools/train/dflash_model.py test_features */
static void ref_features(float *f, int n, int n_feat) {
    for (int p = 0; p < n; p++)
        for (int i = 0; i < n_feat; i++) f[(size_t)p * n_feat + i] = (float)(2.0 * sin(0.37 * p + 0.011 * i * (i % 7 + 1)));
}

/* The drafts of a committed drafter for a committed target equal those of
 * tools/train/dflash_reference.py (tests/data/dflash/expected.json), except
 * rows whose top two logits are within 1e-3 (float roundings may swap them). */
static void test_reference(void **state) {
    (void)state;
    mu_err err = {0};
    mu_model *m;
    mu_engine *e;
    if (mu_model_open(DATA "target.gguf", &m, &err)) fail_msg("target: %s", err.msg);
    mu_engine_opts eo = {.n_threads = 2};
    assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
    mu_drafter *d;
    if (mu_drafter_open(DATA "drafter.gguf", e, &d, &err)) fail_msg("drafter: %s", err.msg);
    json_error_t je;
    json_t *ex = json_load_file(DATA "expected.json", 0, &je);
    assert_non_null(ex);
    const int n_feat = (int)json_integer_value(json_object_get(ex, "n_feat"));
    assert_int_equal(n_feat, mu_drafter_get_info(d)->n_feat);
    float *feat = malloc((size_t)64 * n_feat * sizeof *feat);
    ref_features(feat, 64, n_feat);
    size_t ci;
    json_t *c;
    int n_rows = 0, n_close = 0;
    json_array_foreach(json_object_get(ex, "cases"), ci, c) {
        const int n_ctx = (int)json_integer_value(json_object_get(c, "n_ctx"));
        const int32_t last = (int32_t)json_integer_value(json_object_get(c, "last"));
        json_t *want = json_object_get(c, "drafts"), *mg = json_object_get(c, "margins");
        const int nd = (int)json_array_size(want);
        mu_draft_seq *q;
        assert_int_equal(mu_draft_seq_new(d, 128, &q, &err), 0);
        if (n_ctx) assert_int_equal(mu_draft_seq_inject(q, 0, n_ctx, feat, &err), 0);
        int32_t got[64];
        assert_int_equal(mu_draft_seq_draft(q, last, n_ctx, nd, got, &err), nd);
        for (int r = 0; r < nd; r++) {
            if (json_real_value(json_array_get(mg, (size_t)r)) < 1e-3) {
                n_close++;
                continue;
            }
            n_rows++;
            if (got[r] != json_integer_value(json_array_get(want, (size_t)r)))
                fail_msg("case %zu (context %d, last %d): draft %d is %d, the reference says %lld", ci, n_ctx, last, r,
                         got[r], (long long)json_integer_value(json_array_get(want, (size_t)r)));
        }
        mu_draft_seq_free(q);
    }
    print_message("reference drafts: %d rows equal, %d near-ties skipped\n", n_rows, n_close);
    assert_true(n_rows >= 30);
    json_decref(ex);
    free(feat);
    mu_drafter_free(d);
    mu_engine_free(e);
    mu_model_close(m);
}

/* ---- scheduler ----------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t n, cap;
    int32_t ids[4096];
    int n_ids;
    mu_finish finish;
    mu_gen_stats st;
} trace;

static void put(trace *t, const void *p, size_t n) {
    if (n == 0) return;
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
        } else if (ev.kind == MU_EV_FINISH) {
            put(t, &ev.finish, sizeof ev.finish);
            t->finish = ev.finish;
            t->st = ev.stats;
            break;
        }
    }
    mu_job_free(j);
}

static void run_trace(mu_sched *s, const mu_gen_req *q, trace *t) {
    mu_job *j;
    mu_err err = {0};
    if (mu_sched_submit(s, q, 1, &j, &err)) fail_msg("submit: %s", err.msg);
    read_trace(j, t);
}

/* The scheduler tests' pair: a 4-token vocabulary (random drafts are
 * right often enough to exercise acceptance, drafting on from kept rows
 * and shadow drafts that turn drafting back on; greedy decoding falls
 * into cycles n-gram lookups find) and a drafter of block 6. */
static mu_drafter *open_sched_pair(int n_ctx, mu_model **m, mu_engine **e) {
    mini_cfg c = mini_default();
    c.n_vocab = 4;
    c.n_ctx = n_ctx;
    mu_synth_dflash_opts o;
    mu_synth_dflash_defaults(&o);
    o.block_size = 6;
    write_pair(&c, &o);
    open_target(&c, m, e);
    mu_err err = {0};
    mu_drafter *d;
    if (mu_drafter_open(dpath, *e, &d, &err)) fail_msg("drafter: %s", err.msg);
    return d;
}

/* Plain and --spec dflash, alternating in one scheduler (the slot's
 * session and drafter rows carry over between jobs), many prompts. */
static void test_sched(void **state) {
    (void)state;
    const int n_vocab = 4;
    mu_model *m;
    mu_engine *e;
    mu_drafter *d = open_sched_pair(1024, &m, &e);
    mu_err err = {0};
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 1024, .drafter = d};
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    static trace ref, t;
    static int32_t p[700];
    int drafted = 0, accepted = 0, steps = 0;
    for (int pi = 0; pi < 32; pi++) {
        int np = 1 + (pi * 37) % 70 + (pi == 4 ? 600 : 0);
        uint64_t seed = (uint64_t)pi + 1;
        for (int i = 0; i < np; i++) p[i] = (int32_t)(rng_next(&seed) % (uint64_t)n_vocab);
        /* the 1-draft jobs run longer: their shadow drafts turn drafting back on */
        mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = 25 + pi % 9 + (pi % 4 == 2 ? 80 : 0),
                        .ignore_eos = true, .no_text = true, .logprobs = true, .n_top = 3};
        q.sp.temp = pi % 2 ? 1.5f : 0;
        q.sp.seed = (uint64_t)pi * 7;
        mu_gen_req r = q;
        r.spec = MU_SPEC_DFLASH;
        r.draft_max = pi % 4 == 3 ? 2 : pi % 4 == 2 ? 1 : 0; /* 0: the block's 5 */
        if (pi % 3 == 1) {
            /* the second job keeps the first one's prompt (one token evaluated
             * again): after a plain job the drafter has no rows for the kept
             * positions, after a dflash job it keeps them */
            mu_gen_req qk = q, rk = r;
            qk.keep_prefix = rk.keep_prefix = true;
            run_trace(s, &q, &ref);
            run_trace(s, &qk, &ref);
            run_trace(s, pi % 2 ? &q : &r, &t);
            run_trace(s, &rk, &t);
        } else {
            run_trace(s, &q, &ref);
            run_trace(s, &r, &t);
        }
        if (ref.n != t.n || memcmp(ref.buf, t.buf, ref.n)) fail_msg("prompt %d: events differ from plain decoding", pi);
        assert_true(t.st.n_draft_accepted <= t.st.n_draft);
        drafted += t.st.n_draft;
        accepted += t.st.n_draft_accepted;
        steps += t.st.n_spec_steps;
    }
    /* --draft-min 4: where the rates would draft fewer, a drafting step
     * drafts 4 (not nothing, which left the rates nothing to learn from) */
    int steps4 = 0;
    for (int pi = 0; pi < 6; pi++) {
        uint64_t seed = (uint64_t)pi + 101;
        for (int i = 0; i < 30; i++) p[i] = (int32_t)(rng_next(&seed) % (uint64_t)n_vocab);
        mu_gen_req q = {.prompt = p, .n_prompt = 30, .n_predict = 60, .ignore_eos = true, .no_text = true};
        mu_gen_req r = q;
        r.spec = MU_SPEC_DFLASH;
        r.draft_min = 4;
        run_trace(s, &q, &ref);
        run_trace(s, &r, &t);
        if (ref.n != t.n || memcmp(ref.buf, t.buf, ref.n)) fail_msg("draft-min 4, prompt %d: events differ", pi);
        assert_true(t.st.n_draft >= 4 * t.st.n_spec_steps);
        steps4 += t.st.n_spec_steps;
    }
    assert_true(steps4 > 0);
    /* the context fills inside a block */
    for (int i = 0; i < 40; i++) p[i] = i % n_vocab;
    mu_gen_req q = {.prompt = p, .n_prompt = 40, .n_predict = -1, .ignore_eos = true, .no_text = true, .logprobs = true};
    mu_sched_free(s);
    so.n_ctx = 63;
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    run_trace(s, &q, &ref);
    q.spec = MU_SPEC_DFLASH;
    run_trace(s, &q, &t);
    assert_int_equal(t.finish, MU_FINISH_CTX);
    if (ref.n != t.n || memcmp(ref.buf, t.buf, ref.n)) fail_msg("context limit: events differ");
    print_message("dflash (random drafter, 4 tokens): drafted %d, accepted %d, %d steps\n", drafted, accepted, steps);
    assert_true(drafted > 0);
    assert_true(accepted > 0);
    mu_sched_free(s);
    /* dflash without a drafter is refused, at submit and as a default */
    so.drafter = NULL;
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    mu_job *j;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "drafter"));
    mu_sched_free(s);
    so.spec = MU_SPEC_DFLASH;
    assert_int_equal(mu_sched_new(e, &so, &s, &err), MU_E_ARG);
    free(ref.buf);
    free(t.buf);
    ref.buf = t.buf = NULL;
    mu_drafter_free(d);
    mu_engine_free(e);
    mu_model_close(m);
}

/* A dflash job drafts from n-gram lookups first (sched.c dflash_ngram):
 * on prompts that repeat themselves the lookups draft and are accepted,
 * the events stay plain decoding's, and MUSER_DFLASH_NGRAM=0 leaves the
 * drafter alone (no lookup drafts), with the same events. */
static void test_sched_ngram(void **state) {
    (void)state;
    const int n_vocab = 4;
    mu_model *m;
    mu_engine *e;
    mu_drafter *d = open_sched_pair(512, &m, &e);
    mu_err err = {0};
    static trace ref, t;
    static int32_t p[256];
    int ng_drafted[2] = {0, 0}, ng_accepted[2] = {0, 0}, drafted[2] = {0, 0};
    for (int off = 0; off < 2; off++) {
        if (off) setenv("MUSER_DFLASH_NGRAM", "0", 1);
        mu_sched *s;
        mu_sched_opts so = {.n_slots = 1, .n_ctx = 512, .drafter = d};
        assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
        unsetenv("MUSER_DFLASH_NGRAM");
        for (int pi = 0; pi < 8; pi++) {
            /* a random stretch, then the same stretch again, and again */
            const int w = 8 + pi * 3, np = 3 * w;
            uint64_t seed = (uint64_t)pi + 201;
            for (int i = 0; i < w; i++) p[i] = (int32_t)(rng_next(&seed) % (uint64_t)n_vocab);
            for (int i = w; i < np; i++) p[i] = p[i - w];
            mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = 96, .ignore_eos = true, .no_text = true,
                            .logprobs = true, .n_top = 3};
            q.sp.temp = pi % 2 ? 1.0f : 0;
            q.sp.seed = (uint64_t)pi * 11;
            mu_gen_req r = q;
            r.spec = MU_SPEC_DFLASH;
            run_trace(s, &q, &ref);
            run_trace(s, &r, &t);
            if (ref.n != t.n || memcmp(ref.buf, t.buf, ref.n))
                fail_msg("prompt %d (lookups %s): events differ from plain decoding", pi, off ? "off" : "on");
            assert_true(t.st.n_draft_ngram <= t.st.n_draft);
            assert_true(t.st.n_draft_ngram_accepted <= t.st.n_draft_ngram);
            assert_true(t.st.n_draft_ngram_accepted <= t.st.n_draft_accepted);
            ng_drafted[off] += t.st.n_draft_ngram;
            ng_accepted[off] += t.st.n_draft_ngram_accepted;
            drafted[off] += t.st.n_draft;
        }
        mu_sched_free(s);
    }
    print_message("dflash with lookups: drafted %d, of which lookups %d (accepted %d); lookups off: drafted %d\n",
                  drafted[0], ng_drafted[0], ng_accepted[0], drafted[1]);
    assert_true(ng_drafted[0] > 0);
    assert_true(ng_accepted[0] > 0);
    assert_int_equal(ng_drafted[1], 0);
    assert_true(drafted[1] > 0);
    free(ref.buf);
    free(t.buf);
    ref.buf = t.buf = NULL;
    mu_drafter_free(d);
    mu_engine_free(e);
    mu_model_close(m);
}

/* Two dflash jobs in one batch: the long one's plain steps while the
 * short one runs are not fed to its drafter (a busy batch), which then
 * drafts with those positions missing once the job is alone. Its events,
 * and the short job's, are those of the same two jobs decoding plainly;
 * it counted busy steps, and it drafted after them. */
static void test_sched_busy_gap(void **state) {
    (void)state;
    const int n_vocab = 4;
    mu_model *m;
    mu_engine *e;
    mu_drafter *d = open_sched_pair(512, &m, &e);
    mu_err err = {0};
    static trace ref[2], t[2];
    static int32_t p[2][40];
    int busy = 0, drafted = 0;
    for (int pi = 0; pi < 4; pi++) {
        uint64_t seed = (uint64_t)pi + 301;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 40; i++) p[k][i] = (int32_t)(rng_next(&seed) % (uint64_t)n_vocab);
        for (int spec = 0; spec < 2; spec++) {
            mu_sched *s;
            mu_sched_opts so = {.n_slots = 2, .n_ctx = 512, .hold_until = 2, .drafter = d};
            assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
            mu_job *j[2];
            for (int k = 0; k < 2; k++) {
                mu_gen_req q = {.prompt = p[k], .n_prompt = 20 + 20 * k, .n_predict = k ? 24 : 140,
                                .ignore_eos = true, .no_text = true, .logprobs = true, .n_top = 3};
                q.spec = spec ? MU_SPEC_DFLASH : MU_SPEC_NONE;
                q.sp.temp = pi % 2 ? 1.0f : 0;
                q.sp.seed = (uint64_t)pi * 13 + (uint64_t)k;
                assert_int_equal(mu_sched_submit(s, &q, 1, &j[k], &err), 0);
            }
            for (int k = 0; k < 2; k++) read_trace(j[k], spec ? &t[k] : &ref[k]);
            mu_sched_free(s);
        }
        for (int k = 0; k < 2; k++)
            if (ref[k].n != t[k].n || memcmp(ref[k].buf, t[k].buf, ref[k].n))
                fail_msg("prompt %d, job %d: events differ from plain decoding", pi, k);
        busy += t[0].st.n_spec_busy;
        drafted += t[0].st.n_draft;
    }
    print_message("dflash after busy steps: %d busy steps, then %d drafted\n", busy, drafted);
    assert_true(busy > 0);
    assert_true(drafted > 0);
    for (int k = 0; k < 2; k++) {
        free(ref[k].buf);
        free(t[k].buf);
        ref[k].buf = t[k].buf = NULL;
    }
    mu_drafter_free(d);
    mu_engine_free(e);
    mu_model_close(m);
}

/* ---- the shortlist head -------------------------------------------------- */

/* The head restricted to a shortlist scores each listed token as the full
 * head does, bit for bit, and drafts the best listed token (the first of
 * ties, in id order); a job drafting with it decodes as plain decoding. */
static void test_shortlist(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    mu_synth_dflash_opts o;
    mu_synth_dflash_defaults(&o);
    o.block_size = 8;
    write_pair(&c, &o);
    mu_model *m;
    mu_engine *e;
    open_target(&c, &m, &e);
    mu_err err = {0};
    mu_drafter *d;
    if (mu_drafter_open(dpath, e, &d, &err)) fail_msg("drafter: %s", err.msg);
    const mu_drafter_info *di = mu_drafter_get_info(d);
    assert_int_equal(di->n_scored, c.n_vocab); /* no shortlist in the file: the full head */
    const float full_row = di->cost_row;
    mu_draft_seq *q;
    assert_int_equal(mu_draft_seq_new(d, 128, &q, &err), 0);
    const int N = 30;
    float *feat = malloc((size_t)N * di->n_feat * sizeof(float));
    uint64_t seed = 5;
    for (int i = 0; i < N * di->n_feat; i++) feat[i] = (float)((int)(rng_next(&seed) % 2001) - 1000) / 500.0f;
    assert_int_equal(mu_draft_seq_inject(q, 0, N, feat, &err), 0);
    float full[7][128], part[128];
    int32_t ids[64], got[7];
    for (int round = 0; round < 6; round++) {
        assert_int_equal(mu_drafter_set_shortlist(d, NULL, 0, &err), 0);
        assert_int_equal(mu_draft_seq_pass(q, (int32_t)(3 + round), N, 7, &err), 7);
        for (int r = 0; r < 7; r++) assert_int_equal(mu_draft_seq_scores(q, r, full[r]), c.n_vocab);
        /* an increasing shortlist: every 2nd or 3rd id (64 at most), or one id */
        int n = 0;
        for (int t = 0; t < c.n_vocab && n < 64; t++)
            if (round == 5 ? t == 17 : (t * 7 + round) % (2 + round % 2) == 0) ids[n++] = t;
        assert_int_equal(mu_drafter_set_shortlist(d, ids, n, &err), 0);
        assert_int_equal(di->n_scored, n);
        assert_true(di->cost_row < full_row);
        assert_int_equal(mu_draft_seq_tokens(q, 0, 7, got), 7); /* the kept rows, the new head */
        for (int r = 0; r < 7; r++) {
            assert_int_equal(mu_draft_seq_scores(q, r, part), n);
            int best = 0;
            for (int i = 0; i < n; i++) {
                if (memcmp(&part[i], &full[r][ids[i]], sizeof(float))) /* bit for bit */
                    fail_msg("round %d row %d: token %d scores %a, the full head %a", round, r, ids[i], part[i],
                             full[r][ids[i]]);
                if (full[r][ids[i]] > full[r][ids[best]]) best = i;
            }
            assert_int_equal(got[r], ids[best]);
        }
    }
    /* bad lists */
    int32_t bad[3] = {4, 4, 9};
    assert_int_equal(mu_drafter_set_shortlist(d, bad, 3, &err), MU_E_ARG);
    bad[1] = c.n_vocab;
    assert_int_equal(mu_drafter_set_shortlist(d, bad, 3, &err), MU_E_ARG);
    bad[0] = -1;
    assert_int_equal(mu_drafter_set_shortlist(d, bad, 1, &err), MU_E_ARG);
    /* the head of the last good list still drafts */
    assert_int_equal(mu_draft_seq_tokens(q, 0, 1, got), 1);
    /* a scheduler job drafting from a shortlist of every 3rd id gives plain
     * decoding's events */
    int n = 0;
    for (int t = 0; t < c.n_vocab; t += 3) ids[n++] = t;
    assert_int_equal(mu_drafter_set_shortlist(d, ids, n, &err), 0);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 128, .drafter = d};
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    static trace ref, t;
    int32_t p[20];
    for (int pi = 0; pi < 6; pi++) {
        for (int i = 0; i < 20; i++) p[i] = (int32_t)((i * 5 + pi) % c.n_vocab);
        mu_gen_req rq = {.prompt = p, .n_prompt = 20, .n_predict = 40, .ignore_eos = true, .no_text = true,
                         .logprobs = true, .n_top = 3};
        rq.sp.temp = pi % 2 ? 1.2f : 0;
        rq.sp.seed = (uint64_t)pi;
        mu_gen_req r = rq;
        r.spec = MU_SPEC_DFLASH;
        run_trace(s, &rq, &ref);
        run_trace(s, &r, &t);
        if (ref.n != t.n || memcmp(ref.buf, t.buf, ref.n)) fail_msg("prompt %d: events differ from plain decoding", pi);
    }
    mu_sched_free(s);
    free(ref.buf);
    free(t.buf);
    ref.buf = t.buf = NULL;
    free(feat);
    mu_draft_seq_free(q);
    mu_drafter_free(d);
    mu_engine_free(e);
    mu_model_close(m);
}

/* The bundled drafter carries its shortlist (muser.dflash.shortlist):
 * 2048 increasing ids, the default head; MUSER_DRAFT_SHORTLIST=0 turns it
 * off, =K takes the first K ids. */
static void test_shortlist_file(void **state) {
    (void)state;
    mu_err err = {0};
    mu_dflash_model *dm;
    if (mu_dflash_open("models/muser-default.dflash.gguf", &dm, &err)) skip();
    assert_int_equal(dm->n_shortlist, 2048);
    for (int i = 1; i < dm->n_shortlist; i++)
        assert_true(mu_gguf_arr_i64(&dm->shortlist, (uint64_t)i) > mu_gguf_arr_i64(&dm->shortlist, (uint64_t)i - 1));
    mu_dflash_close(dm);
    mu_model *m;
    mu_engine *e;
    if (mu_model_open("models/muser-default.gguf", &m, &err)) skip();
    mu_engine_opts eo = {.n_threads = 1};
    assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
    static const struct {
        const char *env;
        int want;
    } cases[] = {{NULL, 2048}, {"0", 8192}, {"1024", 1024}, {"9000", 8192}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].env) setenv("MUSER_DRAFT_SHORTLIST", cases[i].env, 1);
        else unsetenv("MUSER_DRAFT_SHORTLIST");
        mu_drafter *d;
        if (mu_drafter_open("models/muser-default.dflash.gguf", e, &d, &err)) fail_msg("drafter: %s", err.msg);
        assert_int_equal(mu_drafter_get_info(d)->n_scored, cases[i].want);
        mu_drafter_free(d);
    }
    setenv("MUSER_DRAFT_SHORTLIST", "x", 1);
    mu_drafter *d;
    assert_int_equal(mu_drafter_open("models/muser-default.dflash.gguf", e, &d, &err), MU_E_ARG);
    unsetenv("MUSER_DRAFT_SHORTLIST");
    mu_engine_free(e);
    mu_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_bind), cmocka_unit_test(test_refusals), cmocka_unit_test(test_capture),
        cmocka_unit_test(test_drafter),    cmocka_unit_test(test_reference), cmocka_unit_test(test_sched),
        cmocka_unit_test(test_sched_ngram), cmocka_unit_test(test_sched_busy_gap), cmocka_unit_test(test_shortlist),  cmocka_unit_test(test_shortlist_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
