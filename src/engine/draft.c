/* draft.c: the DFlash drafter on the CPU (llama.cpp's `dflash`
 * architecture, docs/speculative.md "DFlash").
 * Owns: binding a drafter file to a target engine (the checks that they
 * fit), per sequence the drafter's K/V rows made from the target's hidden
 * states (the "injection": fc, then the encoder norm, then each layer's
 * k/v projections, k norm and RoPE), and the drafting pass over the block
 * [last token, mask, ...]: embedding, then per layer attention norm, q/k/v,
 * q/k norms, NeoX RoPE, attention over the injected rows and the block,
 * output projection, optional post norm, residual, SwiGLU FFN, optional
 * post norm, residual; the final norm and the output matrix (the drafter's,
 * else the target's); the drafts are the rows' argmax.
 * Does not: capture the hidden states (forward.c, mu_batch_item.feat),
 * decide what to draft or verify (src/gen/sched.c), or round like llama.cpp
 * bit for bit: a draft only proposes tokens, the target decides every one,
 * so the drafter's numerics cannot change an answer. Its matmuls use the
 * kernel table's one-row dots (activations in each weight's dot type), its
 * norms, RoPE, softmax and SiLU are plain float code.
 * Design: the drafter keeps f32 rows of every position (no ring; drafters
 * are a few layers), with a presence flag per position, so a sequence whose
 * prompt came from elsewhere (a KV pack, a shared prompt) still drafts from
 * what it has. All scratch is sized at open; drafting allocates nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/mem.h"
#include "../model/dflash.h"
#include "engine.h"

#define DRAFT_ROWS MU_DFLASH_MAX_BLOCK /* most rows of one pass (a block, or a piece of an injection) */
#define DRAFT_LOGIT_ROWS 16            /* block rows per pass of the output matrix */

struct mu_drafter {
    mu_engine *e;
    mu_dflash_model *m;
    mu_drafter_info info;
    const mu_gguf_tensor *tok_embd, *output; /* the drafter's, else the target's */
    int n_vocab, n_q, n_kv, n_feat;
    /* scratch, [DRAFT_ROWS][width] */
    float *x, *a, *q, *k, *v, *o, *f1, *f2, *g;
    uint8_t *qa;
    size_t qa_stride;
    float *lg;      /* [DRAFT_LOGIT_ROWS][n_vocab] logits */
    float *scores;  /* [n_threads][scores_cap] */
    size_t scores_cap;
};

struct mu_draft_seq {
    mu_drafter *d;
    int n_ctx, n_past;
    float *kc, *vc;   /* [n_layer][n_ctx][n_kv]; rows of absent positions are never read */
    uint8_t *present; /* [n_ctx] */
};

/* ---- small helpers ------------------------------------------------------ */

static void rms_norm(float *y, const float *x, const float *w, int n, float eps) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / n) + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

/* NeoX RoPE (rotate_half): pairs (x[i], x[i + hd/2]), theta_i = pos *
 * base^(-2i/hd), advanced by repeated multiplication as ggml's cache does. */
static void rope_neox(float *x, int hd, int pos, float base) {
    const float theta_scale = powf(base, -2.0f / (float)hd);
    float theta = (float)pos;
    const int h2 = hd / 2;
    for (int i = 0; i < h2; i++) {
        const float c = cosf(theta), s = sinf(theta), x0 = x[i], x1 = x[i + h2];
        x[i] = x0 * c - x1 * s;
        x[i + h2] = x0 * s + x1 * c;
        theta *= theta_scale;
    }
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
    const size_t rb = j->w->bytes / (size_t)rows;
    int lo, hi;
    mu_split(rows, ith, nth, 16, &lo, &hi);
    mu_vec_dot_fn dot = k->vec_dot[j->w->type];
    for (int r = lo; r < hi; r++) /* a weight row once, against every activation row */
        for (int t = 0; t < j->T; t++)
            j->y[(size_t)t * rows + r] =
                dot(cols, (const uint8_t *)j->w->data + (size_t)r * rb, j->d->qa + (size_t)t * j->d->qa_stride);
}

