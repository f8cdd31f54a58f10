/* synth.c: synthetic Muse Glimmer models (include/muser_synth.h).
 * Owns: presets and defaults, the per-tensor type choice (including
 * llama.cpp's mixes), the tensor list and its weight distributions, the
 * metadata keys, and the parallel generate-quantize-write pipeline.
 * Does not own: the GGUF byte format (gguf_write.c), the quantizers
 * (quantize.c), the vocabulary (vocab_gen.c), option parsing, messages,
 * timing or signals (cmd/muser/gen.c).
 * Key design choice: every row of every tensor gets its own random stream
 * seeded from (seed, tensor name, row), so the file's bytes depend only on
 * the options, never on the thread count or batching; worker threads fill
 * one batch while the calling thread writes the previous one. */
#include "../../include/muser_synth.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/err.h"
#include "../gguf/gguf.h"
#include "../kern/kern.h"
#include "../kern/quant.h"
#include "gguf_write.h"
#include "quantize.h"
#include "vocab_gen.h"

/* Output bytes are pinned by golden tests: no fma contraction (see quantize.c). */
#ifdef __clang__
#pragma clang fp contract(off)
#endif

_Static_assert(MU_SYNTH_MIN_VOCAB == 256 + MU_VOCAB_N_SPECIAL + 1, "MU_SYNTH_MIN_VOCAB");

#define ARCH "muse-glimmer"
#define BATCH_BYTES (16u << 20)
#define MAX_WIDTH (1 << 22) /* n_head * head_dim */

/* ---- configuration ------------------------------------------------------ */

static const struct {
    const char *name, *label;
    uint32_t type;     /* base tensor type */
    uint32_t llama_ft; /* llama.cpp's general.file_type */
} FTYPES[MU_SYNTH_N_TYPES] = {
    [MU_SYNTH_F32] = {"f32", "F32", MU_T_F32, 0},
    [MU_SYNTH_F16] = {"f16", "F16", MU_T_F16, 1},
    [MU_SYNTH_BF16] = {"bf16", "BF16", MU_T_BF16, 32},
    [MU_SYNTH_Q8_0] = {"q8_0", "Q8_0", MU_T_Q8_0, 7},
    [MU_SYNTH_Q4_K] = {"q4_k", "Q4_K", MU_T_Q4_K, 14},
    [MU_SYNTH_Q5_K] = {"q5_k", "Q5_K", MU_T_Q5_K, 16},
    [MU_SYNTH_Q6_K] = {"q6_k", "Q6_K", MU_T_Q6_K, 18},
    [MU_SYNTH_Q4_K_M] = {"q4_k_m", "Q4_K_M", MU_T_Q4_K, 15},
    [MU_SYNTH_Q4_K_S] = {"q4_k_s", "Q4_K_S", MU_T_Q4_K, 14},
    [MU_SYNTH_Q5_K_S] = {"q5_k_s", "Q5_K_S", MU_T_Q5_K, 16},
    [MU_SYNTH_Q5_K_M] = {"q5_k_m", "Q5_K_M", MU_T_Q5_K, 17},
    [MU_SYNTH_NVFP4] = {"nvfp4", "NVFP4", MU_T_NVFP4, 39},
};

static const struct {
    const char *name;
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_swa, n_ctx;
} PRESETS[] = {
    {"tiny", 4, 256, 512, 4, 2, 128, 1024, 8, 4096},
    {"fixture", 8, 256, 512, 8, 2, 64, 1024, 16, 4096},
    {"1b", 16, 2048, 6144, 16, 2, 128, 32768, 2048, 131072},
    {"full", 52, 6656, 19968, 32, 2, 128, 202048, 2048, 131072},
};

static const char DEFAULT_TEMPLATE[] =
    "{{ bos_token }}{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|eot|>"
    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}";

int mu_synth_type_parse(const char *name) {
    for (int i = 0; i < MU_SYNTH_N_TYPES; i++)
        if (!strcmp(name, FTYPES[i].name)) return i;
    return -1;
}

