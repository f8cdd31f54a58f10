/* gpu_cuda_attn.cu: attention of one layer over sessions' F16 cells, with
 * the CPU's rounding (attn.c, kern_ref.c mm_f16 and softmax_f16).
 *
 * A row is one (token, query head). Its span is the cells attn.c would
 * cover for it: aligned to 64 cells for a lone token (ggml_vec_dot_f16's
 * order), to 16 when its session has more tokens in the chunk (tinyBLAS's
 * order). Cells outside the token's window inside the span get weight 0,
 * which adds nothing, so the accumulator lanes (cell index mod 16 or 64)
 * and the softmax's 16-cell chunks are those of the CPU. Three kernels:
 * K.Q scores, the softmax (F16 weights), and V times the weights with the
 * sigmoid gate. */
#include <stdlib.h>

#include "cuda.cuh"

/* The span [c_lo, c_hi) of a row (attn.c cell_range). */
__device__ __forceinline__ void row_span(int pos, int nc, bool swa, int n_swa, bool batch, int *c_lo, int *c_hi,
                                         int *p0) {
    const int u0 = swa && pos - n_swa + 1 > 0 ? pos - n_swa + 1 : 0;
    const int al = batch ? 16 : 64;
    const int a = u0 % nc, span = pos - u0 + 1;
    *p0 = u0;
    if (!swa || a + span <= nc) {
        *c_lo = a / al * al;
        int hi = (a + span + al - 1) / al * al;
        *c_hi = hi > nc ? nc : hi;
    } else {
        *c_lo = 0;
        *c_hi = nc;
    }
}

/* scores[row][c - c_lo] = (q16 . k16[c]) * scale, -inf outside the window. */
__global__ void k_scores(cu_attn_args a) {
    const int row = blockIdx.y, t = row / a.n_head, h = row % a.n_head;
    const int pos = a.pos[t];
    const bool batch = a.batch[t];
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(pos, kv.rows, a.swa, a.n_swa, batch, &c_lo, &c_hi, &p0);
    const int hd = a.head_dim, n_kv = a.n_head_kv * hd, g = h / (a.n_head / a.n_head_kv);
    extern __shared__ float q16[];
    for (int i = threadIdx.x; i < hd; i += blockDim.x) q16[i] = f16_round(a.q[(size_t)t * a.n_head * hd + (size_t)h * hd + i]);
    __syncthreads();
    const int c = c_lo + blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= c_hi) return;
    float *out = a.scores + (size_t)row * a.max_span + (c - c_lo);
    /* the position cell c holds, if it is in [p0, pos] */
    const int p = pos - ((pos - c) % kv.rows + kv.rows) % kv.rows;
    if (p < p0 || p < 0) {
        *out = -INFINITY;
        return;
    }
    const uint16_t *k = kv.k + (size_t)c * n_kv + (size_t)g * hd;
    float s;
    if (batch && hd % 16 == 0) {
        float acc[16];
#pragma unroll
        for (int l = 0; l < 16; l++) acc[l] = 0;
        for (int i = 0; i < hd; i += 16)
#pragma unroll
            for (int l = 0; l < 16; l++) acc[l] += h2f(k[i + l]) * q16[i + l];
        s = hsum16(acc);
    } else {
        float acc[4][16];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int l = 0; l < 16; l++) acc[j][l] = 0;
        const int np = hd & ~63;
        for (int i = 0; i < np; i += 64)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int l = 0; l < 16; l++) acc[j][l] += h2f(k[i + 16 * j + l]) * q16[i + 16 * j + l];
#pragma unroll
        for (int l = 0; l < 16; l++) {
            acc[0][l] += acc[2][l];
            acc[1][l] += acc[3][l];
            acc[0][l] += acc[1][l];
        }
        double d = hsum16(acc[0]);
        for (int i = np; i < hd; i++) d += (double)(h2f(k[i]) * q16[i]);
        s = (float)d;
    }
    *out = s * (1.0f / sqrtf((float)hd));
}

/* The block's largest mx (s_max: a float a warp). NT: the block's threads
 * when the kernel fixes them, else 0 (blockDim.x). */
template <int NT>
__device__ __forceinline__ float block_max(float mx, float *s_max) {
    const int nt = NT ? NT : (int)blockDim.x;
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0) s_max[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < nt / 32; w++) mx = fmaxf(mx, s_max[w]);
    return mx;
}

/* e[i] = expf_ggml(e[i] - mx) for i < 16 nch, a cell a thread; chunk k's
 * 16 values are 16 lanes of a warp, added into cs[k] by shuffles in
 * hsum16's order (i + (i + 8), then hsum8's steps). Then one thread adds
 * the chunk sums in double in cell order. Returns 1 / that sum as a float
 * (every thread of the block calls it). NT as block_max's. */
template <int NT>
__device__ __forceinline__ float exp_chunks(float *e, int nch, float mx, float *cs, double *s_sum) {
    const int nt = NT ? NT : (int)blockDim.x;
    for (int i0 = 0; i0 < 16 * nch; i0 += nt) {
        const int i = i0 + threadIdx.x;
        float v = 0;
        if (i < 16 * nch) {
            v = expf_ggml(e[i] - mx);
            e[i] = v;
        }
        v += __shfl_down_sync(0xffffffffu, v, 8, 16);
        v += __shfl_down_sync(0xffffffffu, v, 4, 16);
        v += __shfl_down_sync(0xffffffffu, v, 2, 16);
        v += __shfl_down_sync(0xffffffffu, v, 1, 16);
        if (i % 16 == 0 && i < 16 * nch) cs[i / 16] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0;
#pragma unroll 16
        for (int k = 0; k < nch; k++) sum += (double)cs[k];
        *s_sum = sum;
    }
    __syncthreads();
    return (float)(1.0 / *s_sum);
}

/* Softmax of a row into F16-exact weights: e = expf_ggml(x - max), each
 * 16 cells' sum as hsum16, the chunks added in double in cell order. One
 * block per row. SMEM (decode: few rows, so each row's latency shows): the
 * chunk sums stay in shared memory (SM_CS of them at most, else
 * a.chunk_sums), so the one thread that adds them in order reads them
 * there; the sums and their order are the same either way. */
