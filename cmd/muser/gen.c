/* gen.c: `muser gen`: write a Muse Glimmer GGUF with seeded random weights.
 * Owns: presets and geometry options, the per-tensor type choice (including
 * llama.cpp's Q4_K_M mix), the weight distributions, the parallel
 * generate-quantize-write pipeline and its progress line.
 * Does not own: the GGUF byte format (src/synth/gguf_write.c), quantizers
 * (src/synth/quantize.c), the vocabulary (src/synth/vocab_gen.c).
 * Key design choice: every row of every tensor gets its own random stream
 * seeded from (seed, tensor name, row), so the file's bytes depend only on
 * the options, never on the thread count or batching; worker threads fill
 * one batch while the main thread writes the previous one. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../src/base/err.h"
#include "../../src/kern/kern.h"
#include "../../src/kern/quant.h"
#include "../../src/synth/quantize.h"
#include "../../src/gguf/gguf.h"
#include "../../src/synth/gguf_write.h"
#include "../../src/synth/vocab_gen.h"
#include "cli.h"

/* Output bytes are pinned by golden tests: no fma contraction (see quantize.c). */
#ifdef __clang__
#pragma clang fp contract(off)
#endif

#define ARCH "muse-glimmer"
#define MAX_LAYERS 1024
#define MAX_THREADS 64
#define BATCH_BYTES (16u << 20)

/* ---- configuration ------------------------------------------------------ */

enum { FT_F32, FT_F16, FT_BF16, FT_Q8_0, FT_Q4_K, FT_Q5_K, FT_Q6_K, FT_Q4_K_M, FT_Q4_K_S, FT_Q5_K_S, FT_Q5_K_M };
static const struct {
    const char *name, *label;
    uint32_t type;     /* base tensor type */
    uint32_t llama_ft; /* llama.cpp's general.file_type */
} FTYPES[] = {
    [FT_F32] = {"f32", "F32", MU_T_F32, 0},         [FT_F16] = {"f16", "F16", MU_T_F16, 1},
    [FT_BF16] = {"bf16", "BF16", MU_T_BF16, 32},    [FT_Q8_0] = {"q8_0", "Q8_0", MU_T_Q8_0, 7},
    [FT_Q4_K] = {"q4_k", "Q4_K", MU_T_Q4_K, 14},    [FT_Q5_K] = {"q5_k", "Q5_K", MU_T_Q5_K, 16},
    [FT_Q6_K] = {"q6_k", "Q6_K", MU_T_Q6_K, 18},    [FT_Q4_K_M] = {"q4_k_m", "Q4_K_M", MU_T_Q4_K, 15},
    [FT_Q4_K_S] = {"q4_k_s", "Q4_K_S", MU_T_Q4_K, 14}, [FT_Q5_K_S] = {"q5_k_s", "Q5_K_S", MU_T_Q5_K, 16},
    [FT_Q5_K_M] = {"q5_k_m", "Q5_K_M", MU_T_Q5_K, 17},
};
#define N_FTYPES (int)(sizeof FTYPES / sizeof FTYPES[0])

enum { QM_AUTO, QM_CAREFUL, QM_FAST };

typedef struct {
    const char *out, *preset, *name, *template_path, *corpus_path;
    int n_layer, n_embd, n_ff, n_head, n_kv, head_dim, n_vocab, window, ctx;
    int pattern;           /* period; used when no bools given */
    bool pattern_scalar;   /* write the period as a scalar u32 */
    uint8_t *pattern_bools; /* n_layer entries when given */
    int n_pattern_bools;
    int ftype;
    uint64_t seed;
    bool softcap_on, no_template, eom_key;
    double softcap, logit_scale, rope_base, rope_base_swa, eps;
    int merges, threads, quant_mode;
} gen_cfg;

typedef struct {
    const char *name;
    int n_layer, n_embd, n_ff, n_head, n_kv, head_dim, n_vocab, window, ctx;
} preset;

