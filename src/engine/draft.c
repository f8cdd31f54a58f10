/* draft.c: the DFlash drafter on the CPU (llama.cpp's `dflash`
 * architecture, docs/speculative.md "DFlash").
 * Owns: binding a drafter file to a target engine (the checks that they
 * fit), per sequence the drafter's K/V rows made from the target's hidden
 * states (the "injection": fc, then the encoder norm, then each layer's
 * k/v projections, k norm and RoPE), and the drafting pass over the whole
 * block [last token, mask x (block_size - 1)] (always the trained block:
 * its rows attend to each other, so a shorter one drafts worse; the last
 * layer computes past k/v only the rows that become drafts): embedding,
 * then per layer attention norm, q/k/v,
 * q/k norms, NeoX RoPE, attention over the injected rows and the block,
 * output projection, optional post norm, residual, SwiGLU FFN, optional
 * post norm, residual; the final norm and the draft head: the output
 * matrix (the drafter's, else the target's), by default only its rows of a
 * shortlist of token ids gathered once at open into a compact matrix (the
 * same type), "the shortlist head" below; the drafts are the rows' argmax
 * over the rows scored.
 * Does not: capture the hidden states (forward.c, mu_batch_item.feat; on
 * CUDA the device copies them out, forward_gpu.c),
 * decide what to draft or verify (src/gen/sched.c), or round like llama.cpp
 * bit for bit: a draft only proposes tokens, the target decides every one,
 * so the drafter's numerics cannot change an answer. Its matmuls use the
 * kernel table's multi-row dots (vec_dotn, activations in each weight's dot
 * type), its attention the table's float gemm and F16 softmax, its SwiGLU
 * the table's; norms and RoPE are plain float code.
 * Design: the drafter keeps f32 rows of every position (no ring; drafters
 * are a few layers), with a presence flag per position, so a sequence whose
 * prompt came from elsewhere (a KV pack, a shared prompt) still drafts from
 * what it has; V is kept transposed (per channel, over positions). All
 * scratch is sized at open; drafting allocates nothing.
 * On a CUDA target the drafter runs on its device (gpu.h mu_gpu_draft,
 * src/gpu/gpu_cuda_draft.cu; MUSER_DRAFT_DEVICE=0 keeps it on the CPU):
 * the device keeps the rows and runs the injection, the pass and the head,
 * the same steps in the same order; this file still embeds the block's
 * tokens, computes RoPE's angles and gathers pending positions, so both
 * take the same inputs. A plugin without a drafter leaves it on the CPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/mem.h"
#include "../model/dflash.h"
#include "engine.h"

#define DRAFT_ROWS MU_DFLASH_MAX_BLOCK /* most rows of one pass (a block, or a piece of an injection) */
_Static_assert(MU_GPU_DRAFT_ROWS <= DRAFT_ROWS, "a device injection's RoPE rows fit the table");
#define DRAFT_LOGIT_ROWS 16            /* block rows per pass of the output matrix */
#define DRAFT_MM_BLOCK 64              /* weight rows per vec_dotn call (in the cache for the row groups) */
#define DRAFT_PEND 64                  /* positions whose injection waits, to be made rows together */
#define ATTN_ROWS 4                    /* block rows per attention work item (times the heads of a kv head) */
#define PAD16(n) (((n) + 15) & ~15)

struct mu_drafter {
    mu_engine *e;
    mu_gpu_draft *gd; /* the drafter on the target's device, or NULL (on the CPU) */
    mu_pool *pool;     /* the target's threads, or own_pool */
    mu_pool *own_pool; /* on a GPU target (one CPU thread): the threads the target was asked for */
    mu_dflash_model *m;
    mu_drafter_info info;
    const mu_gguf_tensor *tok_embd, *output; /* the drafter's, else the target's */
    int n_vocab, n_q, n_kv, n_feat;
    /* the draft head: head (output, or the shortlist's rows of it in
     * head_w), n_head rows, row r scoring token head_ids[r] (NULL: r) */
    const mu_gguf_tensor *head;
    mu_gguf_tensor head_t;
    uint8_t *head_w;
    int32_t *head_ids;
    int n_head;
    /* scratch, [DRAFT_ROWS][width] */
    float *x, *a, *q, *k, *v, *o, *f1, *f2, *g;
    uint8_t *qa;
    size_t qa_stride;
    float *lg;      /* [DRAFT_LOGIT_ROWS][n_head] scores */
    float *rc, *rs; /* [DRAFT_ROWS][head_dim / 2]: RoPE's cos and sin of the rows' positions */
    float *scores;  /* [n_threads][scores_cap]: an attention item's scores, queries and outputs */
    size_t scores_cap;
};

struct mu_draft_seq {
    mu_drafter *d;
    mu_gpu_dseq *gq;  /* the rows on the device (d->gd), or NULL; kc, vc, present are then unused */
    int n_ctx, n_past, vstride;
    float *kc;        /* [n_layer][n_ctx][n_kv]; rows of absent positions are never read */
    float *vc;        /* [n_layer][n_kv][vstride] (transposed: the attention's V product is a matmul over
                       * positions); absent positions weigh 0 */
    uint8_t *present; /* [n_ctx] */
    float *pend;      /* [DRAFT_PEND][n_feat]: features of positions pend_p0 .. injected, not yet made rows */
    int pend_p0, n_pend;
    float *hid;       /* [block_size - 1][n_embd]: the last pass's draft rows after the final norm */
    int n_hid;        /* rows in hid (mu_draft_seq_pass) */
};

/* ---- small helpers ------------------------------------------------------ */


/* RoPE's cos and sin for T rows at positions pos0 ..: theta_i = pos *
 * base^(-2i/hd), advanced by repeated multiplication as ggml's cache does. */
