/* forward.c: the Muse Glimmer forward pass on the CPU (an engine with a
 * GPU hands the batch to forward_gpu.c after the checks below).
 * Owns: one batched pass over tokens of one or more sessions (continuous
 * batching), split into chunks of at most MU_UBATCH tokens; the matmul
 * dispatch onto the kernel table; q/k norms, RoPE and the cache writes.
 * Does not: attend (attn.c), sample, tokenize, or allocate (all buffers are
 * in the engine's scratch and the sessions).
 * Numerics mirror llama.cpp's CPU graph: activations are converted to each
 * weight's dot type before a matmul; q is rounded to F16 for K.Q and the
 * softmax weights to F16 for the V product (its non-flash-attention path);
 * RMS norms sum squares in double. See HACKING.md, "critical details".
 * Bit-exact parity (x86 llama.cpp, zen4 CPU variant) also needs its kernel
 * paths: which one a matmul takes depends on its row count (kern.h,
 * vec_dot_batch), the last layer's FFN runs on the output rows only, SiLU
 * uses ggml's expf, and RoPE the FMAs of its build. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/mem.h"
#include "engine.h"

/* ---- small vector helpers --------------------------------------------- */

/* engine.h: llama.cpp sums each row's squares in double, in order: the
 * table's sumsq, which runs rows side by side (a row's sum is a chain of
 * adds that no SIMD shortens). */
#define RMS_ROWS 64
void mu_rms_rows(const mu_kern *k, float *y, const float *x, const float *w, int n, int n_rows, size_t stride,
                 float eps) {
    double sums[RMS_ROWS];
    for (int r0 = 0; r0 < n_rows; r0 += RMS_ROWS) {
        const int nr = n_rows - r0 < RMS_ROWS ? n_rows - r0 : RMS_ROWS;
        k->sumsq(n, x + (size_t)r0 * stride, stride, nr, sums);
        for (int r = 0; r < nr; r++) {
            const float *xr = x + (size_t)(r0 + r) * stride;
            float *yr = y + (size_t)(r0 + r) * stride;
            const float mean = (float)(sums[r] / n);
            const float scale = 1.0f / sqrtf(mean + eps);
            if (w)
                for (int i = 0; i < n; i++) yr[i] = (xr[i] * scale) * w[i];
            else
                for (int i = 0; i < n; i++) yr[i] = xr[i] * scale;
        }
    }
}

/* GPT-J style RoPE on adjacent pairs. The angles of one position, shared
 * by all its heads: theta advances by repeated multiplication in float, as
 * llama.cpp's rope cache does. */
#define ROPE_MAX_HD 512
void mu_rope_angles(float *cs, float *sn, int hd, int pos, float base) {
    const float theta_scale = powf(base, -2.0f / (float)hd);
    float theta = (float)pos;
    for (int i = 0; i < hd / 2; i++) {
        cs[i] = cosf(theta);
        sn[i] = sinf(theta);
        theta *= theta_scale;
    }
}

static void rope(float *x, int hd, const float *cs, const float *sn) {
    for (int i = 0; i < hd; i += 2) {
        const float c = cs[i / 2], s = sn[i / 2];
        const float x0 = x[i], x1 = x[i + 1];
        /* llama.cpp's build contracts these into FMAs (GCC, -ffp-contract=fast) */
        x[i] = fmaf(x0, c, -(x1 * s));
        x[i + 1] = fmaf(x0, s, x1 * c);
    }
}

/* ---- parallel jobs ----------------------------------------------------- */

/* Jobs split by token: a single token (a decode step) runs on the calling
 * thread, without the pool's handshake, as the other threads would idle.
 * Otherwise the threads claim tokens from a shared counter, a few at a
 * time (tok_claim): where some cores run slower (another machine's work on
 * them, unequal vCPUs) the others take their tokens, as the matmuls'
 * threads take row blocks (job_matmul). A token's results are the same
 * whichever thread computes them. A claim is about a quarter of a thread's
 * even share, at most TOK_CLAIM_MAX tokens. */
#define TOK_CLAIM_MAX 32
static void run_per_token(mu_engine *e, int T, mu_pool_fn fn, void *arg) {
    const int nth = T == 1 ? 1 : mu_pool_size(e->pool);
    const int unit = T / (4 * nth);
    atomic_store_explicit(&e->tok_next, 0, memory_order_relaxed);
    e->tok_unit = nth == 1 ? T : unit < 1 ? 1 : unit > TOK_CLAIM_MAX ? TOK_CLAIM_MAX : unit;
    if (nth == 1)
        fn(arg, 0, 1);
    else
        mu_pool_run(e->pool, fn, arg);
}

/* The next tokens [*lo, *hi) of thread ith's job over T tokens; false:
 * none left. The test hook mm_hold makes its thread claim only once the
 * others have claimed every token (a bounded wait: a split that never
 * gives its tokens away fails test_thread_split, it does not hang). */