#define SM_CS 4096
template <bool SMEM>
__global__ void k_softmax(cu_attn_args a) {
    const int row = blockIdx.x, t = row / a.n_head;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, a.batch[t], &c_lo, &c_hi, &p0);
    pdl_wait(); /* after the span: the pass's tables are the host's, not the kernel before's */
    pdl_launch();
    const int m = c_hi - c_lo, nch = m / 16;
    float *x = a.scores + (size_t)row * a.max_span;
    __shared__ float s_cs[SMEM ? SM_CS : 1];
    float *cs = SMEM && nch <= SM_CS ? s_cs : a.chunk_sums + (size_t)row * (a.max_span / 16);
    __shared__ float s_max[32];
    __shared__ double s_sum;
    float mx = -INFINITY;
#pragma unroll 8
    for (int i = threadIdx.x; i < m; i += blockDim.x) mx = fmaxf(mx, x[i]);
    mx = block_max<0>(mx, s_max);
    const float inv = exp_chunks<0>(x, nch, mx, cs, &s_sum);
    for (int i0 = threadIdx.x; i0 < m; i0 += 8 * blockDim.x) { /* eight loads in flight, then the stores */
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int i = i0 + j * (int)blockDim.x;
            v[j] = i < m ? x[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int i = i0 + j * (int)blockDim.x;
            if (i < m) x[i] = f16_round(v[j] * inv);
        }
    }
}

/* out[t][h][d] = (weights . V[:, d]) * sigmoid(gate). The CPU's
 * accumulator lanes (cell index mod 64, or mod 16 for a session with more
 * tokens in the chunk) become threads: thread (d, a) sums the cells of lane
 * a in order; the lanes are then combined as the CPU combines them. Block:
 * 32 values of d x 32 threads, each thread lanes a and a + 32. */
__global__ void k_pv(cu_attn_args a) {
    const int row = blockIdx.x, t = row / a.n_head, h = row % a.n_head;
    const int dx = threadIdx.x, ty = threadIdx.y, d = blockIdx.y * 32 + dx;
    const int hd = a.head_dim, n_kv = a.n_head_kv * hd, g = h / (a.n_head / a.n_head_kv);
    const bool batch = a.batch[t];
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, batch, &c_lo, &c_hi, &p0);
    const int m = c_hi - c_lo, L = batch ? 16 : 64, np = m / L * L;
    const float *w = a.scores + (size_t)row * a.max_span;
    const uint16_t *v = kv.v + (size_t)c_lo * n_kv + (size_t)g * hd + d;
    __shared__ float acc[64][33];
    for (int ln = ty; ln < 64; ln += 32) {
        float s = 0;
        if (ln < L && d < hd)
            for (int c = ln; c < np; c += L) s += h2f(v[(size_t)c * n_kv]) * w[c];
        acc[ln][dx] = s;
    }
    __syncthreads();
    if (ty != 0 || d >= hd) return;
    float r;
    if (batch) { /* tinyBLAS: one 16-lane accumulator, hsum16 */
        float l16[16];
#pragma unroll
        for (int l = 0; l < 16; l++) l16[l] = acc[l][dx];
        r = hsum16(l16);
    } else { /* ggml: acc[j][l] = lane 16j + l; 0 += 2, 1 += 3, 0 += 1, hsum16; tail in double */
        float l16[16];
#pragma unroll
        for (int l = 0; l < 16; l++) {
            float a0 = acc[l][dx], a1 = acc[16 + l][dx], a2 = acc[32 + l][dx], a3 = acc[48 + l][dx];
            a0 += a2;
            a1 += a3;
            a0 += a1;
            l16[l] = a0;
        }
        double dd = hsum16(l16);
        for (int c = np; c < m; c++) dd += (double)(h2f(v[(size_t)c * n_kv]) * w[c]);
        r = (float)dd;
    }
    const size_t o = (size_t)t * a.n_head * hd + (size_t)h * hd + d;
    a.out[o] = r * (1.0f / (1.0f + expf_libm(-a.gate[o])));
}

/* ---- prefill chunks: the same sums, tiled ------------------------------
 * When every row is a batch row (tinyBLAS order: 16 lanes, hsum16) and
 * heads are 128 wide, the query heads of one KV head share each K and V
 * row read from memory, and each thread holds a tile of outputs in
 * registers. The products of two F16 values are exact in float, so every
 * lane step `acc += k * q` is one fmaf with the same result (the build's
 * -fmad=false keeps the others unfused).
 *
 * k_scores_t: a block scores ST_TOK tokens x 16 query-head slots (one KV
 * head; slots >= G idle) against ST_CELLS absolute cells. A thread holds 4
 * rows x 4 cells and computes their 16 lanes one after another, in the
 * order hsum16 adds them, keeping only the partial sums that tree still
 * needs (at most five a output): lane l's chain is its 8 products d = l,
 * l + 16, ..., l + 112, as the CPU's 16-lane accumulator takes them. */
#define ST_TOK 4
#define ST_CELLS 64
#define ST_LD 68 /* floats a row of the [dim][row] shared tiles (rows stay 16-byte aligned) */

template <int L>
__device__ __forceinline__ void st_chain(const float (*Qs)[ST_LD], const float (*Ks)[ST_LD], int rg, int cg, float *acc) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float4 q = *(const float4 *)&Qs[16 * i + L][4 * rg];
        const float4 k = *(const float4 *)&Ks[16 * i + L][4 * cg];
        const float qv[4] = {q.x, q.y, q.z, q.w}, kv[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[4 * r + c] = fmaf(kv[c], qv[r], i ? acc[4 * r + c] : 0.f);
    }
}
__device__ __forceinline__ void st_add(float *a, const float *b) {
#pragma unroll
    for (int o = 0; o < 16; o++) a[o] += b[o];
}
/* lanes l and l + 8, added: hsum16's first level */
template <int L>
__device__ __forceinline__ void st_pair(const float (*Qs)[ST_LD], const float (*Ks)[ST_LD], int rg, int cg, float *h,
                                        float *tmp) {
    st_chain<L>(Qs, Ks, rg, cg, h);
    st_chain<L + 8>(Qs, Ks, rg, cg, tmp);
    st_add(h, tmp);
}

/* The tiles of one pass: Q of the block's tokens of session S (rounded to
 * F16; other slots 0), K of cells cb .. cb + ST_CELLS - 1 (past the cells:
 * 0). Every load is issued before the first store, so their latencies
 * overlap. */
