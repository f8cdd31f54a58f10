/* test_vision.c: Muse Glimmer's vision projector (mmproj).
 * File: `muser gen --mmproj`'s writer makes a projector the binding reads
 * back; the binding refuses another projector type, a width that is not the
 * text model's, and missing or misshapen tensors, with one precise message.
 * Engine: input rows (mu_batch_item.in_embd) equal to the token embeddings
 * give the token path's logits bit for bit, between token forwards.
 * Identity: a KV pack identity bound to a projector differs from one
 * without and from one bound to another projector, and is stable.
 * Kernels: every encoder kernel of every table this CPU runs equals the
 * reference bit for bit on random blocks, odd windows and odd grids.
 * Reference: the encoder's rows for the seeded test images equal llama.cpp
 * mtmd's bit for bit, with every kernel table (tests/data/vision/README.md
 * says how they were made): windows cut by the image border, both of ggml's
 * attention paths (below and from 64 patches), resized position grids. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <gnu/libc-version.h>

#include <cmocka.h>

#include "../../include/muser_kv.h"
#include "../../include/muser_synth.h"
#include "../../src/base/pool.h"
#include "../../src/model/model.h"
#include "../../src/synth/gguf_write.h"
#include "../../src/vision/mmproj.h"
#include "../../src/vision/vit.h"
#include "mini_model.h"
#include "vision_img.h"

static char dir[] = "/tmp/mutest_vision_XXXXXX";
static char ppath[600], mpath[600], bpath[600];

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    snprintf(ppath, sizeof ppath, "%s/p.gguf", dir);
    snprintf(mpath, sizeof mpath, "%s/m.gguf", dir);
    snprintf(bpath, sizeof bpath, "%s/b.gguf", dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(ppath);
    unlink(mpath);
    unlink(bpath);
    rmdir(dir);
    return 0;
}

static void write_tiny(const char *path, uint64_t seed) {
    mu_synth_mmproj_opts o;
    mu_synth_mmproj_defaults(&o);
    o.seed = seed;
    mu_err err = {0};
    if (mu_synth_mmproj_write(&o, path, &err)) fail_msg("mmproj write: %s", err.msg);
}

static void test_gen_bind(void **state) {
    (void)state;
    write_tiny(ppath, 1);
    mu_mmproj *p = NULL;
    mu_err err = {0};
    if (mu_mmproj_open(ppath, NULL, &p, &err)) fail_msg("open: %s", err.msg);
    const mu_mmproj_info *I = mu_mmproj_get_info(p);
    assert_int_equal(I->n_layer, 4);
    assert_int_equal(I->n_embd, 64);
    assert_int_equal(I->n_head, 2);
    assert_int_equal(I->head_dim, 32);
    assert_int_equal(I->patch_size, 14);
    assert_int_equal(I->n_merge, 2);
    assert_int_equal(I->pos_side, 4);
    assert_int_equal(I->n_out, 256);
    assert_int_equal(I->max_tokens, 4096);
    assert_true(I->mean[0] == 0.5f && I->std[2] == 0.5f);
    assert_int_equal((int)strlen(I->sha256), 64);
    char sha[65];
    memcpy(sha, I->sha256, sizeof sha);
    mu_mmproj_free(p);
    /* same options, same bytes; another seed, another file */
    write_tiny(bpath, 1);
    assert_int_equal(mu_mmproj_open(bpath, NULL, &p, &err), 0);
    assert_string_equal(mu_mmproj_get_info(p)->sha256, sha);
    mu_mmproj_free(p);
    write_tiny(bpath, 2);
    assert_int_equal(mu_mmproj_open(bpath, NULL, &p, &err), 0);
    assert_string_not_equal(mu_mmproj_get_info(p)->sha256, sha);
    mu_mmproj_free(p);

    /* the output width against a text model */
    mini_cfg c = mini_default();
    c.n_embd = 128;
    assert_int_equal(mini_write(mpath, &c), 0);
    mu_model *m = NULL;
    assert_int_equal(mu_model_open(mpath, &m, &err), 0);
    assert_int_equal(mu_mmproj_open(ppath, m, &p, &err), MU_E_MODEL);
    assert_string_equal(err.msg, "mmproj: output width 256 differs from the model's embedding width 128");
    mu_model_close(m);
    c.n_embd = 256;
    assert_int_equal(mini_write(mpath, &c), 0);
    assert_int_equal(mu_model_open(mpath, &m, &err), 0);
    if (mu_mmproj_open(ppath, m, &p, &err)) fail_msg("open with model: %s", err.msg);
    mu_mmproj_free(p);
    mu_model_close(m);
    /* a text model is not a projector */
    assert_int_equal(mu_mmproj_open(mpath, NULL, &p, &err), MU_E_MODEL);
    assert_string_equal(err.msg, "mmproj: not a projector (no clip.projector_type)");
}

