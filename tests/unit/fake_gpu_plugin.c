/* fake_gpu_plugin.c: a stand-in for muser-cuda.so in the unit tier, built
 * as build/tests/fake-gpu-plugin.so (no CUDA, no device needed). It
 * computes no model: a chunk's K and V rows are a function of (token,
 * position, layer, element) (fake_row), written layer by layer into host
 * cells with the CUDA plugin's cell rule (position p in cell p % rows), and
 * the logits are zeros; an input row (an image row) counts as the token
 * fake_row_tok gives it. What it checks is the engine's GPU side
 * (src/engine/forward_gpu.c): chunks, positions, and layer streaming
 * (mu_gpu_chunk.on_layer), including that a read inside a layer's callback
 * never asks for a layer the pass has not written yet and that no write or
 * forward happens there; hidden-state capture (mu_gpu_chunk.feat): the row
 * a token asks for entering layer il is fake_feat of (token, position, il);
 * a DFlash drafter emulating the CUDA plugin's (fake_gpu_draft.h), with
 * $MUSER_FAKE_GPU_DRAFTER=1 (without it, drafters stay on the CPU).
 * Logits rows are fake_logits of (token, position) in the mode
 * $MUSER_FAKE_GPU_LOGITS names (0, zeros, when unset), each with its best
 * (mu_gpu_chunk.best) as the CUDA plugin computes it: a zero row's is 0
 * without a scan (so host benchmarks see the host's scans saved), any
 * other row's is scanned here.
 * Test code; the table is plugin.h's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gpu/plugin.h"
#include "fake_gpu_draft.h"
#include "fake_gpu_row.h"

struct mu_gpu_model {
    int n_layer, n_kv, n_vocab, n_embd;
    int open_layer;             /* the layer whose callback runs, or -1 */
    mu_gpu_stream_stats *stats; /* the open pass's counts, or NULL */
};

struct mu_gpu_sess {
    mu_gpu_model *m;
    int *rows;
    uint16_t **k, **v; /* [n_layer] -> [rows][n_kv] */
};

static int fail(mu_err *err, int code, const char *msg) {
    if (err) {
        err->code = code;
        snprintf(err->msg, sizeof err->msg, "fake gpu: %s", msg);
    }
    return code;
}

static int f_count(const char **why) {
    (void)why;
    return 1;
}

static int f_probe(int dev, mu_gpu_info *info, mu_err *err) {
    if (dev != 0) return fail(err, MU_E_ARG, "no such device");
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "fake");
    info->major = 9;
    info->total_bytes = info->free_bytes = (size_t)1 << 34;
    return 0;
}

static int f_model_new(int dev, const mu_gpu_model_desc *d, mu_gpu_progress_fn fn, void *user, mu_gpu_model **out,
                       mu_err *err) {
    (void)dev, (void)fn, (void)user;
    mu_gpu_model *m = calloc(1, sizeof *m);
    if (!m) return fail(err, MU_E_NOMEM, "out of memory");
    *m = (mu_gpu_model){d->n_layer, d->n_head_kv * d->head_dim, d->n_vocab, d->n_embd, -1, NULL};
    *out = m;
    return 0;
}

static void f_model_free(mu_gpu_model *m) { free(m); }

static void f_sess_free(mu_gpu_sess *s) {
    if (!s) return;
    for (int il = 0; il < s->m->n_layer; il++) {
        if (s->k) free(s->k[il]);
        if (s->v) free(s->v[il]);
    }
    free(s->k);
    free(s->v);
    free(s->rows);
    free(s);
}

static int f_sess_new(mu_gpu_model *m, const int *rows, mu_gpu_sess **out, mu_err *err) {
    mu_gpu_sess *s = calloc(1, sizeof *s);
    if (!s) return fail(err, MU_E_NOMEM, "out of memory");
    s->m = m;
    s->rows = calloc((size_t)m->n_layer, sizeof *s->rows);
    s->k = calloc((size_t)m->n_layer, sizeof *s->k);
    s->v = calloc((size_t)m->n_layer, sizeof *s->v);
    int ok = s->rows && s->k && s->v;
    for (int il = 0; ok && il < m->n_layer; il++) {
        s->rows[il] = rows[il];
        s->k[il] = calloc((size_t)rows[il] * m->n_kv, 2);
        s->v[il] = calloc((size_t)rows[il] * m->n_kv, 2);
        ok = s->k[il] && s->v[il];
    }
    if (!ok) {
        f_sess_free(s);
        return fail(err, MU_E_NOMEM, "out of memory");
    }
    *out = s;
    return 0;
}

