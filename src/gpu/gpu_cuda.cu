/* gpu_cuda.cu: the CUDA plugin (muser-cuda.so): devices, weights uploaded
 * once, sessions' KV cells, and the forward pass of one chunk, in the
 * order of forward.c's run_chunk.
 * Owns: device memory (weights, scratch for 512 tokens, logits), one
 * compute stream per model, the pinned staging buffer for a chunk's inputs
 * and outputs, layer streaming (an event per layer, KV rows read on a
 * second stream while the pass runs), and the elementwise kernels (norms,
 * RoPE, residuals, SwiGLU) and each logits row's best (k_best).
 * Matmuls are gpu_cuda_mm.cu, attention gpu_cuda_attn.cu. Exported: the
 * one symbol mu_gpu_plugin_v1 (plugin.h). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.cuh"
#include "plugin.h"
#include "q8k.cuh"

#define UB 512 /* most tokens per chunk (MU_UBATCH) */

/* ---- model ------------------------------------------------------------- */

typedef struct {
    dtensor wq, wk, wv, wgate, wo, ffn_gate, ffn_up, ffn_down;
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
} dlayer;

/* What the forward pass uploads per chunk, in one copy. */
typedef struct {
    int32_t tok[UB];
    int pos[UB];
    int sess[UB];
    uint8_t batch[UB];
    int32_t out_rows[UB]; /* chunk index of each output token */
    int32_t in_row[UB];   /* -1, or the token's row in m->rows_d (mu_gpu_chunk.in_rows) */
} chunk_in;

#define GRAPH_MAX_T 8 /* batches of at most this many tokens replay graphs (graph_t) and take the decode kernels */
#define MAX_GRAPHS 32
typedef struct {
    int T, n_out, max_span, swa_span, t_solo, out_solo, attn_mode;
    uint64_t cap_mask; /* the layers the pass captures (cap_prepare), 0: none */
    cudaGraphExec_t exec;
} pass_graph;

struct mu_gpu_model {
    int dev;
    cudaStream_t st;
    mu_gpu_model_desc d;   /* geometry (pointers into host memory cleared) */
    bool *swa;
    dlayer *L;
    dtensor tok_embd, output;
    const float *output_norm;
    void **allocs;         /* every weight buffer, for free */
    int n_allocs;
    int n_q, n_kv;
    /* scratch for UB tokens */
    float *h, *a, *q, *k, *v, *g, *o, *f1, *f2, *lg;
    float *h2, *a2;        /* the same sizes as h and a: the last layer's gathered rows */
    uint8_t *qa;           /* two slots of quantized activations */
    size_t qa_stride;
    int lg_rows;           /* logits rows allocated */
    float *scores, *chunk_sums;
    float *lanes;   /* decode attention's lane sums */
    int attn_mode;  /* CU_ATTN_* of the chunk being run */
    size_t scores_cap;     /* floats */
    chunk_in *in_h, *in_d; /* pinned host / device */
    float *rows_h, *rows_d; /* input rows (images): pinned staging and device, [UB][n_embd], made on first use */
    cu_kv_layer *kv_h, *kv_d; /* [UB][n_layer] session layer table */
    float *rope_d;
    float *lg_h;           /* pinned logits staging */
    int32_t *best_d, *best_h; /* [UB] each logits row's best (k_best): device, pinned */
    size_t lg_h_cap;       /* floats */
    pass_graph graphs[MAX_GRAPHS]; /* captured passes of small batches */
    int n_graphs;
    cudaEvent_t ev[1024];  /* phase marks of a profiled pass */
    int ev_ph[1024], n_ev, n_ev_made;
    /* layer streaming (mu_gpu_chunk.on_layer) */
    cudaStream_t cp;       /* KV reads while a pass runs */
    cudaEvent_t *lev;      /* [n_layer]: the layer's KV rows are written */
    cudaEvent_t done;      /* the streaming pass's last launch */
    uint16_t *kv_stage;    /* pinned [2][UB][n_kv]: K and V rows read on cp */
    bool open;             /* inside a streaming pass's on_layer calls */
    cudaError_t rec_err;   /* the first failed layer event record of the pass */
    mu_gpu_stream_stats *stats; /* the open pass's counts, or NULL */
    /* hidden-state capture (mu_gpu_chunk.feat): cap_prepare */
    int cap_n, cap_cap;    /* rows of the pass, rows allocated */
    int *cap_off;          /* [2][n_layer + 1]: each layer's first row, then fill cursors */
    int *cap_off_d;        /* [n_layer + 1] the first half on the device (k_cap_rows) */
    uint64_t cap_mask;     /* graph-replayable captures: their layers (cap_graphs), else 0 */
    int32_t *cap_idx_h, *cap_idx_d; /* [cap_cap] the row's chunk token: pinned, device */
    float *cap_h, *cap_d;  /* [cap_cap][n_embd]: pinned, device */
    float **cap_dst;       /* [cap_cap] the row's host destination */
};

static void graphs_clear(mu_gpu_model *m);
static void cap_free(mu_gpu_model *m);

/* Phase marks (mu_gpu_chunk.prof): an event after each phase's launches. */
enum { PH_NORMS, PH_QKV, PH_ROPE, PH_ATTN, PH_WO, PH_FFN_UP, PH_FFN_DOWN, PH_LOGITS };
static void mark(mu_gpu_model *m, bool on, int ph) {
    if (!on || m->n_ev >= 1024) return;
    if (m->n_ev >= m->n_ev_made) cudaEventCreate(&m->ev[m->n_ev_made++]);
    m->ev_ph[m->n_ev] = ph;
    cudaEventRecord(m->ev[m->n_ev++], m->st);
}

struct mu_gpu_sess {
    mu_gpu_model *m;
    int *rows;
    uint16_t **k, **v; /* [n_layer] device [rows][n_kv] */
};

static int p_count(const char **why) {
    /* without a driver the runtime's own error ("driver version is
     * insufficient") would mislead: say what is missing */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv) {
        *why = "no NVIDIA driver (libcuda.so.1 not found)";
        return 0;
    }
    dlclose(drv);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        static char buf[256];
        snprintf(buf, sizeof buf, "CUDA is not usable here: %s", cudaGetErrorString(e));
        *why = buf;
        return 0;
    }
    if (n == 0) *why = "no CUDA device";
    return n;
}

static int p_probe(int dev, mu_gpu_info *info, mu_err *err) {
    cudaDeviceProp p;
    CU_CK(cudaGetDeviceProperties(&p, dev), "device properties");
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%.127s", p.name);
    info->major = p.major;
    info->minor = p.minor;
    CU_CK(cudaSetDevice(dev), "set device");
    size_t fr = 0, tot = 0;
    CU_CK(cudaMemGetInfo(&fr, &tot), "memory info");
    info->free_bytes = fr;
    info->total_bytes = tot;
    return 0;
}

static int dev_alloc(mu_gpu_model *m, size_t n, void **out, const char *what, mu_err *err) {
    int rc = cu_malloc(n, out, "cuda", what, err);
    if (!rc) m->allocs[m->n_allocs++] = *out;
    return rc;
}

/* Uploads one weight in the device layout (cu_dev_blocks). */
static int upload(mu_gpu_model *m, const mu_gpu_tensor *t, dtensor *out, uint8_t *stage, size_t stage_cap,
                  uint64_t *done, uint64_t total, mu_gpu_progress_fn fn, void *user, mu_err *err) {
    const int be = dev_block_elems(t->type), bb = dev_block_bytes(t->type);
    if (!bb || t->ne0 % be) return cu_fail(err, MU_E_UNSUPPORTED, "cuda: weight type %u is not supported on the GPU", t->type);
    out->type = t->type;
    out->ne0 = (int)t->ne0;
    out->ne1 = (int)t->ne1;
    out->row_bytes = (size_t)(t->ne0 / be) * bb;
    const size_t nblk = (size_t)(t->ne0 / be) * (size_t)t->ne1, dev_bytes = out->row_bytes * (size_t)t->ne1;
    /* 32 bytes more: the decode ring copies whole 16-byte words around a row's blocks */
    int rc = dev_alloc(m, dev_bytes + 32, &out->d, "weights", err);
    if (rc) return rc;
    const int sb = src_block_bytes(t->type);
    const size_t per = stage_cap / (size_t)bb;
    for (size_t b0 = 0; b0 < nblk; b0 += per) {
        const size_t nb = nblk - b0 < per ? nblk - b0 : per;
        cu_dev_blocks(t->type, (const uint8_t *)t->data + b0 * sb, nb, stage);
        CU_CK(cudaMemcpy((uint8_t *)out->d + b0 * bb, stage, nb * bb, cudaMemcpyHostToDevice), "weight upload");
        *done += nb * sb;
        if (fn && fn(user, *done, total)) return cu_fail(err, MU_E_STATE, "cuda: upload stopped");
    }
    return 0;
}

/* One NVFP4 block in the device layout (cuda.cuh): the scale byte 0x7f
 * (which reads as 0) made 0x00, each code word's nibbles regrouped, the
 * low nibbles of its four bytes first, then the high ones. */
static void nvfp4_dev_block(const uint8_t *src, uint8_t *dst) {
    for (int i = 0; i < 4; i++) dst[i] = src[i] == 0x7f ? 0 : src[i];
    for (int q = 0; q < 8; q++) {
        uint32_t w = 0;
        for (int n = 0; n < 4; n++) {
            const uint32_t b = src[4 + 4 * q + n];
            w |= (b & 0xF) << (4 * n) | (b >> 4) << (16 + 4 * n);
        }
        memcpy(dst + 4 + 4 * q, &w, 4);
    }
}

void cu_dev_blocks(uint32_t type, const uint8_t *src, size_t nb, uint8_t *stage) {
    const int bb = dev_block_bytes(type);
    if (type == MU_T_NVFP4) {
        for (size_t i = 0; i < nb; i++) nvfp4_dev_block(src + i * 36, stage + i * 36);
    } else if (type == MU_T_Q8_0 || type == MU_T_Q6_K) {
        for (size_t i = 0; i < nb; i++) {
            uint8_t *dst = stage + i * bb;
            if (type == MU_T_Q8_0) {
                memcpy(dst, src + i * 34, 2);
                dst[2] = dst[3] = 0;
                memcpy(dst + 4, src + i * 34 + 2, 32);
            } else {
                memcpy(dst, src + i * 210, 210);
                dst[210] = dst[211] = 0;
            }
        }
    } else {
        memcpy(stage, src, nb * bb);
    }
}

static int upload_f32(mu_gpu_model *m, const mu_gpu_tensor *t, const float **out, mu_err *err) {
    if (t->type != MU_T_F32) return cu_fail(err, MU_E_MODEL, "cuda: norm weights must be F32 (type %u)", t->type);
    void *d;
    int rc = dev_alloc(m, t->bytes, &d, "norm weights", err);
    if (rc) return rc;
    CU_CK(cudaMemcpy(d, t->data, t->bytes, cudaMemcpyHostToDevice), "norm upload");
    *out = (const float *)d;
    return 0;
}

