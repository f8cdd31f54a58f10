/* dflash_synth.c: seeded random DFlash drafters (`muser gen --dflash`).
 * Owns: the drafter's keys and tensors in llama.cpp's `dflash` layout (the
 * keys its loader reads, dflash.target_layers, dflash.block_size, the mask
 * token, the target's tokenizer copied so llama.cpp can load the file
 * alone), and random weights for them.
 * Does not own: running a drafter (src/engine/draft.c), training or
 * converting one (tools/).
 * Design: the geometry defaults to the target's widths with one layer; the
 * file's bytes depend only on the options and the target's tokenizer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser_synth.h"
#include "../gguf/gguf.h"
#include "../kern/quant.h"
#include "gguf_write.h"
#include "quantize.h"

void mu_synth_dflash_defaults(mu_synth_dflash_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_layer = 1;
    o->block_size = 16;
    o->type = MU_SYNTH_F16;
    o->seed = 1;
    o->mask_id = -1;
}

/* Copies every tokenizer.* key of the target (the vocabulary llama.cpp
 * loads with the drafter). */
static int copy_tokenizer(const mu_gguf *g, mu_gguf_writer *w, mu_err *err) {
    for (int i = 0; i < mu_gguf_n_kv(g); i++) {
        const char *k = mu_gguf_kv_name(g, i);
        if (strncmp(k, "tokenizer.", 10) || !strcmp(k, "tokenizer.ggml.mask_token_id")) continue;
        const uint32_t ty = mu_gguf_kv_type(g, i);
        int rc = 0;
        int64_t iv;
        double fv;
        bool bv;
        const char *s;
        size_t n;
        switch (ty) {
        case MU_GGUF_U32:
            rc = mu_gguf_get_i64(g, k, &iv, err) || mu_gguf_writer_set_u32(w, k, (uint32_t)iv, err);
            break;
        case MU_GGUF_I32:
            rc = mu_gguf_get_i64(g, k, &iv, err) || mu_gguf_writer_set_i32(w, k, (int32_t)iv, err);
            break;
        case MU_GGUF_U64:
            rc = mu_gguf_get_i64(g, k, &iv, err) || mu_gguf_writer_set_u64(w, k, (uint64_t)iv, err);
            break;
        case MU_GGUF_F32:
            rc = mu_gguf_get_f64(g, k, &fv, err) || mu_gguf_writer_set_f32(w, k, (float)fv, err);
            break;
        case MU_GGUF_F64:
            rc = mu_gguf_get_f64(g, k, &fv, err) || mu_gguf_writer_set_f64(w, k, fv, err);
            break;
        case MU_GGUF_BOOL:
            rc = mu_gguf_get_bool(g, k, &bv, err) || mu_gguf_writer_set_bool(w, k, bv, err);
            break;
        case MU_GGUF_STR:
            rc = mu_gguf_get_str(g, k, &s, &n, err) || mu_gguf_writer_set_str(w, k, s, n, err);
            break;
        case MU_GGUF_ARR: {
            mu_gguf_arr a;
            if ((rc = mu_gguf_get_arr(g, k, &a, err))) break;
            if (a.type == MU_GGUF_STR) {
                const char **ss = malloc((a.n ? a.n : 1) * sizeof *ss);
                size_t *ls = malloc((a.n ? a.n : 1) * sizeof *ls);
                if (!ss || !ls) rc = mu_fail(err, MU_E_NOMEM, "out of memory copying %s", k);
                for (uint64_t j = 0; !rc && j < a.n; j++) mu_gguf_arr_str(g, &a, j, &ss[j], &ls[j]);
                if (!rc) rc = mu_gguf_writer_set_arr_str(w, k, ss, ls, a.n, err);
                free(ss);
                free(ls);
            } else if (mu_gguf_scalar_bytes(a.type)) {
                rc = mu_gguf_writer_set_arr(w, k, a.type, a.data, a.n, err);
            } else {
                rc = mu_fail(err, MU_E_MODEL, "cannot copy the target's key %s (nested array)", k);
            }
            break;
        }
        default:
            rc = mu_fail(err, MU_E_MODEL, "cannot copy the target's key %s (value type %u)", k, ty);
        }
        if (rc) return rc < 0 ? rc : MU_E_MODEL;
    }
    return 0;
}

