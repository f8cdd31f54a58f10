/* gpu_cuda_draft.cu: the DFlash drafter on the device (gpu.h mu_gpu_draft_*,
 * mu_gpu_dseq_*; src/engine/draft.c calls it when its target runs on CUDA,
 * and is the CPU drafter this one follows step for step).
 * Owns: the drafter's weights on the device, in their own types, uploaded
 * once (the head apart, replaced when the shortlist changes); per sequence
 * the K and V rows of every position (F32, row-major, [n_layer][n_ctx][n_kv])
 * and a presence byte per position; the injection (fc, the encoder norm,
 * then each layer's k and v with the k norm and NeoX RoPE); the drafting
 * pass over a block; the head and each row's best.
 * Does not: decide what to draft (src/gen/sched.c), embed the block's
 * tokens or compute RoPE's angles (the host sends the embedded rows and the
 * cos/sin tables draft.c computes), or gather pending positions (draft.c).
 * Numerics: the matmuls are cu_matmul's with every row rounding as vec_dot
 * (the CPU drafter's multi-row dots give each row those bits too), the
 * norms and SwiGLU the forward's kernels, the softmax the CPU drafter's
 * (weights rounded to F16); the head norms, RoPE and the attention's dot
 * products and sums are plain float code in an order of their own, not
 * the CPU drafter's: a draft only proposes tokens, the target decides
 * every one. One stream per drafter; the caller serializes the
 * calls on one drafter and its sequences (the engine thread), as for the
 * CPU drafter, whose scratch is shared the same way. */
#include <stdlib.h>
#include <string.h>

#include "cuda.cuh"

#define DR MU_GPU_DRAFT_ROWS

typedef struct {
    dtensor wq, wk, wv, wo, gate, up, down;
    const float *attn_norm, *q_norm, *k_norm, *attn_post, *ffn_norm, *ffn_post;
    bool swa;
} d_layer;

struct mu_gpu_draft {
    int dev;
    cudaStream_t st;
    int n_layer, E, n_ff, n_head, n_head_kv, hd, block, n_feat, n_swa, n_q, n_kv, R;
    float eps, kq_scale;
    bool causal;
    d_layer *L;
    dtensor fc, head;
    const float *enc_norm, *out_norm;
    void *head_mem;   /* the head's weights (set_head replaces them) */
    float *lg;        /* [block - 1][head rows]: the head's scores */
    void **allocs;    /* everything else, freed with the drafter */
    int n_allocs, cap_allocs;
    /* scratch of R rows */
    float *x, *a, *at, *q, *k, *v, *o, *f1, *f2, *g, *feat, *cs, *sn;
    uint8_t *qa;
    size_t qa_stride;
    int32_t *best;
    int *prm;          /* a pass's position and context rows (kd_attn reads them) */
    /* page-locked staging of a pass's inputs (a captured graph copies from
     * it): the block's rows, RoPE's tables, prm */
    float *hx, *hcs, *hsn;
    int *hprm;
    bool graphs;       /* passes replay a graph per sequence (MUSER_CUDA_DRAFT_GRAPH=1) */
};

struct mu_gpu_dseq {
    mu_gpu_draft *d;
    int n_ctx;
    float *kc, *vc;    /* [n_layer][n_ctx][n_kv] */
    uint8_t *present;  /* [n_ctx] */
    float *hid;        /* [block - 1][E]: the last pass's draft rows after the final norm */
    int n_hid;
    cudaGraphExec_t exec; /* the pass, captured at its first run (graphs on) */
};

/* ---- kernels ------------------------------------------------------------ */

/* The sum of every thread's v over the block, in double (blockDim a
 * multiple of 32, at most 1024). */
__device__ double d_block_sum(double v) {
    __shared__ double part[32];
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    double tot = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++) tot += part[w];
    return tot;
}

/* Per head of rows r0 + blockIdx.x: the head's RMS norm (weights nw), then
 * NeoX RoPE (pairs i, i + hd/2) with table row r0 + blockIdx.x of cs, sn.
 * One block of hd threads a (row, head). */
__global__ void kd_qk(float *x, int stride, int hd, const float *nw, float eps, const float *cs, const float *sn,
                      int r0) {
    extern __shared__ float sv[];
    const int t = r0 + blockIdx.x, i = threadIdx.x, h2 = hd / 2;
    float *row = x + (size_t)t * stride + (size_t)blockIdx.y * hd;
    const float xi = row[i];
    const double sum = d_block_sum((double)(xi * xi));
    const float scale = 1.0f / sqrtf((float)(sum / hd) + eps);
    sv[i] = xi * scale * nw[i];
    __syncthreads();
    if (i < h2) {
        const float c = cs[(size_t)t * h2 + i], s = sn[(size_t)t * h2 + i], x0 = sv[i], x1 = sv[i + h2];
        row[i] = x0 * c - x1 * s;
        row[i + h2] = x0 * s + x1 * c;
    }
}

