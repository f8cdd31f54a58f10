/* test_gpu_fake.c: the engine's GPU side (src/engine/forward_gpu.c) against
 * a fake plugin (fake_gpu_plugin.c, loaded through $MUSER_CUDA_PLUGIN, no
 * device): layer streaming (mu_batch_item.on_layer) per chunk, layers in
 * order, each of the item's positions once per layer, with the session's
 * positions already counted so the callback can read its rows; the rows
 * read there are the plugin's; a read of a layer not yet written, a write
 * or a forward never happens inside a callback (the plugin refuses them);
 * a forward without a callback streams nothing. Hidden-state capture
 * (mu_batch_item.feat) on a CUDA engine: each capturing token's rows reach
 * its item's feat at (token, layer slot), across chunks, with neighbours
 * that capture nothing and solo items; a DFlash drafter opens on the CUDA
 * engine and drafts from those rows as it does on a CPU engine; the fake's
 * emulation of the device drafter against the CPU drafter (draft_compare.h).
 * And images on a CUDA engine whose plugin has no vision encoder: encoded
 * on the CPU, the same rows as a CPU engine's, the reason kept with the
 * projector.
 * Each logits row's best (mu_session_logits_best): the host's argmax of
 * the row when every value is finite, else -1, over rows with ties, -0
 * against +0, NaN and infinities; generation with and without it
 * ($MUSER_LOGITS_BEST=0) gives the same tokens. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser.h"
#include "../../include/muser_gen.h"
#include "../../include/muser_synth.h"
#include "../../src/engine/engine.h"
#include "../../src/engine/sample_int.h"
#include "../../src/gen/spec_cost.h"
#include "../../src/vision/mmproj.h"
#include "draft_compare.h"
#include "fake_gpu_row.h"
#include "image_gen.h"
#include "mini_model.h"

static char dir[] = "/tmp/mutest_gpu_fake_XXXXXX";
static mu_model *M;
static mu_engine *E;

static int setup(void **state) {
    (void)state;
    char exe[PATH_MAX], so[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    slash[1] = 0;
    snprintf(so, sizeof so, "%sfake-gpu-plugin.so", exe);
    setenv("MUSER_CUDA_PLUGIN", so, 1); /* before the first GPU call loads a plugin */
    if (!mkdtemp(dir)) return -1;
    mini_cfg c = mini_default();
    char path[512];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    mu_err err = {0};
    if (mini_write(path, &c) || mu_model_open(path, &M, &err)) return -1;
    unlink(path);
    mu_engine_opts o = {.backend = "cuda"};
    if (mu_engine_new(M, &o, &E, &err)) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    mu_engine_free(E);
    mu_model_close(M);
    rmdir(dir);
    return 0;
}

#define N_TOK 21
#define MAX_CALLS 64
typedef struct {
    mu_session *s;
    const int32_t *tok;
    int calls, il[MAX_CALLS], pos0[MAX_CALLS], n[MAX_CALLS];
    int bad_read, bad_rows, bad_past, later_read_ok;
} rec;

static void on_layer(void *user, int il, int pos0, int n) {
    rec *r = user;
    if (r->calls < MAX_CALLS) {
        r->il[r->calls] = il;
        r->pos0[r->calls] = pos0;
        r->n[r->calls] = n;
    }
    r->calls++;
    if (mu_session_n_past(r->s) != pos0 + n) r->bad_past++; /* positions counted as tokens enter the chunk */
    const size_t w = (size_t)E->n_kv;
    uint16_t *k = malloc((size_t)n * w * 2), *v = malloc((size_t)n * w * 2);
    mu_err err = {0};
    if (!k || !v || mu_session_kv_read(r->s, il, pos0, n, k, v, &err)) {
        r->bad_read++;
    } else {
        for (int p = 0; p < n; p++)
            for (size_t i = 0; i < w; i++)
                if (k[p * w + i] != fake_row(r->tok[pos0 + p], pos0 + p, il, (int)i, 0) ||
                    v[p * w + i] != fake_row(r->tok[pos0 + p], pos0 + p, il, (int)i, 1))
                    r->bad_rows++;
    }
    /* the next layer is not written yet: the plugin refuses the read */
    if (il + 1 < mu_model_get_info(M)->n_layer && k && v && !mu_session_kv_read(r->s, il + 1, pos0, 1, k, v, &err))
        r->later_read_ok++;
    free(k);
    free(v);
}

