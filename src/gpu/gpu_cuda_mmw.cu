/* gpu_cuda_mmw.cu: Q4_K prefill on Hopper's wgmma (sm_90a): f16
 * tensor-core products of exact integers, summed exactly in fp32, and the
 * CPU's chains on the CUDA cores. The int8 kernel of gpu_cuda_mmq.cu takes
 * what this one does not (other GPUs, small matrices, few tokens, tokens
 * past n_batch). */
#include <mutex>

#include "mm.cuh"

/* ---- Q4_K on the f16 tensor cores (wgmma, sm_90a) ---------------------------
 * The same chain steps as k_mm_q4K_tc, with each 64-element step's isum
 * from f16 products, f32 accumulators: the weights enter as scale x nibble
 * (<= 63 x 15 = 945, an exact f16), the activations as their bytes (exact),
 * so every product is an integer below 2^17 and the partial sums of a step
 * stay integers below 2^23 (7.7 x 10^6 at the formats' largest values),
 * which the tensor cores' fp32 sums hold exactly in any order: four
 * wgmma.m64n64k16 into fresh accumulators give the step's isum = sc0 s0 +
 * sc1 s1 as the exact float the CPU converts. The min part, m0 S0 + m1 S1
 * (the sub-blocks' 6-bit mins, the tokens' sub-block sums), is one more
 * wgmma, exact too: the mins enter as 64 m and m (<= 4032), each sum S
 * (|S| <= 4096) as hi and lo with S = 64 hi + lo, so the chain step takes
 * two FMAs an output and no other arithmetic (8.7 % faster than the min
 * part from float products, which also took the shared loads of the sums;
 * 2026-12-06, bench/results/cuda-wgscratch-2026-12-06). (The int8
 * kernel spends a multiply-add on each sub-block's scale and a subtraction
 * on each conversion: 28 of its 53 instructions a unit.) The high nibbles
 * (sub-block 2j + 1) enter as 16 n, their activations as x / 16 (exact).
 * Within each group of four elements both operands hold e0, e2, e1, e3
 * (the same order on both sides: an exact sum does not depend on it), so
 * a weight word's nibble pairs need a mask each, no byte permute.
 * Activations: k_q8K_h writes each token's Q8_K block once as f16, with the
 * min part's operand and d, in the layout a thread block reads, one contiguous
 * stage block per (128-token tile, super-block), which one thread copies
 * to shared memory with one bulk copy (cp.async.bulk, an mbarrier a
 * buffer; the weights by cp.async).
 * A thread block: 64 rows x 128 tokens, two warpgroups of 64 tokens. Per
 * super-block the block turns its weights into f16 once (sA, which both
 * warpgroups' wgmma read from shared memory, as each reads its half of the
 * token tile), then each warpgroup takes the four steps: four wgmmas of the
 * isum into D and the min part's into E, then the chain steps of its (row,
 * token) pairs, accumulator D[4 i + k] (and E[4 i + k]) being row 16 (warp
 * % 4) + g + 8 (k / 2), token 8 i + 2 q + k % 2 of its half. (With the min
 * part from float products, a second set of accumulators let step j + 1's
 * wgmmas run beside step j's chain steps, 2 % faster; the registers of the
 * min part's accumulators leave no room for that now.)
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
 * the kernel copies them to shared memory in one bulk copy: step j's
 * operand of the min part, 128 tokens x 8 f16 (core matrix (j, token group
 * tg) at (16 j + tg) x 128): a token's sums of sub-blocks 2j, 2j + 1 as hi,
 * lo each (lo = S & 63, hi = S >> 6: -64..63), then four zeros; the 128
 * tokens' bytes as f16 in fragment order, core matrix (kc, tg) at Q4H_STM
 * + (16 kc + tg) x 128 (kc: the super-block's 8-element chunk; a token's
 * 16 bytes at 16 x its place in the group); d [128]. */
#define Q4H_STM (4 * Q4H_TB * 16)
#define Q4H_STB (Q4H_TB * 512)
#define Q4H_STAGE (Q4H_STM + Q4H_STB + Q4H_TB * 4)

