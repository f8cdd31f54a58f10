/* vit.c: Muse Glimmer's vision encoder on the CPU: pixels -> rows in the
 * text model's embedding width.
 * Owns: the data flow of llama.cpp's muse-glimmer graph (conv patchify,
 * resized learned position grid, the window permutation, pre-LN blocks with
 * windowed and global attention and 2-D RoPE, post-LN, the 2x2 pixel
 * shuffle, the three-layer adapter), its scratch, and its threads.
 * Does not own: decoding and resizing images (image.c), loading the
 * projector (mmproj.c), the kernels (vit_kern.c, src/kern).
 * Design: every step computes what ggml's CPU backend computes for the same
 * node, in its order (vit.h, vit_kern.c); the token order inside the blocks
 * is llama.cpp's permuted one (windows of pos_side x pos_side patches in
 * row-major window order), so the attention windows are contiguous ranges. */
#include "vit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/mem.h"
#include "../kern/quant.h"

typedef struct {
    const mu_kern *k;
    mu_pool *pool;
    int T;                  /* activation rows of this call */
    int ll_T, t0;           /* the whole matmul's rows (they decide its rounding), this call's first */
    const float *x;         /* [T][cols] */
    int cols;
    const mu_gguf_tensor *w;
    const mu_gguf_tensor *bias; /* may be NULL */
    float *y;               /* [T][rows] */
    uint8_t *qa;            /* quantized activations */
    size_t qa_stride;
} vmm_job;

static void job_quant(void *arg, int ith, int nth) {
    vmm_job *j = arg;
    const uint32_t dt = mu_kern_dot_type(j->w->type);
    int lo, hi;
    mu_split(j->T, ith, nth, 1, &lo, &hi);
    for (int t = lo; t < hi; t++) j->k->quant[dt](j->x + (size_t)t * j->cols, j->qa + (size_t)t * j->qa_stride, j->cols);
}

/* y[t][r] = dot(w row r, x row t) (+ bias[r]), rounded as ggml's mul_mat of
 * T >= 2 rows (tinyBLAS where it accepts the shape, else vec_dot), then
 * ggml_add of the bias. */
static void job_mm(void *arg, int ith, int nth) {
    vmm_job *j = arg;
    const mu_kern *k = j->k;
    const mu_gguf_tensor *w = j->w;
    const int rows = (int)w->ne[1], cols = (int)w->ne[0];
    const size_t rb = w->bytes / (size_t)rows;
    int lo, hi;
    mu_split(rows, ith, nth, 16, &lo, &hi);
    if (lo >= hi) return;
    /* which rows round as llama.cpp's batched path (tinyBLAS, Q4_K's repack
     * gemm on whole groups of 4) and which as vec_dot, as the engine's
     * matmul decides it (src/engine/forward.c) */
    mu_vec_dot_fn dot = k->vec_dot[w->type], dotb = k->vec_dot_batch[w->type];
    int t_b = 0; /* rows of this call that round as dotb */
    if (dotb && j->ll_T >= 2) {
        if (w->type == MU_T_Q4_K)
            t_b = (j->ll_T & ~3) - j->t0;
        else if (cols % 16 == 0 && rows % 4 == 0)
            t_b = j->T;
        t_b = t_b < 0 ? 0 : t_b > j->T ? j->T : t_b;
    }
    int t_g = 0; /* the tiled gemm rounds as dotb, or as dot where the table has no dotb */
    if (j->ll_T >= 2 && k->gemm[w->type]) {
        t_g = dotb ? t_b : j->T;
        if (w->type == MU_T_Q4_K) t_g &= ~3;
        if (t_g > 0) k->gemm[w->type](cols, w->data, rb, lo, hi, j->qa, j->qa_stride, t_g, j->y, rows);
    }
    const uint8_t *wd = w->data;
    for (int t = t_g; t < j->T; t++) {
        mu_vec_dot_fn d = t < t_b ? dotb : dot;
        for (int r = lo; r < hi; r++) j->y[(size_t)t * rows + r] = d(cols, wd + (size_t)r * rb, j->qa + (size_t)t * j->qa_stride);
    }
    if (j->bias) {
        const float *b = j->bias->data;
        for (int t = 0; t < j->T; t++)
            for (int r = lo; r < hi; r++) j->y[(size_t)t * rows + r] += b[r];
    }
}