const char *mu_synth_type_label(mu_synth_type t) {
    return (unsigned)t < MU_SYNTH_N_TYPES ? FTYPES[t].label : "?";
}

int mu_synth_preset(mu_synth_opts *o, const char *name, mu_err *err) {
    for (size_t k = 0; k < sizeof PRESETS / sizeof PRESETS[0]; k++) {
        if (strcmp(name, PRESETS[k].name)) continue;
        o->preset = PRESETS[k].name;
        o->n_layer = PRESETS[k].n_layer;
        o->n_embd = PRESETS[k].n_embd;
        o->n_ff = PRESETS[k].n_ff;
        o->n_head = PRESETS[k].n_head;
        o->n_head_kv = PRESETS[k].n_head_kv;
        o->head_dim = PRESETS[k].head_dim;
        o->n_vocab = PRESETS[k].n_vocab;
        o->n_swa = PRESETS[k].n_swa;
        o->n_ctx = PRESETS[k].n_ctx;
        return 0;
    }
    return mu_fail(err, MU_E_ARG, "unknown preset (tiny, fixture, 1b, full): %.64s", name);
}

void mu_synth_defaults(mu_synth_opts *o) {
    memset(o, 0, sizeof *o);
    mu_synth_preset(o, "tiny", NULL);
    o->swa_period = 4;
    o->type = MU_SYNTH_Q4_K_M;
    o->seed = 1;
    o->has_softcap = true;
    o->softcap = 20.0;
    o->logit_scale = 0.19611613;
    o->rope_base = 500000.0;
    o->eps = 1e-5;
    o->max_merges = -1;
    o->quant = MU_SYNTH_QUANT_AUTO;
}

/* The checks the rest of the file relies on; a CLI checks its options first
 * with its own messages. */
static int opts_check(const mu_synth_opts *o, mu_err *err) {
    if ((unsigned)o->type >= MU_SYNTH_N_TYPES) return mu_fail(err, MU_E_ARG, "unknown type %d", (int)o->type);
    if (o->n_layer < 1 || o->n_layer > MU_SYNTH_MAX_LAYERS)
        return mu_fail(err, MU_E_ARG, "n_layer outside 1..%d: %d", MU_SYNTH_MAX_LAYERS, o->n_layer);
    if (o->n_embd < 1 || o->n_ff < 1 || o->n_head < 1 || o->n_head_kv < 1 || o->n_swa < 1 || o->n_ctx < 1)
        return mu_fail(err, MU_E_ARG, "a geometry value is below 1");
    if (o->head_dim < 2 || o->head_dim % 2) return mu_fail(err, MU_E_ARG, "head_dim must be even (RoPE pairs): %d", o->head_dim);
    if (o->n_head % o->n_head_kv)
        return mu_fail(err, MU_E_ARG, "n_head %d is not a multiple of n_head_kv %d", o->n_head, o->n_head_kv);
    if ((int64_t)o->n_head * o->head_dim > MAX_WIDTH) return mu_fail(err, MU_E_ARG, "attention width too large");
    if (o->n_vocab < MU_SYNTH_MIN_VOCAB)
        return mu_fail(err, MU_E_ARG, "n_vocab below %d: %d", MU_SYNTH_MIN_VOCAB, o->n_vocab);
    if (!o->swa_layers && o->swa_period < 1) return mu_fail(err, MU_E_ARG, "swa_period below 1: %d", o->swa_period);
    if (o->swa_layers && o->swa_period_key) return mu_fail(err, MU_E_ARG, "swa_layers and swa_period_key both set");
    if (o->chat_template && o->no_chat_template)
        return mu_fail(err, MU_E_ARG, "chat_template and no_chat_template both set");
    if (o->n_threads < 0 || o->n_threads > MU_SYNTH_MAX_THREADS)
        return mu_fail(err, MU_E_ARG, "n_threads outside 0..%d: %d", MU_SYNTH_MAX_THREADS, o->n_threads);
    return 0;
}

