/* gpu_cuda_mm.cu: activation quantization, matmuls and row lookups on the
 * device, with the CPU's rounding (kern_ref.c is the specification).
 *
 * The quantized matmuls keep the CPU's arithmetic exactly: a block's
 * integer sums are exact in any order, and the float accumulation that
 * follows is a chain per accumulator lane, block after block, as the CPU
 * runs it. A warp owns one weight row and a tile of tokens: lane j works on
 * blocks j, j+32, ..., writes each block's integer sums and scales to
 * shared memory, and a few "chain" lanes then fold them in block order.
 * The float types (F32, F16, BF16) give each lane the CPU's accumulator
 * lanes, so the sums run in the CPU's order too. */
#include <stdlib.h>
#include <string.h>

#include "mm.cuh"
#include "q8k.cuh"

#define MM_WARPS 4      /* warps (rows) per thread block */
#define MM_TILE 8       /* tokens per warp */

/* ---- activation quantization ------------------------------------------- */

/* Q8_K: one warp per block of 256 (grid: blocks x tokens). */
__global__ void k_quant_q8_K(const float *x, int n, mu_block_q8_K *y0, size_t stride) {
    pdl_wait();
    pdl_launch(); /* the decode matmul after it may start fetching weights */
    const int t = blockIdx.y, b = blockIdx.x;
    q8K_block_warp(x + (size_t)t * n + (size_t)b * 256, (mu_block_q8_K *)((uint8_t *)y0 + (size_t)t * stride) + b,
                   threadIdx.x);
}

__device__ __forceinline__ int8_t q8_0_conv(float v) {
    if (!(v >= -2147483648.f && v < 2147483648.f)) return -128;
    const int r = (int)rintf(v);
    return (int8_t)(r > 127 ? 127 : r < -128 ? -128 : r);
}

/* Q8_0: one warp per block of 32. */
__global__ void k_quant_q8_0(const float *x, int n, dq8_0 *y0, size_t stride) {
    pdl_wait();
    pdl_launch(); /* the decode matmul after it may start fetching weights */
    const int t = blockIdx.y, b = blockIdx.x, lane = threadIdx.x;
    const float v = x[(size_t)t * n + (size_t)b * 32 + lane];
    float amax = fabsf(v);
    for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    dq8_0 *y = (dq8_0 *)((uint8_t *)y0 + (size_t)t * stride) + b;
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    y->qs[lane] = q8_0_conv(v * id);
    if (lane == 0) {
        y->d = f2h(amax / 127.f);
        y->pad = 0;
    }
}

__global__ void k_to_f16(const float *x, int n, uint16_t *y0, size_t stride, int T) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n) return;
    const size_t t = i / n, j = i % n;
    ((uint16_t *)((uint8_t *)y0 + t * stride))[j] = f2h(x[i]);
}

__global__ void k_to_bf16(const float *x, int n, uint16_t *y0, size_t stride, int T) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n) return;
    const size_t t = i / n, j = i % n;
    ((uint16_t *)((uint8_t *)y0 + t * stride))[j] = f2bf(x[i]);
}

__global__ void k_copy_f32(const float *x, int n, float *y0, size_t stride, int T) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n) return;
    const size_t t = i / n, j = i % n;
    ((float *)((uint8_t *)y0 + t * stride))[j] = x[i];
}

void cu_quantize(cudaStream_t st, uint32_t dt, const float *x, int T, int n, void *y, size_t stride) {
    if (T <= 0) return;
    const size_t tot = (size_t)T * n;
    const unsigned g = (unsigned)((tot + 255) / 256);
    switch (dt) {
    case MU_T_Q8_K: launch_pdl(k_quant_q8_K, dim3(n / 256, T), dim3(32), 0, st, x, n, (mu_block_q8_K *)y, stride); break;
    case MU_T_Q8_0: launch_pdl(k_quant_q8_0, dim3(n / 32, T), dim3(32), 0, st, x, n, (dq8_0 *)y, stride); break;
    case MU_T_F16: k_to_f16<<<g, 256, 0, st>>>(x, n, (uint16_t *)y, stride, T); break;
    case MU_T_BF16: k_to_bf16<<<g, 256, 0, st>>>(x, n, (uint16_t *)y, stride, T); break;
    default: k_copy_f32<<<g, 256, 0, st>>>(x, n, (float *)y, stride, T); break;
    }
}

/* ---- quantized blocks: integer sums ------------------------------------ */


__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}


/* Results of one block against its activation block(s): up to 16
 * integers and the float factors of its chain steps (d, dm; NVFP4 has four:
 * f[0..3]). */
typedef struct {
    int r[16];
    float f[4];
} blk_res;


/* Q4_K: r[2j] = scale-weighted sum of sub-blocks 2j, 2j+1 (the 64 elements
 * j), r[2j+1] = their min part; d = d_x*d_a, dm = dmin_x*d_a. */
__device__ __forceinline__ void res_q4_K(const mu_block_q4_K *x, const mu_block_q8_K *a, blk_res *o) {
    int sc[8], mn[8];
#pragma unroll
    for (int j = 0; j < 8; j++) scale_min_k4(j, x->scales, &sc[j], &mn[j]);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int l = 0; l < 32; l += 4) {
            const int q = ld32(x->qs + 32 * j + l);
            s0 = __dp4a(q & 0x0F0F0F0F, ld32(a->qs + 64 * j + l), s0);
            s1 = __dp4a((q >> 4) & 0x0F0F0F0F, ld32(a->qs + 64 * j + 32 + l), s1);
        }
        o->r[2 * j] = sc[2 * j] * s0 + sc[2 * j + 1] * s1;
        o->r[2 * j + 1] = mn[2 * j] * (a->bsums[4 * j] + a->bsums[4 * j + 1]) +
                          mn[2 * j + 1] * (a->bsums[4 * j + 2] + a->bsums[4 * j + 3]);
    }
    o->f[0] = h2f(x->d) * a->d;
    o->f[1] = h2f(x->dmin) * a->d;
}

/* Q5_K: r[l] (l < 8) the lane sums of kern_ref.c, r[8] the min sum;
 * d = d_a*d_x, dm = -d_a*dmin_x. */
__device__ __forceinline__ void res_q5_K(const mu_block_q5_K *x, const mu_block_q8_K *a, blk_res *o) {
    int sc[8], mn[8];
#pragma unroll
    for (int j = 0; j < 8; j++) scale_min_k4(j, x->scales, &sc[j], &mn[j]);
    int imin = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) imin += mn[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    o->r[8] = imin;
#pragma unroll
    for (int l = 0; l < 8; l++) o->r[l] = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
#pragma unroll
        for (int l = 0; l < 8; l++) {
            /* bytes 4l..4l+3 of the sub-blocks 2j (low nibbles) and 2j+1 (high) */
            const int q = ld32(x->qs + 32 * j + 4 * l), h = ld32(x->qh + 4 * l);
            const int lo = (q & 0x0F0F0F0F) | (((h >> (2 * j)) & 0x01010101) << 4);
            const int hi = ((q >> 4) & 0x0F0F0F0F) | (((h >> (2 * j + 1)) & 0x01010101) << 4);
            const int t0 = __dp4a(lo, ld32(a->qs + 64 * j + 4 * l), 0);
            const int t1 = __dp4a(hi, ld32(a->qs + 64 * j + 32 + 4 * l), 0);
            o->r[l] += sc[2 * j] * t0 + sc[2 * j + 1] * t1;
        }
    }
    o->f[0] = a->d * h2f(x->d);
    o->f[1] = -a->d * h2f(x->dmin);
}

/* Q6_K: r[m] (m < 8) the lane sums of kern_ref.c; d = d_a*d_x. */
__device__ __forceinline__ void res_q6_K(const dq6_K *x, const mu_block_q8_K *a, blk_res *o) {
#pragma unroll
    for (int m = 0; m < 8; m++) o->r[m] = 0;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        /* chunk c = 4h + k of 32 unsigned 6-bit values */
        const int h = c >> 2, k = c & 3;
        const uint8_t *ql = x->ql + 64 * h + (k & 1) * 32;
        const uint8_t *qh = x->qh + 32 * h;
        const int shl = (k >> 1) * 4, shh = 2 * k;
#pragma unroll
        for (int m = 0; m < 8; m++) {
            const int q = (ld32(ql + 4 * m) >> shl) & 0x0F0F0F0F;
            const int hb = (ld32(qh + 4 * m) >> shh) & 0x03030303;
            const int t = __dp4a(q | (hb << 4), ld32(a->qs + 32 * c + 4 * m), 0);
            o->r[m] += x->scales[2 * c + (m >= 4)] * t;
        }
    }
#pragma unroll
    for (int m = 0; m < 8; m++)
        o->r[m] -= 32 * (a->bsums[2 * m] * x->scales[2 * m] + a->bsums[2 * m + 1] * x->scales[2 * m + 1]);
    o->f[0] = a->d * h2f(x->d);
}

/* NVFP4 (gpu.h: the CPU's mu_vec_dot_nvfp4_ref): one block of 64 meets two
 * Q8_0 activation blocks h; r[8h + l] = the products of elements 4l..4l+3
 * of the 32 of half h, with x86's sign trick for an activation of -128;
 * f[2h + k] = scale(d[2h + k]) * d_a of block h. */
__device__ const int8_t c_fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/* element e of a block in the device layout (cu_dev_blocks): GGUF byte
 * 8 (e / 16) + j % 8 of qs (j = e % 16) is byte j % 4 of code word
 * 2 (e / 16) + j % 8 / 4; its low nibble (j < 8) at bits 4 (j % 4) of
 * that word, its high one 16 bits higher */
__device__ __forceinline__ int nvfp4_code(const mu_block_nvfp4 *b, int e) {
    const int sb = e / 16, j = e % 16;
    const uint32_t w = (uint32_t)ld32(b->qs + 4 * (2 * sb + (j & 7) / 4));
    return c_fp4[(w >> (4 * (j & 3) + (j < 8 ? 0 : 16))) & 0xF];
}
__device__ __forceinline__ int fp4_mul(int c, int8_t a) {
    return c < 0 ? -c * (int)(int8_t)(uint8_t)(-(int)a) : c * a;
}
typedef struct {
    dq8_0 h[2];
} dq8_0x2;
__device__ __forceinline__ void res_nvfp4(const mu_block_nvfp4 *x, const dq8_0x2 *a, blk_res *o) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float dy = h2f(a->h[h].d);
        o->f[2 * h] = nvfp4_scale(x->d[2 * h]) * dy;
        o->f[2 * h + 1] = nvfp4_scale(x->d[2 * h + 1]) * dy;
#pragma unroll
        for (int l = 0; l < 8; l++) {
            int sum = 0;
#pragma unroll
            for (int j = 4 * l; j < 4 * l + 4; j++) sum += fp4_mul(nvfp4_code(x, 32 * h + j), a->h[h].qs[j]);
            o->r[8 * h + l] = sum;
        }
    }
}

/* Q8_0: r[l] = bytes 4l..4l+3 of the block; d = d_x*d_a. */
__device__ __forceinline__ void res_q8_0(const dq8_0 *x, const dq8_0 *a, blk_res *o) {
#pragma unroll
    for (int l = 0; l < 8; l++) o->r[l] = __dp4a(ld32(x->qs + 4 * l), ld32(a->qs + 4 * l), 0);
    o->f[0] = h2f(x->d) * h2f(a->d);
}

/* ---- quantized matmul --------------------------------------------------- */

/* Chains per type: Q4_K 2 (acc, accm), the rest 8 lanes (+ Q5_K's summs). */
template <int TYPE> struct qt;
template <> struct qt<MU_T_Q4_K> {
    typedef mu_block_q4_K W; typedef mu_block_q8_K A;
    enum { QK = 256, NCH = 2 };
};
template <> struct qt<MU_T_Q5_K> {
    typedef mu_block_q5_K W; typedef mu_block_q8_K A;
    enum { QK = 256, NCH = 9 };
};
template <> struct qt<MU_T_Q6_K> {
    typedef dq6_K W; typedef mu_block_q8_K A;
    enum { QK = 256, NCH = 8 };
};
template <> struct qt<MU_T_Q8_0> {
    typedef dq8_0 W; typedef dq8_0 A;
    enum { QK = 32, NCH = 8 };
};
template <> struct qt<MU_T_NVFP4> {
    typedef mu_block_nvfp4 W; typedef dq8_0x2 A;
    enum { QK = 64, NCH = 8 };
};

template <int TYPE>
__device__ __forceinline__ void block_res(const typename qt<TYPE>::W *x, const typename qt<TYPE>::A *a, blk_res *o) {
    if constexpr (TYPE == MU_T_Q4_K) res_q4_K(x, a, o);
    else if constexpr (TYPE == MU_T_Q5_K) res_q5_K(x, a, o);
    else if constexpr (TYPE == MU_T_Q6_K) res_q6_K(x, a, o);
    else if constexpr (TYPE == MU_T_NVFP4) res_nvfp4(x, a, o);
    else res_q8_0(x, a, o);
}

/* One chain step of chain c over block result e (per64: Q4_K's batch
 * rounding, four steps per block). */
template <int TYPE>
__device__ __forceinline__ float chain_step(float acc, int c, const int *r, const float *f, bool per64) {
    const float d = f[0], dm = f[1];
    if constexpr (TYPE == MU_T_NVFP4) {
        acc = fmaf(f[c >= 4], (float)r[c], acc);
        return fmaf(f[2 + (c >= 4)], (float)r[8 + c], acc);
    } else if constexpr (TYPE == MU_T_Q4_K) {
        /* chain 0: sum of scale parts by d; chain 1: min parts by dm */
        if (per64) {
#pragma unroll
            for (int j = 0; j < 4; j++) acc = fmaf((float)r[2 * j + c], c ? dm : d, acc);
            return acc;
        }
        const int s = c ? r[1] + r[3] + r[5] + r[7] : r[0] + r[2] + r[4] + r[6];
        return fmaf((float)s, c ? dm : d, acc);
    } else if constexpr (TYPE == MU_T_Q5_K) {
        return c == 8 ? fmaf((float)r[8], dm, acc) : fmaf(d, (float)r[c], acc);
    } else {
        return fmaf(d, (float)r[c], acc);
    }
}

template <int TYPE>
__device__ __forceinline__ float chain_final(const float *acc) {
    if constexpr (TYPE == MU_T_Q4_K) return acc[0] - acc[1];
    else if constexpr (TYPE == MU_T_Q5_K) return hsum8(acc) + acc[8];
    else return hsum8(acc);
}

/* Softcap and scale of the output matrix (forward.c job_matmul). */
__device__ __forceinline__ float logit_post(float l, float scale, float cap) {
    l = l * scale;
    if (cap > 0) l = tanhf_libm(l * (1.0f / cap)) * cap;
    return l;
}

/* A weight block into registers with the widest loads its alignment
 * allows (a struct copy would load it byte by byte). */
template <typename W> __device__ __forceinline__ void ld_block(W *dst, const W *src) {
    if constexpr (sizeof(W) % 16 == 0) {
#pragma unroll
        for (int i = 0; i < (int)(sizeof(W) / 16); i++) ((int4 *)dst)[i] = __ldg((const int4 *)src + i);
    } else {
#pragma unroll
        for (int i = 0; i < (int)(sizeof(W) / 4); i++) ((int *)dst)[i] = __ldg((const int *)src + i);
    }
}