typedef struct {
    const mu_mmproj *p;
    const mu_kern *k;
    const mu_vit_kern *vk;
    mu_pool *pool;
    int n;                    /* tokens (patches) */
    uint8_t *qa;
    size_t qa_stride;
} enc;

/* In calls of at most MM_ROWS activation rows (multiples of 4, so Q4_K's
 * groups stay whole), which keeps a call's activations in cache; each row
 * still rounds as the whole matmul of T rows decides. */
#define MM_ROWS 256

/* F16 weights where llama.cpp takes tinyBLAS (T >= 2, cols % 16 == 0, rows
 * % 4 == 0): the activations rounded to F16 once (kept as floats), then the
 * encoder table's mm_f16 over all T rows, each thread a slice of the weight
 * rows. */
typedef struct {
    const mu_vit_kern *vk;
    const mu_kern *k;
    int T, cols, rows;
    const float *x;
    float *a;                   /* [T][cols]: x rounded to F16 */
    const mu_gguf_tensor *w, *bias;
    float *y;
} f16mm_job;

static void job_f16_round(void *arg, int ith, int nth) {
    f16mm_job *j = arg;
    int lo, hi;
    mu_split(j->T, ith, nth, 1, &lo, &hi);
    for (int t = lo; t < hi; t++) j->k->round_f16(j->cols, j->x + (size_t)t * j->cols, j->a + (size_t)t * j->cols);
}

static void job_f16_mm(void *arg, int ith, int nth) {
    f16mm_job *j = arg;
    int lo, hi;
    mu_split(j->rows, ith, nth, 16, &lo, &hi);
    if (lo >= hi) return;
    j->vk->mm_f16(j->cols, j->w->data, (size_t)j->cols, lo, hi, j->a, (size_t)j->cols, j->T, j->y, (size_t)j->rows,
                  j->bias ? j->bias->data : NULL);
}

static void mm(enc *e, const float *x, int T, const mu_gguf_tensor *w, const mu_gguf_tensor *bias, float *y) {
    const int cols = (int)w->ne[0], rows = (int)w->ne[1];
    if (w->type == MU_T_F16 && e->k->vec_dot_batch[MU_T_F16] && T >= 2 && cols % 16 == 0 && rows % 4 == 0) {
        f16mm_job j = {.vk = e->vk, .k = e->k, .T = T, .cols = cols, .rows = rows, .x = x, .a = (float *)e->qa,
                       .w = w, .bias = bias, .y = y};
        mu_pool_run(e->pool, job_f16_round, &j);
        mu_pool_run(e->pool, job_f16_mm, &j);
        return;
    }
    for (int t0 = 0; t0 < T; t0 += MM_ROWS) {
        const int n = T - t0 < MM_ROWS ? T - t0 : MM_ROWS;
        vmm_job j = {.k = e->k, .pool = e->pool, .T = n, .ll_T = T, .t0 = t0, .x = x + (size_t)t0 * cols,
                     .cols = cols, .w = w, .bias = bias, .y = y + (size_t)t0 * rows, .qa = e->qa,
                     .qa_stride = e->qa_stride};
        mu_pool_run(e->pool, job_quant, &j);
        mu_pool_run(e->pool, job_mm, &j);
    }
}

/* ---- per-row jobs ------------------------------------------------------ */

typedef struct {
    int n, E;
    float *x, *y;
    const float *w, *b;
    float eps;
} ln_job;

static void job_ln(void *arg, int ith, int nth) {
    ln_job *j = arg;
    int lo, hi;
    mu_split(j->n, ith, nth, 1, &lo, &hi);
    for (int t = lo; t < hi; t++)
        mu_vit_layer_norm(j->E, j->x + (size_t)t * j->E, j->y + (size_t)t * j->E, j->w, j->b, j->eps);
}

static void layer_norm(enc *e, int n, int E, float *x, float *y, const mu_gguf_tensor *w, const mu_gguf_tensor *b) {
    ln_job j = {n, E, x, y, w ? w->data : NULL, b ? b->data : NULL, e->p->info.eps};
    mu_pool_run(e->pool, job_ln, &j);
}

