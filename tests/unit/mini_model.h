/* mini_model.h: writes small muse-glimmer GGUFs (F32 or F16 weights, seeded
 * values, no tokenizer) for unit tests, with knobs to break them one way at
 * a time. Header-only, test code. */
#ifndef MU_TEST_MINI_MODEL_H
#define MU_TEST_MINI_MODEL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../include/muser.h"
#include "../../src/kern/kern.h"
#include "../../src/gguf/gguf.h"
#include "../../src/synth/gguf_write.h"

typedef struct {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_swa, n_ctx;
    uint32_t wtype;            /* MU_T_F32 or MU_T_F16 */
    int pattern_period;        /* > 0: scalar pattern; 0: bool array from period 4 */
    int bool_len_delta;        /* bool array length = n_layer + delta */
    bool no_softcap;
    const char *arch;          /* default "muse-glimmer" */
    const char *skip_key;      /* key to leave out */
    const char *skip_tensor;   /* tensor to leave out */
    const char *extra_tensor;  /* an unexpected tensor to add */
    const char *bad_shape;     /* tensor written with a wrong row count */
    const char *nan_tensor;    /* tensor whose first value is written as NaN */
    uint64_t seed;
} mini_cfg;

static inline mini_cfg mini_default(void) {
    return (mini_cfg){.n_layer = 4, .n_embd = 64, .n_ff = 96, .n_head = 4, .n_head_kv = 2, .head_dim = 32,
                      .n_vocab = 80, .n_swa = 5, .n_ctx = 256, .wtype = MU_T_F32, .seed = 7};
}

static inline float mini_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

#define MINI_MAX_T 128
typedef struct {
    char name[64];
    uint32_t type;
    int nd;
    int64_t ne[2];
    bool norm;
} mini_t;