template <int TYPE>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_mm_q(const uint8_t *w, size_t w_rb, int rows, int nb, const uint8_t *act, size_t act_stride, int T, int n_batch,
       float *y, bool logits, float lscale, float cap) {
    typedef typename qt<TYPE>::W W;
    typedef typename qt<TYPE>::A A;
    constexpr int NCH = qt<TYPE>::NCH;
    __shared__ int s_r[MM_WARPS][32][16];
    __shared__ float s_d[MM_WARPS][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * MM_WARPS + warp;
    const int t0 = blockIdx.y * MM_TILE;
    if (row >= rows) return;
    const int nt = T - t0 < MM_TILE ? T - t0 : MM_TILE;
    const W *xr = (const W *)(w + (size_t)row * w_rb);
    float acc[MM_TILE]; /* chain lane c's accumulator for each token */
#pragma unroll
    for (int i = 0; i < MM_TILE; i++) acc[i] = 0;
    for (int b0 = 0; b0 < nb; b0 += 32) {
        const int b = b0 + lane, n_in = nb - b0 < 32 ? nb - b0 : 32;
        W xb;
        if (b < nb) ld_block(&xb, xr + b);
        for (int i = 0; i < nt; i++) {
            const int t = t0 + i;
            if (b < nb) {
                blk_res o;
                block_res<TYPE>(&xb, (const A *)(act + (size_t)t * act_stride) + b, &o);
#pragma unroll
                for (int k = 0; k < 16; k++) s_r[warp][lane][k] = o.r[k];
#pragma unroll
                for (int k = 0; k < 4; k++) s_d[warp][lane][k] = o.f[k];
            }
            __syncwarp();
            if (lane < NCH) {
                const bool per64 = TYPE == MU_T_Q4_K && t < n_batch;
                float a = acc[i];
                for (int e = 0; e < n_in; e++) a = chain_step<TYPE>(a, lane, s_r[warp][e], s_d[warp][e], per64);
                acc[i] = a;
            }
            __syncwarp();
        }
    }
    for (int i = 0; i < nt; i++) {
        float ch[9];
#pragma unroll
        for (int c = 0; c < 9; c++) ch[c] = __shfl_sync(0xffffffffu, acc[i], c);
        if (lane == 0) {
            float v = chain_final<TYPE>(ch);
            if (logits) v = logit_post(v, lscale, cap);
            y[(size_t)(t0 + i) * rows + row] = v;
        }
    }
}

/* ---- K-quant matmul for few tokens (decode) -----------------------------
 * The kernel above gives a whole super-block to one lane, so a row of 26
 * blocks keeps 26 lanes busy with long serial work. Here eight lanes share
 * a super-block (four per warp pass) and each computes the CPU's integer
 * sums for its slice; the integers are added across the eight by shuffles
 * (exact), and every lane folds the blocks' results into the float chains
 * in block order, so the rounding is the CPU's, as above. */

#define DEC_MAX_T 4 /* tokens per warp (a decode batch) */

/* lane g's weight words of one super-block */
template <int TYPE> struct dec_words;
template <> struct dec_words<MU_T_Q4_K> { int4 h, q; };          /* d, dmin, scales; 16 bytes of qs */
template <> struct dec_words<MU_T_Q5_K> { int q[4], h; };         /* qs words 4g of each 32; qh word g */
template <> struct dec_words<MU_T_Q6_K> { int l[4], h[2]; };      /* ql words; qh words */

/* a word of a weight block: read-only global (__ldg) or shared (SH) */
template <bool SH, typename V> __device__ __forceinline__ V ldw(const void *p) {
    if constexpr (SH) return *(const V *)p;
    else return __ldg((const V *)p);
}

template <int TYPE, bool SH = false>
__device__ __forceinline__ void dec_load(const typename qt<TYPE>::W *x, int g, dec_words<TYPE> *o) {
    if constexpr (TYPE == MU_T_Q4_K) {
        const int j = g >> 1, hf = g & 1;
        o->h = ldw<SH, int4>(x);
        o->q = ldw<SH, int4>(x->qs + 32 * j + 16 * hf);
    } else if constexpr (TYPE == MU_T_Q5_K) {
#pragma unroll
        for (int j = 0; j < 4; j++) o->q[j] = ldw<SH, int>(x->qs + 32 * j + 4 * g);
        o->h = ldw<SH, int>(x->qh + 4 * g);
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) o->l[i] = ldw<SH, int>(x->ql + 32 * i + 4 * g);
        o->h[0] = ldw<SH, int>(x->qh + 4 * g);
        o->h[1] = ldw<SH, int>(x->qh + 32 + 4 * g);
    }
}

/* Lane g's integer sums of one super-block against activation block a,
 * from its preloaded words. Q4_K: lane g has the 16 bytes g&1 of the 32 of
 * group j = g >> 1 (the low nibbles are 16 elements of sub-block 2j, the
 * high ones of 2j + 1); isum is the scale-weighted sum of those 32
 * elements, imin the min part of group j (lanes with g&1 == 0 only).
 * Q5_K / Q6_K: the CPU's lane sum g (bytes 4g..4g+3 of every 32-element
 * chunk), complete; Q5_K's min sum on lane 0. */
__device__ __forceinline__ void dec_q4_K(const dec_words<MU_T_Q4_K> &w, const mu_block_q8_K *a, int g, int *isum,
                                         int *imin) {
    const int j = g >> 1, hf = g & 1;
    const int sw[3] = {w.h.y, w.h.z, w.h.w};
    const int sc0 = scale_k4w(2 * j, sw), m0 = min_k4w(2 * j, sw);
    const int sc1 = scale_k4w(2 * j + 1, sw), m1 = min_k4w(2 * j + 1, sw);
    const int qv[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    const int8_t *alo = a->qs + 64 * j + 16 * hf, *ahi = alo + 32;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s0 = __dp4a(qv[i] & 0x0F0F0F0F, ld32(alo + 4 * i), s0);
        s1 = __dp4a((qv[i] >> 4) & 0x0F0F0F0F, ld32(ahi + 4 * i), s1);
    }
    *isum = sc0 * s0 + sc1 * s1;
    *imin = hf ? 0 : m0 * (a->bsums[4 * j] + a->bsums[4 * j + 1]) + m1 * (a->bsums[4 * j + 2] + a->bsums[4 * j + 3]);
}

__device__ __forceinline__ int dec_q5_K(const dec_words<MU_T_Q5_K> &w, const mu_block_q5_K *x,
                                        const mu_block_q8_K *a, int g, int *imin) {
    int r = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int sc0, m0, sc1, m1;
        scale_min_k4(2 * j, x->scales, &sc0, &m0);
        scale_min_k4(2 * j + 1, x->scales, &sc1, &m1);
        const int lo = (w.q[j] & 0x0F0F0F0F) | (((w.h >> (2 * j)) & 0x01010101) << 4);
        const int hi = ((w.q[j] >> 4) & 0x0F0F0F0F) | (((w.h >> (2 * j + 1)) & 0x01010101) << 4);
        r += sc0 * __dp4a(lo, ld32(a->qs + 64 * j + 4 * g), 0) + sc1 * __dp4a(hi, ld32(a->qs + 64 * j + 32 + 4 * g), 0);
    }
    int mn = 0;
    if (g == 0)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int sc, m;
            scale_min_k4(j, x->scales, &sc, &m);
            mn += m * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
        }
    *imin = mn;
    return r;
}

__device__ __forceinline__ int dec_q6_K(const dec_words<MU_T_Q6_K> &w, const dq6_K *x, const mu_block_q8_K *a, int g) {
    int r = 0;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const int h = c >> 2, k = c & 3;
        const int q = (w.l[2 * h + (k & 1)] >> ((k >> 1) * 4)) & 0x0F0F0F0F;
        const int hb = (w.h[h] >> (2 * k)) & 0x03030303;
        r += x->scales[2 * c + (g >= 4)] * __dp4a(q | (hb << 4), ld32(a->qs + 32 * c + 4 * g), 0);
    }
    return r - 32 * (a->bsums[2 * g] * x->scales[2 * g] + a->bsums[2 * g + 1] * x->scales[2 * g + 1]);
}