static void prompt(int32_t *ids, int n, int seed) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + seed * 11 + 3) % 70);
}

static void test_stream_per_chunk(void **state) {
    (void)state;
    mu_err err = {0};
    const int L = mu_model_get_info(M)->n_layer, ub = E->ubatch;
    mu_session *a, *b;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    int32_t p[N_TOK], q[7];
    prompt(p, N_TOK, 8);
    prompt(q, 7, 9);
    rec r = {.s = a, .tok = p};
    const mu_gpu_stream_stats st0 = E->gpu_stream;
    E->ubatch = 8; /* 7 + 8 + 8 + 5 tokens: the item's positions split 1 | 8 | 8 | 4 */
    mu_batch_item two[2] = {{.s = b, .tokens = q, .n_tokens = 7},
                            {.s = a, .tokens = p, .n_tokens = N_TOK, .on_layer = on_layer, .on_layer_user = &r}};
    int rc = mu_forward(E, two, 2, &err);
    E->ubatch = ub;
    assert_int_equal(rc, 0);
    static const int want_pos0[4] = {0, 1, 9, 17}, want_n[4] = {1, 8, 8, 4};
    assert_int_equal(r.calls, 4 * L);
    for (int c = 0; c < 4; c++)
        for (int il = 0; il < L; il++) {
            const int i = c * L + il;
            assert_int_equal(r.il[i], il);
            assert_int_equal(r.pos0[i], want_pos0[c]);
            assert_int_equal(r.n[i], want_n[c]);
        }
    assert_int_equal(r.bad_read, 0);
    assert_int_equal(r.bad_rows, 0);
    assert_int_equal(r.bad_past, 0);
    assert_int_equal(r.later_read_ok, 0);
    assert_int_equal(mu_session_n_past(a), N_TOK);
    assert_int_equal(mu_session_n_past(b), 7);
    assert_int_equal(E->gpu_stream.calls - st0.calls, 4 * L);
    assert_int_equal(E->gpu_stream.open - st0.open, 4 * L);
    assert_true(E->gpu_stream.reads - st0.reads >= 4 * L); /* a read over a ring's wrap is two */
    /* a forward without a callback streams nothing */
    const mu_gpu_stream_stats st1 = E->gpu_stream;
    mu_batch_item one = {.s = a, .tokens = q, .n_tokens = 3};
    assert_int_equal(mu_forward(E, &one, 1, &err), 0);
    assert_int_equal(E->gpu_stream.calls, st1.calls);
    assert_int_equal(mu_session_n_past(a), N_TOK + 3);
    mu_session_free(a);
    mu_session_free(b);
}

/* Input rows (image rows) between tokens reach the plugin as rows, at
 * their positions, in one forward and across chunks; the tokens around
 * them as tokens. */