static void rope_table(mu_drafter *d, int T, int pos0) {
    const int hd = d->m->head_dim, h2 = hd / 2;
    const float theta_scale = powf(d->m->rope_base, -2.0f / (float)hd);
    for (int t = 0; t < T; t++) {
        float theta = (float)(pos0 + t);
        for (int i = 0; i < h2; i++) {
            d->rc[t * h2 + i] = cosf(theta);
            d->rs[t * h2 + i] = sinf(theta);
            theta *= theta_scale;
        }
    }
}

/* NeoX RoPE (rotate_half): pairs (x[i], x[i + hd/2]), row t of the table. */
static void rope_neox(const mu_drafter *d, float *x, int t) {
    const int h2 = d->m->head_dim / 2;
    const float *c = d->rc + (size_t)t * h2, *s = d->rs + (size_t)t * h2;
    for (int i = 0; i < h2; i++) {
        const float x0 = x[i], x1 = x[i + h2];
        x[i] = x0 * c[i] - x1 * s[i];
        x[i + h2] = x0 * s[i] + x1 * c[i];
    }
}

/* y[t * ys + r] = x_t . w_r (floats) for rows r < rows and t < n_t: the
 * table's float gemm where it has one (whole steps of 16 values), else its
 * float dot per pair. */
static void fmm(const mu_kern *k, int n, const float *w, size_t ws, int rows, const float *x, size_t xs, int n_t,
                float *y, int ys) {
    if (rows <= 0 || n_t <= 0 || n <= 0) return;
    if (k->gemm[MU_T_F32]) {
        k->gemm[MU_T_F32](n, w, ws * sizeof(float), 0, rows, x, xs * sizeof(float), n_t, y, ys);
        return;
    }
    for (int t = 0; t < n_t; t++)
        for (int r = 0; r < rows; r++)
            y[(size_t)t * ys + r] = k->vec_dot[MU_T_F32](n, w + (size_t)r * ws, x + (size_t)t * xs);
}

typedef struct {
    mu_drafter *d;
    const mu_gguf_tensor *w;
    int T;
    float *y; /* [T][rows] */
} mm_job;

static void job_mm(void *arg, int ith, int nth) {
    mm_job *j = arg;
    const mu_kern *k = j->d->e->kern;
    const int rows = (int)j->w->ne[1], cols = (int)j->w->ne[0];
    const size_t rb = j->w->bytes / (size_t)rows, as = j->d->qa_stride;
    const uint8_t *wd = j->w->data;
    int lo, hi;
    mu_split(rows, ith, nth, 16, &lo, &hi);
    mu_vec_dotn_fn dotn = j->T >= 2 ? k->vec_dotn[j->w->type] : NULL;
    if (dotn) { /* each weight block decoded once for up to MU_DOTN_MAX rows */
        for (int r0 = lo; r0 < hi; r0 += DRAFT_MM_BLOCK) {
            const int nr = hi - r0 < DRAFT_MM_BLOCK ? hi - r0 : DRAFT_MM_BLOCK;
            for (int t = 0; t < j->T; t += MU_DOTN_MAX) {
                const int na = j->T - t < MU_DOTN_MAX ? j->T - t : MU_DOTN_MAX;
                dotn(cols, wd + (size_t)r0 * rb, rb, nr, j->d->qa + (size_t)t * as, as, na,
                     j->y + (size_t)t * rows + r0, (size_t)rows);
            }
        }
        return;
    }
    mu_vec_dot_fn dot = k->vec_dot[j->w->type];
    for (int r = lo; r < hi; r++) /* a weight row once, against every activation row */
        for (int t = 0; t < j->T; t++)
            j->y[(size_t)t * rows + r] = dot(cols, wd + (size_t)r * rb, j->d->qa + (size_t)t * as);
}

/* y = x W^T for T rows of x ([T][cols], f32). */
static void matmul(mu_drafter *d, const float *x, int T, const mu_gguf_tensor *w, float *y) {
    const mu_kern *k = d->e->kern;
    const int cols = (int)w->ne[0];
    const uint32_t dt = mu_kern_dot_type(w->type);
    for (int t = 0; t < T; t++) k->quant[dt](x + (size_t)t * cols, d->qa + (size_t)t * d->qa_stride, cols);
    mm_job j = {d, w, T, y};
    mu_pool_run(d->pool, job_mm, &j);
}

/* ---- open --------------------------------------------------------------- */

static int fit(mu_drafter *d, mu_err *err) {
    const mu_dflash_model *m = d->m;
    const mu_model_info *I = &d->e->m->info;
    for (int k = 0; k < m->n_target; k++)
        if (m->target_layers[k] >= I->n_layer)
            return mu_fail(err, MU_E_MODEL, "drafter: target layer %d is not a layer of the target (it has %d)",
                           m->target_layers[k], I->n_layer);
    if (!m->tok_embd && m->n_embd != I->n_embd)
        return mu_fail(err, MU_E_MODEL, "drafter: width %d differs from the target's %d, and it has no embedding of its own",
                       m->n_embd, I->n_embd);
    if (m->n_vocab && m->n_vocab != I->n_vocab)
        return mu_fail(err, MU_E_MODEL, "drafter: vocabulary of %d tokens, the target has %d", m->n_vocab, I->n_vocab);
    if (m->mask_id >= I->n_vocab)
        return mu_fail(err, MU_E_MODEL, "drafter: mask token %d outside the target's vocabulary of %d", m->mask_id,
                       I->n_vocab);
    if ((int64_t)m->fc->ne[0] != (int64_t)m->n_target * I->n_embd)
        return mu_fail(err, MU_E_MODEL, "drafter: fc reads %lld features, the target gives %d x %d",
                       (long long)m->fc->ne[0], m->n_target, I->n_embd);
    return 0;
}

static double macs(const mu_gguf_tensor *t) { return t ? (double)t->ne[0] * (double)t->ne[1] : 0; }