template <int TYPE>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_mm_dec(const uint8_t *w, size_t w_rb, int rows, int nb, const uint8_t *act, size_t act_stride, int T, int n_batch,
         float *y, bool logits, float lscale, float cap) {
    typedef typename qt<TYPE>::W W;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q = lane >> 3, g = lane & 7;
    const int row = blockIdx.x * MM_WARPS + warp;
    if (row >= rows) return;
    const W *xr = (const W *)(w + (size_t)row * w_rb);
    /* Q4_K: c0 = sum chain, c1 = min chain; Q5_K/Q6_K: c0 = the chain of
     * lane sum g, c1 = Q5_K's min chain */
    float c0[DEC_MAX_T], c1[DEC_MAX_T];
#pragma unroll
    for (int t = 0; t < DEC_MAX_T; t++) c0[t] = c1[t] = 0;
    for (int b0 = 0; b0 < nb; b0 += 4) {
        const int b = b0 + q;
        const bool have = b < nb;
        const W *x = xr + (have ? b : 0);
        dec_words<TYPE> wv;
        if (have) dec_load<TYPE>(x, g, &wv);
#pragma unroll
        for (int t = 0; t < DEC_MAX_T; t++) {
            if (t >= T) break;
            const mu_block_q8_K *ab = (const mu_block_q8_K *)(act + (size_t)t * act_stride) + (have ? b : 0);
            int v0 = 0, v1 = 0;
            float d = 0, dm = 0;
            if (have) {
                if constexpr (TYPE == MU_T_Q4_K) {
                    dec_q4_K(wv, ab, g, &v0, &v1);
                    d = h2f(((const mu_block_q4_K *)x)->d) * ab->d;
                    dm = h2f(((const mu_block_q4_K *)x)->dmin) * ab->d;
                } else if constexpr (TYPE == MU_T_Q5_K) {
                    v0 = dec_q5_K(wv, (const mu_block_q5_K *)x, ab, g, &v1);
                    d = ab->d * h2f(((const mu_block_q5_K *)x)->d);
                    dm = -ab->d * h2f(((const mu_block_q5_K *)x)->dmin);
                } else {
                    v0 = dec_q6_K(wv, (const dq6_K *)x, ab, g);
                    d = ab->d * h2f(((const dq6_K *)x)->d);
                }
            }
            if constexpr (TYPE == MU_T_Q4_K) {
                /* pair sums: lane 2j of each group holds group j's (isum, imin) */
                v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
                v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
                if (t < n_batch) { /* per 64 elements: four steps per block */
                    for (int qq = 0; qq < 4 && b0 + qq < nb; qq++)
#pragma unroll
                        for (int j = 0; j < 4; j++) {
                            const int src = 8 * qq + 2 * j;
                            const float dd = __shfl_sync(0xffffffffu, d, src), ddm = __shfl_sync(0xffffffffu, dm, src);
                            c0[t] = fmaf((float)__shfl_sync(0xffffffffu, v0, src), dd, c0[t]);
                            c1[t] = fmaf((float)__shfl_sync(0xffffffffu, v1, src), ddm, c1[t]);
                        }
                } else {
                    v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
                    v1 += __shfl_xor_sync(0xffffffffu, v1, 2);
                    v0 += __shfl_xor_sync(0xffffffffu, v0, 4);
                    v1 += __shfl_xor_sync(0xffffffffu, v1, 4);
                    for (int qq = 0; qq < 4 && b0 + qq < nb; qq++) {
                        const int src = 8 * qq;
                        c0[t] = fmaf((float)__shfl_sync(0xffffffffu, v0, src), __shfl_sync(0xffffffffu, d, src), c0[t]);
                        c1[t] = fmaf((float)__shfl_sync(0xffffffffu, v1, src), __shfl_sync(0xffffffffu, dm, src), c1[t]);
                    }
                }
            } else {
                for (int qq = 0; qq < 4 && b0 + qq < nb; qq++) {
                    const float dd = __shfl_sync(0xffffffffu, d, 8 * qq);
                    c0[t] = fmaf(dd, (float)__shfl_sync(0xffffffffu, v0, 8 * qq + g), c0[t]);
                    if constexpr (TYPE == MU_T_Q5_K)
                        c1[t] = fmaf((float)__shfl_sync(0xffffffffu, v1, 8 * qq), __shfl_sync(0xffffffffu, dm, 8 * qq), c1[t]);
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < DEC_MAX_T; t++) {
        if (t >= T) break;
        float ch[8];
#pragma unroll
        for (int k = 0; k < 8; k++) ch[k] = __shfl_sync(0xffffffffu, c0[t], k);
        if (lane == 0) {
            float v;
            if constexpr (TYPE == MU_T_Q4_K) v = c0[t] - c1[t];
            else if constexpr (TYPE == MU_T_Q5_K) v = hsum8(ch) + c1[t];
            else v = hsum8(ch);
            if (logits) v = logit_post(v, lscale, cap);
            y[(size_t)t * rows + row] = v;
        }
    }
}


/* ---- K-quant matmul for few tokens (decode), loads first ----------------
 * The same work and the same chains as k_mm_dec. A block of DEC_WARPS rows
 * (a warp a row) first stages the step's activation rows in shared memory
 * (cp.async, once for all its rows); then, per chunk of 4U super-blocks,
 * every lane loads its weight words of U passes before using any (U times
 * more bytes in flight per warp), computes the integer sums from shared
 * memory and leaves them with the blocks' factors there, and only then do
 * the chain lanes fold them, block after block. The float steps and their
 * order are k_mm_dec's. One launch may cover up to DEC_GRP matrices of one
 * type and width over the same activations (dec_grp). */

#define DEC_WARPS 8         /* rows per thread block */
#define DEC_NI 9            /* integers kept per block and token */
#define DEC2_SMEM_MAX (160 << 10) /* dynamic shared memory of k_mm_dec2 at most (dec2_smem_max) */

/* Shared memory of k_mm_dec2 for T tokens of nb super-blocks and U passes. */
static size_t dec2_smem(int T, int nb, int U) {
    return (size_t)T * nb * sizeof(mu_block_q8_K) + (size_t)DEC_WARPS * T * 4 * U * (DEC_NI + 2) * 4 +
           (size_t)DEC_WARPS * T * 9 * 4;
}

/* Up to four matrices of one type and width over the same activation rows,
 * in one launch (q, k, v and gate; FFN gate and up): matrix g owns the
 * thread blocks below end[g]. */
#define DEC_GRP 4
typedef struct {
    const uint8_t *w[DEC_GRP];
    size_t w_rb[DEC_GRP];
    float *y[DEC_GRP];
    int rows[DEC_GRP], end[DEC_GRP];
    int n;
} dec_grp;

/* Lane g's part of one super-block for one token (all lanes of the warp
 * take part: shuffles): its integer sums and the block's chain factors,
 * left in si (DEC_NI integers) and sf (2 floats) for dec_fold. per64:
 * Q4_K's batch rounding (a chain step per 64 elements). */
template <int TYPE>
__device__ __forceinline__ void dec_sums(const dec_words<TYPE> &wv, const typename qt<TYPE>::W *x,
                                         const mu_block_q8_K *ab, int g, bool per64, bool have, int *si, float *sf) {
    if constexpr (TYPE == MU_T_Q4_K) {
        int v0 = 0, v1 = 0;
        if (have) dec_q4_K(wv, ab, g, &v0, &v1);
        v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
        v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
        if (per64) { /* per 64 elements: group j = g / 2 */
            if (have && !(g & 1)) {
                si[g] = v0;
                si[g + 1] = v1;
            }
        } else {
            v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
            v1 += __shfl_xor_sync(0xffffffffu, v1, 2);
            v0 += __shfl_xor_sync(0xffffffffu, v0, 4);
            v1 += __shfl_xor_sync(0xffffffffu, v1, 4);
            if (have && g == 0) {
                si[0] = v0;
                si[1] = v1;
            }
        }
        if (have && g == 0) {
            sf[0] = h2f((uint16_t)wv.h.x) * ab->d;
            sf[1] = h2f((uint16_t)((unsigned)wv.h.x >> 16)) * ab->d;
        }
    } else if constexpr (TYPE == MU_T_Q5_K) {
        if (have) {
            int mn;
            si[g] = dec_q5_K(wv, (const mu_block_q5_K *)x, ab, g, &mn);
            if (g == 0) {
                si[8] = mn;
                sf[0] = ab->d * h2f(((const mu_block_q5_K *)x)->d);
                sf[1] = -ab->d * h2f(((const mu_block_q5_K *)x)->dmin);
            }
        }
    } else {
        if (have) {
            si[g] = dec_q6_K(wv, (const dq6_K *)x, ab, g);
            if (g == 0) sf[0] = ab->d * h2f(((const dq6_K *)x)->d);
        }
    }
}

/* The chain lanes (k = lane + 32 s: token k / NCH, chain k % NCH) fold nc
 * super-blocks' results ([T][CH] entries of s_i / s_f) into acc, in block
 * order: the CPU's float chains. */
template <int TYPE>
__device__ __forceinline__ void dec_fold(float acc[2], int lane, int T, int n_batch, int nc, int CH, const int *s_i,
                                         const float *s_f) {
    constexpr int NCH = qt<TYPE>::NCH;
#pragma unroll
    for (int s = 0; s < 2; s++) {
        const int k = lane + 32 * s;
        if (k >= T * NCH) break;
        const int t = k / NCH, c = k % NCH;
        const int *ri = s_i + t * CH * DEC_NI;
        const float *rf = s_f + t * CH * 2;
        float a = acc[s];
        if constexpr (TYPE == MU_T_Q4_K) {
            if (t < n_batch) { /* per 64 elements: four steps per block */
                for (int e = 0; e < nc; e++)
#pragma unroll
                    for (int j = 0; j < 4; j++) a = fmaf((float)ri[e * DEC_NI + 2 * j + c], rf[2 * e + c], a);
            } else {
                for (int e = 0; e < nc; e++) a = fmaf((float)ri[e * DEC_NI + c], rf[2 * e + c], a);
            }
        } else if constexpr (TYPE == MU_T_Q5_K) {
            for (int e = 0; e < nc; e++)
                a = c == 8 ? fmaf((float)ri[e * DEC_NI + 8], rf[2 * e + 1], a) : fmaf(rf[2 * e], (float)ri[e * DEC_NI + c], a);
        } else {
            for (int e = 0; e < nc; e++) a = fmaf(rf[2 * e], (float)ri[e * DEC_NI + c], a);
        }
        acc[s] = a;
    }
}

/* The row's results from the chains (through s_acc, T * 9 floats of the
 * warp): lane t writes token t's. */
template <int TYPE>
__device__ __forceinline__ void dec_out(const float acc[2], int lane, int T, float *s_acc, bool live, float *y, int rows,
                                        int row, bool logits, float lscale, float cap) {
    constexpr int NCH = qt<TYPE>::NCH;
#pragma unroll
    for (int s = 0; s < 2; s++)
        if (lane + 32 * s < T * NCH) s_acc[lane + 32 * s] = acc[s];
    __syncwarp();
    if (live && lane < T) {
        const float *ch = s_acc + lane * NCH;
        float v;
        if constexpr (TYPE == MU_T_Q4_K) v = ch[0] - ch[1];
        else if constexpr (TYPE == MU_T_Q5_K) v = hsum8(ch) + ch[8];
        else v = hsum8(ch);
        if (logits) v = logit_post(v, lscale, cap);
        y[(size_t)lane * rows + row] = v;
    }
    __syncwarp();
}

template <int TYPE, int U> /* U: passes of four super-blocks loaded at once */
__global__ void __launch_bounds__(DEC_WARPS * 32)
k_mm_dec2(dec_grp G, int nb, const uint8_t *act, size_t act_stride, int T, int n_batch, bool logits, float lscale,
          float cap) {
    typedef typename qt<TYPE>::W W;
    constexpr int CH = 4 * U;
    /* dynamic shared memory: the activation rows [T][nb] (staged once for
     * the block's rows), then per warp [T][CH][DEC_NI] integers, [T][CH][2]
     * factors and [T * 9] chain results */
    extern __shared__ int s_dyn[];
    mu_block_q8_K *s_act = (mu_block_q8_K *)s_dyn;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q = lane >> 3, g = lane & 7;
    int *s_i = s_dyn + T * nb * (int)(sizeof(mu_block_q8_K) / 4) + warp * T * CH * (DEC_NI + 2);
    float *s_f = (float *)(s_i + T * CH * DEC_NI);
    float *s_acc = (float *)(s_dyn + T * nb * (int)(sizeof(mu_block_q8_K) / 4) + DEC_WARPS * T * CH * (DEC_NI + 2)) +
                   warp * T * 9;
    {
        const int per = nb * (int)(sizeof(mu_block_q8_K) / 4);
        for (int i = threadIdx.x; i < T * per; i += DEC_WARPS * 32) {
            const int t = i / per, k = i % per;
            cp4(s_dyn + i, act + (size_t)t * act_stride + 4 * (size_t)k, true);
        }
        cp_commit();
    }
    int gi = 0;
    while (gi < G.n - 1 && (int)blockIdx.x >= G.end[gi]) gi++;
    const int rows = G.rows[gi], row = ((int)blockIdx.x - (gi ? G.end[gi - 1] : 0)) * DEC_WARPS + warp;
    const bool live = row < rows; /* no early return: the block shares the staged rows */
    const W *xr = (const W *)(G.w[gi] + (size_t)(live ? row : 0) * G.w_rb[gi]);
    float acc[2] = {0, 0};
    for (int c0 = 0; c0 < nb; c0 += CH) {
        dec_words<TYPE> wv[U];
#pragma unroll
        for (int p = 0; p < U; p++) {
            const int b = c0 + 4 * p + q;
            if (live && b < nb) dec_load<TYPE>(xr + b, g, &wv[p]);
        }
        if (c0 == 0) {
            cp_wait<0>();
            __syncthreads();
        }
#pragma unroll
        for (int p = 0; p < U; p++) {
            const int e = 4 * p + q, b = c0 + e;
            const bool have = live && b < nb;
#pragma unroll
            for (int t = 0; t < DEC_MAX_T; t++) {
                if (t >= T) break;
                dec_sums<TYPE>(wv[p], xr + (have ? b : 0), s_act + t * nb + (have ? b : 0), g, t < n_batch, have,
                               s_i + (t * CH + e) * DEC_NI, s_f + (t * CH + e) * 2);
            }
        }
        __syncwarp();
        dec_fold<TYPE>(acc, lane, T, n_batch, nb - c0 < CH ? nb - c0 : CH, CH, s_i, s_f);
        __syncwarp();
    }
    dec_out<TYPE>(acc, lane, T, s_acc, live, G.y[gi], rows, row, logits, lscale, cap);
}

/* ---- Q4_K matmul for few tokens (decode), weights through a ring --------
 * The same integer sums and float chains as k_mm_dec2, with far fewer
 * instructions a byte: a warp takes eight rows at once, lane (r, j) =
 * (lane / 4, lane % 4) computes group j (64 elements) of row r's block,
 * the four lanes of a row add their integers by shuffles and each then
 * takes the row's chain step itself (registers: no shared scratch, no
 * idle lanes). The rows' bytes stream through a ring of S chunks of
 * two super-blocks of the eight rows in shared memory (cp.async, whole
 * 16-byte words: a Q4_K row is 144 bytes a block), S - 1 chunks in
 * flight. The first chunks are requested before the kernel waits for the
 * one before it (programmatic dependent launch: weights do not depend on
 * it); the activation rows are staged by the thread block after that
 * wait, in windows of super-blocks (below), by 4-byte cp.async copies (a
 * Q8_K block is 292 bytes: no wider alignment), a window's all in flight
 * at once, split so that each group's 64 bytes are one aligned read. With
 * 2-8 tokens the integers come from the int8 tensor cores
 * (q4_mma_wa). */

#define Q4D_SLOT (8 * 2 * 144)    /* a chunk: 8 rows x 2 super-blocks */
#define Q4D_PIECES (Q4D_SLOT / 16) /* 16-byte copies a chunk: 144, 18 a row */

/* The activation rows of a ring launch are staged in windows of ws
 * super-blocks (all nb in one when they fit: ws >= nb), window w in
 * buffer w & 1: the launch keeps the shared memory of two windows, so
 * several tokens' long rows (FFN down) leave room for a second thread
 * block an SM. A window w >= 1 starts with a barrier (every warp is done
 * with window w - 1), after which the block stages window w + 1 into w -
 * 1's buffer; its copies join the next ring group, complete S chunks
 * later, so ws >= 2 S (a window takes ws / 2 chunks). */
__host__ __device__ __forceinline__ int win_n(int nb, int ws) { return (nb + ws - 1) / ws; }

/* bytes of one Q4_K window buffer: T tokens' ws blocks split into bytes
 * (rows q4d_tsw words apart), bsums and d */
__host__ __device__ __forceinline__ int q4d_tsw(int ws) { return ws * 64 + 8; }
__host__ __device__ __forceinline__ size_t q4d_wbytes(int T, int ws) {
    return ((size_t)T * (q4d_tsw(ws) * 4 + ws * 36) + 15) & ~(size_t)15; /* the second buffer 16-byte aligned */
}

/* Shared memory of a launch of nw warps with rings of S chunks and
 * windows of ws blocks (the depth, the warps, the window: ring_shape) */
static size_t q4d_smem(int T, int nb, int nw, int S, int ws) {
    return (size_t)nw * S * Q4D_SLOT + (ws >= nb ? 1 : 2) * q4d_wbytes(T, ws < nb ? ws : nb);
}

/* A Q4_K ring chunk's copies (8 rows x 2 blocks, 18 16-byte words a row):
 * the lane's pieces p = lane + 32 k are row p / 18's word p % 18; my is
 * the lane's row (lane 4 r holds row r's), dst -1: no piece. */
typedef struct {
    const uint8_t *src[5];
    int dst[5];
} q4d_copies;
__device__ __forceinline__ void q4d_copies_init(q4d_copies *c, const uint8_t *my, int lane) {
#pragma unroll
    for (int k = 0; k < 5; k++) {
        const int p = lane + 32 * k, pr = p / 18 < 8 ? p / 18 : 7, w = p % 18;
        const uint8_t *rb = (const uint8_t *)__shfl_sync(0xffffffffu, (unsigned long long)my, 4 * pr);
        c->src[k] = rb + 16 * w;
        c->dst[k] = p < Q4D_PIECES ? pr * 288 + 16 * w : -1;
    }
}
/* chunk i (blocks 2i, 2i + 1 of rows of nb blocks) into the ring slot at d */
__device__ __forceinline__ void q4d_copy(const q4d_copies &c, uint8_t *d, int i, int nb, int lane) {
    const bool odd = 2 * i + 1 == nb; /* one block left: its second word group is past the row */
#pragma unroll
    for (int k = 0; k < 5; k++) {
        const int w = (lane + 32 * k) % 18;
        if (c.dst[k] >= 0 && !(odd && w >= 9)) cp16(d + c.dst[k], c.src[k] + (size_t)i * 288);
    }
}

/* Q4_K, four lanes a super-block: lane j's weights of one block in the
 * ring at xb, read and decoded once for every token: its 32 bytes of qs
 * (group j: the low nibbles are sub-block 2j, the high ones 2j + 1), the
 * 6-bit scales and mins of sub-blocks 2j, 2j + 1 as byte pairs
 * (scale_min_k4) and the block's d and dmin (halves). */
typedef struct {
    int4 q0, q1;
    int sc, mn;
    unsigned dd;
} q4_words;
__device__ __forceinline__ void q4_load(const uint8_t *xb, int j, q4_words *w) {
    const int4 h = *(const int4 *)xb; /* d, dmin | scales 0-3 | 4-7 | 8-11 */
    w->q0 = *(const int4 *)(xb + 16 + 32 * j);
    w->q1 = *(const int4 *)(xb + 32 + 32 * j);
    /* both forms, then a select: lanes j < 2 and j >= 2 of a warp would
     * otherwise take the two branches one after the other */
    const int sh = 16 * (j & 1), y = h.y >> sh, z = h.z >> sh, c = h.w >> sh;
    const int hi = -(j >> 1); /* all ones for j >= 2 */
    w->sc = (y & 0x3F3F & ~hi) | (((c & 0x0F0F) | ((y & 0xC0C0) >> 2)) & hi);
    w->mn = (z & 0x3F3F & ~hi) | ((((c >> 4) & 0x0F0F) | ((z & 0xC0C0) >> 2)) & hi);
    w->dd = (unsigned)h.x;
}

/* Starts copying cnt Q8_K blocks of one token (sa: 73 words a block: d,
 * 64 of qs, 8 of bsums) into shared tiles: the qs to bq (64 words a
 * block), the bsums to bs (8), d to bd (1); a warp a block at a time, so
 * no thread divides by 73. No commit. */
__device__ __forceinline__ void q8K_stage_row(int *bq, int *bs, int *bd, const int *sa, int cnt) {
    constexpr int PER = (int)(sizeof(mu_block_q8_K) / 4);
    const int lane = threadIdx.x % 32, nw = blockDim.x / 32;
    for (int bl = threadIdx.x / 32; bl < cnt; bl += nw) {
        const int *src = sa + bl * PER;
        cp4(bq + bl * 64 + lane, src + 1 + lane, true);
        cp4(bq + bl * 64 + 32 + lane, src + 33 + lane, true);
        if (lane < 8) cp4(bs + bl * 8 + lane, src + 65 + lane, true);
        else if (lane == 8) cp4(bd + bl, src, true);
    }
}

/* Lane j's group j of that block against the activation's bytes aq
 * (16-byte aligned) and bsums bs of one token: the scale-weighted sum and
 * the min part, exact. */
__device__ __forceinline__ void q4_group(const q4_words &w, const int8_t *aq, const int16_t *bs, int j, int *isum,
                                         int *imin) {
    const int4 a0 = *(const int4 *)(aq + 64 * j), a1 = *(const int4 *)(aq + 64 * j + 16);
    const int4 a2 = *(const int4 *)(aq + 64 * j + 32), a3 = *(const int4 *)(aq + 64 * j + 48);
    const int4 q0 = w.q0, q1 = w.q1;
    const int M = 0x0F0F0F0F;
    int s0 = __dp4a(q0.x & M, a0.x, 0), s1 = __dp4a((q0.x >> 4) & M, a2.x, 0);
    s0 = __dp4a(q0.y & M, a0.y, s0);
    s1 = __dp4a((q0.y >> 4) & M, a2.y, s1);
    s0 = __dp4a(q0.z & M, a0.z, s0);
    s1 = __dp4a((q0.z >> 4) & M, a2.z, s1);
    s0 = __dp4a(q0.w & M, a0.w, s0);
    s1 = __dp4a((q0.w >> 4) & M, a2.w, s1);
    s0 = __dp4a(q1.x & M, a1.x, s0);
    s1 = __dp4a((q1.x >> 4) & M, a3.x, s1);
    s0 = __dp4a(q1.y & M, a1.y, s0);
    s1 = __dp4a((q1.y >> 4) & M, a3.y, s1);
    s0 = __dp4a(q1.z & M, a1.z, s0);
    s1 = __dp4a((q1.z >> 4) & M, a3.z, s1);
    s0 = __dp4a(q1.w & M, a1.w, s0);
    s1 = __dp4a((q1.w >> 4) & M, a3.w, s1);
    const int2 b = *(const int2 *)(bs + 4 * j);
    const int b01 = (int)(int16_t)b.x + (b.x >> 16), b23 = (int)(int16_t)b.y + (b.y >> 16);
    *isum = (w.sc & 0xFF) * s0 + (w.sc >> 8) * s1;
    *imin = (w.mn & 0xFF) * b01 + (w.mn >> 8) * b23;
}

/* One super-block of the warp's eight rows (slot: the ring's chunk, block
 * e) on the int8 tensor cores, for up to eight tokens: the same integers
 * and chain steps as q4_group's lanes. Per sub-block pair jj (sub-blocks
 * 2jj, 2jj + 1: the low and the high nibbles of the same 32 bytes) one
 * mma.m16n8k32 a product: A = the warp's row g in rows g (low nibbles)
 * and g + 8 (high), B1 and B2 = the tokens' activations of sub-block 2jj,
 * resp. 2jj + 1 (column n: token n; zero past T). Lane q's k slots
 * 4q..4q+3 and 16+4q..16+4q+3 hold the sub-block's bytes 8q..8q+3 and
 * 8q+4..8q+7 (the same permutation on both sides: an exact integer sum
 * does not depend on the order), so the weight words are one 8-byte read.
 * D1 = A B1 holds row g's low sums (tokens 2q, 2q + 1) in regs 0, 1, D2 =
 * A B2 its high sums in regs 2, 3 (the other halves pair low with high:
 * unused); the min parts likewise with A = the sub-blocks' 6-bit mins in
 * every byte, so the product is min x the activations' sum (the CPU's min
 * x bsum pair). No register of an operand is a constant: a first form
 * with the activations as A (rows 8-15 zero) spent a fifth of its
 * instructions assembling {x, 0, y, 0} and zeroed accumulators, and lost
 * (2026-12-05: 294 against 310 tok/s at four slots). Lane (g, q) keeps row
 * g's chains of tokens 2q and 2q + 1 (c0[k], c1[k]). aq: token g's 256
 * bytes of the block (the lane's B), ad[k]: token 2q + k's d (0 past T),
 * batch[k]: that token is < n_batch (the CPU's step per 64 elements;
 * otherwise one a block). */
__device__ __forceinline__ void q4_mma_wa(const uint8_t *slot, const int8_t *aq, bool on, const float ad[2],
                                          const bool batch[2], int g, int q, float c0[2], float c1[2]) {
    const int M4 = 0x0F0F0F0F;
    const uint8_t *xg = slot + g * 288; /* row g's block */
    int Sc[2], Mn[2];
    float fd[2], fm[2];
    {
        const int4 hd = *(const int4 *)xg;
        const int sw[3] = {hd.y, hd.z, hd.w};
        k4_unpack(sw, Sc, Mn);
        const float xd = h2f((uint16_t)hd.x), xm = h2f((uint16_t)((unsigned)hd.x >> 16));
#pragma unroll
        for (int k = 0; k < 2; k++) {
            fd[k] = xd * ad[k];
            fm[k] = xm * ad[k];
        }
    }
    int is[2] = {}, im[2] = {}; /* a block's integers (past n_batch) */
#pragma unroll
    for (int jj = 0; jj < 4; jj++) {
        const int2 wq = *(const int2 *)(xg + 16 + 32 * jj + 8 * q);
        const int A[4] = {wq.x & M4, (wq.x >> 4) & M4, wq.y & M4, (wq.y >> 4) & M4};
        int2 blo = make_int2(0, 0), bhi = blo;
        if (on) {
            blo = *(const int2 *)(aq + 64 * jj + 8 * q);
            bhi = *(const int2 *)(aq + 64 * jj + 32 + 8 * q);
        }
        const int B1[2] = {blo.x, blo.y}, B2[2] = {bhi.x, bhi.y};
        const int wi = jj >> 1, k0 = 2 * (jj & 1), k1 = k0 + 1; /* bytes of sub-blocks 2jj, 2jj + 1 */
        const int mlo = byte_bcast(Mn[wi], k0), mhi = byte_bcast(Mn[wi], k1);
        const int Am[4] = {mlo, mhi, mlo, mhi};
        int D1[4], D2[4], Dm1[4], Dm2[4];
        mma_s8_c(D1, A, B1, 0);
        mma_s8_c(D2, A, B2, 0);
        mma_s8_c(Dm1, Am, B1, MAGIC_I); /* the pair's min part (< 2^22: a float by magic_x) */
        mma_s8_c(Dm2, Am, B2, 0);
        const int slo = (Sc[wi] >> (8 * k0)) & 0xFF, shi = (Sc[wi] >> (8 * k1)) & 0xFF;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int isum = slo * D1[k] + shi * D2[2 + k], sm = Dm1[k] + Dm2[2 + k];
            if (batch[k]) {
                c0[k] = fmaf((float)isum, fd[k], c0[k]);
                c1[k] = fmaf(magic_x(sm), fm[k], c1[k]);
            } else {
                is[k] += isum;
                im[k] += sm - MAGIC_I;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < 2; k++)
        if (!batch[k]) {
            c0[k] = fmaf((float)is[k], fd[k], c0[k]);
            c1[k] = fmaf((float)im[k], fm[k], c1[k]);
        }
}

/* matrix gi and its row of row u of a grouped launch (u < the rows) */
__device__ __forceinline__ int grp_row(const dec_grp &G, int u, int *gi) {
    int g = 0;
    while (g < G.n - 1 && u >= G.end[g]) g++;
    *gi = g;
    return u - (g ? G.end[g - 1] : 0);
}

/* MMA: the integers of 2-8 tokens on the int8 tensor cores (q4_mma_wa);
 * else dp4a, T <= DEC_MAX_T. */
template <bool LOGITS, int S, bool MMA> /* S: chunks in a warp's ring */
__global__ void __launch_bounds__(256)
k_mm_q4K_dec(dec_grp G, int nb, int ws, const uint8_t *act, size_t act_stride, int T, int n_batch, float lscale,
             float cap) {
    /* dynamic shared memory: the warps' rings [warps][S][8 rows][2
     * blocks][144], then one or two window buffers (win_n), each the
     * activation rows' ws blocks split: [T][q4d_tsw words] of bytes (256 a
     * block), [T][ws][16] bsums, [T][ws] d */
    extern __shared__ int4 s_dyn4[];
    uint8_t *base = (uint8_t *)s_dyn4;
    const int nw = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 2, j = lane & 3;
    if (ws > nb) ws = nb;
    const int tsw = q4d_tsw(ws), nwin = win_n(nb, ws);
    uint8_t *ring = base + warp * S * Q4D_SLOT;
    int *s_win = (int *)(base + nw * S * Q4D_SLOT);
    const int wwords = (int)(q4d_wbytes(T, ws) / 4);
    const int R = G.end[G.n - 1];
    /* this lane's row (rows past the end: the last one, results unused) */
    const int u = (blockIdx.x * nw + warp) * 8 + r;
    int gi;
    const int row = grp_row(G, u < R ? u : R - 1, &gi);
    const uint8_t *my = G.w[gi] + (size_t)row * G.w_rb[gi];
    q4d_copies cps; /* the copies this lane makes of a chunk */
    q4d_copies_init(&cps, my, lane);
    const int nch = (nb + 1) / 2;
    auto issue = [&](int i) {
        if (i < nch) q4d_copy(cps, ring + (i % S) * Q4D_SLOT, i, nb, lane);
        cp_commit(); /* empty groups past the end keep the count */
    };
    /* window w's blocks by asynchronous word copies (no commit) */
    auto stage = [&](int w) {
        if (w >= nwin) return;
        int *bq = s_win + (w & 1) * wwords, *bs = bq + T * tsw, *bd = bs + T * ws * 8;
        const int b0 = w * ws, cnt = nb - b0 < ws ? nb - b0 : ws;
        for (int t = 0; t < T; t++)
            q8K_stage_row(bq + t * tsw, bs + t * ws * 8, bd + t * ws,
                          (const int *)(act + (size_t)t * act_stride + (size_t)b0 * sizeof(mu_block_q8_K)), cnt);
    };
    for (int i = 0; i < S - 1; i++) issue(i);
    pdl_wait();
    pdl_launch();
    stage(0);
    stage(1);
    cp_commit();
    cp_wait<0>(); /* and the first weight chunks, needed next anyway */
    __syncthreads();
    /* MMA: lane (g, q) = (r, j) keeps row g's chains of tokens 2q, 2q + 1
     * (c0[k], c1[k]); dp4a: lane (r, j) keeps row r's chains of every token
     * (c0[t], c1[t]) */
    float c0[DEC_MAX_T], c1[DEC_MAX_T];
#pragma unroll
    for (int t = 0; t < DEC_MAX_T; t++) c0[t] = c1[t] = 0;
    for (int i = 0, w = 0; i < nch; i++) {
        issue(i + S - 1);
        cp_wait<S - 1>(); /* chunk i's group is complete */
        if (2 * i == (w + 1) * ws) { /* window w + 1 begins */
            w++;
            __syncthreads();
            stage(w + 1);
        }
        __syncwarp();
        const int *wq = s_win + (w & 1) * wwords;
        const int8_t *s_aq = (const int8_t *)wq;
        const int16_t *s_abs = (const int16_t *)(wq + T * tsw);
        const float *s_ad = (const float *)(wq + T * tsw + T * ws * 8);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int b = 2 * i + e, bl = b - w * ws;
            if (b >= nb) break;
            if constexpr (MMA) {
                const uint8_t *slot = ring + (i % S) * Q4D_SLOT + 144 * e;
                const float ad[2] = {2 * j < T ? s_ad[2 * j * ws + bl] : 0.f, 2 * j + 1 < T ? s_ad[(2 * j + 1) * ws + bl] : 0.f};
                const bool bt[2] = {2 * j < n_batch, 2 * j + 1 < n_batch};
                q4_mma_wa(slot, s_aq + (r < T ? r : 0) * tsw * 4 + bl * 256, r < T, ad, bt, r, j, c0, c1);
                continue;
            }
            q4_words wv; /* once for every token */
            q4_load(ring + (i % S) * Q4D_SLOT + r * 288 + 144 * e, j, &wv);
            const float xd = h2f((uint16_t)wv.dd), xm = h2f((uint16_t)(wv.dd >> 16));
#pragma unroll
            for (int t = 0; t < DEC_MAX_T; t++) {
                if (t >= T) break;
                const int tb = t * ws + bl;
                int v0, v1;
                q4_group(wv, s_aq + t * tsw * 4 + bl * 256, s_abs + tb * 16, j, &v0, &v1);
                const float ad = s_ad[tb];
                const float fd = xd * ad, fm = xm * ad;
                if (t < n_batch) { /* per 64 elements: the chain steps of groups 0..3 */
#pragma unroll
                    for (int jj = 0; jj < 4; jj++) {
                        c0[t] = fmaf((float)__shfl_sync(0xffffffffu, v0, (lane & ~3) + jj), fd, c0[t]);
                        c1[t] = fmaf((float)__shfl_sync(0xffffffffu, v1, (lane & ~3) + jj), fm, c1[t]);
                    }
                } else {
                    v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
                    v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
                    v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
                    v1 += __shfl_xor_sync(0xffffffffu, v1, 2);
                    c0[t] = fmaf((float)v0, fd, c0[t]);
                    c1[t] = fmaf((float)v1, fm, c1[t]);
                }
            }
        }
        __syncwarp(); /* the ring slot is free again */
    }
    cp_wait<0>();
    /* MMA: lane (g, q) = (r, j) writes row g's tokens 2q, 2q + 1; dp4a: lane
     * j of the row writes token j (every lane of a row holds its chains) */
    if (u >= R) return;
    int gr = gi, rw = row;
    if constexpr (MMA) rw = grp_row(G, u, &gr); /* found again: keeping gi and row live took 16 more registers */
#pragma unroll
    for (int k = 0; k < (MMA ? 2 : 1); k++) {
        const int t = MMA ? 2 * j + k : j;
        if (t >= T) continue;
        float v = 0;
        if constexpr (MMA) v = c0[k] - c1[k];
        else
#pragma unroll
            for (int tt = 0; tt < DEC_MAX_T; tt++)
                if (tt == t) v = c0[tt] - c1[tt];
        if (LOGITS) v = logit_post(v, lscale, cap);
        G.y[gr][(size_t)t * G.rows[gr] + rw] = v;
    }
}

/* ---- Q4_K, one token, rows split over the warps ----------------------------
 * k_mm_q4K_dec gives a launch of few rows (q, k, gate and v; wo; FFN down:
 * 104-136 thread blocks, one an SM) eight warps an SM waiting on their
 * rings: those matmuls read their 48 MB a layer at about 1.2 TB/s, and
 * FFN gate and up (624 blocks, two an SM) end in a wave a third full
 * (bench/results/cuda-l2pf-2026-12-05). Here KS warps share eight rows:
 * warp ks of a row group takes the rows' chunks ks, ks + KS, ... through
 * its own ring and leaves each super-block's integers (the four lanes'
 * sums added, exact) and chain factors in shared memory; then one thread a
 * row takes the CPU's chain over the super-blocks in order, the steps
 * k_mm_q4K_dec takes for a token past n_batch (one a block), so every
 * output is the same. The block: RG row groups x KS warps (RG * KS = 8),
 * rings of D1_S chunks, the token's whole activation row, and [RG][8
 * rows][nb] x 4 words of integers and factors. Every one-token Q4_K
 * launch takes it (d1_split). KS = 2 (32 rows a block) measured best on
 * the few-row launches: 105.7 tok/s at depth 512 on an H100 against 101.0
 * with KS = 4 and 101.3 with 8 (with k_post_add_w; 102.5 with
 * k_mm_q4K_dec); FFN gate and up too: 112.7 against 110.8. */
#define D1_S 4
static size_t q4d1_smem(int nb, int rg) {
    return (size_t)8 * D1_S * Q4D_SLOT + q4d_wbytes(1, nb) + (size_t)rg * 8 * nb * 16;
}
template <bool LOGITS>
__global__ void __launch_bounds__(256, 2)
k_mm_q4K_d1(dec_grp G, int nb, int KS, const uint8_t *act, float lscale, float cap) {
    extern __shared__ int4 s_dyn4[];
    uint8_t *base = (uint8_t *)s_dyn4;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 2, j = lane & 3;
    const int RG = 8 / KS, rg = warp / KS, ks = warp % KS;
    uint8_t *ring = base + warp * D1_S * Q4D_SLOT;
    int *s_win = (int *)(base + 8 * D1_S * Q4D_SLOT);
    const int tsw = q4d_tsw(nb);
    const int8_t *s_aq = (const int8_t *)s_win;
    const int16_t *s_abs = (const int16_t *)(s_win + tsw);
    const float *s_ad = (const float *)(s_win + tsw + nb * 8);
    int4 *s_sum = (int4 *)(base + 8 * D1_S * Q4D_SLOT + q4d_wbytes(1, nb)); /* [RG][8][nb]: isum, imin, fd, fm */
    const int R = G.end[G.n - 1];
    const int u = (blockIdx.x * RG + rg) * 8 + r;
    int gi;
    const int row = grp_row(G, u < R ? u : R - 1, &gi);
    const uint8_t *my = G.w[gi] + (size_t)row * G.w_rb[gi];
    q4d_copies cps;
    q4d_copies_init(&cps, my, lane);
    const int nch = (nb + 1) / 2;
    auto issue = [&](int k) { /* the warp's k-th chunk: chunk ks + k KS of the rows */
        const int i = ks + k * KS;
        if (i < nch) q4d_copy(cps, ring + (k % D1_S) * Q4D_SLOT, i, nb, lane);
        cp_commit();
    };
    for (int k = 0; k < D1_S - 1; k++) issue(k);
    pdl_wait();
    pdl_launch();
    q8K_stage_row(s_win, s_win + tsw, s_win + tsw + nb * 8, (const int *)act, nb);
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    int4 *mine = s_sum + ((size_t)rg * 8 + r) * nb;
    for (int k = 0; ks + k * KS < nch; k++) {
        issue(k + D1_S - 1);
        cp_wait<D1_S - 1>();
        __syncwarp();
        const int i = ks + k * KS;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int b = 2 * i + e;
            if (b >= nb) break;
            q4_words wv;
            q4_load(ring + (k % D1_S) * Q4D_SLOT + r * 288 + 144 * e, j, &wv);
            int v0, v1;
            q4_group(wv, s_aq + b * 256, s_abs + b * 16, j, &v0, &v1);
            v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
            v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
            v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
            v1 += __shfl_xor_sync(0xffffffffu, v1, 2);
            if (j == 0) {
                const float ad = s_ad[b];
                const float fd = h2f((uint16_t)wv.dd) * ad, fm = h2f((uint16_t)(wv.dd >> 16)) * ad;
                mine[b] = make_int4(v0, v1, __float_as_int(fd), __float_as_int(fm));
            }
        }
        __syncwarp();
    }
    cp_wait<0>();
    __syncthreads();
    /* the chains: thread t < RG * 8 takes row t of the block */
    if ((int)threadIdx.x >= RG * 8) return;
    const int ur = blockIdx.x * RG * 8 + threadIdx.x;
    if (ur >= R) return;
    const int4 *sr = s_sum + (size_t)threadIdx.x * nb;
    float c0 = 0, c1 = 0;
    for (int b = 0; b < nb; b++) {
        const int4 v = sr[b];
        c0 = fmaf((float)v.x, __int_as_float(v.z), c0);
        c1 = fmaf((float)v.y, __int_as_float(v.w), c1);
    }
    float v = c0 - c1;
    if (LOGITS) v = logit_post(v, lscale, cap);
    int gr;
    const int rw = grp_row(G, ur, &gr);
    G.y[gr][rw] = v;
}

/* ---- Q6_K matmul for few tokens (decode), weights through a ring --------
 * As k_mm_q4K_dec, for Q6_K's eight lane sums: a warp takes four rows, lane
 * (r, m) = (lane / 8, lane % 8) computes the CPU's lane sum m of row r's
 * block (dec_q6_K) and folds it into its own chain m, so no lane waits
 * for another until the row's end (hsum8 of the eight chains). A Q6_K
 * block is 212 bytes: a row's two blocks of a chunk are copied as the
 * 16-byte words around them (at most 28) and read at their offset. */

#define Q6D_ROW 448                   /* ring bytes a row of a chunk: 2 blocks, 16-byte words */
#define Q6D_SLOT (4 * Q6D_ROW)

static size_t q6d_smem(int T, int nb, int nw, int S, int ws) { /* nw warps of S chunks, windows of ws blocks */
    return (size_t)nw * S * Q6D_SLOT + (ws >= nb ? 1 : 2) * (size_t)T * (ws < nb ? ws : nb) * sizeof(mu_block_q8_K);
}

/* A Q6_K ring chunk's copies: rb[k], the row of the lane's piece p = lane
 * + 32 k (row p / 28's word p % 28, p < 112); my is the lane's row (lane 8
 * r holds row r's). */
__device__ __forceinline__ void q6d_rows(const uint8_t *rb[4], const uint8_t *my, int lane) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int pr = (lane + 32 * k) / 28 < 4 ? (lane + 32 * k) / 28 : 3;
        rb[k] = (const uint8_t *)__shfl_sync(0xffffffffu, (unsigned long long)my, 8 * pr);
    }
}
/* chunk i (blocks 2i, 2i + 1 of rows of nb blocks) into the ring slot at
 * d: the 16-byte words around the blocks, each row at Q6D_ROW */