static bool layer_sliding(const mu_synth_opts *o, int il) {
    if (o->swa_layers) return o->swa_layers[il];
    return il % o->swa_period < o->swa_period - 1;
}

/* ---- tensors ------------------------------------------------------------ */

enum { INIT_NORMAL, INIT_UNIFORM, INIT_CONST };

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[2];
    uint32_t type;
    int init;
    float a, b; /* NORMAL: std; UNIFORM: [a, b); CONST: a */
    uint64_t key; /* per-tensor stream key */
    int64_t quiet0, quiet1; /* rows [quiet0, quiet1) get 1/20 of the std */
} tdesc;

/* llama.cpp's use_more_bits (llama-quant.cpp) for the Q4_K_M mix. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Picks the stored type of a matrix. */
static int matrix_type(const mu_synth_opts *o, const char *role, int il, int64_t ne0, uint32_t *out, mu_err *err) {
    uint32_t t = FTYPES[o->type].type;
    bool output = !strcmp(role, "output"), attn_v = !strcmp(role, "attn_v"), ffn_down = !strcmp(role, "ffn_down");
    /* llama.cpp's mixes (llama_tensor_get_type); the single types stay uniform, like llama-quantize --pure */
    switch (o->type) {
    case MU_SYNTH_Q4_K_M:
    case MU_SYNTH_Q5_K_M:
        if (output || ((attn_v || ffn_down) && use_more_bits(il, o->n_layer))) t = MU_T_Q6_K;
        break;
    case MU_SYNTH_Q4_K_S:
        if (output) t = MU_T_Q6_K;
        else if ((attn_v && il < 4) || (ffn_down && il < o->n_layer / 8)) t = MU_T_Q5_K;
        break;
    case MU_SYNTH_Q5_K_S:
        if (output) t = MU_T_Q6_K;
        break;
    default:
        break;
    }
    const mu_type_info *ti = mu_type_get(t);
    if (ne0 % ti->blck) {
        /* llama.cpp falls back Q6_K -> Q8_0, Q4_K -> Q5_0, Q5_K -> Q5_1; muser reads neither Q5_0 nor Q5_1 */
        if (t == MU_T_Q6_K && ne0 % MU_QK8_0 == 0) {
            t = MU_T_Q8_0;
        } else {
            return mu_fail(err, MU_E_ARG,
                           "%s rows of %lld are not a multiple of %s's block of %d; choose sizes that are or "
                           "--type q8_0/f16",
                           role, (long long)ne0, ti->name, ti->blck);
        }
    }
    *out = t;
    return 0;
}

