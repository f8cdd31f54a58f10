/* attn.c: attention of one layer over the sessions' F16 caches.
 * Owns: splitting the chunk's (token, head) pairs into work items, the
 * sliding-window and causal masks in cell space, and the gated output.
 * Does not: write the cache (forward.c's job_qk) or compute products itself
 * (the kernel table's mm_f16 and softmax_f16 do).
 *
 * Rounding follows llama.cpp's non-flash-attention CPU graph exactly: K.Q
 * with q rounded to F16, by tinyBLAS when the sequence has >= 2 tokens in
 * the ubatch, else by ggml_vec_dot_f16; the softmax with ggml's expf, each
 * 16 cells' sum reduced in float and the chunks added in double; weights
 * rounded to F16; the V product over the transposed cache with lanes given
 * by the cell index. Those lanes are why the cache is laid out in llama.cpp's
 * cells (session.c; after a context shift, shift.c's maps, where every
 * row sees cells [0, last used] masked by position) and why a work item
 * covers whole aligned cell chunks:
 * cells outside a token's window are masked (weight 0), which adds exactly
 * nothing, as in llama.cpp, which runs every product over all its cells.
 *
 * A work item is a block of tokens of one sequence times a block of the
 * query heads sharing one KV head, so K and V are read once for all of them;
 * items are taken from a shared counter, since their costs differ, the
 * costliest (a sequence's latest tokens) first. */
#include <math.h>
#include <string.h>

#include "../base/mem.h"
#include "engine.h"

typedef struct {
    mu_engine *e;
    int il;
    const mu_attn_item *items;
    int n_items;
    int next; /* shared counter */
} attn_job;

static int align_up(int x, int a) { return (x + a - 1) / a * a; }

/* Cells [*c_lo, *c_hi) covering positions [u0, u1] of a layer with nc
 * cells, in whole chunks of al cells; the whole cache when they wrap. */
static void cell_range(int u0, int u1, int nc, bool swa, int al, int *c_lo, int *c_hi) {
    const int a = u0 % nc, span = u1 - u0 + 1;
    if (!swa || a + span <= nc) {
        *c_lo = a / al * al;
        *c_hi = align_up(a + span, al);
        if (*c_hi > nc) *c_hi = nc;
    } else {
        *c_lo = 0;
        *c_hi = nc;
    }
}

/* x[i] *= scale for i < n; returns the largest of max0 and the scaled
 * values. The maximum is the same in any order (a NaN never wins, as in
 * the one-at-a-time loop; which zero wins does not change x - max), so 16
 * running maxima break the chain of dependent compares and let the compiler
 * use vectors. */
static float scale_max(float *x, int n, float scale, float max0) {
    float m[16];
    for (int l = 0; l < 16; l++) m[l] = max0;
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) {
            const float v = x[i + l] * scale;
            x[i + l] = v;
            m[l] = v > m[l] ? v : m[l];
        }
    for (; i < n; i++) {
        x[i] *= scale;
        m[0] = x[i] > m[0] ? x[i] : m[0];
    }
    float mx = max0;
    for (int l = 0; l < 16; l++) mx = m[l] > mx ? m[l] : mx;
    return mx;
}