/* y = x W^T for T rows of x ([T][cols], f32). */
static void matmul(mu_drafter *d, const float *x, int T, const mu_gguf_tensor *w, float *y) {
    const mu_kern *k = d->e->kern;
    const int cols = (int)w->ne[0];
    const uint32_t dt = mu_kern_dot_type(w->type);
    for (int t = 0; t < T; t++) k->quant[dt](x + (size_t)t * cols, d->qa + (size_t)t * d->qa_stride, cols);
    mm_job j = {d, w, T, y};
    mu_pool_run(d->e->pool, job_mm, &j);
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

int mu_drafter_open(const char *path, mu_engine *target, mu_drafter **out, mu_err *err) {
    if (target->gpu) return mu_fail(err, MU_E_ARG, "drafter: DFlash drafting needs the CPU backend");
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
                                m->tok_embd != NULL || m->output != NULL};
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
    if (!d->x || !d->a || !d->g || !d->q || !d->k || !d->v || !d->o || !d->f1 || !d->f2 || !d->qa || !d->lg) {
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
    mu_dflash_close(d->m);
    free(d);
}

const mu_drafter_info *mu_drafter_get_info(const mu_drafter *d) { return &d->info; }

/* ---- sequences ---------------------------------------------------------- */

int mu_draft_seq_new(mu_drafter *d, int n_ctx, mu_draft_seq **out, mu_err *err) {
    if (n_ctx < 1) return mu_fail(err, MU_E_ARG, "drafter: context must be >= 1: %d", n_ctx);
    /* the attention's scores: every position plus a block, per thread */
    const size_t cap = (size_t)n_ctx + DRAFT_ROWS, nth = (size_t)mu_pool_size(d->e->pool);
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
        q->kc = calloc(rows * (size_t)d->n_kv, sizeof(float));
        q->vc = calloc(rows * (size_t)d->n_kv, sizeof(float));
        q->present = calloc((size_t)n_ctx, 1);
    }
    if (!q || !q->kc || !q->vc || !q->present) {
        mu_draft_seq_free(q);
        return mu_fail(err, MU_E_NOMEM, "drafter: out of memory for %d positions", n_ctx);
    }
    q->d = d;
    q->n_ctx = n_ctx;
    *out = q;
    return 0;
}

void mu_draft_seq_free(mu_draft_seq *q) {
    if (!q) return;
    free(q->kc);
    free(q->vc);
    free(q->present);
    free(q);
}

void mu_draft_seq_truncate(mu_draft_seq *q, int n) {
    if (n < 0) n = 0;
    if (n >= q->n_past) return;
    memset(q->present + n, 0, (size_t)(q->n_past - n));
    q->n_past = n;
}

static float *krow(mu_draft_seq *q, int il, int pos) {
    return q->kc + ((size_t)il * (size_t)q->n_ctx + (size_t)pos) * (size_t)q->d->n_kv;
}
static float *vrow(mu_draft_seq *q, int il, int pos) {
    return q->vc + ((size_t)il * (size_t)q->n_ctx + (size_t)pos) * (size_t)q->d->n_kv;
}

/* k (and q when given) of T rows: per-head norms, then RoPE at pos0 + t */
static void qk_post(mu_drafter *d, const mu_dflash_layer *L, int T, int pos0, bool with_q) {
    const mu_dflash_model *m = d->m;
    const int hd = m->head_dim;
    for (int t = 0; t < T; t++) {
        if (with_q)
            for (int h = 0; h < m->n_head; h++) {
                float *x = d->q + (size_t)t * d->n_q + (size_t)h * hd;
                rms_norm(x, x, L->q_norm->data, hd, m->eps);
                rope_neox(x, hd, pos0 + t, m->rope_base);
            }
        for (int h = 0; h < m->n_head_kv; h++) {
            float *x = d->k + (size_t)t * d->n_kv + (size_t)h * hd;
            rms_norm(x, x, L->k_norm->data, hd, m->eps);
            rope_neox(x, hd, pos0 + t, m->rope_base);
        }
    }
}