/* x (|x| <= 4096) as f16 (hi, lo): x = 64 hi + lo, hi = x >> 6 (-64..63),
 * lo = x & 63 */
__device__ __forceinline__ unsigned hilo_h2(int x) {
    return h2u(__halves2half2(__int2half_rn(x >> 6), __int2half_rn(x & 63)));
}

/* Token t's Q8_K block b (act rows act_stride bytes apart) into its stage
 * block: tile t / 128's block b of nb. A warp a block; lane l takes the
 * 8-element chunk l; a sub-block's sum is the block's two bsums. */
__global__ void k_q8K_h(const uint8_t *act, size_t act_stride, int nb, uint8_t *out) {
    const int b = blockIdx.x, t = blockIdx.y, l = threadIdx.x, s = l >> 2, tt = t % Q4H_TB;
    const uint8_t *blk = act + (size_t)t * act_stride + (size_t)b * sizeof(mu_block_q8_K);
    uint8_t *st = out + ((size_t)(t / Q4H_TB) * nb + b) * Q4H_STAGE;
    const int w0 = ld32(blk + 4 + 8 * l), w1 = ld32(blk + 8 + 8 * l);
    uint4 o;
    s8x4_h(w0, s & 1, &o.x, &o.y);
    s8x4_h(w1, s & 1, &o.z, &o.w);
    *(uint4 *)(st + Q4H_STM + (l * 16 + tt / 8) * 128 + (tt % 8) * 16) = o;
    if ((l & 7) == 0) { /* step j = l / 8: sub-blocks 2j, 2j + 1 */
        const int16_t *bs = (const int16_t *)(blk + offsetof(mu_block_q8_K, bsums));
        const int j = l >> 3, s0 = bs[4 * j] + bs[4 * j + 1], s1 = bs[4 * j + 2] + bs[4 * j + 3];
        *(uint4 *)(st + (16 * j + tt / 8) * 128 + (tt % 8) * 16) = make_uint4(hilo_h2(s0), hilo_h2(s1), 0u, 0u);
    }
    if (l == 0) ((float *)(st + Q4H_STM + Q4H_STB))[tt] = __int_as_float(ld32(blk));
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
__device__ __forceinline__ void wg_commit(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* until at most N groups of this warpgroup's wgmmas are in flight */
template <int N> __device__ __forceinline__ void wg_wait(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
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
 * at (8 kc + rg) x 128; the mins as step j's operand of the min part (64
 * rows x 8 f16: 64 m(2j), m(2j), 64 m(2j + 1), m(2j + 1), four zeros; core
 * matrix (j, rg) at (8 j + rg) x 128), then a column of core matrices of
 * zeros (the operand's second 8 of k16); d, dmin [64]; two mbarriers */
#define Q4H_SW (2 * Q4H_RB * 144)
#define Q4H_SA (Q4H_RB * 512)
#define Q4H_SM (5 * Q4H_RB * 16)
#define Q4H_SMEM (Q4H_SW + 2 * Q4H_STAGE + Q4H_SA + Q4H_SM + Q4H_RB * 8 + 16)

__global__ void __launch_bounds__(256, 1)
k_mm_q4K_wg(const uint8_t *w, size_t w_rb, int rows, int nb, const uint8_t *stg, int T, float *y) {
    extern __shared__ int4 s_dyn4[];
    uint8_t *sW = (uint8_t *)s_dyn4, *sG = sW + Q4H_SW, *sA = sG + 2 * Q4H_STAGE, *sM = sA + Q4H_SA;
    float *sX = (float *)(sM + Q4H_SM); /* d, dmin of each row */
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
    if (tid < Q4H_RB) ((uint4 *)(sM + 4 * Q4H_RB * 16))[tid] = make_uint4(0u, 0u, 0u, 0u); /* the zeros */
    if (tid == 0) {
        mbar_init(aBar);
        mbar_init(aBar + 8);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
    }
    __syncthreads();
    const unsigned aA = (unsigned)__cvta_generic_to_shared(sA), aM = (unsigned)__cvta_generic_to_shared(sM);
    float acc[32], accm[32], D[32], E[32]; /* D, E: a step's isums and min parts */
#pragma unroll
    for (int i = 0; i < 32; i++) {
        acc[i] = accm[i] = D[i] = E[i] = 0;
    }
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
            if (tid < Q4H_RB) { /* row tid's mins' operand, its d and dmin */
                const uint8_t *xr = wt + tid * 144;
                int mw[3], Sx[2], Mx[2];
#pragma unroll
                for (int i = 0; i < 3; i++) mw[i] = ld32(xr + 4 + 4 * i);
                k4_unpack(mw, Sx, Mx);
                uint8_t *am = sM + (tid >> 3) * 128 + (tid & 7) * 16;
#pragma unroll
                for (int j = 0; j < 4; j++) { /* 64 m and m of sub-blocks 2j, 2j + 1: exact f16 */
                    const int m0 = (Mx[j >> 1] >> (16 * (j & 1))) & 0xFF, m1 = (Mx[j >> 1] >> (16 * (j & 1) + 8)) & 0xFF;
                    *(uint4 *)(am + j * Q4H_RB * 16) = make_uint4(h2u(__halves2half2(__int2half_rn(64 * m0), __int2half_rn(m0))),
                                                                  h2u(__halves2half2(__int2half_rn(64 * m1), __int2half_rn(m1))), 0u, 0u);
                }
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
        const float *sd = (const float *)(gb + Q4H_STM + Q4H_STB) + 64 * h;
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
        /* step j's operands: the weights' k16 steps 4j .. 4j + 3 at aA, the
         * tokens' at bB; the min part's, the mins' at aM + 1024 j (its second
         * 8 of k16 the zeros at aM + 4096), the tokens' at bM + 2048 j (its
         * second 8 any finite values: the bytes' first core matrices, which
         * meet the zeros) */
        const unsigned bM = aG + cur * Q4H_STAGE + 8 * h * 128, bB = bM + Q4H_STM;
        /* step j: its four k16 products into D, its min part into E (fresh
         * accumulators), committed as one group; then its chain steps */
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int i = 0; i < 32; i++) wg_reg(D[i]);
#pragma unroll
            for (int i = 0; i < 32; i++) wg_reg(E[i]);
            wg_fence();
#pragma unroll
            for (int st = 0; st < 4; st++) { /* k16 step s: chunks 2s, 2s + 1 */
                const int s = 4 * j + st;
                wgmma_h(D, wg_desc(aA + 2 * s * 8 * 128, 8 * 128, 128), wg_desc(bB + 2 * s * 16 * 128, 16 * 128, 128), st);
            }
            wgmma_h(E, wg_desc(aM + j * Q4H_RB * 16, (4 - j) * Q4H_RB * 16, 128),
                    wg_desc(bM + j * Q4H_TB * 16, Q4H_STM - j * Q4H_TB * 16, 128), 0);
            wg_commit();
            wg_wait<0>();
#pragma unroll
            for (int i = 0; i < 32; i++) wg_reg(D[i]);
#pragma unroll
            for (int i = 0; i < 32; i++) {
                wg_reg(E[i]);
                acc[i] = fmaf(D[i], dd[i], acc[i]);
                accm[i] = fmaf(E[i], dm[i], accm[i]);
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

/* ---- host side ---------------------------------------------------------- */

/* The plugin's code for this device has wgmma (sm_90a): a probe kernel
 * says so once (and the kernel gets its shared memory). */
static bool wg_ok(void) {
    static int on = -1;
    if (on < 0) {
        on = 0;
        int *p = NULL, v = 0;
        if (cudaMalloc((void **)&p, sizeof(int)) == cudaSuccess) {
            k_wg_probe<<<1, 1>>>(p);
            if (cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess) on = v == 1;
            cudaFree(p);
        }
        cudaGetLastError();
        if (on) cudaFuncSetAttribute(k_mm_q4K_wg, cudaFuncAttributeMaxDynamicSharedMemorySize, Q4H_SMEM);
    }
    return on;
}

/* The stage blocks' scratch: a buffer a stream, kept between launches
 * (stream order keeps one launch's blocks from the next's) and grown, the
 * stream synchronized first, when a launch needs more; never in a capture.
 * NULL: none (the int8 kernel takes the tokens). */
#define WG_STREAMS 16
static struct {
    cudaStream_t st;
    uint8_t *p;
    size_t n;
} wg_scr[WG_STREAMS];
static std::mutex wg_mu;

static uint8_t *wg_scratch(cudaStream_t st, size_t bytes) {
    cudaStreamCaptureStatus cs;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        return NULL;
    }
    std::lock_guard<std::mutex> lock(wg_mu);
    int k = -1;
    for (int i = 0; i < WG_STREAMS && k < 0; i++)
        if (wg_scr[i].p && wg_scr[i].st == st) k = i;
    if (k >= 0 && wg_scr[k].n >= bytes) return wg_scr[k].p;
    if (k >= 0) { /* grow: the stream's launches that read it are done first */
        if (cudaStreamSynchronize(st) != cudaSuccess) {
            cudaGetLastError();
            return NULL;
        }
        cudaFree(wg_scr[k].p);
        wg_scr[k].p = NULL;
    }
    for (int i = 0; i < WG_STREAMS && k < 0; i++)
        if (!wg_scr[i].p) k = i;
    if (k < 0) return NULL;
    uint8_t *p = NULL;
    if (cudaMalloc((void **)&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    wg_scr[k].st = st, wg_scr[k].p = p, wg_scr[k].n = bytes;
    return p;
}

void cu_mm_wg_release(cudaStream_t st) {
    std::lock_guard<std::mutex> lock(wg_mu);
    for (int i = 0; i < WG_STREAMS; i++)
        if (wg_scr[i].p && wg_scr[i].st == st) {
            cudaFree(wg_scr[i].p); /* waits for the device */
            wg_scr[i].p = NULL;
        }
}

/* The stage blocks this thread's last launch in a group wrote: the next
 * launch of the group with the same activations, stream and scratch reads
 * them instead of converting the activations again. */
static thread_local struct {
    bool on;
    cudaStream_t st;
    const uint8_t *p, *a;
    size_t stride;
    int nb, T;
} wg_grp;

void cu_mm_wg_group(bool on) {
    wg_grp = {};
    wg_grp.on = on;
}

/* MUSER_CUDA_Q4_WG=0: Q4_K prefill on the int8 kernel alone (k_mm_q4K_tc),
 * to compare the two */
static bool q4wg_on(void) {
    static const bool on = cu_env_digit("MUSER_CUDA_Q4_WG", 1) != 0;
    return on && wg_ok();
}

/* The wgmma kernel's tiles of 128 tokens whose tokens are all below n_batch
 * (for T >= 64: more tokens than any captured graph's), the activations'
 * f16 copy in the stream's scratch; returns the tokens taken (0: none,
 * the int8 kernel takes them). */
int cu_mm_q4K_wg(cudaStream_t st, const uint8_t *wd, size_t rb, int rows, int nb, const uint8_t *a,
                 size_t act_stride, int T, int n_batch, float *y) {
    const int ht = T < 64 || rows < 1024 || !q4wg_on() ? 0 : n_batch >= T ? (T + Q4H_TB - 1) / Q4H_TB : n_batch / Q4H_TB;
    if (ht == 0) return 0;
    const int Tp = ht * Q4H_TB, Tc = T < Tp ? T : Tp;
    uint8_t *p = wg_scratch(st, (size_t)ht * nb * Q4H_STAGE);
    if (!p) return 0;
    const bool have = wg_grp.on && wg_grp.st == st && wg_grp.p == p && wg_grp.a == a && wg_grp.stride == act_stride &&
                      wg_grp.nb == nb && wg_grp.T == Tc;
    if (!have) {
        k_q8K_h<<<dim3(nb, Tc), 32, 0, st>>>(a, act_stride, nb, p);
        if (wg_grp.on) wg_grp.st = st, wg_grp.p = p, wg_grp.a = a, wg_grp.stride = act_stride, wg_grp.nb = nb, wg_grp.T = Tc;
    }
    k_mm_q4K_wg<<<dim3(ht, (rows + Q4H_RB - 1) / Q4H_RB), 256, Q4H_SMEM, st>>>(wd, rb, rows, nb, p, T, y);
    return Tc;
}