static bool tok_claim(mu_engine *e, int ith, int nth, int T, int *lo, int *hi) {
    if (e->mm_hold == ith && nth > 1)
        for (long n = 0; n < (1L << 22) && atomic_load(&e->tok_next) < T; n++) sched_yield();
    if (atomic_load_explicit(&e->tok_next, memory_order_relaxed) >= T) return false;
    const int t = atomic_fetch_add_explicit(&e->tok_next, e->tok_unit, memory_order_relaxed);
    if (t >= T) return false;
    *lo = t;
    *hi = t + e->tok_unit < T ? t + e->tok_unit : T;
    e->work[ith].toks += *hi - *lo;
    return true;
}

#define MAX_MM MU_MM_JOB_MAX

typedef struct {
    const mu_gguf_tensor *w;
    float *y;        /* [T][rows] */
    int slot;        /* which quantized-activation slot feeds it */
    int rot;         /* rotation of its row split (mu_split_rot) */
} mm_item;

typedef struct {
    mu_engine *e;
    int T;
    int ll_rows;     /* activation rows of llama.cpp's matmul: picks its kernel path */
    int ll_row0;     /* index of row 0 in that matmul */
    int t_solo;      /* rows [t_solo, T) round as one-row matmuls (mu_batch_item.solo) */
    /* quantization of an f32 input into up to two dot types */
    const float *x;
    int x_cols;
    uint32_t qtype[2];
    int n_qtype;
    /* matmuls sharing that input */
    mm_item mm[MAX_MM];
    int n_mm;
    bool logits;     /* the output matrix: apply logit scale and softcap to the rows */
    /* the table's prepared activations (kern.h mu_prep_fn) of one slot, made
     * by the quantization pass, once for all threads, into e->s.qp */
    mu_prep_fn prep;
    int prep_slot;
} mm_job;

static uint8_t *qa_slot(mu_engine *e, int slot) { return e->s.qa + (size_t)slot * MU_UBATCH * e->s.qa_stride; }

static void job_quant(void *arg, int ith, int nth) {
    mm_job *j = arg;
    const mu_kern *k = j->e->kern;
    int lo, hi;
    while (tok_claim(j->e, ith, nth, j->T, &lo, &hi))
        for (int s = 0; s < j->n_qtype; s++)
            for (int t = lo; t < hi; t++) {
                uint8_t *q = qa_slot(j->e, s) + (size_t)t * j->e->s.qa_stride;
                k->quant[j->qtype[s]](j->x + (size_t)t * j->x_cols, q, j->x_cols);
                if (j->prep && s == j->prep_slot) j->prep(j->x_cols, q, j->e->s.qp + (size_t)t * j->x_cols);
            }
}

/* Rows are split in blocks of MM_BLOCK. Each matrix of a job is split
 * evenly over the threads (so each thread's share of every matrix costs the
 * same, whatever its type), and the slices with one block more go round the
 * threads from matrix to matrix and job to job (mu_split_rot): no thread
 * takes the extra block of every matrix. A thread takes its own shares
 * MM_OWN blocks at a time, in order (in a batch, the last ones in halves
 * of what is left, down to one), then blocks of the others' shares that nobody has
 * taken yet, one at a time (mu_thread_work.claim): where cores
 * run at one speed that is the even split, and where some run slower
 * (another machine's work on their cores, a thread descheduled) the others
 * finish their shares. Every output row is the same whoever computes it
 * (mm_rows's arithmetic does not depend on the slice). All matrices
 * sharing an input run in one pool call: one barrier per job, not per
 * matrix. */
#define MM_BLOCK 16
#define MM_OWN 4