/* The mask token when none is named: <|mask|> if the vocabulary has it,
 * else its last <|reserved_N|> token, else its last token. */
static int32_t default_mask(const mu_gguf *g, int n_vocab) {
    mu_gguf_arr a;
    if (mu_gguf_find(g, "tokenizer.ggml.tokens") < 0 || mu_gguf_get_arr(g, "tokenizer.ggml.tokens", &a, NULL) ||
        a.type != MU_GGUF_STR)
        return n_vocab - 1;
    int32_t reserved = -1;
    for (uint64_t j = 0; j < a.n; j++) {
        const char *s;
        size_t n;
        mu_gguf_arr_str(g, &a, j, &s, &n);
        if (n == 8 && !memcmp(s, "<|mask|>", 8)) return (int32_t)j;
        if (n > 11 && !memcmp(s, "<|reserved_", 11)) reserved = (int32_t)j;
    }
    return reserved >= 0 ? reserved : n_vocab - 1;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[2];
    bool norm;
} tdesc;

#define MAX_T (8 + 16 * 64)

int mu_synth_dflash_write(const mu_synth_dflash_opts *o, const char *path, mu_err *err) {
    if (!o->target) return mu_fail(err, MU_E_ARG, "a drafter needs its target model (--target)");
    if (o->n_layer < 1 || o->n_layer > 64) return mu_fail(err, MU_E_ARG, "drafter layers must be 1..64: %d", o->n_layer);
    if (o->block_size < 2 || o->block_size > 65)
        return mu_fail(err, MU_E_ARG, "block size must be 2..65: %d", o->block_size);
    if (o->type != MU_SYNTH_F32 && o->type != MU_SYNTH_F16 && o->type != MU_SYNTH_BF16 && o->type != MU_SYNTH_Q8_0)
        return mu_fail(err, MU_E_ARG, "drafter type must be f32, f16, bf16 or q8_0");
    mu_gguf *g;
    int rc = mu_gguf_open(o->target, &g, err);
    if (rc) return rc;
    mu_gguf_writer *w = NULL;
    float *row = NULL;
    uint8_t *qrow = NULL;
    tdesc *td = calloc(MAX_T, sizeof *td);
    if (!td) {
        rc = mu_fail(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    /* the target's geometry */
    int64_t t_layer, t_embd, t_ff, t_head, t_head_kv, t_hd = 0, t_ctx;
    double t_eps;
    const char *arch;
    size_t alen;
    char key[128];
    if ((rc = mu_gguf_get_str(g, "general.architecture", &arch, &alen, err))) goto out;
#define TK(suffix, dst)                                                     \
    snprintf(key, sizeof key, "%.*s." suffix, (int)(alen > 64 ? 64 : alen), arch); \
    if ((rc = mu_gguf_get_i64(g, key, dst, err))) goto out;
    TK("block_count", &t_layer)
    TK("embedding_length", &t_embd)
    TK("feed_forward_length", &t_ff)
    TK("attention.head_count", &t_head)
    TK("attention.head_count_kv", &t_head_kv)
    TK("context_length", &t_ctx)
#undef TK
    snprintf(key, sizeof key, "%.*s.attention.key_length", (int)(alen > 64 ? 64 : alen), arch);
    if (mu_gguf_find(g, key) >= 0 && (rc = mu_gguf_get_i64(g, key, &t_hd, err))) goto out;
    if (!t_hd) t_hd = t_embd / t_head;
    snprintf(key, sizeof key, "%.*s.attention.layer_norm_rms_epsilon", (int)(alen > 64 ? 64 : alen), arch);
    if ((rc = mu_gguf_get_f64(g, key, &t_eps, err))) goto out;
    const mu_gguf_tensor *temb = mu_gguf_find_tensor(g, "token_embd.weight");
    if (!temb || temb->n_dims != 2) {
        rc = mu_fail(err, MU_E_MODEL, "the target has no token_embd.weight");
        goto out;
    }
    const int n_vocab = (int)temb->ne[1];
    const int E = (int)t_embd;
    const int F = o->n_ff > 0 ? o->n_ff : (int)t_ff;
    const int H = o->n_head > 0 ? o->n_head : (int)t_head;
    const int HKV = o->n_head_kv > 0 ? o->n_head_kv : o->n_head > 0 ? o->n_head : (int)t_head_kv;
    const int HD = o->head_dim > 0 ? o->head_dim : (int)t_hd;
    const int blk = o->type == MU_SYNTH_Q8_0 ? 32 : 1; /* rows are whole Q8_0 blocks */
    if (H % HKV || HD % 2 || F % blk || E % blk || (H * HD) % blk) {
        rc = mu_fail(err, MU_E_ARG, "bad drafter geometry: heads %d / kv heads %d, head dim %d, ff %d, width %d", H,
                     HKV, HD, F, E);
        goto out;
    }
    /* target layers: given, or n_target spread over the target's layers */
    int tl[16], n_tl = o->n_target_layers;
    if (n_tl > 16) {
        rc = mu_fail(err, MU_E_ARG, "at most 16 target layers: %d", n_tl);
        goto out;
    }
    if (n_tl > 0) {
        for (int k = 0; k < n_tl; k++) {
            if (o->target_layers[k] < 0 || o->target_layers[k] >= t_layer) {
                rc = mu_fail(err, MU_E_ARG, "target layer %d is not a layer of the target (it has %lld)",
                             o->target_layers[k], (long long)t_layer);
                goto out;
            }
            tl[k] = o->target_layers[k];
        }
    } else {
        n_tl = t_layer >= 4 ? 3 : (int)t_layer;
        for (int k = 0; k < n_tl; k++) /* inputs of layers 1 .. n_layer - 1, evenly */
            tl[k] = n_tl == 1 ? (int)t_layer - 1
                              : 1 + (int)llround((double)k * (double)(t_layer - 2) / (double)(n_tl - 1));
    }
    int32_t mask = o->mask_id >= 0 ? o->mask_id : default_mask(g, n_vocab);
    if (mask >= n_vocab) {
        rc = mu_fail(err, MU_E_ARG, "mask token %d outside the target's vocabulary of %d", mask, n_vocab);
        goto out;
    }

    /* keys */
    if ((rc = mu_gguf_writer_new(&w, err))) goto out;
    char name[96];
    snprintf(name, sizeof name, "%s", o->name ? o->name : "muser-dflash-random");
    uint32_t tl32[16];
    for (int k = 0; k < n_tl; k++) tl32[k] = (uint32_t)tl[k];
    static const uint32_t ftype[] = {[MU_SYNTH_F32] = 0, [MU_SYNTH_F16] = 1, [MU_SYNTH_BF16] = 32, [MU_SYNTH_Q8_0] = 7};
    if ((rc = mu_gguf_writer_set_str(w, "general.architecture", "dflash", 6, err)) ||
        (rc = mu_gguf_writer_set_str(w, "general.name", name, strlen(name), err)) ||
        (rc = mu_gguf_writer_set_u32(w, "general.file_type", ftype[o->type], err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.context_length", (uint32_t)t_ctx, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.embedding_length", (uint32_t)E, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.block_count", (uint32_t)o->n_layer, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.feed_forward_length", (uint32_t)F, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.attention.head_count", (uint32_t)H, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.attention.head_count_kv", (uint32_t)HKV, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.attention.key_length", (uint32_t)HD, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.attention.value_length", (uint32_t)HD, err)) ||
        (rc = mu_gguf_writer_set_f32(w, "dflash.attention.layer_norm_rms_epsilon", (float)t_eps, err)) ||
        (rc = mu_gguf_writer_set_f32(w, "dflash.rope.freq_base", 10000.0f, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "dflash.block_size", (uint32_t)o->block_size, err)) ||
        /* the block attends both ways (llama.cpp's speculative code sets this
         * anyway; the key makes a plain llama.cpp context do the same) */
        (rc = mu_gguf_writer_set_bool(w, "dflash.attention.causal", false, err)) ||
        (rc = mu_gguf_writer_set_arr(w, "dflash.target_layers", MU_GGUF_I32, tl32, (uint64_t)n_tl, err)) ||
        (rc = copy_tokenizer(g, w, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", (uint32_t)mask, err)))
        goto out;

    /* tensors: fc and the encoder norm, the layers, the final norm, and
     * the embedding and head when the drafter has its own */
    int nt = 0;
#define T2(nm, a0, a1) td[nt] = (tdesc){.n_dims = 2, .ne = {a0, a1}}, snprintf(td[nt].name, 64, "%s", nm), nt++
#define T1(nm, a0) td[nt] = (tdesc){.n_dims = 1, .ne = {a0, 1}, .norm = true}, snprintf(td[nt].name, 64, "%s", nm), nt++
    if (o->own_head) T2("token_embd.weight", E, n_vocab);
    T2("fc.weight", (int64_t)n_tl * E, E);
    T1("enc.output_norm.weight", E);
    for (int il = 0; il < o->n_layer; il++) {
        char nm[64];
#define L2(s, a0, a1) snprintf(nm, sizeof nm, "blk.%d." s ".weight", il), T2(nm, a0, a1)
#define L1(s, a0) snprintf(nm, sizeof nm, "blk.%d." s ".weight", il), T1(nm, a0)
        L1("attn_norm", E);
        L2("attn_q", E, H * HD);
        L2("attn_k", E, HKV * HD);
        L2("attn_v", E, HKV * HD);
        L2("attn_output", H * HD, E);
        L1("attn_q_norm", HD);
        L1("attn_k_norm", HD);
        L1("ffn_norm", E);
        L2("ffn_gate", E, F);
        L2("ffn_up", E, F);
        L2("ffn_down", F, E);
#undef L2
#undef L1
    }
    T1("output_norm.weight", E);
    if (o->own_head) T2("output.weight", E, n_vocab);
#undef T2
#undef T1
    static const uint32_t wtype[] = {[MU_SYNTH_F32] = MU_T_F32, [MU_SYNTH_F16] = MU_T_F16,
                                     [MU_SYNTH_BF16] = MU_T_BF16, [MU_SYNTH_Q8_0] = MU_T_Q8_0};
    int64_t widest = 0;
    for (int i = 0; i < nt; i++) {
        if ((rc = mu_gguf_writer_add_tensor(w, td[i].name, td[i].norm ? MU_T_F32 : wtype[o->type], td[i].n_dims,
                                            td[i].ne, err)))
            goto out;
        if (td[i].ne[0] > widest) widest = td[i].ne[0];
    }
    row = malloc((size_t)widest * sizeof *row);
    qrow = malloc(mu_type_row_bytes(MU_T_F32, widest));
    if (!row || !qrow) {
        rc = mu_fail(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = mu_gguf_writer_open(w, path, err))) goto out;
    for (int i = 0; i < nt; i++) {
        const tdesc *t = &td[i];
        const uint32_t ty = t->norm ? MU_T_F32 : wtype[o->type];
        /* matrices: uniform with std 1/sqrt(fan in), seeded per tensor; norms: 1 */
        uint64_t s = o->seed * 0x9E3779B97F4A7C15ull;
        for (const char *c = t->name; *c; c++) s = (s ^ (uint8_t)*c) * 0x100000001B3ull;
        const float amp = t->norm ? 0 : sqrtf(3.0f / (float)t->ne[0]);
        for (int64_t r = 0; r < t->ne[1]; r++) {
            for (int64_t c = 0; c < t->ne[0]; c++)
                row[c] = t->norm ? 1.0f : amp * (2.0f * (float)((splitmix(&s) >> 40) * (1.0 / 16777216.0)) - 1.0f);
            const size_t rb = mu_type_row_bytes(ty, t->ne[0]);
            mu_quantize_row(ty, row, qrow, (int)t->ne[0]);
            if ((rc = mu_gguf_writer_write(w, qrow, rb, err))) goto out;
        }
    }
    rc = mu_gguf_writer_close(w, err);
out:
    mu_gguf_writer_free(w);
    mu_gguf_close(g);
    free(td);
    free(row);
    free(qrow);
    return rc;
}
