/* gpu_cuda_mmq.cu: prefill matmuls (more tokens than a decode step) of
 * Q4_K and Q6_K on the int8 tensor cores, with the CPU's chains.
 *
 * The CPU's arithmetic for these types is exact integer dot products over
 * sub-blocks, then float chains per (row, token) in block order. An int8
 * mma (m16n8k32) computes exact integer sums for 16 rows x 8 tokens at
 * once; here it computes every integer the chains need (the sub-block
 * sums, Q4_K's min parts, Q6_K's offset term), and every accumulator that
 * becomes a float starts at MAGIC_I, the bits of 1.5 x 2^23: an int32 sum
 * x with |x| < 2^22 added to it is the float 1.5 x 2^23 + x, so x itself
 * is one exact float subtraction away, with no conversion instruction (an
 * eighth of the float rate on sm_90) and no integer work left to the
 * scalar lanes but a few byte permutes. Fragment layouts of
 * mma.m16n8k32.s8 (PTX ISA): A reg i: row g (+8 for odd i), columns
 * 4q..4q+3 (+16 for i >= 2); B reg i: column g, rows 4q..4q+3 (+16 for
 * i = 1); C reg i: row g (+8 for i >= 2), column 2q + (i & 1); g = lane/4,
 * q = lane%4. */
#include "mm.cuh"


/* byte k of x (a scale, < 2^8), exactly as a float */
__device__ __forceinline__ float byte_f(int x, int k) {
    return magic_x((int)__byte_perm((unsigned)x, (unsigned)MAGIC_I, 0x7650 | k));
}


/* A thread's copies of the activation tiles: super-block b of tokens t0 ..
 * t0 + NT - 1 (zeros past T), the quantized bytes (SW words per token) and
 * d, by NTH threads. What a copy takes from where is the same for every
 * super-block, so the addresses are formed once (forming them per block
 * was a fifth of the kernels' instructions). */
template <int NT, int SW, int NTH>
struct q8_plan {
    static constexpr int R = NT * 64 / NTH, DT = NTH / 64; /* copies a thread, tokens between them */
    const uint8_t *q, *q0, *d; /* word wd of block 0: the thread's first token's, token 0's; its d */
    size_t step;               /* DT tokens */
    int n_ok;                  /* copies of tokens below T */
    bool d_ok;
    __device__ __forceinline__ q8_plan(const uint8_t *act, size_t stride, int t0, int T) {
        const int tb = threadIdx.x >> 6, wd = threadIdx.x & 63, left = T - t0 - tb;
        q0 = act + offsetof(mu_block_q8_K, qs) + 4 * wd;
        q = q0 + (size_t)(t0 + tb) * stride;
        step = (size_t)DT * stride;
        n_ok = left <= 0 ? 0 : (left + DT - 1) / DT < R ? (left + DT - 1) / DT : R;
        d_ok = (int)threadIdx.x < NT && t0 + (int)threadIdx.x < T;
        d = act + (size_t)(d_ok ? t0 + threadIdx.x : 0) * stride + offsetof(mu_block_q8_K, d);
    }
    /* starts copying super-block b into s_q, s_d; commits */
    __device__ __forceinline__ void stage(int *s_q, float *s_d, int b) const {
        const size_t o = (size_t)b * sizeof(mu_block_q8_K);
        int *dq = s_q + (threadIdx.x >> 6) * SW + (threadIdx.x & 63);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const bool ok = r < n_ok; /* else src is not read */
            cp4(dq + DT * SW * r, (ok ? q + r * step : q0) + o, ok);
        }
        if ((int)threadIdx.x < NT) cp4(s_d + threadIdx.x, d + o, d_ok);
        cp_commit();
    }
};

/* ---- Q4_K --------------------------------------------------------------
 * Per (row, token) and 64 elements the CPU takes two chain steps:
 * isum = sc0 s0 + sc1 s1 (6-bit scales, sub-block sums s) by d, and the
 * min part (6-bit mins times the sub-blocks' activation sums) by dmin.
 * s0 and s1 come from mmas started at MAGIC_I; (M + s) x sc - M x sc in one
 * fmaf is the integer s x sc (< 2^24), and the two add exactly, so the
 * step gets the CPU's (float)isum. The min part is an mma too: the min
 * broadcast over its sub-block's 32 weights, times the activation bytes,
 * is min x the sub-block's sum. Bounds: |s| <= 15 x 127 x 32 < 2^22; a
 * min part <= 63 x 127 x 64 < 2^22. Tokens past n_batch (the CPU's
 * per-super-block steps, whose integers can pass 2^24) keep integer sums
 * and convert once a block; only the tiles that hold such tokens (MIXED)
 * carry them.
 * A warp: 16 rows x 8 NN tokens; a thread block: WB warps (16 WB rows)
 * sharing the token tile, weight and activation tiles through shared
 * memory (cp.async, double-buffered; dynamic shared memory 2 x 144 x 16 WB
 * bytes). Grid: x over token tiles, y over row tiles, so the blocks that
 * run together share weight rows (read once from memory, then from L2). */

#define Q4_SW 68 /* words per token row of the shared tile: banks 4g + q distinct */

/* A thread's copies of the weight tile: super-block b of the block's RB
 * rows (clamped to the last row), 144 bytes a row, as words i = tid + NTH
 * k of 16 bytes (row i / 9, word i % 9: at 16 i in the tile), NTH threads;
 * the sources are formed once. */
template <int RB, int NTH>
struct q4w_plan {
    static constexpr int NW = RB * 9, K = (NW + NTH - 1) / NTH;
    const uint8_t *src[K]; /* in super-block 0 */
    __device__ __forceinline__ q4w_plan(const uint8_t *w, size_t w_rb, int r0, int rows) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = min((int)threadIdx.x + NTH * k, NW - 1), r = i / 9, c = i % 9;
            src[k] = w + (size_t)(r0 + r < rows ? r0 + r : rows - 1) * w_rb + 16 * c;
        }
    }
    /* starts copying super-block b into s_w; no commit */
    __device__ __forceinline__ void stage(uint8_t *s_w, int b) const {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = threadIdx.x + NTH * k;
            if (k < K - 1 || i < NW) cp16(s_w + 16 * i, src[k] + (size_t)b * 144);
        }
    }
};