static void run_item(mu_engine *e, int il, const mu_attn_item *it, int ith) {
    const mu_kern *k = e->kern;
    const mu_model_info *I = &e->m->info;
    mu_scratch *S = &e->s;
    const bool swa = I->swa_layers[il];
    const int hd = I->head_dim, R = it->nt * it->nh;
    const mu_session *s = S->tok_sess[it->t0];
    const int nc = s->rows[il];
    float *qb = S->attn_q + (size_t)ith * MU_ATTN_ROWS * hd;
    float *ob = S->attn_o + (size_t)ith * MU_ATTN_ROWS * hd;
    float *sc = S->scores + (size_t)ith * S->scores_cap;

    /* q rounded to F16, one row per (token, head) */
    for (int r = 0; r < R; r++) {
        const int t = it->t0 + r / it->nh, h = it->h0 + r % it->nh;
        k->round_f16(hd, S->q + (size_t)t * e->n_q + (size_t)h * hd, qb + (size_t)r * hd);
    }
    const int pos_last = S->tok_pos[it->t0 + it->nt - 1];
    const int u0 = swa && S->tok_pos[it->t0] - I->n_swa + 1 > 0 ? S->tok_pos[it->t0] - I->n_swa + 1 : 0;
    const int al = it->batch ? 16 : 64; /* lanes x accumulators of the V product's order */
    int c_lo, c_hi;
    /* a shifted session (shift.c): cells hold positions in no fixed order,
     * so every cell up to the last used one takes part, masked by position */
    const mu_cells *cm = s->cells ? &s->cells[swa ? 1 : 0] : NULL;
    if (cm) {
        c_lo = 0;
        c_hi = align_up(mu_shift_used_end(s, il), al);
        if (c_hi > nc) c_hi = nc;
    } else {
        cell_range(u0, pos_last, nc, swa, al, &c_lo, &c_hi);
    }
    const int m = c_hi - c_lo;
    MU_ASSERT((size_t)R * (size_t)m <= S->scores_cap);

    /* K.Q for every row over the cells; when the window wraps, only over
     * the chunks either side of the gap (the mask below fills the rest) */
    const mu_f16 *kc = s->kc[il] + (size_t)it->g * hd;
    const int kq_tb = it->batch && hd % 16 == 0;
    int seg[2][2] = {{c_lo, c_hi}, {c_hi, c_hi}};
    if (!cm && c_lo == 0 && c_hi == nc && swa) {
        const int lo = u0 % nc / al * al, hi = align_up(pos_last % nc + 1, al);
        if (hi < lo) {
            seg[0][1] = hi;
            seg[1][0] = lo;
        }
    }
    for (int v = 0; v < 2; v++)
        if (seg[v][1] > seg[v][0])
            k->mm_f16(hd, kc + (size_t)seg[v][0] * e->n_kv, (size_t)e->n_kv, seg[v][1] - seg[v][0], qb, (size_t)hd,
                      R, sc + seg[v][0] - c_lo, (size_t)m, kq_tb);

    /* scale, mask, softmax. A row sees positions [p0, pos]: the cells from
     * p0 % nc on, wrapping at most once (a window is shorter than nc). */
    const float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; cm && r < R; r++) { /* llama.cpp's mask: empty, later, or outside the window */
        const int pos = S->tok_pos[it->t0 + r / it->nh];
        float *row = sc + (size_t)r * m, mx = -INFINITY;
        for (int i = 0; i < m; i++) {
            const int cp = cm->pos[i];
            if (cp < 0 || cp > pos || (swa && pos - cp >= I->n_swa)) {
                row[i] = -INFINITY;
            } else {
                row[i] *= scale;
                mx = row[i] > mx ? row[i] : mx;
            }
        }
        k->softmax_f16(m, row, mx);
    }
    for (int r = 0; !cm && r < R; r++) {
        const int pos = S->tok_pos[it->t0 + r / it->nh];
        const int p0 = swa && pos - I->n_swa + 1 > 0 ? pos - I->n_swa + 1 : 0;
        const int f = p0 % nc, len = pos - p0 + 1;
        /* in cell order: the wrapped part [0, f + len - nc) first, if any */
        const int iv[2][2] = {{0, f + len > nc ? f + len - nc : 0}, {f, f + len < nc ? f + len : nc}};
        float *row = sc + (size_t)r * m, mx = -INFINITY;
        int done = 0; /* cells [0, done) of the row are final */
        for (int v = 0; v < 2; v++) {
            const int lo = iv[v][0] - c_lo, hi = iv[v][1] - c_lo;
            if (hi <= lo) continue;
            MU_ASSERT(lo >= done && hi <= m);
            for (int i = done; i < lo; i++) row[i] = -INFINITY;
            mx = scale_max(row + lo, hi - lo, scale, mx);
            done = hi;
        }
        for (int i = done; i < m; i++) row[i] = -INFINITY;
        k->softmax_f16(m, row, mx);
    }

    /* V.softmax over the transposed cache, then the sigmoid gate */
    const mu_f16 *vt = s->vt[il] + (size_t)it->g * hd * nc + c_lo;
    k->mm_f16(m, vt, (size_t)nc, hd, sc, (size_t)m, R, ob, (size_t)hd, it->batch);
    for (int r = 0; r < R; r++) {
        const int t = it->t0 + r / it->nh, h = it->h0 + r % it->nh;
        float *out = S->a + (size_t)t * e->n_q + (size_t)h * hd;
        const float *gate = S->g + (size_t)t * e->n_q + (size_t)h * hd;
        for (int d = 0; d < hd; d++) out[d] = ob[(size_t)r * hd + d] * (1.0f / (1.0f + expf(-gate[d])));
    }
}