/* Rows [lo, hi) of matrix m of job j, every activation row. */
static void mm_rows(mm_job *j, int m, int lo, int hi) {
    const mu_kern *k = j->e->kern;
    const mu_gguf_tensor *w = j->mm[m].w;
    int rows = (int)w->ne[1], cols = (int)w->ne[0];
    size_t rb = w->bytes / (size_t)rows;
    const uint8_t *a = qa_slot(j->e, j->mm[m].slot);
    size_t as = j->e->s.qa_stride;
    float *y = j->mm[m].y;
    /* llama.cpp's kernel path, hence rounding, depends on its row count
     * (see kern.h, vec_dot_batch) */
    mu_vec_dot_fn dot = k->vec_dot[w->type], dotb = k->vec_dot_batch[w->type];
    int t_b = 0; /* rows [0, t_b) use dotb */
    if (dotb && j->ll_rows >= 2) {
        if (w->type == MU_T_Q4_K)
            t_b = (j->ll_rows & ~3) - j->ll_row0;
        else if (cols % 16 == 0 && rows % 4 == 0)
            t_b = j->T;
        t_b = t_b < 0 ? 0 : t_b > j->t_solo ? j->t_solo : t_b;
    }
    /* the tiled gemm (a matmul of >= 2 rows) must round as dotb, or as dot
     * where dotb is NULL; it takes the rows up to t_g, vec_dot the rest */
    int t_g = 0;
    if (j->ll_rows >= 2 && k->gemm[w->type]) {
        t_g = dotb ? t_b : j->t_solo;
        /* a Q4_K gemm call rounds its rows past the last multiple of 4 as
         * vec_dot (it covers a whole matmul, gemm_q4_K_*); when t_b is cut
         * short by solo rows, those rows take dotb in the loop below */
        if (w->type == MU_T_Q4_K) t_g &= ~3;
        if (t_g > 0 && j->prep && j->mm[m].slot == j->prep_slot && k->prep[w->type] == j->prep && k->gemm_p[w->type])
            k->gemm_p[w->type](cols, w->data, rb, lo, hi, a, as, j->e->s.qp, t_g, y, rows);
        else if (t_g > 0)
            k->gemm[w->type](cols, w->data, rb, lo, hi, a, as, t_g, y, rows);
    }
    const uint8_t *wd = w->data;
    mu_vec_dot2_fn dot2 = k->vec_dot2[w->type];
    /* rows [t_n, T) round as vec_dot; two or more of them (a solo
     * block) go through vec_dotn, each weight block decoded once */
    const int t_n = t_g > t_b ? t_g : t_b;
    mu_vec_dotn_fn dotn = j->T - t_n >= 2 ? k->vec_dotn[w->type] : NULL;
    /* dotn's activation rows in as few groups as possible, of near-equal
     * counts; one group takes the call's weight rows at once (what
     * a dotn prepares per call is shared by all of them), several go
     * MM_BLOCK weight rows at a time, so the weights come from memory
     * once and from the cache for the other groups */
    const int n_grp = dotn ? (j->T - t_n + MU_DOTN_MAX - 1) / MU_DOTN_MAX : 0;
    for (int r0 = lo; n_grp && r0 < hi; r0 += n_grp > 1 ? MM_BLOCK : hi - lo) {
        const int nr = n_grp > 1 && hi - r0 > MM_BLOCK ? MM_BLOCK : hi - r0;
        for (int t = t_n, g = n_grp; g > 0; g--) {
            const int na = (j->T - t + g - 1) / g;
            dotn(cols, wd + (size_t)r0 * rb, rb, nr, a + (size_t)t * as, as, na, y + (size_t)t * rows + r0, rows);
            t += na;
        }
    }
    for (int r0 = lo; r0 < hi; r0 += MM_BLOCK) {
        int r1 = r0 + MM_BLOCK < hi ? r0 + MM_BLOCK : hi;
        for (int t = t_g; t < (dotn ? t_n : j->T); t++) {
            mu_vec_dot_fn d = t < t_b ? dotb : dot;
            int r = r0;
            if (d == dot && dot2) /* the same rounding, two rows per pass */
                for (; r + 2 <= r1; r += 2) {
                    float o[2];
                    dot2(cols, wd + (size_t)r * rb, wd + (size_t)(r + 1) * rb, a + (size_t)t * as, o);
                    y[(size_t)t * rows + r] = o[0];
                    y[(size_t)t * rows + r + 1] = o[1];
                }
            for (; r < r1; r++) y[(size_t)t * rows + r] = d(cols, wd + (size_t)r * rb, a + (size_t)t * as);
        }
    }
    if (j->logits) {
        /* logit scale, then cap * tanh(l / cap) (0 = no softcap), each
         * thread on its own rows */
        const mu_model_info *I = &j->e->m->info;
        const float cap = I->softcap, inv_cap = cap > 0 ? 1.0f / cap : 0;
        for (int t = 0; t < j->T; t++)
            for (int r = lo; r < hi; r++) {
                float l = y[(size_t)t * rows + r] * I->logit_scale;
                if (cap > 0) l = tanhf(l * inv_cap) * cap;
                y[(size_t)t * rows + r] = l;
            }
    }
}

/* Thread t's share of matrix m: rows [*lo, *hi); returns its blocks. */
static int mm_share(const mm_job *j, int m, int t, int nth, int *lo, int *hi) {
    mu_split_rot((int)j->mm[m].w->ne[1], t, nth, MM_BLOCK, j->mm[m].rot, lo, hi);
    return (*hi - *lo + MM_BLOCK - 1) / MM_BLOCK;
}

/* Thread ith takes blocks of thread owner's share of matrix m, `unit` at a
 * time (0: all at once), until none is left; counts its multiply-adds into
 * *macs (and its stolen blocks). */