static void test_input_rows(void **state) {
    (void)state;
    mu_err err = {0};
    const int L = mu_model_get_info(M)->n_layer, n_embd = mu_model_get_info(M)->n_embd, ub = E->ubatch;
    const int n_kv = mu_model_get_info(M)->n_head_kv * mu_model_get_info(M)->head_dim;
    mu_session *a;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    int32_t p[4], q[3];
    prompt(p, 4, 3);
    prompt(q, 3, 4);
    float *rows = calloc((size_t)11 * n_embd, sizeof *rows);
    for (int r = 0; r < 11; r++) rows[(size_t)r * n_embd] = (float)(r + 1);
    mu_batch_item it[3] = {{.s = a, .tokens = p, .n_tokens = 4}, {.s = a, .n_tokens = 11, .in_embd = rows},
                           {.s = a, .tokens = q, .n_tokens = 3}};
    E->ubatch = 8; /* 4 + 11 + 3 positions over chunks of 8: rows in the first, second and third */
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) rc = mu_forward(E, &it[k], 1, &err);
    E->ubatch = ub;
    assert_int_equal(rc, 0);
    assert_int_equal(mu_session_n_past(a), 18);
    uint16_t *k = malloc((size_t)18 * n_kv * 2), *v = malloc((size_t)18 * n_kv * 2);
    int bad = 0;
    for (int il = 0; il < L; il++) {
        assert_int_equal(mu_session_kv_read(a, il, 0, 18, k, v, &err), 0);
        for (int pos = 0; pos < 18; pos++) {
            const int32_t tok = pos < 4 ? p[pos] : pos < 15 ? fake_row_tok(rows + (size_t)(pos - 4) * n_embd) : q[pos - 15];
            for (int i = 0; i < n_kv; i++)
                bad += k[(size_t)pos * n_kv + i] != fake_row(tok, pos, il, i, 0) ||
                       v[(size_t)pos * n_kv + i] != fake_row(tok, pos, il, i, 1);
        }
    }
    assert_int_equal(bad, 0);
    free(k), free(v), free(rows);
    mu_session_free(a);
}

/* Items' feat blocks, checked element by element against fake_feat (the
 * rows the plugin captures), and the row past each block untouched. */
static int feat_bad(const mu_batch_item *it, int pos0, int ne) {
    int bad = 0;
    for (int t = 0; t < it->n_tokens; t++)
        for (int k = 0; k < it->n_feat_layers; k++)
            for (int i = 0; i < ne; i++)
                bad += it->feat[((size_t)t * it->n_feat_layers + k) * ne + i] !=
                       fake_feat(it->tokens[t], pos0 + t, it->feat_layers[k], i);
    for (int i = 0; i < ne; i++) bad += it->feat[(size_t)it->n_tokens * it->n_feat_layers * ne + i] != -1.0f;
    return bad;
}

static float *feat_buf(int n_tok, int n_layers, int ne) {
    const size_t n = ((size_t)n_tok * n_layers + 1) * ne; /* one guard row */
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; f && i < n; i++) f[i] = -1.0f;
    return f;
}

static void test_feat_capture(void **state) {
    (void)state;
    mu_err err = {0};
    const int ne = mu_model_get_info(M)->n_embd, L = mu_model_get_info(M)->n_layer, ub = E->ubatch;
    assert_true(L >= 4);
    mu_session *a, *b, *c, *d;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &c, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &d, &err), 0);
    int32_t pa[9], pb[5], pc[2], pd[4];
    prompt(pa, 9, 1);
    prompt(pb, 5, 2);
    prompt(pc, 2, 3);
    prompt(pd, 4, 4);
    mu_batch_item pre = {.s = a, .tokens = pa, .n_tokens = 3}; /* a's block starts at position 3 */
    assert_int_equal(mu_forward(E, &pre, 1, &err), 0);
    static const int lb[2] = {3, 0}, la[3] = {1, 3, 1}, lc[1] = {0};
    float *fb = feat_buf(5, 2, ne), *fa = feat_buf(6, 3, ne), *fc = feat_buf(2, 1, ne);
    assert_true(fb && fa && fc);
    /* 5 + 4 + 6 + 2 tokens over chunks of 8: b and d, then a's solo block
     * split 1 | 5, then c (solo) in the third chunk */
    mu_batch_item it[4] = {
        {.s = b, .tokens = pb, .n_tokens = 5, .feat = fb, .feat_layers = lb, .n_feat_layers = 2},
        {.s = d, .tokens = pd, .n_tokens = 4},
        {.s = a, .tokens = pa + 3, .n_tokens = 6, .all_logits = true, .solo = true, .feat = fa, .feat_layers = la,
         .n_feat_layers = 3},
        {.s = c, .tokens = pc, .n_tokens = 2, .solo = true, .feat = fc, .feat_layers = lc, .n_feat_layers = 1},
    };
    E->ubatch = 8;
    int rc = mu_forward(E, it, 4, &err);
    E->ubatch = ub;
    assert_int_equal(rc, 0);
    assert_int_equal(feat_bad(&it[0], 0, ne), 0);
    assert_int_equal(feat_bad(&it[2], 3, ne), 0);
    assert_int_equal(feat_bad(&it[3], 0, ne), 0);
    assert_int_equal(mu_session_n_past(a), 9);
    /* a layer out of range is still refused before anything runs */
    static const int bad_layer[1] = {99};
    mu_batch_item bad = {.s = d, .tokens = pd, .n_tokens = 1, .feat = fb, .feat_layers = bad_layer, .n_feat_layers = 1};
    assert_int_equal(mu_forward(E, &bad, 1, &err), MU_E_ARG);
    assert_int_equal(mu_session_n_past(d), 4);
    free(fa), free(fb), free(fc);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(c);
    mu_session_free(d);
}