static void p_model_free(mu_gpu_model *m) {
    if (!m) return;
    cudaSetDevice(m->dev);
    if (m->st) cudaStreamSynchronize(m->st);
    for (int i = 0; i < m->n_allocs; i++) cudaFree(m->allocs[i]);
    cudaFree(m->scores);
    cudaFree(m->chunk_sums);
    cudaFree(m->lanes);
    cudaFree(m->lg);
    cudaFreeHost(m->in_h);
    cudaFreeHost(m->rows_h);
    cudaFree(m->rows_d);
    cudaFreeHost(m->kv_h);
    cudaFreeHost(m->lg_h);
    cudaFreeHost(m->best_h);
    cap_free(m);
    graphs_clear(m);
    for (int i = 0; i < m->n_ev_made; i++) cudaEventDestroy(m->ev[i]);
    for (int il = 0; m->lev && il < m->d.n_layer; il++)
        if (m->lev[il]) cudaEventDestroy(m->lev[il]);
    if (m->done) cudaEventDestroy(m->done);
    cudaFreeHost(m->kv_stage);
    if (m->cp) cudaStreamDestroy(m->cp);
    if (m->st) cu_mm_wg_release(m->st), cudaStreamDestroy(m->st);
    free(m->lev);
    free(m->allocs);
    free(m->L);
    free(m->swa);
    free(m);
}

static int model_new(int dev, const mu_gpu_model_desc *d, mu_gpu_progress_fn fn, void *user, mu_gpu_model *m,
                     mu_err *err) {
    CU_CK(cudaSetDevice(dev), "set device");
    CU_CK(cudaStreamCreateWithFlags(&m->st, cudaStreamNonBlocking), "stream");
    m->dev = dev;
    m->d = *d;
    m->d.layers = NULL;
    m->d.swa_layers = NULL;
    m->n_q = d->n_head * d->head_dim;
    m->n_kv = d->n_head_kv * d->head_dim;
    m->swa = (bool *)calloc((size_t)d->n_layer, 1);
    m->L = (dlayer *)calloc((size_t)d->n_layer, sizeof *m->L);
    m->allocs = (void **)calloc((size_t)d->n_layer * 16 + 64, sizeof(void *));
    if (!m->swa || !m->L || !m->allocs) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    memcpy(m->swa, d->swa_layers, (size_t)d->n_layer);
    uint64_t total = 0, done = 0;
    total += d->tok_embd.bytes + d->output.bytes + d->output_norm.bytes;
    for (int il = 0; il < d->n_layer; il++) {
        const mu_gpu_layer *l = &d->layers[il];
        const mu_gpu_tensor *all[] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wgate, &l->q_norm, &l->k_norm,
                                      &l->wo, &l->post_attn_norm, &l->ffn_norm, &l->ffn_gate, &l->ffn_up,
                                      &l->ffn_down, &l->post_ffw_norm};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) total += all[i]->bytes;
    }
    const size_t stage_cap = (size_t)64 << 20;
    uint8_t *stage = NULL;
    CU_CK(cudaMallocHost((void **)&stage, stage_cap), "pinned staging");
    int rc = 0;
#define UP(src, dst) \
    if (!rc) rc = upload(m, src, dst, stage, stage_cap, &done, total, fn, user, err)
    UP(&d->tok_embd, &m->tok_embd);
    UP(&d->output, &m->output);
    if (!rc) rc = upload_f32(m, &d->output_norm, &m->output_norm, err);
    for (int il = 0; il < d->n_layer && !rc; il++) {
        const mu_gpu_layer *l = &d->layers[il];
        dlayer *D = &m->L[il];
        UP(&l->wq, &D->wq);
        UP(&l->wk, &D->wk);
        UP(&l->wv, &D->wv);
        UP(&l->wgate, &D->wgate);
        UP(&l->wo, &D->wo);
        UP(&l->ffn_gate, &D->ffn_gate);
        UP(&l->ffn_up, &D->ffn_up);
        UP(&l->ffn_down, &D->ffn_down);
        const mu_gpu_tensor *nt[] = {&l->attn_norm, &l->q_norm, &l->k_norm, &l->post_attn_norm, &l->ffn_norm,
                                     &l->post_ffw_norm};
        const float **nd[] = {&D->attn_norm, &D->q_norm, &D->k_norm, &D->post_attn_norm, &D->ffn_norm,
                              &D->post_ffw_norm};
        for (int i = 0; i < 6 && !rc; i++) {
            rc = upload_f32(m, nt[i], nd[i], err);
            done += nt[i]->bytes;
        }
    }
#undef UP
    cudaFreeHost(stage);
    if (rc) return rc;
    if (fn && fn(user, total, total)) return cu_fail(err, MU_E_STATE, "cuda: upload stopped");
    /* scratch */
    const size_t T = UB, E = (size_t)d->n_embd, F = (size_t)d->n_ff, Q = (size_t)m->n_q, KV = (size_t)m->n_kv;
    const size_t wide = E > Q ? (E > F ? E : F) : (Q > F ? Q : F);
    m->qa_stride = (wide * 4 + 255) & ~(size_t)255;
    struct {
        void **p;
        size_t n;
    } bufs[] = {{(void **)&m->h, T * E * 4},      {(void **)&m->a, T * (E > Q ? E : Q) * 4},
                {(void **)&m->q, T * Q * 4},      {(void **)&m->k, T * KV * 4},
                {(void **)&m->v, T * KV * 4},     {(void **)&m->g, T * Q * 4},
                {(void **)&m->o, T * E * 4},      {(void **)&m->f1, T * F * 4},
                {(void **)&m->f2, T * F * 4},     {(void **)&m->h2, T * E * 4},
                {(void **)&m->a2, T * (E > Q ? E : Q) * 4},     {(void **)&m->qa, 2 * T * m->qa_stride},
                {(void **)&m->in_d, sizeof(chunk_in)}, {(void **)&m->kv_d, T * (size_t)d->n_layer * sizeof(cu_kv_layer)},
                {(void **)&m->rope_d, T * (size_t)d->head_dim * 4}, {(void **)&m->best_d, T * 4}};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs && !rc; i++) rc = dev_alloc(m, bufs[i].n, bufs[i].p, "scratch", err);
    if (rc) return rc;
    CU_CK(cudaMallocHost((void **)&m->in_h, sizeof(chunk_in)), "pinned inputs");
    CU_CK(cudaMallocHost((void **)&m->best_h, T * 4), "pinned outputs");
    CU_CK(cudaMallocHost((void **)&m->kv_h, T * (size_t)d->n_layer * sizeof(cu_kv_layer)), "pinned inputs");
    /* layer streaming: made here, so a streaming pass allocates nothing
     * (cudaFreeHost may synchronize the device) */
    CU_CK(cudaStreamCreateWithFlags(&m->cp, cudaStreamNonBlocking), "stream");
    m->lev = (cudaEvent_t *)calloc((size_t)d->n_layer, sizeof(cudaEvent_t));
    if (!m->lev) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    for (int il = 0; il < d->n_layer; il++) CU_CK(cudaEventCreateWithFlags(&m->lev[il], cudaEventDisableTiming), "event");
    CU_CK(cudaEventCreateWithFlags(&m->done, cudaEventDisableTiming), "event");
    CU_CK(cudaMallocHost((void **)&m->kv_stage, 2 * T * KV * 2), "pinned KV staging");
    return 0;
}