/* Attention of block row r0 + blockIdx.x, query head blockIdx.y, over the
 * present context rows of positions < n_ctx_rows (kc, vc of this layer) and
 * the block's rows (kb, vb; row b at position pos + b), as the CPU drafter
 * masks them: a block row is hidden only when causal and later than the
 * query, any row when a sliding layer's window (n_swa > 0) excludes it.
 * The softmax is the CPU drafter's (the kernel table's softmax_f16): the
 * row's largest score, ggml's expf of each score minus it, their sum in
 * double, each weight times the sum's inverse rounded to F16; three passes
 * over the keys (largest, sum, weighted values). A thread computes a key's
 * whole dot product (the query in shared memory, the key row read as
 * float4s: every thread's loads are independent, so a block keeps many in
 * flight); the third pass stages a chunk of weights and value rows in
 * shared memory, then each thread sums one value element over a share of
 * the chunk's keys. Only the order of the dot products and of the sums
 * differs from the CPU's. A row always sees itself, so the sum is
 * positive. */
#define ATTN_THREADS 256
template <int HD> struct d_keys {
    const float *kb, *vb, *kc, *vc;
    const uint8_t *present;
    int n_kv, n_ctx_rows, pos, t, g, n_swa;
    bool causal;
    /* key j's K and V rows, or false when the query does not see it */
    __device__ __forceinline__ bool row(int j, const float **kr, const float **vr) const {
        int kpos;
        if (j < n_ctx_rows) {
            if (!present[j]) return false;
            kpos = j;
            *kr = kc + (size_t)j * n_kv + (size_t)g * HD;
            *vr = vc + (size_t)j * n_kv + (size_t)g * HD;
        } else {
            const int b = j - n_ctx_rows;
            if (causal && b > t) return false;
            kpos = pos + b;
            *kr = kb + (size_t)b * n_kv + (size_t)g * HD;
            *vr = vb + (size_t)b * n_kv + (size_t)g * HD;
        }
        return !(n_swa > 0 && pos + t - kpos >= n_swa);
    }
};

/* the largest v of the block's threads (blockDim ATTN_THREADS) */
__device__ float d_block_max(float v, float *part) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    float m = part[0];
    for (int w = 1; w < ATTN_THREADS / 32; w++) m = fmaxf(m, part[w]);
    return m;
}

template <int HD>
__global__ void __launch_bounds__(ATTN_THREADS)
    kd_attn(const float *q, int n_q, const float *kb, const float *vb, int n_kv, const float *kc, const float *vc,
            const uint8_t *present, const int *prm, int T, int r0, int gq, float kq_scale, bool causal, int n_swa,
            float *out) {
    constexpr int G = ATTN_THREADS / HD; /* threads an output element in the third pass */
    const int pos = prm[0], n_ctx_rows = prm[1]; /* the pass's, uploaded before it (a graph replays them) */
    const int t = r0 + blockIdx.x, h = blockIdx.y, tid = threadIdx.x, L = n_ctx_rows + T;
    const d_keys<HD> K = {kb, vb, kc, vc, present, n_kv, n_ctx_rows, pos, t, h / gq, n_swa, causal};
    __shared__ float4 s_q[HD / 4];
    __shared__ float s_mx[ATTN_THREADS / 32];
    __shared__ float s_p[ATTN_THREADS];
    __shared__ const float *s_v[ATTN_THREADS];
    __shared__ float s_acc[G][HD];
    if (tid < HD / 4) s_q[tid] = ((const float4 *)(q + (size_t)t * n_q + (size_t)h * HD))[tid];
    __syncthreads();
    auto score = [&](const float *kr) {
        float dot = 0;
#pragma unroll 16
        for (int i = 0; i < HD / 4; i++) {
            const float4 k4 = ((const float4 *)kr)[i], q4 = s_q[i];
            dot = fmaf(q4.x, k4.x, dot);
            dot = fmaf(q4.y, k4.y, dot);
            dot = fmaf(q4.z, k4.z, dot);
            dot = fmaf(q4.w, k4.w, dot);
        }
        return dot * kq_scale;
    };
    const float *kr, *vr;
    float m = -INFINITY;
    for (int j = tid; j < L; j += ATTN_THREADS)
        if (K.row(j, &kr, &vr)) m = fmaxf(m, score(kr));
    const float M = d_block_max(m, s_mx);
    double s = 0;
    for (int j = tid; j < L; j += ATTN_THREADS)
        if (K.row(j, &kr, &vr)) s += (double)expf_ggml(score(kr) - M);
    const float inv = (float)(1.0 / d_block_sum(s));
    const int e = tid % HD, gi = tid / HD;
    float acc = 0;
    for (int j0 = 0; j0 < L; j0 += ATTN_THREADS) {
        const int j = j0 + tid;
        const bool on = j < L && K.row(j, &kr, &vr);
        s_p[tid] = on ? f16_round(expf_ggml(score(kr) - M) * inv) : 0;
        s_v[tid] = on ? vr : NULL;
        __syncthreads();
        const int n = L - j0 < ATTN_THREADS ? L - j0 : ATTN_THREADS;
        for (int u = gi; u < n; u += G)
            if (s_v[u]) acc = fmaf(s_p[u], s_v[u][e], acc);
        __syncthreads(); /* the chunk's weights are read before the next chunk's */
    }
    s_acc[gi][e] = acc;
    __syncthreads();
    if (tid < HD) {
        float o = 0;
        for (int u = 0; u < G; u++) o += s_acc[u][tid];
        out[(size_t)t * n_q + (size_t)h * HD + tid] = o;
    }
}