/* A random drafter for the mini model (dir/t.gguf is written for it and
 * removed) at dpath: n_layer, block, matrix type, own head, seed. */
static void write_drafter(const char *dpath, int n_layer, int block, mu_synth_type type, bool own_head,
                          uint64_t seed) {
    char tpath[600];
    snprintf(tpath, sizeof tpath, "%s/t.gguf", dir);
    mini_cfg mc = mini_default();
    assert_int_equal(mini_write(tpath, &mc), 0);
    mu_synth_dflash_opts o;
    mu_synth_dflash_defaults(&o);
    o.target = tpath;
    if (n_layer) o.n_layer = n_layer;
    o.block_size = block;
    o.type = type;
    o.own_head = own_head;
    o.seed = seed;
    mu_err err = {0};
    if (mu_synth_dflash_write(&o, dpath, &err)) fail_msg("drafter: %s", err.msg);
    unlink(tpath);
}

/* A drafter bound to the CUDA engine: features captured by the device
 * (here the plugin's fake rows) drive it as on a CPU engine. */
static void test_drafter_on_cuda(void **state) {
    (void)state;
    char dpath[600];
    snprintf(dpath, sizeof dpath, "%s/d.gguf", dir);
    write_drafter(dpath, 0, 4, MU_SYNTH_F16, false, 1);
    mu_err err = {0};
    mu_engine *ec = NULL;
    mu_engine_opts oc = {.backend = "cpu"};
    assert_int_equal(mu_engine_new(M, &oc, &ec, &err), 0);
    mu_drafter *dg = NULL, *dc = NULL;
    if (mu_drafter_open(dpath, E, &dg, &err)) fail_msg("drafter on cuda: %s", err.msg);
    assert_int_equal(mu_drafter_open(dpath, ec, &dc, &err), 0);
    unlink(dpath);
    const mu_drafter_info *di = mu_drafter_get_info(dg);
    mu_session *s;
    assert_int_equal(mu_session_new(E, 64, &s, &err), 0);
    int32_t p[12];
    prompt(p, 12, 5);
    float *feat = malloc((size_t)12 * di->n_feat * sizeof *feat);
    mu_batch_item it = {.s = s, .tokens = p, .n_tokens = 12, .feat = feat, .feat_layers = di->target_layers,
                        .n_feat_layers = di->n_target};
    assert_int_equal(mu_forward(E, &it, 1, &err), 0);
    const int En = mu_model_get_info(M)->n_embd;
    int bad = 0;
    for (int t = 0; t < 12; t++)
        for (int k = 0; k < di->n_target; k++)
            for (int i = 0; i < En; i++)
                bad += feat[((size_t)t * di->n_target + k) * En + i] != fake_feat(p[t], t, di->target_layers[k], i);
    assert_int_equal(bad, 0);
    mu_draft_seq *qg, *qc;
    assert_int_equal(mu_draft_seq_new(dg, 64, &qg, &err), 0);
    assert_int_equal(mu_draft_seq_new(dc, 64, &qc, &err), 0);
    assert_int_equal(mu_draft_seq_inject(qg, 0, 12, feat, &err), 0);
    assert_int_equal(mu_draft_seq_inject(qc, 0, 12, feat, &err), 0);
    int32_t og[8], oc2[8];
    const int nd = di->block_size - 1;
    assert_int_equal(mu_draft_seq_draft(qg, 7, 12, nd, og, &err), nd);
    assert_int_equal(mu_draft_seq_draft(qc, 7, 12, nd, oc2, &err), nd);
    assert_memory_equal(og, oc2, (size_t)nd * sizeof *og);
    mu_draft_seq_free(qg);
    mu_draft_seq_free(qc);
    mu_drafter_free(dg);
    mu_drafter_free(dc);
    mu_session_free(s);
    mu_engine_free(ec);
    free(feat);
}

