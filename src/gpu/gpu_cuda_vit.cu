/* gpu_cuda_vit.cu: Muse Glimmer's vision encoder on the device (gpu.h,
 * mu_gpu_vit_*): the projector's weights uploaded once, then one image at a
 * time through the same steps as src/vision/vit.c.
 * Owns: the weights on the device (matrices as F16, vectors F32), one
 * stream, a scratch arena that grows to the largest image seen, and the
 * kernels: im2col in the permuted token order, F16 tensor-core GEMMs with
 * F32 accumulation and a fused epilogue (bias, GELU, residual: k_gemm_tc on
 * mma.m16n8k16, k_gemm on WMMA where rows are not whole 16-byte pieces),
 * layer norm, 2-D RoPE from the host's cos/sin table, windowed/global
 * attention with an online softmax (k_attn_tc on mma.m16n8k16 for head
 * sizes 32, 64, 96, 128; k_attn, a thread a query row, for others), and the
 * 2x2 pixel shuffle; MUSER_CUDA_VIT_PROF's phase timer.
 * Does not own: the token layout (permutation, RoPE positions, windows,
 * the resized position grid): the host computes it (src/vision, mu_vit_plan)
 * so the CPU and the device use the same integers and floats.
 * Accuracy, not bit parity: the inputs of every matmul are rounded to F16
 * as the CPU rounds them (ggml's F16 path) and K, V are F16 as on the CPU,
 * but the sums run in another order, so results differ from the CPU's in
 * the last bits; tests/gpu/test_gpu_vision.c bounds the difference. */
#include <mma.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mm.cuh"
#include "vit_index.h"

using namespace nvcuda;

#define VCK(call, what)                                                              \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) return cu_cuda_fail_in(err, e_, "cuda vision", what); \
    } while (0)
/* after every launch: a bad configuration is reported at once */
#define VLAUNCHED(what) VCK(cudaGetLastError(), what)

/* ---- kernels ------------------------------------------------------------ */

/* weight rows of `type` -> F16 (n = rows * cols elements; Q8_0: blocks of
 * 34 bytes read bytewise, so no alignment is assumed) */
__global__ void k_to_f16(const uint8_t *src, uint32_t type, int64_t rows, int64_t cols, size_t row_bytes,
                         __half *dst) {
    const int64_t n = rows * cols;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / cols, c = e % cols;
        const uint8_t *row = src + (size_t)r * row_bytes;
        float v;
        if (type == MU_T_F32) {
            v = ((const float *)row)[c];
        } else if (type == MU_T_BF16) {
            v = bf2f(((const uint16_t *)row)[c]);
        } else { /* MU_T_Q8_0 */
            const uint8_t *b = row + (size_t)(c / 32) * 34;
            const float d = h2f((uint16_t)(b[0] | (b[1] << 8)));
            v = d * (float)(int8_t)b[2 + c % 32];
        }
        dst[e] = __float2half_rn(v);
    }
}

/* col[i][(ch * ps + ky) * ps + kx] = chw[ch][py * ps + ky][px * ps + kx] of
 * grid patch perm[i] = py * gw + px, as F16 (the conv kernel's type) */
__global__ void k_im2col(const float *chw, int nx, int ny, int ps, int gw, const int *perm, int n, __half *col) {
    const int K = 3 * ps * ps;
    const int64_t total = (int64_t)n * K;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t src = mu_vi_im2col_src(e, ps, nx, ny, gw, perm[e / K]);
        col[e] = __float2half_rn(src >= 0 ? chw[src] : 0.0f);
    }
}

#define GB 64        /* GEMM tile: GB activation rows x GB weight rows */
#define GK 32        /* k step */
#define GLD (GK + 8) /* shared row of a tile, in halves (80 bytes: keeps 32-byte fragment alignment) */
#define GCL (GB + 4) /* shared row of the result tile, in floats */

/* 8 halves of row `row` (of `rows`) from column k (of K) into dst, zeros past
 * either end; one 16-byte load when the row is whole there and aligned */
__device__ __forceinline__ void gemm_load8(__half *dst, const __half *src, int row, int rows, int K, int k) {
    if (row < rows && (K & 7) == 0 && k + 8 <= K) {
        *(uint4 *)dst = *(const uint4 *)(src + (size_t)row * K + k);
        return;
    }
#pragma unroll
    for (int i = 0; i < 8; i++) dst[i] = row < rows && k + i < K ? src[(size_t)row * K + k + i] : __float2half_rn(0.0f);
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }

/* the matmuls' epilogue of output o (column c): + bias, GELU, + residual,
 * each when asked, in the CPU's order (res may be the output itself) */
__device__ __forceinline__ float gemm_epi(float v, int c, size_t o, const float *bias, const float *res, int gelu) {
    if (bias) v = v + bias[c];
    if (gelu) v = gelu_erf(v);
    if (res) v = v + res[o];
    return v;
}

/* y[t][r] = A row t . W row r (t < T, r < N, rows of K halves), F32 sums;
 * then + bias[r], GELU, + res[t][r] (each optional; res may be yf), into
 * yf (F32) or yh (F16). 128 threads: four warps of 32 x 32. */
__global__ void __launch_bounds__(128) k_gemm(const __half *A, const __half *W, int T, int N, int K, const float *bias,
                                              const float *res, int gelu, float *yf, __half *yh) {
    __shared__ __align__(128) __half As[GB][GLD];
    __shared__ __align__(128) __half Ws[GB][GLD];
    __shared__ __align__(128) float Cs[GB][GCL];
    const int tid = threadIdx.x, warp = tid / 32;
    const int t0 = blockIdx.y * GB, n0 = blockIdx.x * GB;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += GK) {
        for (int c = tid; c < GB * (GK / 8); c += blockDim.x) {
            const int r = c / (GK / 8), kc = (c % (GK / 8)) * 8;
            gemm_load8(&As[r][kc], A, t0 + r, T, K, k0 + kc);
            gemm_load8(&Ws[r][kc], W, n0 + r, N, K, k0 + kc);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(a[i], &As[wm + i * 16][kk], GLD);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &Ws[wn + j * 16][kk], GLD);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&Cs[wm + i * 16][wn + j * 16], acc[i][j], GCL, wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < GB * GB; e += blockDim.x) {
        const int r = e / GB, c = e % GB, t = t0 + r, nn = n0 + c;
        if (t >= T || nn >= N) continue;
        const size_t o = (size_t)t * N + nn;
        const float v = gemm_epi(Cs[r][c], nn, o, bias, res, gelu);
        if (yf) yf[o] = v;
        else yh[o] = __float2half_rn(v);
    }
}

/* ---- the tensor-core matmul (K % 8 == 0) ---------------------------------
 * The same product and epilogue as k_gemm, on mma.m16n8k16 (F16 inputs,
 * F32 sums) with ldmatrix fragments: a block of 256 threads takes 128
 * activation rows x 128 weight rows, each warp 64 x 32, through a ring of
 * TC_STAGES k-steps of 32 that cp.async fills (zeros past T, N and K). */
