/* fake_gpu_draft.h: the fake plugin's DFlash drafter (fake_gpu_plugin.c
 * includes it; gpu.h mu_gpu_draft_*, mu_gpu_dseq_*): a plain C emulation
 * of src/gpu/gpu_cuda_draft.cu, step for step, so the unit tier runs the
 * device drafter's data flow and src/engine/draft.c's side of it without
 * a GPU: the same calls, the same rows kept per sequence, the same masks,
 * and the attention as kd_attn computes it (the CPU drafter's softmax with
 * F16 weights, each key's dot product in one sequence of fmaf, the sum in
 * ATTN_THREADS streams, the weighted values in ATTN_THREADS / head_dim
 * streams combined at the end). Matmuls round the
 * activations to the weight's dot type (Q8_0 blocks, F16, BF16) and sum in
 * float; the CUDA plugin's keep vec_dot's order, which this does not (the
 * comparison with the CPU drafter has a tolerance anyway). Weights: F32,
 * F16, BF16 and Q8_0; others are MU_E_UNSUPPORTED (the CPU drafter then).
 * Off unless $MUSER_FAKE_GPU_DRAFTER=1, so the other tests keep the CPU
 * drafter on the fake device. Test code. */
#ifndef MU_TEST_FAKE_GPU_DRAFT_H
#define MU_TEST_FAKE_GPU_DRAFT_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gpu/gpu.h"
#include "../../src/kern/quant.h"

#define FD_THREADS 256 /* kd_attn's ATTN_THREADS */

typedef struct {
    uint32_t type;
    int ne0, ne1;
    float *w; /* [ne1][ne0], dequantized */
} fd_mat;

typedef struct {
    fd_mat wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *q_norm, *k_norm, *attn_post, *ffn_norm, *ffn_post;
    bool swa;
} fd_layer;

struct mu_gpu_draft {
    int n_layer, E, n_ff, n_head, n_head_kv, hd, block, n_feat, n_swa, n_q, n_kv, R;
    float eps, kq_scale;
    bool causal;
    fd_layer *L;
    fd_mat fc, head;
    float *enc_norm, *out_norm;
    float *x, *a, *at, *q, *k, *v, *o, *f1, *f2, *g, *cs, *sn, *lg, *act;
};

struct mu_gpu_dseq {
    mu_gpu_draft *d;
    int n_ctx;
    float *kc, *vc; /* [n_layer][n_ctx][n_kv] */
    uint8_t *present;
    float *hid;
    int n_hid;
};

static float fd_h2f(uint16_t h) {
    const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    union { uint32_t u; float f; } r;
    if (e == 0) {
        const float v = ldexpf((float)m, -24);
        return s ? -v : v;
    }
    r.u = s | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
    return r.f;
}

static uint16_t fd_f2h(float f) { /* round to nearest even, finite inputs of the drafter's range */
    union { float f; uint32_t u; } v = {f};
    const uint32_t s = (v.u >> 16) & 0x8000u;
    const float a = fabsf(f);
    if (a >= 65520.0f) return (uint16_t)(s | 0x7c00u);
    if (a < ldexpf(1, -14)) return (uint16_t)(s | (uint32_t)lrintf(a * ldexpf(1, 24)));
    int e;
    const float m = frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    uint32_t q = (uint32_t)lrintf(ldexpf(m, 11));  /* 1024 .. 2048 */
    if (q == 2048) q = 1024, e++;
    return (uint16_t)(s | ((uint32_t)(e + 14) << 10) | (q - 1024));
}

static float fd_bf(float f) {
    union { float f; uint32_t u; } v = {f};
    v.u = (v.u + 0x7fffu + ((v.u >> 16) & 1)) & 0xffff0000u;
    return v.f;
}

static int fd_fail(mu_err *err, int code, const char *msg) {
    if (err) {
        err->code = code;
        snprintf(err->msg, sizeof err->msg, "fake gpu drafter: %s", msg);
    }
    return code;
}