/* The device drafter's data flow (fake_gpu_draft.h, an emulation of
 * gpu_cuda_draft.cu) against the CPU drafter: draft_compare.h's cases, for
 * drafters of F16 and Q8_0 weights, with the target's head and their own. */
static void test_drafter_emulated(void **state) {
    (void)state;
    char dpath[600];
    snprintf(dpath, sizeof dpath, "%s/d.gguf", dir);
    mu_engine *ec = NULL;
    mu_engine_opts oc = {.backend = "cpu"};
    mu_err err = {0};
    assert_int_equal(mu_engine_new(M, &oc, &ec, &err), 0);
    setenv("MUSER_FAKE_GPU_DRAFTER", "1", 1);
    const mu_synth_type types[2] = {MU_SYNTH_F16, MU_SYNTH_Q8_0};
    for (int k = 0; k < 4; k++) {
        write_drafter(dpath, 2, 8, types[k % 2], k >= 2, 3 + (uint64_t)k);
        draft_cmp c;
        if (draft_compare(ec, E, dpath, types[k % 2] == MU_SYNTH_Q8_0 ? 5e-2 : 1e-2, &c, &err))
            fail_msg("drafter %d: %s", k, err.msg);
        assert_int_equal(c.fails, 0);
        unlink(dpath);
    }
    unsetenv("MUSER_FAKE_GPU_DRAFTER");
    mu_engine_free(ec);
}

static void test_vision_fallback(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/p.gguf", dir);
    mu_synth_mmproj_opts o;
    mu_synth_mmproj_defaults(&o);
    mu_err err = {0};
    mu_mmproj *p = NULL;
    mu_engine *ec = NULL;
    mu_engine_opts oc = {.backend = "cpu"};
    assert_int_equal(mu_synth_mmproj_write(&o, path, &err), 0);
    assert_int_equal(mu_mmproj_open(path, NULL, &p, &err), 0);
    unlink(path);
    assert_int_equal(mu_engine_new(M, &oc, &ec, &err), 0);
    ig_buf png = ig_png(100, 61, PNG_COLOR_TYPE_RGB, 8, 0, 3);
    mu_media img = {png.p, png.n};
    float *rg = NULL, *rc = NULL;
    int ng = 0, nc = 0;
    assert_int_equal(mu_mmproj_encode(p, E, &img, &rg, &ng, NULL, NULL, &err), 0);
    assert_null(p->gpu);
    assert_int_equal(p->gpu_err.code, MU_E_UNSUPPORTED);
    assert_true(p->gpu_noticed);
    assert_int_equal(mu_mmproj_encode(p, ec, &img, &rc, &nc, NULL, NULL, &err), 0);
    assert_int_equal(ng, nc);
    assert_memory_equal(rg, rc, (size_t)ng * p->info.n_out * sizeof(float));
    free(rg), free(rc), free(png.p);
    mu_engine_free(ec);
    mu_mmproj_free(p);
}

/* Every row of s's last forward: best as the host's scans say; rows of
 * token tok[i] at position pos0 + i; counts the shapes (fake_logits_shape). */
static void check_best(const mu_session *s, const int32_t *tok, int pos0, int n, int mode, int *seen) {
    const int V = mu_model_get_info(M)->n_vocab;
    for (int i = 0; i < n; i++) {
        const float *l = mu_session_logits(s, i);
        assert_non_null(l);
        const int32_t want = mu_logits_finite_ref(l, V) ? mu_logits_argmax_ref(l, V) : -1;
        if (mu_session_logits_best(s, i) != want)
            fail_msg("row %d (shape %d): best %d, the host's scans say %d", i,
                     fake_logits_shape(tok[i], pos0 + i, mode), mu_session_logits_best(s, i), want);
        seen[fake_logits_shape(tok[i], pos0 + i, mode)]++;
    }
    assert_int_equal(mu_session_logits_best(s, n), -1); /* no such row */
}