static int p_model_new(int dev, const mu_gpu_model_desc *d, mu_gpu_progress_fn fn, void *user, mu_gpu_model **out,
                       mu_err *err) {
    if (d->head_dim > 256 || d->head_dim % 2)
        return cu_fail(err, MU_E_UNSUPPORTED, "cuda: head size %d is not supported (even, at most 256)", d->head_dim);
    mu_gpu_model *m = (mu_gpu_model *)calloc(1, sizeof *m);
    if (!m) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    int rc = model_new(dev, d, fn, user, m, err);
    if (rc) {
        p_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* ---- sessions ---------------------------------------------------------- */

static void p_sess_free(mu_gpu_sess *s) {
    if (!s) return;
    cudaSetDevice(s->m->dev);
    cudaStreamSynchronize(s->m->st);
    for (int il = 0; il < s->m->d.n_layer; il++) {
        if (s->k) cudaFree(s->k[il]);
        if (s->v) cudaFree(s->v[il]);
    }
    free(s->k);
    free(s->v);
    free(s->rows);
    free(s);
}

static int p_sess_new(mu_gpu_model *m, const int *rows, mu_gpu_sess **out, mu_err *err) {
    const int nl = m->d.n_layer;
    mu_gpu_sess *s = (mu_gpu_sess *)calloc(1, sizeof *s);
    if (!s) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    s->m = m;
    s->rows = (int *)calloc((size_t)nl, sizeof(int));
    s->k = (uint16_t **)calloc((size_t)nl, sizeof(uint16_t *));
    s->v = (uint16_t **)calloc((size_t)nl, sizeof(uint16_t *));
    int rc = (!s->rows || !s->k || !s->v) ? cu_fail(err, MU_E_NOMEM, "cuda: out of memory") : 0;
    cudaSetDevice(m->dev);
    size_t total = 0;
    for (int il = 0; il < nl; il++) total += 2 * (size_t)rows[il] * m->n_kv * 2;
    for (int il = 0; il < nl && !rc; il++) {
        s->rows[il] = rows[il];
        const size_t n = (size_t)rows[il] * m->n_kv * 2;
        cudaError_t e = cudaMalloc((void **)&s->k[il], n);
        if (e == cudaSuccess) e = cudaMalloc((void **)&s->v[il], n);
        if (e != cudaSuccess) {
            cudaGetLastError();
            size_t fr = 0, tot = 0;
            cudaMemGetInfo(&fr, &tot);
            rc = cu_fail(err, MU_E_NOMEM, "cuda: out of device memory for a KV cache: need %zu bytes, %zu free", total, fr);
            break;
        }
        /* zeros: cells never written are masked, but must not hold NaN bits
         * (0 * NaN would poison a sum) */
        cudaMemset(s->k[il], 0, n);
        cudaMemset(s->v[il], 0, n);
    }
    if (rc) {
        p_sess_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int p_sess_copy(mu_gpu_sess *dst, const mu_gpu_sess *src, mu_err *err) {
    mu_gpu_model *m = dst->m;
    if (src->m != m) return cu_fail(err, MU_E_ARG, "cuda: session copy between two models");
    if (m->open) return cu_fail(err, MU_E_STATE, "cuda: session copy inside a streaming pass's layer callback");
    for (int il = 0; il < m->d.n_layer; il++)
        if (dst->rows[il] != src->rows[il])
            return cu_fail(err, MU_E_ARG, "cuda: session copy: layer %d has %d cells, the source %d", il, dst->rows[il],
                           src->rows[il]);
    CU_CK(cudaSetDevice(m->dev), "set device");
    for (int il = 0; il < m->d.n_layer; il++) {
        const size_t n = (size_t)src->rows[il] * m->n_kv * 2;
        CU_CK(cudaMemcpyAsync(dst->k[il], src->k[il], n, cudaMemcpyDeviceToDevice, m->st), "session copy");
        CU_CK(cudaMemcpyAsync(dst->v[il], src->v[il], n, cudaMemcpyDeviceToDevice, m->st), "session copy");
    }
    CU_CK(cudaStreamSynchronize(m->st), "session copy");
    return 0;
}

static int kv_check(mu_gpu_sess *s, int il, int cell0, int n, mu_err *err) {
    if (il < 0 || il >= s->m->d.n_layer || cell0 < 0 || n < 0 || cell0 + n > s->rows[il])
        return cu_fail(err, MU_E_ARG, "cuda: cells %d+%d out of range for layer %d", cell0, n, il);
    return 0;
}

/* A read inside a streaming pass's on_layer: on the second stream, after
 * the event of the layer read (its rows of the pass are written and no
 * later launch of the pass writes them), through the pinned staging, UB
 * rows at a time; the compute stream runs on. */
static int kv_get_open(mu_gpu_sess *s, int il, size_t off, int n, uint16_t *k, uint16_t *v, mu_err *err) {
    mu_gpu_model *m = s->m;
    const size_t kv = (size_t)m->n_kv;
    uint16_t *sk = m->kv_stage, *sv = m->kv_stage + (size_t)UB * kv;
    CU_CK(cudaStreamWaitEvent(m->cp, m->lev[il], 0), "KV read: wait for the layer");
    for (int r = 0; r < n; r += UB) {
        const int nr = n - r < UB ? n - r : UB;
        const size_t at = off + (size_t)r * kv, bytes = (size_t)nr * kv * 2;
        CU_CK(cudaMemcpyAsync(sk, s->k[il] + at, bytes, cudaMemcpyDeviceToHost, m->cp), "KV read");
        CU_CK(cudaMemcpyAsync(sv, s->v[il] + at, bytes, cudaMemcpyDeviceToHost, m->cp), "KV read");
        CU_CK(cudaStreamSynchronize(m->cp), "KV read");
        memcpy(k + (size_t)r * kv, sk, bytes);
        memcpy(v + (size_t)r * kv, sv, bytes);
    }
    if (m->stats) m->stats->reads++;
    return 0;
}

static int p_kv_get(mu_gpu_sess *s, int il, int cell0, int n, uint16_t *k, uint16_t *v, mu_err *err) {
    int rc = kv_check(s, il, cell0, n, err);
    if (rc || !n) return rc;
    const size_t rb = (size_t)s->m->n_kv * 2, off = (size_t)cell0 * s->m->n_kv;
    CU_CK(cudaSetDevice(s->m->dev), "set device");
    if (s->m->open) return kv_get_open(s, il, off, n, k, v, err);
    CU_CK(cudaStreamSynchronize(s->m->st), "sync");
    CU_CK(cudaMemcpy(k, s->k[il] + off, n * rb, cudaMemcpyDeviceToHost), "KV read");
    CU_CK(cudaMemcpy(v, s->v[il] + off, n * rb, cudaMemcpyDeviceToHost), "KV read");
    return 0;
}

static int p_kv_put(mu_gpu_sess *s, int il, int cell0, int n, const uint16_t *k, const uint16_t *v, mu_err *err) {
    if (s->m->open) return cu_fail(err, MU_E_STATE, "cuda: KV write inside a streaming pass's layer callback");
    int rc = kv_check(s, il, cell0, n, err);
    if (rc || !n) return rc;
    const size_t rb = (size_t)s->m->n_kv * 2, off = (size_t)cell0 * s->m->n_kv;
    CU_CK(cudaSetDevice(s->m->dev), "set device");
    CU_CK(cudaStreamSynchronize(s->m->st), "sync");
    CU_CK(cudaMemcpy(s->k[il] + off, k, n * rb, cudaMemcpyHostToDevice), "KV write");
    CU_CK(cudaMemcpy(s->v[il] + off, v, n * rb, cudaMemcpyHostToDevice), "KV write");
    return 0;
}

/* ---- elementwise kernels ----------------------------------------------- */

/* rms_norm of forward.c: squares summed in double; y = (x * scale) * w.
 * The block's sum of the squares each thread summed in order (sum):
 * lanes by shuffles, warps in order, in double. */
__device__ __forceinline__ float block_rms_finish(double sum, int n, float eps) {
    __shared__ double s_part[32];
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (threadIdx.x % 32 == 0) s_part[threadIdx.x / 32] = sum;
    __syncthreads();
    double tot = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++) tot += s_part[w];
    __syncthreads();
    const float mean = (float)(tot / n);
    return 1.0f / sqrtf(mean + eps);
}
__device__ __forceinline__ float block_rms_scale(const float *x, int n, float eps) {
    double sum = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += (double)(x[i] * x[i]);
    return block_rms_finish(sum, n, eps);
}

/* Rows of at most RK * blockDim elements (decode: 1024 threads) keep
 * thread i's elements i, i + blockDim, ... in registers: every load of a
 * row is in flight at once, and the weights' before the kernel waits for
 * the one before it (they do not depend on it). The sums are the same. */
#define RK 8
#define RK_IDX(k) ((int)threadIdx.x + (k) * (int)blockDim.x)
__device__ __forceinline__ void reg_load(float v[RK], const float *x, int n, float dflt) {
#pragma unroll
    for (int k = 0; k < RK; k++) v[k] = RK_IDX(k) < n ? x[RK_IDX(k)] : dflt;
}
__device__ __forceinline__ float reg_rms_scale(const float v[RK], int n, float eps) {
    double sum = 0;
#pragma unroll
    for (int k = 0; k < RK; k++)
        if (RK_IDX(k) < n) sum += (double)(v[k] * v[k]);
    return block_rms_finish(sum, n, eps);
}

/* With qy (n a multiple of 256): the block's output row yr, once every
 * thread has stored its part, also as Q8_K blocks into row blockIdx.x of
 * qy (qstride bytes a row), k_quant_q8_K's arithmetic: the matmul after
 * the norm then needs no quantization launch of its own. */
__device__ __forceinline__ void row_q8K(const float *yr, int n, mu_block_q8_K *qy, size_t qstride) {
    if (!qy) return;
    __syncthreads();
    mu_block_q8_K *qr = (mu_block_q8_K *)((uint8_t *)qy + (size_t)blockIdx.x * qstride);
    for (int b = (int)threadIdx.x >> 5; b < n / 256; b += (int)blockDim.x >> 5) q8K_block_warp(yr + 256 * b, qr + b, threadIdx.x & 31);
}

/* y[t] = rms(x[t]) * w (w may be NULL); one block per row; qy: row_q8K. */
__global__ void __launch_bounds__(1024) k_rms(const float *x, const float *w, float *y, int n, float eps,
                                              mu_block_q8_K *qy, size_t qstride) {
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    if (n <= RK * (int)blockDim.x) {
        float wv[RK], xv[RK];
        reg_load(wv, w, w ? n : 0, 1.0f);
        pdl_wait();
        pdl_launch();
        reg_load(xv, xr, n, 0.0f);
        const float sc = reg_rms_scale(xv, n, eps);
#pragma unroll
        for (int k = 0; k < RK; k++)
            if (RK_IDX(k) < n) yr[RK_IDX(k)] = w ? (xv[k] * sc) * wv[k] : xv[k] * sc;
    } else {
        pdl_wait();
        pdl_launch();
        const float sc = block_rms_scale(xr, n, eps);
        for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = w ? (xr[i] * sc) * w[i] : xr[i] * sc;
    }
    row_q8K(yr, n, qy, qstride);
}

/* h += rms(o, post_eps) * pw; then, with nw, a = rms(h, eps) * nw: after
 * attention the FFN input norm, after the FFN the next layer's input norm
 * (k_rms's arithmetic, one launch fewer a layer); qy: row_q8K of a. */
__global__ void __launch_bounds__(1024) k_post_add(float *o, const float *pw, float *h, float *a, const float *nw, int n, float post_eps,
                           float eps, mu_block_q8_K *qy, size_t qstride) {
    float *orow = o + (size_t)blockIdx.x * n, *hrow = h + (size_t)blockIdx.x * n;
    if (n <= RK * (int)blockDim.x) {
        float pv[RK], nv[RK], ov[RK], hv[RK];
        reg_load(pv, pw, n, 0.0f);
        reg_load(nv, nw, nw ? n : 0, 0.0f);
        pdl_wait();
        pdl_launch();
        reg_load(ov, orow, n, 0.0f);
        reg_load(hv, hrow, n, 0.0f);
        const float sc = reg_rms_scale(ov, n, post_eps);
#pragma unroll
        for (int k = 0; k < RK; k++) {
            hv[k] += (ov[k] * sc) * pv[k];
            if (RK_IDX(k) < n) hrow[RK_IDX(k)] = hv[k];
        }
        if (!nw) return;
        const float sc2 = reg_rms_scale(hv, n, eps);
        float *arow = a + (size_t)blockIdx.x * n;
#pragma unroll
        for (int k = 0; k < RK; k++)
            if (RK_IDX(k) < n) arow[RK_IDX(k)] = (hv[k] * sc2) * nv[k];
        row_q8K(arow, n, qy, qstride);
        return;
    }
    pdl_wait();
    pdl_launch();
    const float sc = block_rms_scale(orow, n, post_eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) hrow[i] += (orow[i] * sc) * pw[i];
    __syncthreads();
    if (!nw) return;
    const float sc2 = block_rms_scale(hrow, n, eps);
    float *arow = a + (size_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) arow[i] = (hrow[i] * sc2) * nw[i];
    row_q8K(arow, n, qy, qstride);
}

/* a warp's sum of its lanes' v, the same in every lane (a tree) */
__device__ __forceinline__ double warp_dsum(double v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* The binades of the nonzero squares q a lane has seen: the lowest and
 * highest float exponent fields (a subnormal counts as 1, its ulp's). */
__device__ __forceinline__ void sq_binades(float q, int *lo, int *hi) {
    const int e = (int)((__float_as_uint(q) >> 23) & 0xFF);
    if (q != 0.f) {
        *lo = min(*lo, e ? e : 1);
        *hi = max(*hi, e);
    }
}
/* Whether a double sum of n float squares whose binades span the warp's
 * [lo, hi] is exact in every order: each partial sum is a multiple of the
 * smallest term's ulp, 2^(lo - 150), below n 2^(hi - 126), so it needs
 * hi - lo + 24 + log2(n) bits, and a double holds 53. Then a tree adds
 * them as the CPU's chain in element order does. (Infinities and NaN,
 * exponent field 255, never pass.) */
__device__ __forceinline__ bool dsum_exact(int lo, int hi, int n) {
    for (int o = 16; o; o >>= 1) {
        lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    int lg = 0;
    while ((1 << lg) < n) lg++;
    return hi < 255 && (hi < lo || hi - lo + 24 + lg <= 53);
}
/* the block's sum of the warps' sums s (every warp gets the same) */
__device__ __forceinline__ double blocks_dsum(double s, double *part) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) part[w] = s;
    __syncthreads();
    return warp_dsum(lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0);
}
/* k_post_add for rows of n / 256 whole Q8_K blocks (at most 32): warp w
 * holds block w's 256 values (lane l: l + 32 k), so the quantization of a
 * (qy) takes them from registers, and each sum of squares is a warp's
 * shuffles and one exchange through shared memory: two barriers a row
 * where k_post_add takes five and reads a back from memory. The sums of
 * squares are in double, as k_post_add's (another order of the same
 * terms); the rest is its arithmetic. */
__global__ void __launch_bounds__(1024) k_post_add_w(float *o, const float *pw, float *h, float *a, const float *nw, int n,
                                                     float post_eps, float eps, mu_block_q8_K *qy, size_t qstride) {
    __shared__ double s_part[2][32];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t r0 = (size_t)blockIdx.x * n + (size_t)w * 256 + lane;
    float pv[8], nv[8], ov[8], hv[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        pv[k] = pw[w * 256 + lane + 32 * k];
        nv[k] = nw ? nw[w * 256 + lane + 32 * k] : 0.f;
    }
    pdl_wait();
    pdl_launch();
#pragma unroll
    for (int k = 0; k < 8; k++) {
        ov[k] = o[r0 + 32 * k];
        hv[k] = h[r0 + 32 * k];
    }
    double s = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) s += (double)(ov[k] * ov[k]);
    double tot = blocks_dsum(warp_dsum(s), s_part[0]);
    const float sc = 1.0f / sqrtf((float)(tot / n) + post_eps);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        hv[k] += (ov[k] * sc) * pv[k];
        h[r0 + 32 * k] = hv[k];
    }
    if (!nw) return;
    s = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) s += (double)(hv[k] * hv[k]);
    tot = blocks_dsum(warp_dsum(s), s_part[1]);
    const float sc2 = 1.0f / sqrtf((float)(tot / n) + eps);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        hv[k] = (hv[k] * sc2) * nv[k];
        a[r0 + 32 * k] = hv[k];
    }
    if (qy) q8K_block_warp_v(hv, (mu_block_q8_K *)((uint8_t *)qy + (size_t)blockIdx.x * qstride) + w, lane);
}