/* x[i] += o[i] for i < n */
__global__ void kd_add(float *x, const float *o, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += o[i];
}

/* ---- helpers ------------------------------------------------------------ */

static int d_track(mu_gpu_draft *d, void *p) {
    if (d->n_allocs == d->cap_allocs) {
        const int cap = d->cap_allocs ? 2 * d->cap_allocs : 64;
        void **a = (void **)realloc(d->allocs, (size_t)cap * sizeof *a);
        if (!a) return -1;
        d->allocs = a;
        d->cap_allocs = cap;
    }
    d->allocs[d->n_allocs++] = p;
    return 0;
}

static int d_malloc(size_t n, void **out, const char *what, mu_err *err) {
    return cu_malloc(n, out, "cuda drafter", what, err);
}

/* d_malloc, freed with the drafter */
static int d_alloc(mu_gpu_draft *d, size_t n, void **out, const char *what, mu_err *err) {
    int rc = d_malloc(n, out, what, err);
    if (rc) return rc;
    if (d_track(d, *out)) {
        cudaFree(*out);
        return cu_fail(err, MU_E_NOMEM, "cuda drafter: out of host memory");
    }
    return 0;
}

/* A weight into *mem (cudaMalloc'd here), in the device layout. */
static int d_weight(const mu_gpu_tensor *t, dtensor *out, void **mem, mu_err *err) {
    const int be = dev_block_elems(t->type), bb = dev_block_bytes(t->type), sb = src_block_bytes(t->type);
    if (!bb || t->ne0 % be)
        return cu_fail(err, MU_E_UNSUPPORTED, "cuda drafter: weight type %u is not supported on the GPU", t->type);
    out->type = t->type;
    out->ne0 = (int)t->ne0;
    out->ne1 = (int)t->ne1;
    out->row_bytes = (size_t)(t->ne0 / be) * bb;
    const size_t nblk = (size_t)(t->ne0 / be) * (size_t)t->ne1;
    /* 32 bytes more: the decode ring copies whole 16-byte words around a row's blocks */
    int rc = d_malloc(out->row_bytes * (size_t)t->ne1 + 32, mem, "weights", err);
    if (rc) return rc;
    out->d = *mem;
    const size_t per = ((size_t)4 << 20) / (size_t)bb;
    uint8_t *stage = (uint8_t *)malloc((nblk < per ? nblk : per) * bb);
    if (!stage) return cu_fail(err, MU_E_NOMEM, "cuda drafter: out of host memory");
    for (size_t b0 = 0; b0 < nblk && !rc; b0 += per) {
        const size_t nb = nblk - b0 < per ? nblk - b0 : per;
        cu_dev_blocks(t->type, (const uint8_t *)t->data + b0 * sb, nb, stage);
        cudaError_t e = cudaMemcpy((uint8_t *)*mem + b0 * bb, stage, nb * bb, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) rc = cu_cuda_fail_in(err, e, "cuda drafter", "weight upload");
    }
    free(stage);
    return rc;
}

static int d_matrix(mu_gpu_draft *d, const mu_gpu_tensor *t, dtensor *out, mu_err *err) {
    void *mem = NULL;
    int rc = d_weight(t, out, &mem, err);
    if (mem && d_track(d, mem)) {
        cudaFree(mem);
        return cu_fail(err, MU_E_NOMEM, "cuda drafter: out of host memory");
    }
    return rc;
}