static void test_logits_best(void **state) {
    (void)state;
    mu_err err = {0};
    setenv("MUSER_FAKE_GPU_LOGITS", "1", 1);
    mu_session *a, *b, *c;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &c, &err), 0);
    int32_t p[40], q[3];
    prompt(p, 40, 4);
    prompt(q, 3, 6);
    int seen[8] = {0};
    /* a prompt's every row (pageable rows), a chunk split between sessions */
    const int ub = E->ubatch;
    E->ubatch = 16;
    mu_batch_item two[2] = {{.s = a, .tokens = p, .n_tokens = 40, .all_logits = true},
                            {.s = b, .tokens = q, .n_tokens = 3, .all_logits = true}};
    int rc = mu_forward(E, two, 2, &err);
    E->ubatch = ub;
    assert_int_equal(rc, 0);
    check_best(a, p, 0, 40, 1, seen);
    check_best(b, q, 0, 3, 1, seen);
    assert_int_equal(mu_session_logits_best(a, -1), mu_session_logits_best(a, 39));
    /* decode steps of three sessions in one chunk */
    for (int k = 0; k < 8; k++) {
        int32_t t[3] = {p[k], p[k + 1], q[k % 3]};
        mu_batch_item three[3] = {{.s = a, .tokens = &t[0], .n_tokens = 1},
                                  {.s = b, .tokens = &t[1], .n_tokens = 1},
                                  {.s = c, .tokens = &t[2], .n_tokens = 1}};
        assert_int_equal(mu_forward(E, three, 3, &err), 0);
        check_best(a, &t[0], 40 + k, 1, 1, seen);
        check_best(b, &t[1], 3 + k, 1, 1, seen);
        check_best(c, &t[2], k, 1, 1, seen);
    }
    for (int sh = 0; sh < 8; sh++)
        if (seen[sh] == 0) fail_msg("no row of shape %d", sh);
    /* rows gone: nothing known */
    assert_int_equal(mu_session_copy(c, a, &err), 0);
    assert_int_equal(mu_session_logits_best(c, -1), -1);
    assert_int_equal(mu_session_truncate(a, 40, &err), 0);
    assert_int_equal(mu_session_logits_best(a, -1), -1);
    /* an embedding pass keeps no best */
    float embd[64];
    assert_true(mu_model_get_info(M)->n_embd <= 64);
    mu_batch_item e1 = {.s = b, .tokens = q, .n_tokens = 1, .embd = embd};
    assert_int_equal(mu_forward(E, &e1, 1, &err), 0);
    assert_int_equal(mu_session_logits_best(b, -1), -1);
    /* a CPU engine's rows, and a CUDA engine with $MUSER_LOGITS_BEST=0 */
    mu_engine *ec = NULL, *eo = NULL;
    mu_engine_opts oc = {.backend = "cpu"}, og = {.backend = "cuda"};
    assert_int_equal(mu_engine_new(M, &oc, &ec, &err), 0);
    setenv("MUSER_LOGITS_BEST", "0", 1);
    rc = mu_engine_new(M, &og, &eo, &err);
    unsetenv("MUSER_LOGITS_BEST");
    assert_int_equal(rc, 0);
    mu_engine *es[2] = {ec, eo};
    for (int k = 0; k < 2; k++) {
        mu_session *s;
        assert_int_equal(mu_session_new(es[k], 64, &s, &err), 0);
        mu_batch_item it = {.s = s, .tokens = p, .n_tokens = 8, .all_logits = true};
        assert_int_equal(mu_forward(es[k], &it, 1, &err), 0);
        for (int i = 0; i < 8; i++) assert_int_equal(mu_session_logits_best(s, i), -1);
        mu_session_free(s);
    }
    unsetenv("MUSER_FAKE_GPU_LOGITS");
    mu_engine_free(ec);
    mu_engine_free(eo);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(c);
}