/* k_post_add_w where the rows are whole Q8_K blocks, at most 32, of a
 * decode pass; MUSER_CUDA_POST=0: k_post_add always (to compare) */
static void launch_post_add(cudaStream_t st, int T, float *o, const float *pw, float *h, float *a, const float *nw, int n,
                            float post_eps, float eps, mu_block_q8_K *qy, size_t qstride) {
    static const bool on = cu_env_digit("MUSER_CUDA_POST", 1) != 0;
    if (on && T <= GRAPH_MAX_T && n % 256 == 0 && n / 256 <= 32)
        launch_pdl(k_post_add_w, dim3(T), dim3(32 * (n / 256)), 0, st, o, pw, h, a, nw, n, post_eps, eps, qy, qstride);
    else
        launch_pdl(k_post_add, dim3(T), dim3(T <= GRAPH_MAX_T ? 1024 : 256), 0, st, o, pw, h, a, nw, n, post_eps, eps, qy,
                   qstride);
}

/* q/k head norms, RoPE with the host's angles, and the cache writes: one
 * warp per (token, head); a K head's warp writes its K and V cells. */
__global__ void k_qk(float *q, float *k, const float *v, const float *qn, const float *kn, const float *rope, int n_head,
                     int n_head_kv, int hd, float eps, bool swa, const int *pos, const int *sess, const cu_kv_layer *kv) {
    pdl_wait();
    pdl_launch();
    const int t = blockIdx.x, hh = blockIdx.y, lane = threadIdx.x;
    const int n_kv = n_head_kv * hd;
    const bool isq = hh < n_head;
    float *x = isq ? q + (size_t)t * n_head * hd + (size_t)hh * hd : k + (size_t)t * n_kv + (size_t)(hh - n_head) * hd;
    const float *w = isq ? qn : kn;
    /* the squares summed in double in element order, as the CPU does: by
     * the lanes and shuffles where no order can round (dsum_exact), else
     * by lane 0 in order */
    double sum = 0;
    int elo = 255, ehi = 0;
    for (int i = lane; i < hd; i += 32) {
        const float q = x[i] * x[i];
        sum += (double)q;
        sq_binades(q, &elo, &ehi);
    }
    if (dsum_exact(elo, ehi, hd)) {
        sum = warp_dsum(sum);
    } else {
        sum = 0;
        if (lane == 0)
            for (int i = 0; i < hd; i++) sum += (double)(x[i] * x[i]);
        sum = __shfl_sync(0xffffffffu, sum, 0);
    }
    const float sc = 1.0f / sqrtf((float)(sum / hd) + eps);
    for (int i = lane; i < hd; i += 32) x[i] = (x[i] * sc) * w[i];
    __syncwarp();
    if (swa) {
        const float *cs = rope + (size_t)t * hd;
        for (int p = lane; p < hd / 2; p += 32) {
            const float c = cs[2 * p], s = cs[2 * p + 1];
            const float x0 = x[2 * p], x1 = x[2 * p + 1];
            x[2 * p] = fmaf(x0, c, -(x1 * s));
            x[2 * p + 1] = fmaf(x0, s, x1 * c);
        }
    }
    if (isq) return;
    __syncwarp();
    const cu_kv_layer L = kv[sess[t]];
    const size_t cell = (size_t)(pos[t] % L.rows), off = (size_t)(hh - n_head) * hd;
    uint16_t *kc = (uint16_t *)L.k + cell * n_kv + off, *vc = (uint16_t *)L.v + cell * n_kv + off;
    for (int i = lane; i < hd; i += 32) {
        kc[i] = f2h(x[i]);
        vc[i] = f2h(v[(size_t)t * n_kv + off + i]);
    }
}

/* silu(x) * u, with ggml's expf (vec) or libm's */
__device__ __forceinline__ float silu_mul(float x, float u, bool vec) {
    return x / (1.0f + (vec ? expf_ggml(-x) : expf_libm(-x))) * u;
}

/* g = silu(g) * u: ggml's expf on whole groups of 16, libm's on the tail. */
__global__ void k_swiglu(float *g, const float *u, int n, int T) {
    pdl_wait();
    pdl_launch();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n) return;
    const int j = (int)(i % n);
    g[i] = silu_mul(g[i], u[i], j < (n & ~15));
}

/* k_swiglu for n % 256 == 0, and each 256-value block of the result
 * quantized to Q8_K into row t of qy (q8K_block_warp_v: a warp a block,
 * from the lanes' registers), so the FFN down matmul needs no
 * quantization launch of its own. */
__global__ void __launch_bounds__(256) k_swiglu_q8K(float *g, const float *u, int n, int T, mu_block_q8_K *qy,
                                                    size_t qstride) {
    pdl_wait();
    pdl_launch();
    const int nb = n / 256, wb = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (wb >= T * nb) return;
    const int t = wb / nb, b = wb % nb;
    float *gb = g + (size_t)t * n + 256 * b;
    const float *ub = u + (size_t)t * n + 256 * b;
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        v[k] = silu_mul(gb[lane + 32 * k], ub[lane + 32 * k], true);
        gb[lane + 32 * k] = v[k];
    }
    q8K_block_warp_v(v, (mu_block_q8_K *)((uint8_t *)qy + (size_t)t * qstride) + b, lane);
}

/* The rows of tokens that come as rows (images): h[t] = rows[in_row[t]]. */
__global__ void k_put_rows(float *h, const float *rows, const int32_t *in_row, int n) {
    const int r = in_row[blockIdx.x];
    if (r < 0) return;
    for (int i = threadIdx.x; i < n; i += blockDim.x) h[(size_t)blockIdx.x * n + i] = rows[(size_t)r * n + i];
}

/* dst[r] = src[idx[r]] for rows of n floats */
__global__ void k_gather(const float *src, float *dst, const int32_t *idx, int n) {
    const float *s = src + (size_t)idx[blockIdx.x] * n;
    float *d = dst + (size_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

/* One value of a row into a thread's (largest value, its first index) and
 * non-finite flag; a thread sees its indices in increasing order. */
__device__ __forceinline__ void best_take(float x, int j, float *v, int *i, bool *bad) {
    *bad |= !isfinite(x);
    if (x > *v) *v = x, *i = j;
}

/* (v, i) takes (v2, i2) when it is larger, or equal at a smaller index:
 * the reduction keeps the first index of the largest value (-0 == +0). */
__device__ __forceinline__ void best_join(float v2, int i2, float *v, int *i) {
    if (v2 > *v || (v2 == *v && i2 < *i)) *v = v2, *i = i2;
}

/* best[r] for logits rows lg [n_out][n] (mu_gpu_chunk.best): the first
 * index of row r's largest value when every value is finite, else -1;
 * mu_logits_argmax on a row mu_logits_finite accepts. One block of 1024
 * threads a row: float4 loads where the row is 16-byte aligned, then
 * (max, first index) pairs reduced over warps and the block. */
__global__ void __launch_bounds__(1024) k_best(const float *lg, int n, int32_t *best) {
    const float *l = lg + (size_t)blockIdx.x * n;
    float v = -INFINITY;
    int i = 0x7fffffff;
    bool bad = false;
    const int n4 = (uintptr_t)l % 16 == 0 ? n / 4 : 0;
#pragma unroll 4
    for (int q = threadIdx.x; q < n4; q += blockDim.x) {
        const float4 x = ((const float4 *)l)[q];
        best_take(x.x, 4 * q, &v, &i, &bad);
        best_take(x.y, 4 * q + 1, &v, &i, &bad);
        best_take(x.z, 4 * q + 2, &v, &i, &bad);
        best_take(x.w, 4 * q + 3, &v, &i, &bad);
    }
    for (int j = 4 * n4 + threadIdx.x; j < n; j += blockDim.x) best_take(l[j], j, &v, &i, &bad);
    const bool any_bad = __syncthreads_or(bad);
    for (int o = 16; o > 0; o >>= 1)
        best_join(__shfl_down_sync(0xffffffffu, v, o), __shfl_down_sync(0xffffffffu, i, o), &v, &i);
    __shared__ float sv[32];
    __shared__ int si[32];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    if (lane == 0) sv[w] = v, si[w] = i;
    __syncthreads();
    if (w != 0) return;
    v = lane < (int)blockDim.x / 32 ? sv[lane] : -INFINITY;
    i = lane < (int)blockDim.x / 32 ? si[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1)
        best_join(__shfl_down_sync(0xffffffffu, v, o), __shfl_down_sync(0xffffffffu, i, o), &v, &i);
    if (lane == 0) best[blockIdx.x] = any_bad ? -1 : i;
}

void cu_rms_rows(cudaStream_t st, const float *x, const float *w, float *y, int T, int n, float eps) {
    if (T > 0) k_rms<<<T, 256, 0, st>>>(x, w, y, n, eps, NULL, 0);
}
void cu_swiglu(cudaStream_t st, float *g, const float *u, int n, int T) {
    if (T > 0) k_swiglu<<<(unsigned)(((size_t)T * n + 255) / 256), 256, 0, st>>>(g, u, n, T);
}
void cu_best(cudaStream_t st, const float *lg, int n_rows, int n, int32_t *best) {
    if (n_rows > 0) k_best<<<n_rows, 1024, 0, st>>>(lg, n, best);
}

/* ---- forward ----------------------------------------------------------- */

/* Quantizes x [T][cols] once per dot type and runs the matmuls on it:
 * neighbours of one type, width and batch rounding as one call (a decode
 * step launches them together). */
static void mm(mu_gpu_model *m, const float *x, int T, int ll_rows, int t_solo, int n, const dtensor *const *ws,
               float *const *ys, bool preq) {
    uint32_t qt[2];
    int nq = 0, slot[4], nb[4];
    MU_ASSERT(n <= 4);
    for (int i = 0; i < n; i++) {
        const uint32_t dt = dev_dot_type(ws[i]->type);
        slot[i] = -1;
        for (int s = 0; s < nq; s++)
            if (qt[s] == dt) slot[i] = s;
        if (slot[i] < 0) {
            slot[i] = nq++;
            qt[slot[i]] = dt;
            if (!(preq && slot[i] == 0 && dt == MU_T_Q8_K)) /* preq: the norm before quantized x (pre_q8K) */
                cu_quantize(m->st, dt, x, T, ws[i]->ne0, m->qa + (size_t)slot[i] * UB * m->qa_stride, m->qa_stride);
        }
        nb[i] = cu_batch_rows(ws[i], ll_rows);
        if (nb[i] > t_solo) nb[i] = t_solo;
    }
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && slot[j] == slot[i] && ws[j]->type == ws[i]->type && ws[j]->ne0 == ws[i]->ne0 && nb[j] == nb[i])
            j++;
        cu_matmul_n(m->st, ws + i, j - i, m->qa + (size_t)slot[i] * UB * m->qa_stride, m->qa_stride, T, nb[i], ys + i);
        i = j;
    }
}