static int fd_matrix(const mu_gpu_tensor *t, fd_mat *out, mu_err *err) {
    const size_t n = (size_t)t->ne0 * (size_t)t->ne1;
    out->type = t->type;
    out->ne0 = (int)t->ne0;
    out->ne1 = (int)t->ne1;
    if (t->type != MU_T_F32 && t->type != MU_T_F16 && t->type != MU_T_BF16 && t->type != MU_T_Q8_0)
        return fd_fail(err, MU_E_UNSUPPORTED, "weight type not emulated");
    if (!(out->w = malloc(n * sizeof(float)))) return fd_fail(err, MU_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        switch (t->type) {
        case MU_T_F32: out->w[i] = ((const float *)t->data)[i]; break;
        case MU_T_F16: out->w[i] = fd_h2f(((const uint16_t *)t->data)[i]); break;
        case MU_T_BF16: {
            union { uint32_t u; float f; } b = {(uint32_t)((const uint16_t *)t->data)[i] << 16};
            out->w[i] = b.f;
            break;
        }
        default: {
            const mu_block_q8_0 *b = (const mu_block_q8_0 *)t->data + i / 32;
            out->w[i] = (float)b->qs[i % 32] * fd_h2f(b->d);
        }
        }
    }
    return 0;
}

static int fd_vector(const mu_gpu_tensor *t, float **out, mu_err *err) {
    *out = NULL;
    if (!t->data) return 0;
    if (t->type != MU_T_F32) return fd_fail(err, MU_E_MODEL, "norm weights must be F32");
    if (!(*out = malloc(t->bytes))) return fd_fail(err, MU_E_NOMEM, "out of memory");
    memcpy(*out, t->data, t->bytes);
    return 0;
}

/* x rounded as the device quantizes it for w's dot type, into act */
static void fd_round(const fd_mat *w, const float *x, float *act) {
    const int n = w->ne0;
    if (w->type == MU_T_Q8_0) {
        for (int b = 0; b < n; b += 32) {
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b + i]));
            /* kern_ref.c's mu_quant_q8_0_ref: 127 / amax, rounded to even */
            const float id = amax != 0.f ? 127.f / amax : 0.f, dh = fd_h2f(fd_f2h(amax / 127.f));
            for (int i = 0; i < 32; i++) act[b + i] = rintf(x[b + i] * id) * dh;
        }
    } else {
        for (int i = 0; i < n; i++)
            act[i] = w->type == MU_T_F16 ? fd_h2f(fd_f2h(x[i])) : w->type == MU_T_BF16 ? fd_bf(x[i]) : x[i];
    }
}

/* y [T][rows] = x [T][cols] W^T */
static void fd_mm(mu_gpu_draft *d, const float *x, int T, const fd_mat *w, float *y) {
    for (int t = 0; t < T; t++) {
        fd_round(w, x + (size_t)t * w->ne0, d->act);
        for (int r = 0; r < w->ne1; r++) {
            const float *wr = w->w + (size_t)r * w->ne0;
            float s = 0;
            for (int i = 0; i < w->ne0; i++) s += wr[i] * d->act[i];
            y[(size_t)t * w->ne1 + r] = s;
        }
    }
}

/* cu_rms_rows (in place allowed) */
static void fd_rms(const float *x, const float *w, float *y, int T, int n, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * n;
        float *yr = y + (size_t)t * n;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += (double)(xr[i] * xr[i]);
        const float sc = 1.0f / sqrtf((float)(sum / n) + eps);
        for (int i = 0; i < n; i++) yr[i] = w ? (xr[i] * sc) * w[i] : xr[i] * sc;
    }
}

/* kd_qk over rows [r0, r0 + n) */
static void fd_qk(mu_gpu_draft *d, float *x, int stride, int heads, const float *nw, int r0, int n) {
    const int hd = d->hd, h2 = hd / 2;
    float sv[512];
    for (int t = r0; t < r0 + n; t++)
        for (int h = 0; h < heads; h++) {
            float *row = x + (size_t)t * stride + (size_t)h * hd;
            double sum = 0;
            for (int i = 0; i < hd; i++) sum += (double)(row[i] * row[i]);
            const float scale = 1.0f / sqrtf((float)(sum / hd) + d->eps);
            for (int i = 0; i < hd; i++) sv[i] = row[i] * scale * nw[i];
            for (int i = 0; i < h2; i++) {
                const float c = d->cs[(size_t)t * h2 + i], s = d->sn[(size_t)t * h2 + i];
                row[i] = sv[i] * c - sv[i + h2] * s;
                row[i + h2] = sv[i] * s + sv[i + h2] * c;
            }
        }
}