/* A job's token ids on sched s (greedy; ends with n_predict tokens). */
static int gen_ids_stats(mu_sched *s, const mu_gen_req *q, int32_t *ids, int cap, mu_gen_stats *st) {
    mu_job *j;
    mu_err err = {0};
    if (mu_sched_submit(s, q, 1, &j, &err)) fail_msg("submit: %s", err.msg);
    int n = 0;
    mu_gen_event ev;
    while (mu_job_next(j, &ev, -1) == 1) {
        if (ev.kind == MU_EV_TOKEN && n < cap) ids[n++] = ev.tok.id;
        if (ev.kind == MU_EV_FINISH) {
            if (ev.finish != MU_FINISH_LENGTH) fail_msg("job ended with %d: %s", (int)ev.finish, ev.text ? ev.text : "");
            if (st) *st = ev.stats;
            break;
        }
    }
    mu_job_free(j);
    return n;
}
static int gen_ids(mu_sched *s, const mu_gen_req *q, int32_t *ids, int cap) { return gen_ids_stats(s, q, ids, cap, NULL); }

/* The scheduler's picks with the rows' best and without it: the same
 * tokens, for plain greedy decoding (the best taken), greedy with a logit
 * bias (the best must be ignored: the bias changes the argmax), and
 * scripted drafts (verification rows: each row's own best), on rows whose
 * argmax moves with token and position (fake_logits mode 2). */
static void test_best_generation(void **state) {
    (void)state;
    mu_err err = {0};
    setenv("MUSER_FAKE_GPU_LOGITS", "2", 1);
    mu_engine *eo = NULL;
    mu_engine_opts og = {.backend = "cuda"};
    setenv("MUSER_LOGITS_BEST", "0", 1);
    int rc = mu_engine_new(M, &og, &eo, &err);
    unsetenv("MUSER_LOGITS_BEST");
    assert_int_equal(rc, 0);
    const int V = mu_model_get_info(M)->n_vocab;
    int32_t p[30], script[80];
    prompt(p, 30, 2);
    for (int i = 0; i < 80; i++) script[i] = (int32_t)((i * 13 + 5) % V);
    const mu_logit_bias bias = {.id = 9, .bias = 1.75f};
    mu_gen_req rq[3] = {{.prompt = p, .n_prompt = 30, .n_predict = 48, .ignore_eos = true, .no_text = true},
                        {.prompt = p, .n_prompt = 30, .n_predict = 48, .ignore_eos = true, .no_text = true},
                        {.prompt = p + 3, .n_prompt = 20, .n_predict = 48, .ignore_eos = true, .no_text = true,
                         .spec = MU_SPEC_SCRIPT, .draft_max = 4, .spec_script = script, .n_spec_script = 80}};
    rq[1].sp.logit_bias = &bias;
    rq[1].sp.n_logit_bias = 1;
    static int32_t ids[2][3][64];
    int n[2][3];
    mu_engine *es[2] = {E, eo};
    for (int k = 0; k < 2; k++) {
        mu_sched *s;
        mu_sched_opts so = {.n_slots = 2, .n_ctx = 128};
        assert_int_equal(mu_sched_new(es[k], &so, &s, &err), 0);
        for (int r = 0; r < 3; r++) n[k][r] = gen_ids(s, &rq[r], ids[k][r], 64);
        mu_sched_free(s);
    }
    for (int r = 0; r < 3; r++) {
        assert_int_equal(n[0][r], 48);
        assert_int_equal(n[1][r], 48);
        assert_memory_equal(ids[0][r], ids[1][r], 48 * sizeof(int32_t));
    }
    int differ = 0; /* the bias changes some picks: the best could not stand in for them */
    for (int t = 0; t < 48; t++) differ += ids[0][0][t] != ids[0][1][t];
    assert_true(differ > 0);
    unsetenv("MUSER_FAKE_GPU_LOGITS");
    mu_engine_free(eo);
}

/* The scheduler with the fake plugin's device drafter (fake_gpu_draft.h)
 * on the fake CUDA engine, whose rows' argmax moves with token and
 * position: --spec dflash gives plain decoding's tokens, greedy and
 * sampled with a seed, and it drafted (the drafts come from the device
 * drafter: info.on_device). */
