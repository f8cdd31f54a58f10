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

/* Softmax of a row into F16-exact weights: e = expf_ggml(x - max), each
 * 16 cells' sum as hsum16, the chunks added in double in cell order. One
 * block per row. */
__global__ void k_softmax(cu_attn_args a) {
    pdl_wait();
    pdl_launch();
    const int row = blockIdx.x, t = row / a.n_head;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, a.batch[t], &c_lo, &c_hi, &p0);
    const int m = c_hi - c_lo, nch = m / 16;
    float *x = a.scores + (size_t)row * a.max_span;
    float *cs = a.chunk_sums + (size_t)row * (a.max_span / 16);
    __shared__ float s_max[32];
    __shared__ double s_sum;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < m; i += blockDim.x) mx = fmaxf(mx, x[i]);
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0) s_max[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < (int)blockDim.x / 32; w++) mx = fmaxf(mx, s_max[w]);
    for (int k = threadIdx.x; k < nch; k += blockDim.x) {
        float e[16];
#pragma unroll
        for (int l = 0; l < 16; l++) {
            e[l] = expf_ggml(x[16 * k + l] - mx);
            x[16 * k + l] = e[l];
        }
        cs[k] = hsum16(e);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0;
#pragma unroll 8
        for (int k = 0; k < nch; k++) sum += (double)cs[k];
        s_sum = sum;
    }
    __syncthreads();
    const float inv = (float)(1.0 / s_sum);
    for (int i = threadIdx.x; i < m; i += blockDim.x) x[i] = f16_round(x[i] * inv);
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
 * row read from memory: a block works on one token and one KV head. */

#define SB_CELLS 64 /* cells per block of k_scores_b */

/* 128 threads: thread (hp, cg) scores heads 2hp, 2hp + 1 against cells
 * cg, cg + 16, cg + 32, cg + 48 of the block's 64. */
__global__ void __launch_bounds__(128) k_scores_b(cu_attn_args a) {
    const int t = blockIdx.y, g = blockIdx.z, G = a.n_head / a.n_head_kv, pos = a.pos[t];
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(pos, kv.rows, a.swa, a.n_swa, true, &c_lo, &c_hi, &p0);
    const int cb = c_lo + blockIdx.x * SB_CELLS;
    if (cb >= c_hi) return; /* the whole block */
    __shared__ float s_qv[16][132];
    __shared__ uint32_t s_k[SB_CELLS][65]; /* pairs of halves; banks cg + i distinct */
    const int n_kv = a.n_head_kv * 128;
    for (int i = threadIdx.x; i < G * 128; i += blockDim.x)
        s_qv[i / 128][i % 128] = f16_round(a.q[(size_t)t * a.n_head * 128 + (size_t)g * G * 128 + i]);
    for (int i = threadIdx.x; i < SB_CELLS * 64; i += blockDim.x) {
        const int cc = i / 64, wd = i % 64, c = cb + cc;
        s_k[cc][wd] = c < c_hi ? ((const uint32_t *)(kv.k + (size_t)c * n_kv + (size_t)g * 128))[wd] : 0;
    }
    __syncthreads();
    const int hp = threadIdx.x >> 4, cg = threadIdx.x & 15;
    if (2 * hp >= G) return;
    float acc[2][4][16];
#pragma unroll
    for (int x = 0; x < 2; x++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int l = 0; l < 16; l++) acc[x][j][l] = 0;
    const int h1 = 2 * hp + 1 < G ? 2 * hp + 1 : 2 * hp;
    for (int i = 0; i < 128; i += 16) {
        float qv[2][16];
#pragma unroll
        for (int l = 0; l < 16; l++) {
            qv[0][l] = s_qv[2 * hp][i + l];
            qv[1][l] = s_qv[h1][i + l];
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t *kr = &s_k[cg + 16 * j][i / 2];
#pragma unroll
            for (int l2 = 0; l2 < 8; l2++) {
                const uint32_t kw = kr[l2];
                const float k0 = h2f((uint16_t)(kw & 0xFFFF)), k1 = h2f((uint16_t)(kw >> 16));
#pragma unroll
                for (int x = 0; x < 2; x++) {
                    acc[x][j][2 * l2] += k0 * qv[x][2 * l2];
                    acc[x][j][2 * l2 + 1] += k1 * qv[x][2 * l2 + 1];
                }
            }
        }
    }
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int hh = 2 * hp + x;
        if (hh >= G) break;
        float *out = a.scores + ((size_t)t * a.n_head + (size_t)g * G + hh) * a.max_span;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int c = cb + cg + 16 * j;
            if (c >= c_hi) continue;
            const int p = pos - ((pos - c) % kv.rows + kv.rows) % kv.rows;
            out[c - c_lo] = p < p0 || p < 0 ? -INFINITY : hsum16(acc[x][j]) * (1.0f / sqrtf(128.0f));
        }
    }
}