static const preset PRESETS[] = {
    {"tiny", 4, 256, 512, 4, 2, 128, 1024, 8, 4096},
    {"fixture", 8, 256, 512, 8, 2, 64, 1024, 16, 4096},
    {"1b", 16, 2048, 6144, 16, 2, 128, 32768, 2048, 131072},
    {"full", 52, 6656, 19968, 32, 2, 128, 202048, 2048, 131072},
};

static const char DEFAULT_TEMPLATE[] =
    "{{ bos_token }}{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|eot|>"
    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}";

static void usage(FILE *f) {
    fprintf(f,
            "usage: muser gen -o OUT.gguf [options]\n"
            "  --preset tiny|fixture|1b|full   geometry defaults (tiny)\n"
            "  --layers N --embd N --ff N --heads N --kv-heads N --head-dim N --vocab N\n"
            "  --window N --ctx N              sliding window, context length\n"
            "  --pattern N                     period: layer il slides iff il %% N < N-1, written as a scalar\n"
            "  --pattern-bools 1,1,1,0,...     one flag per layer (1 = sliding), written as a bool array\n"
            "                                  (default: bool array from period 4)\n"
            "  --type f32|f16|bf16|q8_0|q4_k|q5_k|q6_k   one type for every matrix\n"
            "         q4_k_m|q4_k_s|q5_k_m|q5_k_s      llama.cpp's mixes (default q4_k_m)\n"
            "  --seed S                        (1)\n"
            "  --softcap X | --no-softcap      final logit softcap (20); --no-softcap omits the key\n"
            "  --logit-scale X                 (0.19611613)\n"
            "  --rope-base X                   (500000) --rope-base-swa X adds the sliding-layer key\n"
            "  --name NAME                     general.name\n"
            "  --merges N                      cap on learned BPE merges\n"
            "  --corpus FILE                   BPE training text (default: embedded corpus)\n"
            "  --template FILE | --no-template chat template (default: a minimal built-in one)\n"
            "  --eom-key                       also write tokenizer.ggml.eom_token_id (llama.cpp then stops on <|eom|>)\n"
            "  --quant auto|careful|fast       K-quant search (auto: careful up to 5e8 weights)\n"
            "  --threads N                     worker threads (all cores); output does not depend on it\n");
}

static int parse_ftype(const char *s) {
    for (int i = 0; i < N_FTYPES; i++)
        if (!strcmp(s, FTYPES[i].name)) return i;
    return -1;
}

static void apply_preset(gen_cfg *c, const preset *p) {
    c->preset = p->name;
    c->n_layer = p->n_layer;
    c->n_embd = p->n_embd;
    c->n_ff = p->n_ff;
    c->n_head = p->n_head;
    c->n_kv = p->n_kv;
    c->head_dim = p->head_dim;
    c->n_vocab = p->n_vocab;
    c->window = p->window;
    c->ctx = p->ctx;
}

static bool parse_bools(const char *s, uint8_t **out, int *n) {
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    if (cap > MAX_LAYERS) return false;
    uint8_t *b = malloc((size_t)cap);
    if (!b) return false;
    int k = 0;
    for (const char *p = s;;) {
        if ((p[0] == '0' || p[0] == '1') && (p[1] == ',' || p[1] == 0)) {
            b[k++] = (uint8_t)(p[0] - '0');
            if (!p[1]) break;
            p += 2;
        } else {
            free(b);
            return false;
        }
    }
    *out = b;
    *n = k;
    return true;
}