static void test_drafter_device_generation(void **state) {
    (void)state;
    char dpath[600];
    snprintf(dpath, sizeof dpath, "%s/d.gguf", dir);
    /* Q8_0: the fake's features (integers up to 2^20) overflow F16 activations */
    write_drafter(dpath, 2, 8, MU_SYNTH_Q8_0, false, 1);
    mu_err err = {0};
    setenv("MUSER_FAKE_GPU_LOGITS", "2", 1);
    setenv("MUSER_FAKE_GPU_DRAFTER", "1", 1);
    mu_drafter *dr = NULL;
    if (mu_drafter_open(dpath, E, &dr, &err)) fail_msg("drafter: %s", err.msg);
    assert_true(mu_drafter_get_info(dr)->on_device);
    int32_t p[30];
    prompt(p, 30, 4);
    for (int sampled = 0; sampled < 2; sampled++) {
        mu_gen_req rq = {.prompt = p, .n_prompt = 30, .n_predict = 48, .ignore_eos = true, .no_text = true};
        if (sampled) {
            rq.sp.temp = 0.8f;
            rq.sp.seed = 11;
        }
        static int32_t ids[2][64];
        mu_gen_stats st[2];
        for (int k = 0; k < 2; k++) {
            mu_sched *s;
            mu_sched_opts so = {.n_slots = 1, .n_ctx = 128, .drafter = dr};
            assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
            mu_gen_req q = rq;
            if (k) q.spec = MU_SPEC_DFLASH, q.draft_max = 7;
            assert_int_equal(gen_ids_stats(s, &q, ids[k], 64, &st[k]), 48);
            mu_sched_free(s);
        }
        assert_memory_equal(ids[0], ids[1], 48 * sizeof(int32_t));
        if (st[1].n_draft <= 0) fail_msg("sampled %d: no drafts (steps %d)", sampled, st[1].n_spec_steps);
    }
    mu_drafter_free(dr);
    unsetenv("MUSER_FAKE_GPU_DRAFTER");
    unsetenv("MUSER_FAKE_GPU_LOGITS");
    unlink(dpath);
}

/* The drafting policy charges a verified draft a GPU's cost on the fake
 * CUDA engine and the CPU's on a CPU engine (mu_sched_metrics and
 * /metrics report it); $MUSER_SPEC_ROW_COST replaces either. */
static void test_spec_row_cost(void **state) {
    (void)state;
    mu_err err = {0};
    mu_engine *ec = NULL;
    mu_engine_opts oc = {.backend = "cpu"};
    assert_int_equal(mu_engine_new(M, &oc, &ec, &err), 0);
    mu_engine *es[2] = {E, ec};
    const double want[2] = {MU_SPEC_P_MIN_DEVICE, MU_SPEC_P_MIN};
    for (int over = 0; over < 2; over++) {
        if (over) setenv("MUSER_SPEC_ROW_COST", "0.25", 1);
        for (int k = 0; k < 2; k++) {
            mu_sched *s;
            mu_sched_opts so = {.n_slots = 1, .n_ctx = 64};
            assert_int_equal(mu_sched_new(es[k], &so, &s, &err), 0);
            mu_sched_metrics m;
            mu_sched_get_metrics(s, &m);
            assert_true(m.spec_row_cost == (over ? 0.25 : want[k]));
            mu_sched_free(s);
        }
    }
    unsetenv("MUSER_SPEC_ROW_COST");
    mu_engine_free(ec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_per_chunk),
        cmocka_unit_test(test_input_rows),
        cmocka_unit_test(test_feat_capture),
        cmocka_unit_test(test_drafter_on_cuda),
        cmocka_unit_test(test_drafter_emulated),
        cmocka_unit_test(test_vision_fallback),
        cmocka_unit_test(test_logits_best),
        cmocka_unit_test(test_best_generation),
        cmocka_unit_test(test_drafter_device_generation),
        cmocka_unit_test(test_spec_row_cost),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