static int ensure_attn(mu_gpu_model *m, size_t need, mu_err *err) {
    if (need <= m->scores_cap) return 0;
    graphs_clear(m);
    cudaFree(m->scores);
    cudaFree(m->chunk_sums);
    m->scores = m->chunk_sums = NULL;
    m->scores_cap = 0;
    CU_CK(cudaMalloc((void **)&m->scores, need * 4), "attention scratch");
    CU_CK(cudaMalloc((void **)&m->chunk_sums, (need / 16 + 16) * 4), "attention scratch");
    m->scores_cap = need;
    if (!m->lanes)
        CU_CK(cudaMalloc((void **)&m->lanes, (size_t)CU_DECODE_MAX_T * m->d.n_head * 64 * 128 * 4), "attention scratch");
    return 0;
}

static int ensure_logits(mu_gpu_model *m, int rows, mu_err *err) {
    const size_t V = (size_t)m->d.n_vocab;
    if (rows > m->lg_rows) {
        graphs_clear(m);
        cudaFree(m->lg);
        m->lg = NULL;
        m->lg_rows = 0;
        CU_CK(cudaMalloc((void **)&m->lg, (size_t)rows * V * 4), "logits buffer");
        m->lg_rows = rows;
    }
    if ((size_t)rows * V > m->lg_h_cap) {
        cudaFreeHost(m->lg_h);
        m->lg_h = NULL;
        m->lg_h_cap = 0;
        CU_CK(cudaMallocHost((void **)&m->lg_h, (size_t)rows * V * 4), "pinned logits");
        m->lg_h_cap = (size_t)rows * V;
    }
    return 0;
}

/* MUSER_CUDA_FUSE_NORMS=0: every input norm and quantization its own
 * launch, as before they were fused (to compare; same arithmetic) */
static bool fuse_norms(void) {
    static const bool on = cu_env_digit("MUSER_CUDA_FUSE_NORMS", 1) != 0;
    return on;
}

/* Where a norm kernel may quantize its output rows for the matmuls after
 * it (row_q8K): into slot 0 of m->qa when the first of them takes Q8_K
 * activations (mm then skips that quantization); NULL: mm quantizes. */
static mu_block_q8_K *pre_q8K(const mu_gpu_model *m, const dtensor *first, int n) {
    return fuse_norms() && n % 256 == 0 && dev_dot_type(first->type) == MU_T_Q8_K ? (mu_block_q8_K *)m->qa : NULL;
}

/* threads of a row kernel: few rows (decode) get more threads each */
#define NT(rows) ((rows) <= GRAPH_MAX_T ? 1024 : 256)

/* ---- hidden-state capture (mu_gpu_chunk.feat) ------------------------- */

static void cap_rows_free(mu_gpu_model *m) {
    cudaFreeHost(m->cap_idx_h);
    cudaFree(m->cap_idx_d);
    cudaFreeHost(m->cap_h);
    cudaFree(m->cap_d);
    free(m->cap_dst);
    m->cap_idx_h = m->cap_idx_d = NULL;
    m->cap_h = m->cap_d = NULL;
    m->cap_dst = NULL;
    m->cap_n = m->cap_cap = 0;
}

static void cap_free(mu_gpu_model *m) {
    cap_rows_free(m);
    free(m->cap_off);
    cudaFree(m->cap_off_d);
    m->cap_off = NULL;
    m->cap_off_d = NULL;
}

/* Passes of few tokens with captures replay graphs too (the captures'
 * layers in the key, their rows read from a table on the device);
 * MUSER_CUDA_CAPTURE_GRAPH=0: they launch directly (to compare) */
static bool cap_graphs(void) {
    static const bool on = cu_env_digit("MUSER_CUDA_CAPTURE_GRAPH", 1) != 0;
    return on;
}

/* Layer il's capture rows, off[il] .. off[il + 1] of the table on the
 * device, however many: a graph holds the launch for any rows of the same
 * layers. */
__global__ void k_cap_rows(const float *h, float *dst, const int32_t *idx, const int *off, int il, int n) {
    const int r1 = off[il + 1];
    for (int r = off[il] + (int)blockIdx.x; r < r1; r += (int)gridDim.x) {
        const float *src = h + (size_t)idx[r] * n;
        float *d = dst + (size_t)r * n;
        for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = src[i];
    }
}

/* The chunk's capture rows grouped by layer (rows [cap_off[il],
 * cap_off[il + 1]) copy h rows cap_idx entering layer il), with the
 * indices uploaded on the pass's stream. Buffers grow on demand (and the
 * graphs go: with cap_graphs() a graph may hold them; else
 * a capturing pass is launched directly). cap_n stays 0 for a chunk
 * without captures, and launch_pass then launches what it did before. */
static int cap_prepare(mu_gpu_model *m, const mu_gpu_chunk *c, mu_err *err) {
    const int nl = m->d.n_layer, E = m->d.n_embd;
    m->cap_n = 0;
    m->cap_mask = 0;
    if (!c->feat) return 0;
    int n = 0;
    for (int t = 0; t < c->T; t++) {
        if (!c->feat[t]) continue;
        for (int k = 0; k < c->n_feat_layers[t]; k++)
            if (c->feat_layers[t][k] < 0 || c->feat_layers[t][k] >= nl)
                return cu_fail(err, MU_E_ARG, "cuda: capture layer out of range: %d (layers %d)", c->feat_layers[t][k], nl);
        n += c->n_feat_layers[t];
    }
    if (n == 0) return 0;
    if (!m->cap_off && !(m->cap_off = (int *)calloc(2 * ((size_t)nl + 1), sizeof(int))))
        return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    if (!m->cap_off_d) CU_CK(cudaMalloc((void **)&m->cap_off_d, ((size_t)nl + 1) * sizeof(int)), "capture rows");
    if (n > m->cap_cap) {
        graphs_clear(m); /* a graph may hold the old buffers */
        cap_rows_free(m);
        if (n < 64) n = 64;
        m->cap_dst = (float **)malloc((size_t)n * sizeof *m->cap_dst);
        if (!m->cap_dst) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
        CU_CK(cudaMallocHost((void **)&m->cap_idx_h, (size_t)n * 4), "capture rows");
        CU_CK(cudaMalloc((void **)&m->cap_idx_d, (size_t)n * 4), "capture rows");
        CU_CK(cudaMallocHost((void **)&m->cap_h, (size_t)n * E * 4), "capture rows");
        CU_CK(cudaMalloc((void **)&m->cap_d, (size_t)n * E * 4), "capture rows");
        m->cap_cap = n;
    }
    n = 0;
    int *off = m->cap_off, *cur = m->cap_off + nl + 1;
    memset(off, 0, ((size_t)nl + 1) * sizeof *off);
    for (int t = 0; t < c->T; t++)
        for (int k = 0; c->feat[t] && k < c->n_feat_layers[t]; k++) off[c->feat_layers[t][k] + 1]++;
    for (int il = 0; il < nl; il++) off[il + 1] += off[il];
    memcpy(cur, off, (size_t)nl * sizeof *cur);
    for (int t = 0; t < c->T; t++)
        for (int k = 0; c->feat[t] && k < c->n_feat_layers[t]; k++) {
            const int r = cur[c->feat_layers[t][k]]++;
            m->cap_idx_h[r] = t;
            m->cap_dst[r] = c->feat[t] + (size_t)k * E;
            n++;
            if (cap_graphs() && nl <= 64) m->cap_mask |= (uint64_t)1 << c->feat_layers[t][k];
        }
    CU_CK(cudaMemcpyAsync(m->cap_idx_d, m->cap_idx_h, (size_t)n * 4, cudaMemcpyHostToDevice, m->st), "capture rows");
    if (m->cap_mask)
        CU_CK(cudaMemcpyAsync(m->cap_off_d, m->cap_off, ((size_t)nl + 1) * sizeof(int), cudaMemcpyHostToDevice, m->st),
              "capture rows");
    m->cap_n = n;
    return 0;
}

/* The rows of h entering layer il (launch_pass, before the layer's work:
 * the previous layer's last k_post_add wrote them; the last layer's
 * gather of output rows comes after). */
static void cap_layer(mu_gpu_model *m, cudaStream_t st, int il, int T, const float *h) {
    const int r0 = m->cap_off[il], n = m->cap_off[il + 1] - r0, E = m->d.n_embd;
    if (m->cap_mask) { /* the launches depend on the layers alone (a graph's key) */
        if (m->cap_mask >> il & 1) k_cap_rows<<<T, 256, 0, st>>>(h, m->cap_d, m->cap_idx_d, m->cap_off_d, il, E);
    } else if (n > 0) {
        k_gather<<<n, 256, 0, st>>>(h, m->cap_d + (size_t)r0 * E, m->cap_idx_d + r0, E);
    }
}

/* Every kernel of one pass over a chunk whose inputs are on the device.
 * Only the arguments decide the launches, so a pass can be captured once
 * as a graph and replayed (graph_launch). max_span, swa_span: the most
 * cells of the sessions' full, resp. sliding, layers (a layer's attention
 * is launched for its own kind's: a sliding layer's ring is short). */