template <int NN, int WB, bool MIXED>
__global__ void __launch_bounds__(32 * WB, 1)
k_mm_q4K_tc(const uint8_t *w, size_t w_rb, int rows, int nb, const uint8_t *act, size_t act_stride, int T,
            int n_batch, float *y, int tile0) {
    constexpr int NT = 8 * NN;
    __shared__ int s_q2[2][NT * Q4_SW];
    __shared__ float s_d2[2][NT];
    extern __shared__ int4 s_w4[]; /* [2][16 WB][144 bytes] */
    uint8_t *s_w = (uint8_t *)s_w4;
    const int rblk = blockIdx.y * 16 * WB;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const int t0 = (tile0 + blockIdx.x) * NT, r0 = rblk + warp * 16;
    const bool live = r0 < rows; /* no early return: the block shares the tiles */
    float acc[NN][4], accm[NN][4];
    int isum[MIXED ? NN : 1][4], imin[MIXED ? NN : 1][4]; /* tokens past n_batch */
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            acc[n][k] = accm[n][k] = 0;
            if (MIXED) isum[n][k] = imin[n][k] = 0;
        }
    const q4w_plan<16 * WB, 32 * WB> wp(w, w_rb, rblk, rows);
    const q8_plan<NT, Q4_SW, 32 * WB> ap(act, act_stride, t0, T);
    wp.stage(s_w, 0);
    ap.stage(s_q2[0], s_d2[0], 0);
    for (int b = 0; b < nb; b++) {
        const int cur = b & 1;
        if (b + 1 < nb) { /* the next tiles load while this one is used */
            wp.stage(s_w + (cur ^ 1) * 16 * WB * 144, b + 1);
            ap.stage(s_q2[cur ^ 1], s_d2[cur ^ 1], b + 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (live) {
            const int *s_q = s_q2[cur];
            const mu_block_q4_K *pa = (const mu_block_q4_K *)(s_w + (cur * 16 * WB + warp * 16 + g) * 144);
            const mu_block_q4_K *pb = (const mu_block_q4_K *)(s_w + (cur * 16 * WB + warp * 16 + g + 8) * 144);
            int S[2][2], Mn[2][2]; /* rows a and b */
            {
                int scw[2][3];
#pragma unroll
                for (int i = 0; i < 3; i++) {
                    scw[0][i] = ld32(pa->scales + 4 * i);
                    scw[1][i] = ld32(pb->scales + 4 * i);
                }
                k4_unpack(scw[0], S[0], Mn[0]);
                k4_unpack(scw[1], S[1], Mn[1]);
            }
            const float dxa = h2f(pa->d), dxb = h2f(pb->d), mxa = h2f(pa->dmin), mxb = h2f(pb->dmin);
            float dd[NN][4], dm[NN][4]; /* the chain factors of this block */
#pragma unroll
            for (int n = 0; n < NN; n++)
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float v = s_d2[cur][8 * n + 2 * q + (k & 1)];
                    dd[n][k] = (k >> 1 ? dxb : dxa) * v;
                    dm[n][k] = (k >> 1 ? mxb : mxa) * v;
                }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int qa0 = ld32(pa->qs + 32 * j + 4 * q), qa1 = ld32(pa->qs + 32 * j + 16 + 4 * q);
                const int qb0 = ld32(pb->qs + 32 * j + 4 * q), qb1 = ld32(pb->qs + 32 * j + 16 + 4 * q);
                const int A0[4] = {qa0 & 0x0F0F0F0F, qb0 & 0x0F0F0F0F, qa1 & 0x0F0F0F0F, qb1 & 0x0F0F0F0F};
                const int A1[4] = {(qa0 >> 4) & 0x0F0F0F0F, (qb0 >> 4) & 0x0F0F0F0F, (qa1 >> 4) & 0x0F0F0F0F,
                                   (qb1 >> 4) & 0x0F0F0F0F};
                const int wi = j >> 1, k0 = 2 * (j & 1), k1 = k0 + 1; /* sub-blocks 2j, 2j + 1 */
                /* the mins broadcast over their sub-blocks */
                const int ma0 = byte_bcast(Mn[0][wi], k0), mb0 = byte_bcast(Mn[1][wi], k0);
                const int ma1 = byte_bcast(Mn[0][wi], k1), mb1 = byte_bcast(Mn[1][wi], k1);
                const int M0[4] = {ma0, mb0, ma0, mb0}, M1[4] = {ma1, mb1, ma1, mb1};
                /* the scales as floats, and -M x scale (both exact) */
                const float fs0[2] = {byte_f(S[0][wi], k0), byte_f(S[1][wi], k0)};
                const float fs1[2] = {byte_f(S[0][wi], k1), byte_f(S[1][wi], k1)};
                const float ns0[2] = {-MAGIC_F * fs0[0], -MAGIC_F * fs0[1]};
                const float ns1[2] = {-MAGIC_F * fs1[0], -MAGIC_F * fs1[1]};
#pragma unroll
                for (int n = 0; n < NN; n++) {
                    const int *bp = s_q + (8 * n + g) * Q4_SW + 16 * j + q; /* sub-block 2j of this column */
                    const int B0[2] = {bp[0], bp[4]}, B1[2] = {bp[8], bp[12]};
                    int D0[4], D1[4], Dm[4];
                    mma_s8_c(D0, A0, B0, MAGIC_I);
                    mma_s8_c(D1, A1, B1, MAGIC_I);
                    mma_s8_c(Dm, M0, B0, MAGIC_I);
                    mma_s8(Dm, M1, B1);
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const int h = k >> 1;
                        if (MIXED && t0 + 8 * n + 2 * q + (k & 1) >= n_batch) {
                            const int s0 = (int)fs0[h], s1 = (int)fs1[h]; /* the scales, exact */
                            isum[n][k] += s0 * (D0[k] - MAGIC_I) + s1 * (D1[k] - MAGIC_I);
                            imin[n][k] += Dm[k] - MAGIC_I;
                            continue;
                        }
                        const float p0 = fmaf(__int_as_float(D0[k]), fs0[h], ns0[h]);
                        const float p1 = fmaf(__int_as_float(D1[k]), fs1[h], ns1[h]);
                        acc[n][k] = fmaf(p0 + p1, dd[n][k], acc[n][k]);
                        accm[n][k] = fmaf(magic_x(Dm[k]), dm[n][k], accm[n][k]);
                    }
                }
            }
            if (MIXED) /* the per-super-block steps of tokens past n_batch */
#pragma unroll
                for (int n = 0; n < NN; n++)
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const int t = t0 + 8 * n + 2 * q + (k & 1);
                        if (t < n_batch || t >= T) continue;
                        acc[n][k] = fmaf((float)isum[n][k], dd[n][k], acc[n][k]);
                        accm[n][k] = fmaf((float)imin[n][k], dm[n][k], accm[n][k]);
                        isum[n][k] = imin[n][k] = 0;
                    }
        }
        __syncthreads(); /* the tiles of b are free for b + 2 */
    }
    if (!live) return;
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int t = t0 + 8 * n + 2 * q + (k & 1), r = r0 + g + (k >> 1) * 8;
            if (t < T && r < rows) y[(size_t)t * rows + r] = acc[n][k] - accm[n][k];
        }
}