static void mm_take(mm_job *j, int m, int owner, int ith, int nth, int unit, uint64_t *macs) {
    int lo, hi;
    const int nb = mm_share(j, m, owner, nth, &lo, &hi);
    atomic_int *c = &j->e->work[owner].claim[m];
    const bool guided = unit > 1 && j->T > 1; /* an owner among several threads, in a batch */
    if (unit <= 0) unit = nb > 0 ? nb : 1;
    for (;;) {
        const int seen = atomic_load_explicit(c, memory_order_relaxed);
        if (seen >= nb) return;
        /* at most half of what is left, so that the share's last blocks
         * go one at a time: a slow thread's last claim is one block, not
         * MM_OWN, when the others are done */
        const int u = guided && 2 * unit > nb - seen ? ((nb - seen) / 2 > 1 ? (nb - seen) / 2 : 1) : unit;
        const int b = atomic_fetch_add_explicit(c, u, memory_order_relaxed);
        if (b >= nb) return;
        const int r0 = lo + b * MM_BLOCK, r1 = lo + (b + u) * MM_BLOCK < hi ? lo + (b + u) * MM_BLOCK : hi;
        mm_rows(j, m, r0, r1);
        if (owner != ith) j->e->work[ith].stolen += (r1 - r0 + MM_BLOCK - 1) / MM_BLOCK;
        *macs += (uint64_t)(r1 - r0) * (uint64_t)j->mm[m].w->ne[0] * (uint64_t)j->T;
    }
}

/* Whether every block of the job is claimed (the test hook mm_hold). */
static bool mm_all_claimed(mm_job *j, int nth) {
    for (int m = 0; m < j->n_mm; m++)
        for (int t = 0; t < nth; t++) {
            int lo, hi;
            if (atomic_load(&j->e->work[t].claim[m]) < mm_share(j, m, t, nth, &lo, &hi)) return false;
        }
    return true;
}

static void job_matmul(void *arg, int ith, int nth) {
    mm_job *j = arg;
    uint64_t macs = 0;
    j->e->work[ith].stolen = 0;
    if (j->e->mm_hold == ith && nth > 1) /* bounded: a split that never takes this share fails the test, not hangs it */
        for (long n = 0; n < (1L << 22) && !mm_all_claimed(j, nth); n++) sched_yield();
    /* alone, a thread takes each share in one call: a call's setup costs
     * something on small matrices (a few % of a 4-slot batch of the bundled
     * model) */
    for (int m = 0; m < j->n_mm; m++) mm_take(j, m, ith, ith, nth, nth > 1 ? MM_OWN : 0, &macs);
    for (int d = 1; d < nth; d++)
        for (int m = 0; m < j->n_mm; m++) mm_take(j, m, (ith + d) % nth, ith, nth, 1, &macs);
    j->e->work[ith].macs += macs;
}

/* Y_m = X W_m^T for every m; X is [T][cols] f32. One quantization per dot type.
 * ll_rows: the row count of the same matmul in llama.cpp's graph (T, except
 * for the logits, computed in pieces starting at its row ll_row0), which
 * decides its rounding; rows [t_solo, T) round as a matmul of one row. */
static void matmul_ex(mu_engine *e, const float *x, int T, int ll_rows, int ll_row0, int t_solo, int n,
                      const mu_gguf_tensor *const *ws, float *const *ys, bool logits) {
    mm_job j = {.e = e, .T = T, .ll_rows = ll_rows, .ll_row0 = ll_row0, .x = x, .x_cols = (int)ws[0]->ne[0],
                .logits = logits};
    j.t_solo = t_solo < 0 ? 0 : t_solo > T ? T : t_solo;
    MU_ASSERT(n <= MAX_MM);
    for (int m = 0; m < n; m++) {
        MU_ASSERT(ws[m]->ne[0] == j.x_cols);
        uint32_t dt = mu_kern_dot_type(ws[m]->type);
        int slot = -1;
        for (int s = 0; s < j.n_qtype; s++)
            if (j.qtype[s] == dt) slot = s;
        if (slot < 0) {
            MU_ASSERT(j.n_qtype < 2);
            slot = j.n_qtype++;
            j.qtype[slot] = dt;
        }
        const int nth = mu_pool_size(e->pool);
        j.mm[j.n_mm++] = (mm_item){ws[m], ys[m], slot, e->mm_rot};
        e->mm_rot = (e->mm_rot + mu_split_rem((int)ws[m]->ne[1], nth, MM_BLOCK)) % nth;
    }
    /* activations a table's gemm wants prepared: once here, not per thread */
    if (e->s.qp && ll_rows >= 2 && T >= e->kern->prep_min_t)
        for (int m = 0; m < j.n_mm && !j.prep; m++) {
            const uint32_t t = j.mm[m].w->type;
            if (e->kern->prep[t] && e->kern->gemm_p[t]) {
                j.prep = e->kern->prep[t];
                j.prep_slot = j.mm[m].slot;
            }
        }
    run_per_token(e, T, job_quant, &j);
    for (int t = 0; t < mu_pool_size(e->pool); t++)
        for (int m = 0; m < j.n_mm; m++) atomic_store_explicit(&e->work[t].claim[m], 0, memory_order_relaxed);
    mu_pool_run(e->pool, job_matmul, &j);
}

static void matmul(mu_engine *e, const float *x, int T, int t_solo, int n, const mu_gguf_tensor *const *ws,
                   float *const *ys) {
    matmul_ex(e, x, T, T, 0, t_solo, n, ws, ys, false);
}

/* ---- attention inputs (the attention itself is attn.c) --------------- */

typedef struct {
    mu_engine *e;
    int il, T;
} layer_job;