static void launch_pass(mu_gpu_model *m, int T, int n_out, int max_span, int swa_span, int t_solo, int out_solo,
                        bool prof, bool stream, bool rows) {
    const mu_gpu_model_desc *D = &m->d;
    const int E = D->n_embd, F = D->n_ff, nl = D->n_layer, hd = D->head_dim;
    cudaStream_t st = m->st;
    m->n_ev = 0;
    mark(m, prof, -1);
    float *h = m->h, *a = m->a; /* the last layer's FFN works on gathered rows */
    /* embeddings, unweighted norm */
    cu_get_rows(st, &m->tok_embd, m->in_d->tok, T, h);
    if (rows) k_put_rows<<<T, 256, 0, st>>>(h, m->rows_d, m->in_d->in_row, E);
    launch_pdl(k_rms, dim3(T), dim3(NT(T)), 0, st, (const float *)h, (const float *)NULL, h, E, D->eps,
               (mu_block_q8_K *)NULL, (size_t)0);
    int Tc = T, Tc_solo = t_solo; /* rows in use (the last layer's FFN: output rows only) */
    for (int il = 0; il < nl; il++) {
        const dlayer *L = &m->L[il];
        if (m->cap_n) cap_layer(m, st, il, T, h);
        if (il == 0 || !fuse_norms()) /* later layers' input norm: the previous layer's last k_post_add */
            launch_pdl(k_rms, dim3(T), dim3(NT(T)), 0, st, (const float *)h, L->attn_norm, a, E, D->eps,
                       pre_q8K(m, &L->wq, E), m->qa_stride);
        mark(m, prof, PH_NORMS);
        /* gate before v: a Q4_K_M file's v is often Q6_K, and only
         * neighbours of one type share a launch */
        const dtensor *w4[4] = {&L->wq, &L->wk, &L->wgate, &L->wv};
        float *y4[4] = {m->q, m->k, m->g, m->v};
        mm(m, a, T, T, t_solo, 4, w4, y4, pre_q8K(m, &L->wq, E) != NULL);
        mark(m, prof, PH_QKV);
        launch_pdl(k_qk, dim3(T, D->n_head + D->n_head_kv), dim3(32), 0, st, m->q, m->k, (const float *)m->v, L->q_norm,
                   L->k_norm, (const float *)m->rope_d, D->n_head, D->n_head_kv, hd, D->eps, m->swa[il],
                   (const int *)m->in_d->pos, (const int *)m->in_d->sess, (const cu_kv_layer *)(m->kv_d + (size_t)il * UB));
        if (stream) { /* k_qk is the layer's only KV write */
            cudaError_t e = cudaEventRecord(m->lev[il], st);
            if (e != cudaSuccess && m->rec_err == cudaSuccess) m->rec_err = e;
        }
        mark(m, prof, PH_ROPE);
        cu_attn_args aa = {T, D->n_head, D->n_head_kv, hd, D->n_swa, m->swa[il], m->q, m->g, a, m->in_d->pos,
                           m->in_d->batch, m->in_d->sess, m->kv_d + (size_t)il * UB, m->swa[il] ? swa_span : max_span, m->scores,
                           m->chunk_sums, m->attn_mode, m->lanes};
        cu_attention(st, &aa);
        mark(m, prof, PH_ATTN);
        const dtensor *wo = &L->wo;
        mm(m, a, T, T, t_solo, 1, &wo, &m->o, false);
        mark(m, prof, PH_WO);
        /* the FFN input, quantized here unless the last layer gathers its output rows first */
        mu_block_q8_K *qf = il == nl - 1 ? NULL : pre_q8K(m, &L->ffn_gate, E);
        launch_post_add(st, T, m->o, L->post_attn_norm, h, a, L->ffn_norm, E, D->post_eps, D->eps,
                   qf, m->qa_stride);
        if (il == nl - 1) {
            /* llama.cpp runs the last FFN on the output rows only */
            if (n_out == 0) break;
            k_gather<<<n_out, 256, 0, st>>>(h, m->h2, m->in_d->out_rows, E);
            k_gather<<<n_out, 256, 0, st>>>(a, m->a2, m->in_d->out_rows, E);
            h = m->h2;
            a = m->a2;
            Tc = n_out;
            Tc_solo = out_solo;
        }
        mark(m, prof, PH_NORMS);
        const dtensor *w2[2] = {&L->ffn_gate, &L->ffn_up};
        float *y2[2] = {m->f1, m->f2};
        mm(m, a, Tc, Tc, Tc_solo, 2, w2, y2, qf != NULL);
        mark(m, prof, PH_FFN_UP);
        const dtensor *wd = &L->ffn_down;
        /* prefill only: at decode sizes the two launches measured faster
         * (88.5 / 91.0 vs 87.6 / 88.0 tok/s at depth 512, docs/cuda.md;
         * no faster either with the quantization from registers) */
        mu_block_q8_K *qd = Tc > GRAPH_MAX_T ? pre_q8K(m, wd, F) : NULL;
        if (qd)
            launch_pdl(k_swiglu_q8K, dim3((unsigned)(((size_t)Tc * (F / 256) + 7) / 8)), dim3(256), 0, st, m->f1,
                       (const float *)m->f2, F, Tc, qd, m->qa_stride);
        else
            launch_pdl(k_swiglu, dim3((unsigned)(((size_t)Tc * F + 255) / 256)), dim3(256), 0, st, m->f1,
                       (const float *)m->f2, F, Tc);
        mark(m, prof, PH_NORMS);
        mm(m, m->f1, Tc, Tc, Tc_solo, 1, &wd, &m->o, qd != NULL);
        mark(m, prof, PH_FFN_DOWN);
        /* and the next layer's input norm (the last layer's rows go to the output norm) */
        const bool next = il + 1 < nl && fuse_norms();
        launch_post_add(st, Tc, m->o, L->post_ffw_norm, h, next ? a : (float *)NULL,
                   next ? (const float *)m->L[il + 1].attn_norm : (const float *)NULL, E, D->post_eps, D->eps,
                   next ? pre_q8K(m, &m->L[il + 1].wq, E) : (mu_block_q8_K *)NULL, m->qa_stride);
        mark(m, prof, PH_NORMS);
    }
    if (n_out > 0) {
        /* the final-norm state in a2 (h2 or h holds the rows): embeddings leave from there */
        k_rms<<<n_out, NT(n_out), 0, st>>>(h, m->output_norm, m->a2, E, D->eps, NULL, 0);
        const uint32_t dt = dev_dot_type(m->output.type);
        cu_quantize(st, dt, m->a2, n_out, E, m->qa, m->qa_stride);
        const int nb = cu_batch_rows(&m->output, n_out);
        cu_matmul(st, &m->output, m->qa, m->qa_stride, n_out, nb < out_solo ? nb : out_solo, m->lg, true,
                  D->logit_scale, D->softcap);
        k_best<<<n_out, 1024, 0, st>>>(m->lg, D->n_vocab, m->best_d);
    }
    mark(m, prof, PH_LOGITS);
}

static void graphs_clear(mu_gpu_model *m) {
    for (int i = 0; i < m->n_graphs; i++) cudaGraphExecDestroy(m->graphs[i].exec);
    m->n_graphs = 0;
}

/* Whether host memory p is page-locked (the device copies into it
 * directly). */
static bool host_pinned(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

/* The most tokens of a pass that replays a graph: GRAPH_MAX_T, or
 * MUSER_CUDA_GRAPH_T (up to 64: DFlash's verification blocks of up to 16
 * tokens on a small model, where a pass's launches cost more than its
 * kernels). The kernels a pass takes do not change with it. */
static int graph_t(void) {
    static int t = -1;
    if (t < 0) {
        const char *v = getenv("MUSER_CUDA_GRAPH_T");
        const int x = v ? atoi(v) : 0;
        t = x >= 1 && x <= 64 ? x : GRAPH_MAX_T;
    }
    return t;
}

/* Runs the pass from the graph captured for (T, n_out, the spans),
 * capturing it on first use. Scratch that moves (ensure_attn,
 * ensure_logits) clears the graphs. */
static int graph_launch(mu_gpu_model *m, int T, int n_out, int max_span, int swa_span, int t_solo, int out_solo,
                        mu_err *err) {
    for (int i = 0; i < m->n_graphs; i++) {
        pass_graph *g = &m->graphs[i];
        if (g->T == T && g->n_out == n_out && g->max_span == max_span && g->swa_span == swa_span && g->t_solo == t_solo &&
            g->out_solo == out_solo && g->attn_mode == m->attn_mode && g->cap_mask == m->cap_mask) {
            CU_CK(cudaGraphLaunch(g->exec, m->st), "graph launch");
            return 0;
        }
    }
    if (m->n_graphs == MAX_GRAPHS) graphs_clear(m);
    cudaGraph_t graph;
    CU_CK(cudaStreamBeginCapture(m->st, cudaStreamCaptureModeThreadLocal), "graph capture");
    launch_pass(m, T, n_out, max_span, swa_span, t_solo, out_solo, false, false, false);
    CU_CK(cudaStreamEndCapture(m->st, &graph), "graph capture");
    pass_graph *g = &m->graphs[m->n_graphs];
    cudaError_t e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    CU_CK(e, "graph instantiate");
    g->T = T;
    g->n_out = n_out;
    g->max_span = max_span;
    g->swa_span = swa_span;
    g->t_solo = t_solo;
    g->out_solo = out_solo;
    g->attn_mode = m->attn_mode;
    g->cap_mask = m->cap_mask;
    m->n_graphs++;
    CU_CK(cudaGraphLaunch(g->exec, m->st), "graph launch");
    return 0;
}

/* Layer streaming: with the whole pass launched, each layer's callback as
 * soon as its event completes, the device computing on meanwhile. */
static int stream_layers(mu_gpu_model *m, const mu_gpu_chunk *c, mu_err *err) {
    CU_CK(cudaGetLastError(), "kernel launch");
    CU_CK(m->rec_err, "layer event");
    CU_CK(cudaEventRecord(m->done, m->st), "pass event");
    mu_gpu_stream_stats *ss = c->stream_stats;
    m->stats = ss;
    m->open = true;
    for (int il = 0; il < m->d.n_layer; il++) {
        cudaError_t e = cudaEventSynchronize(m->lev[il]);
        if (e != cudaSuccess) {
            m->open = false;
            m->stats = NULL;
            return cu_cuda_fail(err, e, "layer event");
        }
        if (ss) {
            ss->calls++;
            ss->open++; /* by construction: the final synchronization comes after the loop */
            e = cudaEventQuery(m->done);
            if (e == cudaErrorNotReady) {
                ss->busy++;
                if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError(); /* a state, not an error */
            } else if (e != cudaSuccess) {
                m->open = false;
                m->stats = NULL;
                return cu_cuda_fail(err, e, "pass event");
            }
        }
        c->on_layer(c->on_layer_user, il);
    }
    m->open = false;
    m->stats = NULL;
    return 0;
}

static int p_forward(mu_gpu_model *m, const mu_gpu_chunk *c, mu_err *err) {
    const mu_gpu_model_desc *D = &m->d;
    const int T = c->T, nl = D->n_layer, hd = D->head_dim;
    if (m->open) return cu_fail(err, MU_E_STATE, "cuda: forward inside a streaming pass's layer callback");
    if (T <= 0 || T > UB) return cu_fail(err, MU_E_ARG, "cuda: chunk of %d tokens", T);
    CU_CK(cudaSetDevice(m->dev), "set device");
    int rc = ensure_logits(m, c->n_out > 0 ? c->n_out : 1, err);
    if (rc) return rc;
    /* inputs: tokens, positions, sessions and their layer tables */
    chunk_in *in = m->in_h;
    CU_CK(cudaStreamSynchronize(m->st), "sync"); /* the pinned inputs are free again */
    int n_sess = 0, n_out = 0;
    mu_gpu_sess *sl[UB];
    size_t max_span = 0;
    int swa_span = 0, n_rows = 0;
    for (int t = 0; t < T; t++) {
        in->tok[t] = c->tokens[t];
        in->pos[t] = c->pos[t];
        in->in_row[t] = c->in_rows && c->in_rows[t] ? n_rows++ : -1;
        if (t == 0 || c->sess[t] != c->sess[t - 1]) sl[n_sess++] = c->sess[t];
        in->sess[t] = n_sess - 1;
        if (c->out[t]) in->out_rows[n_out++] = t;
    }
    if (n_out != c->n_out) return cu_fail(err, MU_E_ARG, "cuda: chunk output count %d != %d", c->n_out, n_out);
    if (n_rows > 0) { /* input rows: staged in pinned memory, uploaded before the pass */
        const size_t rb = (size_t)D->n_embd * sizeof(float);
        if (!m->rows_d) {
            CU_CK(cudaMalloc((void **)&m->rows_d, (size_t)UB * rb), "input rows");
            cudaError_t e = cudaMallocHost((void **)&m->rows_h, (size_t)UB * rb);
            if (e != cudaSuccess) {
                cudaFree(m->rows_d);
                m->rows_d = NULL;
                m->rows_h = NULL;
                return cu_cuda_fail(err, e, "input rows");
            }
        }
        for (int t = 0; t < T; t++)
            if (in->in_row[t] >= 0) memcpy(m->rows_h + (size_t)in->in_row[t] * D->n_embd, c->in_rows[t], rb);
        CU_CK(cudaMemcpyAsync(m->rows_d, m->rows_h, (size_t)n_rows * rb, cudaMemcpyHostToDevice, m->st), "input rows");
    }
    for (int t = 0; t < T;) {
        int t1 = t + 1;
        while (t1 < T && in->sess[t1] == in->sess[t]) t1++;
        for (int i = t; i < t1; i++) in->batch[i] = t1 - t >= 2 && t < c->t_solo; /* solo: decode order */
        t = t1;
    }
    m->attn_mode = cu_attn_mode(T, in->batch, D->n_head, D->n_head_kv, hd);
    for (int s = 0; s < n_sess; s++)
        for (int il = 0; il < nl; il++) {
            cu_kv_layer *L = &m->kv_h[(size_t)il * UB + s];
            L->k = sl[s]->k[il];
            L->v = sl[s]->v[il];
            L->rows = sl[s]->rows[il];
            if ((size_t)L->rows > max_span) max_span = (size_t)L->rows;
            if (m->swa[il] && L->rows > swa_span) swa_span = L->rows;
        }
    rc = ensure_attn(m, (size_t)T * D->n_head * max_span, err);
    if (rc) return rc;
    CU_CK(cudaMemcpyAsync(m->in_d, in, sizeof *in, cudaMemcpyHostToDevice, m->st), "input upload");
    CU_CK(cudaMemcpyAsync(m->kv_d, m->kv_h, (size_t)nl * UB * sizeof(cu_kv_layer), cudaMemcpyHostToDevice, m->st),
       "input upload");
    if (c->rope)
        CU_CK(cudaMemcpyAsync(m->rope_d, c->rope, (size_t)T * hd * 4, cudaMemcpyHostToDevice, m->st), "input upload");
    cudaStream_t st = m->st;
    const bool prof = c->prof != NULL;
    /* solo rows (forward.c): tokens [t_solo, T) and the output rows among them */
    const int t_solo = c->t_solo < 0 ? 0 : c->t_solo > T ? T : c->t_solo;
    int out_solo = 0;
    for (int t = 0; t < t_solo; t++) out_solo += c->out[t];
    const bool stream = c->on_layer != NULL;
    rc = cap_prepare(m, c, err);
    if (rc) return rc;
    /* graphs: token-only passes, captures only with their layers in the key (cap_mask) */
    if (prof || stream || n_rows > 0 || (m->cap_n > 0 && !m->cap_mask) || T > graph_t()) {
        m->rec_err = cudaSuccess;
        launch_pass(m, T, n_out, (int)max_span, swa_span, t_solo, out_solo, prof, stream, n_rows > 0);
    } else {
        /* small batches (decode) replay a captured graph: the pass's
         * launches cost more than its kernels there */
        int rc2 = graph_launch(m, T, n_out, (int)max_span, swa_span, t_solo, out_solo, err);
        if (rc2) return rc2;
    }
    /* logits: rows in page-locked memory straight from the device, a copy
     * each (consecutive addresses may still be two allocations, which one
     * copy must not span), the others through lg_h */
    const size_t lrb = (size_t)D->n_vocab * 4;
    bool staged[UB];
    int n_staged = 0;
    for (int r = 0; r < n_out; r++) {
        float *dst = c->logits[r];
        staged[r] = dst && !host_pinned(dst);
        n_staged += staged[r];
        if (dst && !staged[r])
            CU_CK(cudaMemcpyAsync(dst, m->lg + (size_t)r * D->n_vocab, lrb, cudaMemcpyDeviceToHost, st),
               "logits download");
    }
    if (n_staged)
        CU_CK(cudaMemcpyAsync(m->lg_h, m->lg, (size_t)n_out * lrb, cudaMemcpyDeviceToHost, st), "logits download");
    if (c->best && n_out > 0)
        CU_CK(cudaMemcpyAsync(m->best_h, m->best_d, (size_t)n_out * 4, cudaMemcpyDeviceToHost, st), "logits download");
    if (m->cap_n > 0)
        CU_CK(cudaMemcpyAsync(m->cap_h, m->cap_d, (size_t)m->cap_n * D->n_embd * 4, cudaMemcpyDeviceToHost, st),
           "capture download");
    if (stream) {
        rc = stream_layers(m, c, err);
        if (rc) {
            cudaStreamSynchronize(st); /* nothing of the pass runs on after a failure */
            return rc;
        }
    }
    bool any_embd = false;
    for (int r = 0; c->embd && r < n_out; r++) any_embd |= c->embd[r] != NULL;
    if (any_embd) {
        CU_CK(cudaStreamSynchronize(st), "forward");
        for (int r = 0; r < n_out; r++)
            if (c->embd[r])
                CU_CK(cudaMemcpy(c->embd[r], m->a2 + (size_t)r * D->n_embd, (size_t)D->n_embd * 4, cudaMemcpyDeviceToHost),
                   "embedding download");
    }
    CU_CK(cudaGetLastError(), "kernel launch");
    CU_CK(cudaStreamSynchronize(st), "forward");
    for (int i = 1; prof && i < m->n_ev; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, m->ev[i - 1], m->ev[i]);
        c->prof[m->ev_ph[i]] += ms * 1e-3;
    }
    for (int r = 0; r < n_out; r++)
        if (staged[r]) memcpy(c->logits[r], m->lg_h + (size_t)r * D->n_vocab, lrb);
    for (int r = 0; c->best && r < n_out; r++)
        if (c->best[r]) *c->best[r] = m->best_h[r];
    for (int r = 0; r < m->cap_n; r++) memcpy(m->cap_dst[r], m->cap_h + (size_t)r * D->n_embd, (size_t)D->n_embd * 4);
    m->cap_n = 0;
    return 0;
}