/* ---- Q4_K on the f16 tensor cores (wgmma, sm_90a) ---------------------------
 * The same chain steps as k_mm_q4K_tc, with each 64-element step's isum
 * from f16 products, f32 accumulators: the weights enter as scale x nibble
 * (<= 63 x 15 = 945, an exact f16), the activations as their bytes (exact),
 * so every product is an integer below 2^17 and the partial sums of a step
 * stay integers below 2^23 (7.7 x 10^6 at the formats' largest values),
 * which the tensor cores' fp32 sums hold exactly in any order: four
 * wgmma.m64n64k16 into fresh accumulators give the step's isum = sc0 s0 +
 * sc1 s1 as the exact float the CPU converts. The min part is two exact
 * float products of the sub-blocks' mins and activation sums. (The int8
 * kernel spends a multiply-add on each sub-block's scale and a subtraction
 * on each conversion: 28 of its 53 instructions a unit.) The high nibbles
 * (sub-block 2j + 1) enter as 16 n, their activations as x / 16 (exact).
 * Within each group of four elements both operands hold e0, e2, e1, e3
 * (the same order on both sides: an exact sum does not depend on it), so
 * a weight word's nibble pairs need a mask each, no byte permute.
 * Activations: k_q8K_h writes each token's Q8_K block once as f16, with the
 * sub-block sums and d, in the layout a thread block reads, one contiguous
 * stage block per (128-token tile, super-block), which one thread copies
 * to shared memory with one bulk copy (cp.async.bulk, an mbarrier a
 * buffer; the weights by cp.async).
 * A thread block: 64 rows x 128 tokens, two warpgroups of 64 tokens. Per
 * super-block the block turns its weights into f16 once (sA, which both
 * warpgroups' wgmma read from shared memory, as each reads its half of the
 * token tile), then each warpgroup takes the four steps: four wgmmas, then
 * the chain steps of its (row, token) pairs, accumulator D[4 i + k] being
 * row 16 (warp % 4) + g + 8 (k / 2), token 8 i + 2 q + k % 2 of its half.
 * Shared-memory operands in wgmma's canonical K-major layout without
 * swizzle: 8 x 8 core matrices of 128 contiguous bytes (8 rows of 16). */

#define Q4H_RB 64  /* rows a block */
#define Q4H_TB 128 /* tokens a block: two warpgroups of 64 */

/* (a & m) | c in one instruction (ptxas takes two for two constants) */
__device__ __forceinline__ unsigned and_or(unsigned a, unsigned m, unsigned c) {
    unsigned d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
    return d;
}

/* byte k of x (a 6-bit scale or min) in both halves, as f16 */
__device__ __forceinline__ __half2 byte_h2(int x, int k) {
    const unsigned v = __byte_perm((unsigned)x, 0x64646464u, 0x4040 | (0x0101 * k));
    return __hsub2(*(const __half2 *)&v, __float2half2_rn(1024.f));
}

__device__ __forceinline__ unsigned h2u(__half2 h) { return *(const unsigned *)&h; }

/* the f16 weights of a weight word's bytes b0..b3 (elements e0..e3 of
 * sub-blocks 2j, low nibbles, and 2j + 1, high): (e0, e2) and (e1, e3) of
 * each, as n x s (scale sl, offset ol = -1024 sl: (1024 + n) sl + ol, one
 * rounding of the exact n sl) and 16 n x s (sh, oh) */
__device__ __forceinline__ void q4_frag(unsigned w, __half2 sl, __half2 ol, __half2 sh, __half2 oh, unsigned *l02,
                                        unsigned *l13, unsigned *h02, unsigned *h13) {
    const unsigned w8 = w >> 8, M = 0x64006400u;
    const unsigned v0 = and_or(w, 0x000F000Fu, M), v1 = and_or(w8, 0x000F000Fu, M);
    const unsigned v2 = and_or(w, 0x00F000F0u, M), v3 = and_or(w8, 0x00F000F0u, M);
    *l02 = h2u(__hfma2(*(const __half2 *)&v0, sl, ol));
    *l13 = h2u(__hfma2(*(const __half2 *)&v1, sl, ol));
    *h02 = h2u(__hfma2(*(const __half2 *)&v2, sh, oh));
    *h13 = h2u(__hfma2(*(const __half2 *)&v3, sh, oh));
}