/* cuda.cuh's expf_ggml (ggml's expf), for the softmax */
static float fd_expf_ggml(float x) {
    const float r = 0x1.8p23f, z = fmaf(x, 0x1.715476p+0f, r), n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.f) return n <= 0.f ? 0.f : INFINITY;
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

/* kd_attn for rows [r0, r0 + nr) of every head: the visible keys' scores,
 * their largest, ggml's expf of each minus it summed in double (keys in
 * FD_THREADS streams j, j + FD_THREADS, ...), the weights times the
 * inverse rounded to F16, the weighted values (keys in FD_THREADS / head_dim
 * streams, combined in stream order) */
static void fd_attn(mu_gpu_dseq *q, int il, int pos, int n_ctx_rows, int r0, int nr) {
    mu_gpu_draft *d = q->d;
    const int HD = d->hd, gq = d->n_head / d->n_head_kv, n_swa = d->L[il].swa ? d->n_swa : 0, T = d->block;
    const int L = n_ctx_rows + T;
    const float *kc = q->kc + (size_t)il * q->n_ctx * d->n_kv, *vc = q->vc + (size_t)il * q->n_ctx * d->n_kv;
    const int G = FD_THREADS / HD; /* at most FD_THREADS / 32: head_dim >= 32 */
    float *sc = malloc((size_t)L * sizeof *sc), acc[FD_THREADS / 32][256];
    const float **vrow = malloc((size_t)L * sizeof *vrow);
    if (!sc || !vrow) abort();
    for (int t = r0; t < r0 + nr; t++)
        for (int h = 0; h < d->n_head; h++) {
            const int g = h / gq, qpos = pos + t;
            const float *qr = d->q + (size_t)t * d->n_q + (size_t)h * HD;
            float M = -INFINITY;
            for (int j = 0; j < L; j++) {
                const float *kr;
                int kpos;
                vrow[j] = NULL;
                if (j < n_ctx_rows) {
                    if (!q->present[j]) continue;
                    kpos = j;
                    kr = kc + (size_t)j * d->n_kv + (size_t)g * HD;
                    vrow[j] = vc + (size_t)j * d->n_kv + (size_t)g * HD;
                } else {
                    const int b = j - n_ctx_rows;
                    if (d->causal && b > t) continue;
                    kpos = pos + b;
                    kr = d->k + (size_t)b * d->n_kv + (size_t)g * HD;
                    vrow[j] = d->v + (size_t)b * d->n_kv + (size_t)g * HD;
                }
                if (n_swa > 0 && qpos - kpos >= n_swa) {
                    vrow[j] = NULL;
                    continue;
                }
                float dot = 0;
                for (int e = 0; e < HD; e++) dot = fmaf(qr[e], kr[e], dot);
                sc[j] = dot * d->kq_scale;
                M = fmaxf(M, sc[j]);
            }
            double S = 0;
            for (int w = 0; w < FD_THREADS; w++) {
                double s = 0;
                for (int j = w; j < L; j += FD_THREADS)
                    if (vrow[j]) s += (double)fd_expf_ggml(sc[j] - M);
                S += s;
            }
            const float inv = (float)(1.0 / S);
            for (int w = 0; w < G; w++) {
                for (int e = 0; e < HD; e++) acc[w][e] = 0;
                for (int j = w; j < L; j += G) {
                    if (!vrow[j]) continue;
                    const float p = fd_h2f(fd_f2h(fd_expf_ggml(sc[j] - M) * inv));
                    for (int e = 0; e < HD; e++) acc[w][e] = fmaf(p, vrow[j][e], acc[w][e]);
                }
            }
            float *orow = d->at + (size_t)t * d->n_q + (size_t)h * HD;
            for (int e = 0; e < HD; e++) {
                float o = 0;
                for (int w = 0; w < G; w++) o += acc[w][e];
                orow[e] = o;
            }
        }
    free(sc);
    free(vrow);
}

static void fd_residual(mu_gpu_draft *d, const float *pw, int r0, int n) {
    float *o = d->o + (size_t)r0 * d->E, *x = d->x + (size_t)r0 * d->E;
    if (pw) fd_rms(o, pw, o, n, d->E, d->eps);
    for (size_t i = 0; i < (size_t)n * d->E; i++) x[i] += o[i];
}