/* 256 threads: thread (half, d) sums, for heads 8 half .. 8 half + 7 and
 * output value d, the 16 lanes (cell index mod 16) in cell order, then
 * hsum16 and the gate, as k_pv's batch rows. */
__global__ void __launch_bounds__(256) k_pv_b(cu_attn_args a) {
    const int t = blockIdx.x, g = blockIdx.y, G = a.n_head / a.n_head_kv;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, true, &c_lo, &c_hi, &p0);
    const int np = (c_hi - c_lo) / 16 * 16, n_kv = a.n_head_kv * 128;
    const int d = threadIdx.x & 127, hb = (threadIdx.x >> 7) * 8;
    __shared__ float s_v[16][128];
    __shared__ float s_w[16][16];
    const float *w0 = a.scores + ((size_t)t * a.n_head + (size_t)g * G) * a.max_span;
    const uint16_t *v0 = kv.v + (size_t)c_lo * n_kv + (size_t)g * 128;
    float acc[8][16];
#pragma unroll
    for (int x = 0; x < 8; x++)
#pragma unroll
        for (int l = 0; l < 16; l++) acc[x][l] = 0;
    /* the next tile's values are loaded into registers while this one is
     * used: thread i holds V elements i + 256 r (r < 8) and weight i */
    uint16_t pv[8];
    float pw = 0;
    auto fetch = [&](int c0) {
#pragma unroll
        for (int r = 0; r < 8; r++) {
            const int i = threadIdx.x + 256 * r;
            pv[r] = v0[(size_t)(c0 + i / 128) * n_kv + i % 128];
        }
        pw = threadIdx.x / 16 < G ? w0[(size_t)(threadIdx.x / 16) * a.max_span + c0 + threadIdx.x % 16] : 0.f;
    };
    if (np > 0) fetch(0);
    for (int c0 = 0; c0 < np; c0 += 16) {
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 8; r++) {
            const int i = threadIdx.x + 256 * r;
            s_v[i / 128][i % 128] = h2f(pv[r]);
        }
        s_w[threadIdx.x / 16][threadIdx.x % 16] = pw;
        __syncthreads();
        if (c0 + 16 < np) fetch(c0 + 16);
#pragma unroll
        for (int l = 0; l < 16; l++) {
            const float vv = s_v[l][d];
#pragma unroll
            for (int x = 0; x < 8; x++) acc[x][l] += vv * s_w[hb + x][l];
        }
    }
#pragma unroll
    for (int x = 0; x < 8; x++) {
        const int hh = hb + x;
        if (hh >= G) break;
        const size_t o = (size_t)t * a.n_head * 128 + (size_t)(g * G + hh) * 128 + d;
        a.out[o] = hsum16(acc[x]) * (1.0f / (1.0f + expf_libm(-a.gate[o])));
    }
}

/* ---- decode: lone tokens, ggml_vec_dot_f16's 64 lanes, tiled -----------
 * A few tokens, each alone in its session: the query heads of one KV head
 * share the K rows (k_scores_d), and V's 64 accumulator lanes are split
 * over blocks so that enough of them run (k_pv_d writes each lane's sum,
 * k_pv_comb combines the lanes as k_pv does). */