__device__ __forceinline__ void st_tiles(const cu_attn_args &a, float (*Qs)[ST_LD], float (*Ks)[ST_LD], const int *ss,
                                         int S, int t0, int g, int cb, const cu_kv_layer &kv) {
    const int G = a.n_head / a.n_head_kv, n_kv = a.n_head_kv * 128, nq = a.n_head * 128;
    constexpr int NK = ST_CELLS * 16 / 256; /* 16-byte words of K a thread */
    float4 q[8];
    uint4 w[NK];
#pragma unroll
    for (int n = 0; n < 8; n++) { /* Q: row r = 16 tk + slot, 4 dims at 4 d4 */
        const int i = threadIdx.x + 256 * n, r = i & 63, d4 = i >> 6, k = r >> 4, hh = r & 15;
        q[n] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (ss[k] == S && hh < G) q[n] = *(const float4 *)(a.q + (size_t)(t0 + k) * nq + (size_t)(g * G + hh) * 128 + 4 * d4);
    }
#pragma unroll
    for (int n = 0; n < NK; n++) { /* K: cell c, 8 dims at 8 d8 */
        const int i = threadIdx.x + 256 * n, c = i & (ST_CELLS - 1), d8 = i >> 6;
        w[n] = make_uint4(0, 0, 0, 0);
        if (cb + c < kv.rows) w[n] = *(const uint4 *)(kv.k + (size_t)(cb + c) * n_kv + (size_t)g * 128 + 8 * d8);
    }
#pragma unroll
    for (int n = 0; n < 8; n++) {
        const int i = threadIdx.x + 256 * n, r = i & 63, d4 = i >> 6;
        Qs[4 * d4 + 0][r] = f16_round(q[n].x);
        Qs[4 * d4 + 1][r] = f16_round(q[n].y);
        Qs[4 * d4 + 2][r] = f16_round(q[n].z);
        Qs[4 * d4 + 3][r] = f16_round(q[n].w);
    }
#pragma unroll
    for (int n = 0; n < NK; n++) {
        const int i = threadIdx.x + 256 * n, c = i & (ST_CELLS - 1), d8 = i >> 6;
        const uint32_t ws[4] = {w[n].x, w[n].y, w[n].z, w[n].w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            Ks[8 * d8 + 2 * j][c] = h2f((uint16_t)(ws[j] & 0xFFFF));
            Ks[8 * d8 + 2 * j + 1][c] = h2f((uint16_t)(ws[j] >> 16));
        }
    }
}

/* A block's tokens t0 .. t0 + ST_TOK - 1 against cells cb .. cb + ST_CELLS - 1
 * (256 threads): each token's span [lo, hi), first position p0 and session
 * ss (-1: none of its span in these cells). Returns whether any token sees
 * any of the cells: a sliding layer's span can be the whole ring, whose
 * cells between the window's ends score -inf whatever K holds, and a block
 * of such cells writes those and computes nothing. */
__device__ __forceinline__ bool st_setup(const cu_attn_args &a, int t0, int nt, int cb, int *lo, int *hi, int *p0, int *ss) {
    if (threadIdx.x < ST_TOK) {
        const int k = threadIdx.x;
        ss[k] = -1;
        if (k < nt) {
            const int S = a.sess[t0 + k];
            row_span(a.pos[t0 + k], a.kv[S].rows, a.swa, a.n_swa, true, &lo[k], &hi[k], &p0[k]);
            if (cb < hi[k] && cb + ST_CELLS > lo[k]) ss[k] = S;
        }
    }
    __syncthreads();
    bool seen = false;
    if (ST_TOK * ST_CELLS >= 256 || threadIdx.x < ST_TOK * ST_CELLS) {
        const int k = threadIdx.x / ST_CELLS, cell = cb + threadIdx.x % ST_CELLS;
        if (k < nt && ss[k] >= 0 && cell >= lo[k] && cell < hi[k]) {
            const int pos = a.pos[t0 + k], nc = a.kv[ss[k]].rows;
            const int p = pos - ((pos - cell) % nc + nc) % nc;
            seen = p >= p0[k] && p >= 0;
        }
    }
    return __syncthreads_or(seen);
}

/* A thread's 4 rows x 4 cells: the 16 lanes in hsum16's order */
__device__ __forceinline__ void st_dots(const float (*Qs)[ST_LD], const float (*Ks)[ST_LD], int rg, int cg, float *A) {
    float B[16], C[16], D[16], E[16];
    st_pair<0>(Qs, Ks, rg, cg, A, E);
    st_pair<4>(Qs, Ks, rg, cg, B, E);
    st_add(A, B); /* h0 + h4 */
    st_pair<2>(Qs, Ks, rg, cg, B, E);
    st_pair<6>(Qs, Ks, rg, cg, C, E);
    st_add(B, C); /* h2 + h6 */
    st_add(A, B);
    st_pair<1>(Qs, Ks, rg, cg, B, E);
    st_pair<5>(Qs, Ks, rg, cg, C, E);
    st_add(B, C); /* h1 + h5 */
    st_pair<3>(Qs, Ks, rg, cg, C, E);
    st_pair<7>(Qs, Ks, rg, cg, D, E);
    st_add(C, D); /* h3 + h7 */
    st_add(B, C);
    st_add(A, B);
}

__global__ void __launch_bounds__(256, 2) k_scores_t(cu_attn_args a) {
    extern __shared__ float st_sm[];
    float (*Qs)[ST_LD] = (float (*)[ST_LD])st_sm;               /* [128 dims][4 tokens x 16 slots] */
    float (*Ks)[ST_LD] = (float (*)[ST_LD])(st_sm + 128 * ST_LD); /* [128 dims][64 cells] */
    const int G = a.n_head / a.n_head_kv, g = blockIdx.z, t0 = blockIdx.y * ST_TOK, cb = blockIdx.x * ST_CELLS;
    const int nt = a.T - t0 < ST_TOK ? a.T - t0 : ST_TOK;
    __shared__ int lo[ST_TOK], hi[ST_TOK], p0[ST_TOK], ss[ST_TOK];
    const bool live = st_setup(a, t0, nt, cb, lo, hi, p0, ss);
    /* thread: rows 4 rg .. 4 rg + 3 (token tk, head slots h0 ..), cells 4 cg .. 4 cg + 3;
     * a warp takes 4 row groups x 8 cell groups, so each of its shared loads
     * reads at most 128 bytes */
    const int wp = threadIdx.x >> 5, ln = threadIdx.x & 31;
    const int rg = (ln >> 3) + 4 * (wp >> 1), cg = (ln & 7) + 8 * (wp & 1), tk = rg >> 2, h0 = 4 * (rg & 3);
    /* one pass per session among the block's tokens (a chunk of one session: one pass) */
    for (int k0 = 0; k0 < nt; k0++) {
        const int S = ss[k0];
        bool first = S >= 0;
        for (int j = 0; j < k0; j++) first = first && ss[j] != S;
        if (!first) continue;
        const cu_kv_layer kv = a.kv[S];
        if (live) {
            __syncthreads(); /* the previous pass's reads of the tiles */
            st_tiles(a, Qs, Ks, ss, S, t0, g, cb, kv);
            __syncthreads();
        }
        if (ss[tk] != S || h0 >= G) continue; /* tk: whole warps */
        float A[16];
        if (live) st_dots(Qs, Ks, rg, cg, A);
        const int t = t0 + tk, pos = a.pos[t];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            if (h0 + r >= G) break;
            float *out = a.scores + ((size_t)t * a.n_head + (size_t)g * G + h0 + r) * a.max_span;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int cell = cb + 4 * cg + c;
                if (cell < lo[tk] || cell >= hi[tk]) continue;
                const int p = pos - ((pos - cell) % kv.rows + kv.rows) % kv.rows;
                out[cell - lo[tk]] = !live || p < p0[tk] || p < 0 ? -INFINITY : A[4 * r + c] * (1.0f / sqrtf(128.0f));
            }
        }
    }
}
#define ST_SMEM (2 * 128 * ST_LD * (int)sizeof(float))