/* A projector file with one key or tensor changed: copies ppath's keys and
 * tensors through the writer. */
typedef struct {
    const char *proj_type;     /* NULL: keep */
    const char *skip_tensor;
    const char *grow_tensor;   /* written with ne[1] + 1 */
} bad_cfg;

static int write_bad(const bad_cfg *b) {
    mu_gguf *g;
    mu_err err = {0};
    if (mu_gguf_open(ppath, &g, &err)) return -1;
    mu_gguf_writer *w;
    mu_gguf_writer_new(&w, &err);
    for (int i = 0; i < mu_gguf_n_kv(g); i++) {
        const char *k = mu_gguf_kv_name(g, i);
        const uint32_t ty = mu_gguf_kv_type(g, i);
        int64_t iv;
        double fv;
        bool bv;
        const char *s;
        size_t n;
        mu_gguf_arr a;
        if (!strcmp(k, "clip.projector_type") && b->proj_type) {
            mu_gguf_writer_set_str(w, k, b->proj_type, strlen(b->proj_type), &err);
        } else if (ty == MU_GGUF_STR) {
            mu_gguf_get_str(g, k, &s, &n, &err);
            mu_gguf_writer_set_str(w, k, s, n, &err);
        } else if (ty == MU_GGUF_U32) {
            mu_gguf_get_i64(g, k, &iv, &err);
            mu_gguf_writer_set_u32(w, k, (uint32_t)iv, &err);
        } else if (ty == MU_GGUF_F32) {
            mu_gguf_get_f64(g, k, &fv, &err);
            mu_gguf_writer_set_f32(w, k, (float)fv, &err);
        } else if (ty == MU_GGUF_BOOL) {
            mu_gguf_get_bool(g, k, &bv, &err);
            mu_gguf_writer_set_bool(w, k, bv, &err);
        } else if (ty == MU_GGUF_ARR) {
            mu_gguf_get_arr(g, k, &a, &err);
            mu_gguf_writer_set_arr(w, k, a.type, a.data, a.n, &err);
        }
    }
    for (int i = 0; i < mu_gguf_n_tensors(g); i++) {
        const mu_gguf_tensor *t = mu_gguf_tensor_at(g, i);
        if (b->skip_tensor && !strcmp(t->name, b->skip_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (b->grow_tensor && !strcmp(t->name, b->grow_tensor)) ne[1]++;
        mu_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, &err);
    }
    int rc = mu_gguf_writer_open(w, bpath, &err);
    for (int i = 0; i < mu_gguf_n_tensors(g) && !rc; i++) {
        const mu_gguf_tensor *t = mu_gguf_tensor_at(g, i);
        if (b->skip_tensor && !strcmp(t->name, b->skip_tensor)) continue;
        rc = mu_gguf_writer_write(w, t->data, t->bytes, &err);
        if (!rc && b->grow_tensor && !strcmp(t->name, b->grow_tensor)) {
            size_t extra = t->bytes / (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
            void *z = calloc(1, extra);
            rc = mu_gguf_writer_write(w, z, extra, &err);
            free(z);
        }
    }
    if (!rc) rc = mu_gguf_writer_close(w, &err);
    mu_gguf_writer_free(w);
    mu_gguf_close(g);
    return rc;
}

static void expect_refusal(const bad_cfg *b, int code, const char *want) {
    assert_int_equal(write_bad(b), 0);
    mu_mmproj *p = NULL;
    mu_err err = {0};
    assert_int_equal(mu_mmproj_open(bpath, NULL, &p, &err), code);
    assert_null(p);
    assert_string_equal(err.msg, want);
}

static void test_refusals(void **state) {
    (void)state;
    write_tiny(ppath, 1);
    expect_refusal(&(bad_cfg){.proj_type = "gemma3"}, MU_E_MODEL, "mmproj: projector type is not muse-glimmer: gemma3");
    expect_refusal(&(bad_cfg){.skip_tensor = "mm.2.weight"}, MU_E_MODEL, "mmproj: missing tensor: mm.2.weight");
    expect_refusal(&(bad_cfg){.skip_tensor = "v.blk.3.attn_k.weight"}, MU_E_MODEL,
                   "mmproj: missing tensor: v.blk.3.attn_k.weight");
    expect_refusal(&(bad_cfg){.grow_tensor = "v.blk.1.ffn_up.weight"}, MU_E_MODEL,
                   "mmproj: tensor v.blk.1.ffn_up.weight has shape {64, 161, 1, 1}, expected {64, 160, 1, 1}");
    expect_refusal(&(bad_cfg){.grow_tensor = "v.position_embd.weight"}, MU_E_MODEL,
                   "mmproj: position grid of 17 entries is not a square");
    /* an unbiased projector is fine: llama.cpp treats biases as optional */
    assert_int_equal(write_bad(&(bad_cfg){.skip_tensor = "v.blk.0.attn_q.bias"}), 0);
    mu_mmproj *p = NULL;
    mu_err err = {0};
    if (mu_mmproj_open(bpath, NULL, &p, &err)) fail_msg("open: %s", err.msg);
    mu_mmproj_free(p);
}


static void test_in_embd(void **state) {
    (void)state;
    mini_cfg c = mini_default(); /* F32 weights: an embedding row is its own input row */
    assert_int_equal(mini_write(mpath, &c), 0);
    mu_err err = {0};
    mu_model *m = NULL;
    mu_engine *e = NULL;
    assert_int_equal(mu_model_open(mpath, &m, &err), 0);
    mu_engine_opts eo = {.n_threads = 2};
    assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
    const int E = mu_model_get_info(m)->n_embd, V = mu_model_get_info(m)->n_vocab;
    const int32_t toks[7] = {3, 17, 4, 60, 9, 9, 21};
    float rows[7 * 512];
    assert_true(E <= 512);
    for (int t = 0; t < 7; t++) memcpy(rows + (size_t)t * E, (const float *)m->tok_embd->data + (size_t)toks[t] * E, E * sizeof(float));
    mu_session *a = NULL, *b = NULL;
    assert_int_equal(mu_session_new(e, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(e, 64, &b, &err), 0);
    mu_batch_item ia = {.s = a, .tokens = toks, .n_tokens = 7, .all_logits = true};
    assert_int_equal(mu_forward(e, &ia, 1, &err), 0);
    /* b: two tokens, three rows (no tokens), two tokens, in three forwards of >= 2 positions
     * (the rounding of a position depends on its chunk having >= 2 of them, not on the split) */
    mu_batch_item ib[3] = {{.s = b, .tokens = toks, .n_tokens = 2, .all_logits = true}};
    assert_int_equal(mu_forward(e, ib, 1, &err), 0);
    ib[0] = (mu_batch_item){.s = b, .n_tokens = 3, .in_embd = rows + 2 * E, .all_logits = true};
    assert_int_equal(mu_forward(e, ib, 1, &err), 0);
    for (int t = 0; t < 3; t++) assert_memory_equal(mu_session_logits(a, 2 + t), mu_session_logits(b, t), V * sizeof(float));
    ib[0] = (mu_batch_item){.s = b, .tokens = toks + 5, .n_tokens = 2, .all_logits = true};
    assert_int_equal(mu_forward(e, ib, 1, &err), 0);
    for (int t = 0; t < 2; t++) assert_memory_equal(mu_session_logits(a, 5 + t), mu_session_logits(b, t), V * sizeof(float));
    /* neither tokens nor rows: an error, nothing changed */
    ib[0] = (mu_batch_item){.s = b, .n_tokens = 1};
    assert_int_equal(mu_forward(e, ib, 1, &err), MU_E_ARG);
    assert_string_equal(err.msg, "forward: item 0 has neither tokens nor rows");
    assert_int_equal(mu_session_n_past(b), 7);
    mu_session_free(a);
    mu_session_free(b);
    mu_engine_free(e);
    mu_model_close(m);
}

static void test_identity(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    c.n_embd = 256;
    assert_int_equal(mini_write(mpath, &c), 0);
    write_tiny(ppath, 1);
    write_tiny(bpath, 2);
    mu_err err = {0};
    mu_model *m = NULL;
    mu_engine *e = NULL;
    mu_mmproj *p1 = NULL, *p2 = NULL;
    assert_int_equal(mu_model_open(mpath, &m, &err), 0);
    mu_engine_opts eo = {.n_threads = 1};
    assert_int_equal(mu_engine_new(m, &eo, &e, &err), 0);
    assert_int_equal(mu_mmproj_open(ppath, m, &p1, &err), 0);
    assert_int_equal(mu_mmproj_open(bpath, m, &p2, &err), 0);
    mu_kv_ident *id = NULL;
    assert_int_equal(mu_kv_ident_new(e, NULL, &id, &err), 0);
    uint8_t d0[32], d1[32], d2[32], d3[32];
    mu_kv_ident_digest(id, 64, d0, NULL);
    mu_kv_ident_set_mmproj(id, p1);
    mu_kv_ident_digest(id, 64, d1, NULL);
    mu_kv_ident_set_mmproj(id, p2);
    mu_kv_ident_digest(id, 64, d2, NULL);
    mu_kv_ident_set_mmproj(id, p1);
    mu_kv_ident_digest(id, 64, d3, NULL);
    assert_memory_not_equal(d0, d1, 32);
    assert_memory_not_equal(d1, d2, 32);
    assert_memory_equal(d1, d3, 32);
    mu_kv_ident_free(id);
    mu_mmproj_free(p1);
    mu_mmproj_free(p2);
    mu_engine_free(e);
    mu_model_close(m);
}

/* ---- kernels ------------------------------------------------------------ */

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void test_kernels(void **state) {
    (void)state;
    const mu_vit_kern *ks[8];
    const int nk = mu_vit_kern_available(ks, 8);
    assert_true(nk >= 1);
    /* odd windows: lengths 1 .. 150 across tile borders, head dims 16 .. 128 */
    static const int hds[] = {16, 32, 96, 128};
    for (int trial = 0; trial < 12; trial++) {
        const int hd = hds[trial % 4], nh = 1 + trial % 3, ld = hd * nh + (trial % 2) * 16;
        const int n = 30 + trial * 23;
        float *q = malloc((size_t)n * ld * sizeof *q), *o0 = calloc((size_t)n * ld, sizeof *o0);
        float *o1 = calloc((size_t)n * ld, sizeof *o1);
        mu_f16 *k = malloc((size_t)n * ld * sizeof *k), *v = malloc((size_t)n * ld * sizeof *v);
        int *lo = malloc((size_t)n * sizeof *lo), *hi = malloc((size_t)n * sizeof *hi);
        for (int i = 0; i < n * ld; i++) {
            q[i] = 3 * frand();
            k[i] = mu_f32_to_f16(3 * frand());
            v[i] = mu_f32_to_f16(frand());
        }
        for (int i = 0; i < n;) { /* windows of 1 .. 97 rows, or all */
            int len = trial % 4 == 3 ? n : 1 + (int)((rs >> 20) % 97);
            frand();
            if (i + len > n) len = n - i;
            for (int r = i; r < i + len; r++) lo[r] = i, hi[r] = i + len;
            i += len;
        }
        for (int h = 0; h < nh; h++) {
            mu_vit_attn_args a = {.n = n, .hd = hd, .ld = ld, .off = h * hd, .scale = 1.0f / sqrtf((float)hd), .q = q,
                                  .k = k, .v = v, .win_lo = lo, .win_hi = hi, .out = o0};
            mu_vit_kern_ref()->attn(&a, 0, n);
            for (int t = 0; t < nk; t++) {
                a.out = o1;
                ks[t]->attn(&a, 0, n / 3); /* a split call covers the same rows */
                ks[t]->attn(&a, n / 3, n);
                for (int i = 0; i < n; i++)
                    if (memcmp(o0 + (size_t)i * ld + h * hd, o1 + (size_t)i * ld + h * hd, (size_t)hd * sizeof(float)))
                        fail_msg("attn %s differs from ref: trial %d head %d row %d", ks[t]->name, trial, h, i);
            }
        }
        free(q), free(o0), free(o1), free(k), free(v), free(lo), free(hi);
    }
    /* a row whose scores all overflow to -inf takes nothing from any key
     * tile (the reference's skip) while the other rows of its block do:
     * positive keys, and row 5's query at -3e38 in every lane */
    {
        enum { n = 128, hd = 32, ld = 32 };
        float *q = malloc(n * ld * sizeof *q), *o0 = calloc(n * ld, sizeof *o0), *o1 = calloc(n * ld, sizeof *o1);
        mu_f16 *k = malloc(n * ld * sizeof *k), *v = malloc(n * ld * sizeof *v);
        int lo[n], hi[n];
        for (int i = 0; i < n * ld; i++) {
            q[i] = frand();
            k[i] = mu_f32_to_f16(0.5f + fabsf(frand()));
            v[i] = mu_f32_to_f16(frand());
        }
        for (int d = 0; d < hd; d++) q[5 * ld + d] = -3e38f;
        for (int i = 0; i < n; i++) lo[i] = 0, hi[i] = n;
        mu_vit_attn_args a = {.n = n, .hd = hd, .ld = ld, .off = 0, .scale = 0.17f, .q = q, .k = k, .v = v,
                              .win_lo = lo, .win_hi = hi, .out = o0};
        mu_vit_kern_ref()->attn(&a, 0, n);
        assert_true(o0[5 * ld] == 0.0f); /* no key taken: S = 0 */
        for (int t = 0; t < nk; t++) {
            a.out = o1;
            ks[t]->attn(&a, 0, n);
            if (memcmp(o0, o1, n * ld * sizeof *o0)) fail_msg("attn %s differs from ref with a -inf row", ks[t]->name);
        }
        free(q), free(o0), free(o1), free(k), free(v);
    }
    /* the F16 matmul: the reference is the engine's tinyBLAS dot
     * (vec_dot_batch of the reference kernel table) on every element, and
     * each table equals it on odd row ranges, token counts that cut the
     * register tiles, and enough tokens to pass a token block (n = 4160);
     * more than 6 tokens take the panel form: slices of 512 values (1040,
     * 1536, 4160, 8960) and several weight blocks (1536 x 200, 8960 x 61:
     * blocks of 28 rows); at most 6 tokens the row form (16 x 9, 2080 x 7) */
    {
        static const int shape[][4] = {{16, 9, 1, 3}, {48, 37, 7, 11}, {1040, 21, 13, 5}, {4160, 13, 160, 2},
                                       {1536, 200, 14, 1}, {8960, 61, 9, 3}, {2080, 7, 5, 1}};
        const mu_kern *kr = mu_kern_ref();
        for (int s = 0; s < (int)(sizeof shape / sizeof shape[0]); s++) {
            const int n = shape[s][0], rows = shape[s][1], nt = shape[s][2], r0 = shape[s][3];
            mu_f16 *w = malloc((size_t)rows * n * sizeof *w), *a16 = malloc((size_t)nt * n * sizeof *a16);
            float *a = malloc((size_t)nt * n * sizeof *a);
            float *y0 = calloc((size_t)nt * rows, sizeof *y0), *y1 = calloc((size_t)nt * rows, sizeof *y1);
            for (int i = 0; i < rows * n; i++) w[i] = mu_f32_to_f16(4 * frand());
            for (int i = 0; i < nt * n; i++) a16[i] = mu_f32_to_f16(8 * frand()), a[i] = mu_f16_to_f32(a16[i]);
            float *bias = malloc((size_t)rows * sizeof *bias);
            for (int r = 0; r < rows; r++) bias[r] = frand();
            mu_vit_mm_f16_ref(n, w, (size_t)n, r0, rows, a, (size_t)n, nt, y0, (size_t)rows, s % 2 ? bias : NULL);
            for (int t = 0; t < nt; t++)
                for (int r = r0; r < rows; r++) {
                    float want = kr->vec_dot_batch[MU_T_F16](n, w + (size_t)r * n, a16 + (size_t)t * n);
                    if (s % 2) want += bias[r];
                    if (memcmp(&want, y0 + (size_t)t * rows + r, sizeof want))
                        fail_msg("mm_f16 ref differs from the tinyBLAS dot: n %d token %d row %d", n, t, r);
                }
            for (int k = 0; k < nk; k++) {
                memset(y1, 0, (size_t)nt * rows * sizeof *y1);
                ks[k]->mm_f16(n, w, (size_t)n, r0, rows, a, (size_t)n, nt, y1, (size_t)rows, s % 2 ? bias : NULL);
                if (memcmp(y0, y1, (size_t)nt * rows * sizeof *y1))
                    fail_msg("mm_f16 %s differs from ref: n %d rows %d tokens %d", ks[k]->name, n, rows, nt);
            }
            free(w), free(a16), free(a), free(y0), free(y1), free(bias);
        }
    }
    /* exact GELU: every table equals the reference (libm's erff) on values
     * from each of erff's branches and their borders, both signs, and on
     * lengths that leave a tail; on glibc 2.36 (Debian 12, whose erff the
     * AVX-512 form reproduces) that form must have passed its load-time
     * check, so the comparison is of the vector code */
    {
        enum { N = 16 * 4096 + 7 };
        float *x0 = malloc(N * sizeof *x0), *x1 = malloc(N * sizeof *x1);
        static const float mag[] = {1e-30f, 1e-9f, 0.3f, 0.84375f, 1.0f, 1.25f, 2.857f, 4.0f, 6.0f, 9.0f};
        for (int i = 0; i < N; i++) {
            const float m = mag[i % 10] * (1.0f + 0.25f * frand());
            x0[i] = (i / 10) % 2 ? -m : m; /* through x / sqrt 2 into every branch */
        }
        for (int i = 0; i < 64; i++) x0[i] = (float)(i - 32) * 0.25f;
        for (int t = 0; t < nk; t++) {
            if (!strcmp(ks[t]->name, "avx512") && !strcmp(gnu_get_libc_version(), "2.36"))
                assert_true(ks[t]->gelu != mu_vit_gelu_erf);
            for (int len = N; len >= N - 7; len -= 7) {
                memcpy(x1, x0, N * sizeof *x1);
                float *ref = malloc(N * sizeof *ref);
                memcpy(ref, x0, N * sizeof *ref);
                mu_vit_gelu_erf(len, ref);
                ks[t]->gelu(len, x1);
                for (int i = 0; i < N; i++)
                    if (memcmp(&ref[i], &x1[i], sizeof(float)))
                        fail_msg("gelu %s differs from ref at %d of %d: x %a", ks[t]->name, i, len, x0[i]);
                free(ref);
            }
        }
        free(x0), free(x1);
    }
    /* layer norm: the 16-lane part and the tail */
    for (int n = 1; n < 70; n += 7) {
        float x[80], y[80], w[80], b[80];
        for (int i = 0; i < n; i++) x[i] = 5 * frand() + 1, w[i] = 1 + frand(), b[i] = frand();
        mu_vit_layer_norm(n, x, y, w, b, 1e-6f);
        double m = 0, s = 0;
        for (int i = 0; i < n; i++) m += x[i];
        m /= n;
        for (int i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
        s /= n;
        for (int i = 0; i < n; i++) {
            const double want = (x[i] - m) / sqrt(s + 1e-6) * w[i] + b[i];
            assert_true(fabs(y[i] - want) < 1e-4 * (1 + fabs(want)));
        }
    }
    /* the position resize: identity at the grid's own size,
     * and a constant grid stays constant (to rounding) at odd sizes */
    {
        enum { S = 4, E = 3 };
        float g[S * S * E], o[9 * 7 * E];
        for (int i = 0; i < S * S * E; i++) g[i] = frand();
        mu_vit_pos_resize(NULL, g, S, E, S, S, NULL, 0, o);
        assert_memory_equal(g, o, sizeof g);
        for (int i = 0; i < S * S * E; i++) g[i] = 0.75f;
        mu_vit_pos_resize(NULL, g, S, E, 9, 7, NULL, 0, o);
        for (int i = 0; i < 9 * 7 * E; i++) assert_true(fabsf(o[i] - 0.75f) < 1e-6f);
    }
    /* every table's blend against the reference, bit for bit (row lengths
     * past and short of the 16-lane steps), and the resize into given cells
     * against the resize in order */
    {
        enum { S = 5, E = 37, GW = 8, GH = 6 };
        float g[S * S * E], all[GW * GH * E], some[4 * E];
        for (int i = 0; i < S * S * E; i++) g[i] = frand() * 3.0f;
        for (int t = 0; t < nk; t++)
            for (int len = 1; len <= E; len += 6) {
                float o0[E], o1[E];
                const float dx = frand() * 0.5f + 0.5f, dy = frand() * 0.5f + 0.5f;
                mu_vit_blend_ref(len, g, g + E, g + 2 * E, g + 3 * E, dx, dy, o0);
                ks[t]->blend(len, g, g + E, g + 2 * E, g + 3 * E, dx, dy, o1);
                if (memcmp(o0, o1, (size_t)len * sizeof *o0)) fail_msg("blend %s differs from ref, E %d", ks[t]->name, len);
            }
        mu_vit_pos_resize(mu_vit_kern_ref(), g, S, E, GW, GH, NULL, 0, all);
        const int cells[4] = {GW * GH - 1, 0, 13, 13};
        mu_vit_pos_resize(NULL, g, S, E, GW, GH, cells, 4, some);
        for (int k = 0; k < 4; k++) assert_memory_equal(some + k * E, all + cells[k] * E, E * sizeof(float));
    }
}

/* ---- against llama.cpp's mtmd ------------------------------------------ */

#define DATA "tests/data/vision/"

static const struct {
    int w, h;
    uint64_t seed;
} IMGS[] = {{112, 112, 1}, {168, 84, 2}, {56, 252, 3}, {224, 168, 4}, {56, 84, 5}, {28, 28, 6}};

static float *read_emb(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *e = malloc(n * sizeof *e);
    size_t got = fread(e, sizeof *e, n, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != n || extra != EOF) fail_msg("%s: expected %zu floats", path, n);
    return e;
}

static void test_reference(void **state) {
    (void)state;
    write_tiny(ppath, 1);
    mu_mmproj *p = NULL;
    mu_err err = {0};
    if (mu_mmproj_open(ppath, NULL, &p, &err)) fail_msg("open: %s", err.msg);
    mu_pool *pool;
    assert_int_equal(mu_pool_new(2, &pool, &err), 0);
    const mu_kern *kt[8];
    const int nkt = mu_kern_available(kt, 8);
    const mu_vit_kern *vk[8];
    const int nvk = mu_vit_kern_available(vk, 8);
    const mu_mmproj_info *I = mu_mmproj_get_info(p);
    for (size_t im = 0; im < sizeof IMGS / sizeof IMGS[0]; im++) {
        const int w = IMGS[im].w, h = IMGS[im].h, n_out = (w / 28) * (h / 28);
        char path[700];
        snprintf(path, sizeof path, DATA "img_%dx%d_s%llu.emb", w, h,
                 (unsigned long long)IMGS[im].seed);
        float *ref = read_emb(path, (size_t)n_out * I->n_out);
        if (!ref) fail_msg("missing reference %s", path);
        unsigned char *rgb = malloc((size_t)w * h * 3);
        vision_test_image(w, h, IMGS[im].seed, rgb);
        float *chw = malloc((size_t)3 * w * h * sizeof *chw);
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < w * h; i++) chw[(size_t)c * w * h + i] = ((float)rgb[i * 3 + c] / 255.0f - 0.5f) / 0.5f;
        float *out = malloc((size_t)n_out * I->n_out * sizeof *out);
        /* the default tables (the unit tier runs on x86-64 with AVX-512 or
         * AVX2); every kernel table must give the same rows */
        const mu_kern *kdef = mu_kern_select(NULL);
        float *first = NULL;
        for (int a = 0; a < nkt; a++)
            for (int b = 0; b < nvk; b++) {
                if (kt[a] != kdef && b > 0) continue;
                if (mu_vit_encode(p, kt[a], vk[b], pool, chw, w, h, out, &err)) fail_msg("encode: %s", err.msg);
                double dot = 0, na = 0, nb = 0, d2 = 0;
                size_t n_diff = 0;
                for (size_t i = 0; i < (size_t)n_out * I->n_out; i++) {
                    dot += (double)out[i] * ref[i], na += (double)out[i] * out[i], nb += (double)ref[i] * ref[i];
                    d2 += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
                    n_diff += out[i] != ref[i];
                }
                const double cosv = dot / sqrt(na * nb), rel = sqrt(d2 / nb);
                if (getenv("MU_VISION_VERBOSE"))
                    fprintf(stderr, "vision %dx%d kern %s/%s: cos %.9f rel L2 %.3g, %zu of %zu values differ\n", w, h,
                            kt[a]->name, vk[b]->name, cosv, rel, n_diff, (size_t)n_out * I->n_out);
                assert_true(cosv >= 0.999);
                assert_true(rel <= 0.01);
                /* what the encoder reaches: llama.cpp's rows bit for bit, with every table */
                if (n_diff) fail_msg("vision %dx%d kern %s/%s: %zu values differ from mtmd's", w, h, kt[a]->name,
                                     vk[b]->name, n_diff);
                if (kt[a] == kdef) {
                    if (!first) {
                        first = malloc((size_t)n_out * I->n_out * sizeof *first);
                        memcpy(first, out, (size_t)n_out * I->n_out * sizeof *first);
                    } else {
                        assert_memory_equal(first, out, (size_t)n_out * I->n_out * sizeof *first);
                    }
                }
            }
        free(first), free(out), free(chw), free(rgb), free(ref);
    }
    mu_pool_free(pool);
    mu_mmproj_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_bind),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_in_embd),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_reference),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