/* q/k norms, RoPE, and the cache write, per token. */
static void job_qk(void *arg, int ith, int nth) {
    layer_job *j = arg;
    mu_engine *e = j->e;
    const mu_model_info *I = &e->m->info;
    const mu_layer_w *L = &e->m->layers[j->il];
    const bool swa = I->swa_layers[j->il];
    const int hd = I->head_dim;
    const float *qn = L->q_norm->data, *kn = L->k_norm->data;
    int lo, hi;
    while (tok_claim(e, ith, nth, j->T, &lo, &hi)) {
        for (int t = lo; t < hi; t++) {
            const int pos = e->s.tok_pos[t];
            float *q = e->s.q + (size_t)t * e->n_q;
            float *k = e->s.k + (size_t)t * e->n_kv;
            float cs[ROPE_MAX_HD / 2], sn[ROPE_MAX_HD / 2];
            if (swa) mu_rope_angles(cs, sn, hd, pos, I->rope_base_swa);
            mu_rms_rows(e->kern, q, q, qn, hd, I->n_head, (size_t)hd, I->eps);
            mu_rms_rows(e->kern, k, k, kn, hd, I->n_head_kv, (size_t)hd, I->eps);
            for (int h = 0; swa && h < I->n_head; h++) rope(q + h * hd, hd, cs, sn);
            for (int h = 0; swa && h < I->n_head_kv; h++) rope(k + h * hd, hd, cs, sn);
            /* K into its cell's row (session.c); V as F16 into the
             * staging rows job_vt moves into the cells' columns */
            mu_session *s = e->s.tok_sess[t];
            const size_t cell = (size_t)mu_tok_cell(e, t, j->il); /* pos % rows unless shifted */
            e->kern->to_f16(e->n_kv, k, s->kc[j->il] + cell * e->n_kv);
            e->kern->to_f16(e->n_kv, e->s.v + (size_t)t * e->n_kv, e->s.v16 + (size_t)t * e->n_kv);
        }
    }
}

/* The V rows job_qk staged, into their cells' columns of the transposed
 * cache (element i of token t to row i, column cell(t)), split by rows i:
 * split by tokens, as job_qk is, neighbouring cells of a row (one cache
 * line holds 32) were written by several threads, and the lines went from
 * core to core. Copies only; a row's bits are job_qk's. */
#define VT_POOL_MIN 32
static void job_vt(void *arg, int ith, int nth) {
    layer_job *j = arg;
    mu_engine *e = j->e;
    int lo, hi;
    mu_split(e->n_kv, ith, nth, 1, &lo, &hi);
    for (int t = 0; t < j->T; t++) {
        mu_session *s = e->s.tok_sess[t];
        const size_t nc = (size_t)s->rows[j->il];
        mu_f16 *vt = s->vt[j->il] + (size_t)mu_tok_cell(e, t, j->il);
        const mu_f16 *v16 = e->s.v16 + (size_t)t * e->n_kv;
        for (int i = lo; i < hi; i++) vt[(size_t)i * nc] = v16[i];
    }
}

/* ---- per-token elementwise steps -------------------------------------- */

typedef struct {
    mu_engine *e;
    int T, step, il;
} ew_job;

enum { EW_ATTN_IN, EW_ATTN_OUT, EW_FFN_ACT, EW_FFN_OUT };

/* Rows in blocks of EW_ROWS through every step of a case, so a block's
 * rows are still in the cache for the next step (the AVX-512 sumsq's
 * widest group). */
#define EW_ROWS 32
static void job_ew(void *arg, int ith, int nth) {
    ew_job *j = arg;
    mu_engine *e = j->e;
    const mu_kern *k = e->kern;
    const mu_model_info *I = &e->m->info;
    const mu_layer_w *L = j->il >= 0 ? &e->m->layers[j->il] : NULL;
    const int E = I->n_embd, F = I->n_ff;
    int lo, hi;
    while (tok_claim(e, ith, nth, j->T, &lo, &hi)) {
        for (int t = lo; t < hi; t += EW_ROWS) {
            const int n = hi - t < EW_ROWS ? hi - t : EW_ROWS;
            float *h = e->s.h + (size_t)t * E, *a = e->s.a + (size_t)t * E, *o = e->s.o + (size_t)t * E;
            switch (j->step) {
            case EW_ATTN_IN: /* a = rms(h) * attn_norm */
                mu_rms_rows(k, a, h, L->attn_norm->data, E, n, (size_t)E, I->eps);
                break;
            case EW_ATTN_OUT: /* h += rms(o, 1e-8) * post_attention_norm; a = rms(h) * ffn_norm */
                mu_rms_rows(k, o, o, L->post_attn_norm->data, E, n, (size_t)E, MU_POST_NORM_EPS);
                for (size_t i = 0; i < (size_t)n * E; i++) h[i] += o[i];
                mu_rms_rows(k, a, h, L->ffn_norm->data, E, n, (size_t)E, I->eps);
                break;
            case EW_FFN_ACT: /* f1 = silu(f1) * f2 */
                for (int r = t; r < t + n; r++) k->swiglu(F, e->s.f1 + (size_t)r * F, e->s.f2 + (size_t)r * F);
                break;
            case EW_FFN_OUT: /* h += rms(o, 1e-8) * post_ffw_norm */
                mu_rms_rows(k, o, o, L->post_ffw_norm->data, E, n, (size_t)E, MU_POST_NORM_EPS);
                for (size_t i = 0; i < (size_t)n * E; i++) h[i] += o[i];
                break;
            }
        }
    }
}