/* x's bytes (signed) e0..e3 as f16 (e0, e2), (e1, e3), exactly; over 16
 * where sub1 (a sub-block 2j + 1) */
__device__ __forceinline__ void s8x4_h(int x, bool sub1, unsigned *lo, unsigned *hi) {
    /* 1024 + byte + 128 (64 + (byte + 128) / 16), less 1152 (72) */
    const unsigned E = sub1 ? 0x54545454u : 0x64646464u;
    const __half2 bias = __float2half2_rn(sub1 ? 72.f : 1152.f);
    const unsigned u = (unsigned)x ^ 0x80808080u;
    const unsigned a = __byte_perm(u, E, 0x4240), b = __byte_perm(u, E, 0x4341);
    *lo = h2u(__hsub2(*(const __half2 *)&a, bias));
    *hi = h2u(__hsub2(*(const __half2 *)&b, bias));
}

/* One thread block's inputs of one super-block, as k_q8K_h writes them and
 * the kernel copies them to shared memory in one bulk copy: the 128
 * tokens' bytes as f16 in fragment order, core matrix (kc, token group tg)
 * at (16 kc + tg) x 128 (kc: the super-block's 8-element chunk; a token's
 * 16 bytes at 16 x its place in the group); the sums of sub-blocks 2j, 2j
 * + 1 [4 j][128][2]; d [128]. */
#define Q4H_STB (Q4H_TB * 512)
#define Q4H_STS (4 * Q4H_TB * 2 * 4)
#define Q4H_STAGE (Q4H_STB + Q4H_STS + Q4H_TB * 4)

/* Token t's Q8_K block b (act rows act_stride bytes apart) into its stage
 * block: tile t / 128's block b of nb. A warp a block; lane l takes the
 * 8-element chunk l. */
__global__ void k_q8K_h(const uint8_t *act, size_t act_stride, int nb, uint8_t *out) {
    const int b = blockIdx.x, t = blockIdx.y, l = threadIdx.x, s = l >> 2, tt = t % Q4H_TB;
    const uint8_t *blk = act + (size_t)t * act_stride + (size_t)b * sizeof(mu_block_q8_K);
    uint8_t *st = out + ((size_t)(t / Q4H_TB) * nb + b) * Q4H_STAGE;
    const int w0 = ld32(blk + 4 + 8 * l), w1 = ld32(blk + 8 + 8 * l);
    uint4 o;
    s8x4_h(w0, s & 1, &o.x, &o.y);
    s8x4_h(w1, s & 1, &o.z, &o.w);
    *(uint4 *)(st + (l * 16 + tt / 8) * 128 + (tt % 8) * 16) = o;
    int sum = __dp4a(w0, 0x01010101, __dp4a(w1, 0x01010101, 0));
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if ((l & 3) == 0) ((float *)(st + Q4H_STB))[((s >> 1) * Q4H_TB + tt) * 2 + (s & 1)] = (float)sum;
    if (l == 0) ((float *)(st + Q4H_STB + Q4H_STS))[tt] = __int_as_float(ld32(blk));
}

/* mbarriers and bulk copies (sm_90) */
__device__ __forceinline__ void mbar_init(unsigned bar) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
#endif
}
/* bytes from src to shared dst, counted on bar (one thread) */
__device__ __forceinline__ void bulk_copy(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    unsigned ok = 0;
    while (!ok)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
#endif
}

/* d (+)= a b: one wgmma.m64n64k16, f16 operands from shared memory (da,
 * db: descriptors), f32 accumulators; acc 0: d = a b */