/* k_softmax_t: k_softmax's arithmetic for a prefill row, with less traffic.
 * SM: the row (at most SMT_CELLS cells) is read from memory once into
 * shared memory, with its chunk sums; otherwise the exponentials go back to
 * the row in memory as k_softmax writes them. Either way the weights, F16
 * values, are written as F16 packed at the row's start (weight i in half
 * i), half the bytes of the floats that k_pv_t reads. In memory the packing
 * is in place: a segment's loads all happen before its stores (a barrier
 * between), and its stores reach only halves below its end, read already. */
#define SMT_CELLS 16384
#define SMT_THREADS 128
template <bool SM>
__global__ void __launch_bounds__(SMT_THREADS) k_softmax_t(cu_attn_args a) {
    const int row = blockIdx.x, t = row / a.n_head;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, true, &c_lo, &c_hi, &p0);
    const int m = c_hi - c_lo, nch = m / 16, ne = 16 * nch; /* batch rows: the weights past ne are never read */
    float *x = a.scores + (size_t)row * a.max_span;
    uint16_t *xh = (uint16_t *)x;
    extern __shared__ float smt[];
    float *e = SM ? smt : x;
    float *cs = SM ? smt + ((a.max_span + 15) & ~15) : a.chunk_sums + (size_t)row * (a.max_span / 16);
    __shared__ float s_max[SMT_THREADS / 32];
    __shared__ double s_sum;
    float mx = -INFINITY;
#pragma unroll 8
    for (int i = threadIdx.x; i < m; i += SMT_THREADS) {
        const float v = x[i];
        if (SM && i < ne) e[i] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max<SMT_THREADS>(mx, s_max);
    const float inv = exp_chunks<SMT_THREADS>(e, nch, mx, cs, &s_sum); /* as k_softmax */
    for (int i0 = 0; i0 < ne; i0 += 8 * SMT_THREADS) { /* the same trip count in every thread (the barrier) */
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int i = i0 + j * SMT_THREADS + threadIdx.x;
            v[j] = i < ne ? e[i] : 0.0f;
        }
        if (!SM) __syncthreads(); /* every load of the segment before the first store into it */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int i = i0 + j * SMT_THREADS + threadIdx.x;
            if (i < ne) xh[i] = f2h(v[j] * inv);
        }
    }
}

/* k_pv_t: one token, one KV head and 64 of the 128 output values a block.
 * Thread (l, grp): lane l (cells l, l + 16, ... of the span, the CPU's
 * accumulator lane, in cell order) for 8 heads x 8 values; the 16 lanes of
 * an output are then added by shuffles in hsum16's tree (xor 8, 4, 2, 1:
 * each level adds the pairs hsum16 adds, and a + b == b + a). The next
 * 64 cells' V and weights are read into registers while these are used. */
#define PT_CELLS 64
/* A sliding layer's span can be the whole ring (c_lo 0): its cells
 * pos % nc + 1 .. p0 % nc - 1 hold positions before the window, weight 0.
 * [*s_lo, *s_hi): the tiles wholly among them, skipped: each of their
 * products would add 0 to the chain (for finite V; a lane's sum is never
 * -0, as it starts at +0). Empty (np, np) otherwise. */
__device__ __forceinline__ void pvt_hole(const cu_attn_args &a, const cu_kv_layer &kv, int pos, int p0, int np, int *s_lo,
                                         int *s_hi) {
    *s_lo = *s_hi = np;
    if (a.swa && p0 % kv.rows + (pos - p0 + 1) > kv.rows) {
        *s_lo = (pos % kv.rows + 1 + PT_CELLS - 1) / PT_CELLS * PT_CELLS;
        *s_hi = p0 % kv.rows / PT_CELLS * PT_CELLS;
    }
}

/* A tile's nc cells (a multiple of 16) into the chains: lane l, 8 heads x 8 values */
__device__ __forceinline__ void pvt_tile(const float (*Vs)[68], const float (*Ws)[20], int l, int hb, int db, int nc,
                                         float (*acc)[8]) {
    for (int j = 0; j < nc; j += 16) {
        const float4 va = *(const float4 *)&Vs[j + l][db], vb = *(const float4 *)&Vs[j + l][db + 4];
        const float4 wa = *(const float4 *)&Ws[j + l][hb], wb = *(const float4 *)&Ws[j + l][hb + 4];
        const float vv[8] = {va.x, va.y, va.z, va.w, vb.x, vb.y, vb.z, vb.w};
        const float ww[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
        for (int x = 0; x < 8; x++)
#pragma unroll
            for (int y = 0; y < 8; y++) acc[x][y] = fmaf(vv[y], ww[x], acc[x][y]);
    }
}

/* The 16 lanes of each output added by shuffles in hsum16's tree, times
 * the sigmoid gate: lane l writes head hb + l / 2's values db + 4 (l % 2) .. + 3 */
__device__ __forceinline__ void pvt_out(const cu_attn_args &a, float (*acc)[8], int t, int g, int dh, int G, int l, int hb,
                                        int db) {
#pragma unroll
    for (int x = 0; x < 8; x++)
#pragma unroll
        for (int y = 0; y < 8; y++) {
            float s = acc[x][y];
            s += __shfl_xor_sync(0xffffffffu, s, 8);
            s += __shfl_xor_sync(0xffffffffu, s, 4);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            acc[x][y] = s;
        }
    const int x = l >> 1, hh = hb + x;
    if (hh >= G) return;
    float r4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int xx = 0; xx < 8; xx++)
        if (xx == x)
#pragma unroll
            for (int y = 0; y < 4; y++) r4[y] = l & 1 ? acc[xx][4 + y] : acc[xx][y];
    const size_t o = (size_t)t * a.n_head * 128 + (size_t)(g * G + hh) * 128 + dh + db + 4 * (l & 1);
#pragma unroll
    for (int y = 0; y < 4; y++) a.out[o + y] = r4[y] * (1.0f / (1.0f + expf_libm(-a.gate[o + y])));
}