static bool layer_sliding(const gen_cfg *c, int il) {
    if (c->pattern_bools) return c->pattern_bools[il] != 0;
    return il % c->pattern < c->pattern - 1;
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

/* Picks the stored type of a matrix; returns 0 or prints the error. */
static int matrix_type(const gen_cfg *c, const char *role, int il, int64_t ne0, uint32_t *out) {
    uint32_t t = FTYPES[c->ftype].type;
    bool output = !strcmp(role, "output"), attn_v = !strcmp(role, "attn_v"), ffn_down = !strcmp(role, "ffn_down");
    /* llama.cpp's mixes (llama_tensor_get_type); the single types stay uniform, like llama-quantize --pure */
    switch (c->ftype) {
    case FT_Q4_K_M:
    case FT_Q5_K_M:
        if (output || ((attn_v || ffn_down) && use_more_bits(il, c->n_layer))) t = MU_T_Q6_K;
        break;
    case FT_Q4_K_S:
        if (output) t = MU_T_Q6_K;
        else if ((attn_v && il < 4) || (ffn_down && il < c->n_layer / 8)) t = MU_T_Q5_K;
        break;
    case FT_Q5_K_S:
        if (output) t = MU_T_Q6_K;
        break;
    }
    const mu_type_info *ti = mu_type_get(t);
    if (ne0 % ti->blck) {
        /* llama.cpp falls back Q6_K -> Q8_0, Q4_K -> Q5_0, Q5_K -> Q5_1; muser reads neither Q5_0 nor Q5_1 */
        if (t == MU_T_Q6_K && ne0 % MU_QK8_0 == 0) {
            t = MU_T_Q8_0;
        } else {
            return cli_fail("muser gen: %s rows of %lld are not a multiple of %s's block of %d; choose sizes that are or "
                            "--type q8_0/f16",
                            role, (long long)ne0, ti->name, ti->blck);
        }
    }
    *out = t;
    return 0;
}

static int add_desc(tdesc *d, int *n, const char *name, int n_dims, int64_t ne0, int64_t ne1, uint32_t type, int init,
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
    return 0;
}

/* Builds the tensor list in the fixture's order. Distributions: embeddings
 * N(0,1); matrices N(0, 1/sqrt(fan_in)); output N(0, 24/sqrt(n_embd)) so the
 * scaled logits have a spread like the fixtures' (peaked but not one-hot);
 * pre-norm weights U(0.9,1.1); post-norms U(0.3,0.7) (damp the residual
 * growth over many layers); q_norm 3.87 and k_norm 1 as in real checkpoints. */
static int build_tensors(const gen_cfg *c, const mu_vocab_gen *v, tdesc *d, int *n) {
    const int64_t E = c->n_embd, V = c->n_vocab, F = c->n_ff, Q = (int64_t)c->n_head * c->head_dim,
                  KV = (int64_t)c->n_kv * c->head_dim, HD = c->head_dim;
    uint32_t t;
    *n = 0;
#define MAT(nm, role, il, ne0, ne1, std)                                                                  \
    do {                                                                                                  \
        if (matrix_type(c, role, il, ne0, &t)) return 1;                                                  \
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
    for (int il = 0; il < c->n_layer; il++) {
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
    uint64_t total, done;
    double t0, last;
    bool on, tty;
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress_tick(progress *p, bool final) {
    if (!p->on) return;
    double t = now_s();
    if (!final && t - p->last < (p->tty ? 0.5 : 10.0)) return;
    p->last = t;
    double el = t - p->t0, mb = (double)p->done / 1e6;
    fprintf(stderr, "%sgen: %3.0f%% %.2f of %.2f GB, %.0f MB/s, %.0f s%s", p->tty ? "\r" : "",
            100.0 * (double)p->done / (double)(p->total ? p->total : 1), mb / 1e3, (double)p->total / 1e9,
            el > 0 ? mb / el : 0.0, el, final || !p->tty ? "\n" : "");
}

static int write_tensors(mu_gguf_writer *wr, const tdesc *d, int n_t, const gen_cfg *c, int fast, progress *pg) {
    int nth = c->threads;
    int64_t max_ne0 = 0;
    for (int i = 0; i < n_t; i++)
        if (d[i].ne[0] > max_ne0) max_ne0 = d[i].ne[0];
    size_t max_row = (size_t)max_ne0 * 4; /* F32 is the widest row */
    size_t buf_bytes = BATCH_BYTES > max_row ? BATCH_BYTES : max_row;
    uint8_t *buf[2] = {malloc(buf_bytes), malloc(buf_bytes)};
    float *scratch[MAX_THREADS] = {0};
    int rc = 0;
    mu_err err = {0};
    for (int k = 0; k < nth; k++)
        if (!(scratch[k] = malloc((size_t)max_ne0 * sizeof(float)))) rc = 1;
    if (!buf[0] || !buf[1] || rc) {
        rc = cli_fail("muser gen: out of memory for generation buffers");
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
            work wk[MAX_THREADS];
            pthread_t th[MAX_THREADS];
            int started = 0;
            for (int k = 0; k < use; k++) {
                int64_t a = r0 + (r1 - r0) * k / use, b = r0 + (r1 - r0) * (k + 1) / use;
                wk[k] = (work){t, c->seed, a, b, dst + (size_t)(a - r0) * rb, rb, scratch[k], fast};
            }
            if (use > 1) {
                for (int k = 0; k < use; k++) {
                    if (pthread_create(&th[k], NULL, work_run, &wk[k])) break;
                    started++;
                }
            }
            if (pend && mu_gguf_writer_write(wr, pend, pend_n, &err)) rc = cli_fail("muser gen: %s", err.msg);
            if (pend) {
                pg->done += pend_n;
                progress_tick(pg, false);
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
        if (mu_gguf_writer_write(wr, pend, pend_n, &err)) rc = cli_fail("muser gen: %s", err.msg);
        pg->done += pend_n;
    }
out:
    for (int k = 0; k < nth; k++) free(scratch[k]);
    free(buf[0]);
    free(buf[1]);
    return rc;
}

/* ---- metadata ----------------------------------------------------------- */

static int read_file(const char *path, size_t max, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail("muser gen: cannot open: %s: %s", path, strerror(errno));
    char *b = malloc(max + 1);
    size_t n = b ? fread(b, 1, max + 1, f) : 0;
    int bad = !b || ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return cli_fail("muser gen: cannot read: %s", path);
    }
    if (n > max) {
        free(b);
        return cli_fail("muser gen: file too large (over %zu bytes): %s", max, path);
    }
    b[n] = 0;
    *out = b;
    *len = n;
    return 0;
}

static int set_keys(mu_gguf_writer *w, const gen_cfg *c, const mu_vocab_gen *v, const char *tmpl, size_t tmpl_len,
                    mu_err *err) {
    int rc = 0;
#define K(expr)                        \
    do {                               \
        if ((rc = (expr))) return rc;  \
    } while (0)
    char name[256];
    if (c->name) snprintf(name, sizeof name, "%s", c->name);
    else snprintf(name, sizeof name, "muse-glimmer-%s-s%llu-%s", c->preset ? c->preset : "custom",
                  (unsigned long long)c->seed, FTYPES[c->ftype].label);
    K(mu_gguf_writer_set_str(w, "general.architecture", ARCH, strlen(ARCH), err));
    K(mu_gguf_writer_set_str(w, "general.name", name, strlen(name), err));
    K(mu_gguf_writer_set_u32(w, "general.file_type", FTYPES[c->ftype].llama_ft, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".context_length", (uint32_t)c->ctx, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".embedding_length", (uint32_t)c->n_embd, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".feed_forward_length", (uint32_t)c->n_ff, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".block_count", (uint32_t)c->n_layer, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.head_count", (uint32_t)c->n_head, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.head_count_kv", (uint32_t)c->n_kv, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.key_length", (uint32_t)c->head_dim, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.value_length", (uint32_t)c->head_dim, err));
    K(mu_gguf_writer_set_f32(w, ARCH ".rope.freq_base", (float)c->rope_base, err));
    if (c->rope_base_swa > 0) K(mu_gguf_writer_set_f32(w, ARCH ".rope.freq_base_swa", (float)c->rope_base_swa, err));
    K(mu_gguf_writer_set_f32(w, ARCH ".attention.layer_norm_rms_epsilon", (float)c->eps, err));
    if (c->softcap_on) K(mu_gguf_writer_set_f32(w, ARCH ".final_logit_softcapping", (float)c->softcap, err));
    K(mu_gguf_writer_set_f32(w, ARCH ".logit_scale", (float)c->logit_scale, err));
    K(mu_gguf_writer_set_u32(w, ARCH ".attention.sliding_window", (uint32_t)c->window, err));
    if (c->pattern_scalar) {
        K(mu_gguf_writer_set_u32(w, ARCH ".attention.sliding_window_pattern", (uint32_t)c->pattern, err));
    } else {
        uint8_t pat[MAX_LAYERS];
        for (int il = 0; il < c->n_layer; il++) pat[il] = layer_sliding(c, il);
        K(mu_gguf_writer_set_arr(w, ARCH ".attention.sliding_window_pattern", MU_GGUF_BOOL, pat,
                                 (uint64_t)c->n_layer, err));
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
    if (c->eom_key) K(mu_gguf_writer_set_u32(w, "tokenizer.ggml.eom_token_id", (uint32_t)v->eom, err));
    K(mu_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true, err));
    if (tmpl) K(mu_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl, tmpl_len, err));
#undef K
    return 0;
}

/* ---- options ------------------------------------------------------------ */

static int opt_int(const char *opt, const char *v, long long lo, long long hi, int *out) {
    long long x;
    if (!cli_int(v, lo, hi, &x)) return cli_fail("muser gen: %s needs an integer in [%lld, %lld]: %s", opt, lo, hi, v);
    *out = (int)x;
    return 0;
}

static int opt_float(const char *opt, const char *v, double lo, double hi, double *out) {
    if (!cli_float(v, lo, hi, out)) return cli_fail("muser gen: %s needs a number in [%g, %g]: %s", opt, lo, hi, v);
    return 0;
}

static int parse_args(int argc, char **argv, gen_cfg *c) {
    memset(c, 0, sizeof *c);
    apply_preset(c, &PRESETS[0]);
    c->pattern = 4;
    c->ftype = FT_Q4_K_M;
    c->seed = 1;
    c->softcap_on = true;
    c->softcap = 20.0;
    c->logit_scale = 0.19611613;
    c->rope_base = 500000.0;
    c->eps = 1e-5;
    c->merges = -1;
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    c->threads = nproc < 1 ? 1 : nproc > MAX_THREADS ? MAX_THREADS : (int)nproc;
    /* the preset first, so explicit options override it wherever they appear */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset")) {
            if (i + 1 >= argc) return cli_fail("muser gen: --preset needs a value");
            const preset *p = NULL;
            for (size_t k = 0; k < sizeof PRESETS / sizeof PRESETS[0]; k++)
                if (!strcmp(argv[i + 1], PRESETS[k].name)) p = &PRESETS[k];
            if (!p) return cli_fail("muser gen: unknown preset (tiny, fixture, 1b, full): %s", argv[i + 1]);
            apply_preset(c, p);
        }
    }
    bool custom = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        /* flags without a value */
        if (!strcmp(a, "--no-softcap")) { c->softcap_on = false; continue; }
        if (!strcmp(a, "--no-template")) { c->no_template = true; continue; }
        if (!strcmp(a, "--eom-key")) { c->eom_key = true; continue; }
        if (a[0] != '-') return cli_fail("muser gen: unexpected argument: %s", a);
        if (i + 1 >= argc) return cli_fail("muser gen: %s needs a value", a);
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) c->out = v;
        else if (!strcmp(a, "--preset")) continue;
        else if (!strcmp(a, "--layers")) rc = opt_int(a, v, 1, MAX_LAYERS, &c->n_layer), custom = true;
        else if (!strcmp(a, "--embd")) rc = opt_int(a, v, 1, 1 << 20, &c->n_embd), custom = true;
        else if (!strcmp(a, "--ff")) rc = opt_int(a, v, 1, 1 << 22, &c->n_ff), custom = true;
        else if (!strcmp(a, "--heads")) rc = opt_int(a, v, 1, 4096, &c->n_head), custom = true;
        else if (!strcmp(a, "--kv-heads")) rc = opt_int(a, v, 1, 4096, &c->n_kv), custom = true;
        else if (!strcmp(a, "--head-dim")) rc = opt_int(a, v, 2, 4096, &c->head_dim), custom = true;
        else if (!strcmp(a, "--vocab")) rc = opt_int(a, v, 256 + MU_VOCAB_N_SPECIAL + 1, 1 << 24, &c->n_vocab), custom = true;
        else if (!strcmp(a, "--window")) rc = opt_int(a, v, 1, INT32_MAX, &c->window), custom = true;
        else if (!strcmp(a, "--ctx")) rc = opt_int(a, v, 1, INT32_MAX, &c->ctx), custom = true;
        else if (!strcmp(a, "--pattern")) {
            rc = opt_int(a, v, 1, MAX_LAYERS, &c->pattern);
            c->pattern_scalar = true;
            custom = true;
        } else if (!strcmp(a, "--pattern-bools")) {
            free(c->pattern_bools);
            c->pattern_bools = NULL;
            if (!parse_bools(v, &c->pattern_bools, &c->n_pattern_bools))
                return cli_fail("muser gen: --pattern-bools needs a comma-separated list of 0/1: %s", v);
            custom = true;
        } else if (!strcmp(a, "--type")) {
            if ((c->ftype = parse_ftype(v)) < 0)
                return cli_fail("muser gen: unknown type (f32 f16 bf16 q8_0 q4_k q5_k q6_k q4_k_m q4_k_s q5_k_m q5_k_s): %s", v);
        } else if (!strcmp(a, "--seed")) {
            long long s;
            if (!cli_int(v, 0, INT64_MAX, &s)) return cli_fail("muser gen: --seed needs a non-negative integer: %s", v);
            c->seed = (uint64_t)s;
        } else if (!strcmp(a, "--softcap")) rc = opt_float(a, v, 1e-3, 1e6, &c->softcap), c->softcap_on = true;
        else if (!strcmp(a, "--logit-scale")) rc = opt_float(a, v, 1e-6, 1e6, &c->logit_scale);
        else if (!strcmp(a, "--rope-base")) rc = opt_float(a, v, 1.0, 1e12, &c->rope_base);
        else if (!strcmp(a, "--rope-base-swa")) rc = opt_float(a, v, 1.0, 1e12, &c->rope_base_swa);
        else if (!strcmp(a, "--name")) c->name = v;
        else if (!strcmp(a, "--merges")) rc = opt_int(a, v, 0, 1 << 24, &c->merges);
        else if (!strcmp(a, "--template")) c->template_path = v;
        else if (!strcmp(a, "--corpus")) c->corpus_path = v;
        else if (!strcmp(a, "--threads")) rc = opt_int(a, v, 1, MAX_THREADS, &c->threads);
        else if (!strcmp(a, "--quant")) {
            if (!strcmp(v, "auto")) c->quant_mode = QM_AUTO;
            else if (!strcmp(v, "careful")) c->quant_mode = QM_CAREFUL;
            else if (!strcmp(v, "fast")) c->quant_mode = QM_FAST;
            else return cli_fail("muser gen: --quant is auto, careful or fast: %s", v);
        } else return cli_fail("muser gen: unknown option: %s (see muser gen --help)", a);
        if (rc) return rc;
    }
    if (custom) c->preset = NULL;
    if (!c->out) return cli_fail("muser gen: missing -o OUT.gguf");
    if (c->n_head % c->n_kv) return cli_fail("muser gen: --heads %d is not a multiple of --kv-heads %d", c->n_head, c->n_kv);
    if (c->head_dim % 2) return cli_fail("muser gen: --head-dim must be even (RoPE pairs): %d", c->head_dim);
    if (c->pattern_bools && c->n_pattern_bools != c->n_layer)
        return cli_fail("muser gen: --pattern-bools has %d entries for %d layers", c->n_pattern_bools, c->n_layer);
    if (c->pattern_bools && c->pattern_scalar) return cli_fail("muser gen: give --pattern or --pattern-bools, not both");
    if ((int64_t)c->n_head * c->head_dim > (1 << 22)) return cli_fail("muser gen: attention width too large");
    if (c->template_path && c->no_template) return cli_fail("muser gen: give --template or --no-template, not both");
    return 0;
}