__device__ __forceinline__ void q6d_copy(const uint8_t *const rb[4], uint8_t *d, int i, int nb, int lane) {
    const int len = (2 * i + 1 < nb ? 2 : 1) * 212;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int p = lane + 32 * k, w = p % 28;
        if (p >= 112) break;
        const uint8_t *s = rb[k] + (size_t)i * 424;
        const uint8_t *a0 = (const uint8_t *)((uintptr_t)s & ~(uintptr_t)15);
        if (a0 + 16 * w < s + len) cp16(d + (p / 28) * Q6D_ROW + 16 * w, a0 + 16 * w);
    }
}

template <bool LOGITS, int S> /* S: chunks in a warp's ring */
__global__ void __launch_bounds__(256)
k_mm_q6K_dec(dec_grp G, int nb, int ws, const uint8_t *act, size_t act_stride, int T, float lscale, float cap) {
    /* dynamic shared memory: the warps' rings [warps][S][4 rows][448],
     * then one or two window buffers (as k_mm_q4K_dec's) of the
     * activation rows' blocks [T][ws] */
    extern __shared__ int4 s_dyn4[];
    uint8_t *base = (uint8_t *)s_dyn4;
    const int nw = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 3, m = lane & 7;
    if (ws > nb) ws = nb;
    const int nwin = win_n(nb, ws);
    uint8_t *ring = base + warp * S * Q6D_SLOT;
    mu_block_q8_K *s_win = (mu_block_q8_K *)(base + nw * S * Q6D_SLOT);
    const int R = G.end[G.n - 1];
    const int u = (blockIdx.x * nw + warp) * 4 + r, uu = u < R ? u : R - 1;
    int gi = 0;
    while (gi < G.n - 1 && uu >= G.end[gi]) gi++;
    const int row = uu - (gi ? G.end[gi - 1] : 0);
    const uint8_t *my = G.w[gi] + (size_t)row * G.w_rb[gi];
    const uint8_t *rb[4]; /* the rows of the pieces this lane copies */
    q6d_rows(rb, my, lane);
    const int nch = (nb + 1) / 2;
    auto issue = [&](int i) {
        if (i < nch) q6d_copy(rb, ring + (i % S) * Q6D_SLOT, i, nb, lane);
        cp_commit(); /* empty groups past the end keep the count */
    };
    /* window w's blocks by asynchronous word copies (no commit) */
    auto stage = [&](int w) {
        if (w >= nwin) return;
        const int b0 = w * ws, per = (nb - b0 < ws ? nb - b0 : ws) * (int)(sizeof(mu_block_q8_K) / 4);
        int *d = (int *)(s_win + (w & 1) * T * ws);
        for (int t = 0; t < T; t++) {
            const int *sa = (const int *)((const mu_block_q8_K *)(act + (size_t)t * act_stride) + b0);
            for (int i = threadIdx.x; i < per; i += blockDim.x) cp4(d + t * ws * 73 + i, sa + i, true);
        }
    };
    for (int i = 0; i < S - 1; i++) issue(i);
    pdl_wait();
    pdl_launch();
    stage(0);
    stage(1);
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    float c[DEC_MAX_T]; /* chain m of the row, per token */
#pragma unroll
    for (int t = 0; t < DEC_MAX_T; t++) c[t] = 0;
    for (int i = 0, w = 0; i < nch; i++) {
        issue(i + S - 1);
        cp_wait<S - 1>(); /* chunk i's group is complete */
        if (2 * i == (w + 1) * ws) { /* window w + 1 begins (k_mm_q4K_dec) */
            w++;
            __syncthreads();
            stage(w + 1);
        }
        __syncwarp();
        const mu_block_q8_K *s_act = s_win + (w & 1) * T * ws; /* [T][ws]: block b of token t at t * ws + b - w ws */
        const uint8_t *cs = ring + (i % S) * Q6D_SLOT + r * Q6D_ROW + (((uintptr_t)my + (size_t)i * 424) & 15);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int b = 2 * i + e;
            if (b >= nb) break;
            const dq6_K *x = (const dq6_K *)(cs + 212 * e);
            dec_words<MU_T_Q6_K> wv;
            dec_load<MU_T_Q6_K, true>(x, m, &wv);
            const float dx = h2f(x->d);
#pragma unroll
            for (int t = 0; t < DEC_MAX_T; t++) {
                if (t >= T) break;
                const mu_block_q8_K *ab = s_act + t * ws + b - w * ws;
                c[t] = fmaf(ab->d * dx, (float)dec_q6_K(wv, x, ab, m), c[t]);
            }
        }
        __syncwarp(); /* the ring slot is free again */
    }
    cp_wait<0>();