#define SD_CELLS 32 /* cells per block of k_scores_d */

/* 256 threads: thread (hh, cg) scores head hh against cells cg, cg + 16. */
__global__ void __launch_bounds__(256) k_scores_d(cu_attn_args a) {
    pdl_wait();
    pdl_launch();
    const int t = blockIdx.y, g = blockIdx.z, G = a.n_head / a.n_head_kv, pos = a.pos[t];
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(pos, kv.rows, a.swa, a.n_swa, false, &c_lo, &c_hi, &p0);
    const int cb = c_lo + blockIdx.x * SD_CELLS;
    if (cb >= c_hi) return;
    __shared__ float s_qv[16][132];
    __shared__ uint32_t s_k[SD_CELLS][65];
    const int n_kv = a.n_head_kv * 128;
    for (int i = threadIdx.x; i < G * 128; i += blockDim.x)
        s_qv[i / 128][i % 128] = f16_round(a.q[(size_t)t * a.n_head * 128 + (size_t)g * G * 128 + i]);
    for (int i = threadIdx.x; i < SD_CELLS * 64; i += blockDim.x) {
        const int cc = i / 64, wd = i % 64, c = cb + cc;
        s_k[cc][wd] = c < c_hi ? ((const uint32_t *)(kv.k + (size_t)c * n_kv + (size_t)g * 128))[wd] : 0;
    }
    __syncthreads();
    const int hh = threadIdx.x >> 4, cg = threadIdx.x & 15;
    if (hh >= G) return;
    float *out = a.scores + ((size_t)t * a.n_head + (size_t)g * G + hh) * a.max_span;
    for (int jj = 0; jj < 2; jj++) {
        const int cc = cg + 16 * jj, c = cb + cc;
        if (c >= c_hi) break;
        float acc[4][16];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int l = 0; l < 16; l++) acc[j][l] = 0;
#pragma unroll
        for (int i = 0; i < 128; i += 64)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int l2 = 0; l2 < 8; l2++) {
                    const uint32_t kw = s_k[cc][(i + 16 * j) / 2 + l2];
                    acc[j][2 * l2] += h2f((uint16_t)(kw & 0xFFFF)) * s_qv[hh][i + 16 * j + 2 * l2];
                    acc[j][2 * l2 + 1] += h2f((uint16_t)(kw >> 16)) * s_qv[hh][i + 16 * j + 2 * l2 + 1];
                }
#pragma unroll
        for (int l = 0; l < 16; l++) {
            acc[0][l] += acc[2][l];
            acc[1][l] += acc[3][l];
            acc[0][l] += acc[1][l];
        }
        const int p = pos - ((pos - c) % kv.rows + kv.rows) % kv.rows;
        out[c - c_lo] = p < p0 || p < 0 ? -INFINITY : hsum16(acc[0]) * (1.0f / sqrtf(128.0f));
    }
}

/* Grid (64 / L groups of L lanes, 4 groups of 32 values, T x KV heads);
 * 256 threads: thread (hp, d) sums lanes L bx .. L bx + L - 1 for heads
 * 2hp, 2hp + 1, each lane's cells in order. */
template <int L>
__global__ void __launch_bounds__(256) k_pv_d(cu_attn_args a) {
    pdl_wait();
    pdl_launch();
    const int a0 = blockIdx.x * L, d = blockIdx.y * 32 + (threadIdx.x & 31), hp = threadIdx.x >> 5;
    const int t = blockIdx.z / a.n_head_kv, g = blockIdx.z % a.n_head_kv, G = a.n_head / a.n_head_kv;
    if (2 * hp >= G) return;
    const int h0 = 2 * hp, h1 = 2 * hp + 1 < G ? 2 * hp + 1 : 2 * hp;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, false, &c_lo, &c_hi, &p0);
    const int np = (c_hi - c_lo) / 64 * 64, n_kv = a.n_head_kv * 128;
    const float *w = a.scores + ((size_t)t * a.n_head + (size_t)g * G) * a.max_span + a0;
    const uint16_t *v = kv.v + (size_t)(c_lo + a0) * n_kv + (size_t)g * 128 + d;
    float acc[2][L];