int mu_draft_seq_inject(mu_draft_seq *q, int pos0, int n, const float *feat, mu_err *err) {
    mu_drafter *d = q->d;
    const mu_dflash_model *m = d->m;
    if (pos0 < 0 || n < 0 || n > q->n_ctx - pos0)
        return mu_fail(err, MU_E_ARG, "drafter: positions %d..%d outside the context of %d", pos0, pos0 + n, q->n_ctx);
    const int E = m->n_embd;
    for (int c = 0; c < n; c += DRAFT_ROWS) {
        const int T = n - c < DRAFT_ROWS ? n - c : DRAFT_ROWS, p0 = pos0 + c;
        /* g = rms(feat fc^T) * enc_norm: [T][E] */
        matmul(d, feat + (size_t)c * d->n_feat, T, m->fc, d->g);
        for (int t = 0; t < T; t++)
            rms_norm(d->g + (size_t)t * E, d->g + (size_t)t * E, m->enc_norm->data, E, m->eps);
        for (int il = 0; il < m->n_layer; il++) {
            const mu_dflash_layer *L = &m->layers[il];
            matmul(d, d->g, T, L->wk, d->k);
            matmul(d, d->g, T, L->wv, d->v);
            qk_post(d, L, T, p0, false);
            for (int t = 0; t < T; t++) {
                memcpy(krow(q, il, p0 + t), d->k + (size_t)t * d->n_kv, (size_t)d->n_kv * sizeof(float));
                memcpy(vrow(q, il, p0 + t), d->v + (size_t)t * d->n_kv, (size_t)d->n_kv * sizeof(float));
            }
        }
        memset(q->present + p0, 1, (size_t)T);
    }
    if (pos0 + n > q->n_past) q->n_past = pos0 + n;
    return 0;
}

/* ---- the drafting pass -------------------------------------------------- */

typedef struct {
    mu_draft_seq *q;
    int il, T, pos;
} attn_job;

/* Attention of the block's T rows (q, k, v in scratch) over the present
 * injected rows before pos and the block itself, per (row, head), into a. */
static void job_attn(void *arg, int ith, int nth) {
    attn_job *j = arg;
    mu_draft_seq *q = j->q;
    mu_drafter *d = q->d;
    const mu_dflash_model *m = d->m;
    const int hd = m->head_dim, gq = m->n_head / m->n_head_kv, n_swa = m->swa[j->il] ? m->n_swa : 0;
    float *sc = d->scores + (size_t)ith * d->scores_cap;
    int lo, hi;
    mu_split(j->T * m->n_head, ith, nth, 1, &lo, &hi);
    for (int w = lo; w < hi; w++) {
        const int t = w / m->n_head, h = w % m->n_head, g = h / gq, qpos = j->pos + t;
        const float *qr = d->q + (size_t)t * d->n_q + (size_t)h * hd;
        const int n_ctx = j->pos < q->n_past ? j->pos : q->n_past;
        float mx = -INFINITY;
        /* scores over the cache, then over the block; -inf where masked */
        for (int p = 0; p < n_ctx + j->T; p++) {
            const bool blk = p >= n_ctx;
            const int kpos = blk ? j->pos + (p - n_ctx) : p;
            bool vis = blk ? (!m->causal || kpos <= qpos) : q->present[p] != 0;
            if (n_swa > 0 && qpos - kpos >= n_swa) vis = false;
            float s = -INFINITY;
            if (vis) {
                const float *kr = blk ? d->k + (size_t)(p - n_ctx) * d->n_kv + (size_t)g * hd
                                      : krow(q, j->il, p) + (size_t)g * hd;
                float acc = 0;
                for (int i = 0; i < hd; i++) acc += qr[i] * kr[i];
                s = acc * m->kq_scale;
                if (s > mx) mx = s;
            }
            sc[p] = s;
        }
        float *o = d->a + (size_t)t * d->n_q + (size_t)h * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        double sum = 0;
        for (int p = 0; p < n_ctx + j->T; p++) {
            if (sc[p] == -INFINITY) continue;
            const float e = expf(sc[p] - mx);
            sum += e;
            const bool blk = p >= n_ctx;
            const float *vr = blk ? d->v + (size_t)(p - n_ctx) * d->n_kv + (size_t)g * hd
                                  : vrow(q, j->il, p) + (size_t)g * hd;
            for (int i = 0; i < hd; i++) o[i] += e * vr[i];
        }
        const float inv = sum > 0 ? (float)(1.0 / sum) : 0.0f;
        for (int i = 0; i < hd; i++) o[i] *= inv;
    }
}

