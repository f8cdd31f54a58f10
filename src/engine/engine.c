/* engine.c: binds a model to a kernel table and a thread pool and owns the
 * per-chunk scratch buffers, so the decode hot path never allocates. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "../base/mem.h"

static int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static void scratch_free(mu_scratch *s) {
    mu_free(s->h); mu_free(s->a); mu_free(s->q); mu_free(s->k); mu_free(s->v); mu_free(s->g);
    mu_free(s->o); mu_free(s->f1); mu_free(s->f2); mu_free(s->qa); mu_free(s->qp); mu_free(s->scores); mu_free(s->attn_q);
    mu_free(s->attn_o); free(s->attn_items); mu_free(s->v16);
    free(s->tok_sess); free(s->tok_pos); free(s->tok_out); free(s->out_tok); free(s->tok_embd); free(s->tok_item); free(s->tok_in); free(s->tok_idx); free(s->tok_cell); mu_free(s->lg);
    memset(s, 0, sizeof *s);
}

static int scratch_init(mu_engine *e, mu_err *err) {
    const mu_model_info *I = &e->m->info;
    mu_scratch *s = &e->s;
    size_t T = MU_UBATCH;
    int wide = max3(I->n_embd, e->n_q, I->n_ff);
    s->h = mu_alloc(T * (size_t)I->n_embd, sizeof(float));
    s->a = mu_alloc(T * (size_t)(I->n_embd > e->n_q ? I->n_embd : e->n_q), sizeof(float));
    s->q = mu_alloc(T * (size_t)e->n_q, sizeof(float));
    s->k = mu_alloc(T * (size_t)e->n_kv, sizeof(float));
    s->v = mu_alloc(T * (size_t)e->n_kv, sizeof(float));
    s->g = mu_alloc(T * (size_t)e->n_q, sizeof(float));
    s->o = mu_alloc(T * (size_t)I->n_embd, sizeof(float));
    s->f1 = mu_alloc(T * (size_t)I->n_ff, sizeof(float));
    s->f2 = mu_alloc(T * (size_t)I->n_ff, sizeof(float));
    /* widest dot-type row: f32 (4 bytes per element) bounds every type */
    s->qa_stride = ((size_t)wide * 4 + 63) & ~(size_t)63;
    s->qa = mu_alloc(T * 2, s->qa_stride); /* two slots: two dot types at once */
    bool prep = false;
    for (int t = 0; t < MU_T_COUNT; t++) prep |= e->kern->prep[t] != NULL;
    if (prep && !(s->qp = mu_alloc(T + 16, (size_t)wide)))
        return mu_fail(err, MU_E_NOMEM, "engine: out of memory for scratch buffers");
    const size_t nth = (size_t)mu_pool_size(e->pool);
    s->attn_q = mu_alloc(nth * MU_ATTN_ROWS * (size_t)I->head_dim, sizeof(float));
    s->attn_o = mu_alloc(nth * MU_ATTN_ROWS * (size_t)I->head_dim, sizeof(float));
    s->v16 = mu_alloc(T * (size_t)e->n_kv, sizeof(mu_f16));
    s->attn_items_cap = MU_UBATCH * I->n_head;
    s->attn_items = calloc((size_t)s->attn_items_cap, sizeof *s->attn_items);
    s->tok_sess = calloc(T, sizeof *s->tok_sess);
    s->tok_pos = calloc(T, sizeof *s->tok_pos);
    s->tok_out = calloc(T, sizeof *s->tok_out);
    s->out_tok = calloc(T, sizeof *s->out_tok);
    s->tok_embd = calloc(T, sizeof *s->tok_embd);
    s->tok_item = calloc(T, sizeof *s->tok_item);
    s->tok_in = calloc(T, sizeof *s->tok_in);
    s->tok_idx = calloc(T, sizeof *s->tok_idx);
    s->tok_cell = calloc(2 * (size_t)T, sizeof *s->tok_cell);
    s->lg = mu_alloc((size_t)MU_LOGIT_ROWS * (size_t)I->n_vocab, sizeof(float));
    if (!s->h || !s->a || !s->q || !s->k || !s->v || !s->g || !s->o || !s->f1 || !s->f2 || !s->qa || !s->attn_q || !s->attn_o || !s->attn_items || !s->v16 ||
        !s->tok_sess || !s->tok_pos || !s->tok_out || !s->out_tok || !s->tok_embd || !s->tok_item || !s->tok_in || !s->tok_idx || !s->tok_cell || !s->lg)
        return mu_fail(err, MU_E_NOMEM, "engine: out of memory for scratch buffers");
    return 0;
}

int mu_engine_reserve_ctx(mu_engine *e, int n_ctx, mu_err *err) {
    if (e->gpu || n_ctx <= e->s.max_ctx) return 0;
    const mu_model_info *I = &e->m->info;
    /* at least one decode item's rows (a KV head's query heads) over every
     * cell; up to MU_ATTN_ROWS rows (several tokens of a prefill chunk, so
     * that one pass over a KV head's keys serves them all) while that
     * stays within MU_SCORES_MAX floats a thread */
    const size_t cells = (size_t)((n_ctx + 255) / 256 * 256);
    size_t cap = (size_t)(I->n_head / I->n_head_kv) * cells;
    size_t want = (size_t)MU_ATTN_ROWS * cells;
    if (want > MU_SCORES_MAX) want = MU_SCORES_MAX / cells * cells;
    if (cap < want) cap = want;
    if (cap < (size_t)MU_ATTN_ROWS * 4096) cap = (size_t)MU_ATTN_ROWS * 4096;
    float *sc = mu_alloc((size_t)mu_pool_size(e->pool) * cap, sizeof(float));
    if (!sc) return mu_fail(err, MU_E_NOMEM, "engine: out of memory for attention scores (%d positions)", n_ctx);
    mu_free(e->s.scores);
    e->s.scores = sc;
    e->s.scores_cap = cap;
    e->s.max_ctx = n_ctx;
    return 0;
}