/* A row of a many-row pass costs about this share of a one-row pass: the
 * multi-row kernels' 0.4 for Q8_0 (docs/speculative.md), plus the
 * attention and the rest per row. On the bundled model this estimates a
 * pass at 0.78 + 0.13 n decode steps with the full head, 0.78 + 0.065 n
 * with its 2048-id shortlist; measured (verifybench, one thread, 256
 * positions) 0.87 + 0.12 n on the AMD EPYC (full head), 0.45 + 0.016 n
 * on the Intel Xeon with the shortlist (docs/speculative.md). */
#define DRAFT_ROW_SHARE 0.5

/* A pass on the device is a few dozen small launches whatever the
 * multiply-adds: its cost in the target's (device) decode steps is not
 * theirs to estimate. On an H100 the bundled drafter's pass measured 0.49
 * to 0.52 of a decode step for 1 to 15 drafts (bench/results/
 * cuda-2026-12-05d; 0.80-0.92 before the attention rewrite, -05c). A
 * draft adds only its head row there (the pass runs every block row): 1
 * and 15 drafts cost the same within those runs' noise, so 0.005 a draft,
 * a guess below what they resolve. MUSER_DRAFT_COST_PASS and
 * MUSER_DRAFT_COST_ROW replace either estimate on any backend (they
 * decide how much to draft, never what is accepted). */
#define DRAFT_DEV_PASS 0.5
#define DRAFT_DEV_ROW 0.005

static float env_cost(const char *name, float dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    const double x = strtod(v, &end);
    return *end || !(x >= 0) || x > 100 ? dflt : (float)x;
}

/* info.cost_pass, cost_row: the drafting pass in the target's decode steps,
 * from multiply-add counts: every row of the block through the layers but
 * the last one's q, o and FFN (k/v only), which, with the output matrix,
 * only the n draft rows need. */
static void draft_costs(mu_drafter *d) {
    const mu_dflash_model *m = d->m;
    const mu_model *t = d->e->m;
    double tgt = macs(t->output ? t->output : t->tok_embd), blk = 0, row = macs(d->head);
    for (int il = 0; il < t->info.n_layer; il++) {
        const mu_layer_w *L = &t->layers[il];
        tgt += macs(L->wq) + macs(L->wk) + macs(L->wv) + macs(L->wgate) + macs(L->wo) + macs(L->ffn_gate) +
               macs(L->ffn_up) + macs(L->ffn_down);
    }
    for (int il = 0; il < m->n_layer; il++) {
        const mu_dflash_layer *L = &m->layers[il];
        const double kv = macs(L->wk) + macs(L->wv),
                     rest = macs(L->wq) + macs(L->wo) + macs(L->ffn_gate) + macs(L->ffn_up) + macs(L->ffn_down);
        blk += m->block_size * kv + (il < m->n_layer - 1 ? m->block_size * rest : 0);
        if (il == m->n_layer - 1) row += rest;
    }
    d->info.cost_pass = tgt > 0 ? (float)(DRAFT_ROW_SHARE * blk / tgt) : 0;
    d->info.cost_row = tgt > 0 ? (float)(DRAFT_ROW_SHARE * row / tgt) : 0;
    if (d->gd) { /* on the device: see DRAFT_DEV_PASS */
        d->info.cost_pass = DRAFT_DEV_PASS;
        d->info.cost_row = DRAFT_DEV_ROW;
    }
    d->info.cost_pass = env_cost("MUSER_DRAFT_COST_PASS", d->info.cost_pass);
    d->info.cost_row = env_cost("MUSER_DRAFT_COST_ROW", d->info.cost_row);
}

/* ---- the shortlist head --------------------------------------------------
 * A draft row scores only n_head token ids: their rows of the output matrix,
 * copied once into head_w (the same quant type, so each score is the full
 * head's score of that token bit for bit: vec_dotn per row). A draft whose
 * best token is outside the shortlist becomes the best token inside it, a
 * likely rejection; the target decides every token, so the answer does not
 * change. The shortlist is the file's muser.dflash.shortlist when it has
 * one (tools/train/dflash_shortlist.py: the ids most frequent in the
 * target's corpus sources); MUSER_DRAFT_SHORTLIST=0 turns it off, =K the first K
 * ids instead (in a byte-level BPE vocabulary, the bundled model's, the ids
 * after the bytes follow the merges' order, most frequent pair first). */
int mu_drafter_set_shortlist(mu_drafter *d, const int32_t *ids, int n, mu_err *err) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= d->n_vocab || (i > 0 && ids[i] <= ids[i - 1]))
            return mu_fail(err, MU_E_ARG, "drafter: shortlist ids must be increasing and in 0..%d: [%d] = %d",
                           d->n_vocab - 1, i, ids[i]);
    mu_free(d->head_w);
    free(d->head_ids);
    d->head_w = NULL;
    d->head_ids = NULL;
    d->head = d->output;
    d->n_head = d->n_vocab;
    if (n > 0 && n < d->n_vocab) {
        const size_t rb = d->output->bytes / (size_t)d->output->ne[1];
        d->head_w = mu_alloc((size_t)n, rb);
        d->head_ids = malloc((size_t)n * sizeof *d->head_ids);
        if (!d->head_w || !d->head_ids) {
            mu_free(d->head_w);
            free(d->head_ids);
            d->head_w = NULL;
            d->head_ids = NULL;
            return mu_fail(err, MU_E_NOMEM, "drafter: out of memory for a shortlist of %d", n);
        }
        for (int i = 0; i < n; i++)
            memcpy(d->head_w + (size_t)i * rb, (const uint8_t *)d->output->data + (size_t)ids[i] * rb, rb);
        memcpy(d->head_ids, ids, (size_t)n * sizeof *ids);
        d->head_t = *d->output;
        d->head_t.ne[1] = n;
        d->head_t.n_elems = (int64_t)n * d->output->ne[0];
        d->head_t.bytes = (size_t)n * rb;
        d->head_t.data = d->head_w;
        d->head = &d->head_t;
        d->n_head = n;
    }
    d->info.n_scored = d->n_head;
    draft_costs(d);
    if (d->gd) {
        const mu_gpu_tensor h = mu_gpu_tensor_of(d->head);
        return mu_gpu_draft_set_head(d->gd, &h, err);
    }
    return 0;
}