#pragma unroll
    for (int t = 0; t < DEC_MAX_T; t++) {
        if (t >= T) break;
        float ch[8];
#pragma unroll
        for (int k = 0; k < 8; k++) ch[k] = __shfl_sync(0xffffffffu, c[t], (lane & ~7) + k);
        if (u < R && m == t) {
            float v = hsum8(ch);
            if (LOGITS) v = logit_post(v, lscale, cap);
            G.y[gi][(size_t)t * G.rows[gi] + row] = v;
        }
    }
}

/* Q6_K, one token, rows split over the warps: k_mm_q4K_d1's scheme for the
 * launches of fewer rows than a wave of k_mm_q6K_dec has warps (v: 256
 * rows, eight thread blocks). KS warps share four rows; each super-block
 * leaves the eight lane sums of a row (dec_q6_K, exact) and its factor in
 * shared memory, then lane (r, m) of a row group's first warp takes chain
 * m of row r in order and the row's hsum8, as k_mm_q6K_dec's lanes do. */
static size_t q6d1_smem(int nb, int rg) {
    return (size_t)8 * D1_S * Q6D_SLOT + (size_t)nb * sizeof(mu_block_q8_K) + (size_t)rg * 4 * nb * 36;
}
template <bool LOGITS>
__global__ void __launch_bounds__(256)
k_mm_q6K_d1(dec_grp G, int nb, int KS, const uint8_t *act, float lscale, float cap) {
    extern __shared__ int4 s_dyn4[];
    uint8_t *base = (uint8_t *)s_dyn4;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 3, m = lane & 7;
    const int RG = 8 / KS, rg = warp / KS, ks = warp % KS;
    uint8_t *ring = base + warp * D1_S * Q6D_SLOT;
    mu_block_q8_K *s_act = (mu_block_q8_K *)(base + 8 * D1_S * Q6D_SLOT);
    int *s_sum = (int *)((uint8_t *)s_act + (size_t)nb * sizeof(mu_block_q8_K)); /* [RG][4][nb][9]: lane sums, factor */
    const int R = G.end[G.n - 1];
    const int u = (blockIdx.x * RG + rg) * 4 + r;
    int gi;
    const int row = grp_row(G, u < R ? u : R - 1, &gi);
    const uint8_t *my = G.w[gi] + (size_t)row * G.w_rb[gi];
    const uint8_t *rb[4];
    q6d_rows(rb, my, lane);
    const int nch = (nb + 1) / 2;
    auto issue = [&](int k) { /* the warp's k-th chunk: chunk ks + k KS of the rows */
        const int i = ks + k * KS;
        if (i < nch) q6d_copy(rb, ring + (k % D1_S) * Q6D_SLOT, i, nb, lane);
        cp_commit();
    };
    for (int k = 0; k < D1_S - 1; k++) issue(k);
    pdl_wait();
    pdl_launch();
    {
        const int per = nb * (int)(sizeof(mu_block_q8_K) / 4);
        for (int i = threadIdx.x; i < per; i += blockDim.x) cp4((int *)s_act + i, (const int *)act + i, true);
    }
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    int *mine = s_sum + ((size_t)rg * 4 + r) * nb * 9;
    for (int k = 0; ks + k * KS < nch; k++) {
        issue(k + D1_S - 1);
        cp_wait<D1_S - 1>();
        __syncwarp();
        const int i = ks + k * KS;
        const uint8_t *cs = ring + (k % D1_S) * Q6D_SLOT + r * Q6D_ROW + (((uintptr_t)my + (size_t)i * 424) & 15);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int b = 2 * i + e;
            if (b >= nb) break;
            const dq6_K *x = (const dq6_K *)(cs + 212 * e);
            dec_words<MU_T_Q6_K> wv;
            dec_load<MU_T_Q6_K, true>(x, m, &wv);
            mine[b * 9 + m] = dec_q6_K(wv, x, s_act + b, m);
            if (m == 0) mine[b * 9 + 8] = __float_as_int(s_act[b].d * h2f(x->d));
        }
        __syncwarp();
    }
    cp_wait<0>();
    __syncthreads();
    if (ks) return;
    float c = 0; /* chain m of row r */
    for (int b = 0; b < nb; b++) c = fmaf(__int_as_float(mine[b * 9 + 8]), (float)mine[b * 9 + m], c);
    float ch[8];
#pragma unroll
    for (int k = 0; k < 8; k++) ch[k] = __shfl_sync(0xffffffffu, c, (lane & ~7) + k);
    if (u < R && m == 0) {
        float v = hsum8(ch);
        if (LOGITS) v = logit_post(v, lscale, cap);
        G.y[gi][row] = v;
    }
}