__device__ __forceinline__ void wgmma_h(float d[32], uint64_t da, uint64_t db, int acc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
#else
    __trap();
#endif
}
__device__ __forceinline__ void wg_fence(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit_wait(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
/* keeps the compiler's reads and writes of x on their side of a wgmma */
__device__ __forceinline__ void wg_reg(float &x) { asm volatile("" : "+f"(x)::"memory"); }

/* 1 in *out where this plugin's code for the device has wgmma (sm_90a) */
__global__ void k_wg_probe(int *out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *out = 1;
#else
    *out = 0;
#endif
}

/* a descriptor of a canonical K-major operand without swizzle: its first
 * core matrix at shared address a, the next in K lbo bytes on, in M / N
 * sbo bytes on */
__device__ __forceinline__ uint64_t wg_desc(unsigned a, unsigned lbo, unsigned sbo) {
    return (uint64_t)((a >> 4) & 0x3FFF) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}

/* shared memory: [2] weights (64 rows x 144); [2] stage blocks (bulk
 * copies of k_q8K_h's); the weights as f16, core matrix (kc, row group rg)
 * at (8 kc + rg) x 128; mins [64][8]; d, dmin [64]; two mbarriers */
#define Q4H_SW (2 * Q4H_RB * 144)
#define Q4H_SA (Q4H_RB * 512)
#define Q4H_SMEM (Q4H_SW + 2 * Q4H_STAGE + Q4H_SA + Q4H_RB * 8 * 4 + Q4H_RB * 8 + 16)

__global__ void __launch_bounds__(256, 1)
k_mm_q4K_wg(const uint8_t *w, size_t w_rb, int rows, int nb, const uint8_t *stg, int T, float *y) {
    extern __shared__ int4 s_dyn4[];
    uint8_t *sW = (uint8_t *)s_dyn4, *sG = sW + Q4H_SW, *sA = sG + 2 * Q4H_STAGE;
    float *sM = (float *)(sA + Q4H_SA), *sX = sM + Q4H_RB * 8; /* sX: d, dmin of each row */
    uint64_t *sBar = (uint64_t *)(sX + Q4H_RB * 2);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, q = lane & 3;
    const int wq = warp & 3, h = warp >> 2; /* rows 16 wq .., tokens 64 h .. */
    const int t0 = blockIdx.x * Q4H_TB, r0 = blockIdx.y * Q4H_RB;
    const q4w_plan<Q4H_RB, 256> wp(w, w_rb, r0, rows);
    const uint8_t *gsrc = stg + (size_t)blockIdx.x * nb * Q4H_STAGE;
    const unsigned aG = (unsigned)__cvta_generic_to_shared(sG), aBar = (unsigned)__cvta_generic_to_shared(sBar);
    auto stage = [&](int b, int buf) {
        if (tid == 0) bulk_copy(aG + buf * Q4H_STAGE, gsrc + (size_t)b * Q4H_STAGE, Q4H_STAGE, aBar + 8 * buf);
        wp.stage(sW + buf * (Q4H_SW / 2), b);
        cp_commit();
    };
    if (tid == 0) {
        mbar_init(aBar);
        mbar_init(aBar + 8);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
    }
    __syncthreads();
    const unsigned aA = (unsigned)__cvta_generic_to_shared(sA);
    float acc[32], accm[32], D[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = accm[i] = D[i] = 0;
    stage(0, 0);
    for (int b = 0; b < nb; b++) {
        const int cur = b & 1;
        cp_wait<0>(); /* super-block b's weights (the only group in flight) */
        mbar_wait(aBar + 8 * cur, (b >> 1) & 1); /* and its stage block */
        __syncthreads(); /* and every warp is done with b - 1's weights and buffers */
        if (b + 1 < nb) stage(b + 1, cur ^ 1);
        const uint8_t *wt = sW + cur * (Q4H_SW / 2);
        { /* the weights as f16: thread (row r, j) turns its 32 bytes of qs, 8 words */
            const int r = tid >> 2, j = tid & 3;
            const uint8_t *x = wt + r * 144;
            int sw[3], S[2], Mn[2];
#pragma unroll
            for (int i = 0; i < 3; i++) sw[i] = ld32(x + 4 + 4 * i);
            k4_unpack(sw, S, Mn);
            const int Sj = j >> 1 ? S[1] : S[0], k0 = 2 * (j & 1);
            const __half2 sl = byte_h2(Sj, k0), sh = byte_h2(Sj, k0 + 1);
            const __half2 ol = __hmul2(sl, __float2half2_rn(-1024.f)), oh = __hmul2(sh, __float2half2_rn(-1024.f));
            const int4 q0 = *(const int4 *)(x + 16 + 32 * j), q1 = *(const int4 *)(x + 32 + 32 * j);
            const int qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
            uint8_t *ar = sA + (r >> 3) * 128 + (r & 7) * 16;
#pragma unroll
            for (int i = 0; i < 8; i++) { /* elements 4i .. 4i + 3 of sub-blocks 2j (low) and 2j + 1 (high) */
                uint2 lo, hi;
                q4_frag((unsigned)qw[i], sl, ol, sh, oh, &lo.x, &lo.y, &hi.x, &hi.y);
                *(uint2 *)(ar + (8 * j + i / 2) * 8 * 128 + (i & 1) * 8) = lo;
                *(uint2 *)(ar + (8 * j + 4 + i / 2) * 8 * 128 + (i & 1) * 8) = hi;
            }
            if (tid < Q4H_RB) { /* row tid's mins as floats, its d and dmin */
                const uint8_t *xr = wt + tid * 144;
                int mw[3], Sx[2], Mx[2];
#pragma unroll
                for (int i = 0; i < 3; i++) mw[i] = ld32(xr + 4 + 4 * i);
                k4_unpack(mw, Sx, Mx);
                float4 m0, m1;
                m0.x = byte_f(Mx[0], 0), m0.y = byte_f(Mx[0], 1), m0.z = byte_f(Mx[0], 2), m0.w = byte_f(Mx[0], 3);
                m1.x = byte_f(Mx[1], 0), m1.y = byte_f(Mx[1], 1), m1.z = byte_f(Mx[1], 2), m1.w = byte_f(Mx[1], 3);
                *(float4 *)(sM + tid * 8) = m0;
                *(float4 *)(sM + tid * 8 + 4) = m1;
                const unsigned hd = (unsigned)ld32(xr);
                *(float2 *)(sX + 2 * tid) = make_float2(h2f((uint16_t)hd), h2f((uint16_t)(hd >> 16)));
            }
        }
        /* the f16 weights came by plain stores: to the async proxy (the token tile came by it) */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
        __syncthreads();
        const uint8_t *gb = sG + cur * Q4H_STAGE;
        const float *sd = (const float *)(gb + Q4H_STB + Q4H_STS) + 64 * h;
        const float2 xa = *(const float2 *)(sX + 2 * (16 * wq + g)), xb = *(const float2 *)(sX + 2 * (16 * wq + g + 8));
        float dd[32], dm[32]; /* the chain factors of this block: [8-token tile i][4] */
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float v = sd[8 * i + 2 * q + (k & 1)];
                dd[4 * i + k] = (k >> 1 ? xb.x : xa.x) * v;
                dm[4 * i + k] = (k >> 1 ? xb.y : xa.y) * v;
            }
        const float *ss = (const float *)(gb + Q4H_STB) + (64 * h + 2 * q) * 2;
        const unsigned bB = aG + cur * Q4H_STAGE + 8 * h * 128;
#pragma unroll 1
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int i = 0; i < 32; i++) wg_reg(D[i]);
            wg_fence();
#pragma unroll
            for (int st = 0; st < 4; st++) { /* k16 step s: chunks 2s, 2s + 1 */
                const int s = 4 * j + st;
                wgmma_h(D, wg_desc(aA + 2 * s * 8 * 128, 8 * 128, 128), wg_desc(bB + 2 * s * 16 * 128, 16 * 128, 128), st);
            }
            wg_commit_wait();
#pragma unroll
            for (int i = 0; i < 32; i++) wg_reg(D[i]);
            const float2 ma = *(const float2 *)(sM + (16 * wq + g) * 8 + 2 * j); /* rows a, b: sub-blocks 2j, 2j + 1 */
            const float2 mb = *(const float2 *)(sM + (16 * wq + g + 8) * 8 + 2 * j);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float4 bs = *(const float4 *)(ss + j * Q4H_TB * 2 + i * 16); /* tokens 2q, 2q + 1 */
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    /* the min part: exact (< 2^20) */
                    const float2 m = k >> 1 ? mb : ma;
                    const float im = fmaf(m.y, k & 1 ? bs.w : bs.y, m.x * (k & 1 ? bs.z : bs.x));
                    acc[4 * i + k] = fmaf(D[4 * i + k], dd[4 * i + k], acc[4 * i + k]);
                    accm[4 * i + k] = fmaf(im, dm[4 * i + k], accm[4 * i + k]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int t = t0 + 64 * h + 8 * i + 2 * q + (k & 1), r = r0 + 16 * wq + g + (k >> 1) * 8;
            if (t < T && r < rows) y[(size_t)t * rows + r] = acc[4 * i + k] - accm[4 * i + k];
        }
}

/* ---- Q6_K --------------------------------------------------------------
 * The CPU keeps eight lane sums per (row, token): lane m adds, over the 8
 * chunks c of 32 of a super-block, scale(c, m) * (the 4-byte dot of bytes
 * 4m..4m+3 of chunk c), minus 32 x (scale 2m x bsum 2m + scale 2m+1 x bsum
 * 2m+1) (the 16-element sub-blocks 2m and 2m+1: the offset is not lane m's
 * own); each lane folds its integer into its own float chain, and the
 * output is hsum8 of the eight chains. Lane m's 32 bytes (4 of each chunk)
 * are the k = 32 of one mma, with the scales in the weights: w = scale *
 * q6 (|w| <= 8064) is split as 64 * hi + lo with hi and lo int8 (lo in
 * 0..63); the offset term is a third mma (the two sub-block scales
 * broadcast over their 16 elements, times the activations in their natural
 * order). With hi started at MAGIC_I / 2, the term at 0 and lo at MAGIC_I,
 * hi + hi - term is MAGIC_I + 2 hi - term, |2 hi - term| < 2^21, and
 * fmaf(2 hi - term, 32, lo) rounds lane m's integer 32 x (2 hi - term) + lo
 * once, as the CPU's conversion does.
 * A warp takes two of the eight chains, p and p + 4 (the pair hsum8 adds
 * first), of 16 rows x 8 NN tokens; the four warps p of a row group meet
 * in shared memory at the end and add (h0 + h2) + (h1 + h3), h_p the sum of
 * chains p and p + 4, as hsum8 does. A thread block: four row groups (64
 * rows), 16 warps, sharing the weight and activation tiles through shared
 * memory (cp.async, double-buffered; a weight row's block as the 16-byte
 * words around it, at most 14, read at its offset). With all eight chains
 * in a warp (32 tokens, 128 registers of chains) eight warps ran an SM,
 * and FFN down took 2.07 ms at 512 tokens against 2.01 with this split
 * (1.96 once the copies' addresses were formed once a launch; Q6_NN 6: 8
 * spills, 4 reads the weights twice as often: bench/results/cuda-q6mw-2026-12-06). */

#define Q6_SW 65      /* words per token row of the activation tile: banks g + 8q + m distinct */
#define Q6_NN 6       /* 8 Q6_NN tokens a thread block */
#define Q6W_ROW 224   /* shared bytes a weight row: 14 words of 16 bytes */
#define Q6_THREADS 512 /* 16 warps: four row groups of 16 rows x four chain pairs */

/* w = sc * u for the four bytes u (0..63) of U, as 64 * hi + lo */
__device__ __forceinline__ void q6_split(int U, int sc, int *hi, int *lo) {
    /* two bytes per 16-bit field, each field biased by 8192 to stay >= 0
     * (8192 = 64 * 128: lo unchanged, hi + 128); a negative sc borrows
     * across the fields, which the final fields (all in 0..65535) undo */
    const int e = (U & 0x00FF00FF) * sc + 0x20002000;
    const int o = ((U >> 8) & 0x00FF00FF) * sc + 0x20002000;
    *lo = (e & 0x003F003F) | ((o & 0x003F003F) << 8);
    *hi = (((e >> 6) & 0x00FF00FF) | (((o >> 6) & 0x00FF00FF) << 8)) ^ (int)0x80808080;
}

/* A thread's copies of the weight tile: super-block b of rows r0 .. r0 + 63
 * (clamped to the last row), each as the 16-byte words that hold its 212
 * bytes (row i / 14, word i % 14: at 16 i in the tile, for i = tid + 512
 * k); the rows' addresses are formed once. (The device weights end with 32
 * spare bytes: upload.) */
struct q6w_plan {
    static constexpr int NW = 64 * 14, K = (NW + Q6_THREADS - 1) / Q6_THREADS;
    const uint8_t *row[K]; /* the row's block 0 */
    int c[K];
    __device__ __forceinline__ q6w_plan(const uint8_t *w, size_t w_rb, int r0, int rows) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = min((int)threadIdx.x + Q6_THREADS * k, NW - 1), r = i / 14;
            row[k] = w + (size_t)(r0 + r < rows ? r0 + r : rows - 1) * w_rb;
            c[k] = i % 14;
        }
    }
    /* starts copying super-block b into s_w; no commit */
    __device__ __forceinline__ void stage(uint8_t *s_w, int b) const {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = threadIdx.x + Q6_THREADS * k;
            const uint8_t *s = row[k] + (size_t)b * 212;
            const uint8_t *a0 = (const uint8_t *)((uintptr_t)s & ~(uintptr_t)15);
            if ((k < K - 1 || i < NW) && a0 + 16 * c[k] < s + 212) cp16(s_w + 16 * i, a0 + 16 * c[k]);
        }
    }
};

