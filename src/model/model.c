/* model.c: binds a GGUF to the muse-glimmer architecture.
 * Owns: reading every hyperparameter key, the sliding-window pattern (bool
 * array or scalar period), and validating every tensor's presence, shape and
 * type. Does not compute anything. Design: reject anything inconsistent at
 * load with one precise message, so the forward pass can trust every shape. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kern/quant.h"
#include "../chat/chat.h"
#include "../tok/tokenizer.h"

#define ARCH "muse-glimmer"

/* ARCH.key, as src/gguf's hyperparameter getters read it */
static int get_int(const mu_gguf *g, const char *key, int64_t lo, int64_t hi, int *out, mu_err *err) {
    char full[160];
    snprintf(full, sizeof full, ARCH ".%s", key);
    return mu_gguf_get_int_in(g, full, true, 0, lo, hi, out, err);
}

static int get_float(const mu_gguf *g, const char *key, bool required, float dflt, float *out, mu_err *err) {
    char full[160];
    snprintf(full, sizeof full, ARCH ".%s", key);
    return mu_gguf_get_finite(g, full, required, dflt, out, err);
}

static int32_t opt_token(const mu_gguf *g, const char *key, int n_vocab) {
    int64_t v;
    if (mu_gguf_find(g, key) < 0 || mu_gguf_get_i64(g, key, &v, NULL) || v < 0 || v >= n_vocab) return -1;
    return (int32_t)v;
}

