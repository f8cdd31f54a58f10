/* dflash.c: binds a GGUF to llama.cpp's `dflash` drafter architecture.
 * Owns: reading the drafter's keys (geometry, dflash.target_layers,
 * dflash.block_size, the mask token) and checking every tensor's presence,
 * shape and type. Does not compute anything (src/engine/draft.c does), and
 * does not check the drafter against a target (that needs both).
 * Design: the facts follow llama.cpp's loader for the architecture (which
 * keys are required, the defaults of the optional ones); whatever muser's
 * drafter cannot run is refused here with its name, never half-run. */
#include "dflash.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kern/quant.h"

#define ARCH "dflash"

/* ARCH.key, as src/gguf's hyperparameter getters read it */
static int get_int(const mu_gguf *g, const char *key, bool required, int64_t dflt, int64_t lo, int64_t hi, int *out,
                   mu_err *err) {
    char full[160];
    snprintf(full, sizeof full, ARCH ".%s", key);
    return mu_gguf_get_int_in(g, full, required, dflt, lo, hi, out, err);
}

static int get_float(const mu_gguf *g, const char *key, bool required, float dflt, float *out, mu_err *err) {
    char full[160];
    snprintf(full, sizeof full, ARCH ".%s", key);
    return mu_gguf_get_finite(g, full, required, dflt, out, err);
}

/* A tensor of n_dims dims (ne0, ne1); NULL into *out when absent and optional. */
static int bind(const mu_gguf *g, const char *name, int n_dims, int64_t ne0, int64_t ne1, bool norm, bool optional,
                const mu_gguf_tensor **out, mu_err *err) {
    const mu_gguf_tensor *t = mu_gguf_find_tensor(g, name);
    *out = NULL;
    if (!t) return optional ? 0 : mu_fail(err, MU_E_MODEL, "dflash: missing tensor: %s", name);
    bool ok = t->n_dims == n_dims && t->ne[0] == ne0 && (n_dims == 1 || t->ne[1] == ne1);
    if (!ok) {
        if (n_dims == 1)
            return mu_fail(err, MU_E_MODEL, "dflash: tensor %s has %d dims {%lld, ...}, expected {%lld}", name,
                           t->n_dims, (long long)t->ne[0], (long long)ne0);
        return mu_fail(err, MU_E_MODEL, "dflash: tensor %s has %d dims {%lld, %lld, ...}, expected {%lld, %lld}", name,
                       t->n_dims, (long long)t->ne[0], (long long)t->ne[1], (long long)ne0, (long long)ne1);
    }
    const mu_type_info *ti = mu_type_get(t->type);
    if (norm && t->type != MU_T_F32)
        return mu_fail(err, MU_E_MODEL, "dflash: tensor %s has type %s, norm weights must be F32", name, ti->name);
    if (!norm && !ti->supported)
        return mu_fail(err, MU_E_MODEL, "dflash: tensor %s has unsupported type %s", name, ti->name);
    *out = t;
    return 0;
}

#define SHORTLIST_KEY "muser.dflash.shortlist"