static size_t q6_smem(void) { return (size_t)2 * 64 * Q6W_ROW + (size_t)2 * 8 * Q6_NN * (Q6_SW + 1) * 4; }

__global__ void __launch_bounds__(Q6_THREADS, 1)
k_mm_q6K_mma(const uint8_t *w, size_t w_rb, int rows, int nb, const uint8_t *act, size_t act_stride, int T,
             float *y) {
    constexpr int NN = Q6_NN, NT = 8 * NN;
    extern __shared__ int4 s_dyn4[];
    uint8_t *s_w2 = (uint8_t *)s_dyn4;              /* [2][64][Q6W_ROW] */
    int *s_q2 = (int *)(s_w2 + 2 * 64 * Q6W_ROW);   /* [2][NT * Q6_SW] */
    float *s_d2 = (float *)(s_q2 + 2 * NT * Q6_SW); /* [2][NT] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const int rg = warp >> 2, p = warp & 3;
    const int t0 = blockIdx.x * NT, rblk = blockIdx.y * 64;
    const int ra = 16 * rg + g, rb = ra + 8; /* this thread's rows in the block */
    /* the rows' offsets in their 16-byte words (a block is 212 bytes, 13 words and 4 bytes) */
    const int oa = (int)((uintptr_t)(w + (size_t)min(rblk + ra, rows - 1) * w_rb) & 15);
    const int ob = (int)((uintptr_t)(w + (size_t)min(rblk + rb, rows - 1) * w_rb) & 15);
    float acc[2][NN][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][n][k] = 0;
    const q6w_plan wp(w, w_rb, rblk, rows);
    const q8_plan<NT, Q6_SW, Q6_THREADS> ap(act, act_stride, t0, T);
    wp.stage(s_w2, 0);
    ap.stage(s_q2, s_d2, 0);
    for (int b = 0; b < nb; b++) {
        const int cur = b & 1;
        if (b + 1 < nb) { /* the next tiles load while this one is used */
            wp.stage(s_w2 + (cur ^ 1) * 64 * Q6W_ROW, b + 1);
            ap.stage(s_q2 + (cur ^ 1) * NT * Q6_SW, s_d2 + (cur ^ 1) * NT, b + 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const int *s_q = s_q2 + cur * NT * Q6_SW;
        const float *s_d = s_d2 + cur * NT;
        const uint8_t *s_w = s_w2 + cur * 64 * Q6W_ROW;
        const dq6_K *pa = (const dq6_K *)(s_w + ra * Q6W_ROW + ((oa + 4 * b) & 15));
        const dq6_K *pb = (const dq6_K *)(s_w + rb * Q6W_ROW + ((ob + 4 * b) & 15));
        const float dxa = h2f(pa->d), dxb = h2f(pb->d);
        float dd[NN][4];
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int k = 0; k < 4; k++) dd[n][k] = s_d[8 * n + 2 * q + (k & 1)] * (k >> 1 ? dxb : dxa);
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            const int m = p + 4 * mi;
            /* chunks q and q + 4 (sub-chunk q of each half) of rows a and b */
            int Ah[4], Al[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const dq6_K *x = (i & 1) ? pb : pa;
                const int h = i >> 1, c = q + 4 * h;
                const int ql = (ld32(x->ql + 64 * h + (q & 1) * 32 + 4 * m) >> ((q >> 1) * 4)) & 0x0F0F0F0F;
                const int qh = (ld32(x->qh + 32 * h + 4 * m) >> (2 * q)) & 0x03030303;
                q6_split(ql | (qh << 4), (int)x->scales[2 * c + mi], &Ah[i], &Al[i]);
            }
            /* the offset term: sub-blocks 2m (k < 16) and 2m + 1 of rows a and b, scales broadcast */
            const int Ao[4] = {(int)(uint8_t)pa->scales[2 * m] * 0x01010101, (int)(uint8_t)pb->scales[2 * m] * 0x01010101,
                               (int)(uint8_t)pa->scales[2 * m + 1] * 0x01010101,
                               (int)(uint8_t)pb->scales[2 * m + 1] * 0x01010101};
#pragma unroll
            for (int n = 0; n < NN; n++) {
                const int *bp = s_q + (8 * n + g) * Q6_SW + 8 * q + m;
                const int B[2] = {bp[0], bp[32]};
                const int *bq = s_q + (8 * n + g) * Q6_SW + 8 * m + q; /* elements 32m.. in order */
                const int Bo[2] = {bq[0], bq[4]};
                int Ch[4], Cl[4], Co[4];
                mma_s8_c(Ch, Ah, B, MAGIC_I / 2);
                mma_s8_c(Cl, Al, B, MAGIC_I);
                mma_s8_c(Co, Ao, Bo, 0);
#pragma unroll
                for (int k = 0; k < 4; k++)
                    acc[mi][n][k] =
                        fmaf(dd[n][k], fmaf(magic_x(Ch[k] + Ch[k] - Co[k]), 32.f, magic_x(Cl[k])), acc[mi][n][k]);
            }
        }
        __syncthreads(); /* the tiles of b are free for b + 2 */
    }
    /* hsum8's tree over the row group's four warps, in the activation tiles */
    float *s_h = (float *)s_q2; /* [4 row groups][2][NN][4][32 lanes] */
    auto hslot = [&](int sl, int n, int k) -> float & { return s_h[(((rg * 2 + sl) * NN + n) * 4 + k) * 32 + lane]; };
    float hh[NN][4];
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            hh[n][k] = acc[0][n][k] + acc[1][n][k]; /* h_p */
            if (p >= 2) hslot(p - 2, n, k) = hh[n][k];
        }
    __syncthreads();
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (p < 2) hh[n][k] = hh[n][k] + hslot(p, n, k); /* h0 + h2; h1 + h3 */
    __syncthreads();
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (p == 1) hslot(1, n, k) = hh[n][k];
    __syncthreads();
    if (p != 0) return;
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int t = t0 + 8 * n + 2 * q + (k & 1), r = rblk + 16 * rg + g + (k >> 1) * 8;
            if (t < T && r < rows) y[(size_t)t * rows + r] = hh[n][k] + hslot(1, n, k);
        }
}