__global__ void __launch_bounds__(256, 2) k_pv_t(cu_attn_args a) {
    const int t = blockIdx.x, g = blockIdx.y, dh = blockIdx.z * 64, G = a.n_head / a.n_head_kv;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, true, &c_lo, &c_hi, &p0);
    const int np = (c_hi - c_lo) / 16 * 16, n_kv = a.n_head_kv * 128;
    const int l = threadIdx.x & 15, grp = threadIdx.x >> 4, hb = (grp >> 3) * 8, db = (grp & 7) * 8;
    __shared__ __align__(16) float Vs[PT_CELLS][68];
    __shared__ __align__(16) float Ws[PT_CELLS][20];
    /* the weights: F16, packed at the start of each row (k_softmax_t) */
    const uint16_t *w0 = (const uint16_t *)(a.scores + ((size_t)t * a.n_head + (size_t)g * G) * a.max_span);
    const uint16_t *v0 = kv.v + (size_t)c_lo * n_kv + (size_t)g * 128 + dh;
    float acc[8][8];
#pragma unroll
    for (int x = 0; x < 8; x++)
#pragma unroll
        for (int y = 0; y < 8; y++) acc[x][y] = 0.f;
    /* thread i fetches V words (cell i / 8 and 32 + i / 8, 8 values at 8 (i % 8))
     * and weights (head i / 16, cells i % 16 + 16 q: a warp's load takes 16
     * neighbouring weights of each of two heads) */
    uint4 pv[2];
    float pw[4];
    auto fetch = [&](int c0) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int c = (threadIdx.x >> 3) + 32 * r;
            pv[r] = c0 + c < np ? *(const uint4 *)(v0 + (size_t)(c0 + c) * n_kv + 8 * (threadIdx.x & 7)) : make_uint4(0, 0, 0, 0);
        }
        const int hh = threadIdx.x >> 4, c = threadIdx.x & 15;
#pragma unroll
        for (int q = 0; q < 4; q++)
            pw[q] = hh < G && c0 + c + 16 * q < np ? h2f(w0[(size_t)hh * 2 * a.max_span + c0 + c + 16 * q]) : 0.f;
    };
    int s_lo, s_hi;
    pvt_hole(a, kv, a.pos[t], p0, np, &s_lo, &s_hi);
    auto next = [&](int c) { return c >= s_lo && c < s_hi ? s_hi : c; };
    if (next(0) < np) fetch(next(0));
    for (int c0 = next(0); c0 < np; c0 = next(c0 + PT_CELLS)) {
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int c = (threadIdx.x >> 3) + 32 * r, d = 8 * (threadIdx.x & 7);
            const uint32_t ws[4] = {pv[r].x, pv[r].y, pv[r].z, pv[r].w};
            float f[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                f[2 * j] = h2f((uint16_t)(ws[j] & 0xFFFF));
                f[2 * j + 1] = h2f((uint16_t)(ws[j] >> 16));
            }
            /* 16-byte stores: a warp's store has no bank conflicts */
            *(float4 *)&Vs[c][d] = make_float4(f[0], f[1], f[2], f[3]);
            *(float4 *)&Vs[c][d + 4] = make_float4(f[4], f[5], f[6], f[7]);
        }
        {
            const int hh = threadIdx.x >> 4, c = threadIdx.x & 15;
#pragma unroll
            for (int q = 0; q < 4; q++) Ws[c + 16 * q][hh] = pw[q];
        }
        __syncthreads();
        if (next(c0 + PT_CELLS) < np) fetch(next(c0 + PT_CELLS));
        pvt_tile(Vs, Ws, l, hb, db, np - c0 < PT_CELLS ? np - c0 : PT_CELLS, acc);
    }
    pvt_out(a, acc, t, g, dh, G, l, hb, db);
}

/* ---- decode: lone tokens, ggml_vec_dot_f16's 64 lanes, tiled -----------
 * A few tokens, each alone in its session: the query heads of one KV head
 * share the K rows (k_scores_d), and V's 64 accumulator lanes are split
 * over blocks so that enough of them run (k_pv_d writes each lane's sum,
 * k_pv_comb combines the lanes as k_pv does). */

#define SD_CELLS 32 /* cells per block of k_scores_d */

/* Grid (cell blocks, T, KV heads); 128 threads: warp w scores query heads
 * 4w .. 4w + 3 of the KV head, lane x cell cb + x. A cell's K row is
 * converted once for its four heads, and the queries are read four at a
 * time. ggml_vec_dot_f16's order for 128 values: 64 lane sums
 * acc[j][l] = k[16j + l] q[16j + l] (an FMA on 0) then + k[64 + 16j + l]
 * q[64 + 16j + l] (the products of two F16 values are exact, so each is
 * one FMA), then per l (acc0 + acc2) + (acc1 + acc3), then hsum16, whose
 * first step (l + (l + 8)) is taken as soon as lane l + 8 is done. */