/* The head at open: the file's shortlist, or MUSER_DRAFT_SHORTLIST's. */
static int default_shortlist(mu_drafter *d, mu_err *err) {
    const char *env = getenv("MUSER_DRAFT_SHORTLIST");
    const mu_dflash_model *m = d->m;
    long k = -1;
    if (env && *env) {
        char *end;
        k = strtol(env, &end, 10);
        if (*end || k < 0 || k > INT32_MAX)
            return mu_fail(err, MU_E_ARG, "MUSER_DRAFT_SHORTLIST must be a count >= 0: '%s'", env);
    }
    if (k == 0 || k >= d->n_vocab || (k < 0 && m->n_shortlist == 0)) return mu_drafter_set_shortlist(d, NULL, 0, err);
    const int n = k > 0 ? (int)k : m->n_shortlist;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return mu_fail(err, MU_E_NOMEM, "drafter: out of memory for a shortlist of %d", n);
    for (int i = 0; i < n; i++) ids[i] = k > 0 ? i : (int32_t)mu_gguf_arr_i64(&m->shortlist, (uint64_t)i);
    int rc = mu_drafter_set_shortlist(d, ids, n, err);
    free(ids);
    if (rc == MU_E_ARG && k < 0) { /* an id past the target's vocabulary */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        rc = mu_fail(err, MU_E_MODEL, "drafter: the file's shortlist (muser.dflash.shortlist): %s", why);
    }
    return rc;
}

/* The drafter on the target's device, unless MUSER_DRAFT_DEVICE=0, or the
 * plugin has none or cannot run this one (MU_E_UNSUPPORTED: a head size or
 * weight type it lacks): then it stays on the CPU. Any other failure is the
 * open's. */
static int gpu_open(mu_drafter *d, mu_err *err) {
    const char *env = getenv("MUSER_DRAFT_DEVICE");
    if (env && !strcmp(env, "0")) return 0;
    const mu_dflash_model *m = d->m;
    mu_gpu_draft_layer *L = calloc((size_t)m->n_layer, sizeof *L);
    if (!L) return mu_fail(err, MU_E_NOMEM, "drafter: out of memory");
    for (int il = 0; il < m->n_layer; il++) {
        const mu_dflash_layer *w = &m->layers[il];
        L[il] = (mu_gpu_draft_layer){mu_gpu_tensor_of(w->attn_norm),      mu_gpu_tensor_of(w->wq),
                                     mu_gpu_tensor_of(w->wk),             mu_gpu_tensor_of(w->wv),
                                     mu_gpu_tensor_of(w->wo),             mu_gpu_tensor_of(w->q_norm),
                                     mu_gpu_tensor_of(w->k_norm),         mu_gpu_tensor_of(w->attn_post_norm),
                                     mu_gpu_tensor_of(w->ffn_norm),       mu_gpu_tensor_of(w->ffn_gate),
                                     mu_gpu_tensor_of(w->ffn_up),         mu_gpu_tensor_of(w->ffn_down),
                                     mu_gpu_tensor_of(w->ffn_post_norm), m->swa[il]};
    }
    const mu_gpu_draft_desc desc = {
        .n_layer = m->n_layer, .n_embd = m->n_embd, .n_ff = m->n_ff, .n_head = m->n_head,
        .n_head_kv = m->n_head_kv, .head_dim = m->head_dim, .block_size = m->block_size, .n_feat = d->n_feat,
        .n_swa = m->n_swa, .eps = m->eps, .kq_scale = m->kq_scale, .causal = m->causal,
        .fc = mu_gpu_tensor_of(m->fc), .enc_norm = mu_gpu_tensor_of(m->enc_norm),
        .output_norm = mu_gpu_tensor_of(m->output_norm), .layers = L,
    };
    mu_err e2 = {0};
    int rc = mu_gpu_draft_new(d->e->gpu_dev, &desc, &d->gd, &e2);
    free(L);
    if (rc == MU_E_UNSUPPORTED) return 0;
    if (rc && err) *err = e2;
    return rc;
}