/* ---- host side ---------------------------------------------------------- */

/* int8 mma needs compute capability 8.0; MUSER_CUDA_NO_MMA=1 turns it off
 * (to compare the two paths) */
bool cu_mma_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        int dev = 0, major = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        ok = major >= 8 && cu_env_digit("MUSER_CUDA_NO_MMA", 0) != 1;
    }
    return ok;
}

/* MUSER_CUDA_Q4_WG=0: Q4_K prefill on the int8 kernel alone (k_mm_q4K_tc),
 * to compare the two */
static bool q4wg_on(void) {
    static int on = -1;
    if (on < 0) { /* and the plugin's code for this device has wgmma */
        on = 0;
        int *p = NULL, v = 0;
        if (cu_env_digit("MUSER_CUDA_Q4_WG", 1) != 0 && cudaMalloc((void **)&p, sizeof(int)) == cudaSuccess) {
            k_wg_probe<<<1, 1>>>(p);
            if (cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess) on = v == 1;
            cudaFree(p);
        }
        cudaGetLastError();
        if (on) {
            cudaFuncSetAttribute(k_mm_q4K_wg, cudaFuncAttributeMaxDynamicSharedMemorySize, Q4H_SMEM);
            int dev = 0;
            cudaMemPool_t pool;
            cudaGetDevice(&dev);
            if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) { /* keep the scratch between prefill chunks */
                uint64_t keep = UINT64_MAX;
                cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
            }
        }
    }
    return on;
}