__global__ void __launch_bounds__(128) k_scores_d(cu_attn_args a) {
    const int t = blockIdx.y, g = blockIdx.z, G = a.n_head / a.n_head_kv, pos = a.pos[t];
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(pos, kv.rows, a.swa, a.n_swa, false, &c_lo, &c_hi, &p0);
    const int cb = c_lo + blockIdx.x * SD_CELLS;
    if (cb >= c_hi) return;
    pdl_wait(); /* after the span (k_softmax) */
    pdl_launch();
    __shared__ float4 s_q[16][32];          /* head, values 4i .. 4i + 3 (rounded to F16) */
    __shared__ uint4 s_k[SD_CELLS][16 + 1]; /* cell, values 8m .. 8m + 7; padded: no bank conflicts */
    const int n_kv = a.n_head_kv * 128;
    /* every load of the tiles in flight before the first store */
    constexpr int NQ = 16 * 32 / 128, NK = SD_CELLS * 16 / 128;
    const float4 *qg = (const float4 *)(a.q + (size_t)t * a.n_head * 128 + (size_t)g * G * 128);
    float4 qr[NQ];
    uint4 kr[NK];
#pragma unroll
    for (int j = 0; j < NQ; j++) {
        const int i = threadIdx.x + 128 * j;
        qr[j] = i < G * 32 ? __ldg(qg + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int j = 0; j < NK; j++) {
        const int i = threadIdx.x + 128 * j, c = cb + i / 16;
        kr[j] = c < c_hi ? __ldg((const uint4 *)(kv.k + (size_t)c * n_kv + (size_t)g * 128) + i % 16)
                         : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < NQ; j++) {
        const int i = threadIdx.x + 128 * j;
        s_q[i / 32][i % 32] = make_float4(f16_round(qr[j].x), f16_round(qr[j].y), f16_round(qr[j].z), f16_round(qr[j].w));
    }
#pragma unroll
    for (int j = 0; j < NK; j++) {
        const int i = threadIdx.x + 128 * j;
        s_k[i / 16][i % 16] = kr[j];
    }
    __syncthreads();
    const int h0 = 4 * (threadIdx.x >> 5), cc = threadIdx.x & 31, c = cb + cc;
    if (h0 >= G || c >= c_hi) return;
    float hs[4][8]; /* hsum16's first step: lane l + lane l + 8 */
#pragma unroll
    for (int b = 0; b < 2; b++) {     /* lanes 8b .. 8b + 7 */
#pragma unroll
        for (int l4 = 0; l4 < 2; l4++) { /* lanes 8b + 4 l4 .. + 3 */
            float klo[4][4], khi[4][4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint4 wl = s_k[cc][2 * j + b], wh = s_k[cc][2 * j + b + 8];
                const uint32_t l0 = l4 ? wl.z : wl.x, l1 = l4 ? wl.w : wl.y, u0 = l4 ? wh.z : wh.x,
                               u1 = l4 ? wh.w : wh.y;
                klo[j][0] = h2f((uint16_t)(l0 & 0xFFFF)), klo[j][1] = h2f((uint16_t)(l0 >> 16));
                klo[j][2] = h2f((uint16_t)(l1 & 0xFFFF)), klo[j][3] = h2f((uint16_t)(l1 >> 16));
                khi[j][0] = h2f((uint16_t)(u0 & 0xFFFF)), khi[j][1] = h2f((uint16_t)(u0 >> 16));
                khi[j][2] = h2f((uint16_t)(u1 & 0xFFFF)), khi[j][3] = h2f((uint16_t)(u1 >> 16));
            }
#pragma unroll
            for (int h = 0; h < 4; h++) {
                float acc[4][4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float4 ql = s_q[h0 + h][4 * j + 2 * b + l4], qh = s_q[h0 + h][16 + 4 * j + 2 * b + l4];
                    acc[j][0] = fmaf(khi[j][0], qh.x, fmaf(klo[j][0], ql.x, 0.0f));
                    acc[j][1] = fmaf(khi[j][1], qh.y, fmaf(klo[j][1], ql.y, 0.0f));
                    acc[j][2] = fmaf(khi[j][2], qh.z, fmaf(klo[j][2], ql.z, 0.0f));
                    acc[j][3] = fmaf(khi[j][3], qh.w, fmaf(klo[j][3], ql.w, 0.0f));
                }
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    const float s = __fadd_rn(__fadd_rn(acc[0][x], acc[2][x]), __fadd_rn(acc[1][x], acc[3][x]));
                    if (b == 0) hs[h][4 * l4 + x] = s;
                    else hs[h][4 * l4 + x] = __fadd_rn(hs[h][4 * l4 + x], s);
                }
            }
        }
    }
    const int p = pos - ((pos - c) % kv.rows + kv.rows) % kv.rows;
    const bool masked = p < p0 || p < 0;
#pragma unroll
    for (int h = 0; h < 4; h++)
        if (h0 + h < G)
            a.scores[((size_t)t * a.n_head + (size_t)g * G + h0 + h) * a.max_span + (c - c_lo)] =
                masked ? -INFINITY : hsum8(hs[h]) * (1.0f / sqrtf(128.0f));
}

/* Grid (64 / L groups of L lanes, 4 groups of 32 values, T x KV heads);
 * 256 threads: thread (hp, d) sums lanes L bx .. L bx + L - 1 for heads
 * 2hp, 2hp + 1, each lane's cells in order. */
template <int L>
__global__ void __launch_bounds__(256) k_pv_d(cu_attn_args a) {
    const int a0 = blockIdx.x * L, d = blockIdx.y * 32 + (threadIdx.x & 31), hp = threadIdx.x >> 5;
    const int t = blockIdx.z / a.n_head_kv, g = blockIdx.z % a.n_head_kv, G = a.n_head / a.n_head_kv;
    if (2 * hp >= G) return;
    const int h0 = 2 * hp, h1 = 2 * hp + 1 < G ? 2 * hp + 1 : 2 * hp;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, false, &c_lo, &c_hi, &p0);
    pdl_wait(); /* after the span (k_softmax) */
    pdl_launch();
    const int np = (c_hi - c_lo) / 64 * 64, n_kv = a.n_head_kv * 128;
    const float *w = a.scores + ((size_t)t * a.n_head + (size_t)g * G) * a.max_span + a0;
    const uint16_t *v = kv.v + (size_t)(c_lo + a0) * n_kv + (size_t)g * 128 + d;
    float acc[2][L];
#pragma unroll
    for (int x = 0; x < 2; x++)
#pragma unroll
        for (int l = 0; l < L; l++) acc[x][l] = 0;
    /* B cells of each lane loaded before they are added: a lane's cells
     * are one chain, so at depth the loads in flight set the speed */
    constexpr int B = 16 / L;
    int c = 0;
    for (; c + 64 * B <= np; c += 64 * B) {
        float vv[B][L], w0[B][L], w1[B][L];
#pragma unroll
        for (int b = 0; b < B; b++)
#pragma unroll
            for (int l = 0; l < L; l++) {
                const int cc = c + 64 * b + l;
                vv[b][l] = h2f(__ldg(v + (size_t)cc * n_kv));
                w0[b][l] = __ldg(w + (size_t)h0 * a.max_span + cc);
                w1[b][l] = __ldg(w + (size_t)h1 * a.max_span + cc);
            }
#pragma unroll
        for (int b = 0; b < B; b++)
#pragma unroll
            for (int l = 0; l < L; l++) {
                acc[0][l] = fmaf(vv[b][l], w0[b][l], acc[0][l]); /* exact products (F16 x F16) */
                acc[1][l] = fmaf(vv[b][l], w1[b][l], acc[1][l]);
            }
    }
    for (; c < np; c += 64)