int mu_drafter_open(const char *path, mu_engine *target, mu_drafter **out, mu_err *err) {
    mu_dflash_model *m;
    int rc = mu_dflash_open(path, &m, err);
    if (rc) return rc;
    mu_drafter *d = calloc(1, sizeof *d);
    if (!d) {
        mu_dflash_close(m);
        return mu_fail(err, MU_E_NOMEM, "drafter: out of memory");
    }
    d->e = target;
    d->m = m;
    d->pool = target->pool;
    if ((rc = fit(d, err))) goto fail;
    const mu_model_info *I = &target->m->info;
    d->tok_embd = m->tok_embd ? m->tok_embd : target->m->tok_embd;
    d->output = m->output ? m->output : target->m->output;
    d->n_vocab = I->n_vocab;
    d->n_q = m->n_head * m->head_dim;
    d->n_kv = m->n_head_kv * m->head_dim;
    d->n_feat = m->n_target * I->n_embd;
    d->info = (mu_drafter_info){m->n_layer, m->n_embd, m->n_ff, m->n_head, m->n_head_kv, m->head_dim,
                                m->block_size, m->n_target, m->target_layers, d->n_feat, m->mask_id,
                                m->tok_embd != NULL || m->output != NULL, 0, 0, 0, false};
    if (target->gpu && (rc = gpu_open(d, err))) goto fail;
    if (target->gpu && !d->gd && (rc = mu_pool_new(target->cpu_threads, &d->own_pool, err))) goto fail;
    if (d->own_pool) d->pool = d->own_pool;
    d->info.on_device = d->gd != NULL;
    if ((rc = default_shortlist(d, err))) goto fail; /* and the costs */
    const size_t R = DRAFT_ROWS, E = (size_t)m->n_embd;
    int widest = d->n_feat;
    if (m->n_ff > widest) widest = m->n_ff;
    if (d->n_q > widest) widest = d->n_q;
    if (m->n_embd > widest) widest = m->n_embd;
    d->qa_stride = mu_type_row_bytes(MU_T_F32, widest); /* f32 is the widest dot type */
    d->x = mu_alloc(R * E, sizeof(float));
    d->a = mu_alloc(R * (E > (size_t)d->n_q ? E : (size_t)d->n_q), sizeof(float));
    d->g = mu_alloc(R * E, sizeof(float));
    d->q = mu_alloc(R * (size_t)d->n_q, sizeof(float));
    d->k = mu_alloc(R * (size_t)d->n_kv, sizeof(float));
    d->v = mu_alloc(R * (size_t)d->n_kv, sizeof(float));
    d->o = mu_alloc(R * E, sizeof(float));
    d->f1 = mu_alloc(R * (size_t)m->n_ff, sizeof(float));
    d->f2 = mu_alloc(R * (size_t)m->n_ff, sizeof(float));
    d->qa = mu_alloc(R, d->qa_stride);
    d->lg = mu_alloc((size_t)DRAFT_LOGIT_ROWS * (size_t)d->n_vocab, sizeof(float));
    d->rc = mu_alloc(R * (size_t)(m->head_dim / 2), sizeof(float));
    d->rs = mu_alloc(R * (size_t)(m->head_dim / 2), sizeof(float));
    if (!d->x || !d->a || !d->g || !d->q || !d->k || !d->v || !d->o || !d->f1 || !d->f2 || !d->qa || !d->lg || !d->rc ||
        !d->rs) {
        rc = mu_fail(err, MU_E_NOMEM, "drafter: out of memory for scratch");
        goto fail;
    }
    *out = d;
    return 0;
fail:
    mu_drafter_free(d);
    return rc;
}

void mu_drafter_free(mu_drafter *d) {
    if (!d) return;
    mu_free(d->x); mu_free(d->a); mu_free(d->g); mu_free(d->q); mu_free(d->k); mu_free(d->v);
    mu_free(d->o); mu_free(d->f1); mu_free(d->f2); mu_free(d->qa); mu_free(d->lg); mu_free(d->scores);
    mu_free(d->rc); mu_free(d->rs); mu_free(d->head_w); free(d->head_ids);
    mu_dflash_close(d->m);
    mu_pool_free(d->own_pool);
    mu_gpu_draft_free(d->gd);
    free(d);
}

const mu_drafter_info *mu_drafter_get_info(const mu_drafter *d) { return &d->info; }

/* ---- sequences ---------------------------------------------------------- */

int mu_draft_seq_new(mu_drafter *d, int n_ctx, mu_draft_seq **out, mu_err *err) {
    if (n_ctx < 1) return mu_fail(err, MU_E_ARG, "drafter: context must be >= 1: %d", n_ctx);
    /* an attention item per thread: the scores of its queries over every
     * position and a block (each part padded to 16), its queries and outputs */
    const size_t nqr = (size_t)ATTN_ROWS * (size_t)(d->m->n_head / d->m->n_head_kv);
    const size_t cap = nqr * ((size_t)PAD16(n_ctx) + PAD16(DRAFT_ROWS) + 2 * (size_t)d->m->head_dim),
                 nth = (size_t)mu_pool_size(d->pool);
    if (cap > d->scores_cap) {
        float *sc = mu_alloc(nth * cap, sizeof(float));
        if (!sc) return mu_fail(err, MU_E_NOMEM, "drafter: out of memory for %d positions", n_ctx);
        mu_free(d->scores);
        d->scores = sc;
        d->scores_cap = cap;
    }
    mu_draft_seq *q = calloc(1, sizeof *q);
    const size_t rows = (size_t)d->m->n_layer * (size_t)n_ctx;
    if (q) {
        /* calloc: pages are committed as positions are injected (a slot's
         * context is rarely full), and presence flags gate every read */
        q->vstride = PAD16(n_ctx);
        q->kc = calloc(rows * (size_t)d->n_kv, sizeof(float));
        q->vc = calloc((size_t)d->m->n_layer * (size_t)d->n_kv * (size_t)q->vstride, sizeof(float));
        q->present = calloc((size_t)n_ctx, 1);
        q->hid = calloc((size_t)(d->m->block_size - 1) * (size_t)d->m->n_embd, sizeof(float));
        q->pend = malloc((size_t)DRAFT_PEND * (size_t)d->n_feat * sizeof(float));
    }
    if (!q || !q->kc || !q->vc || !q->present || !q->hid || !q->pend) {
        mu_draft_seq_free(q);
        return mu_fail(err, MU_E_NOMEM, "drafter: out of memory for %d positions", n_ctx);
    }
    q->d = d;
    q->n_ctx = n_ctx;
    int rc = d->gd ? mu_gpu_dseq_new(d->gd, n_ctx, &q->gq, err) : 0;
    if (rc) {
        mu_draft_seq_free(q);
        return rc;
    }
    *out = q;
    return 0;
}

void mu_draft_seq_free(mu_draft_seq *q) {
    if (!q) return;
    mu_gpu_dseq_free(q->gq);
    free(q->kc);
    free(q->vc);
    free(q->present);
    free(q->hid);
    free(q->pend);
    free(q);
}

void mu_draft_seq_truncate(mu_draft_seq *q, int n) {
    if (n < 0) n = 0;
    if (q->n_pend > 0) q->n_pend = n <= q->pend_p0 ? 0 : n - q->pend_p0 < q->n_pend ? n - q->pend_p0 : q->n_pend;
    if (n >= q->n_past) return;
    memset(q->present + n, 0, (size_t)(q->n_past - n));
    /* no error to return here: should the device fail to clear the flags,
     * the drafts read stale rows (worse drafts, never another answer) and a
     * broken device fails the next call that can say so */
    if (q->gq) mu_gpu_dseq_truncate(q->gq, n, q->n_past, NULL);
    q->n_past = n;
}