static void ew(mu_engine *e, int T, int step, int il) {
    ew_job j = {e, T, step, il};
    run_per_token(e, T, job_ew, &j);
}

/* ---- phase timers (mu_engine_profile) ---------------------------------- */

typedef struct {
    double *acc; /* the profile's decode or prefill row; NULL when off */
    double t;
} ph_clock;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void ph_start(ph_clock *c, mu_engine *e, int T) {
    c->acc = !e->prof_on ? NULL : T == 1 ? e->prof.decode_s : e->prof.prefill_s;
    c->t = c->acc ? mono_s() : 0;
}

/* the time since the last mark goes to phase ph */
static void ph_mark(ph_clock *c, int ph) {
    if (!c->acc) return;
    const double now = mono_s();
    c->acc[ph] += now - c->t;
    c->t = now;
}

/* ---- one chunk --------------------------------------------------------- */

static void embed(mu_engine *e, const int32_t *tokens, int T) {
    const mu_model_info *I = &e->m->info;
    const mu_gguf_tensor *te = e->m->tok_embd;
    size_t rb = te->bytes / (size_t)te->ne[1];
    for (int t = 0; t < T; t++) {
        float *h = e->s.h + (size_t)t * I->n_embd;
        if (e->s.tok_in[t])
            memcpy(h, e->s.tok_in[t], (size_t)I->n_embd * sizeof(float)); /* an image row (llama.cpp's batch.embd) */
        else
            e->kern->dequant[te->type]((const uint8_t *)te->data + (size_t)tokens[t] * rb, h, I->n_embd);
    }
    /* the unweighted norm after the lookup */
    mu_rms_rows(e->kern, e->s.h, e->s.h, NULL, I->n_embd, T, (size_t)I->n_embd, I->eps);
}

/* The layer inputs a drafter reads (mu_batch_item.feat): copies of the
 * residual stream entering layer il, for the tokens that asked. */
static void capture_feat(mu_engine *e, int T, int il) {
    const int E = e->m->info.n_embd;
    for (int t = 0; t < T; t++) {
        const mu_batch_item *it = e->s.tok_item[t];
        if (!it || !it->feat) continue;
        for (int k = 0; k < it->n_feat_layers; k++)
            if (it->feat_layers[k] == il)
                memcpy(it->feat + ((size_t)e->s.tok_idx[t] * it->n_feat_layers + k) * E, e->s.h + (size_t)t * E,
                       (size_t)E * sizeof(float));
    }
}

/* Layer streaming (mu_batch_item.on_layer): layer il's rows of the chunk
 * are in the cache; each streaming item hears of its run of positions. */
static void layer_final(mu_engine *e, int T, int il) {
    for (int t = 0; t < T;) {
        const mu_batch_item *it = e->s.tok_item[t];
        int u = t + 1;
        while (u < T && e->s.tok_item[u] == it) u++;
        if (it && it->on_layer) it->on_layer(it->on_layer_user, il, e->s.tok_pos[t], u - t);
        t = u;
    }
}