static void add_desc(tdesc *d, int *n, const char *name, int n_dims, int64_t ne0, int64_t ne1, uint32_t type, int init,
                     float a, float b) {
    tdesc *t = &d[(*n)++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->type = type;
    t->init = init;
    t->a = a;
    t->b = b;
    t->key = hash_str(name);
}

/* Tensors per layer and outside the layers, for the descriptor array. */
#define TENSORS_PER_LAYER 14
#define TENSORS_OUTSIDE 3

/* Builds the tensor list in the fixture's order. Distributions: embeddings
 * N(0,1); matrices N(0, 1/sqrt(fan_in)); output N(0, 24/sqrt(n_embd)) so the
 * scaled logits have a spread like the fixtures' (peaked but not one-hot);
 * pre-norm weights U(0.9,1.1); post-norms U(0.3,0.7) (damp the residual
 * growth over many layers); q_norm 3.87 and k_norm 1 as in real checkpoints. */
static int build_tensors(const mu_synth_opts *o, const mu_vocab_gen *v, tdesc *d, int *n, mu_err *err) {
    const int64_t E = o->n_embd, V = o->n_vocab, F = o->n_ff, Q = (int64_t)o->n_head * o->head_dim,
                  KV = (int64_t)o->n_head_kv * o->head_dim, HD = o->head_dim;
    uint32_t t;
    *n = 0;
#define MAT(nm, role, il, ne0, ne1, std)                                                                  \
    do {                                                                                                  \
        int rc_ = matrix_type(o, role, il, ne0, &t, err);                                                 \
        if (rc_) return rc_;                                                                              \
        add_desc(d, n, nm, 2, ne0, ne1, t, INIT_NORMAL, (float)(std), 0);                                 \
    } while (0)
    MAT("token_embd.weight", "token_embd", 0, E, V, 1.0);
    add_desc(d, n, "output_norm.weight", 1, E, 1, MU_T_F32, INIT_UNIFORM, 0.9f, 1.1f);
    MAT("output.weight", "output", 0, E, V, 24.0 / sqrt((double)E));
    /* reserved tokens are untrained in real checkpoints: damp their output
     * rows so generation mostly produces real tokens */
    d[*n - 1].quiet0 = 256 + v->n_learned;
    d[*n - 1].quiet1 = V - MU_VOCAB_N_SPECIAL;
    char nm[64];
    for (int il = 0; il < o->n_layer; il++) {
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%d.%s.weight", il, s), nm)
        add_desc(d, n, NAME("attn_norm"), 1, E, 1, MU_T_F32, INIT_UNIFORM, 0.9f, 1.1f);
        MAT(NAME("attn_q"), "attn_q", il, E, Q, 1 / sqrt((double)E));
        MAT(NAME("attn_k"), "attn_k", il, E, KV, 1 / sqrt((double)E));
        MAT(NAME("attn_v"), "attn_v", il, E, KV, 1 / sqrt((double)E));
        add_desc(d, n, NAME("attn_q_norm"), 1, HD, 1, MU_T_F32, INIT_CONST, 3.87f, 0);
        add_desc(d, n, NAME("attn_k_norm"), 1, HD, 1, MU_T_F32, INIT_CONST, 1.0f, 0);
        MAT(NAME("attn_gate"), "attn_gate", il, E, Q, 1 / sqrt((double)E));
        MAT(NAME("attn_output"), "attn_output", il, Q, E, 1 / sqrt((double)Q));
        add_desc(d, n, NAME("post_attention_norm"), 1, E, 1, MU_T_F32, INIT_UNIFORM, 0.3f, 0.7f);
        add_desc(d, n, NAME("ffn_norm"), 1, E, 1, MU_T_F32, INIT_UNIFORM, 0.9f, 1.1f);
        MAT(NAME("ffn_gate"), "ffn_gate", il, E, F, 1 / sqrt((double)E));
        MAT(NAME("ffn_up"), "ffn_up", il, E, F, 1 / sqrt((double)E));
        MAT(NAME("ffn_down"), "ffn_down", il, F, E, 1 / sqrt((double)F));
        add_desc(d, n, NAME("post_ffw_norm"), 1, E, 1, MU_T_F32, INIT_UNIFORM, 0.3f, 0.7f);
#undef NAME
    }
#undef MAT
    MU_ASSERT(*n == o->n_layer * TENSORS_PER_LAYER + TENSORS_OUTSIDE);
    return 0;
}

/* ---- random values ------------------------------------------------------ */

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One row of tensor t into x[ne0]. Normal values are the sum of four 16-bit
 * uniforms (Irwin-Hall, unit variance, tails cut at 3.46 sigma): one 64-bit
 * draw per value, which is what makes 28 billion weights cheap. */
static void gen_row(const tdesc *t, uint64_t seed, int64_t row, float *x) {
    uint64_t s = seed ^ t->key;
    uint64_t r = (uint64_t)row * 0xD1B54A32D192ED03ull;
    s = splitmix(&s) ^ r;
    s = splitmix(&s);
    const int64_t n = t->ne[0];
    switch (t->init) {
    case INIT_NORMAL: {
        float k = t->a / 37837.2273f; /* 65536 / sqrt(3) */
        if (row >= t->quiet0 && row < t->quiet1) k *= 0.05f;
        for (int64_t i = 0; i < n; i++) {
            uint64_t z = splitmix(&s);
            int32_t sum = (int32_t)(z & 0xffff) + (int32_t)((z >> 16) & 0xffff) + (int32_t)((z >> 32) & 0xffff) +
                          (int32_t)(z >> 48) - 131070;
            x[i] = (float)sum * k;
        }
        break;
    }
    case INIT_UNIFORM:
        for (int64_t i = 0; i < n; i++) x[i] = t->a + (t->b - t->a) * (float)((splitmix(&s) >> 40) * (1.0 / 16777216.0));
        break;
    default:
        for (int64_t i = 0; i < n; i++) x[i] = t->a;
    }
}

/* ---- parallel pipeline -------------------------------------------------- */

typedef struct {
    const tdesc *t;
    uint64_t seed;
    int64_t r0, r1;
    uint8_t *out;
    size_t row_bytes;
    float *scratch;
    int fast;
} work;

static void *work_run(void *arg) {
    work *w = arg;
    for (int64_t r = w->r0; r < w->r1; r++) {
        gen_row(w->t, w->seed, r, w->scratch);
        uint8_t *dst = w->out + (size_t)(r - w->r0) * w->row_bytes;
        if (w->fast) mu_quantize_row_fast(w->t->type, w->scratch, dst, (int)w->t->ne[0]);
        else mu_quantize_row(w->t->type, w->scratch, dst, (int)w->t->ne[0]);
    }
    return NULL;
}

typedef struct {
    mu_synth_progress p;
    mu_synth_progress_fn fn;
    void *user;
} report;

static void report_event(report *r, mu_synth_event ev) {
    r->p.event = ev;
    if (r->fn) r->fn(&r->p, r->user);
}

/* Generates, quantizes and writes every tensor in order: the workers fill
 * one buffer while this thread writes the other. */
static int write_tensors(mu_gguf_writer *wr, const tdesc *d, int n_t, uint64_t seed, int nth, int fast, report *rep,
                         mu_err *err) {
    int64_t max_ne0 = 0;
    for (int i = 0; i < n_t; i++)
        if (d[i].ne[0] > max_ne0) max_ne0 = d[i].ne[0];
    size_t max_row = (size_t)max_ne0 * 4; /* F32 is the widest row */
    size_t buf_bytes = BATCH_BYTES > max_row ? BATCH_BYTES : max_row;
    uint8_t *buf[2] = {malloc(buf_bytes), malloc(buf_bytes)};
    float *scratch[MU_SYNTH_MAX_THREADS] = {0};
    int rc = 0;
    for (int k = 0; k < nth; k++)
        if (!(scratch[k] = malloc((size_t)max_ne0 * sizeof(float)))) rc = 1;
    if (!buf[0] || !buf[1] || rc) {
        rc = mu_fail(err, MU_E_NOMEM, "out of memory for generation buffers");
        goto out;
    }
    const uint8_t *pend = NULL;
    size_t pend_n = 0;
    int which = 0;
    for (int i = 0; i < n_t && !rc; i++) {
        const tdesc *t = &d[i];
        size_t rb = mu_type_row_bytes(t->type, t->ne[0]);
        int64_t rows = t->ne[1];
        int64_t per_batch = (int64_t)(buf_bytes / rb);
        for (int64_t r0 = 0; r0 < rows && !rc; r0 += per_batch) {
            int64_t r1 = r0 + per_batch < rows ? r0 + per_batch : rows;
            uint8_t *dst = buf[which];
            int use = nth;
            if ((r1 - r0) * (int64_t)rb < (256 << 10) || r1 - r0 < use) use = 1;
            work wk[MU_SYNTH_MAX_THREADS];
            pthread_t th[MU_SYNTH_MAX_THREADS];
            int started = 0;
            for (int k = 0; k < use; k++) {
                int64_t a = r0 + (r1 - r0) * k / use, b = r0 + (r1 - r0) * (k + 1) / use;
                wk[k] = (work){t, seed, a, b, dst + (size_t)(a - r0) * rb, rb, scratch[k], fast};
            }
            if (use > 1) {
                for (int k = 0; k < use; k++) {
                    if (pthread_create(&th[k], NULL, work_run, &wk[k])) break;
                    started++;
                }
            }
            if (pend) {
                rc = mu_gguf_writer_write(wr, pend, pend_n, err);
                rep->p.bytes_done += pend_n;
                if (!rc) report_event(rep, MU_SYNTH_EV_DATA);
            }
            if (use == 1) work_run(&wk[0]);
            for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
            for (int k = started; k < use && use > 1; k++) work_run(&wk[k]); /* thread creation failed: do it here */
            pend = dst;
            pend_n = (size_t)(r1 - r0) * rb;
            which ^= 1;
        }
    }
    if (!rc && pend) {
        rc = mu_gguf_writer_write(wr, pend, pend_n, err);
        rep->p.bytes_done += pend_n;
    }
out:
    for (int k = 0; k < nth; k++) free(scratch[k]);
    free(buf[0]);
    free(buf[1]);
    return rc;
}

/* ---- metadata ----------------------------------------------------------- */

static int set_keys(mu_gguf_writer *w, const mu_synth_opts *o, const mu_vocab_gen *v, mu_err *err) {
    int rc = 0;
#define K(expr)                        \
    do {                               \
        if ((rc = (expr))) return rc;  \
    } while (0)
    char name[256];
    if (o->name) snprintf(name, sizeof name, "%s", o->name);
    else snprintf(name, sizeof name, "muse-glimmer-%s-s%llu-%s", o->preset ? o->preset : "custom",
                  (unsigned long long)o->seed, FTYPES[o->type].label);
    K(mu_gguf_writer_set_str(w, "general.architecture", ARCH, strlen(ARCH), err));
    K(mu_gguf_writer_set_str(w, "general.name", name, strlen(name), err));
    K(mu_gguf_writer_set_u32(w, "general.file_type", FTYPES[o->type].llama_ft, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".context_length", (uint32_t)o->n_ctx, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".embedding_length", (uint32_t)o->n_embd, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".feed_forward_length", (uint32_t)o->n_ff, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".block_count", (uint32_t)o->n_layer, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.head_count", (uint32_t)o->n_head, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.head_count_kv", (uint32_t)o->n_head_kv, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.key_length", (uint32_t)o->head_dim, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.value_length", (uint32_t)o->head_dim, err));
    K(mu_gguf_writer_set_f32(w, ARCH ".rope.freq_base", (float)o->rope_base, err));
    if (o->rope_base_swa > 0) K(mu_gguf_writer_set_f32(w, ARCH ".rope.freq_base_swa", (float)o->rope_base_swa, err));
    K(mu_gguf_writer_set_f32(w, ARCH ".attention.layer_norm_rms_epsilon", (float)o->eps, err));
    if (o->has_softcap) K(mu_gguf_writer_set_f32(w, ARCH ".final_logit_softcapping", (float)o->softcap, err));
    K(mu_gguf_writer_set_f32(w, ARCH ".logit_scale", (float)o->logit_scale, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.sliding_window", (uint32_t)o->n_swa, err));
    if (o->swa_period_key) {
        K(mu_gguf_writer_set_u32(w, ARCH ".attention.sliding_window_pattern", (uint32_t)o->swa_period, err));
    } else {
        uint8_t pat[MU_SYNTH_MAX_LAYERS];
        for (int il = 0; il < o->n_layer; il++) pat[il] = layer_sliding(o, il);
        K(mu_gguf_writer_set_arr(w, ARCH ".attention.sliding_window_pattern", MU_GGUF_BOOL, pat,
                                 (uint64_t)o->n_layer, err));
    }
    K(mu_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", 4, err));
    K(mu_gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama4", 6, err));
    K(mu_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, NULL,
                                 (uint64_t)v->n_vocab, err));
    K(mu_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", MU_GGUF_I32, v->types, (uint64_t)v->n_vocab, err));
    K(mu_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL,
                                 (uint64_t)v->n_merges, err));
    K(mu_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos, err));
    K(mu_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos, err));
    K(mu_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot, err));
    if (o->eom_key) K(mu_gguf_writer_set_u32(w, "tokenizer.ggml.eom_token_id", (uint32_t)v->eom, err));
    K(mu_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true, err));
    if (o->chat_template) K(mu_gguf_writer_set_str(w, "tokenizer.chat_template", o->chat_template, o->chat_template_len, err));
    else if (!o->no_chat_template)
        K(mu_gguf_writer_set_str(w, "tokenizer.chat_template", DEFAULT_TEMPLATE, strlen(DEFAULT_TEMPLATE), err));
#undef K
    return 0;
}