/* ---- Q8_0 and NVFP4 matmul for few tokens (decode), weights through a ring
 * Both have 36-byte blocks (Q8_0 padded at upload) and the CPU's eight
 * lane chains a row (kern_ref.c: lane l sums bytes, resp. elements, 4l ..
 * 4l + 3 of every 32 and folds them with fmaf; hsum8 at the end). A warp
 * takes eight rows; lane (r, k) = (lane / 4, lane % 4) keeps two of row
 * r's chains by itself: Q8_0 chains k and k + 4 (qs words k and k + 4 of
 * a block), NVFP4 chains c and c + 2 with c = (k & 1) + 4 (k >> 1) (the
 * low and the high halves of code word k of the first half and word 4 + k
 * of the second, in the device layout; both take the scales d[k >> 1] and
 * d[2 + (k >> 1)]). A block's weight words and scales are read and decoded
 * once for every token. Each four-product sum comes from dp4a started at
 * MAGIC_I (|s| < 2^22; one float subtraction gives (float)s). NVFP4 takes
 * two: the positive codes' magnitudes and the negative ones' (fp4_mags,
 * one byte permute a four), the float difference of the two is the sum;
 * where an activation byte is -128, fp4_fix_neg gives x86's products.
 * The rows stream through a ring of S chunks of eight blocks a row in
 * shared memory as in k_mm_q6K_dec (a row's 288 bytes as the 16-byte
 * words around them, read at their offset); a whole chunk runs without a
 * test a block. The activation rows are staged once per thread block
 * after pdl_wait, each block's words permuted so that a lane's two are
 * one 8-byte read, its scale as a float. */

#define Q8D_E 8                   /* blocks a row in a chunk (288 bytes: 16-byte aligned as the row) */
#define Q8D_ROW 304               /* ring bytes a row of a chunk: 19 words (76 banks: the eight rows' reads spread) */
#define Q8D_SLOT (8 * Q8D_ROW)
#define Q8D_PIECES (8 * 19)       /* 16-byte copies a chunk at most */

/* weight blocks of a row of n elements (Q8_0: 32, NVFP4: 64 a block) and
 * the shared memory of a launch of nw warps */
static int q8d_nb(uint32_t type, int n) { return n / (type == MU_T_NVFP4 ? 64 : 32); }
static size_t q8d_smem(uint32_t type, int T, int nb, int nw) {
    const int nba = type == MU_T_NVFP4 ? 2 * nb : nb; /* activation blocks */
    return (size_t)nw * 4 * Q8D_SLOT + (size_t)T * nba * 36;
}

/* nvfp4_scale of byte i of w (device layout: no byte 0x7f), with rot =
 * (20 - 8 i) mod 32: the byte's seven low bits as a float's exponent and
 * mantissa fields (exponent 0: a subnormal, m 2^-129), times 2^119, exact
 * (no flush to zero in this build). */
__device__ __forceinline__ float nvfp4_scale_rot(unsigned w, int rot) {
    return __uint_as_float(__funnelshift_l(w, w, rot) & 0x07F00000u) * 0x1p119f;
}

/* where word q (0..7) of an activation block is staged: lane k's two
 * words at 2k, 2k + 1 */
template <int TYPE> __device__ __forceinline__ int q8d_perm(int q) {
    if constexpr (TYPE == MU_T_NVFP4) return (q & 4) | ((q & 1) << 1) | ((q >> 1) & 1); /* chains c, c + 2 */
    else return ((q & 3) << 1) | (q >> 2);                                              /* chains k, k + 4 */
}

/* One weight block b of the lane's row (xb: its 36 bytes in the ring) into
 * the lane's two chains of each token (k_mm_q8_dec); neg: some activation
 * byte is -128 (NVFP4's fix) */
template <int TYPE, int TM>
__device__ __forceinline__ void q8d_block(const uint8_t *xb, int b, int k, int rot0, int rot1, const int *s_aq,
                                          const float *s_ad, int nba, int T, bool neg, float *ca, float *cb) {
    constexpr bool FP4 = TYPE == MU_T_NVFP4;
    const int *x = (const int *)xb; /* word 0: d (Q8_0) or the four scales (NVFP4); 1..8: qs */
    if constexpr (!FP4) {
        const float dx = h2f((uint16_t)x[0]);
        const int wa = x[1 + k], wb = x[5 + k];
#pragma unroll
        for (int t = 0; t < TM; t++) {
            if (TM > 1 && t >= T) break;
            const int2 av = *(const int2 *)(s_aq + (t * nba + b) * 8 + 2 * k);
            const float d = dx * s_ad[t * nba + b];
            ca[t] = fmaf(d, magic_x(__dp4a(wa, av.x, MAGIC_I)), ca[t]);
            cb[t] = fmaf(d, magic_x(__dp4a(wb, av.y, MAGIC_I)), cb[t]);
        }
    } else {
        const unsigned dw = (unsigned)x[0];
        const float s0 = nvfp4_scale_rot(dw, rot0), s1 = nvfp4_scale_rot(dw, rot1);
        unsigned pl0, nl0, ph0, nh0, pl1, nl1, ph1, nh1; /* chains c (l), c + 2 (h) in halves 0, 1 */
        fp4_mags((unsigned)x[1 + k], &pl0, &nl0, &ph0, &nh0);
        fp4_mags((unsigned)x[5 + k], &pl1, &nl1, &ph1, &nh1);
#pragma unroll
        for (int t = 0; t < TM; t++) {
            if (TM > 1 && t >= T) break;
            const int *ab = s_aq + (t * nba + 2 * b) * 8 + 2 * k;
            const int2 a0 = *(const int2 *)ab, a1 = *(const int2 *)(ab + 8);
            const float2 dy = *(const float2 *)(s_ad + t * nba + 2 * b);
            /* the sums of the positive and of the negative codes' products, each from MAGIC_I */
            int yp0 = __dp4a((int)pl0, a0.x, MAGIC_I), yn0 = __dp4a((int)nl0, a0.x, MAGIC_I);
            int zp0 = __dp4a((int)ph0, a0.y, MAGIC_I), zn0 = __dp4a((int)nh0, a0.y, MAGIC_I);
            int yp1 = __dp4a((int)pl1, a1.x, MAGIC_I), yn1 = __dp4a((int)nl1, a1.x, MAGIC_I);
            int zp1 = __dp4a((int)ph1, a1.y, MAGIC_I), zn1 = __dp4a((int)nh1, a1.y, MAGIC_I);
            if (neg) {
                yn0 += fp4_fix_neg(nl0, a0.x);
                zn0 += fp4_fix_neg(nh0, a0.y);
                yn1 += fp4_fix_neg(nl1, a1.x);
                zn1 += fp4_fix_neg(nh1, a1.y);
            }
            /* both in [2^23, 2^24): their difference is the integer sum, exactly */
            const float p0 = __int_as_float(yp0) - __int_as_float(yn0), q0 = __int_as_float(zp0) - __int_as_float(zn0);
            const float p1 = __int_as_float(yp1) - __int_as_float(yn1), q1 = __int_as_float(zp1) - __int_as_float(zn1);
            const float f0 = s0 * dy.x, f1 = s1 * dy.y;
            ca[t] = fmaf(f0, p0, ca[t]);
            cb[t] = fmaf(f0, q0, cb[t]);
            ca[t] = fmaf(f1, p1, ca[t]);
            cb[t] = fmaf(f1, q1, cb[t]);
        }
    }
}

template <int TYPE, bool LOGITS, int S, int TM> /* S: chunks in a warp's ring; TM: tokens at most, 1, 4, 8 or 16 */
__global__ void __launch_bounds__(256, 2) /* two blocks an SM: what their rings leave room for */
k_mm_q8_dec(dec_grp G, int nb, const uint8_t *act, size_t act_stride, int T, float lscale, float cap) {
    constexpr bool FP4 = TYPE == MU_T_NVFP4;
    /* dynamic shared memory: the warps' rings [warps][S][8 rows][304],
     * then the activation blocks' words [T][nba][8] (permuted) and their
     * scales [T][nba] */
    extern __shared__ int4 s_dyn4[];
    uint8_t *base = (uint8_t *)s_dyn4;
    const int nw = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 2, k = lane & 3;
    const int nba = FP4 ? 2 * nb : nb;
    uint8_t *ring = base + warp * S * Q8D_SLOT;
    int *s_aq = (int *)(base + nw * S * Q8D_SLOT);
    float *s_ad = (float *)(s_aq + T * nba * 8);
    const int R = G.end[G.n - 1];
    /* this lane's row (rows past the end: the last one, results unused) */
    const int u = (blockIdx.x * nw + warp) * 8 + r, uu = u < R ? u : R - 1;
    int gi = 0;
    while (gi < G.n - 1 && uu >= G.end[gi]) gi++;
    const int row = uu - (gi ? G.end[gi - 1] : 0);
    const uint8_t *my = G.w[gi] + (size_t)row * G.w_rb[gi];
    /* the copies of chunk 0 this lane makes: piece p = lane + 32 m of the
     * chunk is row p / 19's word p % 19, counted from the 16-byte word at
     * or below the row's start (o bytes below); the word holds bytes of a
     * chunk of len bytes while 16 (p % 19) - o < len */
    const uint8_t *src[5];
    int dst[5], wo[5];
#pragma unroll
    for (int m = 0; m < 5; m++) {
        const int p = lane + 32 * m, pr = p / 19 < 8 ? p / 19 : 7, w = p % 19;
        const uint8_t *rb = (const uint8_t *)__shfl_sync(0xffffffffu, (unsigned long long)my, 4 * pr);
        const int o = (int)((uintptr_t)rb & 15);
        src[m] = rb - o + 16 * w;
        dst[m] = pr * Q8D_ROW + 16 * w;
        wo[m] = p < Q8D_PIECES ? 16 * w - o : 1 << 30;
    }
    const int nch = (nb + Q8D_E - 1) / Q8D_E;
    auto issue = [&](int i) {
        if (i < nch) {
            uint8_t *d = ring + (i % S) * Q8D_SLOT;
            const int len = 36 * (nb - Q8D_E * i < Q8D_E ? nb - Q8D_E * i : Q8D_E);
#pragma unroll
            for (int m = 0; m < 5; m++)
                if (wo[m] < len) cp16(d + dst[m], src[m] + (size_t)i * (36 * Q8D_E));
        }
        cp_commit(); /* empty groups past the end keep the count */
    };
    for (int i = 0; i < S - 1; i++) issue(i);
    pdl_wait();
    pdl_launch();
    int neg = 0; /* an activation byte of -128 (NVFP4: x86's products differ there) */
    /* the words by 4-byte cp.async copies (all in flight at once), then
     * each thread's own once more: the scales to floats, NVFP4's test */
    for (int i = threadIdx.x; i < T * nba * 9; i += blockDim.x) {
        const int tb = i / 9, q = i % 9; /* token tb / nba, block tb % nba, its word q: d, then 8 of qs */
        int *d = q == 0 ? (int *)s_ad + tb : s_aq + tb * 8 + q8d_perm<TYPE>(q - 1);
        cp4(d, (const int *)(act + (size_t)(tb / nba) * act_stride) + (size_t)(tb % nba) * 9 + q, true);
    }
    cp_commit();
    cp_wait<0>();
    for (int i = threadIdx.x; i < T * nba * 9; i += blockDim.x) {
        const int tb = i / 9, q = i % 9;
        if (q == 0) {
            s_ad[tb] = h2f((uint16_t)((const int *)s_ad)[tb]);
        } else if (FP4) {
            const unsigned z = (unsigned)s_aq[tb * 8 + q8d_perm<TYPE>(q - 1)] ^ 0x80808080u; /* a zero byte where -128 */
            if ((z - 0x01010101u) & ~z & 0x80808080u) neg = 1;
        }
    }
    neg = __syncthreads_or(neg);
    const int o_my = (int)((uintptr_t)my & 15);
    const int rot0 = 20 - 8 * (k >> 1), rot1 = (rot0 - 16) & 31; /* scales d[k >> 1], d[2 + (k >> 1)] */
    float ca[TM], cb[TM]; /* the lane's two chains, per token */
#pragma unroll
    for (int t = 0; t < TM; t++) ca[t] = cb[t] = 0;
    for (int i = 0; i < nch; i++) {
        issue(i + S - 1);
        cp_wait<S - 1>(); /* chunk i's group is complete */
        __syncwarp();
        const uint8_t *cs = ring + (i % S) * Q8D_SLOT + r * Q8D_ROW + o_my;
        const int b0 = Q8D_E * i;
        if (b0 + Q8D_E <= nb) { /* a whole chunk: no test a block, the -128 fix decided once */
            if (neg) {
#pragma unroll
                for (int e = 0; e < Q8D_E; e++) q8d_block<TYPE, TM>(cs + 36 * e, b0 + e, k, rot0, rot1, s_aq, s_ad, nba, T, true, ca, cb);
            } else {
#pragma unroll
                for (int e = 0; e < Q8D_E; e++) q8d_block<TYPE, TM>(cs + 36 * e, b0 + e, k, rot0, rot1, s_aq, s_ad, nba, T, false, ca, cb);
            }
        } else {
            for (int e = 0; e < nb - b0; e++) q8d_block<TYPE, TM>(cs + 36 * e, b0 + e, k, rot0, rot1, s_aq, s_ad, nba, T, neg, ca, cb);
        }
        __syncwarp(); /* the ring slot is free again */
    }
    cp_wait<0>();
    /* the row's eight chains in the CPU's lane order; lane k writes tokens
     * k, k + 4, ... */
    float v[(TM + 3) / 4] = {};
#pragma unroll
    for (int t = 0; t < TM; t++) {
        if (t >= T) break;
        float ch[8];
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const int sl = FP4 ? (c & 1) + 2 * (c >> 2) : c & 3;
            const bool second = FP4 ? (c & 2) != 0 : c >= 4;
            ch[c] = __shfl_sync(0xffffffffu, second ? cb[t] : ca[t], (lane & ~3) + sl);
        }
        if ((t & 3) == k) v[t >> 2] = hsum8(ch);
    }
#pragma unroll
    for (int i = 0; i < (TM + 3) / 4; i++) {
        const int t = 4 * i + k;
        if (u < R && t < T) G.y[gi][(size_t)t * G.rows[gi] + row] = LOGITS ? logit_post(v[i], lscale, cap) : v[i];
    }
}

/* ---- float matmuls ------------------------------------------------------ */

/* One warp per (row, token). F32 / F16: lane j holds the CPU's accumulator
 * lanes j and j + 32 of every 64 elements (vec_dot) or lane j < 16 of every
 * 16 (batch); the reduction tree of shuffles 16, 8, 4, 2, 1 is exactly
 * the CPU's combine-then-hsum16. */
template <int TYPE> __device__ __forceinline__ float ldw(const void *p, int i);
template <> __device__ __forceinline__ float ldw<MU_T_F32>(const void *p, int i) { return ((const float *)p)[i]; }
template <> __device__ __forceinline__ float ldw<MU_T_F16>(const void *p, int i) { return h2f(((const uint16_t *)p)[i]); }

template <int TYPE>
__device__ __forceinline__ float madd(float x, float y, float acc) {
    /* F32: FMA; F16: the product of two halves is exact, so acc + x*y */
    if constexpr (TYPE == MU_T_F32) return fmaf(x, y, acc);
    else return acc + x * y;
}