/* The wgmma kernel's tiles of 128 tokens whose tokens are all below n_batch
 * (for T >= 64: more tokens than any captured graph's), the activations'
 * f16 copy in stream-ordered scratch; returns the tokens taken (0: none,
 * the int8 kernel takes them). */
static int q4wg_launch(cudaStream_t st, const uint8_t *wd, size_t rb, int rows, int nb, const uint8_t *a,
                       size_t act_stride, int T, int n_batch, float *y) {
    const int ht = T < 64 || rows < 1024 || !q4wg_on() ? 0 : n_batch >= T ? (T + Q4H_TB - 1) / Q4H_TB : n_batch / Q4H_TB;
    if (ht == 0) return 0;
    const int Tp = ht * Q4H_TB, Tc = T < Tp ? T : Tp;
    uint8_t *p = NULL;
    if (cudaMallocAsync((void **)&p, (size_t)ht * nb * Q4H_STAGE, st) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    k_q8K_h<<<dim3(nb, Tc), 32, 0, st>>>(a, act_stride, nb, p);
    k_mm_q4K_wg<<<dim3(ht, (rows + Q4H_RB - 1) / Q4H_RB), 256, Q4H_SMEM, st>>>(wd, rb, rows, nb, p, T, y);
    cudaFreeAsync(p, st);
    return Tc;
}

/* Q4_K: the wgmma kernel's tiles, then the rest on the int8 one (32 tokens
 * a tile: below n_batch, then the tiles with the per-super-block steps,
 * MIXED) */
static void q4K_launch(cudaStream_t st, const uint8_t *wd, size_t rb, int rows, int nb, const uint8_t *a,
                       size_t act_stride, int T, int n_batch, float *y) {
    constexpr int NN = 4, WB = 8, NT = 8 * NN, sm = 2 * 16 * WB * 144;
    static bool big;
    if (!big) {
        cudaFuncSetAttribute(k_mm_q4K_tc<NN, WB, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm);
        cudaFuncSetAttribute(k_mm_q4K_tc<NN, WB, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm);
        big = true;
    }
    const int t_done = q4wg_launch(st, wd, rb, rows, nb, a, act_stride, T, n_batch, y);
    if (t_done >= T) return;
    const int tiles = (T + NT - 1) / NT, tile0 = t_done / NT, ry = (rows + 16 * WB - 1) / (16 * WB);
    const int fast = n_batch >= T ? tiles : n_batch / NT > tile0 ? n_batch / NT : tile0; /* tiles below n_batch end */
    if (fast > tile0)
        k_mm_q4K_tc<NN, WB, false><<<dim3(fast - tile0, ry), 32 * WB, sm, st>>>(wd, rb, rows, nb, a, act_stride, T,
                                                                               n_batch, y, tile0);
    if (tiles > fast)
        k_mm_q4K_tc<NN, WB, true><<<dim3(tiles - fast, ry), 32 * WB, sm, st>>>(wd, rb, rows, nb, a, act_stride, T,
                                                                              n_batch, y, fast);
}

static void q6K_launch(cudaStream_t st, const uint8_t *wd, size_t rb, int rows, int nb, const uint8_t *a,
                       size_t act_stride, int T, float *y) {
    static bool big;
    if (!big) {
        cudaFuncSetAttribute(k_mm_q6K_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)q6_smem());
        big = true;
    }
    const dim3 grid((unsigned)((T + 8 * Q6_NN - 1) / (8 * Q6_NN)), (unsigned)((rows + 63) / 64));
    k_mm_q6K_mma<<<grid, Q6_THREADS, q6_smem(), st>>>(wd, rb, rows, nb, a, act_stride, T, y);
}

bool cu_matmul_mma(cudaStream_t st, const dtensor *w, const void *act, size_t act_stride, int T, int n_batch, float *y) {
    if (!cu_mma_ok()) return false;
    const int rows = w->ne1, n = w->ne0;
    const uint8_t *wd = (const uint8_t *)w->d, *a = (const uint8_t *)act;
    if (w->type == MU_T_Q4_K) {
        q4K_launch(st, wd, w->row_bytes, rows, n / 256, a, act_stride, T, n_batch, y);
        return true;
    }
    if (w->type == MU_T_Q6_K) {
        q6K_launch(st, wd, w->row_bytes, rows, n / 256, a, act_stride, T, y);
        return true;
    }
    return false;
}