static int pick_backend(const mu_engine_opts *o, int *device, mu_err *err);

int mu_engine_new(mu_model *m, const mu_engine_opts *opts, mu_engine **out, mu_err *err) {
    mu_engine_opts o = opts ? *opts : (mu_engine_opts){0};
    const mu_kern *k = mu_kern_select(o.kern);
    if (!k) {
        const char *want = o.kern && *o.kern ? o.kern : getenv("MUSER_KERN");
        return mu_fail(err, MU_E_ARG, "engine: kernel table '%s' is unknown or cannot run on this CPU", want ? want : "?");
    }
    mu_engine *e = calloc(1, sizeof *e);
    if (!e) return mu_fail(err, MU_E_NOMEM, "engine: out of memory");
    e->m = m;
    e->kern = k;
    e->n_q = m->info.n_head * m->info.head_dim;
    e->n_kv = m->info.n_head_kv * m->info.head_dim;
    e->ubatch = MU_UBATCH;
    e->attn_split_min = 4096;
    e->mm_hold = -1;
    const char *sm = getenv("MUSER_ATTN_SPLIT_MIN"); /* tests: the split decode attention at any depth */
    if (sm && *sm >= '0' && *sm <= '9') e->attn_split_min = atoi(sm);
    const char *lb = getenv("MUSER_LOGITS_BEST");
    e->best_off = lb && strcmp(lb, "0") == 0;
    const char *ub = getenv("MUSER_UBATCH");
    if (ub && atoi(ub) >= 1 && atoi(ub) < MU_UBATCH) e->ubatch = atoi(ub);
    int device = -1, rc = pick_backend(&o, &device, err);
    if (rc) {
        free(e);
        return rc;
    }
    /* a GPU engine keeps one CPU thread: the device does the work */
    e->cpu_threads = o.n_threads;
    rc = mu_pool_new(device >= 0 ? 1 : o.n_threads, &e->pool, err);
    if (rc) {
        free(e);
        return rc;
    }
    e->work = aligned_alloc(64, (size_t)mu_pool_size(e->pool) * sizeof *e->work);
    if (!e->work) {
        mu_pool_free(e->pool);
        free(e);
        return mu_fail(err, MU_E_NOMEM, "engine: out of memory");
    }
    memset(e->work, 0, (size_t)mu_pool_size(e->pool) * sizeof *e->work);
    if (device >= 0)
        rc = mu_engine_gpu_open(e, device, o.progress, o.progress_user, err);
    else if (!(rc = scratch_init(e, err)))
        rc = mu_engine_reserve_ctx(e, 256, err);
    if (rc) {
        mu_engine_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* The device the options ask for (-1: the CPU). */
static int pick_backend(const mu_engine_opts *o, int *device, mu_err *err) {
    const char *b = o->backend && *o->backend ? o->backend : "cpu";
    *device = -1;
    if (!strcmp(b, "cpu")) return 0;
    if (strcmp(b, "cuda") && strcmp(b, "auto"))
        return mu_fail(err, MU_E_ARG, "engine: unknown backend '%.32s' (auto, cpu, cuda)", b);
    const int n = mu_gpu_count();
    if (n == 0) {
        if (!strcmp(b, "auto")) return 0;
        return mu_fail(err, MU_E_UNSUPPORTED, "engine: backend cuda: %s", mu_gpu_why_none());
    }
    if (o->gpu_device < 0 || o->gpu_device >= n)
        return mu_fail(err, MU_E_ARG, "engine: GPU %d does not exist (%d found)", o->gpu_device, n);
    *device = o->gpu_device;
    return 0;
}

const char *mu_engine_backend(const mu_engine *e) { return e->gpu ? "cuda" : "cpu"; }

int mu_gpu_devices(mu_gpu_device *out, int cap) {
    const int n = mu_gpu_count();
    int k = 0;
    for (int i = 0; i < n && k < cap; i++) {
        mu_gpu_info gi;
        if (mu_gpu_probe(i, &gi, NULL)) continue;
        mu_gpu_device *d = &out[k++];
        memcpy(d->name, gi.name, sizeof d->name);
        d->major = gi.major;
        d->minor = gi.minor;
        d->total_bytes = gi.total_bytes;
        d->free_bytes = gi.free_bytes;
    }
    return k;
}

const char *mu_gpu_devices_why(void) { return mu_gpu_why_none(); }

void mu_engine_free(mu_engine *e) {
    if (!e) return;
    mu_gpu_model_free(e->gpu);
    mu_free(e->rope);
    scratch_free(&e->s);
    mu_pool_free(e->pool);
    free(e->work);
    free(e);
}

const mu_model *mu_engine_model(const mu_engine *e) { return e->m; }
const char *mu_engine_kern_name(const mu_engine *e) { return e->kern->name; }

const char *const mu_phase_names[MU_PH_COUNT] = {"norms", "qkv", "rope", "attn", "wo", "ffn_up", "ffn_down", "logits"};

void mu_engine_profile(mu_engine *e, bool on) {
    e->prof_on = on;
    memset(&e->prof, 0, sizeof e->prof);
}

void mu_engine_profile_get(const mu_engine *e, mu_profile *out) { *out = e->prof; }
int mu_engine_n_threads(const mu_engine *e) { return mu_pool_size(e->pool); }