/* ---- kernel tests ------------------------------------------------------ */

/* A throwaway model that owns one uploaded weight. */
static int test_weight(int dev, uint32_t type, int rows, int cols, const void *w, mu_gpu_model *m, dtensor *dt,
                       mu_err *err) {
    CU_CK(cudaSetDevice(dev), "set device");
    m->dev = dev;
    m->allocs = (void **)calloc(8, sizeof(void *));
    if (!m->allocs) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    const int gb = type == MU_T_Q8_0 ? 34 : type == MU_T_Q6_K ? 210 : dev_block_bytes(type); /* GGUF block bytes */
    const int be = dev_block_elems(type);
    if (!gb || cols % be) return cu_fail(err, MU_E_ARG, "cuda: test weight of type %u, %d columns", type, cols);
    const size_t bytes = (size_t)(cols / be) * gb * (size_t)rows;
    mu_gpu_tensor t = {w, type, cols, rows, bytes};
    uint8_t *stage = NULL;
    CU_CK(cudaMallocHost((void **)&stage, (size_t)4 << 20), "pinned staging");
    uint64_t done = 0;
    int rc = upload(m, &t, dt, stage, (size_t)4 << 20, &done, bytes, NULL, NULL, err);
    cudaFreeHost(stage);
    return rc;
}

/* The same matmul as a grouped launch (cu_matmul_n), each result equal to
 * y, the single launch's, bit for bit. At decode sizes (split): the
 * weight's rows split into two or three matrices of different row counts
 * (views of the one upload; rows start 4-byte aligned only, as the decode
 * kernels allow). At prefill sizes: the whole weight, its first quarter of
 * rows, the whole again (the wgmma kernel's second launch reads the first's
 * conversion of the activations, across the launch between). */
static int test_grouped(mu_gpu_model *m, const dtensor *dt, const void *qa, size_t stride, int T, int n_batch,
                        const float *y, bool split, mu_err *err) {
    const int rows = dt->ne1, a = (rows + 1) / 2, b = (rows - a) / 2;
    const int parts[3] = {split ? a : rows, split ? b : (rows + 3) / 4, split ? rows - a - b : rows};
    dtensor w[3];
    const dtensor *ws[3];
    float *ys[3], *dy2 = NULL;
    int n = 0, off = 0, roff[3], total = parts[0] + parts[1] + parts[2];
    int rc = dev_alloc(m, (size_t)T * total * 4, (void **)&dy2, "test", err);
    if (rc) return rc;
    for (int i = 0, yo = 0; i < 3; yo += parts[i], i++) {
        if (!parts[i]) continue;
        w[n] = *dt;
        w[n].d = (uint8_t *)dt->d + (size_t)off * dt->row_bytes;
        w[n].ne1 = parts[i];
        ws[n] = &w[n];
        ys[n] = dy2 + (size_t)T * yo; /* [T][parts[i]] */
        roff[n] = off;
        if (split) off += parts[i];
        n++;
    }
    cu_matmul_n(0, ws, n, qa, stride, T, n_batch, ys);
    float *h = (float *)malloc((size_t)T * total * 4);
    if (!h) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    cudaError_t e = cudaMemcpy(h, dy2, (size_t)T * total * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) rc = cu_cuda_fail(err, e, "test grouped matmul");
    for (int i = 0; i < n && !rc; i++) {
        const float *hi = h + (ys[i] - dy2);
        for (int t = 0; t < T && !rc; t++)
            for (int r = 0; r < ws[i]->ne1 && !rc; r++)
                if (memcmp(&hi[(size_t)t * ws[i]->ne1 + r], &y[(size_t)t * rows + roff[i] + r], 4))
                    rc = cu_fail(err, MU_E_STATE,
                                 "cuda: grouped launch of %d matrices differs from one launch (matrix %d, token %d, row %d)", n,
                                 i, t, roff[i] + r);
    }
    free(h);
    return rc;
}

/* One matmul of w on x quantized as forward's activations are. With reps
 * 0 (the kernel test): y gets the result, and the grouped launches
 * (test_grouped) must give the same. With reps > 0 (benchmarks): one untimed
 * launch, then reps launches each timed between two events into ms. */
static int run_matmul(int dev, uint32_t type, int rows, int cols, int T, int n_batch, const void *w, const float *x,
                      float *y, int reps, float *ms, mu_err *err) {
    mu_gpu_model m = {0};
    dtensor dt;
    int rc = test_weight(dev, type, rows, cols, w, &m, &dt, err);
    float *dx = NULL, *dy = NULL;
    void *qa = NULL;
    const size_t stride = ((size_t)cols * 4 + 255) & ~(size_t)255;
    cudaEvent_t ev[2] = {NULL, NULL};
    if (!rc && n_batch < 0) n_batch = cu_batch_rows(&dt, T); /* as forward's matmul of T rows */
    if (!rc) rc = dev_alloc(&m, (size_t)T * cols * 4, (void **)&dx, "test", err);
    if (!rc) rc = dev_alloc(&m, (size_t)T * rows * 4, (void **)&dy, "test", err);
    if (!rc) rc = dev_alloc(&m, (size_t)T * stride, &qa, "test", err);
    if (!rc && reps > 0 && (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess))
        rc = cu_fail(err, MU_E_STATE, "cuda: no events");
    if (!rc) {
        cudaMemcpy(dx, x, (size_t)T * cols * 4, cudaMemcpyHostToDevice);
        cu_quantize(0, dev_dot_type(type), dx, T, cols, qa, stride);
        cu_matmul(0, &dt, qa, stride, T, n_batch, dy, false, 0, 0);
        if (reps == 0) {
            cudaError_t e = cudaMemcpy(y, dy, (size_t)T * rows * 4, cudaMemcpyDeviceToHost);
            if (e != cudaSuccess) rc = cu_cuda_fail(err, e, "test matmul");
        }
        for (int i = 0; i < reps && !rc; i++) {
            cudaEventRecord(ev[0], 0);
            cu_matmul(0, &dt, qa, stride, T, n_batch, dy, false, 0, 0);
            cudaEventRecord(ev[1], 0);
            cudaError_t e = cudaEventSynchronize(ev[1]);
            if (e == cudaSuccess) e = cudaGetLastError();
            if (e == cudaSuccess) e = cudaEventElapsedTime(&ms[i], ev[0], ev[1]);
            if (e != cudaSuccess) rc = cu_cuda_fail(err, e, "bench matmul");
        }
    }
    if (!rc && reps == 0 && rows >= 3) rc = test_grouped(&m, &dt, qa, stride, T, n_batch, y, T <= 8, err);
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    for (int i = 0; i < m.n_allocs; i++) cudaFree(m.allocs[i]);
    free(m.allocs);
    return rc;
}