/* Parts of llama.cpp's dflash family that muser's drafter does not run. */
static int refuse_unsupported(const mu_gguf *g, mu_err *err) {
    static const char *const keys[][2] = {
        {ARCH ".hyper_connection.count", "DeepSeek-V4 (DSpark) stages"},
        {ARCH ".selector_rank", "DFlash2 selector"},
        {ARCH ".conv_kernel_size", "DFlash2 convolutions"},
        {ARCH ".rope.dimension_sections", "M-RoPE sections"},
        {ARCH ".rope.scaling.type", "RoPE scaling"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (mu_gguf_find(g, keys[i][0]) >= 0)
            return mu_fail(err, MU_E_MODEL, "dflash: unsupported drafter: %s (key %s)", keys[i][1], keys[i][0]);
    static const char *const tensors[][2] = {
        {"d2t", "a reduced draft vocabulary"},
        {"markov_w1.weight", "a DSpark Markov head"},
        {"selector_hidden.weight", "a DFlash2 selector"},
        {"blk.0.attn_conv_proj.weight", "DFlash2 convolutions"},
        {"blk.0.attn_sinks.weight", "attention sinks"},
        {"blk.0.layer_output_scale.weight", "layer output scales"},
        {"rope_freqs.weight", "RoPE frequency factors"},
        {"blk.0.rope_freqs.weight", "RoPE frequency factors"},
        {"fc.scale", "a scaled fc"},
    };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
        if (mu_gguf_find_tensor(g, tensors[i][0]))
            return mu_fail(err, MU_E_MODEL, "dflash: unsupported drafter: %s (tensor %s)", tensors[i][1],
                           tensors[i][0]);
    const char *s;
    size_t n;
    if (mu_gguf_find(g, ARCH ".hidden_activation") >= 0) {
        if (mu_gguf_get_str(g, ARCH ".hidden_activation", &s, &n, err)) return MU_E_MODEL;
        if (!(n == 4 && !memcmp(s, "silu", 4)))
            return mu_fail(err, MU_E_MODEL, "dflash: unsupported hidden activation (muser runs silu): %.*s",
                           (int)(n > 32 ? 32 : n), s);
    }
    return 0;
}

int mu_dflash_bind(mu_gguf *g, mu_dflash_model **out, mu_err *err) {
    const char *arch;
    size_t alen;
    if (mu_gguf_get_str(g, "general.architecture", &arch, &alen, err)) return MU_E_MODEL;
    if (!(alen == strlen(ARCH) && !memcmp(arch, ARCH, alen)))
        return mu_fail(err, MU_E_MODEL, "dflash: not a DFlash drafter: architecture %.*s", (int)(alen > 64 ? 64 : alen),
                       arch);
    int rc = refuse_unsupported(g, err);
    if (rc) return rc;
    mu_dflash_model *m = calloc(1, sizeof *m);
    if (!m) return mu_fail(err, MU_E_NOMEM, "dflash: out of memory");
    if ((rc = get_int(g, "block_count", true, 0, 1, MU_DFLASH_MAX_LAYERS, &m->n_layer, err)) ||
        (rc = get_int(g, "embedding_length", true, 0, 1, 1 << 16, &m->n_embd, err)) ||
        (rc = get_int(g, "feed_forward_length", true, 0, 1, 1 << 18, &m->n_ff, err)) ||
        (rc = get_int(g, "attention.head_count", true, 0, 1, 1024, &m->n_head, err)) ||
        (rc = get_int(g, "attention.head_count_kv", false, m->n_head, 1, m->n_head, &m->n_head_kv, err)) ||
        (rc = get_int(g, "context_length", false, 0, 0, INT32_MAX, &m->n_ctx_train, err)) ||
        (rc = get_int(g, "block_size", false, 16, 2, MU_DFLASH_MAX_BLOCK, &m->block_size, err)))
        goto fail;
    if (m->n_head % m->n_head_kv) {
        rc = mu_fail(err, MU_E_MODEL, "dflash: head_count %d is not a multiple of head_count_kv %d", m->n_head,
                     m->n_head_kv);
        goto fail;
    }
    if ((rc = get_int(g, "attention.key_length", false, m->n_embd / m->n_head, 2, 1024, &m->head_dim, err))) goto fail;
    int vlen, nrot;
    if ((rc = get_int(g, "attention.value_length", false, m->head_dim, 1, 1024, &vlen, err)) ||
        (rc = get_int(g, "rope.dimension_count", false, m->head_dim, 1, 1024, &nrot, err)))
        goto fail;
    if (vlen != m->head_dim || nrot != m->head_dim || m->head_dim % 2) {
        rc = mu_fail(err, MU_E_MODEL, "dflash: unsupported head geometry: key length %d, value length %d, rope dims %d",
                     m->head_dim, vlen, nrot);
        goto fail;
    }
    if ((rc = get_float(g, "attention.layer_norm_rms_epsilon", true, 0, &m->eps, err)) ||
        (rc = get_float(g, "rope.freq_base", false, 10000.0f, &m->rope_base, err)) ||
        (rc = get_float(g, "embedding_scale", false, 0.0f, &m->emb_scale, err)) ||
        (rc = get_float(g, "attention.scale", false, 0.0f, &m->kq_scale, err)))
        goto fail;
    if (m->kq_scale == 0) m->kq_scale = 1.0f / sqrtf((float)m->head_dim);
    if (mu_gguf_find(g, ARCH ".attention.causal") >= 0 &&
        (rc = mu_gguf_get_bool(g, ARCH ".attention.causal", &m->causal, err)))
        goto fail;

    /* the target layers: required, as in llama.cpp */
    mu_gguf_arr a;
    if ((rc = mu_gguf_get_arr(g, ARCH ".target_layers", &a, err))) goto fail;
    if (a.type == MU_GGUF_STR || a.type == MU_GGUF_ARR || a.type == MU_GGUF_F32 || a.type == MU_GGUF_F64 ||
        a.type == MU_GGUF_BOOL || a.n < 1 || a.n > MU_DFLASH_MAX_TARGET) {
        rc = mu_fail(err, MU_E_MODEL, "dflash: " ARCH ".target_layers must hold 1..%d integers (has %llu of type %u)",
                     MU_DFLASH_MAX_TARGET, (unsigned long long)a.n, a.type);
        goto fail;
    }
    m->n_target = (int)a.n;
    for (int k = 0; k < m->n_target; k++) {
        int64_t v = mu_gguf_arr_i64(&a, (uint64_t)k);
        if (v < 0 || v > 4096) {
            rc = mu_fail(err, MU_E_MODEL, "dflash: target layer %d out of range: %lld", k, (long long)v);
            goto fail;
        }
        m->target_layers[k] = (int)v;
    }

    /* sliding layers (optional): a window and one flag per layer */
    if ((rc = get_int(g, "attention.sliding_window", false, 0, 0, INT32_MAX, &m->n_swa, err))) goto fail;
    if (m->n_swa > 0) {
        mu_gguf_arr p;
        if ((rc = mu_gguf_get_arr(g, ARCH ".attention.sliding_window_pattern", &p, err))) goto fail;
        if (p.type != MU_GGUF_BOOL || p.n != (uint64_t)m->n_layer) {
            rc = mu_fail(err, MU_E_MODEL, "dflash: sliding_window_pattern must be %d bools", m->n_layer);
            goto fail;
        }
        for (int il = 0; il < m->n_layer; il++) m->swa[il] = p.data[il] != 0;
    }

    /* the mask token fills the block after the last token */
    int64_t mid;
    if (mu_gguf_find(g, "tokenizer.ggml.mask_token_id") < 0) {
        rc = mu_fail(err, MU_E_MODEL, "dflash: missing key: tokenizer.ggml.mask_token_id (the block's mask token)");
        goto fail;
    }
    if ((rc = mu_gguf_get_i64(g, "tokenizer.ggml.mask_token_id", &mid, err))) goto fail;
    if (mid < 0 || mid > INT32_MAX) {
        rc = mu_fail(err, MU_E_MODEL, "dflash: mask token out of range: %lld", (long long)mid);
        goto fail;
    }
    m->mask_id = (int32_t)mid;

    /* muser's own (optional): the draft head's shortlist, increasing token
     * ids (docs/speculative.md "The shortlist head"; llama.cpp ignores it) */
    if (mu_gguf_find(g, SHORTLIST_KEY) >= 0) {
        mu_gguf_arr sl;
        if ((rc = mu_gguf_get_arr(g, SHORTLIST_KEY, &sl, err))) goto fail;
        if (sl.type != MU_GGUF_I32 || sl.n < 1 || sl.n > INT32_MAX) {
            rc = mu_fail(err, MU_E_MODEL, "dflash: " SHORTLIST_KEY " must hold int32 token ids (has %llu of type %u)",
                         (unsigned long long)sl.n, sl.type);
            goto fail;
        }
        for (uint64_t i = 0; i < sl.n; i++) {
            const int64_t v = mu_gguf_arr_i64(&sl, i);
            if (v < 0 || (i > 0 && v <= mu_gguf_arr_i64(&sl, i - 1))) {
                rc = mu_fail(err, MU_E_MODEL, "dflash: " SHORTLIST_KEY " must hold increasing ids >= 0: [%llu] = %lld",
                             (unsigned long long)i, (long long)v);
                goto fail;
            }
        }
        m->shortlist = sl;
        m->n_shortlist = (int)sl.n;
    }

    /* tensors */
    const int E = m->n_embd, nq = m->n_head * m->head_dim, nkv = m->n_head_kv * m->head_dim;
    const mu_gguf_tensor *t = mu_gguf_find_tensor(g, "output.weight");
    if (!t) t = mu_gguf_find_tensor(g, "token_embd.weight");
    m->n_vocab = t && t->n_dims == 2 && t->ne[1] > 0 && t->ne[1] <= INT32_MAX ? (int)t->ne[1] : 0;
    if ((rc = bind(g, "fc.weight", 2, (int64_t)m->n_target * E, E, false, false, &m->fc, err)) ||
        (rc = bind(g, "enc.output_norm.weight", 1, E, 0, true, false, &m->enc_norm, err)) ||
        (rc = bind(g, "output_norm.weight", 1, E, 0, true, false, &m->output_norm, err)) ||
        (rc = bind(g, "token_embd.weight", 2, E, m->n_vocab, false, true, &m->tok_embd, err)) ||
        (rc = bind(g, "output.weight", 2, E, m->n_vocab, false, true, &m->output, err)))
        goto fail;
    if (!m->output) m->output = m->tok_embd; /* llama.cpp ties the head to the embedding */
    if (m->n_vocab && m->mask_id >= m->n_vocab) {
        rc = mu_fail(err, MU_E_MODEL, "dflash: mask token %d outside the vocabulary of %d", m->mask_id, m->n_vocab);
        goto fail;
    }
    for (int il = 0; il < m->n_layer; il++) {
        mu_dflash_layer *L = &m->layers[il];
        char nm[96];
#define B(field, suffix, nd, a0, a1, norm, opt)                                    \
    snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", il);                       \
    if ((rc = bind(g, nm, nd, a0, a1, norm, opt, &L->field, err))) goto fail;
        B(attn_norm, "attn_norm", 1, E, 0, true, false)
        B(wq, "attn_q", 2, E, nq, false, false)
        B(wk, "attn_k", 2, E, nkv, false, false)
        B(wv, "attn_v", 2, E, nkv, false, false)
        B(wo, "attn_output", 2, nq, E, false, false)
        B(q_norm, "attn_q_norm", 1, m->head_dim, 0, true, false)
        B(k_norm, "attn_k_norm", 1, m->head_dim, 0, true, false)
        B(attn_post_norm, "post_attention_norm", 1, E, 0, true, true)
        B(ffn_norm, "ffn_norm", 1, E, 0, true, false)
        B(ffn_gate, "ffn_gate", 2, E, m->n_ff, false, false)
        B(ffn_up, "ffn_up", 2, E, m->n_ff, false, false)
        B(ffn_down, "ffn_down", 2, m->n_ff, E, false, false)
        B(ffn_post_norm, "post_ffw_norm", 1, E, 0, true, true)
#undef B
    }
    m->g = g;
    *out = m;
    return 0;
fail:
    free(m);
    return rc ? rc : MU_E_MODEL;
}

int mu_dflash_open(const char *path, mu_dflash_model **out, mu_err *err) {
    mu_gguf *g;
    int rc = mu_gguf_open(path, &g, err);
    if (rc) return rc;
    if ((rc = mu_dflash_bind(g, out, err))) mu_gguf_close(g);
    return rc;
}

void mu_dflash_close(mu_dflash_model *m) {
    if (!m) return;
    mu_gguf_close(m->g);
    free(m);
}