/* Finds a tensor and checks its dims (ne[0..n_dims)) and type class. */
static int bind_tensor(const mu_gguf *g, const char *name, int n_dims, int64_t ne0, int64_t ne1, bool norm,
                       const mu_gguf_tensor **out, mu_err *err) {
    const mu_gguf_tensor *t = mu_gguf_find_tensor(g, name);
    if (!t) return mu_fail(err, MU_E_MODEL, "model: missing tensor: %s", name);
    int64_t want[2] = {ne0, ne1};
    bool ok = t->n_dims == n_dims;
    for (int d = 0; d < n_dims && ok; d++) ok = t->ne[d] == want[d];
    if (!ok) {
        char got[96];
        int k = 0;
        for (int d = 0; d < t->n_dims; d++)
            k += snprintf(got + k, sizeof got - (size_t)k, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        if (n_dims == 1)
            return mu_fail(err, MU_E_MODEL, "model: tensor %s has shape {%s}, expected {%lld}", name, got,
                           (long long)ne0);
        return mu_fail(err, MU_E_MODEL, "model: tensor %s has shape {%s}, expected {%lld, %lld}", name, got,
                       (long long)ne0, (long long)ne1);
    }
    const mu_type_info *ti = mu_type_get(t->type);
    if (norm) {
        if (t->type != MU_T_F32)
            return mu_fail(err, MU_E_MODEL, "model: tensor %s has type %s, norm weights must be F32", name, ti->name);
    } else if (!ti->supported) {
        return mu_fail(err, MU_E_MODEL, "model: tensor %s has unsupported type %s (supported: F32 F16 BF16 Q8_0 Q4_K Q5_K Q6_K NVFP4)",
                       name, ti->name);
    }
    *out = t;
    return 0;
}

static int read_pattern(const mu_gguf *g, mu_model *m, mu_err *err) {
    int n = m->info.n_layer;
    const char *key = ARCH ".attention.sliding_window_pattern";
    int idx = mu_gguf_find(g, key);
    if (idx >= 0 && mu_gguf_kv_type(g, idx) == MU_GGUF_ARR) {
        mu_gguf_arr a;
        int rc = mu_gguf_get_arr(g, key, &a, err);
        if (rc) return rc;
        if (a.type != MU_GGUF_BOOL)
            return mu_fail(err, MU_E_MODEL, "model: key %s: expected an array of bool, found element type %u", key,
                           a.type);
        if (a.n != (uint64_t)n)
            return mu_fail(err, MU_E_MODEL, "model: key %s has %llu entries, expected one per layer (%d)", key,
                           (unsigned long long)a.n, n);
        for (int il = 0; il < n; il++) m->swa[il] = a.data[il] != 0;
        return 0;
    }
    int period = 4; /* llama.cpp's default when the key is absent */
    if (idx >= 0) {
        int rc = get_int(g, "attention.sliding_window_pattern", 0, 1 << 20, &period, err);
        if (rc) return rc;
    }
    /* period n: layer il slides iff il % n < n - 1; 0 or 1 means no sliding layers */
    for (int il = 0; il < n; il++) m->swa[il] = period > 1 && (il % period) < period - 1;
    return 0;
}

static int bind(mu_gguf *g, mu_model *m, mu_err *err) {
    const char *arch;
    size_t arch_len;
    int rc = mu_gguf_get_str(g, "general.architecture", &arch, &arch_len, err);
    if (rc) return rc;
    if (arch_len != strlen(ARCH) || memcmp(arch, ARCH, arch_len) != 0)
        return mu_fail(err, MU_E_MODEL, "model: unsupported architecture: %.*s (expected " ARCH ")",
                       (int)(arch_len > 64 ? 64 : arch_len), arch);
    mu_model_info *I = &m->info;
    if ((rc = get_int(g, "block_count", 1, 4096, &I->n_layer, err))) return rc;
    if ((rc = get_int(g, "embedding_length", 1, 1 << 20, &I->n_embd, err))) return rc;
    if ((rc = get_int(g, "feed_forward_length", 1, 1 << 22, &I->n_ff, err))) return rc;
    if ((rc = get_int(g, "attention.head_count", 1, 4096, &I->n_head, err))) return rc;
    if ((rc = get_int(g, "attention.head_count_kv", 1, 4096, &I->n_head_kv, err))) return rc;
    if ((rc = get_int(g, "context_length", 1, 1 << 24, &I->n_ctx_train, err))) return rc;
    if ((rc = get_int(g, "attention.sliding_window", 1, 1 << 24, &I->n_swa, err))) return rc;
    int hd_default = I->n_embd / I->n_head, kl = hd_default, vl = hd_default;
    char key[128];
    snprintf(key, sizeof key, ARCH ".attention.key_length");
    if (mu_gguf_find(g, key) >= 0 && (rc = get_int(g, "attention.key_length", 2, 512, &kl, err))) return rc;
    snprintf(key, sizeof key, ARCH ".attention.value_length");
    if (mu_gguf_find(g, key) >= 0 && (rc = get_int(g, "attention.value_length", 2, 512, &vl, err))) return rc;
    if (kl != vl) return mu_fail(err, MU_E_MODEL, "model: key_length %d != value_length %d is not supported", kl, vl);
    if (kl % 2) return mu_fail(err, MU_E_MODEL, "model: head dimension %d is odd (RoPE rotates pairs)", kl);
    if (kl > 512) return mu_fail(err, MU_E_MODEL, "model: head dimension %d is above the supported 512", kl);
    I->head_dim = kl;
    if (I->n_head % I->n_head_kv)
        return mu_fail(err, MU_E_MODEL, "model: head_count %d is not a multiple of head_count_kv %d", I->n_head,
                       I->n_head_kv);
    if ((rc = get_float(g, "rope.freq_base", false, 10000.f, &I->rope_base, err))) return rc;
    if ((rc = get_float(g, "rope.freq_base_swa", false, I->rope_base, &I->rope_base_swa, err))) return rc;
    if ((rc = get_float(g, "attention.layer_norm_rms_epsilon", true, 0, &I->eps, err))) return rc;
    if ((rc = get_float(g, "final_logit_softcapping", false, 30.f, &I->softcap, err))) return rc;
    if ((rc = get_float(g, "logit_scale", true, 0, &I->logit_scale, err))) return rc;
    if (I->rope_base <= 0 || I->rope_base_swa <= 0) return mu_fail(err, MU_E_MODEL, "model: rope.freq_base must be positive");
    if (I->eps <= 0 || I->eps > 1) return mu_fail(err, MU_E_MODEL, "model: layer_norm_rms_epsilon out of range: %g", I->eps);
    if (I->softcap < 0) return mu_fail(err, MU_E_MODEL, "model: final_logit_softcapping is negative: %g", I->softcap);

    m->swa = calloc((size_t)I->n_layer, sizeof *m->swa);
    m->layers = calloc((size_t)I->n_layer, sizeof *m->layers);
    if (!m->swa || !m->layers) return mu_fail(err, MU_E_NOMEM, "model: out of memory");
    if ((rc = read_pattern(g, m, err))) return rc;
    I->swa_layers = m->swa;

    const mu_gguf_tensor *te = mu_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return mu_fail(err, MU_E_MODEL, "model: missing tensor: token_embd.weight");
    if (te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > (1 << 24))
        return mu_fail(err, MU_E_MODEL, "model: tensor token_embd.weight has %d dims, expected {n_embd, n_vocab}",
                       te->n_dims);
    I->n_vocab = (int)te->ne[1];
    int E = I->n_embd, V = I->n_vocab, Q = I->n_head * I->head_dim, KV = I->n_head_kv * I->head_dim, F = I->n_ff;
    if ((rc = bind_tensor(g, "token_embd.weight", 2, E, V, false, &m->tok_embd, err))) return rc;
    if ((rc = bind_tensor(g, "output_norm.weight", 1, E, 0, true, &m->output_norm, err))) return rc;
    if ((rc = bind_tensor(g, "output.weight", 2, E, V, false, &m->output, err))) return rc;
    int n_bound = 3;
    for (int il = 0; il < I->n_layer; il++) {
        mu_layer_w *L = &m->layers[il];
        char nm[96];
#define T(field, suffix, nd, a, b, norm)                                                     \
    snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", il);                                 \
    if ((rc = bind_tensor(g, nm, nd, a, b, norm, &L->field, err))) return rc;                 \
    n_bound++;
        T(attn_norm, "attn_norm", 1, E, 0, true)
        T(wq, "attn_q", 2, E, Q, false)
        T(wk, "attn_k", 2, E, KV, false)
        T(wv, "attn_v", 2, E, KV, false)
        T(q_norm, "attn_q_norm", 1, I->head_dim, 0, true)
        T(k_norm, "attn_k_norm", 1, I->head_dim, 0, true)
        T(wgate, "attn_gate", 2, E, Q, false)
        T(wo, "attn_output", 2, Q, E, false)
        T(post_attn_norm, "post_attention_norm", 1, E, 0, true)
        T(ffn_norm, "ffn_norm", 1, E, 0, true)
        T(ffn_gate, "ffn_gate", 2, E, F, false)
        T(ffn_up, "ffn_up", 2, E, F, false)
        T(ffn_down, "ffn_down", 2, F, E, false)
        T(post_ffw_norm, "post_ffw_norm", 1, E, 0, true)
#undef T
    }
    if (mu_gguf_n_tensors(g) != n_bound) {
        for (int i = 0; i < mu_gguf_n_tensors(g); i++) {
            const char *nm = mu_gguf_tensor_at(g, i)->name;
            bool known = false;
            if (!strcmp(nm, "token_embd.weight") || !strcmp(nm, "output_norm.weight") || !strcmp(nm, "output.weight"))
                known = true;
            int il;
            char rest[64];
            if (!known && sscanf(nm, "blk.%d.%63s", &il, rest) == 2 && il >= 0 && il < I->n_layer) {
                static const char *names[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm",
                                              "attn_k_norm", "attn_gate", "attn_output", "post_attention_norm",
                                              "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"};
                for (size_t k = 0; k < sizeof names / sizeof *names && !known; k++) {
                    char full[96];
                    snprintf(full, sizeof full, "blk.%d.%s.weight", il, names[k]);
                    known = !strcmp(full, nm);
                }
            }
            if (!known) return mu_fail(err, MU_E_MODEL, "model: unexpected tensor: %s", nm);
        }
    }

    const char *nm;
    size_t nm_len;
    if (mu_gguf_find(g, "general.name") >= 0 && mu_gguf_get_str(g, "general.name", &nm, &nm_len, NULL) == 0) {
        m->name = malloc(nm_len + 1);
        if (!m->name) return mu_fail(err, MU_E_NOMEM, "model: out of memory");
        memcpy(m->name, nm, nm_len);
        m->name[nm_len] = 0;
    }
    I->name = m->name ? m->name : "";
    I->bos = opt_token(g, "tokenizer.ggml.bos_token_id", V);
    I->eos = opt_token(g, "tokenizer.ggml.eos_token_id", V);
    I->eot = opt_token(g, "tokenizer.ggml.eot_token_id", V);
    I->eom = opt_token(g, "tokenizer.ggml.eom_token_id", V);
    I->add_bos = false; /* llama.cpp's default for this vocabulary when the key is absent */
    if (mu_gguf_find(g, "tokenizer.ggml.add_bos_token") >= 0) {
        bool b;
        if ((rc = mu_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, err))) return rc;
        I->add_bos = b;
    }
    /* The tokenizer is optional (a weights-only file still runs on ids), but
     * a present and broken one fails the load. */
    if (mu_gguf_find(g, "tokenizer.ggml.model") >= 0) {
        mu_tok *tok;
        if ((rc = mu_tok_new(g, &tok, err))) return rc;
        m->tok = tok;
        if (mu_tok_n_vocab(tok) != V)
            return mu_fail(err, MU_E_MODEL, "model: tokenizer has %d tokens, token_embd.weight has %d rows",
                           mu_tok_n_vocab(tok), V);
        I->bos = mu_tok_bos(tok);
        I->eos = mu_tok_eos(tok);
        I->eot = mu_tok_eot(tok);
        I->eom = mu_tok_eom(tok);
        I->add_bos = mu_tok_add_bos(tok);
    }
    /* the chat template, copied so it is NUL-terminated */
    const char *tp;
    size_t tn;
    if (mu_gguf_find(g, "tokenizer.chat_template") >= 0 &&
        mu_gguf_get_str(g, "tokenizer.chat_template", &tp, &tn, NULL) == 0) {
        m->chat_template = malloc(tn + 1);
        if (!m->chat_template) return mu_fail(err, MU_E_NOMEM, "model: out of memory");
        memcpy(m->chat_template, tp, tn);
        m->chat_template[tn] = 0;
    }
    return 0;
}