static int p_test_matmul(int dev, uint32_t type, int rows, int cols, int T, int n_batch, const void *w, const float *x,
                         float *y, mu_err *err) {
    return run_matmul(dev, type, rows, cols, T, n_batch, w, x, y, 0, NULL, err);
}

static int p_bench_matmul(int dev, uint32_t type, int rows, int cols, int T, int n_batch, const void *w,
                          const float *x, int reps, float *ms, mu_err *err) {
    if (reps < 1) return cu_fail(err, MU_E_ARG, "cuda: bench matmul of %d launches", reps);
    return run_matmul(dev, type, rows, cols, T, n_batch, w, x, NULL, reps, ms, err); /* n_batch < 0: forward's */
}

/* The copy rate, the physical limit the decode matmuls are judged against:
 * cudaMemcpyAsync of bytes from one device buffer to another, one untimed
 * copy, then reps copies each timed between two events into ms. */
static int p_bench_copy(int dev, size_t bytes, int reps, float *ms, mu_err *err) {
    if (reps < 1 || bytes == 0) return cu_fail(err, MU_E_ARG, "cuda: bench copy of %zu bytes, %d times", bytes, reps);
    CU_CK(cudaSetDevice(dev), "set device");
    mu_gpu_model m = {0};
    m.dev = dev;
    m.allocs = (void **)calloc(2, sizeof(void *));
    if (!m.allocs) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    void *a = NULL, *b = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    int rc = dev_alloc(&m, bytes, &a, "copy", err);
    if (!rc) rc = dev_alloc(&m, bytes, &b, "copy", err);
    if (!rc && (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess))
        rc = cu_fail(err, MU_E_STATE, "cuda: no events");
    if (!rc) {
        cudaMemsetAsync(a, 0x5a, bytes, 0);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
    }
    for (int i = 0; i < reps && !rc; i++) {
        cudaEventRecord(ev[0], 0);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
        cudaEventRecord(ev[1], 0);
        cudaError_t e = cudaEventSynchronize(ev[1]);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms[i], ev[0], ev[1]);
        if (e != cudaSuccess) rc = cu_cuda_fail(err, e, "bench copy");
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    for (int i = 0; i < m.n_allocs; i++) cudaFree(m.allocs[i]);
    free(m.allocs);
    return rc;
}

static int p_test_get_rows(int dev, uint32_t type, int rows, int cols, const void *w, const int32_t *ids, int n,
                           float *y, mu_err *err) {
    mu_gpu_model m = {0};
    dtensor dt;
    int rc = test_weight(dev, type, rows, cols, w, &m, &dt, err);
    int32_t *di = NULL;
    float *dy = NULL;
    if (!rc) rc = dev_alloc(&m, (size_t)n * 4, (void **)&di, "test", err);
    if (!rc) rc = dev_alloc(&m, (size_t)n * cols * 4, (void **)&dy, "test", err);
    if (!rc) {
        cudaMemcpy(di, ids, (size_t)n * 4, cudaMemcpyHostToDevice);
        cu_get_rows(0, &dt, di, n, dy);
        cudaError_t e = cudaMemcpy(y, dy, (size_t)n * cols * 4, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = cu_cuda_fail(err, e, "test get_rows");
    }
    for (int i = 0; i < m.n_allocs; i++) cudaFree(m.allocs[i]);
    free(m.allocs);
    return rc;
}

static int p_test_attention(int dev, const mu_gpu_attn_case *c, float *out_prefill, float *out_rows, mu_err *err) {
    CU_CK(cudaSetDevice(dev), "set device");
    mu_gpu_model m = {0};
    m.dev = dev;
    m.allocs = (void **)calloc(16 + 2 * (size_t)(c->n_sess > 0 ? c->n_sess : 0), sizeof(void *));
    if (!m.allocs) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    const int T = c->T, nq = c->n_head * c->head_dim, n_kv = c->n_head_kv * c->head_dim;
    uint8_t *batch = (uint8_t *)malloc(T > 0 ? T : 1);
    cu_kv_layer *kvh = (cu_kv_layer *)calloc(c->n_sess > 0 ? c->n_sess : 1, sizeof(cu_kv_layer));
    int rc = batch && kvh ? 0 : cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    int max_span = 0;
    for (int i = 0; i < c->n_sess; i++) max_span = c->rows[i] > max_span ? c->rows[i] : max_span;
    /* as the engine marks them: a token with others of its session in the chunk is a batch row */
    for (int t = 0; t < T && batch; t++) {
        batch[t] = 0;
        for (int u = 0; u < T; u++) batch[t] |= u != t && c->sess[u] == c->sess[t];
    }
    const int mode = batch ? cu_attn_mode(T, batch, c->n_head, c->n_head_kv, c->head_dim) : CU_ATTN_ROWS;
    if (!rc && mode == CU_ATTN_ROWS)
        rc = cu_fail(err, MU_E_ARG, "cuda: test attention: not a case of the prefill or decode kernels");
    float *q = NULL, *gate = NULL, *out = NULL, *scores = NULL, *cs = NULL, *lanes = NULL;
    int *pos = NULL, *sess = NULL;
    uint8_t *bd = NULL;
    cu_kv_layer *kvd = NULL;
    const size_t qb = (size_t)T * nq * 4, sb = (size_t)T * c->n_head * max_span;
    if (!rc) rc = dev_alloc(&m, qb, (void **)&q, "test", err);
    if (!rc) rc = dev_alloc(&m, qb, (void **)&gate, "test", err);
    if (!rc) rc = dev_alloc(&m, qb, (void **)&out, "test", err);
    if (!rc) rc = dev_alloc(&m, sb * 4, (void **)&scores, "test", err);
    if (!rc) rc = dev_alloc(&m, (sb / 16 + 16) * 4, (void **)&cs, "test", err);
    if (!rc && mode == CU_ATTN_DECODE)
        rc = dev_alloc(&m, (size_t)T * c->n_head * 64 * 128 * 4, (void **)&lanes, "test", err);
    if (!rc) rc = dev_alloc(&m, (size_t)T * 4, (void **)&pos, "test", err);
    if (!rc) rc = dev_alloc(&m, (size_t)T * 4, (void **)&sess, "test", err);
    if (!rc) rc = dev_alloc(&m, (size_t)T, (void **)&bd, "test", err);
    if (!rc) rc = dev_alloc(&m, (size_t)c->n_sess * sizeof(cu_kv_layer), (void **)&kvd, "test", err);
    for (int i = 0; i < c->n_sess && !rc; i++) {
        const size_t b = (size_t)c->rows[i] * n_kv * 2;
        kvh[i].rows = c->rows[i];
        rc = dev_alloc(&m, b, (void **)&kvh[i].k, "test", err);
        if (!rc) rc = dev_alloc(&m, b, (void **)&kvh[i].v, "test", err);
        if (!rc) cudaMemcpy((void *)kvh[i].k, c->k[i], b, cudaMemcpyHostToDevice);
        if (!rc) cudaMemcpy((void *)kvh[i].v, c->v[i], b, cudaMemcpyHostToDevice);
    }
    if (!rc) {
        cudaMemcpy(q, c->q, qb, cudaMemcpyHostToDevice);
        cudaMemcpy(gate, c->gate, qb, cudaMemcpyHostToDevice);
        cudaMemcpy(pos, c->pos, (size_t)T * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(sess, c->sess, (size_t)T * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(bd, batch, (size_t)T, cudaMemcpyHostToDevice);
        cudaMemcpy(kvd, kvh, (size_t)c->n_sess * sizeof(cu_kv_layer), cudaMemcpyHostToDevice);
        cu_attn_args aa = {T, c->n_head, c->n_head_kv, c->head_dim, c->n_swa, c->swa, q, gate, out, pos, bd, sess, kvd,
                           max_span, scores, cs, mode, lanes};
        float *dst[2] = {out_prefill, out_rows};
        for (int pass = 0; pass < 2 && !rc; pass++) {
            aa.mode = pass ? CU_ATTN_ROWS : mode;
            cudaMemset(out, 0xff, qb); /* NaN: an output a kernel misses shows */
            cu_attention(0, &aa);
            cudaError_t e = cudaMemcpy(dst[pass], out, qb, cudaMemcpyDeviceToHost);
            if (e != cudaSuccess) rc = cu_cuda_fail(err, e, "test attention");
        }
    }
    for (int i = 0; i < m.n_allocs; i++) cudaFree(m.allocs[i]);
    free(m.allocs);
    free(batch);
    free(kvh);
    return rc;
}

static int p_test_best(int dev, const float *rows, int n_rows, int n, int32_t *best, mu_err *err) {
    CU_CK(cudaSetDevice(dev), "set device");
    mu_gpu_model m = {0};
    m.dev = dev;
    m.allocs = (void **)calloc(2, sizeof(void *));
    if (!m.allocs) return cu_fail(err, MU_E_NOMEM, "cuda: out of memory");
    float *dr = NULL;
    int32_t *db = NULL;
    const int off = n % 2; /* odd rows: every other row starts off a 16-byte boundary */
    int rc = dev_alloc(&m, ((size_t)n_rows * n + 1) * 4, (void **)&dr, "test", err);
    if (!rc) rc = dev_alloc(&m, (size_t)n_rows * 4, (void **)&db, "test", err);
    if (!rc) {
        cudaMemcpy(dr + off, rows, (size_t)n_rows * n * 4, cudaMemcpyHostToDevice);
        k_best<<<n_rows, 1024>>>(dr + off, n, db);
        cudaError_t e = cudaMemcpy(best, db, (size_t)n_rows * 4, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = cu_cuda_fail(err, e, "test best");
    }
    for (int i = 0; i < m.n_allocs; i++) cudaFree(m.allocs[i]);
    free(m.allocs);
    return rc;
}

/* Page-locked and portable (any device's copies may use it), zeroed. */
static void *p_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: the caller falls back to pageable memory */
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void p_host_free(void *p) { cudaFreeHost(p); }

static const mu_gpu_plugin PLUGIN = {
    MU_GPU_PLUGIN_ABI, "cuda", p_count,  p_probe,  p_model_new,     p_model_free,   p_sess_new,
    p_sess_free,       p_forward, p_kv_get, p_kv_put, p_test_matmul, p_test_get_rows, p_test_attention,
    cu_vit_new,        cu_vit_free, cu_vit_encode, cu_vit_test_gemm, cu_vit_test_attn,
    p_sess_copy,       p_host_alloc,  p_host_free,   p_test_best,
    cu_draft_new,      cu_draft_free, cu_draft_set_head, cu_dseq_new, cu_dseq_free, cu_dseq_inject,
    cu_dseq_truncate,  cu_dseq_pass,  cu_dseq_head,  p_bench_matmul, p_bench_copy,
};

extern "C" __attribute__((visibility("default"))) const mu_gpu_plugin *mu_gpu_plugin_v1(void) { return &PLUGIN; }