typedef struct {
    const mu_vit_kern *vk;
    float *x;
    size_t n;
} gelu_job;

static void job_gelu(void *arg, int ith, int nth) {
    gelu_job *j = arg;
    int lo, hi;
    int blocks = (int)((j->n + 4095) / 4096);
    mu_split(blocks, ith, nth, 1, &lo, &hi);
    for (int b = lo; b < hi; b++) {
        size_t a = (size_t)b * 4096, z = a + 4096 < j->n ? a + 4096 : j->n;
        j->vk->gelu((int)(z - a), j->x + a);
    }
}

static void gelu(enc *e, float *x, size_t n) {
    gelu_job j = {e->vk, x, n};
    mu_pool_run(e->pool, job_gelu, &j);
}

/* 2-D RoPE (two ggml_rope_ext calls in "normal" mode, n_dims = hd / 2): the
 * first half of each head rotates by the column, the second by the row;
 * theta = pos * base^(-2i/(hd/2)) advanced by float multiplication. The
 * cos/sin pairs depend on the position alone: cs holds them per position
 * 1..n_pos (hd / 2 floats each), made once per image. */
typedef struct {
    float *x;                 /* [n][E] */
    int n, E, hd;
    const int *pw, *ph;       /* 1-based positions per token */
    const float *cs;          /* [n_pos + 1][hd / 2]: cos, sin of each pair */
} rope_job;

static float *rope_table(int n_pos, int hd, float base) {
    const int nd = hd / 2;
    const float ts = powf(base, -2.0f / (float)nd);
    float *cs = malloc((size_t)(n_pos + 1) * nd * sizeof *cs);
    if (!cs) return NULL;
    for (int p = 0; p <= n_pos; p++) {
        float theta = (float)p, *c = cs + (size_t)p * nd;
        for (int i = 0; i < nd; i += 2) {
            c[i] = cosf(theta);
            c[i + 1] = sinf(theta);
            theta *= ts;
        }
    }
    return cs;
}

static void job_rope(void *arg, int ith, int nth) {
    rope_job *j = arg;
    const int nd = j->hd / 2;
    int lo, hi;
    mu_split(j->n, ith, nth, 1, &lo, &hi);
    for (int t = lo; t < hi; t++) {
        const float *cw = j->cs + (size_t)j->pw[t] * nd, *ch = j->cs + (size_t)j->ph[t] * nd;
        for (int h = 0; h < j->E / j->hd; h++) {
            float *r = j->x + (size_t)t * j->E + (size_t)h * j->hd;
            for (int half = 0; half < 2; half++) {
                const float *cs = half ? ch : cw;
                float *v = r + half * nd;
                for (int i = 0; i < nd; i += 2) {
                    const float c = cs[i], s = cs[i + 1], x0 = v[i], x1 = v[i + 1];
                    v[i] = fmaf(x0, c, -(x1 * s));
                    v[i + 1] = fmaf(x0, s, x1 * c);
                }
            }
        }
    }
}

typedef struct {
    const mu_vit_kern *vk;
    mu_vit_attn_args a;       /* off set per head */
    int n_head;
} attn_job;

static void job_attn(void *arg, int ith, int nth) {
    attn_job *j = arg;
    const int n = j->a.n;
    int lo, hi;
    mu_split(n * j->n_head, ith, nth, 1, &lo, &hi);
    while (lo < hi) {
        const int h = lo / n, i0 = lo % n;
        const int i1 = hi - h * n < n ? hi - h * n : n;
        mu_vit_attn_args a = j->a;
        a.off = h * a.hd;
        j->vk->attn(&a, i0, i1);
        lo += i1 - i0;
    }
}

typedef struct {
    const mu_kern *k;
    const float *x;
    mu_f16 *y;
    size_t n;
} f16_job;