static float *krow(mu_draft_seq *q, int il, int pos) {
    return q->kc + ((size_t)il * (size_t)q->n_ctx + (size_t)pos) * (size_t)q->d->n_kv;
}
/* channel c of layer il's V, over positions */
static float *vcol(mu_draft_seq *q, int il, int c) {
    return q->vc + ((size_t)il * (size_t)q->d->n_kv + (size_t)c) * (size_t)q->vstride;
}

/* k of T rows and q of rows [q0, q1): per-head norms, then RoPE (the
 * table's row t) */
static void qk_post(mu_drafter *d, const mu_dflash_layer *L, int T, int q0, int q1) {
    const mu_dflash_model *m = d->m;
    const mu_kern *k = d->e->kern;
    const int hd = m->head_dim;
    float *q = d->q + (size_t)q0 * d->n_q;
    if (q1 > q0) mu_rms_rows(k, q, q, L->q_norm->data, hd, (q1 - q0) * m->n_head, (size_t)hd, m->eps);
    mu_rms_rows(k, d->k, d->k, L->k_norm->data, hd, T * m->n_head_kv, (size_t)hd, m->eps);
    for (int t = 0; t < T; t++) {
        for (int h = 0; t >= q0 && t < q1 && h < m->n_head; h++)
            rope_neox(d, d->q + (size_t)t * d->n_q + (size_t)h * hd, t);
        for (int h = 0; h < m->n_head_kv; h++) rope_neox(d, d->k + (size_t)t * d->n_kv + (size_t)h * hd, t);
    }
}

/* inject_now on the device: the same steps (gpu_cuda_draft.cu) */
static int inject_dev(mu_draft_seq *q, int pos0, int n, const float *feat, mu_err *err) {
    mu_drafter *d = q->d;
    for (int c = 0; c < n; c += MU_GPU_DRAFT_ROWS) {
        const int T = n - c < MU_GPU_DRAFT_ROWS ? n - c : MU_GPU_DRAFT_ROWS;
        rope_table(d, T, pos0 + c);
        int rc = mu_gpu_dseq_inject(q->gq, pos0 + c, T, feat + (size_t)c * d->n_feat, d->rc, d->rs, err);
        if (rc) return rc;
        memset(q->present + pos0 + c, 1, (size_t)T);
    }
    return 0;
}

/* The rows of positions pos0 .. pos0 + n - 1 from their features. */
static int inject_now(mu_draft_seq *q, int pos0, int n, const float *feat, mu_err *err) {
    if (q->gq) return inject_dev(q, pos0, n, feat, err);
    mu_drafter *d = q->d;
    const mu_dflash_model *m = d->m;
    const int E = m->n_embd;
    for (int c = 0; c < n; c += DRAFT_ROWS) {
        const int T = n - c < DRAFT_ROWS ? n - c : DRAFT_ROWS, p0 = pos0 + c;
        /* g = rms(feat fc^T) * enc_norm: [T][E] */
        matmul(d, feat + (size_t)c * d->n_feat, T, m->fc, d->g);
        mu_rms_rows(d->e->kern, d->g, d->g, m->enc_norm->data, E, T, (size_t)E, m->eps);
        rope_table(d, T, p0);
        for (int il = 0; il < m->n_layer; il++) {
            const mu_dflash_layer *L = &m->layers[il];
            matmul(d, d->g, T, L->wk, d->k);
            matmul(d, d->g, T, L->wv, d->v);
            qk_post(d, L, T, 0, 0);
            for (int t = 0; t < T; t++) {
                memcpy(krow(q, il, p0 + t), d->k + (size_t)t * d->n_kv, (size_t)d->n_kv * sizeof(float));
                for (int ch = 0; ch < d->n_kv; ch++) vcol(q, il, ch)[p0 + t] = d->v[(size_t)t * d->n_kv + ch];
            }
        }
        memset(q->present + p0, 1, (size_t)T);
    }
    return 0;
}

/* The waiting positions' rows, made together (the multi-row dots). */
static int flush(mu_draft_seq *q, mu_err *err) {
    const int n = q->n_pend;
    q->n_pend = 0;
    return n > 0 ? inject_now(q, q->pend_p0, n, q->pend, err) : 0;
}

/* Positions of a few at a time (decode steps, verification blocks) wait
 * in pend until a pass needs them or it fills: one matmul of many rows
 * costs much less than as many of one row, and a truncation drops the
 * rejected drafts' features before they cost anything. */
int mu_draft_seq_inject(mu_draft_seq *q, int pos0, int n, const float *feat, mu_err *err) {
    if (pos0 < 0 || n < 0 || n > q->n_ctx - pos0)
        return mu_fail(err, MU_E_ARG, "drafter: positions %d..%d outside the context of %d", pos0, pos0 + n,
                       q->n_ctx);
    int rc = 0;
    if (q->n_pend > 0 && (pos0 != q->pend_p0 + q->n_pend || q->n_pend + n > DRAFT_PEND)) rc = flush(q, err);
    if (rc) return rc;
    if (n > DRAFT_PEND / 2) {
        if ((rc = inject_now(q, pos0, n, feat, err))) return rc;
    } else if (n > 0) {
        if (q->n_pend == 0) q->pend_p0 = pos0;
        memcpy(q->pend + (size_t)q->n_pend * q->d->n_feat, feat, (size_t)n * q->d->n_feat * sizeof(float));
        q->n_pend += n;
    }
    if (pos0 + n > q->n_past) q->n_past = pos0 + n;
    return 0;
}


/* ---- the drafting pass -------------------------------------------------- */