static void job_attn(void *arg, int ith, int nth) {
    attn_job *j = arg;
    for (;;) {
        const int i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n_items) break;
        /* the last items of a sequence see the most cells: they go first, so
         * that the items left when threads run out of work are the cheap ones */
        run_item(j->e, j->il, &j->items[j->n_items - 1 - i], ith);
    }
}

/* ---- decode steps at depth: a full layer over every thread ---------------
 * With more threads than (token, KV head) pairs, the items above would give
 * each thread one query head, and every thread would read its KV head's
 * whole cache. Here a full layer's decode tokens run in three passes whose
 * units touch disjoint parts of the cache: K.Q over chunks of cells (each
 * score is its own dot), the softmax row by row (its sum stays in order),
 * and V.softmax over chunks of head dimensions (each output its own dot over
 * all cells, in the kernel's order). The products are the same calls on
 * the same rows as run_item's, so the results are bit-identical. */
typedef struct {
    mu_engine *e;
    int il, T, pass, n_units, next;
    int per;         /* units per (token, KV head) in the K.Q and V passes */
    const int *m;    /* [T] cells each token's row spans */
    const size_t *off; /* [T] its scores' offset: n_head rows of m[t] */
} split_job;

static void job_split(void *arg, int ith, int nth) {
    split_job *j = arg;
    mu_engine *e = j->e;
    const mu_model_info *I = &e->m->info;
    const mu_kern *k = e->kern;
    mu_scratch *S = &e->s;
    const int hd = I->head_dim, nkv = I->n_head_kv, group = I->n_head / nkv;
    float *qb = S->attn_q + (size_t)ith * MU_ATTN_ROWS * hd, *ob = S->attn_o + (size_t)ith * MU_ATTN_ROWS * hd;
    for (;;) {
        const int u = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (u >= j->n_units) break;
        if (j->pass == 1) { /* one softmax row (token t, head h) */
            const int t = u / I->n_head, h = u % I->n_head, pos = S->tok_pos[t], m = j->m[t];
            float *row = S->scores + j->off[t] + (size_t)h * m, mx = -INFINITY;
            const float scale = 1.0f / sqrtf((float)hd);
            mx = scale_max(row, pos + 1, scale, mx);
            for (int i = pos + 1; i < m; i++) row[i] = -INFINITY;
            k->softmax_f16(m, row, mx);
            continue;
        }
        const int t = u / (nkv * j->per), g = u / j->per % nkv, c = u % j->per, m = j->m[t];
        const mu_session *s = S->tok_sess[t];
        float *sc = S->scores + j->off[t] + (size_t)g * group * m;
        if (j->pass == 0) { /* K.Q: cells [c0, c1) of KV head g for its query heads */
            const int ch = (m / j->per + 63) / 64 * 64, c0 = c * ch, c1 = c0 + ch < m ? c0 + ch : m;
            if (c0 >= c1) continue;
            for (int r = 0; r < group; r++)
                k->round_f16(hd, S->q + (size_t)t * e->n_q + (size_t)(g * group + r) * hd, qb + (size_t)r * hd);
            k->mm_f16(hd, s->kc[j->il] + (size_t)c0 * e->n_kv + (size_t)g * hd, (size_t)e->n_kv, c1 - c0, qb, (size_t)hd,
                      group, sc + c0, (size_t)m, 0);
        } else { /* V.softmax: dimensions [d0, d1) of KV head g, then the gate */
            const int nc = s->rows[j->il], dc = (hd / j->per + 3) / 4 * 4, d0 = c * dc, d1 = d0 + dc < hd ? d0 + dc : hd;
            if (d0 >= d1) continue;
            k->mm_f16(m, s->vt[j->il] + ((size_t)g * hd + d0) * nc, (size_t)nc, d1 - d0, sc, (size_t)m, group, ob,
                      (size_t)hd, 0);
            for (int r = 0; r < group; r++) {
                const size_t h = (size_t)t * e->n_q + (size_t)(g * group + r) * hd;
                for (int d = d0; d < d1; d++)
                    S->a[h + d] = ob[(size_t)r * hd + d - d0] * (1.0f / (1.0f + expf(-S->g[h + d])));
            }
        }
    }
}