#define TC_M 128
#define TC_N 128
#define TC_K 32
#define TC_STAGES 4
#define TC_LD (TC_K + 8) /* halves a shared row: 80 bytes, so ldmatrix's 8 rows hit 8 distinct bank groups */
#define TC_SMEM (TC_STAGES * (TC_M + TC_N) * TC_LD * (int)sizeof(__half))

__device__ __forceinline__ void ldm_x4(unsigned r[4], const __half *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldm_x4_t(unsigned r[4], const __half *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* c += a (16 x 16, row-major fragment) . b (16 x 8, "col": b0 k 0-7, b1 k 8-15) */
__device__ __forceinline__ void mma_f16(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(256, 2) k_gemm_tc(const __half *A, const __half *W, int T, int N, int K,
                                                   const float *bias, const float *res, int gelu, float *yf,
                                                   __half *yh) {
    extern __shared__ __align__(128) unsigned char tc_smem[];
    __half *As = (__half *)tc_smem;           /* [TC_STAGES][TC_M][TC_LD] */
    __half *Ws = As + TC_STAGES * TC_M * TC_LD; /* [TC_STAGES][TC_N][TC_LD] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int t0 = blockIdx.y * TC_M, n0 = blockIdx.x * TC_N;
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
    const int nk = (K + TC_K - 1) / TC_K;
    /* k-step kt into ring slot st: 16-byte pieces, two of A and two of W a thread */
    auto load = [&](int st, int kt) {
#pragma unroll
        for (int c = tid; c < TC_M * (TC_K / 8); c += 256) {
            const int r = c / (TC_K / 8), kc = (c % (TC_K / 8)) * 8, k = kt * TC_K + kc;
            const bool oa = t0 + r < T && k < K, ow = n0 + r < N && k < K;
            cp16z(As + (st * TC_M + r) * TC_LD + kc, oa ? A + (size_t)(t0 + r) * K + k : A, oa);
            cp16z(Ws + (st * TC_N + r) * TC_LD + kc, ow ? W + (size_t)(n0 + r) * K + k : W, ow);
        }
    };
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
#pragma unroll
    for (int st = 0; st < TC_STAGES - 1; st++) {
        if (st < nk) load(st, st);
        cp_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_wait<TC_STAGES - 2>(); /* k-step kt is in */
        __syncthreads();          /* ... for every thread, and slot (kt - 1) % TC_STAGES is free */
        if (kt + TC_STAGES - 1 < nk) load((kt + TC_STAGES - 1) % TC_STAGES, kt + TC_STAGES - 1);
        cp_commit();
        const __half *as = As + (kt % TC_STAGES) * TC_M * TC_LD, *ws = Ws + (kt % TC_STAGES) * TC_N * TC_LD;
#pragma unroll
        for (int kk = 0; kk < TC_K; kk += 16) {
            unsigned a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) ldm_x4(a[i], as + (wm + i * 16 + (lane & 15)) * TC_LD + kk + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                unsigned r[4];
                ldm_x4(r, ws + (wn + j * 16 + (lane & 7) + (lane >> 4) * 8) * TC_LD + kk + ((lane >> 3) & 1) * 8);
                b[2 * j][0] = r[0], b[2 * j][1] = r[1], b[2 * j + 1][0] = r[2], b[2 * j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_f16(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }
    cp_wait<0>();
    /* accumulator e of tile (i, j): row g (e < 2) or g + 8, column 2 q + e % 2 */
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int c = n0 + wn + j * 8 + 2 * q;
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int t = t0 + wm + i * 16 + g + hr * 8;
                if (t >= T) continue;
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if (c + e >= N) continue;
                    const size_t o = (size_t)t * N + c + e;
                    const float v = gemm_epi(acc[i][j][2 * hr + e], c + e, o, bias, res, gelu);
                    if (yf) yf[o] = v;
                    else yh[o] = __float2half_rn(v);
                }
            }
        }
}

#define LN_THREADS 256

/* the sum of v over the block (LN_THREADS threads); red: 32 doubles */
__device__ double block_sum(double v, double *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    __syncthreads(); /* red is free again (an earlier call's readers are done) */
    if (lane == 0) red[w] = v;
    __syncthreads();
    double s = 0;
    for (int i = 0; i < LN_THREADS / 32; i++) s += red[i];
    return s;
}

/* ggml's layer norm of row blockIdx.x (E floats; mu_vit_layer_norm's steps,
 * its sums in double but in another order), * w, + b (each optional), into
 * yf (may be x) and/or yh */
__global__ void __launch_bounds__(LN_THREADS) k_ln(const float *x, int E, const float *w, const float *b, float eps,
                                                   float *yf, __half *yh) {
    __shared__ double red[32];
    const float *xr = x + (size_t)blockIdx.x * E;
    double s = 0;
    for (int i = threadIdx.x; i < E; i += LN_THREADS) s += (double)xr[i];
    const float mean = (float)block_sum(s, red) / (float)E;
    double v = 0;
    for (int i = threadIdx.x; i < E; i += LN_THREADS) {
        const float d = xr[i] - mean;
        v += (double)(d * d);
    }
    const float var = (float)(block_sum(v, red) / E);
    const float scale = 1.0f / sqrtf(var + eps);
    __syncthreads(); /* every thread has read its part of x before any writes yf == x */
    for (int i = threadIdx.x; i < E; i += LN_THREADS) {
        float y = (xr[i] - mean) * scale;
        if (w) y = y * w[i];
        if (b) y = y + b[i];
        const size_t o = (size_t)blockIdx.x * E + i;
        if (yf) yf[o] = y;
        if (yh) yh[o] = __float2half_rn(y);
    }
}

/* 2-D RoPE (vit.c's job_rope): per token and head, pairs of the first half
 * rotate by column pw, of the second by row ph; cs [n_pos + 1][hd / 2].
 * In place (yf == x) or into yh. One thread per pair. */
__global__ void k_rope(const float *x, int n, int E, int hd, const int *pw, const int *ph, const float *cs, int n_pos,
                       float *yf, __half *yh) {
    const int nd = hd / 2, pairs = E / 2;
    const int64_t total = (int64_t)n * pairs;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(e / pairs);
        int by_row, i;
        const size_t o = (size_t)t * E + mu_vi_rope_pair((int)(e % pairs), hd, &by_row, &i);
        int p = by_row ? ph[t] : pw[t];
        p = p < 0 ? 0 : p > n_pos ? n_pos : p;
        const float c = cs[(size_t)p * nd + i], s = cs[(size_t)p * nd + i + 1];
        const float x0 = x[o], x1 = x[o + 1];
        const float y0 = fmaf(x0, c, -(x1 * s)), y1 = fmaf(x0, s, x1 * c);
        if (yf) {
            yf[o] = y0;
            yf[o + 1] = y1;
        } else {
            yh[o] = __float2half_rn(y0);
            yh[o + 1] = __float2half_rn(y1);
        }
    }
}

#define AQ MU_VI_AQ /* queries per block: one thread each */
#define AK MU_VI_AK /* keys per shared tile */

/* One head (blockIdx.y) of attention for AQ consecutive queries: query i
 * sees keys [lo[i], hi[i]) (global: all n). Scores in F32 from F32 q and
 * F16 k, an online softmax (running max, rescaled sums), V products in
 * F32; out F16 (the next matmul's input type). HD: hd rounded up to a
 * multiple of 32 (padding lanes are zeros). */
template <int HD>
__global__ void __launch_bounds__(AQ) k_attn(const float *q, const __half *k, const __half *v, int n, int E, int hd,
                                             float scale, const int *lo, const int *hi, int global, __half *out) {
    __shared__ __align__(16) float Ks[AK][HD];
    __shared__ __align__(16) float Vs[AK][HD];
    __shared__ int range[2];
    const int h = blockIdx.y, i = blockIdx.x * AQ + threadIdx.x;
    const bool valid = i < n;
    const size_t qo = (size_t)i * E + (size_t)h * hd;
    float qr[HD], acc[HD];
#pragma unroll
    for (int d = 0; d < HD; d++) {
        qr[d] = valid && d < hd ? q[qo + d] : 0.0f;
        acc[d] = 0.0f;
    }
    int my_lo = n, my_hi = 0;
    if (valid) {
        my_lo = global ? 0 : lo[i];
        my_hi = global ? n : hi[i];
        my_lo = my_lo < 0 ? 0 : my_lo;
        my_hi = my_hi > n ? n : my_hi;
    }
    if (threadIdx.x == 0) range[0] = n, range[1] = 0;
    __syncthreads();
    if (valid && my_lo < my_hi) {
        atomicMin(&range[0], my_lo);
        atomicMax(&range[1], my_hi);
    }
    __syncthreads();
    const int b_lo = range[0], b_hi = range[1];
    float m = -INFINITY, l = 0.0f;
    for (int j0 = b_lo; j0 < b_hi; j0 += AK) {
        for (int e = threadIdx.x; e < AK * HD; e += AQ) {
            const int r = e / HD, d = e % HD, j = j0 + r;
            const bool ok = j < b_hi && d < hd;
            const size_t o = (size_t)j * E + (size_t)h * hd + d;
            Ks[r][d] = ok ? __half2float(k[o]) : 0.0f;
            Vs[r][d] = ok ? __half2float(v[o]) : 0.0f;
        }
        __syncthreads();
        const int jn = b_hi - j0 < AK ? b_hi - j0 : AK;
        for (int r = 0; r < jn; r++) {
            const int j = j0 + r;
            if (j < my_lo || j >= my_hi) continue;
            /* 16-byte shared loads (every thread reads the same row: a broadcast) */
            const float4 *k4 = (const float4 *)Ks[r], *v4 = (const float4 *)Vs[r];
            float s = 0.0f;
#pragma unroll
            for (int d = 0; d < HD; d += 4) {
                const float4 kk = k4[d / 4];
                s = fmaf(qr[d], kk.x, s);
                s = fmaf(qr[d + 1], kk.y, s);
                s = fmaf(qr[d + 2], kk.z, s);
                s = fmaf(qr[d + 3], kk.w, s);
            }
            s = s * scale;
            if (s > m) {
                const float corr = expf(m - s); /* 0 on the first key (m = -inf) */
                l = l * corr;
#pragma unroll
                for (int d = 0; d < HD; d++) acc[d] = acc[d] * corr;
                m = s;
            }
            const float p = expf(s - m);
            l = l + p;
#pragma unroll
            for (int d = 0; d < HD; d += 4) {
                const float4 vv = v4[d / 4];
                acc[d] = fmaf(p, vv.x, acc[d]);
                acc[d + 1] = fmaf(p, vv.y, acc[d + 1]);
                acc[d + 2] = fmaf(p, vv.z, acc[d + 2]);
                acc[d + 3] = fmaf(p, vv.w, acc[d + 3]);
            }
        }
        __syncthreads();
    }
    if (!valid) return;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int d = 0; d < HD; d++)
        if (d < hd) out[qo + d] = __float2half_rn(acc[d] * inv);
}

/* Attention on mma.m16n8k16, flash style: a block of four warps takes 64
 * consecutive queries of one head (blockIdx.y), a warp 16 of them, and
 * walks the block's key span [min lo, max hi) in tiles of 64 keys that
 * cp.async stages, two tiles in flight; each query's own [lo, hi) masks
 * its scores. q (F32) and the softmax weights enter the mmas as two F16
 * terms each, x = hi + lo (hi = x rounded to F16, lo = the rest rounded),
 * so the products keep about F32's precision where one F16 term would
 * round q and the weights to 11 bits (the CPU keeps both in F32). An
 * online softmax in F32 (running maximum, rescaled sums). HD: the head
 * size, a multiple of 16. */
#define FA_Q 64
#define FA_K 64
template <int HD> constexpr int fa_smem() { return 2 * 2 * FA_K * (HD + 8) * (int)sizeof(__half); }

__device__ __forceinline__ unsigned h2_bits(__half2 h) { return *(unsigned *)&h; }
/* the pair (x, y) as hi + lo F16 pairs */
__device__ __forceinline__ void split2(float x, float y, unsigned *hi, unsigned *lo) {
    const __half2 h = __floats2half2_rn(x, y);
    *hi = h2_bits(h);
    *lo = h2_bits(__floats2half2_rn(x - __low2float(h), y - __high2float(h)));
}

template <int HD>
__global__ void __launch_bounds__(128) k_attn_tc(const float *q, const __half *k, const __half *v, int n, int E,
                                                 float scale, const int *lo, const int *hi, int global,
                                                 __half *out) {
    constexpr int LD = HD + 8, KC = HD / 16, NT = HD / 8;
    extern __shared__ __align__(128) unsigned char fa_sm[];
    __half *Ks = (__half *)fa_sm;    /* [2][FA_K][LD] */
    __half *Vs = Ks + 2 * FA_K * LD; /* [2][FA_K][LD] */
    __shared__ int span[2];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
    const int h = blockIdx.y, r0 = blockIdx.x * FA_Q + warp * 16 + g; /* this thread's rows r0, r0 + 8 */
    int rlo[2], rhi[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int r = r0 + 8 * e;
        rlo[e] = r < n ? (global ? 0 : max(lo[r], 0)) : 0;
        rhi[e] = r < n ? (global ? n : min(hi[r], n)) : 0;
    }
    if (tid == 0) span[0] = n, span[1] = 0;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < 2; e++)
        if (rlo[e] < rhi[e]) atomicMin(&span[0], rlo[e]), atomicMax(&span[1], rhi[e]);
    __syncthreads();
    const int s_lo = span[0], s_hi = span[1];
    const int n_tiles = s_hi > s_lo ? (s_hi - s_lo + FA_K - 1) / FA_K : 0;

    /* q's fragments: a0 row r0 columns 2 qd, 2 qd + 1 of chunk c; a1 row
     * r0 + 8; a2, a3 the same eight columns on */
    unsigned qh[KC][4], ql[KC][4];
#pragma unroll
    for (int c = 0; c < KC; c++)
#pragma unroll
        for (int f = 0; f < 4; f++) {
            const int r = r0 + 8 * (f & 1), d = c * 16 + 2 * qd + 8 * (f >> 1);
            float2 x = make_float2(0.0f, 0.0f);
            if (r < n) x = *(const float2 *)(q + (size_t)r * E + (size_t)h * HD + d);
            split2(x.x, x.y, &qh[c][f], &ql[c][f]);
        }
    auto load = [&](int buf, int j0) {
        for (int c = tid; c < FA_K * (HD / 8); c += 128) {
            const int r = c / (HD / 8), dc = (c % (HD / 8)) * 8, j = j0 + r;
            const bool ok = j < s_hi;
            const size_t o = (size_t)j * E + (size_t)h * HD + dc;
            cp16z(Ks + (buf * FA_K + r) * LD + dc, ok ? k + o : k, ok);
            cp16z(Vs + (buf * FA_K + r) * LD + dc, ok ? v + o : v, ok);
        }
    };
    float o[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    if (n_tiles > 0) load(0, s_lo);
    cp_commit();
    for (int t = 0; t < n_tiles; t++) {
        const int j0 = s_lo + t * FA_K, buf = t & 1;
        if (t + 1 < n_tiles) load(buf ^ 1, j0 + FA_K);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const __half *ks = Ks + buf * FA_K * LD, *vs = Vs + buf * FA_K * LD;
        /* scores: tile j of eight keys, s[j][e]: row r0 + 8 (e >> 1), key j0 + 8 j + 2 qd + (e & 1) */
        float s[FA_K / 8][4];
#pragma unroll
        for (int j = 0; j < FA_K / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; c++)
#pragma unroll
            for (int j = 0; j < FA_K / 16; j++) {
                unsigned b[4];
                ldm_x4(b, ks + (j * 16 + (lane & 7) + (lane >> 4) * 8) * LD + c * 16 + ((lane >> 3) & 1) * 8);
                mma_f16(s[2 * j], qh[c], b[0], b[1]);
                mma_f16(s[2 * j], ql[c], b[0], b[1]);
                mma_f16(s[2 * j + 1], qh[c], b[2], b[3]);
                mma_f16(s[2 * j + 1], ql[c], b[2], b[3]);
            }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < FA_K / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j0 + 8 * j + 2 * qd + (e & 1), r = e >> 1;
                const float x = key >= rlo[r] && key < rhi[r] ? s[j][e] * scale : -INFINITY;
                s[j][e] = x;
                mx[r] = fmaxf(mx[r], x);
            }
        float base[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float mn = fmaxf(m[r], mx[r]);
            base[r] = mn == -INFINITY ? 0.0f : mn; /* no key yet: every weight 0, no inf - inf */
            const float corr = expf(m[r] - base[r]);
            m[r] = mn;
            l[r] = l[r] * corr;
#pragma unroll
            for (int d = 0; d < NT; d++) o[d][2 * r] = o[d][2 * r] * corr, o[d][2 * r + 1] = o[d][2 * r + 1] * corr;
        }
#pragma unroll
        for (int j = 0; j < FA_K / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = expf(s[j][e] - base[e >> 1]);
                s[j][e] = p;
                l[e >> 1] = l[e >> 1] + p;
            }
        /* o += p . V: the scores' accumulators are the A fragments of keys 16 c.. */
#pragma unroll
        for (int c = 0; c < FA_K / 16; c++) {
            unsigned ph[4], pl[4];
            split2(s[2 * c][0], s[2 * c][1], &ph[0], &pl[0]);
            split2(s[2 * c][2], s[2 * c][3], &ph[1], &pl[1]);
            split2(s[2 * c + 1][0], s[2 * c + 1][1], &ph[2], &pl[2]);
            split2(s[2 * c + 1][2], s[2 * c + 1][3], &ph[3], &pl[3]);
#pragma unroll
            for (int d = 0; d < NT / 2; d++) {
                unsigned b[4];
                ldm_x4_t(b, vs + (c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + d * 16 + (lane >> 4) * 8);
                mma_f16(o[2 * d], ph, b[0], b[1]);
                mma_f16(o[2 * d], pl, b[0], b[1]);
                mma_f16(o[2 * d + 1], ph, b[2], b[3]);
                mma_f16(o[2 * d + 1], pl, b[2], b[3]);
            }
        }
        __syncthreads(); /* the tile's buffer is free for the load two tiles on */
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] = l[r] + __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] = l[r] + __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = r0 + 8 * r;
        if (row >= n) continue;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        __half *y = out + (size_t)row * E + (size_t)h * HD + 2 * qd;
#pragma unroll
        for (int d = 0; d < NT; d++) *(__half2 *)(y + 8 * d) = __floats2half2_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    }
}