#pragma unroll
        for (int l = 0; l < L; l++) {
            const float vv = h2f(v[(size_t)(c + l) * n_kv]);
            acc[0][l] = fmaf(vv, w[(size_t)h0 * a.max_span + c + l], acc[0][l]);
            acc[1][l] = fmaf(vv, w[(size_t)h1 * a.max_span + c + l], acc[1][l]);
        }
    float *o = a.lanes + ((size_t)t * a.n_head + (size_t)g * G) * 64 * 128 + d;
#pragma unroll
    for (int l = 0; l < L; l++) {
        o[((size_t)h0 * 64 + a0 + l) * 128] = acc[0][l];
        if (h1 != h0) o[((size_t)h1 * 64 + a0 + l) * 128] = acc[1][l];
    }
}

/* Several lone tokens (T >= 2: serve's slots, verification blocks), tiled:
 * the lane chains of k_pv_d (lane l of value d and head h adds the cells
 * l, l + 64, ... in order, one fmaf each), each V value loaded once for
 * eight heads (in k_pv_d each of a block's eight warps loads it again for
 * its two heads: 867 instructions a warp for four tokens at depth 2048), with
 * the V and weight tiles of PT_KS cell groups staged in shared memory,
 * the next stage's loads in flight while this one is added. Grid (4 groups
 * of 16 lanes, 4 groups of 32 values, T x KV heads); 256 threads: thread
 * (hs, li, vs) keeps the chains of heads 8 hs .. 8 hs + 7, lane
 * 16 bx + li, values 32 by + 4 vs .. + 3. The groups past the last are
 * padded with zero weights and values: fmaf(0, 0, acc) is acc (a chain
 * starts at +0 and never holds -0). */
#define PT_KS 8
__global__ void __launch_bounds__(256) k_pv_dt(cu_attn_args a) {
    const int tid = threadIdx.x, vs = tid & 7, li = (tid >> 3) & 15, hs = tid >> 7;
    const int l0 = blockIdx.x * 16, d0 = blockIdx.y * 32;
    const int t = blockIdx.z / a.n_head_kv, g = blockIdx.z % a.n_head_kv, G = a.n_head / a.n_head_kv;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, false, &c_lo, &c_hi, &p0);
    pdl_wait(); /* after the span (k_softmax) */
    pdl_launch();
    const int nk = (c_hi - c_lo) / 64, n_kv = a.n_head_kv * 128;
    __shared__ uint2 s_v[2][PT_KS][16][8];    /* group, lane, 4 values (F16) */
    __shared__ float s_w[2][PT_KS][16][16];   /* group, head, lane */
    const float *wrow = a.scores + ((size_t)t * a.n_head + (size_t)g * G) * a.max_span + l0;
    const uint16_t *vrow = kv.v + (size_t)(c_lo + l0) * n_kv + (size_t)g * 128 + d0;
    /* this thread's share of a stage: V uint4 i (group i / 64, lane (i / 4) % 16, values 8 (i % 4) ..) and
     * weights i (group i / 256, head (i / 16) % 16, lane i % 16), i = tid + 256 j */
    constexpr int NV = PT_KS * 64 / 256, NW = PT_KS * 256 / 256;
    uint4 rv[NV];
    float rw[NW];
    auto load = [&](int k0) {
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int i = tid + 256 * j, k = k0 + i / 64;
            rv[j] = k < nk ? __ldg((const uint4 *)(vrow + (size_t)(64 * k + (i / 4) % 16) * n_kv + 8 * (i % 4)))
                           : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < NW; j++) {
            const int i = tid + 256 * j, k = k0 + i / 256, h = (i / 16) % 16;
            rw[j] = k < nk && h < G ? __ldg(wrow + (size_t)h * a.max_span + 64 * k + i % 16) : 0.0f;
        }
    };
    auto store = [&](int b) {
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int i = tid + 256 * j;
            *(uint4 *)&s_v[b][i / 64][(i / 4) % 16][2 * (i % 4)] = rv[j];
        }
#pragma unroll
        for (int j = 0; j < NW; j++) {
            const int i = tid + 256 * j;
            s_w[b][i / 256][(i / 16) % 16][i % 16] = rw[j];
        }
    };
    float acc[8][4];
#pragma unroll
    for (int h = 0; h < 8; h++) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = 0;
    load(0);
    store(0);
    __syncthreads();
    for (int k0 = 0, b = 0; k0 < nk; k0 += PT_KS, b ^= 1) {
        const bool more = k0 + PT_KS < nk;
        if (more) load(k0 + PT_KS);
#pragma unroll
        for (int ks = 0; ks < PT_KS; ks++) {
            const uint2 vv = s_v[b][ks][li][vs];
            const float v0 = h2f((uint16_t)(vv.x & 0xFFFF)), v1 = h2f((uint16_t)(vv.x >> 16)),
                        v2 = h2f((uint16_t)(vv.y & 0xFFFF)), v3 = h2f((uint16_t)(vv.y >> 16));
#pragma unroll
            for (int h = 0; h < 8; h++) {
                const float w = s_w[b][ks][8 * hs + h][li];
                acc[h][0] = fmaf(v0, w, acc[h][0]);
                acc[h][1] = fmaf(v1, w, acc[h][1]);
                acc[h][2] = fmaf(v2, w, acc[h][2]);
                acc[h][3] = fmaf(v3, w, acc[h][3]);
            }
        }
        if (more) store(b ^ 1);
        __syncthreads();
    }
#pragma unroll
    for (int h = 0; h < 8; h++)
        if (8 * hs + h < G)
            *(float4 *)(a.lanes + (((size_t)t * a.n_head + (size_t)g * G + 8 * hs + h) * 64 + l0 + li) * 128 + d0 +
                        4 * vs) = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
}

/* The V pass of several lone tokens: k_pv_dt, or MUSER_CUDA_PVD_M=0:
 * k_pv_d, to compare (k_pv_dm, eight heads a warp without shared tiles,
 * was between them: 58.0 us a full layer of four tokens at 8192 against
 * k_pv_dt's 29 and k_pv_d's 72.5; deleted 2026-12-05) */
static bool pvd_tiled(void) {
    static const bool on = cu_env_digit("MUSER_CUDA_PVD_M", 1) != 0;
    return on;
}