static void model_release(mu_model *m) {
    mu_tok_free(m->tok);
    free(m->swa);
    free(m->layers);
    free(m->name);
    free(m->chat_template);
    free(m);
}

int mu_model_bind(mu_gguf *g, mu_model **out, mu_err *err) {
    mu_model *m = calloc(1, sizeof *m);
    if (!m) return mu_fail(err, MU_E_NOMEM, "model: out of memory");
    m->g = g;
    int rc = bind(g, m, err);
    if (rc) {
        model_release(m);
        return rc;
    }
    *out = m;
    return 0;
}

int mu_model_open(const char *path, mu_model **out, mu_err *err) {
    mu_gguf *g;
    int rc = mu_gguf_open(path, &g, err);
    if (rc) return rc;
    mu_model *m;
    if ((rc = mu_model_bind(g, &m, err))) {
        mu_gguf_close(g);
        return rc;
    }
    *out = m;
    return 0;
}

void mu_model_close(mu_model *m) {
    if (!m) return;
    mu_gguf_close(m->g);
    model_release(m);
}

const mu_model_info *mu_model_get_info(const mu_model *m) { return &m->info; }
const mu_gguf *mu_model_gguf(const mu_model *m) { return m->g; }
const mu_tok *mu_model_tokenizer(const mu_model *m) { return m->tok; }