/* An F32 vector, or NULL when t has no data (an absent post norm). */
static int d_vector(mu_gpu_draft *d, const mu_gpu_tensor *t, const float **out, mu_err *err) {
    *out = NULL;
    if (!t->data) return 0;
    if (t->type != MU_T_F32)
        return cu_fail(err, MU_E_MODEL, "cuda drafter: norm weights must be F32 (type %u)", t->type);
    void *p;
    int rc = d_alloc(d, t->bytes, &p, "norm weights", err);
    if (rc) return rc;
    CU_CK(cudaMemcpy(p, t->data, t->bytes, cudaMemcpyHostToDevice), "norm upload");
    *out = (const float *)p;
    return 0;
}

/* y [T][rows] = x [T][cols] W^T, every row rounding as the CPU's vec_dot;
 * d_mm2 runs two matrices over one x (quantized once when their dot types
 * agree) */
static void d_mm(mu_gpu_draft *d, const float *x, int T, const dtensor *w, float *y) {
    cu_quantize(d->st, dev_dot_type(w->type), x, T, w->ne0, d->qa, d->qa_stride);
    cu_matmul(d->st, w, d->qa, d->qa_stride, T, 0, y, false, 0, 0);
}
static void d_mm2(mu_gpu_draft *d, const float *x, int T, const dtensor *w1, float *y1, const dtensor *w2, float *y2) {
    if (dev_dot_type(w1->type) != dev_dot_type(w2->type)) {
        d_mm(d, x, T, w1, y1);
        d_mm(d, x, T, w2, y2);
        return;
    }
    cu_quantize(d->st, dev_dot_type(w1->type), x, T, w1->ne0, d->qa, d->qa_stride);
    cu_matmul(d->st, w1, d->qa, d->qa_stride, T, 0, y1, false, 0, 0);
    cu_matmul(d->st, w2, d->qa, d->qa_stride, T, 0, y2, false, 0, 0);
}

/* the per-head norm and RoPE of rows [r0, r0 + n) of x (heads of hd) */
static void d_qk(mu_gpu_draft *d, float *x, int stride, int heads, const float *nw, int r0, int n) {
    if (n > 0)
        kd_qk<<<dim3(n, heads), d->hd, d->hd * sizeof(float), d->st>>>(x, stride, d->hd, nw, d->eps, d->cs, d->sn, r0);
}

/* x[r] += o[r] for rows [r0, r0 + n), o first through the post norm pw
 * when there is one */
static void d_residual(mu_gpu_draft *d, const float *pw, int r0, int n) {
    float *o = d->o + (size_t)r0 * d->E;
    if (pw) cu_rms_rows(d->st, o, pw, o, n, d->E, d->eps);
    const size_t tot = (size_t)n * d->E;
    kd_add<<<(unsigned)((tot + 255) / 256), 256, 0, d->st>>>(d->x + (size_t)r0 * d->E, o, tot);
}

static int d_upload(mu_gpu_draft *d, void *dst, const void *src, size_t bytes, mu_err *err) {
    CU_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->st), "drafter upload");
    return 0;
}

/* ---- the drafter -------------------------------------------------------- */

void cu_draft_free(mu_gpu_draft *d) {
    if (!d) return;
    cudaSetDevice(d->dev);
    if (d->st) cudaStreamSynchronize(d->st);
    for (int i = 0; i < d->n_allocs; i++) cudaFree(d->allocs[i]);
    cudaFree(d->head_mem);
    cudaFree(d->lg);
    cudaFreeHost(d->hx);
    cudaFreeHost(d->hcs);
    cudaFreeHost(d->hsn);
    cudaFreeHost(d->hprm);
    if (d->st) cu_mm_wg_release(d->st), cudaStreamDestroy(d->st);
    free(d->allocs);
    free(d->L);
    free(d);
}