/* post-LN rows (permuted order) -> the 2x2 pixel shuffle's rows in grid
 * order: y[o][c * 4 + s] = x[inv[g]][c], g the s-th patch (ry, rx) of
 * merged cell o, as F16 (mm.0's input) */
__global__ void k_shuffle(const float *x, int E, int gw, int n_out, const int *inv, __half *y) {
    const int64_t total = (int64_t)n_out * 4 * E;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int c;
        const int g = mu_vi_shuffle_src(e, E, gw, &c);
        y[e] = __float2half_rn(x[(size_t)inv[g] * E + c]);
    }
}

/* ---- the model ---------------------------------------------------------- */

/* MUSER_CUDA_VIT_PROF=1: the device time of each phase of an image (CUDA
 * events between phases, summed over the layers), on stderr after it */
enum { VP_UPLOAD, VP_PATCH, VP_NORM, VP_QKV, VP_ROPE, VP_ATTN_W, VP_ATTN_G, VP_O, VP_UP, VP_DOWN, VP_TAIL, VP_N };
static const char *const VP_NAME[VP_N] = {"upload",   "patch, pre-LN",     "layer norms",        "q, k, v",
                                          "rope",     "attention windows", "attention global",   "attn out",
                                          "ffn up",   "ffn down",          "post-LN, shuffle, adapter, download"};