/* Writes the model to path; returns 0 or the writer's status. */
static inline int mini_write(const char *path, const mini_cfg *c) {
    mu_gguf_writer *w;
    mu_err err;
    if (mu_gguf_writer_new(&w, &err)) return -1;
    const char *arch = c->arch ? c->arch : "muse-glimmer";
    char k[128];
#define KEY(name) (snprintf(k, sizeof k, "muse-glimmer.%s", name), k)
#define SKIP(name) (c->skip_key && !strcmp(c->skip_key, name))
    mu_gguf_writer_set_str(w, "general.architecture", arch, strlen(arch), &err);
    mu_gguf_writer_set_str(w, "general.name", "mini", 4, &err);
    struct { const char *n; uint32_t v; } ints[] = {
        {"context_length", (uint32_t)c->n_ctx}, {"embedding_length", (uint32_t)c->n_embd},
        {"feed_forward_length", (uint32_t)c->n_ff}, {"block_count", (uint32_t)c->n_layer},
        {"attention.head_count", (uint32_t)c->n_head}, {"attention.head_count_kv", (uint32_t)c->n_head_kv},
        {"attention.key_length", (uint32_t)c->head_dim}, {"attention.value_length", (uint32_t)c->head_dim},
        {"attention.sliding_window", (uint32_t)c->n_swa}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (!SKIP(ints[i].n)) mu_gguf_writer_set_u32(w, KEY(ints[i].n), ints[i].v, &err);
    if (!SKIP("rope.freq_base")) mu_gguf_writer_set_f32(w, KEY("rope.freq_base"), 10000.f, &err);
    if (!SKIP("attention.layer_norm_rms_epsilon"))
        mu_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f, &err);
    if (!c->no_softcap) mu_gguf_writer_set_f32(w, KEY("final_logit_softcapping"), 20.f, &err);
    if (!SKIP("logit_scale")) mu_gguf_writer_set_f32(w, KEY("logit_scale"), 0.5f, &err);
    if (c->pattern_period > 0) {
        mu_gguf_writer_set_u32(w, KEY("attention.sliding_window_pattern"), (uint32_t)c->pattern_period, &err);
    } else {
        uint8_t b[64];
        int n = c->n_layer + c->bool_len_delta;
        for (int i = 0; i < n; i++) b[i] = (i % 4) < 3;
        mu_gguf_writer_set_arr(w, KEY("attention.sliding_window_pattern"), MU_GGUF_BOOL, b, (uint64_t)n, &err);
    }
#undef KEY
#undef SKIP
    mini_t ts[MINI_MAX_T];
    int nt = 0;
    int E = c->n_embd, Q = c->n_head * c->head_dim, KV = c->n_head_kv * c->head_dim, F = c->n_ff;
#define ADD(nm, a, b, isnorm)                                                                        \
    do {                                                                                             \
        snprintf(ts[nt].name, sizeof ts[nt].name, "%s", nm);                                         \
        ts[nt].nd = (b) ? 2 : 1;                                                                     \
        ts[nt].ne[0] = a;                                                                            \
        ts[nt].ne[1] = (b) ? (b) : 1;                                                                \
        ts[nt].norm = isnorm;                                                                        \
        ts[nt].type = isnorm ? MU_T_F32 : c->wtype;                                                  \
        if (c->bad_shape && !strcmp(c->bad_shape, nm)) ts[nt].ne[ts[nt].nd - 1] += 1;                \
        if (!(c->skip_tensor && !strcmp(c->skip_tensor, nm))) nt++;                                  \
    } while (0)
    ADD("token_embd.weight", E, c->n_vocab, false);
    ADD("output_norm.weight", E, 0, true);
    ADD("output.weight", E, c->n_vocab, false);
    for (int il = 0; il < c->n_layer; il++) {
        char nm[64];
#define L(suffix, a, b, isnorm)                                         \
    do {                                                                \
        snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", il);        \
        ADD(nm, a, b, isnorm);                                          \
    } while (0)
        L("attn_norm", E, 0, true);
        L("attn_q", E, Q, false);
        L("attn_k", E, KV, false);
        L("attn_v", E, KV, false);
        L("attn_q_norm", c->head_dim, 0, true);
        L("attn_k_norm", c->head_dim, 0, true);
        L("attn_gate", E, Q, false);
        L("attn_output", Q, E, false);
        L("post_attention_norm", E, 0, true);
        L("ffn_norm", E, 0, true);
        L("ffn_gate", E, F, false);
        L("ffn_up", E, F, false);
        L("ffn_down", F, E, false);
        L("post_ffw_norm", E, 0, true);
#undef L
    }
    if (c->extra_tensor) ADD(c->extra_tensor, E, 0, true);
#undef ADD
    for (int i = 0; i < nt; i++)
        if (mu_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].nd, ts[i].ne, &err)) return -1;
    if (mu_gguf_writer_open(w, path, &err)) return -1;
    uint64_t s = c->seed;
    for (int i = 0; i < nt; i++) {
        size_t n = (size_t)(ts[i].ne[0] * ts[i].ne[1]);
        float scale = ts[i].norm ? 0.2f : 1.0f / sqrtf((float)ts[i].ne[0]);
        if (!strcmp(ts[i].name, "token_embd.weight")) scale = 1.0f;
        for (size_t j = 0; j < n; j++) {
            float v = ts[i].norm ? 1.0f + scale * mini_rand(&s) : scale * 1.7f * mini_rand(&s);
            if (j == 0 && c->nan_tensor && !strcmp(c->nan_tensor, ts[i].name)) v = NAN;
            if (ts[i].type == MU_T_F16) {
                mu_f16 h = mu_f32_to_f16(v);
                mu_gguf_writer_write(w, &h, 2, &err);
            } else {
                mu_gguf_writer_write(w, &v, 4, &err);
            }
        }
    }
    int rc = mu_gguf_writer_close(w, &err);
    mu_gguf_writer_free(w);
    return rc;
}

/* Writes c as dir/m.gguf, opens it (the file is removed at once) and binds
 * an engine of n_threads: 0, or -1 on any failure. */
static inline int mini_open(const char *dir, const mini_cfg *c, int n_threads, mu_model **m, mu_engine **e) {
    char path[512];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    mu_err err;
    if (mini_write(path, c) || mu_model_open(path, m, &err)) return -1;
    unlink(path);
    mu_engine_opts o = {.n_threads = n_threads};
    if (mu_engine_new(*m, &o, e, &err)) {
        mu_model_close(*m);
        return -1;
    }
    return 0;
}

#endif