static int draft_new(int dev, const mu_gpu_draft_desc *D, mu_gpu_draft *d, mu_err *err) {
    d->dev = dev;
    d->n_layer = D->n_layer;
    d->E = D->n_embd;
    d->n_ff = D->n_ff;
    d->n_head = D->n_head;
    d->n_head_kv = D->n_head_kv;
    d->hd = D->head_dim;
    d->block = D->block_size;
    d->n_feat = D->n_feat;
    d->n_swa = D->n_swa;
    d->n_q = D->n_head * D->head_dim;
    d->n_kv = D->n_head_kv * D->head_dim;
    d->eps = D->eps;
    d->kq_scale = D->kq_scale;
    d->causal = D->causal;
    d->R = D->block_size > DR ? D->block_size : DR;
    CU_CK(cudaSetDevice(dev), "set device");
    CU_CK(cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking), "stream");
    if (!(d->L = (d_layer *)calloc((size_t)D->n_layer, sizeof *d->L)))
        return cu_fail(err, MU_E_NOMEM, "cuda drafter: out of host memory");
    int rc;
    if ((rc = d_matrix(d, &D->fc, &d->fc, err)) || (rc = d_vector(d, &D->enc_norm, &d->enc_norm, err)) ||
        (rc = d_vector(d, &D->output_norm, &d->out_norm, err)))
        return rc;
    for (int il = 0; il < D->n_layer; il++) {
        const mu_gpu_draft_layer *S = &D->layers[il];
        d_layer *L = &d->L[il];
        L->swa = S->swa;
        if ((rc = d_matrix(d, &S->wq, &L->wq, err)) || (rc = d_matrix(d, &S->wk, &L->wk, err)) ||
            (rc = d_matrix(d, &S->wv, &L->wv, err)) || (rc = d_matrix(d, &S->wo, &L->wo, err)) ||
            (rc = d_matrix(d, &S->ffn_gate, &L->gate, err)) || (rc = d_matrix(d, &S->ffn_up, &L->up, err)) ||
            (rc = d_matrix(d, &S->ffn_down, &L->down, err)) || (rc = d_vector(d, &S->attn_norm, &L->attn_norm, err)) ||
            (rc = d_vector(d, &S->q_norm, &L->q_norm, err)) || (rc = d_vector(d, &S->k_norm, &L->k_norm, err)) ||
            (rc = d_vector(d, &S->attn_post_norm, &L->attn_post, err)) ||
            (rc = d_vector(d, &S->ffn_norm, &L->ffn_norm, err)) ||
            (rc = d_vector(d, &S->ffn_post_norm, &L->ffn_post, err)))
            return rc;
        if (!L->attn_norm || !L->q_norm || !L->k_norm || !L->ffn_norm)
            return cu_fail(err, MU_E_MODEL, "cuda drafter: layer %d lacks a norm", il);
    }
    if (!d->enc_norm || !d->out_norm) return cu_fail(err, MU_E_MODEL, "cuda drafter: a norm is missing");
    const size_t R = (size_t)d->R, E = (size_t)d->E, Q = (size_t)d->n_q, KV = (size_t)d->n_kv, F = (size_t)d->n_ff;
    int widest = d->n_feat;
    if (d->n_ff > widest) widest = d->n_ff;
    if (d->n_q > widest) widest = d->n_q;
    if (d->E > widest) widest = d->E;
    /* F32 is the widest dot type; aligned as the forward aligns its rows */
    d->qa_stride = (dev_act_row_bytes(MU_T_F32, widest) + 255) & ~(size_t)255;
    struct {
        void **p;
        size_t bytes;
    } sc[] = {
        {(void **)&d->x, R * E * 4},   {(void **)&d->a, R * E * 4},  {(void **)&d->at, R * Q * 4},
        {(void **)&d->q, R * Q * 4},   {(void **)&d->k, R * KV * 4}, {(void **)&d->v, R * KV * 4},
        {(void **)&d->o, R * E * 4},   {(void **)&d->f1, R * F * 4}, {(void **)&d->f2, R * F * 4},
        {(void **)&d->g, R * E * 4},   {(void **)&d->feat, (size_t)DR * d->n_feat * 4},
        {(void **)&d->cs, R * (size_t)(d->hd / 2) * 4}, {(void **)&d->sn, R * (size_t)(d->hd / 2) * 4},
        {(void **)&d->qa, R * d->qa_stride}, {(void **)&d->best, R * 4}, {(void **)&d->prm, 2 * sizeof(int)},
    };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++)
        if ((rc = d_alloc(d, sc[i].bytes, sc[i].p, "scratch", err))) return rc;
    const size_t h2 = (size_t)(d->hd / 2) * sizeof(float);
    CU_CK(cudaHostAlloc((void **)&d->hx, (size_t)d->block * E * sizeof(float), cudaHostAllocDefault), "pinned staging");
    CU_CK(cudaHostAlloc((void **)&d->hcs, (size_t)d->block * h2, cudaHostAllocDefault), "pinned staging");
    CU_CK(cudaHostAlloc((void **)&d->hsn, (size_t)d->block * h2, cudaHostAllocDefault), "pinned staging");
    CU_CK(cudaHostAlloc((void **)&d->hprm, 2 * sizeof(int), cudaHostAllocDefault), "pinned staging");
    d->graphs = cu_env_digit("MUSER_CUDA_DRAFT_GRAPH", 0) == 1;
    return 0;
}