/* ---- entry -------------------------------------------------------------- */

/* An interrupted run removes its OUT.tmp (the writer only renames on success). */
static char tmp_path[4096];

static void on_signal(int sig) {
    if (tmp_path[0]) unlink(tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

int cmd_gen(int argc, char **argv) {
    gen_cfg c;
    int rc = parse_args(argc, argv, &c);
    if (rc) {
        free(c.pattern_bools);
        return rc < 0 ? 0 : rc;
    }
    double t0 = now_s();
    tdesc *d = calloc((size_t)c.n_layer * 14 + 3, sizeof *d);
    char *tmpl = NULL, *corpus = NULL;
    size_t tmpl_len = 0, corpus_len = 0;
    mu_vocab_gen *v = NULL;
    mu_gguf_writer *w = NULL;
    mu_err err = {0};
    int n_t = 0;
    if (!d) {
        rc = cli_fail("muser gen: out of memory");
        goto out;
    }
    if (c.template_path) {
        if ((rc = read_file(c.template_path, 1 << 20, &tmpl, &tmpl_len))) goto out;
    } else if (!c.no_template) {
        tmpl_len = strlen(DEFAULT_TEMPLATE);
        if (!(tmpl = strdup(DEFAULT_TEMPLATE))) {
            rc = cli_fail("muser gen: out of memory");
            goto out;
        }
    }
    if (c.corpus_path && (rc = read_file(c.corpus_path, (size_t)256 << 20, &corpus, &corpus_len))) goto out;
    mu_vocab_gen_params vp = {c.n_vocab, c.merges, 2, corpus, corpus_len, 0};
    if (mu_vocab_gen_build(&vp, &v, &err)) {
        rc = cli_fail("muser gen: %s", err.msg);
        goto out;
    }
    double t_vocab = now_s() - t0;
    if ((rc = build_tensors(&c, v, d, &n_t))) goto out;
    if (mu_gguf_writer_new(&w, &err) || set_keys(w, &c, v, tmpl, tmpl_len, &err)) {
        rc = cli_fail("muser gen: %s", err.msg);
        goto out;
    }
    uint64_t n_weights = 0;
    for (int i = 0; i < n_t; i++) {
        if (mu_gguf_writer_add_tensor(w, d[i].name, d[i].type, d[i].n_dims, d[i].ne, &err)) {
            rc = cli_fail("muser gen: %s", err.msg);
            goto out;
        }
        n_weights += (uint64_t)d[i].ne[0] * (uint64_t)d[i].ne[1];
    }
    int fast = c.quant_mode == QM_FAST || (c.quant_mode == QM_AUTO && n_weights > 500000000ull);
    if (strlen(c.out) + 5 > sizeof tmp_path) {
        rc = cli_fail("muser gen: output path too long: %s", c.out);
        goto out;
    }
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", c.out);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    if (mu_gguf_writer_open(w, c.out, &err)) {
        tmp_path[0] = 0;
        rc = cli_fail("muser gen: %s", err.msg);
        goto out;
    }
    uint64_t file_bytes = mu_gguf_writer_file_bytes(w);
    progress pg = {file_bytes, 0, now_s(), now_s(), file_bytes > (64u << 20), isatty(2) != 0};
    if (pg.on)
        fprintf(stderr, "gen: %s, %d layers, %llu weights, %s quantization, %d threads -> %s (%.2f GB)\n",
                FTYPES[c.ftype].label, c.n_layer, (unsigned long long)n_weights, fast ? "fast" : "careful", c.threads,
                c.out, (double)file_bytes / 1e9);
    if ((rc = write_tensors(w, d, n_t, &c, fast, &pg))) goto out;
    if (mu_gguf_writer_close(w, &err)) {
        rc = cli_fail("muser gen: %s", err.msg);
        goto out;
    }
    progress_tick(&pg, true);
    if (pg.on)
        fprintf(stderr, "gen: done in %.1f s (vocabulary %.2f s: %d merges, %d learned tokens)\n", now_s() - t0, t_vocab,
                v->n_merges, v->n_learned);
out:
    mu_gguf_writer_free(w); /* removes OUT.tmp unless close succeeded */
    tmp_path[0] = 0;
    mu_vocab_gen_free(v);
    free(d);
    free(tmpl);
    free(corpus);
    free(c.pattern_bools);
    return rc;
}