int mu_tokenize(const mu_model *m, const char *text, size_t len, bool add_bos, bool parse_special, int32_t **ids,
                int *n, mu_err *err) {
    if (!m->tok) return mu_fail(err, MU_E_UNSUPPORTED, "model: this GGUF has no tokenizer");
    int32_t *body;
    int nb;
    int rc = mu_tok_encode(m->tok, text, len, parse_special, &body, &nb, err);
    if (rc) return rc;
    int32_t bos = mu_tok_bos(m->tok);
    int extra = add_bos && bos >= 0 ? 1 : 0;
    int32_t *all = malloc(((size_t)nb + (size_t)extra + 1) * sizeof *all);
    if (!all) {
        free(body);
        return mu_fail(err, MU_E_NOMEM, "model: out of memory tokenizing %zu bytes", len);
    }
    if (extra) all[0] = bos;
    if (nb) memcpy(all + extra, body, (size_t)nb * sizeof *all);
    free(body);
    *ids = all;
    *n = nb + extra;
    return 0;
}

uint32_t mu_model_gguf_version(const mu_model *m) { return mu_gguf_version(m->g); }
uint64_t mu_model_file_bytes(const mu_model *m) { return mu_gguf_file_bytes(m->g); }
int mu_model_n_tensors(const mu_model *m) { return mu_gguf_n_tensors(m->g); }