static void fd_draft_free(mu_gpu_draft *d) {
    if (!d) return;
    for (int il = 0; d->L && il < d->n_layer; il++) {
        fd_layer *L = &d->L[il];
        free(L->wq.w), free(L->wk.w), free(L->wv.w), free(L->wo.w), free(L->gate.w), free(L->up.w), free(L->down.w);
        free(L->attn_norm), free(L->q_norm), free(L->k_norm), free(L->attn_post), free(L->ffn_norm), free(L->ffn_post);
    }
    free(d->L), free(d->fc.w), free(d->head.w), free(d->enc_norm), free(d->out_norm);
    free(d->x), free(d->a), free(d->at), free(d->q), free(d->k), free(d->v), free(d->o), free(d->f1), free(d->f2);
    free(d->g), free(d->cs), free(d->sn), free(d->lg), free(d->act);
    free(d);
}

static int fd_draft_new(int dev, const mu_gpu_draft_desc *D, mu_gpu_draft **out, mu_err *err) {
    const char *on = getenv("MUSER_FAKE_GPU_DRAFTER");
    if (!on || strcmp(on, "1")) return fd_fail(err, MU_E_UNSUPPORTED, "off ($MUSER_FAKE_GPU_DRAFTER)");
    if (dev != 0) return fd_fail(err, MU_E_ARG, "no such device");
    if (D->head_dim % 32 || D->head_dim > 256 || D->n_head % D->n_head_kv)
        return fd_fail(err, MU_E_UNSUPPORTED, "geometry");
    mu_gpu_draft *d = calloc(1, sizeof *d);
    if (!d) return fd_fail(err, MU_E_NOMEM, "out of memory");
    *d = (mu_gpu_draft){.n_layer = D->n_layer, .E = D->n_embd, .n_ff = D->n_ff, .n_head = D->n_head,
                        .n_head_kv = D->n_head_kv, .hd = D->head_dim, .block = D->block_size, .n_feat = D->n_feat,
                        .n_swa = D->n_swa, .n_q = D->n_head * D->head_dim, .n_kv = D->n_head_kv * D->head_dim,
                        .R = D->block_size > MU_GPU_DRAFT_ROWS ? D->block_size : MU_GPU_DRAFT_ROWS,
                        .eps = D->eps, .kq_scale = D->kq_scale, .causal = D->causal};
    int rc = (d->L = calloc((size_t)D->n_layer, sizeof *d->L)) ? 0 : fd_fail(err, MU_E_NOMEM, "out of memory");
    if (!rc) rc = fd_matrix(&D->fc, &d->fc, err);
    if (!rc) rc = fd_vector(&D->enc_norm, &d->enc_norm, err);
    if (!rc) rc = fd_vector(&D->output_norm, &d->out_norm, err);
    for (int il = 0; !rc && il < D->n_layer; il++) {
        const mu_gpu_draft_layer *S = &D->layers[il];
        fd_layer *L = &d->L[il];
        L->swa = S->swa;
        if ((rc = fd_matrix(&S->wq, &L->wq, err)) || (rc = fd_matrix(&S->wk, &L->wk, err)) ||
            (rc = fd_matrix(&S->wv, &L->wv, err)) || (rc = fd_matrix(&S->wo, &L->wo, err)) ||
            (rc = fd_matrix(&S->ffn_gate, &L->gate, err)) || (rc = fd_matrix(&S->ffn_up, &L->up, err)) ||
            (rc = fd_matrix(&S->ffn_down, &L->down, err)) || (rc = fd_vector(&S->attn_norm, &L->attn_norm, err)) ||
            (rc = fd_vector(&S->q_norm, &L->q_norm, err)) || (rc = fd_vector(&S->k_norm, &L->k_norm, err)) ||
            (rc = fd_vector(&S->attn_post_norm, &L->attn_post, err)) ||
            (rc = fd_vector(&S->ffn_norm, &L->ffn_norm, err)) || (rc = fd_vector(&S->ffn_post_norm, &L->ffn_post, err)))
            break;
    }
    const size_t R = (size_t)d->R;
    int wide = d->n_feat > d->n_ff ? d->n_feat : d->n_ff;
    if (d->n_q > wide) wide = d->n_q;
    if (d->E > wide) wide = d->E;
    if (!rc) {
        d->x = malloc(R * d->E * 4), d->a = malloc(R * d->E * 4), d->at = malloc(R * d->n_q * 4);
        d->q = malloc(R * d->n_q * 4), d->k = malloc(R * d->n_kv * 4), d->v = malloc(R * d->n_kv * 4);
        d->o = malloc(R * d->E * 4), d->f1 = malloc(R * d->n_ff * 4), d->f2 = malloc(R * d->n_ff * 4);
        d->g = malloc(R * d->E * 4), d->cs = malloc(R * d->hd / 2 * 4), d->sn = malloc(R * d->hd / 2 * 4);
        d->act = malloc((size_t)wide * 4);
        if (!d->x || !d->a || !d->at || !d->q || !d->k || !d->v || !d->o || !d->f1 || !d->f2 || !d->g || !d->cs ||
            !d->sn || !d->act)
            rc = fd_fail(err, MU_E_NOMEM, "out of memory");
    }
    if (rc) {
        fd_draft_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

static int fd_set_head(mu_gpu_draft *d, const mu_gpu_tensor *head, mu_err *err) {
    free(d->head.w), free(d->lg);
    d->head.w = NULL;
    d->lg = NULL;
    if (head->ne0 != d->E) return fd_fail(err, MU_E_MODEL, "head width");
    int rc = fd_matrix(head, &d->head, err);
    if (!rc && !(d->lg = malloc((size_t)(d->block - 1) * (size_t)head->ne1 * sizeof(float))))
        rc = fd_fail(err, MU_E_NOMEM, "out of memory");
    return rc;
}

static void fd_dseq_free(mu_gpu_dseq *q) {
    if (!q) return;
    free(q->kc), free(q->vc), free(q->present), free(q->hid);
    free(q);
}

static int fd_dseq_new(mu_gpu_draft *d, int n_ctx, mu_gpu_dseq **out, mu_err *err) {
    mu_gpu_dseq *q = calloc(1, sizeof *q);
    if (!q) return fd_fail(err, MU_E_NOMEM, "out of memory");
    const size_t rows = (size_t)d->n_layer * (size_t)n_ctx * (size_t)d->n_kv;
    q->d = d;
    q->n_ctx = n_ctx;
    q->kc = calloc(rows, 4), q->vc = calloc(rows, 4), q->present = calloc((size_t)n_ctx, 1);
    q->hid = calloc((size_t)(d->block - 1) * d->E, 4);
    if (!q->kc || !q->vc || !q->present || !q->hid) {
        fd_dseq_free(q);
        return fd_fail(err, MU_E_NOMEM, "out of memory");
    }
    *out = q;
    return 0;
}

static int fd_dseq_truncate(mu_gpu_dseq *q, int n, int n_past, mu_err *err) {
    if (n < 0) n = 0;
    if (n_past > q->n_ctx) n_past = q->n_ctx;
    if (n < n_past) memset(q->present + n, 0, (size_t)(n_past - n));
    return 0;
}

static int fd_dseq_inject(mu_gpu_dseq *q, int pos0, int n, const float *feat, const float *cs, const float *sn,
                          mu_err *err) {
    mu_gpu_draft *d = q->d;
    if (n < 1 || n > MU_GPU_DRAFT_ROWS || pos0 < 0 || pos0 > q->n_ctx - n) return fd_fail(err, MU_E_ARG, "inject rows");
    memcpy(d->cs, cs, (size_t)n * d->hd / 2 * 4);
    memcpy(d->sn, sn, (size_t)n * d->hd / 2 * 4);
    fd_mm(d, feat, n, &d->fc, d->g);
    fd_rms(d->g, d->enc_norm, d->g, n, d->E, d->eps);
    for (int il = 0; il < d->n_layer; il++) {
        const fd_layer *L = &d->L[il];
        fd_mm(d, d->g, n, &L->wk, d->k);
        fd_mm(d, d->g, n, &L->wv, d->v);
        fd_qk(d, d->k, d->n_kv, d->n_head_kv, L->k_norm, 0, n);
        const size_t off = ((size_t)il * q->n_ctx + (size_t)pos0) * d->n_kv;
        memcpy(q->kc + off, d->k, (size_t)n * d->n_kv * 4);
        memcpy(q->vc + off, d->v, (size_t)n * d->n_kv * 4);
    }
    memset(q->present + pos0, 1, (size_t)n);
    return 0;
}

static int fd_dseq_pass(mu_gpu_dseq *q, const float *x0, const float *cs, const float *sn, int pos, int n_ctx_rows,
                        int n_draft, mu_err *err) {
    mu_gpu_draft *d = q->d;
    const int T = d->block, E = d->E;
    if (n_draft < 1 || n_draft > T - 1) return fd_fail(err, MU_E_ARG, "draft length");
    if (pos < 0 || n_ctx_rows < 0 || n_ctx_rows > pos || n_ctx_rows > q->n_ctx)
        return fd_fail(err, MU_E_ARG, "position");
    memcpy(d->x, x0, (size_t)T * E * 4);
    memcpy(d->cs, cs, (size_t)T * d->hd / 2 * 4);
    memcpy(d->sn, sn, (size_t)T * d->hd / 2 * 4);
    const size_t Q = (size_t)d->n_q, F = (size_t)d->n_ff;
    for (int il = 0; il < d->n_layer; il++) {
        const fd_layer *L = &d->L[il];
        const int r0 = il == d->n_layer - 1 ? 1 : 0, nr = T - r0; /* pass_enqueue: every draft row */
        fd_rms(d->x, L->attn_norm, d->a, T, E, d->eps);
        fd_mm(d, d->a + (size_t)r0 * E, nr, &L->wq, d->q + r0 * Q);
        fd_mm(d, d->a, T, &L->wk, d->k);
        fd_mm(d, d->a, T, &L->wv, d->v);
        fd_qk(d, d->q, d->n_q, d->n_head, L->q_norm, r0, nr);
        fd_qk(d, d->k, d->n_kv, d->n_head_kv, L->k_norm, 0, T);
        fd_attn(q, il, pos, n_ctx_rows, r0, nr);
        fd_mm(d, d->at + r0 * Q, nr, &L->wo, d->o + (size_t)r0 * E);
        fd_residual(d, L->attn_post, r0, nr);
        fd_rms(d->x + (size_t)r0 * E, L->ffn_norm, d->a + (size_t)r0 * E, nr, E, d->eps);
        fd_mm(d, d->a + (size_t)r0 * E, nr, &L->gate, d->f1 + r0 * F);
        fd_mm(d, d->a + (size_t)r0 * E, nr, &L->up, d->f2 + r0 * F);
        for (size_t i = r0 * F; i < (r0 + nr) * F; i++) { /* k_swiglu: ggml's expf on whole groups of 16 */
            const float x = d->f1[i], e = (int)(i % F) < (d->n_ff & ~15) ? fd_expf_ggml(-x) : expf(-x);
            d->f1[i] = x / (1.0f + e) * d->f2[i];
        }
        fd_mm(d, d->f1 + r0 * F, nr, &L->down, d->o + (size_t)r0 * E);
        fd_residual(d, L->ffn_post, r0, nr);
    }
    fd_rms(d->x + E, d->out_norm, q->hid, T - 1, E, d->eps);
    q->n_hid = n_draft;
    return n_draft;
}

static int fd_dseq_head(mu_gpu_dseq *q, int from, int n, int32_t *best, float *scores, mu_err *err) {
    mu_gpu_draft *d = q->d;
    if (!d->head.w) return fd_fail(err, MU_E_STATE, "no head");
    if (from < 0 || n < 1 || from + n > q->n_hid) return fd_fail(err, MU_E_ARG, "head rows");
    fd_mm(d, q->hid + (size_t)from * d->E, n, &d->head, d->lg);
    for (int r = 0; r < n; r++) {
        const float *l = d->lg + (size_t)r * d->head.ne1;
        int32_t b = 0;
        for (int i = 0; i < d->head.ne1 && b >= 0; i++) {
            if (!isfinite(l[i])) b = -1;
            else if (l[i] > l[b]) b = i;
        }
        best[r] = b;
    }
    if (scores) memcpy(scores, d->lg, (size_t)n * d->head.ne1 * sizeof(float));
    return 0;
}

#endif