/* ---- entry -------------------------------------------------------------- */

static int resolve_threads(int n) {
    if (n > 0) return n;
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    return nproc < 1 ? 1 : nproc > MU_SYNTH_MAX_THREADS ? MU_SYNTH_MAX_THREADS : (int)nproc;
}

int mu_synth_write(const mu_synth_opts *o, const char *path, mu_synth_progress_fn fn, void *user, mu_err *err) {
    int rc = opts_check(o, err);
    if (rc) return rc;
    tdesc *d = calloc((size_t)o->n_layer * TENSORS_PER_LAYER + TENSORS_OUTSIDE, sizeof *d);
    mu_vocab_gen *v = NULL;
    mu_gguf_writer *w = NULL;
    report rep = {.fn = fn, .user = user};
    int n_t = 0;
    if (!d) {
        rc = mu_fail(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    mu_vocab_gen_params vp = {o->n_vocab, o->max_merges, 2, o->corpus, o->corpus_len, 0};
    if ((rc = mu_vocab_gen_build(&vp, &v, err))) goto out;
    rep.p.n_merges = v->n_merges;
    rep.p.n_learned = v->n_learned;
    report_event(&rep, MU_SYNTH_EV_VOCAB);
    if ((rc = build_tensors(o, v, d, &n_t, err))) goto out;
    if ((rc = mu_gguf_writer_new(&w, err)) || (rc = set_keys(w, o, v, err))) goto out;
    uint64_t n_weights = 0;
    for (int i = 0; i < n_t; i++) {
        if ((rc = mu_gguf_writer_add_tensor(w, d[i].name, d[i].type, d[i].n_dims, d[i].ne, err))) goto out;
        n_weights += (uint64_t)d[i].ne[0] * (uint64_t)d[i].ne[1];
    }
    int nth = resolve_threads(o->n_threads);
    int fast = o->quant == MU_SYNTH_QUANT_FAST || (o->quant == MU_SYNTH_QUANT_AUTO && n_weights > 500000000ull);
    if ((rc = mu_gguf_writer_open(w, path, err))) goto out;
    rep.p.n_weights = n_weights;
    rep.p.file_bytes = mu_gguf_writer_file_bytes(w);
    rep.p.n_threads = nth;
    rep.p.fast = fast;
    report_event(&rep, MU_SYNTH_EV_OPEN);
    if ((rc = write_tensors(w, d, n_t, o->seed, nth, fast, &rep, err))) goto out;
    if ((rc = mu_gguf_writer_close(w, err))) goto out;
    report_event(&rep, MU_SYNTH_EV_DONE);
out:
    mu_gguf_writer_free(w); /* removes <path>.tmp unless close succeeded */
    mu_vocab_gen_free(v);
    free(d);
    return rc;
}