static void silu_mul(float *f1, const float *f2, int n) {
    for (int i = 0; i < n; i++) f1[i] = f1[i] / (1.0f + expf(-f1[i])) * f2[i];
}

int mu_draft_seq_draft(mu_draft_seq *q, int32_t last, int pos, int n_draft, int32_t *out, mu_err *err) {
    mu_drafter *d = q->d;
    const mu_dflash_model *m = d->m;
    if (n_draft < 1 || n_draft > m->block_size - 1 || n_draft > DRAFT_ROWS - 1)
        return mu_fail(err, MU_E_ARG, "drafter: draft length must be 1..%d: %d", m->block_size - 1, n_draft);
    if (pos < 0 || pos > q->n_ctx)
        return mu_fail(err, MU_E_ARG, "drafter: position %d outside the context of %d", pos, q->n_ctx);
    if (last < 0 || last >= d->n_vocab) return mu_fail(err, MU_E_ARG, "drafter: token out of range: %d", last);
    const int T = 1 + n_draft, E = m->n_embd;
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
    for (int il = 0; il < m->n_layer; il++) {
        const mu_dflash_layer *L = &m->layers[il];
        for (int t = 0; t < T; t++)
            rms_norm(d->a + (size_t)t * E, d->x + (size_t)t * E, L->attn_norm->data, E, m->eps);
        matmul(d, d->a, T, L->wq, d->q);
        matmul(d, d->a, T, L->wk, d->k);
        matmul(d, d->a, T, L->wv, d->v);
        qk_post(d, L, T, pos, true);
        attn_job aj = {q, il, T, pos};
        mu_pool_run(d->e->pool, job_attn, &aj);
        matmul(d, d->a, T, L->wo, d->o);
        for (int t = 0; t < T; t++) {
            float *o = d->o + (size_t)t * E, *x = d->x + (size_t)t * E;
            if (L->attn_post_norm) rms_norm(o, o, L->attn_post_norm->data, E, m->eps);
            for (int i = 0; i < E; i++) x[i] += o[i];
            rms_norm(d->a + (size_t)t * E, x, L->ffn_norm->data, E, m->eps);
        }
        matmul(d, d->a, T, L->ffn_gate, d->f1);
        matmul(d, d->a, T, L->ffn_up, d->f2);
        for (int t = 0; t < T; t++)
            silu_mul(d->f1 + (size_t)t * m->n_ff, d->f2 + (size_t)t * m->n_ff, m->n_ff);
        matmul(d, d->f1, T, L->ffn_down, d->o);
        for (int t = 0; t < T; t++) {
            float *o = d->o + (size_t)t * E, *x = d->x + (size_t)t * E;
            if (L->ffn_post_norm) rms_norm(o, o, L->ffn_post_norm->data, E, m->eps);
            for (int i = 0; i < E; i++) x[i] += o[i];
        }
    }
    /* final norm of rows 1..n_draft, the output matrix, argmax (first of ties) */
    for (int t = 1; t < T; t++)
        rms_norm(d->a + (size_t)(t - 1) * E, d->x + (size_t)t * E, m->output_norm->data, E, m->eps);
    for (int t0 = 0; t0 < n_draft; t0 += DRAFT_LOGIT_ROWS) {
        const int n = n_draft - t0 < DRAFT_LOGIT_ROWS ? n_draft - t0 : DRAFT_LOGIT_ROWS;
        matmul(d, d->a + (size_t)t0 * E, n, d->output, d->lg);
        for (int t = 0; t < n; t++) {
            const float *l = d->lg + (size_t)t * d->n_vocab;
            int best = 0;
            for (int r = 1; r < d->n_vocab; r++)
                if (l[r] > l[best]) best = r;
            out[t0 + t] = best;
        }
    }
    return n_draft;
}