#define VP_MAX 640
typedef struct {
    bool on;
    int n;
    cudaEvent_t ev[VP_MAX];
    unsigned char tag[VP_MAX];
} vprof;
/* drops the last image's events (or those of one that failed half way)
 * and reads the switch */
static void vp_reset(vprof *p) {
    for (int i = 0; i < p->n; i++) cudaEventDestroy(p->ev[i]);
    p->n = 0;
    p->on = cu_env_digit("MUSER_CUDA_VIT_PROF", 0) == 1;
}
static void vp_mark(vprof *p, cudaStream_t st, int tag) {
    if (!p->on || p->n >= VP_MAX || cudaEventCreate(&p->ev[p->n]) != cudaSuccess) return;
    cudaEventRecord(p->ev[p->n], st);
    p->tag[p->n++] = (unsigned char)tag;
}
static void vp_report(vprof *p, int n_tok) {
    if (!p->on || p->n < 2) return;
    cudaEventSynchronize(p->ev[p->n - 1]);
    float t[VP_N] = {0}, all = 0;
    for (int i = 1; i < p->n; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]);
        t[p->tag[i]] += ms, all += ms;
    }
    fprintf(stderr, "cuda vision profile (%d patches): %.2f ms on the device\n", n_tok, all);
    for (int k = 0; k < VP_N; k++) fprintf(stderr, "  %-36s %8.2f ms\n", VP_NAME[k], t[k]);
    vp_reset(p);
}