/* The split above, when it applies: a full layer, every token of the chunk
 * a one-token sequence (decode steps), fewer (token, KV head) pairs than
 * threads, a cache of at least e->attn_split_min cells, and the scores of
 * all rows within the threads' scratch. Returns false otherwise. */
static bool attn_split(mu_engine *e, int il, int T) {
    const mu_model_info *I = &e->m->info;
    mu_scratch *S = &e->s;
    const int nth = mu_pool_size(e->pool);
    if (I->swa_layers[il] || T * I->n_head_kv >= nth || T > MU_LOGIT_ROWS) return false;
    int m[MU_LOGIT_ROWS], mmax = 0;
    size_t off[MU_LOGIT_ROWS], tot = 0;
    for (int t = 0; t < T; t++) {
        if ((t > 0 && S->tok_sess[t - 1] == S->tok_sess[t]) || (t + 1 < T && S->tok_sess[t + 1] == S->tok_sess[t]) ||
            S->tok_sess[t]->cells)
            return false; /* several tokens of a sequence, or a shifted session: run_item's way */
        const int nc = S->tok_sess[t]->rows[il], c = (S->tok_pos[t] + 1 + 63) / 64 * 64;
        m[t] = c < nc ? c : nc;
        mmax = m[t] > mmax ? m[t] : mmax;
        off[t] = tot;
        tot += (size_t)I->n_head * (size_t)m[t];
    }
    if (mmax < e->attn_split_min || tot > (size_t)nth * S->scores_cap) return false;
    const int per = (nth + T * I->n_head_kv - 1) / (T * I->n_head_kv);
    split_job j = {.e = e, .il = il, .T = T, .per = per, .m = m, .off = off};
    for (j.pass = 0; j.pass < 3; j.pass++) {
        j.n_units = j.pass == 1 ? T * I->n_head : T * I->n_head_kv * per;
        j.next = 0;
        mu_pool_run(e->pool, job_split, &j);
    }
    return true;
}

void mu_attn_layer(mu_engine *e, int il, int T) {
    const mu_model_info *I = &e->m->info;
    mu_scratch *S = &e->s;
    const bool swa = I->swa_layers[il];
    const int group = I->n_head / I->n_head_kv, nth = mu_pool_size(e->pool);
    if (attn_split(e, il, T)) return;
    int n = 0;
    for (int t0 = 0; t0 < T;) {
        const mu_session *s = S->tok_sess[t0];
        int t1 = t0 + 1;
        while (t1 < T && S->tok_sess[t1] == s) t1++;
        const int seg = t1 - t0;
        /* rows per item: bounded by the scratch and by the cells they span */
        const int m_max = swa || s->cells ? s->rows[il] : align_up(S->tok_pos[t1 - 1] + 1, 64);
        int rows = (int)(S->scores_cap / (size_t)m_max);
        if (rows > MU_ATTN_ROWS) rows = MU_ATTN_ROWS;
        MU_ASSERT(rows >= 1);
        int nh = group < rows ? group : rows;
        /* a single token: split the heads so that every thread has work */
        if (seg == 1)
            while (nh > 1 && I->n_head_kv * ((group + nh - 1) / nh) < nth) nh = (nh + 1) / 2;
        const int nt = seg == 1 ? 1 : (rows / nh > 0 ? rows / nh : 1);
        for (int g = 0; g < I->n_head_kv; g++)
            for (int tb = t0; tb < t1; tb += nt)
                for (int h = 0; h < group; h += nh) {
                    MU_ASSERT(n < S->attn_items_cap);
                    mu_attn_item *it = &S->attn_items[n++];
                    it->t0 = tb;
                    it->nt = t1 - tb < nt ? t1 - tb : nt;
                    it->g = g;
                    it->h0 = g * group + h;
                    it->nh = group - h < nh ? group - h : nh;
                    it->batch = seg >= 2 && t0 < S->t_solo; /* solo tokens round as decode steps */
                }
        t0 = t1;
    }
    attn_job j = {e, il, S->attn_items, n, 0};
    mu_pool_run(e->pool, job_attn, &j);
}