/* mu_gpu_chunk.best of a row: the first index of its largest value when
 * every value is finite, else -1 (the CUDA plugin's k_best). */
static int32_t row_best(const float *l, int n) {
    int32_t b = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(l[i])) return -1;
        if (l[i] > l[b]) b = i;
    }
    return b;
}

/* The output row of chunk token t: its logits (fake_logits) and best. */
static void out_row(const mu_gpu_model *m, const mu_gpu_chunk *c, int t, int r) {
    const char *env = getenv("MUSER_FAKE_GPU_LOGITS");
    const int mode = env ? atoi(env) : 0;
    if (c->logits[r]) {
        if (mode == 0) memset(c->logits[r], 0, (size_t)m->n_vocab * sizeof(float));
        else fake_logits(c->tokens[t], c->pos[t], c->logits[r], m->n_vocab, mode);
    }
    if (c->best && c->best[r]) *c->best[r] = mode == 0 ? 0 : row_best(c->logits[r], m->n_vocab);
    if (c->embd && c->embd[r]) memset(c->embd[r], 0, (size_t)m->n_embd * sizeof(float));
}

static int f_forward(mu_gpu_model *m, const mu_gpu_chunk *c, mu_err *err) {
    if (m->open_layer >= 0) return fail(err, MU_E_STATE, "forward inside a layer callback");
    if (c->T <= 0 || c->T > 512) return fail(err, MU_E_ARG, "bad chunk size");
    for (int t = 1; t < c->T; t++)
        if (c->sess[t] == c->sess[t - 1] && c->pos[t] != c->pos[t - 1] + 1)
            return fail(err, MU_E_ARG, "a session's positions are not consecutive");
    for (int t = 0; c->feat && t < c->T; t++)
        for (int k = 0; c->feat[t] && k < c->n_feat_layers[t]; k++)
            if (c->feat_layers[t][k] < 0 || c->feat_layers[t][k] >= m->n_layer)
                return fail(err, MU_E_ARG, "capture layer out of range");
    for (int il = 0; il < m->n_layer; il++) {
        for (int t = 0; c->feat && t < c->T; t++) /* the layer's input, before its work */
            for (int k = 0; c->feat[t] && k < c->n_feat_layers[t]; k++)
                if (c->feat_layers[t][k] == il)
                    for (int i = 0; i < m->n_embd; i++)
                        c->feat[t][(size_t)k * m->n_embd + i] = fake_feat(c->tokens[t], c->pos[t], il, i);
        for (int t = 0; t < c->T; t++) {
            mu_gpu_sess *s = c->sess[t];
            const size_t cell = (size_t)(c->pos[t] % s->rows[il]) * m->n_kv;
            /* an input row stands in as the token fake_row_tok names (its first value) */
            const int32_t tok = c->in_rows && c->in_rows[t] ? fake_row_tok(c->in_rows[t]) : c->tokens[t];
            for (int i = 0; i < m->n_kv; i++) {
                s->k[il][cell + i] = fake_row(tok, c->pos[t], il, i, 0);
                s->v[il][cell + i] = fake_row(tok, c->pos[t], il, i, 1);
            }
        }
        if (!c->on_layer) continue;
        m->open_layer = il;
        m->stats = c->stream_stats;
        if (m->stats) m->stats->calls++, m->stats->open++;
        c->on_layer(c->on_layer_user, il);
        m->open_layer = -1;
        m->stats = NULL;
    }
    for (int t = 0, r = 0; t < c->T; t++)
        if (c->out[t]) out_row(m, c, t, r++);
    return 0;
}

static int check(mu_gpu_sess *s, int il, int cell0, int n, mu_err *err) {
    if (il < 0 || il >= s->m->n_layer || cell0 < 0 || n < 0 || cell0 + n > s->rows[il])
        return fail(err, MU_E_ARG, "cells out of range");
    return 0;
}