typedef struct {
    __half *d;
    int rows, cols;
} vmat;

typedef struct {
    vmat q, k, v, o, up, down;
    float *ln1_w, *ln1_b, *q_b, *k_b, *v_b, *o_b, *ln2_w, *ln2_b, *up_b, *down_b;
    bool global;
} vlayer;

struct mu_gpu_vit {
    int dev;
    int L, E, F, H, hd, ps, M, O;
    float eps;
    vmat patch, mm[3];
    float *patch_b, *pre_w, *pre_b, *post_w, *post_b;
    vlayer *layers;
    cudaStream_t st;
    void *arena;
    size_t arena_cap;
    vprof prof; /* encodes of one projector are serialized (mu_mmproj_lock) */
};

static int grid_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (int)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

/* A matrix of `rows` x `cols` as F16 on the device. */
static int up_mat(mu_gpu_vit *v, const mu_gpu_tensor *t, int rows, int cols, const char *name, vmat *out,
                  mu_err *err) {
    if (!t->data) return cu_fail(err, MU_E_ARG, "cuda vision: %s is missing", name);
    if (t->ne0 != cols || t->ne1 != rows)
        return cu_fail(err, MU_E_ARG, "cuda vision: %s is %lldx%lld, want %dx%d", name, (long long)t->ne0,
                     (long long)t->ne1, cols, rows);
    size_t rb;
    switch (t->type) {
    case MU_T_F16: case MU_T_BF16: rb = (size_t)cols * 2; break;
    case MU_T_F32: rb = (size_t)cols * 4; break;
    case MU_T_Q8_0:
        if (cols % 32) return cu_fail(err, MU_E_ARG, "cuda vision: %s: Q8_0 rows of %d elements", name, cols);
        rb = (size_t)cols / 32 * 34;
        break;
    default: return cu_fail(err, MU_E_UNSUPPORTED, "cuda vision: %s: weight type %u not supported", name, t->type);
    }
    if (t->bytes != rb * (size_t)rows)
        return cu_fail(err, MU_E_ARG, "cuda vision: %s holds %zu bytes, want %zu", name, t->bytes, rb * (size_t)rows);
    const size_t n = (size_t)rows * cols;
    VCK(cudaMalloc((void **)&out->d, n * sizeof(__half)), name);
    out->rows = rows, out->cols = cols;
    /* copies on v->st (a non-blocking stream does not wait for the legacy
     * default stream's copies), so the conversion runs after its copy */
    if (t->type == MU_T_F16) {
        VCK(cudaMemcpyAsync(out->d, t->data, n * sizeof(__half), cudaMemcpyHostToDevice, v->st), name);
        return 0;
    }
    void *raw = NULL;
    VCK(cudaMalloc(&raw, t->bytes), name);
    cudaError_t e = cudaMemcpyAsync(raw, t->data, t->bytes, cudaMemcpyHostToDevice, v->st);
    if (e == cudaSuccess) {
        k_to_f16<<<grid_for((int64_t)n, 256), 256, 0, v->st>>>((const uint8_t *)raw, t->type, rows, cols, rb, out->d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(v->st);
    cudaFree(raw);
    if (e != cudaSuccess) return cu_cuda_fail_in(err, e, "cuda vision", name);
    return 0;
}

/* A vector of n floats, or NULL when absent and `optional`. */
static int up_vec(const mu_gpu_vit *v, const mu_gpu_tensor *t, int n, bool optional, const char *name, float **out,
                  mu_err *err) {
    *out = NULL;
    if (!t->data) return optional ? 0 : cu_fail(err, MU_E_ARG, "cuda vision: %s is missing", name);
    if (t->type != MU_T_F32)
        return cu_fail(err, MU_E_UNSUPPORTED, "cuda vision: %s: type %u (want F32)", name, t->type);
    if (t->ne0 * (t->ne1 > 0 ? t->ne1 : 1) != n || t->bytes != (size_t)n * 4)
        return cu_fail(err, MU_E_ARG, "cuda vision: %s has %lld values, want %d", name, (long long)t->ne0, n);
    VCK(cudaMalloc((void **)out, (size_t)n * 4), name);
    VCK(cudaMemcpyAsync(*out, t->data, (size_t)n * 4, cudaMemcpyHostToDevice, v->st), name);
    return 0;
}

void cu_vit_free(mu_gpu_vit *v) {
    if (!v) return;
    cudaSetDevice(v->dev);
    if (v->st) cudaStreamSynchronize(v->st);
    vp_reset(&v->prof);
    cudaFree(v->patch.d);
    for (int i = 0; i < 3; i++) cudaFree(v->mm[i].d);
    cudaFree(v->patch_b), cudaFree(v->pre_w), cudaFree(v->pre_b), cudaFree(v->post_w), cudaFree(v->post_b);
    if (v->layers)
        for (int il = 0; il < v->L; il++) {
            vlayer *l = &v->layers[il];
            cudaFree(l->q.d), cudaFree(l->k.d), cudaFree(l->v.d), cudaFree(l->o.d), cudaFree(l->up.d);
            cudaFree(l->down.d);
            cudaFree(l->ln1_w), cudaFree(l->ln1_b), cudaFree(l->q_b), cudaFree(l->k_b), cudaFree(l->v_b);
            cudaFree(l->o_b), cudaFree(l->ln2_w), cudaFree(l->ln2_b), cudaFree(l->up_b), cudaFree(l->down_b);
        }
    free(v->layers);
    cudaFree(v->arena);
    if (v->st) cu_mm_wg_release(v->st), cudaStreamDestroy(v->st);
    free(v);
}

static int vit_new(mu_gpu_vit *v, const mu_gpu_vit_desc *d, mu_err *err) {
    const int E = d->n_embd, F = d->n_ff, M = d->mm_hidden, K = 3 * d->patch_size * d->patch_size;
    if (d->n_layer < 1 || E < 2 || F < 1 || d->n_head < 1 || d->head_dim * d->n_head != E || d->head_dim % 4 ||
        d->head_dim > 128 || d->patch_size < 1 || M < 1 || d->n_out < 1 || !d->global || !d->layers)
        return cu_fail(err, MU_E_ARG, "cuda vision: unsupported geometry (E %d, heads %d x %d, ff %d)", E, d->n_head,
                     d->head_dim, F);
    v->L = d->n_layer, v->E = E, v->F = F, v->H = d->n_head, v->hd = d->head_dim, v->ps = d->patch_size;
    v->M = M, v->O = d->n_out, v->eps = d->eps;
    VCK(cudaStreamCreateWithFlags(&v->st, cudaStreamNonBlocking), "stream");
    v->layers = (vlayer *)calloc((size_t)v->L, sizeof *v->layers);
    if (!v->layers) return cu_fail(err, MU_E_NOMEM, "cuda vision: out of memory");
    int rc;
    if ((rc = up_mat(v, &d->patch_w, E, K, "v.patch_embd.weight", &v->patch, err)) ||
        (rc = up_vec(v, &d->patch_b, E, true, "v.patch_embd.bias", &v->patch_b, err)) ||
        (rc = up_vec(v, &d->pre_w, E, true, "v.pre_ln.weight", &v->pre_w, err)) ||
        (rc = up_vec(v, &d->pre_b, E, true, "v.pre_ln.bias", &v->pre_b, err)) ||
        (rc = up_vec(v, &d->post_w, E, true, "v.post_ln.weight", &v->post_w, err)) ||
        (rc = up_vec(v, &d->post_b, E, true, "v.post_ln.bias", &v->post_b, err)) ||
        (rc = up_mat(v, &d->mm[0], M, 4 * E, "mm.0.weight", &v->mm[0], err)) ||
        (rc = up_mat(v, &d->mm[1], M, M, "mm.1.weight", &v->mm[1], err)) ||
        (rc = up_mat(v, &d->mm[2], d->n_out, M, "mm.2.weight", &v->mm[2], err)))
        return rc;
    for (int il = 0; il < v->L; il++) {
        const mu_gpu_vit_layer *s = &d->layers[il];
        vlayer *l = &v->layers[il];
        l->global = d->global[il];
        if ((rc = up_vec(v, &s->ln1_w, E, true, "ln1.weight", &l->ln1_w, err)) ||
            (rc = up_vec(v, &s->ln1_b, E, true, "ln1.bias", &l->ln1_b, err)) ||
            (rc = up_mat(v, &s->q_w, E, E, "attn_q.weight", &l->q, err)) ||
            (rc = up_vec(v, &s->q_b, E, true, "attn_q.bias", &l->q_b, err)) ||
            (rc = up_mat(v, &s->k_w, E, E, "attn_k.weight", &l->k, err)) ||
            (rc = up_vec(v, &s->k_b, E, true, "attn_k.bias", &l->k_b, err)) ||
            (rc = up_mat(v, &s->v_w, E, E, "attn_v.weight", &l->v, err)) ||
            (rc = up_vec(v, &s->v_b, E, true, "attn_v.bias", &l->v_b, err)) ||
            (rc = up_mat(v, &s->o_w, E, E, "attn_out.weight", &l->o, err)) ||
            (rc = up_vec(v, &s->o_b, E, true, "attn_out.bias", &l->o_b, err)) ||
            (rc = up_vec(v, &s->ln2_w, E, true, "ln2.weight", &l->ln2_w, err)) ||
            (rc = up_vec(v, &s->ln2_b, E, true, "ln2.bias", &l->ln2_b, err)) ||
            (rc = up_mat(v, &s->up_w, F, E, "ffn_up.weight", &l->up, err)) ||
            (rc = up_vec(v, &s->up_b, F, true, "ffn_up.bias", &l->up_b, err)) ||
            (rc = up_mat(v, &s->down_w, E, F, "ffn_down.weight", &l->down, err)) ||
            (rc = up_vec(v, &s->down_b, E, true, "ffn_down.bias", &l->down_b, err)))
            return rc;
    }
    VCK(cudaStreamSynchronize(v->st), "upload");
    return 0;
}

int cu_vit_new(int device, const mu_gpu_vit_desc *d, mu_gpu_vit **out, mu_err *err) {
    *out = NULL;
    VCK(cudaSetDevice(device), "set device");
    mu_gpu_vit *v = (mu_gpu_vit *)calloc(1, sizeof *v);
    if (!v) return cu_fail(err, MU_E_NOMEM, "cuda vision: out of memory");
    v->dev = device;
    int rc = vit_new(v, d, err);
    if (rc) {
        cu_vit_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

/* ---- one image ---------------------------------------------------------- */

/* the tensor-core kernels (k_gemm_tc, k_attn_tc) unless MUSER_CUDA_VIT_TC=0
 * (k_gemm and k_attn everywhere, for comparisons); read once */
static bool vit_tc(void) {
    static int on = -1;
    if (on < 0) on = cu_env_digit("MUSER_CUDA_VIT_TC", 1) != 0;
    return on;
}

static void gemm(cudaStream_t st, const __half *A, int T, const vmat *W, const float *bias, const float *res, bool gelu,
                 float *yf, __half *yh) {
    if (vit_tc() && W->cols % 8 == 0) { /* 16-byte rows for cp.async */
        cudaFuncSetAttribute(k_gemm_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, TC_SMEM);
        const dim3 grid((unsigned)((W->rows + TC_N - 1) / TC_N), (unsigned)((T + TC_M - 1) / TC_M));
        k_gemm_tc<<<grid, 256, TC_SMEM, st>>>(A, W->d, T, W->rows, W->cols, bias, res, gelu ? 1 : 0, yf, yh);
        return;
    }
    const dim3 grid((unsigned)((W->rows + GB - 1) / GB), (unsigned)((T + GB - 1) / GB));
    k_gemm<<<grid, 128, 0, st>>>(A, W->d, T, W->rows, W->cols, bias, res, gelu ? 1 : 0, yf, yh);
}

static void layer_norm(const mu_gpu_vit *v, int n, const float *x, const float *w, const float *b, float *yf,
                       __half *yh) {
    k_ln<<<n, LN_THREADS, 0, v->st>>>(x, v->E, w, b, v->eps, yf, yh);
}

static void attention(const mu_gpu_vit *v, int n, const float *q, const __half *k, const __half *vv, const int *lo,
                      const int *hi, bool global, __half *out) {
    const dim3 grid((unsigned)((n + AQ - 1) / AQ), (unsigned)v->H);
    const float scale = 1.0f / sqrtf((float)v->hd);
    const int g = global ? 1 : 0;
    if (vit_tc() && v->E % 8 == 0 && (v->hd == 32 || v->hd == 64 || v->hd == 96 || v->hd == 128)) {
        const dim3 gt((unsigned)((n + FA_Q - 1) / FA_Q), (unsigned)v->H);
#define FA_LAUNCH(D)                                                                                 \
    do {                                                                                             \
        cudaFuncSetAttribute(k_attn_tc<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, fa_smem<D>()); \
        k_attn_tc<D><<<gt, 128, fa_smem<D>(), v->st>>>(q, k, vv, n, v->E, scale, lo, hi, g, out);    \
    } while (0)
        if (v->hd == 32) FA_LAUNCH(32);
        else if (v->hd == 64) FA_LAUNCH(64);
        else if (v->hd == 96) FA_LAUNCH(96);
        else FA_LAUNCH(128);
#undef FA_LAUNCH
        return;
    }
    if (v->hd <= 32) k_attn<32><<<grid, AQ, 0, v->st>>>(q, k, vv, n, v->E, v->hd, scale, lo, hi, g, out);
    else if (v->hd <= 64) k_attn<64><<<grid, AQ, 0, v->st>>>(q, k, vv, n, v->E, v->hd, scale, lo, hi, g, out);
    else if (v->hd <= 96) k_attn<96><<<grid, AQ, 0, v->st>>>(q, k, vv, n, v->E, v->hd, scale, lo, hi, g, out);
    else k_attn<128><<<grid, AQ, 0, v->st>>>(q, k, vv, n, v->E, v->hd, scale, lo, hi, g, out);
}

/* carves 256-byte aligned pieces out of the arena (or only counts, base NULL) */
typedef struct {
    uint8_t *base;
    size_t used;
} carver;
static void *carve(carver *c, size_t bytes) {
    c->used = (c->used + 255) & ~(size_t)255;
    void *p = c->base ? c->base + c->used : NULL;
    c->used += bytes;
    return p;
}

typedef struct {
    float *chw, *pos, *cs, *h, *qf, *kf, *outf;
    int *perm, *inv, *pw, *ph, *lo, *hi;
    __half *col, *x16, *k16, *v16, *ao16, *big16, *a1, *a2;
} vbufs;

static void layout(carver *c, vbufs *b, const mu_gpu_vit *v, const mu_gpu_vit_image *im, int n, int n_out) {
    const size_t nE = (size_t)n * v->E, K = (size_t)3 * v->ps * v->ps;
    b->chw = (float *)carve(c, (size_t)3 * im->nx * im->ny * 4);
    b->pos = (float *)carve(c, nE * 4);
    b->cs = (float *)carve(c, (size_t)(im->n_pos + 1) * (v->hd / 2) * 4);
    b->h = (float *)carve(c, nE * 4);
    b->qf = (float *)carve(c, nE * 4);
    b->kf = (float *)carve(c, nE * 4);
    b->outf = (float *)carve(c, (size_t)n_out * v->O * 4);
    int **ints[] = {&b->perm, &b->inv, &b->pw, &b->ph, &b->lo, &b->hi};
    for (int i = 0; i < 6; i++) *ints[i] = (int *)carve(c, (size_t)n * 4);
    b->col = (__half *)carve(c, (size_t)n * K * 2);
    b->x16 = (__half *)carve(c, nE * 2); /* also the pixel shuffle's n_out x 4E */
    b->k16 = (__half *)carve(c, nE * 2);
    b->v16 = (__half *)carve(c, nE * 2);
    b->ao16 = (__half *)carve(c, nE * 2);
    b->big16 = (__half *)carve(c, (size_t)n * v->F * 2);
    b->a1 = (__half *)carve(c, (size_t)n_out * v->M * 2);
    b->a2 = (__half *)carve(c, (size_t)n_out * v->M * 2);
}

int cu_vit_encode(mu_gpu_vit *v, const mu_gpu_vit_image *im, mu_err *err) {
    const int ps = v->ps, gw = im->gw, gh = im->gh;
    if (gw < 2 || gh < 2 || gw % 2 || gh % 2 || gw * ps != im->nx || gh * ps != im->ny || gw > 4096 || gh > 4096 ||
        im->n_pos < (gw > gh ? gw : gh) || !im->chw || !im->perm || !im->inv || !im->pw || !im->ph || !im->win_lo ||
        !im->win_hi || !im->pos || !im->rope_cs || !im->out)
        return cu_fail(err, MU_E_ARG, "cuda vision: bad image layout (%dx%d pixels, grid %dx%d)", im->nx, im->ny, gw, gh);
    const int n = gw * gh, n_out = n / 4, E = v->E;
    VCK(cudaSetDevice(v->dev), "set device");
    vbufs b;
    carver c = {NULL, 0};
    layout(&c, &b, v, im, n, n_out);
    if (c.used > v->arena_cap) {
        cudaFree(v->arena);
        v->arena = NULL, v->arena_cap = 0;
        VCK(cudaMalloc(&v->arena, c.used), "scratch");
        v->arena_cap = c.used;
    }
    c.base = (uint8_t *)v->arena, c.used = 0;
    layout(&c, &b, v, im, n, n_out);
    cudaStream_t st = v->st;
    vprof *prof = &v->prof;
    vp_reset(prof);
    vp_mark(prof, st, VP_UPLOAD);
    const size_t ni = (size_t)n * sizeof(int);
    VCK(cudaMemcpyAsync(b.chw, im->chw, (size_t)3 * im->nx * im->ny * 4, cudaMemcpyHostToDevice, st), "upload");
    VCK(cudaMemcpyAsync(b.pos, im->pos, (size_t)n * E * 4, cudaMemcpyHostToDevice, st), "upload");
    VCK(cudaMemcpyAsync(b.cs, im->rope_cs, (size_t)(im->n_pos + 1) * (v->hd / 2) * 4, cudaMemcpyHostToDevice, st),
        "upload");
    VCK(cudaMemcpyAsync(b.perm, im->perm, ni, cudaMemcpyHostToDevice, st), "upload");
    VCK(cudaMemcpyAsync(b.inv, im->inv, ni, cudaMemcpyHostToDevice, st), "upload");
    VCK(cudaMemcpyAsync(b.pw, im->pw, ni, cudaMemcpyHostToDevice, st), "upload");
    VCK(cudaMemcpyAsync(b.ph, im->ph, ni, cudaMemcpyHostToDevice, st), "upload");
    VCK(cudaMemcpyAsync(b.lo, im->win_lo, ni, cudaMemcpyHostToDevice, st), "upload");
    VCK(cudaMemcpyAsync(b.hi, im->win_hi, ni, cudaMemcpyHostToDevice, st), "upload");
    vp_mark(prof, st, VP_UPLOAD);

    /* 1. patchify in the permuted order, + bias, + the position grid */
    const int K = 3 * ps * ps;
    k_im2col<<<grid_for((int64_t)n * K, 256), 256, 0, st>>>(b.chw, im->nx, im->ny, ps, gw, b.perm, n, b.col);
    VLAUNCHED("im2col");
    gemm(st, b.col, n, &v->patch, v->patch_b, b.pos, false, b.h, NULL);
    VLAUNCHED("patch matmul");
    layer_norm(v, n, b.h, v->pre_w, v->pre_b, b.h, NULL);
    VLAUNCHED("pre norm");
    vp_mark(prof, st, VP_PATCH);

    /* 2. the blocks */
    const int rope_grid = grid_for((int64_t)n * E / 2, 256);
    for (int il = 0; il < v->L; il++) {
        const vlayer *l = &v->layers[il];
        layer_norm(v, n, b.h, l->ln1_w, l->ln1_b, NULL, b.x16);
        vp_mark(prof, st, VP_NORM);
        gemm(st, b.x16, n, &l->q, l->q_b, NULL, false, b.qf, NULL);
        gemm(st, b.x16, n, &l->k, l->k_b, NULL, false, b.kf, NULL);
        gemm(st, b.x16, n, &l->v, l->v_b, NULL, false, NULL, b.v16);
        VLAUNCHED("qkv");
        vp_mark(prof, st, VP_QKV);
        k_rope<<<rope_grid, 256, 0, st>>>(b.qf, n, E, v->hd, b.pw, b.ph, b.cs, im->n_pos, b.qf, NULL);
        k_rope<<<rope_grid, 256, 0, st>>>(b.kf, n, E, v->hd, b.pw, b.ph, b.cs, im->n_pos, NULL, b.k16);
        VLAUNCHED("rope");
        vp_mark(prof, st, VP_ROPE);
        attention(v, n, b.qf, b.k16, b.v16, b.lo, b.hi, l->global, b.ao16);
        VLAUNCHED("attention");
        vp_mark(prof, st, l->global ? VP_ATTN_G : VP_ATTN_W);
        gemm(st, b.ao16, n, &l->o, l->o_b, b.h, false, b.h, NULL);
        vp_mark(prof, st, VP_O);
        layer_norm(v, n, b.h, l->ln2_w, l->ln2_b, NULL, b.x16);
        vp_mark(prof, st, VP_NORM);
        gemm(st, b.x16, n, &l->up, l->up_b, NULL, true, NULL, b.big16);
        vp_mark(prof, st, VP_UP);
        gemm(st, b.big16, n, &l->down, l->down_b, b.h, false, b.h, NULL);
        VLAUNCHED("ffn");
        vp_mark(prof, st, VP_DOWN);
    }
    layer_norm(v, n, b.h, v->post_w, v->post_b, b.h, NULL);
    VLAUNCHED("post norm");

    /* 3. pixel shuffle, the adapter */
    k_shuffle<<<grid_for((int64_t)n_out * 4 * E, 256), 256, 0, st>>>(b.h, E, gw, n_out, b.inv, b.x16);
    VLAUNCHED("pixel shuffle");
    gemm(st, b.x16, n_out, &v->mm[0], NULL, NULL, true, NULL, b.a1);
    gemm(st, b.a1, n_out, &v->mm[1], NULL, NULL, true, NULL, b.a2);
    gemm(st, b.a2, n_out, &v->mm[2], NULL, NULL, false, b.outf, NULL);
    VLAUNCHED("adapter");
    VCK(cudaMemcpyAsync(im->out, b.outf, (size_t)n_out * v->O * 4, cudaMemcpyDeviceToHost, st), "download");
    vp_mark(prof, st, VP_TAIL);
    VCK(cudaStreamSynchronize(st), "encode");
    vp_report(prof, n);
    return 0;
}

/* ---- kernel tests (gpu.h, mu_gpu_vit_test_*) ------------------------------ */

/* device copies of host arrays, freed together */
typedef struct {
    void *p[8];
    int n;
} tbufs;
static void tb_free(tbufs *b) {
    for (int i = 0; i < b->n; i++) cudaFree(b->p[i]);
    b->n = 0;
}
static int tb_put(tbufs *b, const void *src, size_t bytes, void **out, mu_err *err) {
    *out = NULL;
    if (!src) return 0;
    VCK(cudaMalloc(out, bytes), "test buffer");
    b->p[b->n++] = *out;
    VCK(cudaMemcpy(*out, src, bytes, cudaMemcpyHostToDevice), "test upload");
    return 0;
}

int cu_vit_test_gemm(int device, int T, int N, int K, const uint16_t *a, const uint16_t *w, const float *bias,
                     const float *res, bool gelu, float *y, mu_err *err) {
    if (T < 1 || N < 1 || K < 1) return cu_fail(err, MU_E_ARG, "cuda vision: test gemm %dx%dx%d", T, N, K);
    VCK(cudaSetDevice(device), "set device");
    tbufs b = {{0}, 0};
    void *da, *dw, *db, *dr, *dy;
    const size_t ny = (size_t)T * N * 4;
    int rc = tb_put(&b, a, (size_t)T * K * 2, &da, err);
    if (!rc) rc = tb_put(&b, w, (size_t)N * K * 2, &dw, err);
    if (!rc) rc = tb_put(&b, bias, (size_t)N * 4, &db, err);
    if (!rc) rc = tb_put(&b, res, ny, &dr, err);
    if (!rc) rc = tb_put(&b, y, ny, &dy, err); /* y's bytes: the output buffer */
    if (!rc) {
        vmat m = {(__half *)dw, N, K};
        gemm(0, (const __half *)da, T, &m, (const float *)db, (const float *)dr, gelu, (float *)dy, NULL);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaMemcpy(y, dy, ny, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = cu_cuda_fail_in(err, e, "cuda vision", "test gemm");
    }
    tb_free(&b);
    return rc;
}

int cu_vit_test_attn(int device, int n, int n_head, int hd, const float *q, const uint16_t *k, const uint16_t *v,
                     const int *lo, const int *hi, bool global, uint16_t *out, mu_err *err) {
    if (n < 1 || n_head < 1 || hd < 4 || hd % 4 || hd > 128 || !lo || !hi)
        return cu_fail(err, MU_E_ARG, "cuda vision: test attention n %d, %d heads of %d", n, n_head, hd);
    VCK(cudaSetDevice(device), "set device");
    const int E = n_head * hd;
    const size_t nE = (size_t)n * E;
    tbufs b = {{0}, 0};
    void *dq, *dk, *dv, *dlo, *dhi, *dout;
    int rc = tb_put(&b, q, nE * 4, &dq, err);
    if (!rc) rc = tb_put(&b, k, nE * 2, &dk, err);
    if (!rc) rc = tb_put(&b, v, nE * 2, &dv, err);
    if (!rc) rc = tb_put(&b, lo, (size_t)n * 4, &dlo, err);
    if (!rc) rc = tb_put(&b, hi, (size_t)n * 4, &dhi, err);
    if (!rc) rc = tb_put(&b, out, nE * 2, &dout, err);
    if (!rc) {
        mu_gpu_vit v = {};
        v.E = E, v.H = n_head, v.hd = hd, v.st = 0;
        attention(&v, n, (const float *)dq, (const __half *)dk, (const __half *)dv, (const int *)dlo,
                  (const int *)dhi, global, (__half *)dout);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaMemcpy(out, dout, nE * 2, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = cu_cuda_fail_in(err, e, "cuda vision", "test attention");
    }
    tb_free(&b);
    return rc;
}