typedef struct {
    mu_draft_seq *q;
    int il, T, pos, r0, nr; /* block rows [r0, r0 + nr) ask */
} attn_job;

/* Attention of the block's rows [r0, r0 + nr) (q, k, v in scratch) over
 * the present injected rows before pos and the whole block, into a. One
 * work item is a kv head and up to ATTN_ROWS block rows: its queries (the
 * kv head's query heads of those rows) against the context's K rows and
 * the block's in two float matmuls, masked, a softmax (the table's, to F16
 * steps: the drafter's numerics are free, docs/speculative.md), then the
 * products with the context's V (stored transposed: a matmul over the
 * positions, padded to 16 with zero weights) and the block's. */
static void job_attn(void *arg, int ith, int nth) {
    attn_job *j = arg;
    mu_draft_seq *q = j->q;
    mu_drafter *d = q->d;
    const mu_kern *k = d->e->kern;
    const mu_dflash_model *m = d->m;
    const int hd = m->head_dim, gq = m->n_head / m->n_head_kv, n_swa = m->swa[j->il] ? m->n_swa : 0;
    const int n_ctx = j->pos < q->n_past ? j->pos : q->n_past, cp = PAD16(n_ctx), ls = cp + PAD16(j->T);
    const int n_chunk = (j->nr + ATTN_ROWS - 1) / ATTN_ROWS;
    float *S = d->scores + (size_t)ith * d->scores_cap, *Q = S + (size_t)ATTN_ROWS * gq * ls,
          *O = Q + (size_t)ATTN_ROWS * gq * hd;
    int lo, hi;
    mu_split(m->n_head_kv * n_chunk, ith, nth, 1, &lo, &hi);
    for (int w = lo; w < hi; w++) {
        const int g = w / n_chunk, t0 = j->r0 + (w % n_chunk) * ATTN_ROWS;
        const int tn = j->r0 + j->nr - t0 < ATTN_ROWS ? j->r0 + j->nr - t0 : ATTN_ROWS, n_t = tn * gq;
        for (int u = 0; u < tn; u++) /* a row's query heads of kv head g are contiguous */
            memcpy(Q + (size_t)u * gq * hd, d->q + (size_t)(t0 + u) * d->n_q + (size_t)g * gq * hd,
                   (size_t)gq * hd * sizeof(float));
        fmm(k, hd, krow(q, j->il, 0) + (size_t)g * hd, (size_t)d->n_kv, n_ctx, Q, (size_t)hd, n_t, S, ls);
        fmm(k, hd, d->k + (size_t)g * hd, (size_t)d->n_kv, j->T, Q, (size_t)hd, n_t, S + cp, ls);
        for (int r = 0; r < n_t; r++) {
            float *sr = S + (size_t)r * ls, mx = -INFINITY;
            const int qpos = j->pos + t0 + r / gq;
            for (int p = 0; p < ls; p++) {
                const bool blk = p >= cp;
                const int kpos = blk ? j->pos + (p - cp) : p;
                bool vis = blk ? p - cp < j->T && (!m->causal || kpos <= qpos) : p < n_ctx && q->present[p] != 0;
                if (n_swa > 0 && qpos - kpos >= n_swa) vis = false;
                sr[p] = vis ? sr[p] * m->kq_scale : -INFINITY;
                if (sr[p] > mx) mx = sr[p];
            }
            k->softmax_f16(ls, sr, mx); /* a row always sees itself: mx is finite */
        }
        if (n_ctx > 0)
            fmm(k, cp, vcol(q, j->il, g * hd), (size_t)q->vstride, hd, S, (size_t)ls, n_t, O, hd);
        else
            memset(O, 0, (size_t)n_t * hd * sizeof(float));
        for (int r = 0; r < n_t; r++) {
            float *o = O + (size_t)r * hd;
            const float *pr = S + (size_t)r * ls + cp;
            for (int b = 0; b < j->T; b++) {
                if (pr[b] == 0) continue;
                const float *vr = d->v + (size_t)b * d->n_kv + (size_t)g * hd;
                for (int i = 0; i < hd; i++) o[i] += pr[b] * vr[i];
            }
            memcpy(d->a + (size_t)(t0 + r / gq) * d->n_q + (size_t)(g * gq + r % gq) * hd, o,
                   (size_t)hd * sizeof(float));
        }
    }
}