static void job_f16(void *arg, int ith, int nth) {
    f16_job *j = arg;
    int lo, hi;
    int blocks = (int)((j->n + 4095) / 4096);
    mu_split(blocks, ith, nth, 1, &lo, &hi);
    for (size_t i = (size_t)lo * 4096; i < (size_t)hi * 4096 && i < j->n; i += 4096)
        j->k->to_f16((int)(j->n - i < 4096 ? j->n - i : 4096), j->x + i, j->y + i);
}

/* ---- the token layout --------------------------------------------------- */

void mu_vit_plan_free(mu_vit_plan *pl) {
    free(pl->perm), free(pl->inv), free(pl->pw), free(pl->ph), free(pl->wlo), free(pl->whi), free(pl->rope_cs);
    memset(pl, 0, sizeof *pl);
}

int mu_vit_plan_new(const mu_mmproj *p, int nx, int ny, mu_vit_plan *pl, mu_err *err) {
    memset(pl, 0, sizeof *pl);
    const int ps = p->info.patch_size, side = p->info.pos_side;
    if (nx <= 0 || ny <= 0 || nx % (ps * 2) || ny % (ps * 2))
        return mu_fail(err, MU_E_ARG, "vision: image of %dx%d pixels is not a whole number of %d-pixel cells", nx, ny, ps * 2);
    const int gw = nx / ps, gh = ny / ps, n = gw * gh;
    pl->gw = gw, pl->gh = gh, pl->n = n;
    pl->n_pos = gw > gh ? gw : gh;
    int **ints[] = {&pl->perm, &pl->inv, &pl->pw, &pl->ph, &pl->wlo, &pl->whi};
    bool ok = true;
    for (int i = 0; i < 6; i++) ok = (*ints[i] = malloc((size_t)n * sizeof(int))) && ok;
    pl->rope_cs = rope_table(pl->n_pos, p->info.head_dim, p->rope_base);
    if (!ok || !pl->rope_cs) {
        mu_vit_plan_free(pl);
        return mu_fail(err, MU_E_NOMEM, "vision: out of memory for an image of %dx%d", nx, ny);
    }
    /* row-major windows of side x side patches, row-major inside each */
    const int nwh = (gh + side - 1) / side, nww = (gw + side - 1) / side;
    int m = 0;
    for (int wy = 0; wy < nwh; wy++)
        for (int wx = 0; wx < nww; wx++) {
            const int start = m;
            for (int yy = 0; yy < side; yy++)
                for (int xx = 0; xx < side; xx++) {
                    const int gy = wy * side + yy, gx = wx * side + xx;
                    if (gy < gh && gx < gw) pl->perm[m++] = gy * gw + gx;
                }
            for (int i = start; i < m; i++) pl->wlo[i] = start, pl->whi[i] = m;
        }
    for (int i = 0; i < n; i++) {
        pl->inv[pl->perm[i]] = i;
        pl->pw[i] = pl->perm[i] % gw + 1;
        pl->ph[i] = pl->perm[i] / gw + 1;
    }
    return 0;
}

/* ---- the encoder ------------------------------------------------------- */