static int f_kv_get(mu_gpu_sess *s, int il, int cell0, int n, uint16_t *k, uint16_t *v, mu_err *err) {
    int rc = check(s, il, cell0, n, err);
    if (rc) return rc;
    if (s->m->open_layer >= 0 && il > s->m->open_layer)
        return fail(err, MU_E_STATE, "read of a layer the pass has not written yet");
    memcpy(k, s->k[il] + (size_t)cell0 * s->m->n_kv, (size_t)n * s->m->n_kv * 2);
    memcpy(v, s->v[il] + (size_t)cell0 * s->m->n_kv, (size_t)n * s->m->n_kv * 2);
    if (s->m->open_layer >= 0 && s->m->stats) s->m->stats->reads++;
    return 0;
}

static int f_kv_put(mu_gpu_sess *s, int il, int cell0, int n, const uint16_t *k, const uint16_t *v, mu_err *err) {
    if (s->m->open_layer >= 0) return fail(err, MU_E_STATE, "KV write inside a layer callback");
    int rc = check(s, il, cell0, n, err);
    if (rc) return rc;
    memcpy(s->k[il] + (size_t)cell0 * s->m->n_kv, k, (size_t)n * s->m->n_kv * 2);
    memcpy(s->v[il] + (size_t)cell0 * s->m->n_kv, v, (size_t)n * s->m->n_kv * 2);
    return 0;
}

static int f_test_matmul(int device, uint32_t type, int rows, int cols, int T, int n_batch, const void *w,
                         const float *x, float *y, mu_err *err) {
    return fail(err, MU_E_UNSUPPORTED, "no kernels");
}

static int f_test_get_rows(int device, uint32_t type, int rows, int cols, const void *w, const int32_t *ids, int n,
                           float *y, mu_err *err) {
    return fail(err, MU_E_UNSUPPORTED, "no kernels");
}

static int f_test_attention(int device, const mu_gpu_attn_case *c, float *out_prefill, float *out_rows, mu_err *err) {
    return fail(err, MU_E_UNSUPPORTED, "no kernels");
}

static int f_sess_copy(mu_gpu_sess *dst, const mu_gpu_sess *src, mu_err *err) {
    if (dst->m != src->m) return fail(err, MU_E_ARG, "session copy between two models");
    for (int il = 0; il < src->m->n_layer; il++) {
        if (dst->rows[il] != src->rows[il]) return fail(err, MU_E_ARG, "session copy: different cells");
        memcpy(dst->k[il], src->k[il], (size_t)src->rows[il] * src->m->n_kv * 2);
        memcpy(dst->v[il], src->v[il], (size_t)src->rows[il] * src->m->n_kv * 2);
    }
    return 0;
}

static int f_test_best(int device, const float *rows, int n_rows, int n, int32_t *best, mu_err *err) {
    return fail(err, MU_E_UNSUPPORTED, "no kernels");
}

static void *f_host_alloc(size_t bytes) { return calloc(1, bytes); }
static void f_host_free(void *p) { free(p); }

static const mu_gpu_plugin PLUGIN = {
    MU_GPU_PLUGIN_ABI, "cuda",     f_count,  f_probe,  f_model_new,   f_model_free,    f_sess_new,
    f_sess_free,       f_forward, f_kv_get, f_kv_put, f_test_matmul, f_test_get_rows, f_test_attention,
    NULL,              NULL,      NULL,     NULL,     NULL, /* no vision encoder */
    f_sess_copy,       f_host_alloc,  f_host_free,   f_test_best,
    fd_draft_new,      fd_draft_free, fd_set_head,   fd_dseq_new, fd_dseq_free, fd_dseq_inject,
    fd_dseq_truncate,  fd_dseq_pass,  fd_dseq_head, /* with $MUSER_FAKE_GPU_DRAFTER=1 (fake_gpu_draft.h) */
    NULL, NULL, /* no timed matmuls or copies */
};

__attribute__((visibility("default"))) const mu_gpu_plugin *mu_gpu_plugin_v1(void) { return &PLUGIN; }