template <int TYPE>
__global__ void k_mm_f(const uint8_t *w, size_t w_rb, int rows, int n, const uint8_t *act, size_t act_stride, int T,
                       int n_batch, float *y, bool logits, float lscale, float cap) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * MM_WARPS + warp, t = blockIdx.y;
    if (row >= rows) return;
    const void *x = w + (size_t)row * w_rb, *a = act + (size_t)t * act_stride;
    float v;
    if (t < n_batch) { /* tinyBLAS: one 16-lane accumulator */
        float acc = 0;
        if (lane < 16)
            for (int i = 0; i < n; i += 16) acc = madd<TYPE>(ldw<TYPE>(x, i + lane), ldw<TYPE>(a, i + lane), acc);
        for (int o = 8; o; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        v = acc;
    } else { /* ggml_vec_dot: 4 x 16 lanes over steps of 64 */
        const int np = n & ~63;
        float a0 = 0, a1 = 0;
        for (int i = 0; i < np; i += 64) {
            a0 = madd<TYPE>(ldw<TYPE>(x, i + lane), ldw<TYPE>(a, i + lane), a0);
            a1 = madd<TYPE>(ldw<TYPE>(x, i + 32 + lane), ldw<TYPE>(a, i + 32 + lane), a1);
        }
        float c = a0 + a1; /* acc0 += acc2 (lanes < 16), acc1 += acc3 (lanes >= 16) */
        for (int o = 16; o; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
        v = c;
        if (lane == 0) {
            if constexpr (TYPE == MU_T_F16) {
                double s = v;
                for (int i = np; i < n; i++) s += (double)(ldw<TYPE>(x, i) * ldw<TYPE>(a, i));
                v = (float)s;
            } else {
                const int r = n - np;
                const int grouped = r >= 16 ? (r & ~15) + ((r & 15) >= 8 ? 8 : 0) : (r >= 8 ? 8 : 0);
                int i = np;
                for (; i < np + grouped; i++) {
                    const float p = ldw<TYPE>(x, i) * ldw<TYPE>(a, i);
                    v += p;
                }
                for (; i < n; i++) v = fmaf(ldw<TYPE>(x, i), ldw<TYPE>(a, i), v);
            }
        }
    }
    if (lane == 0) y[(size_t)t * rows + row] = logits ? logit_post(v, lscale, cap) : v;
}

/* BF16 as VDPBF16PS computes it (kern_ref.c dpbf16_pair). */
__device__ __forceinline__ float bf16_daz(uint16_t h) { return (h & 0x7f80) ? bf2f(h) : 0.f; }
__device__ __forceinline__ float f32_ftz(float v) { return fabsf(v) < 0x1p-126f ? 0.f * v : v; }
__device__ __forceinline__ float dpbf16_pair(float acc, const uint16_t *x, const uint16_t *y) {
    acc = f32_ftz(acc);
    acc = f32_ftz(fmaf(bf16_daz(x[1]), bf16_daz(y[1]), acc));
    return f32_ftz(fmaf(bf16_daz(x[0]), bf16_daz(y[0]), acc));
}

__global__ void k_mm_bf16(const uint8_t *w, size_t w_rb, int rows, int n, const uint8_t *act, size_t act_stride, int T,
                          int n_batch, float *y, bool logits, float lscale, float cap) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * MM_WARPS + warp, t = blockIdx.y;
    if (row >= rows) return;
    const uint16_t *x = (const uint16_t *)(w + (size_t)row * w_rb), *a = (const uint16_t *)(act + (size_t)t * act_stride);
    float v;
    if (t < n_batch && n % 32 == 0) { /* tinyBLAS: lane l takes pair 2l of every 32 */
        float acc = 0;
        if (lane < 16)
            for (int i = 0; i < n; i += 32) acc = dpbf16_pair(acc, x + i + 2 * lane, a + i + 2 * lane);
        for (int o = 8; o; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        v = acc;
    } else { /* ggml_vec_dot_bf16: two 16-lane accumulators; lane j takes pair 2j of every 64 */
        const int np = n & ~63;
        float acc = 0;
        for (int i = 0; i < np; i += 64) acc = dpbf16_pair(acc, x + i + 2 * lane, a + i + 2 * lane);
        for (int o = 8; o; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o, 16);
        const float c1 = __shfl_sync(0xffffffffu, acc, 16);
        v = 0;
        if (lane == 0) {
            double s = (double)acc;
            s += (double)c1;
            for (int i = np; i < n; i++) s += (double)(bf2f(x[i]) * bf2f(a[i]));
            v = (float)s;
        }
    }
    if (lane == 0) y[(size_t)t * rows + row] = logits ? logit_post(v, lscale, cap) : v;
}

/* passes loaded at once by the decode matmul of type t: 4 by default;
 * MUSER_CUDA_DEC_U=0|2|4 for every type and MUSER_CUDA_DEC_U_Q4K for Q4_K
 * alone (0: the previous design, k_mm_dec), to compare */
static int env_u(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && (*v == '0' || *v == '2' || *v == '4') && !v[1] ? *v - '0' : dflt;
}
static int dec_u(uint32_t t) {
    static int u = -1, u4 = -1;
    if (u < 0) {
        u = env_u("MUSER_CUDA_DEC_U", 4);
        u4 = env_u("MUSER_CUDA_DEC_U_Q4K", u);
    }
    return t == MU_T_Q4_K ? u4 : u;
}

/* MUSER_CUDA_NO_GROUP=1: one decode matmul launch per matrix (to compare) */
static bool dec_group_ok(void) {
    static const bool ok = cu_env_digit("MUSER_CUDA_NO_GROUP", 0) != 1;
    return ok;
}

int cu_batch_rows(const dtensor *w, int ll_rows) {
    if (ll_rows < 2) return 0;
    switch (w->type) {
    case MU_T_Q4_K: return ll_rows & ~3;
    case MU_T_F32: case MU_T_F16: case MU_T_BF16: return w->ne0 % 16 == 0 && w->ne1 % 4 == 0 ? ll_rows : 0;
    default: return 0;
    }
}

/* Dynamic shared memory k_mm_dec2 may ask for: DEC2_SMEM_MAX, or less on
 * a device that grants a block less (sm_86/89: 99 KB; the static part of
 * the kernel is none). */
static int dec2_smem_max(void) {
    static int mx = -1;
    if (mx < 0) {
        int dev = 0, optin = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) optin = 48 << 10;
        mx = optin < DEC2_SMEM_MAX ? optin : DEC2_SMEM_MAX;
    }
    return mx;
}

/* k_mm_dec2 takes w for T tokens */
static bool dec2_ok(const dtensor *w, int T) {
    return T <= DEC_MAX_T && (w->type == MU_T_Q4_K || w->type == MU_T_Q5_K || w->type == MU_T_Q6_K) &&
           dec_u(w->type) && dec2_smem(T, w->ne0 / 256, dec_u(w->type)) <= (size_t)dec2_smem_max();
}

/* n (<= DEC_GRP) matrices of one type and width in one k_mm_dec2 launch */
static void dec2_launch(cudaStream_t st, const dtensor *const *ws, int n, const void *act, size_t act_stride, int T,
                        int n_batch, float *const *ys, bool logits, float lscale, float cap) {
    dec_grp G = {};
    int end = 0;
    for (int i = 0; i < n; i++) {
        G.w[i] = (const uint8_t *)ws[i]->d;
        G.w_rb[i] = ws[i]->row_bytes;
        G.y[i] = ys[i];
        G.rows[i] = ws[i]->ne1;
        end += (ws[i]->ne1 + DEC_WARPS - 1) / DEC_WARPS;
        G.end[i] = end;
    }
    G.n = n;
    const int nb = ws[0]->ne0 / 256;
    const int u = dec_u(ws[0]->type);
    const size_t sm = dec2_smem(T, nb, u);
    const uint8_t *a = (const uint8_t *)act;
#define DEC2(TY, U)                                                                                              \
    do {                                                                                                         \
        static bool big;                                                                                         \
        if (!big) {                                                                                              \
            cudaFuncSetAttribute(k_mm_dec2<TY, U>, cudaFuncAttributeMaxDynamicSharedMemorySize, dec2_smem_max()); \
            big = true;                                                                                          \
        }                                                                                                        \
        k_mm_dec2<TY, U><<<end, DEC_WARPS * 32, sm, st>>>(G, nb, a, act_stride, T, n_batch, logits, lscale, cap); \
    } while (0)
#define DEC2U(TY)                                                                                                \
    do {                                                                                                         \
        if (u == 2) DEC2(TY, 2);                                                                                 \
        else DEC2(TY, 4);                                                                                        \
    } while (0)
    if (ws[0]->type == MU_T_Q4_K) DEC2U(MU_T_Q4_K);
    else if (ws[0]->type == MU_T_Q5_K) DEC2U(MU_T_Q5_K);
    else DEC2U(MU_T_Q6_K);
#undef DEC2U
#undef DEC2
}

/* Q4_K, Q6_K, Q8_0 and NVFP4 decode matmuls through the weight ring
 * (k_mm_q4K_dec, k_mm_q6K_dec, k_mm_q8_dec) by default, to compare:
 * MUSER_CUDA_DEC_RING=0 runs k_mm_dec2 (Q4_K, Q6_K) and k_mm_q (Q8_0,
 * NVFP4) instead, =k the ring for Q4_K and Q6_K alone, =q4 for Q4_K alone */
static bool dec_ring(uint32_t t) {
    static int mode = -1; /* 0 off, 1 on, 2 Q4_K, 3 Q4_K and Q6_K */
    if (mode < 0) {
        const char *v = getenv("MUSER_CUDA_DEC_RING");
        mode = v && !strcmp(v, "0") ? 0 : v && !strcmp(v, "q4") ? 2 : v && !strcmp(v, "k") ? 3 : 1;
    }
    switch (t) {
    case MU_T_Q4_K: return mode != 0;
    case MU_T_Q6_K: return mode == 1 || mode == 3;
    case MU_T_Q8_0: case MU_T_NVFP4: return mode == 1;
    default: return false;
    }
}

bool cu_pdl(void) {
    static int ok = -1;
    if (ok < 0) {
        int dev = 0, major = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        ok = major >= 9 && cu_env_digit("MUSER_CUDA_PDL", 1) != 0;
    }
    return ok;
}

/* Shared memory of a ring launch of w's type and width for T tokens in
 * blocks of nw warps with rings of S chunks */
static size_t ring_smem(const dtensor *w, int T, int nw, int S, int ws) {
    switch (w->type) {
    case MU_T_Q8_0: case MU_T_NVFP4: return q8d_smem(w->type, T, q8d_nb(w->type, w->ne0), nw);
    case MU_T_Q4_K: return q4d_smem(T, w->ne0 / 256, nw, S, ws);
    default: return q6d_smem(T, w->ne0 / 256, nw, S, ws);
    }
}

/* the Q8_0 and NVFP4 ring kernels: [NVFP4][logits][at most 1, 4, 8, 16 tokens] */
typedef void (*q8d_fn)(dec_grp, int, const uint8_t *, size_t, int, float, float);
#define Q8D_FNS(TY, LG) \
    {k_mm_q8_dec<TY, LG, 4, 1>, k_mm_q8_dec<TY, LG, 4, 4>, k_mm_q8_dec<TY, LG, 4, 8>, k_mm_q8_dec<TY, LG, 4, 16>}
static const q8d_fn q8d_fns[2][2][4] = {{Q8D_FNS(MU_T_Q8_0, false), Q8D_FNS(MU_T_Q8_0, true)},
                                        {Q8D_FNS(MU_T_NVFP4, false), Q8D_FNS(MU_T_NVFP4, true)}};
#undef Q8D_FNS

/* the most tokens of a Q8_0 or NVFP4 ring launch: 4 (batches of 5 to 16
 * tokens take the other kernels), or MUSER_CUDA_Q8D_T=8 or 16: on the
 * bundled model faster verifications, a slower DFlash pass (docs/cuda.md);
 * the full shape not timed yet. */
static int q8d_max_t(void) {
    static int t = 0;
    if (!t) {
        const char *v = getenv("MUSER_CUDA_Q8D_T");
        const int x = v ? atoi(v) : 0;
        t = x == 8 || x == 16 ? x : 4;
    }
    return t;
}

/* the ring kernels may ask for dec2_smem_max() bytes (once) */
static void ring_init(void) {
    static bool done;
    if (done) return;
    const int mx = dec2_smem_max();
#define RING_ATTR(...) cudaFuncSetAttribute(__VA_ARGS__, cudaFuncAttributeMaxDynamicSharedMemorySize, mx)
    RING_ATTR(k_mm_q4K_dec<false, 4, false>);
    RING_ATTR(k_mm_q4K_dec<true, 4, false>);
    RING_ATTR(k_mm_q4K_dec<false, 8, false>);
    RING_ATTR(k_mm_q4K_dec<true, 8, false>);
    RING_ATTR(k_mm_q4K_dec<false, 4, true>);
    RING_ATTR(k_mm_q4K_dec<true, 4, true>);
    RING_ATTR(k_mm_q4K_dec<false, 8, true>);
    RING_ATTR(k_mm_q4K_dec<true, 8, true>);
    RING_ATTR(k_mm_q6K_dec<false, 4>);
    RING_ATTR(k_mm_q6K_dec<true, 4>);
    for (int ty = 0; ty < 2; ty++)
        for (int lg = 0; lg < 2; lg++)
            for (int tm = 0; tm < 4; tm++) RING_ATTR(q8d_fns[ty][lg][tm]);
#undef RING_ATTR
    done = true;
}

/* The shape of a ring launch of w's type and width for T tokens: warps
 * a thread block (*nw), chunks a warp's ring (*S) and blocks an
 * activation window (*ws; nb: one window). Eight warps of four chunks;
 * Q4_K rows of more than 32 super-blocks (FFN down: few rows, long) four
 * warps of eight chunks (seven in flight). Deep rings for every launch of
 * fewer than 16 warps an SM measured slower (72.0 vs 78.7 tok/s at 2048,
 * bench/results/cuda-2026-12-02e); deep rings only where the launch still
 * runs in one wave (q, k, v, gate; wo) no faster at one token and slower
 * at four, and blocks of fewer warps for those no faster either
 * (bench/results/cuda-2026-12-03d). The first shape whose shared memory
 * leaves room for two thread blocks an SM, with one window or the
 * largest pair of windows that does (Q4_K, Q6_K: several tokens' long
 * rows; Q8_0, NVFP4: of four warps or more); else the first that fits at
 * all, with half the warps and four chunks as often as needed; false: not
 * even one warp's fits.
 * MUSER_CUDA_RING_WARPS=N (1, 2, 4): at most N warps (to run the kernel
 * test on smaller blocks). */
static bool ring_shape(const dtensor *w, int T, int *nw, int *S, int *ws) {
    static const int max_nw = cu_env_digit("MUSER_CUDA_RING_WARPS", 8);
    static size_t half = 0;
    if (!half) {
        int dev = 0, sm = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess) sm = 0;
        half = sm > 2048 ? (size_t)sm / 2 - 1024 : 1; /* 1 KB an SM keeps per block */
    }
    const size_t mx = (size_t)dec2_smem_max();
    const int nb = w->ne0 / 256;
    const bool win = w->type == MU_T_Q4_K || w->type == MU_T_Q6_K;
    ring_init();
    for (int pass = 0; pass < 2; pass++) {
        const size_t budget = pass ? mx : half < mx ? half : mx;
        for (int k = 0; k < 5; k++) {
            /* (4, 8) for long Q4_K rows, then (8, 4), (4, 4), (2, 4), (1, 4) */
            if (k == 0 && !(w->type == MU_T_Q4_K && nb > 32)) continue;
            *S = k ? 4 : 8;
            *nw = k ? 16 >> k : 4;
            if (*nw > max_nw) continue;
            /* Q8_0 / NVFP4 stage the whole activation rows in each block: blocks of
             * fewer than four warps copy them too often (FFN down at four tokens) */
            if (!win && !pass && *nw < 4) continue;
            *ws = nb;
            if (ring_smem(w, T, *nw, *S, *ws) <= budget) return true;
            if (!win) continue;
            for (*ws = (nb - 1) & ~1; *ws >= 2 * *S; *ws -= 2)
                if (ring_smem(w, T, *nw, *S, *ws) <= budget) return true;
        }
    }
    return false;
}