int mu_vit_encode(const mu_mmproj *p, const mu_kern *kern, const mu_vit_kern *vk, mu_pool *pool, const float *chw,
                  int nx, int ny, float *out, mu_err *err) {
    const mu_mmproj_info *I = &p->info;
    const int ps = I->patch_size, E = I->n_embd, F = I->n_ff, hd = I->head_dim, side = I->pos_side;
    const int M = p->mm_hidden;
    if (nx <= 0 || ny <= 0 || nx % (ps * 2) || ny % (ps * 2))
        return mu_fail(err, MU_E_ARG, "vision: image of %dx%d pixels is not a whole number of %d-pixel cells", nx, ny, ps * 2);
    const int gw = nx / ps, gh = ny / ps, n = gw * gh, n_out = (gw / 2) * (gh / 2);
    const int K = 3 * ps * ps;
    if (!vk) vk = mu_vit_kern_best();
    enc e = {.p = p, .k = kern, .vk = vk, .pool = pool, .n = n};
    /* scratch: widest activation row is max(F, 4E, M, K) */
    int wide = F > 4 * E ? F : 4 * E;
    wide = wide > M ? wide : M;
    wide = wide > K ? wide : K;
    e.qa_stride = mu_type_row_bytes(MU_T_F32, wide); /* any dot type's row fits in an f32 row */
    float *x = malloc((size_t)n * E * sizeof *x), *h = malloc((size_t)n * E * sizeof *h);
    float *q = malloc((size_t)n * E * sizeof *q), *ao = malloc((size_t)n * E * sizeof *ao);
    float *big = malloc((size_t)n * (F > E ? F : E) * sizeof *big);
    mu_f16 *k16 = malloc((size_t)n * E * sizeof *k16), *v16 = malloc((size_t)n * E * sizeof *v16);
    int *glo = malloc((size_t)n * sizeof *glo), *ghi = malloc((size_t)n * sizeof *ghi);
    e.qa = mu_alloc((size_t)n, e.qa_stride); /* 64-byte rows for the matmul tiles' loads */
    mu_vit_plan pl;
    int rc = mu_vit_plan_new(p, nx, ny, &pl, err);
    if (rc) {
        free(x), free(h), free(q), free(ao), free(big), free(k16), free(v16), free(glo), free(ghi), mu_free(e.qa);
        return rc;
    }
    const int *perm = pl.perm, *inv = pl.inv, *pw = pl.pw, *ph = pl.ph, *wlo = pl.wlo, *whi = pl.whi;
    const float *rope_cs = pl.rope_cs;
    if (!x || !h || !q || !ao || !big || !k16 || !v16 || !glo || !ghi || !e.qa) {
        rc = mu_fail(err, MU_E_NOMEM, "vision: out of memory for an image of %dx%d", nx, ny);
        goto out;
    }

    /* 1. patchify: im2col rows in the kernel's type ([c][ky][kx]), one dot
     *    per (patch, channel) as ggml's conv_2d (mul_mat of im2col by the
     *    kernel), then the bias and the resized position grid */
    {
        const mu_gguf_tensor *cw = p->patch_w;
        const bool f16 = cw->type == MU_T_F16;
        const size_t crb = mu_type_row_bytes(cw->type, K);
        uint8_t *col = malloc((size_t)n * crb);
        if (!col) {
            rc = mu_fail(err, MU_E_NOMEM, "vision: out of memory for an image of %dx%d", nx, ny);
            goto out;
        }
        for (int py = 0; py < gh; py++)
            for (int px = 0; px < gw; px++) {
                uint8_t *row = col + ((size_t)py * gw + px) * crb;
                for (int c = 0; c < 3; c++)
                    for (int ky = 0; ky < ps; ky++)
                        for (int kx = 0; kx < ps; kx++) {
                            const float v = chw[((size_t)c * ny + (size_t)py * ps + ky) * nx + (size_t)px * ps + kx];
                            const int idx = (c * ps + ky) * ps + kx;
                            if (f16)
                                ((mu_f16 *)row)[idx] = mu_f32_to_f16(v);
                            else
                                ((float *)row)[idx] = v;
                        }
            }
        /* src0 = im2col (n rows), src1 = the kernel (E rows): tinyBLAS when
         * K % 16 == 0 and n % 4 == 0, else vec_dot */
        mu_vec_dot_fn dot = kern->vec_dot[cw->type];
        if (kern->vec_dot_batch[cw->type] && E >= 2 && K % 16 == 0 && n % 4 == 0) dot = kern->vec_dot_batch[cw->type];
        const uint8_t *kw = cw->data;
        for (int t = 0; t < n; t++)
            for (int c = 0; c < E; c++) x[(size_t)t * E + c] = dot(K, col + (size_t)t * crb, kw + (size_t)c * crb);
        free(col);
        if (p->patch_b) {
            const float *b = p->patch_b->data;
            for (int t = 0; t < n; t++)
                for (int c = 0; c < E; c++) x[(size_t)t * E + c] += b[c];
        }
        mu_vit_pos_resize(vk, p->pos->data, side, E, gw, gh, NULL, 0, h);
        for (size_t i = 0; i < (size_t)n * E; i++) x[i] += h[i];
    }

    /* 2. into the permuted order (mu_vit_plan) */
    for (int i = 0; i < n; i++) {
        glo[i] = 0;
        ghi[i] = n;
        memcpy(h + (size_t)i * E, x + (size_t)perm[i] * E, (size_t)E * sizeof(float));
    }
    /* h: the residual stream in permuted order */
    layer_norm(&e, n, E, h, h, p->pre_w, p->pre_b);

    /* 3. the blocks */
    const float kq_scale = 1.0f / sqrtf((float)hd);
    for (int il = 0; il < I->n_layer; il++) {
        const mu_vit_layer *L = &p->layers[il];
        const bool global = il == I->n_layer - 1 || (il + 1) % p->sparse_factor == 0;
        layer_norm(&e, n, E, h, x, L->ln1_w, L->ln1_b);
        mm(&e, x, n, L->q_w, L->q_b, q);
        mm(&e, x, n, L->k_w, L->k_b, ao);
        mm(&e, x, n, L->v_w, L->v_b, big);
        rope_job rj = {q, n, E, hd, pw, ph, rope_cs};
        mu_pool_run(pool, job_rope, &rj);
        rj.x = ao;
        mu_pool_run(pool, job_rope, &rj);
        f16_job fj = {kern, ao, k16, (size_t)n * E};
        mu_pool_run(pool, job_f16, &fj);
        fj = (f16_job){kern, big, v16, (size_t)n * E};
        mu_pool_run(pool, job_f16, &fj);
        attn_job aj = {vk, {.n = n, .hd = hd, .ld = E, .scale = kq_scale, .q = q, .k = k16, .v = v16,
                            .win_lo = global ? glo : wlo, .win_hi = global ? ghi : whi, .out = ao}, I->n_head};
        mu_pool_run(pool, job_attn, &aj);
        mm(&e, ao, n, L->o_w, L->o_b, x);
        for (size_t i = 0; i < (size_t)n * E; i++) h[i] = x[i] + h[i]; /* attn + residual */
        layer_norm(&e, n, E, h, x, L->ln2_w, L->ln2_b);
        mm(&e, x, n, L->up_w, L->up_b, big);
        gelu(&e, big, (size_t)n * F);
        mm(&e, big, n, L->down_w, L->down_b, x);
        for (size_t i = 0; i < (size_t)n * E; i++) h[i] = h[i] + x[i]; /* residual + ffn */
    }
    layer_norm(&e, n, E, h, h, p->post_w, p->post_b);

    /* 4. back to grid order, 2x2 pixel shuffle: out row o = [c][s] over the
     *    four patches s = (ry, rx) of merged cell o */
    {
        const int ow = gw / 2;
        for (int o = 0; o < n_out; o++) {
            const int oy = o / ow, ox = o % ow;
            float *r = big + (size_t)o * 4 * E;
            for (int s = 0; s < 4; s++) {
                const int g = (oy * 2 + s / 2) * gw + ox * 2 + s % 2;
                const float *src = h + (size_t)inv[g] * E;
                for (int c = 0; c < E; c++) r[c * 4 + s] = src[c];
            }
        }
    }
    /* 5. the adapter: mm.0, GELU, mm.1, GELU, mm.2 (no biases) */
    {
        float *a1 = q, *a2 = x; /* n_out * M floats fit in n * E when M <= 4E; else use big's tail */
        float *tmp = NULL;
        if ((size_t)n_out * M > (size_t)n * E) {
            tmp = malloc((size_t)n_out * M * 2 * sizeof *tmp);
            if (!tmp) {
                rc = mu_fail(err, MU_E_NOMEM, "vision: out of memory for an image of %dx%d", nx, ny);
                goto out;
            }
            a1 = tmp;
            a2 = tmp + (size_t)n_out * M;
        }
        mm(&e, big, n_out, p->mm[0], NULL, a1);
        gelu(&e, a1, (size_t)n_out * M);
        mm(&e, a1, n_out, p->mm[1], NULL, a2);
        gelu(&e, a2, (size_t)n_out * M);
        mm(&e, a2, n_out, p->mm[2], NULL, out);
        free(tmp);
    }
out:
    free(x), free(h), free(q), free(ao), free(big), free(k16), free(v16), free(glo), free(ghi), mu_free(e.qa);
    mu_vit_plan_free(&pl);
    return rc;
}