int mu_model_tensor(const mu_model *m, int i, mu_tensor_info *out, mu_err *err) {
    if (i < 0 || i >= mu_gguf_n_tensors(m->g))
        return mu_fail(err, MU_E_ARG, "model: tensor index %d outside 0..%d", i, mu_gguf_n_tensors(m->g) - 1);
    const mu_gguf_tensor *t = mu_gguf_tensor_at(m->g, i);
    *out = (mu_tensor_info){.name = t->name, .type = mu_type_get(t->type)->name, .n_dims = t->n_dims,
                            .n_elems = t->n_elems, .bytes = t->bytes};
    for (int d = 0; d < 4; d++) out->ne[d] = d < MU_GGUF_MAX_DIMS ? t->ne[d] : 1;
    return 0;
}

const char *mu_model_meta_str(const mu_model *m, const char *key, size_t *len) {
    const char *s;
    size_t n;
    mu_err err;
    if (mu_gguf_find(m->g, key) < 0 || mu_gguf_get_str(m->g, key, &s, &n, &err)) return NULL;
    if (len) *len = n;
    return s;
}

int mu_model_meta_int(const mu_model *m, const char *key, int64_t *out) {
    mu_err err;
    if (mu_gguf_find(m->g, key) < 0) return MU_E_ARG;
    return mu_gguf_get_i64(m->g, key, out, &err);
}

const char *mu_model_chat_template(const mu_model *m) { return m->chat_template; }

int mu_chat_apply(const mu_model *m, const char *messages_json, const char *tools_json, const char *reasoning,
                  bool add_generation_prompt, char **out, mu_err *err) {
    json_error_t je;
    json_t *msgs = json_loads(messages_json ? messages_json : "", 0, &je);
    if (!json_is_array(msgs)) {
        json_decref(msgs);
        return mu_fail(err, MU_E_ARG, "chat: messages must be a JSON array");
    }
    json_t *tools = NULL;
    if (tools_json) {
        tools = json_loads(tools_json, 0, &je);
        if (!json_is_array(tools)) {
            json_decref(msgs);
            json_decref(tools);
            return mu_fail(err, MU_E_ARG, "chat: tools must be a JSON array");
        }
    }
    char bos[64] = "", eos[64] = "";
    if (m->tok) {
        mu_tok_text_copy(m->tok, mu_tok_bos(m->tok), bos, sizeof bos);
        mu_tok_text_copy(m->tok, mu_tok_eos(m->tok), eos, sizeof eos);
    }
    int rc = mu_chat_render(m->chat_template, msgs, tools, reasoning, add_generation_prompt, bos[0] ? bos : NULL,
                            eos[0] ? eos : NULL, out, err);
    json_decref(msgs);
    json_decref(tools);
    return rc;
}

bool mu_model_is_stop(const mu_model *m, int32_t tok) {
    return tok >= 0 && (tok == m->info.eos || tok == m->info.eot);
}