/* lanes a thread of k_pv_d: 1 (64 blocks a KV head: 72.1 vs 65.4 tok/s at
 * depth 8192 with 4, bench/results/cuda-2026-12-02e), or
 * MUSER_CUDA_PVD_L=2|4, to compare */
static int pvd_lanes(void) {
    static int l = -1;
    if (l < 0) {
        const char *v = getenv("MUSER_CUDA_PVD_L");
        l = v && (*v == '2' || *v == '4') && !v[1] ? *v - '0' : 1;
    }
    return l;
}

/* One block (128 values) per row: the 64 lanes combined as ggml does,
 * the cells past the last 64 added in double, the gate. */
__global__ void __launch_bounds__(128) k_pv_comb(cu_attn_args a) {
    const int row = blockIdx.x, t = row / a.n_head, h = row % a.n_head, d = threadIdx.x;
    const int g = h / (a.n_head / a.n_head_kv), n_kv = a.n_head_kv * 128;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, false, &c_lo, &c_hi, &p0);
    pdl_wait(); /* after the span (k_softmax) */
    pdl_launch();
    const int m = c_hi - c_lo, np = m / 64 * 64;
    const float *ln = a.lanes + (size_t)row * 64 * 128 + d;
    float l16[16];
#pragma unroll
    for (int l = 0; l < 16; l++) {
        float a0 = ln[l * 128], a1 = ln[(16 + l) * 128], a2 = ln[(32 + l) * 128], a3 = ln[(48 + l) * 128];
        a0 += a2;
        a1 += a3;
        a0 += a1;
        l16[l] = a0;
    }
    double dd = hsum16(l16);
    const float *w = a.scores + (size_t)row * a.max_span;
    const uint16_t *v = kv.v + (size_t)c_lo * n_kv + (size_t)g * 128 + d;
#pragma unroll 8
    for (int c = np; c < m; c++) dd += (double)(h2f(v[(size_t)c * n_kv]) * w[c]);
    const size_t o = (size_t)t * a.n_head * 128 + (size_t)h * 128 + d;
    a.out[o] = (float)dd * (1.0f / (1.0f + expf_libm(-a.gate[o])));
}

/* decode's softmax: 1024 threads a row and the chunk sums in shared
 * memory, or MUSER_CUDA_SM_DEC=0: the row kernels' form (256 threads,
 * chunk sums in a.chunk_sums), to compare */
static bool sm_dec(void) {
    static const bool on = cu_env_digit("MUSER_CUDA_SM_DEC", 1) != 0;
    return on;
}

/* MUSER_CUDA_NO_TILED_ATTN=1 keeps every pass on the row kernels (to compare) */
static bool tiled_ok(void) {
    static const bool ok = cu_env_digit("MUSER_CUDA_NO_TILED_ATTN", 0) != 1;
    return ok;
}

/* The prefill kernels' one-time setup: their dynamic shared memory
 * (k_scores_t's, k_softmax_t's) needs the opt-in above 48 KB (without it,
 * prefill runs the row kernels) */
static bool prefill_ok(void) {
    static int ok = -1;
    if (ok < 0)
        ok = cudaFuncSetAttribute(k_scores_t, cudaFuncAttributeMaxDynamicSharedMemorySize, ST_SMEM) == cudaSuccess &&
             cudaFuncSetAttribute(k_softmax_t<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (SMT_CELLS + SMT_CELLS / 16) * (int)sizeof(float)) == cudaSuccess;
    return ok;
}

int cu_attn_mode(int T, const uint8_t *batch, int n_head, int n_head_kv, int head_dim) {
    if (head_dim != 128 || n_head % n_head_kv || n_head / n_head_kv > 16 || !tiled_ok()) return CU_ATTN_ROWS;
    int nb = 0;
    for (int t = 0; t < T; t++) nb += batch[t] != 0;
    if (nb == T) return prefill_ok() ? CU_ATTN_PREFILL : CU_ATTN_ROWS; /* set up here, before any launch */
    if (nb == 0 && T <= CU_DECODE_MAX_T) return CU_ATTN_DECODE;
    return CU_ATTN_ROWS;
}

void cu_attention(cudaStream_t st, const cu_attn_args *a) {
    const int R = a->T * a->n_head;
    switch (a->mode) {
    case CU_ATTN_PREFILL:
        k_scores_t<<<dim3((a->max_span + ST_CELLS - 1) / ST_CELLS, (a->T + ST_TOK - 1) / ST_TOK, a->n_head_kv), 256,
                     ST_SMEM, st>>>(*a);
        if (a->max_span <= SMT_CELLS) {
            const int cap = (a->max_span + 15) & ~15;
            k_softmax_t<true><<<R, SMT_THREADS, (cap + cap / 16) * sizeof(float), st>>>(*a);
        } else {
            k_softmax_t<false><<<R, SMT_THREADS, 0, st>>>(*a);
        }
        k_pv_t<<<dim3(a->T, a->n_head_kv, 2), 256, 0, st>>>(*a);
        break;
    case CU_ATTN_DECODE:
        launch_pdl(k_scores_d, dim3((a->max_span + SD_CELLS - 1) / SD_CELLS, a->T, a->n_head_kv), dim3(128), 0, st, *a);
        if (sm_dec()) launch_pdl(k_softmax<true>, dim3(R), dim3(1024), 0, st, *a);
        else launch_pdl(k_softmax<false>, dim3(R), dim3(256), 0, st, *a);
        if (a->T >= 2 && pvd_tiled()) launch_pdl(k_pv_dt, dim3(4, 4, a->T * a->n_head_kv), dim3(256), 0, st, *a);
        else if (pvd_lanes() == 1) launch_pdl(k_pv_d<1>, dim3(64, 4, a->T * a->n_head_kv), dim3(256), 0, st, *a);
        else if (pvd_lanes() == 2) launch_pdl(k_pv_d<2>, dim3(32, 4, a->T * a->n_head_kv), dim3(256), 0, st, *a);
        else launch_pdl(k_pv_d<4>, dim3(16, 4, a->T * a->n_head_kv), dim3(256), 0, st, *a);
        launch_pdl(k_pv_comb, dim3(R), dim3(128), 0, st, *a);
        break;
    default:
        k_scores<<<dim3((a->max_span + 127) / 128, R), 128, (size_t)a->head_dim * sizeof(float), st>>>(*a);
        k_softmax<false><<<R, 256, 0, st>>>(*a);
        k_pv<<<dim3(R, (a->head_dim + 31) / 32), dim3(32, 32), 0, st>>>(*a);
    }
}