static void run_chunk(mu_engine *e, const int32_t *tokens, int T, int t_solo) {
    const mu_model_info *I = &e->m->info;
    mu_scratch *s = &e->s;
    ph_clock pc;
    ph_start(&pc, e, T);
    s->t_solo = t_solo;
    for (int t0 = 0; t0 < T;) { /* each session's run of tokens into its cells (shift.c) */
        int t1 = t0 + 1;
        while (t1 < T && s->tok_sess[t1] == s->tok_sess[t0]) t1++;
        mu_shift_place(e, s->tok_sess[t0], t0, t1 - t0);
        t0 = t1;
    }
    embed(e, tokens, T);
    for (int il = 0; il < I->n_layer; il++) {
        const mu_layer_w *L = &e->m->layers[il];
        if (s->n_feat_tok) capture_feat(e, T, il);
        ew(e, T, EW_ATTN_IN, il);
        ph_mark(&pc, MU_PH_NORMS);
        const mu_gguf_tensor *w4[4] = {L->wq, L->wk, L->wv, L->wgate};
        float *y4[4] = {s->q, s->k, s->v, s->g};
        matmul(e, s->a, T, s->t_solo, 4, w4, y4);
        ph_mark(&pc, MU_PH_QKV);
        layer_job lj = {e, il, T};
        run_per_token(e, T, job_qk, &lj);
        if (T < VT_POOL_MIN) /* a few rows: less than a pool handshake */
            job_vt(&lj, 0, 1);
        else
            mu_pool_run(e->pool, job_vt, &lj);
        if (s->n_layer_tok) layer_final(e, T, il);
        ph_mark(&pc, MU_PH_ROPE);
        mu_attn_layer(e, il, T);
        ph_mark(&pc, MU_PH_ATTN);
        matmul(e, s->a, T, s->t_solo, 1, &L->wo, &s->o);
        ph_mark(&pc, MU_PH_WO);
        ew(e, T, EW_ATTN_OUT, il);
        int Tf = T, Tf_solo = s->t_solo;
        if (il == I->n_layer - 1) {
            /* llama.cpp runs the last FFN on the output rows only (inp_out_ids),
             * which also decides its matmuls' kernel path: compact them */
            Tf = Tf_solo = 0;
            for (int t = 0; t < T; t++) {
                if (s->tok_out[t] < 0) continue;
                if (Tf != t) {
                    memcpy(s->h + (size_t)Tf * I->n_embd, s->h + (size_t)t * I->n_embd, (size_t)I->n_embd * sizeof(float));
                    memcpy(s->a + (size_t)Tf * I->n_embd, s->a + (size_t)t * I->n_embd, (size_t)I->n_embd * sizeof(float));
                }
                if (t < s->t_solo) Tf_solo = Tf + 1;
                s->out_tok[Tf++] = t;
            }
            if (Tf == 0) break;
        }
        ph_mark(&pc, MU_PH_NORMS);
        const mu_gguf_tensor *w2[2] = {L->ffn_gate, L->ffn_up};
        float *y2[2] = {s->f1, s->f2};
        matmul(e, s->a, Tf, Tf_solo, 2, w2, y2);
        ph_mark(&pc, MU_PH_FFN_UP);
        ew(e, Tf, EW_FFN_ACT, il);
        ph_mark(&pc, MU_PH_NORMS);
        matmul(e, s->f1, Tf, Tf_solo, 1, &L->ffn_down, &s->o);
        ph_mark(&pc, MU_PH_FFN_DOWN);
        ew(e, Tf, EW_FFN_OUT, il);
        ph_mark(&pc, MU_PH_NORMS);
    }
    /* final norm and logits for the tokens that want them (their rows of s.h
     * were compacted before the last FFN; s.out_tok maps them back) */
    int n_out = 0, out_solo = 0; /* output rows [out_solo, n_out) are solo */
    for (int t = 0; t < T; t++) {
        n_out += s->tok_out[t] >= 0;
        if (t < s->t_solo) out_solo = n_out;
    }
    mu_rms_rows(e->kern, s->a, s->h, e->m->output_norm->data, I->n_embd, n_out, (size_t)I->n_embd, I->eps);
    /* embedding rows leave here (mu_batch_item.embd); the others are
     * compacted for the output matrix */
    int n_lg = 0;
    for (int r = 0; r < n_out; r++) {
        const int t = s->out_tok[r];
        float *row = s->a + (size_t)r * I->n_embd;
        if (s->tok_embd[t]) {
            memcpy(s->tok_embd[t], row, (size_t)I->n_embd * sizeof(float));
            continue;
        }
        if (n_lg != r) {
            memmove(s->a + (size_t)n_lg * I->n_embd, row, (size_t)I->n_embd * sizeof(float));
            s->out_tok[n_lg] = t;
        }
        n_lg++;
    }
    n_out = n_lg;
    const size_t V = (size_t)I->n_vocab;
    for (int r0 = 0; r0 < n_out; r0 += MU_LOGIT_ROWS) {
        int n = n_out - r0 < MU_LOGIT_ROWS ? n_out - r0 : MU_LOGIT_ROWS;
        matmul_ex(e, s->a + (size_t)r0 * I->n_embd, n, n_out, r0, out_solo - r0, 1, &e->m->output, &s->lg, true);
        for (int r = 0; r < n; r++) {
            int t = s->out_tok[r0 + r];
            mu_session *ss = s->tok_sess[t];
            memcpy(ss->logits + (size_t)s->tok_out[t] * V, s->lg + (size_t)r * V, V * sizeof(float));
        }
    }
    ph_mark(&pc, MU_PH_LOGITS);
    if (pc.acc) ++*(T == 1 ? &e->prof.decode_passes : &e->prof.prefill_passes);
}

/* ---- public entry ------------------------------------------------------ */

/* Rows of logits a session keeps page-locked on a GPU engine (decode and
 * verification blocks; a prompt's every row stays pageable): the device
 * writes them without a staging copy (1.3 MB a row at 200K tokens). */
#define PINNED_LOGITS_MAX 64

static int ensure_logits(mu_session *s, int n, mu_err *err) {
    if (n <= s->n_logits_cap) return 0;
    const size_t row = (size_t)s->e->m->info.n_vocab * sizeof(float);
    int32_t *best = malloc((size_t)n * sizeof *best);
    float *l = best && s->e->gpu && n <= PINNED_LOGITS_MAX ? mu_gpu_host_alloc((size_t)n * row) : NULL;
    const bool pinned = l != NULL;
    if (!l && best) l = mu_alloc((size_t)n, row);
    if (!l) {
        free(best);
        return mu_fail(err, MU_E_NOMEM, "forward: out of memory for %d rows of logits", n);
    }
    mu_session_logits_free(s);
    s->logits = l;
    s->logits_best = best;
    s->logits_pinned = pinned;
    s->n_logits_cap = n;
    return 0;
}