int cu_draft_new(int dev, const mu_gpu_draft_desc *D, mu_gpu_draft **out, mu_err *err) {
    const int hd = D->head_dim;
    if (hd % 32 || hd < 32 || hd > 256 || (hd & (hd - 1)) || D->n_head_kv < 1 || D->n_head % D->n_head_kv ||
        D->block_size < 2 || D->n_layer < 1)
        return cu_fail(err, MU_E_UNSUPPORTED, "cuda drafter: head size %d, %d heads over %d, block %d not supported",
                       hd, D->n_head, D->n_head_kv, D->block_size);
    mu_gpu_draft *d = (mu_gpu_draft *)calloc(1, sizeof *d);
    if (!d) return cu_fail(err, MU_E_NOMEM, "cuda drafter: out of host memory");
    int rc = draft_new(dev, D, d, err);
    if (rc) {
        cu_draft_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

int cu_draft_set_head(mu_gpu_draft *d, const mu_gpu_tensor *head, mu_err *err) {
    CU_CK(cudaSetDevice(d->dev), "set device");
    CU_CK(cudaStreamSynchronize(d->st), "drafter stream");
    if (head->ne0 != d->E)
        return cu_fail(err, MU_E_MODEL, "cuda drafter: head rows of %lld, the drafter is %d wide", (long long)head->ne0,
                       d->E);
    cudaFree(d->head_mem);
    cudaFree(d->lg);
    d->head_mem = NULL;
    d->lg = NULL;
    memset(&d->head, 0, sizeof d->head);
    dtensor h;
    void *mem = NULL;
    int rc = d_weight(head, &h, &mem, err);
    if (rc) {
        cudaFree(mem);
        return rc;
    }
    void *lg;
    if ((rc = d_malloc((size_t)(d->block - 1) * (size_t)h.ne1 * sizeof(float), &lg, "head scores", err))) {
        cudaFree(mem);
        return rc;
    }
    d->head = h;
    d->head_mem = mem;
    d->lg = (float *)lg;
    return 0;
}

/* ---- sequences ---------------------------------------------------------- */

void cu_dseq_free(mu_gpu_dseq *q) {
    if (!q) return;
    cudaSetDevice(q->d->dev);
    cudaStreamSynchronize(q->d->st);
    if (q->exec) cudaGraphExecDestroy(q->exec);
    cudaFree(q->kc);
    cudaFree(q->vc);
    cudaFree(q->present);
    cudaFree(q->hid);
    free(q);
}

int cu_dseq_new(mu_gpu_draft *d, int n_ctx, mu_gpu_dseq **out, mu_err *err) {
    if (n_ctx < 1) return cu_fail(err, MU_E_ARG, "cuda drafter: context must be >= 1: %d", n_ctx);
    CU_CK(cudaSetDevice(d->dev), "set device");
    mu_gpu_dseq *q = (mu_gpu_dseq *)calloc(1, sizeof *q);
    if (!q) return cu_fail(err, MU_E_NOMEM, "cuda drafter: out of host memory");
    q->d = d;
    q->n_ctx = n_ctx;
    const size_t rows = (size_t)d->n_layer * (size_t)n_ctx * (size_t)d->n_kv;
    int rc;
    if ((rc = d_malloc(rows * sizeof(float), (void **)&q->kc, "drafter K rows", err)) ||
        (rc = d_malloc(rows * sizeof(float), (void **)&q->vc, "drafter V rows", err)) ||
        (rc = d_malloc((size_t)n_ctx, (void **)&q->present, "drafter positions", err)) ||
        (rc = d_malloc((size_t)(d->block - 1) * (size_t)d->E * sizeof(float), (void **)&q->hid, "drafter rows", err))) {
        cu_dseq_free(q);
        return rc;
    }
    cudaError_t e = cudaMemsetAsync(q->present, 0, (size_t)n_ctx, d->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
    if (e != cudaSuccess) {
        cu_dseq_free(q);
        return cu_cuda_fail_in(err, e, "cuda drafter", "clear positions");
    }
    *out = q;
    return 0;
}

int cu_dseq_truncate(mu_gpu_dseq *q, int n, int n_past, mu_err *err) {
    if (n < 0) n = 0;
    if (n_past > q->n_ctx) n_past = q->n_ctx;
    if (n >= n_past) return 0;
    CU_CK(cudaSetDevice(q->d->dev), "set device");
    CU_CK(cudaMemsetAsync(q->present + n, 0, (size_t)(n_past - n), q->d->st), "drafter truncate");
    return 0;
}

int cu_dseq_inject(mu_gpu_dseq *q, int pos0, int n, const float *feat, const float *cs, const float *sn, mu_err *err) {
    mu_gpu_draft *d = q->d;
    if (n < 1 || n > DR || pos0 < 0 || pos0 > q->n_ctx - n)
        return cu_fail(err, MU_E_ARG, "cuda drafter: inject %d rows at %d (context %d, at most %d rows)", n, pos0,
                       q->n_ctx, DR);
    CU_CK(cudaSetDevice(d->dev), "set device");
    const size_t h2 = (size_t)d->hd / 2;
    int rc;
    if ((rc = d_upload(d, d->feat, feat, (size_t)n * d->n_feat * sizeof(float), err)) ||
        (rc = d_upload(d, d->cs, cs, (size_t)n * h2 * sizeof(float), err)) ||
        (rc = d_upload(d, d->sn, sn, (size_t)n * h2 * sizeof(float), err)))
        return rc;
    /* g = rms(feat fc^T) * enc_norm */
    d_mm(d, d->feat, n, &d->fc, d->g);
    cu_rms_rows(d->st, d->g, d->enc_norm, d->g, n, d->E, d->eps);
    const size_t kvb = (size_t)n * d->n_kv * sizeof(float);
    for (int il = 0; il < d->n_layer; il++) {
        const d_layer *L = &d->L[il];
        d_mm2(d, d->g, n, &L->wk, d->k, &L->wv, d->v);
        d_qk(d, d->k, d->n_kv, d->n_head_kv, L->k_norm, 0, n);
        const size_t off = ((size_t)il * q->n_ctx + (size_t)pos0) * d->n_kv;
        CU_CK(cudaMemcpyAsync(q->kc + off, d->k, kvb, cudaMemcpyDeviceToDevice, d->st), "drafter K rows");
        CU_CK(cudaMemcpyAsync(q->vc + off, d->v, kvb, cudaMemcpyDeviceToDevice, d->st), "drafter V rows");
    }
    CU_CK(cudaMemsetAsync(q->present + pos0, 1, (size_t)n, d->st), "drafter positions");
    CU_CK(cudaGetLastError(), "drafter injection");
    return 0;
}

static void d_attention(mu_gpu_dseq *q, int il, int r0, int nr) {
    mu_gpu_draft *d = q->d;
    const size_t off = (size_t)il * q->n_ctx * d->n_kv;
    const int gq = d->n_head / d->n_head_kv, swa = d->L[il].swa ? d->n_swa : 0;
    const dim3 grid(nr, d->n_head), block(ATTN_THREADS);
#define ATTN(HD)                                                                                                  \
    kd_attn<HD><<<grid, block, 0, d->st>>>(d->q, d->n_q, d->k, d->v, d->n_kv, q->kc + off, q->vc + off, q->present, \
                                           d->prm, d->block, r0, gq, d->kq_scale, d->causal, swa, d->at)
    switch (d->hd) {
    case 32: ATTN(32); break;
    case 64: ATTN(64); break;
    case 128: ATTN(128); break;
    default: ATTN(256); break;
    }
#undef ATTN
}

/* The pass from the staged inputs (d->hx, hcs, hsn, hprm): the same
 * launches whatever its position and draft length, so a graph can replay
 * it. Every block row goes through the last layer too (the rows are
 * independent there once k and v are made; the head reads the ones asked
 * for). */
static void pass_enqueue(mu_gpu_dseq *q) {
    mu_gpu_draft *d = q->d;
    const int T = d->block, E = d->E;
    const size_t h2 = (size_t)d->hd / 2, Q = (size_t)d->n_q, F = (size_t)d->n_ff;
    cudaMemcpyAsync(d->x, d->hx, (size_t)T * E * sizeof(float), cudaMemcpyHostToDevice, d->st);
    cudaMemcpyAsync(d->cs, d->hcs, (size_t)T * h2 * sizeof(float), cudaMemcpyHostToDevice, d->st);
    cudaMemcpyAsync(d->sn, d->hsn, (size_t)T * h2 * sizeof(float), cudaMemcpyHostToDevice, d->st);
    cudaMemcpyAsync(d->prm, d->hprm, 2 * sizeof(int), cudaMemcpyHostToDevice, d->st);
    for (int il = 0; il < d->n_layer; il++) {
        const d_layer *L = &d->L[il];
        /* every row's k and v; the last layer's attention, o and FFN only
         * for the rows that become drafts, [1, T) */
        const int r0 = il == d->n_layer - 1 ? 1 : 0, nr = T - r0;
        cu_rms_rows(d->st, d->x, L->attn_norm, d->a, T, E, d->eps);
        d_mm(d, d->a + (size_t)r0 * E, nr, &L->wq, d->q + r0 * Q);
        d_mm2(d, d->a, T, &L->wk, d->k, &L->wv, d->v);
        d_qk(d, d->q, d->n_q, d->n_head, L->q_norm, r0, nr);
        d_qk(d, d->k, d->n_kv, d->n_head_kv, L->k_norm, 0, T);
        d_attention(q, il, r0, nr);
        d_mm(d, d->at + r0 * Q, nr, &L->wo, d->o + (size_t)r0 * E);
        d_residual(d, L->attn_post, r0, nr);
        cu_rms_rows(d->st, d->x + (size_t)r0 * E, L->ffn_norm, d->a + (size_t)r0 * E, nr, E, d->eps);
        d_mm2(d, d->a + (size_t)r0 * E, nr, &L->gate, d->f1 + r0 * F, &L->up, d->f2 + r0 * F);
        cu_swiglu(d->st, d->f1 + r0 * F, d->f2 + r0 * F, d->n_ff, nr);
        d_mm(d, d->f1 + r0 * F, nr, &L->down, d->o + (size_t)r0 * E);
        d_residual(d, L->ffn_post, r0, nr);
    }
    /* the final norm of the draft rows, kept for the head */
    cu_rms_rows(d->st, d->x + E, d->out_norm, q->hid, T - 1, E, d->eps);
}

int cu_dseq_pass(mu_gpu_dseq *q, const float *x0, const float *cs, const float *sn, int pos, int n_ctx_rows,
                 int n_draft, mu_err *err) {
    mu_gpu_draft *d = q->d;
    const int T = d->block, E = d->E;
    if (n_draft < 1 || n_draft > T - 1)
        return cu_fail(err, MU_E_ARG, "cuda drafter: draft length must be 1..%d: %d", T - 1, n_draft);
    if (pos < 0 || n_ctx_rows < 0 || n_ctx_rows > pos || n_ctx_rows > q->n_ctx)
        return cu_fail(err, MU_E_ARG, "cuda drafter: position %d with %d context rows (context %d)", pos, n_ctx_rows,
                       q->n_ctx);
    CU_CK(cudaSetDevice(d->dev), "set device");
    /* the staging may still feed the copies of the pass before */
    CU_CK(cudaStreamSynchronize(d->st), "drafter stream");
    const size_t h2 = (size_t)d->hd / 2;
    memcpy(d->hx, x0, (size_t)T * E * sizeof(float));
    memcpy(d->hcs, cs, (size_t)T * h2 * sizeof(float));
    memcpy(d->hsn, sn, (size_t)T * h2 * sizeof(float));
    d->hprm[0] = pos;
    d->hprm[1] = n_ctx_rows;
    if (d->graphs && !q->exec) { /* capture once per sequence (its rows' addresses are in it) */
        cudaGraph_t g;
        CU_CK(cudaStreamBeginCapture(d->st, cudaStreamCaptureModeThreadLocal), "drafter graph capture");
        pass_enqueue(q);
        CU_CK(cudaStreamEndCapture(d->st, &g), "drafter graph capture");
        cudaError_t e = cudaGraphInstantiate(&q->exec, g, 0);
        cudaGraphDestroy(g);
        if (e != cudaSuccess) q->exec = NULL;
        CU_CK(e, "drafter graph instantiate");
    }
    if (q->exec) CU_CK(cudaGraphLaunch(q->exec, d->st), "drafter graph launch");
    else pass_enqueue(q);
    CU_CK(cudaGetLastError(), "drafter pass");
    q->n_hid = n_draft;
    return n_draft;
}

int cu_dseq_head(mu_gpu_dseq *q, int from, int n, int32_t *best, float *scores, mu_err *err) {
    mu_gpu_draft *d = q->d;
    if (!d->head_mem) return cu_fail(err, MU_E_STATE, "cuda drafter: no head");
    if (from < 0 || n < 1 || from + n > q->n_hid)
        return cu_fail(err, MU_E_ARG, "cuda drafter: head rows %d..%d of %d kept", from, from + n, q->n_hid);
    CU_CK(cudaSetDevice(d->dev), "set device");
    d_mm(d, q->hid + (size_t)from * d->E, n, &d->head, d->lg);
    cu_best(d->st, d->lg, n, d->head.ne1, d->best);
    CU_CK(cudaMemcpyAsync(best, d->best, (size_t)n * sizeof *best, cudaMemcpyDeviceToHost, d->st), "drafts");
    if (scores)
        CU_CK(cudaMemcpyAsync(scores, d->lg, (size_t)n * d->head.ne1 * sizeof(float), cudaMemcpyDeviceToHost, d->st),
              "draft scores");
    CU_CK(cudaStreamSynchronize(d->st), "drafter");
    CU_CK(cudaGetLastError(), "drafter head");
    return 0;
}