/* Q4_K's ring kernel computes the integers of T tokens on the tensor
 * cores (2 <= T <= DEC_MMA_T, q4_mma_wa); with MUSER_CUDA_DEC_MMA=0 or
 * for other T, by dp4a (T <= DEC_MAX_T) */
#define DEC_MMA_T 8
static bool dec_mma(const dtensor *w, int T) {
    static const bool on = cu_env_digit("MUSER_CUDA_DEC_MMA", 1) != 0;
    return on && w->type == MU_T_Q4_K && T >= 2 && T <= DEC_MMA_T && cu_mma_ok();
}

/* the ring kernels take w for T tokens */
static bool ring_ok(const dtensor *w, int T) {
    int nw, S, ws;
    const bool q8 = w->type == MU_T_Q8_0 || w->type == MU_T_NVFP4;
    return (T <= DEC_MAX_T || dec_mma(w, T) || (q8 && T <= q8d_max_t())) && dec_ring(w->type) &&
           ring_shape(w, T, &nw, &S, &ws);
}

/* The split-K kernels' switch, read once: MUSER_CUDA_D1 (warps a row group
 * of k_mm_q4K_d1: 2, the default, 4 or 8; 0: every one-token launch on
 * the ring kernels; k_mm_q6K_d1 takes, with 8, the one-token Q6_K launches
 * of fewer rows than a wave of k_mm_q6K_dec, v, whenever it is not 0), and
 * the SMs. (FFN down on k_mm_q6K_d1 too measured slower: docs/cuda.md.) */
static int d1_ks = -1, d1_sm;
static void d1_init(void) {
    if (d1_ks >= 0) return;
    const int v = cu_env_digit("MUSER_CUDA_D1", 2);
    d1_ks = v == 0 || v == 2 || v == 4 || v == 8 ? v : 2;
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&d1_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) d1_sm = 0;
    const int mx = dec2_smem_max();
    cudaFuncSetAttribute(k_mm_q4K_d1<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, mx);
    cudaFuncSetAttribute(k_mm_q4K_d1<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, mx);
    cudaFuncSetAttribute(k_mm_q6K_d1<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, mx);
    cudaFuncSetAttribute(k_mm_q6K_d1<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, mx);
}

/* Warps a row group of the split-K kernel for a one-token launch of
 * `rows` rows of type ty and nb super-blocks; 0: the ring kernel takes it. */
static int d1_split(uint32_t ty, int rows, int nb) {
    d1_init();
    if (!d1_ks) return 0;
    if (ty == MU_T_Q4_K) return q4d1_smem(nb, 8 / d1_ks) <= (size_t)dec2_smem_max() ? d1_ks : 0;
    if (ty != MU_T_Q6_K) return 0;
    return d1_sm > 0 && rows < 32 * d1_sm && q6d1_smem(nb, 1) <= (size_t)dec2_smem_max() ? 8 : 0;
}

/* n (<= DEC_GRP) Q4_K, Q6_K, Q8_0 or NVFP4 matrices of one type and width
 * in one launch of a ring kernel: eight (Q4_K, Q8_0, NVFP4) or four (Q6_K)
 * rows a warp */
static void ring_launch(cudaStream_t st, const dtensor *const *ws, int n, const void *act, size_t act_stride, int T,
                        int n_batch, float *const *ys, bool logits, float lscale, float cap) {
    dec_grp G = {};
    int end = 0;
    for (int i = 0; i < n; i++) {
        G.w[i] = (const uint8_t *)ws[i]->d;
        G.w_rb[i] = ws[i]->row_bytes;
        G.y[i] = ys[i];
        G.rows[i] = ws[i]->ne1;
        end += ws[i]->ne1;
        G.end[i] = end; /* rows, here */
    }
    G.n = n;
    const uint8_t *a = (const uint8_t *)act;
    int nw = 0, S = 0, wb = 0;
    if (!ring_shape(ws[0], T, &nw, &S, &wb)) return; /* ring_ok said it fits */
    const uint32_t ty = ws[0]->type;
    const int rpw = ty == MU_T_Q6_K ? 4 : 8; /* rows a warp */
    const dim3 grid((unsigned)((end + rpw * nw - 1) / (rpw * nw))), block(nw * 32);
    const size_t sm = ring_smem(ws[0], T, nw, S, wb);
    if (ty == MU_T_Q8_0 || ty == MU_T_NVFP4) {
        const int nb = q8d_nb(ty, ws[0]->ne0);
        launch_pdl(q8d_fns[ty == MU_T_NVFP4][logits][T > 8 ? 3 : T > 4 ? 2 : T > 1], grid, block, sm, st, G, nb, a,
                   act_stride, T, lscale, cap);
        return;
    }
    const int nb = ws[0]->ne0 / 256;
    /* one token past n_batch: the split kernels take the chain steps of such a token alone */
    const int ks = T == 1 && n_batch == 0 ? d1_split(ty, end, nb) : 0;
    if (ks && ty == MU_T_Q4_K) { /* 8 / ks row groups of eight rows a block */
        const unsigned nbk = (unsigned)((end + 64 / ks - 1) / (64 / ks));
        launch_pdl(logits ? k_mm_q4K_d1<true> : k_mm_q4K_d1<false>, dim3(nbk), dim3(256), q4d1_smem(nb, 8 / ks), st, G,
                   nb, ks, a, lscale, cap);
        return;
    }
    if (ks) { /* Q6_K: 8 / ks row groups of four rows */
        const unsigned nbk = (unsigned)((end + 32 / ks - 1) / (32 / ks));
        launch_pdl(logits ? k_mm_q6K_d1<true> : k_mm_q6K_d1<false>, dim3(nbk), dim3(256), q6d1_smem(nb, 8 / ks), st, G,
                   nb, ks, a, lscale, cap);
        return;
    }
    if (ty == MU_T_Q4_K) {
        typedef void (*q4k_fn)(dec_grp, int, int, const uint8_t *, size_t, int, int, float, float);
        /* [dec_mma][S == 8][logits] */
        static const q4k_fn fns[2][2][2] = {
            {{k_mm_q4K_dec<false, 4, false>, k_mm_q4K_dec<true, 4, false>},
             {k_mm_q4K_dec<false, 8, false>, k_mm_q4K_dec<true, 8, false>}},
            {{k_mm_q4K_dec<false, 4, true>, k_mm_q4K_dec<true, 4, true>},
             {k_mm_q4K_dec<false, 8, true>, k_mm_q4K_dec<true, 8, true>}}};
        launch_pdl(fns[dec_mma(ws[0], T)][S == 8][logits], grid, block, sm, st, G, nb, wb, a, act_stride, T, n_batch, lscale, cap);
    } else {
        if (logits) launch_pdl(k_mm_q6K_dec<true, 4>, grid, block, sm, st, G, nb, wb, a, act_stride, T, lscale, cap);
        else launch_pdl(k_mm_q6K_dec<false, 4>, grid, block, sm, st, G, nb, wb, a, act_stride, T, lscale, cap);
    }
}

void cu_matmul_n(cudaStream_t st, const dtensor *const *ws, int n, const void *act, size_t act_stride, int T,
                 int n_batch, float *const *ys) {
    cu_mm_wg_group(true); /* one input for all: converted once for the wgmma kernel */
    for (int i = 0; i < n;) {
        int j = i + 1;
        const bool rg = ring_ok(ws[i], T);
        if ((rg || dec2_ok(ws[i], T)) && dec_group_ok())
            while (j < n && j - i < DEC_GRP && ws[j]->type == ws[i]->type && ws[j]->ne0 == ws[i]->ne0) j++;
        if (j - i > 1 && rg) ring_launch(st, ws + i, j - i, act, act_stride, T, n_batch, ys + i, false, 0, 0);
        else if (j - i > 1) dec2_launch(st, ws + i, j - i, act, act_stride, T, n_batch, ys + i, false, 0, 0);
        else cu_matmul(st, ws[i], act, act_stride, T, n_batch, ys[i], false, 0, 0);
        i = j;
    }
    cu_mm_wg_group(false);
}

void cu_matmul(cudaStream_t st, const dtensor *w, const void *act, size_t act_stride, int T, int n_batch, float *y,
               bool logits, float lscale, float cap) {
    if (T <= 0) return;
    const int rows = w->ne1, n = w->ne0;
    const uint8_t *wd = (const uint8_t *)w->d, *a = (const uint8_t *)act;
    const dim3 gq((rows + MM_WARPS - 1) / MM_WARPS, (T + MM_TILE - 1) / MM_TILE);
    const dim3 gf((rows + MM_WARPS - 1) / MM_WARPS, T);
    if (ring_ok(w, T) || dec2_ok(w, T)) {
        const dtensor *ws[1] = {w};
        float *ys[1] = {y};
        if (ring_ok(w, T)) ring_launch(st, ws, 1, act, act_stride, T, n_batch, ys, logits, lscale, cap);
        else dec2_launch(st, ws, 1, act, act_stride, T, n_batch, ys, logits, lscale, cap);
        return;
    }
    if (T <= DEC_MAX_T && (w->type == MU_T_Q4_K || w->type == MU_T_Q5_K || w->type == MU_T_Q6_K)) {
        const unsigned gr = (unsigned)((rows + MM_WARPS - 1) / MM_WARPS);
        if (w->type == MU_T_Q4_K)
            k_mm_dec<MU_T_Q4_K><<<gr, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n / 256, a, act_stride, T, n_batch, y, logits, lscale, cap);
        else if (w->type == MU_T_Q5_K)
            k_mm_dec<MU_T_Q5_K><<<gr, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n / 256, a, act_stride, T, n_batch, y, logits, lscale, cap);
        else
            k_mm_dec<MU_T_Q6_K><<<gr, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n / 256, a, act_stride, T, n_batch, y, logits, lscale, cap);
        return;
    }
    if (!logits && T > DEC_MAX_T && cu_matmul_mma(st, w, act, act_stride, T, n_batch, y)) return;
    switch (w->type) {
    case MU_T_Q4_K:
        k_mm_q<MU_T_Q4_K><<<gq, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n / 256, a, act_stride, T, n_batch, y, logits, lscale, cap);
        break;
    case MU_T_Q5_K:
        k_mm_q<MU_T_Q5_K><<<gq, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n / 256, a, act_stride, T, n_batch, y, logits, lscale, cap);
        break;
    case MU_T_Q6_K:
        k_mm_q<MU_T_Q6_K><<<gq, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n / 256, a, act_stride, T, n_batch, y, logits, lscale, cap);
        break;
    case MU_T_Q8_0:
        k_mm_q<MU_T_Q8_0><<<gq, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n / 32, a, act_stride, T, n_batch, y, logits, lscale, cap);
        break;
    case MU_T_NVFP4:
        k_mm_q<MU_T_NVFP4><<<gq, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n / 64, a, act_stride, T, n_batch, y, logits, lscale, cap);
        break;
    case MU_T_F32:
        k_mm_f<MU_T_F32><<<gf, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n, a, act_stride, T, n_batch, y, logits, lscale, cap);
        break;
    case MU_T_F16:
        k_mm_f<MU_T_F16><<<gf, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n, a, act_stride, T, n_batch, y, logits, lscale, cap);
        break;
    case MU_T_BF16:
        k_mm_bf16<<<gf, MM_WARPS * 32, 0, st>>>(wd, w->row_bytes, rows, n, a, act_stride, T, n_batch, y, logits, lscale, cap);
        break;
    }
}

/* ---- row lookup (token embeddings) -------------------------------------- */

/* Element i of a device row, as the CPU's dequantizers compute it. */
__device__ float deq_elem(uint32_t type, const uint8_t *row, int i) {
    switch (type) {
    case MU_T_F32: return ((const float *)row)[i];
    case MU_T_F16: return h2f(((const uint16_t *)row)[i]);
    case MU_T_BF16: return bf2f(((const uint16_t *)row)[i]);
    case MU_T_Q8_0: {
        const dq8_0 *b = (const dq8_0 *)row + i / 32;
        return b->qs[i % 32] * h2f(b->d);
    }
    case MU_T_Q4_K: case MU_T_Q5_K: {
        const int ib = i / 256, j = i % 256, g = j / 64, hi = (j % 64) >= 32, l = j % 32;
        const uint8_t *scales, *qs;
        uint16_t d16, m16;
        int qv;
        if (type == MU_T_Q4_K) {
            const mu_block_q4_K *b = (const mu_block_q4_K *)row + ib;
            scales = b->scales; qs = b->qs; d16 = b->d; m16 = b->dmin;
            qv = hi ? qs[32 * g + l] >> 4 : qs[32 * g + l] & 0xF;
        } else {
            const mu_block_q5_K *b = (const mu_block_q5_K *)row + ib;
            scales = b->scales; qs = b->qs; d16 = b->d; m16 = b->dmin;
            qv = (hi ? qs[32 * g + l] >> 4 : qs[32 * g + l] & 0xF) + ((b->qh[l] >> (2 * g + hi)) & 1 ? 16 : 0);
        }
        int sc, m;
        scale_min_k4(2 * g + hi, scales, &sc, &m);
        const float d1 = h2f(d16) * (float)sc, m1 = h2f(m16) * (float)m;
        return d1 * (float)qv - m1;
    }
    case MU_T_NVFP4: {
        const mu_block_nvfp4 *b = (const mu_block_nvfp4 *)row + i / 64;
        return (float)nvfp4_code(b, i % 64) * nvfp4_scale(b->d[(i % 64) / 16]);
    }
    case MU_T_Q6_K: {
        const dq6_K *b = (const dq6_K *)row + i / 256;
        const int j = i % 256, h = j / 128, r = j % 128, k = r / 32, l = r % 32;
        const uint8_t ql = b->ql[64 * h + (k & 1) * 32 + l], qh = b->qh[32 * h + l];
        const int q = (int)((k < 2 ? ql & 0xF : ql >> 4) | (((qh >> (2 * k)) & 3) << 4)) - 32;
        const int is = l / 16;
        return h2f(b->d) * (float)b->scales[8 * h + is + 2 * k] * (float)q;
    }
    }
    return 0;
}

__global__ void k_get_rows(uint32_t type, const uint8_t *w, size_t rb, int n, const int32_t *rows, float *y) {
    const int t = blockIdx.y;
    const uint8_t *row = w + (size_t)rows[t] * rb;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[(size_t)t * n + i] = deq_elem(type, row, i);
}

void cu_get_rows(cudaStream_t st, const dtensor *w, const int32_t *rows, int T, float *y) {
    k_get_rows<<<dim3(4, T), 256, 0, st>>>(w->type, (const uint8_t *)w->d, w->row_bytes, w->ne0, rows, y);
}