int mu_forward(mu_engine *e, const mu_batch_item *items, int n_items, mu_err *err) {
    const mu_model_info *I = &e->m->info;
    /* validate everything first: a bad item must not half-update others */
    for (int i = 0; i < n_items; i++) {
        const mu_batch_item *it = &items[i];
        if (!it->s || it->s->e != e) return mu_fail(err, MU_E_ARG, "forward: item %d has no session of this engine", i);
        if (it->n_tokens <= 0) return mu_fail(err, MU_E_ARG, "forward: item %d has no tokens", i);
        if (it->n_tokens > it->s->n_ctx - it->s->n_past)
            return mu_fail(err, MU_E_ARG, "forward: context full: %d + %d tokens exceed %d", it->s->n_past,
                           it->n_tokens, it->s->n_ctx);
        for (int j = 0; j < n_items; j++)
            if (j != i && items[j].s == it->s) return mu_fail(err, MU_E_ARG, "forward: session appears twice in a batch");
        if (it->on_layer && it->s->cells)
            return mu_fail(err, MU_E_STATE, "forward: layer streaming reads rows by position: the session was shifted");
        if (it->feat) {
            if (!it->feat_layers || it->n_feat_layers <= 0)
                return mu_fail(err, MU_E_ARG, "forward: item %d captures no layers", i);
            for (int k = 0; k < it->n_feat_layers; k++)
                if (it->feat_layers[k] < 0 || it->feat_layers[k] >= I->n_layer)
                    return mu_fail(err, MU_E_ARG, "forward: capture layer out of range: %d (layers %d)",
                                   it->feat_layers[k], I->n_layer);
        }
        if (!it->in_embd && !it->tokens) return mu_fail(err, MU_E_ARG, "forward: item %d has neither tokens nor rows", i);
        for (int t = 0; t < it->n_tokens && !it->in_embd; t++)
            if (it->tokens[t] < 0 || it->tokens[t] >= I->n_vocab)
                return mu_fail(err, MU_E_ARG, "forward: token id out of range: %d (vocabulary %d)", it->tokens[t],
                               I->n_vocab);
    }
    for (int i = 0; i < n_items; i++) {
        int rc = items[i].embd ? 0 : ensure_logits(items[i].s, items[i].all_logits ? items[i].n_tokens : 1, err);
        if (rc) return rc;
        items[i].s->n_logits = 0;
        /* -1 (not known) unless the device's pass writes a row's best */
        if (!items[i].embd) memset(items[i].s->logits_best, 0xff, (size_t)items[i].s->n_logits_cap * sizeof(int32_t));
    }
    if (e->gpu) return mu_forward_gpu(e, items, n_items, err);
    for (int i = 0; i < n_items; i++) mu_shift_apply(items[i].s); /* the K rotation a shift owes */
    /* walk the items in chunks of at most MU_UBATCH tokens */
    int32_t chunk_tok[MU_UBATCH];
    e->s.n_feat_tok = e->s.n_layer_tok = 0;
    int T = 0, t_solo = e->ubatch; /* from the first solo item on, every token is solo */
    bool seen_solo = false;
    for (int i = 0; i < n_items; i++) {
        const mu_batch_item *it = &items[i];
        for (int t = 0; t < it->n_tokens; t++) {
            if (it->solo && !seen_solo) {
                seen_solo = true;
                t_solo = T;
            }
            mu_session *s = it->s;
            bool out = it->embd || it->all_logits || t == it->n_tokens - 1;
            e->s.tok_sess[T] = s;
            e->s.tok_pos[T] = s->n_past;
            e->s.tok_embd[T] = it->embd ? it->embd + (size_t)t * I->n_embd : NULL;
            e->s.tok_item[T] = it->feat || it->on_layer ? it : NULL;
            e->s.tok_in[T] = it->in_embd ? it->in_embd + (size_t)t * I->n_embd : NULL;
            e->s.tok_idx[T] = t;
            e->s.n_feat_tok += it->feat != NULL;
            e->s.n_layer_tok += it->on_layer != NULL;
            e->s.tok_out[T] = !out ? -1 : it->embd ? 0 : s->n_logits++;
            chunk_tok[T++] = it->in_embd ? 0 : it->tokens[t];
            s->n_past++; /* positions are assigned as tokens enter the chunk */
            if (T == e->ubatch) {
                run_chunk(e, chunk_tok, T, t_solo);
                T = 0;
                e->s.n_feat_tok = e->s.n_layer_tok = 0;
                t_solo = seen_solo ? 0 : e->ubatch;
            }
        }
    }
    if (T) run_chunk(e, chunk_tok, T, t_solo);
    return 0;
}