#pragma unroll
    for (int x = 0; x < 2; x++)
#pragma unroll
        for (int l = 0; l < L; l++) acc[x][l] = 0;
#pragma unroll 8
    for (int c = 0; c < np; c += 64)
#pragma unroll
        for (int l = 0; l < L; l++) {
            const float vv = h2f(v[(size_t)(c + l) * n_kv]);
            acc[0][l] += vv * w[(size_t)h0 * a.max_span + c + l];
            acc[1][l] += vv * w[(size_t)h1 * a.max_span + c + l];
        }
    float *o = a.lanes + ((size_t)t * a.n_head + (size_t)g * G) * 64 * 128 + d;
#pragma unroll
    for (int l = 0; l < L; l++) {
        o[((size_t)h0 * 64 + a0 + l) * 128] = acc[0][l];
        if (h1 != h0) o[((size_t)h1 * 64 + a0 + l) * 128] = acc[1][l];
    }
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
    pdl_wait();
    pdl_launch();
    const int row = blockIdx.x, t = row / a.n_head, h = row % a.n_head, d = threadIdx.x;
    const int g = h / (a.n_head / a.n_head_kv), n_kv = a.n_head_kv * 128;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, false, &c_lo, &c_hi, &p0);
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

/* MUSER_CUDA_NO_TILED_ATTN=1 keeps every pass on the row kernels (to compare) */
static bool tiled_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        const char *no = getenv("MUSER_CUDA_NO_TILED_ATTN");
        ok = !(no && *no == '1');
    }
    return ok;
}

int cu_attn_mode(int T, const uint8_t *batch, int n_head, int n_head_kv, int head_dim) {
    if (head_dim != 128 || n_head % n_head_kv || n_head / n_head_kv > 16 || !tiled_ok()) return CU_ATTN_ROWS;
    int nb = 0;
    for (int t = 0; t < T; t++) nb += batch[t] != 0;
    if (nb == T) return CU_ATTN_PREFILL;
    if (nb == 0 && T <= CU_DECODE_MAX_T) return CU_ATTN_DECODE;
    return CU_ATTN_ROWS;
}

void cu_attention(cudaStream_t st, const cu_attn_args *a) {
    const int R = a->T * a->n_head;
    switch (a->mode) {
    case CU_ATTN_PREFILL:
        k_scores_b<<<dim3((a->max_span + SB_CELLS - 1) / SB_CELLS, a->T, a->n_head_kv), 128, 0, st>>>(*a);
        k_softmax<<<R, 256, 0, st>>>(*a);
        k_pv_b<<<dim3(a->T, a->n_head_kv), 256, 0, st>>>(*a);
        break;
    case CU_ATTN_DECODE:
        launch_pdl(k_scores_d, dim3((a->max_span + SD_CELLS - 1) / SD_CELLS, a->T, a->n_head_kv), dim3(256), 0, st, *a);
        launch_pdl(k_softmax, dim3(R), dim3(256), 0, st, *a);
        if (pvd_lanes() == 1) launch_pdl(k_pv_d<1>, dim3(64, 4, a->T * a->n_head_kv), dim3(256), 0, st, *a);
        else if (pvd_lanes() == 2) launch_pdl(k_pv_d<2>, dim3(32, 4, a->T * a->n_head_kv), dim3(256), 0, st, *a);
        else launch_pdl(k_pv_d<4>, dim3(16, 4, a->T * a->n_head_kv), dim3(256), 0, st, *a);
        launch_pdl(k_pv_comb, dim3(R), dim3(128), 0, st, *a);
        break;
    default:
        k_scores<<<dim3((a->max_span + 127) / 128, R), 128, (size_t)a->head_dim * sizeof(float), st>>>(*a);
        k_softmax<<<R, 256, 0, st>>>(*a);
        k_pv<<<dim3(R, (a->head_dim + 31) / 32), dim3(32, 32), 0, st>>>(*a);
    }
}