int mu_draft_seq_pass(mu_draft_seq *q, int32_t last, int pos, int n_draft, mu_err *err) {
    int rc = flush(q, err);
    if (rc) return rc;
    mu_drafter *d = q->d;
    const mu_dflash_model *m = d->m;
    if (n_draft < 1 || n_draft > m->block_size - 1 || n_draft > DRAFT_ROWS - 1)
        return mu_fail(err, MU_E_ARG, "drafter: draft length must be 1..%d: %d", m->block_size - 1, n_draft);
    if (pos < 0 || pos > q->n_ctx)
        return mu_fail(err, MU_E_ARG, "drafter: position %d outside the context of %d", pos, q->n_ctx);
    if (last < 0 || last >= d->n_vocab) return mu_fail(err, MU_E_ARG, "drafter: token out of range: %d", last);
    /* the whole block the drafter was trained on, whatever n_draft: the
     * block's rows attend to each other, so a shorter block is another input
     * (its drafts are much worse: docs/speculative.md); only rows 1 ..
     * n_draft go through the output matrix */
    const int T = m->block_size, E = m->n_embd;
    const mu_kern *k = d->e->kern;
    /* x = embedding of [last, mask, ...] (* embedding scale) */
    const size_t rb = d->tok_embd->bytes / (size_t)d->tok_embd->ne[1];
    for (int t = 0; t < T; t++) {
        const int32_t id = t == 0 ? last : m->mask_id;
        float *x = d->x + (size_t)t * E;
        k->dequant[d->tok_embd->type]((const uint8_t *)d->tok_embd->data + (size_t)id * rb, x, E);
        if (m->emb_scale != 0)
            for (int i = 0; i < E; i++) x[i] *= m->emb_scale;
    }
    rope_table(d, T, pos);
    if (q->gq) {
        rc = mu_gpu_dseq_pass(q->gq, d->x, d->rc, d->rs, pos, pos < q->n_past ? pos : q->n_past, n_draft, err);
        q->n_hid = rc < 0 ? 0 : n_draft;
        return rc < 0 ? rc : n_draft;
    }
    for (int il = 0; il < m->n_layer; il++) {
        const mu_dflash_layer *L = &m->layers[il];
        /* every row's k and v; the last layer needs the rest only for the
         * rows that become drafts, [1, 1 + n_draft) */
        const int r0 = il == m->n_layer - 1 ? 1 : 0, nr = il == m->n_layer - 1 ? n_draft : T;
        mu_rms_rows(k, d->a, d->x, L->attn_norm->data, E, T, (size_t)E, m->eps);
        matmul(d, d->a + (size_t)r0 * E, nr, L->wq, d->q + (size_t)r0 * d->n_q);
        matmul(d, d->a, T, L->wk, d->k);
        matmul(d, d->a, T, L->wv, d->v);
        qk_post(d, L, T, r0, r0 + nr);
        attn_job aj = {q, il, T, pos, r0, nr};
        mu_pool_run(d->pool, job_attn, &aj);
        matmul(d, d->a + (size_t)r0 * d->n_q, nr, L->wo, d->o + (size_t)r0 * E);
        float *o = d->o + (size_t)r0 * E, *x = d->x + (size_t)r0 * E;
        if (L->attn_post_norm) mu_rms_rows(k, o, o, L->attn_post_norm->data, E, nr, (size_t)E, m->eps);
        for (size_t i = 0; i < (size_t)nr * E; i++) x[i] += o[i];
        mu_rms_rows(k, d->a + (size_t)r0 * E, x, L->ffn_norm->data, E, nr, (size_t)E, m->eps);
        matmul(d, d->a + (size_t)r0 * E, nr, L->ffn_gate, d->f1 + (size_t)r0 * m->n_ff);
        matmul(d, d->a + (size_t)r0 * E, nr, L->ffn_up, d->f2 + (size_t)r0 * m->n_ff);
        for (int t = r0; t < r0 + nr; t++) k->swiglu(m->n_ff, d->f1 + (size_t)t * m->n_ff, d->f2 + (size_t)t * m->n_ff);
        matmul(d, d->f1 + (size_t)r0 * m->n_ff, nr, L->ffn_down, d->o + (size_t)r0 * E);
        if (L->ffn_post_norm) mu_rms_rows(k, o, o, L->ffn_post_norm->data, E, nr, (size_t)E, m->eps);
        for (size_t i = 0; i < (size_t)nr * E; i++) x[i] += o[i];
    }
    /* the final norm of rows 1..n_draft, kept for mu_draft_seq_tokens */
    mu_rms_rows(k, q->hid, d->x + E, m->output_norm->data, E, n_draft, (size_t)E, m->eps);
    q->n_hid = n_draft;
    return n_draft;
}

/* Rows [from, from + c) of the kept rows (c <= DRAFT_LOGIT_ROWS) through
 * the draft head, into d->lg ([c][n_head]). */
static void head_rows(mu_draft_seq *q, int from, int c) {
    mu_drafter *d = q->d;
    matmul(d, q->hid + (size_t)from * d->m->n_embd, c, d->head, d->lg);
}

/* mu_draft_seq_tokens on the device: the drafts up to the first row
 * whose scores are not all finite (the CPU's argmax would pick some id
 * there; a draft that is not one is no draft). */
static int tokens_dev(mu_draft_seq *q, int from, int n, int32_t *out) {
    mu_drafter *d = q->d;
    int32_t best[DRAFT_ROWS];
    if (mu_gpu_dseq_head(q->gq, from, n, best, NULL, NULL)) return 0;
    int i = 0;
    for (; i < n && best[i] >= 0; i++) out[i] = d->head_ids ? d->head_ids[best[i]] : best[i];
    return i;
}

int mu_draft_seq_tokens(mu_draft_seq *q, int from, int n, int32_t *out) {
    mu_drafter *d = q->d;
    if (from < 0 || from >= q->n_hid || n < 1) return 0;
    if (n > q->n_hid - from) n = q->n_hid - from;
    if (q->gq) return tokens_dev(q, from, n, out);
    /* the head, argmax (first of ties) */
    for (int t0 = 0; t0 < n; t0 += DRAFT_LOGIT_ROWS) {
        const int c = n - t0 < DRAFT_LOGIT_ROWS ? n - t0 : DRAFT_LOGIT_ROWS;
        head_rows(q, from + t0, c);
        for (int t = 0; t < c; t++) {
            const float *l = d->lg + (size_t)t * d->n_head;
            int best = 0;
            for (int r = 1; r < d->n_head; r++)
                if (l[r] > l[best]) best = r;
            out[t0 + t] = d->head_ids ? d->head_ids[best] : best;
        }
    }
    return n;
}

int mu_draft_seq_scores(mu_draft_seq *q, int row, float *out) {
    mu_drafter *d = q->d;
    if (row < 0 || row >= q->n_hid) return 0;
    if (q->gq) {
        int32_t best;
        return mu_gpu_dseq_head(q->gq, row, 1, &best, out, NULL) ? 0 : d->n_head;
    }
    head_rows(q, row, 1);
    memcpy(out, d->lg, (size_t)d->n_head * sizeof *out);
    return d->n_head;
}

int mu_draft_seq_draft(mu_draft_seq *q, int32_t last, int pos, int n_draft, int32_t *out, mu_err *err) {
    int rc = mu_draft_seq_pass(q, last, pos, n_draft, err);
    return rc < 0 ? rc : mu_draft_seq_tokens(q, 0, n_draft, out);
}
