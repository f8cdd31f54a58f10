/* gpu_cuda_mmq.cu: prefill matmuls (more tokens than a decode step) of
 * Q4_K and Q6_K on the int8 tensor cores, and of Q8_0 and NVFP4 by dp4a in
 * tiles, with the CPU's chains.
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

/* byte k of x (a scale, < 2^8), exactly as a float */
__device__ __forceinline__ float byte_f(int x, int k) {
    return magic_x((int)__byte_perm((unsigned)x, (unsigned)MAGIC_I, 0x7650 | k));
}

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
    const int t_done = cu_mm_q4K_wg(st, wd, rb, rows, nb, a, act_stride, T, n_batch, y);
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

/* ---- Q8_0 and NVFP4 --------------------------------------------------------
 * The CPU's dots of these types (kern_ref.c mu_vec_dot_q8_0_ref,
 * mu_vec_dot_nvfp4_ref) keep eight lane chains a row: per 32 elements,
 * chain l takes the integer sum s of elements 4l .. 4l + 3 (weight code
 * times activation byte) as fmaf(f, (float)s, acc_l), f = f16(d_w) x
 * f16(d_a) (Q8_0) or scale(d[2h + l / 4]) x f16(d_a) (NVFP4, half h of a
 * block of 64); hsum8 of the chains at the end. A chain step per four
 * products leaves the tensor cores little to do (an mma's sums span 32
 * products), so k_mm_q8t takes each four-product sum from one dp4a
 * started at MAGIC_I (|s| <= 4 x 128 x 128 < 2^22, so one float
 * subtraction gives (float)s). A thread block: 64 rows x 32 tokens, 256
 * threads; thread (warp w, lane i): rows 2i, 2i + 1 and tokens 4w .. 4w +
 * 3 of the tile, all eight chains of those eight outputs. The weight
 * blocks (36 bytes as uploaded) and activation blocks of KB weight blocks
 * a step are copied into shared memory by cp.async, two steps in flight;
 * blocks past the row's end are zeros and take no chain step (a step of
 * zeros would turn a chain's -0 into +0). NVFP4's codes are decoded once a
 * step into signed bytes in shared memory (word 2 k + n: the low, n = 0,
 * or high nibbles of code word k) and its scales into floats; where an
 * activation byte of the step is -128, fp4_fix adds what x86's sign trick
 * gives there. Grid: x over token tiles, so the blocks that run together
 * share weight rows. */
#define Q8T_ROWS 64
#define Q8T_TOK 32
template <int TYPE> struct q8t {
    static constexpr bool FP4 = TYPE == MU_T_NVFP4;
    static constexpr int KB = FP4 ? 2 : 4; /* weight blocks a step */
    static constexpr int AB = FP4 ? 2 : 1; /* activation blocks a weight block */
    static constexpr int ELEMS = FP4 ? 64 : 32;
};
template <int TYPE>
__global__ void __launch_bounds__(256) k_mm_q8t(const uint8_t *w, size_t w_rb, int rows, int nb, const uint8_t *act,
                                                size_t act_stride, int T, float *y) {
    constexpr bool FP4 = q8t<TYPE>::FP4;
    constexpr int KB = q8t<TYPE>::KB, AB = q8t<TYPE>::AB;
    __shared__ int s_w[2][KB][Q8T_ROWS][9], s_a[2][KB * AB][Q8T_TOK][9];
    __shared__ int s_c[FP4 ? KB : 1][FP4 ? Q8T_ROWS : 1][17]; /* NVFP4: the decoded codes */
    __shared__ float s_s[FP4 ? KB : 1][FP4 ? Q8T_ROWS : 1][4]; /* and scales */
    const int tid = threadIdx.x, wp = tid >> 5, ln = tid & 31;
    const int t0 = blockIdx.x * Q8T_TOK, r0 = blockIdx.y * Q8T_ROWS, nst = (nb + KB - 1) / KB;
    auto issue = [&](int st) {
        if (st < nst) {
            for (int i = tid; i < Q8T_ROWS * KB * 9; i += 256) {
                const int r = i / (KB * 9), kb = i / 9 % KB, j = i % 9, b = st * KB + kb;
                const bool ok = r0 + r < rows && b < nb;
                cp4(&s_w[st & 1][kb][r][j], ok ? w + (size_t)(r0 + r) * w_rb + (size_t)b * 36 + 4 * j : w, ok);
            }
            for (int i = tid; i < Q8T_TOK * KB * AB * 9; i += 256) {
                const int t = i / (KB * AB * 9), ka = i / 9 % (KB * AB), j = i % 9, b = st * KB * AB + ka;
                const bool ok = t0 + t < T && b < nb * AB;
                cp4(&s_a[st & 1][ka][t][j], ok ? act + (size_t)(t0 + t) * act_stride + (size_t)b * 36 + 4 * j : act,
                    ok);
            }
        }
        cp_commit(); /* empty groups past the end keep the count */
    };
    float acc[2][4][8] = {};
    issue(0);
    for (int st = 0; st < nst; st++) {
        issue(st + 1);
        cp_wait<1>();
        __syncthreads();
        const int nk = nb - st * KB < KB ? nb - st * KB : KB; /* blocks of this step */
        bool neg = false;
        if constexpr (FP4) {
            for (int i = tid; i < KB * Q8T_ROWS * 8; i += 256) {
                const int kb = i / (Q8T_ROWS * 8), r = i / 8 % Q8T_ROWS, k = i % 8;
                int lo, hi;
                fp4_codes((unsigned)s_w[st & 1][kb][r][1 + k], &lo, &hi);
                s_c[kb][r][2 * k] = lo;
                s_c[kb][r][2 * k + 1] = hi;
                if (k < 4) s_s[kb][r][k] = nvfp4_scale((uint8_t)(s_w[st & 1][kb][r][0] >> (8 * k)));
            }
            int m = 0; /* an activation byte of -128 */
            for (int i = tid; i < KB * AB * Q8T_TOK * 8; i += 256) {
                const unsigned z = (unsigned)s_a[st & 1][i / (Q8T_TOK * 8)][i / 8 % Q8T_TOK][1 + i % 8] ^ 0x80808080u;
                m |= ((z - 0x01010101u) & ~z & 0x80808080u) != 0;
            }
            neg = __syncthreads_or(m);
        }
        for (int kb = 0; kb < nk; kb++) {
            const int(*ws)[9] = s_w[st & 1][kb];
#pragma unroll
            for (int h = 0; h < AB; h++) {
                const int(*as)[9] = s_a[st & 1][kb * AB + h];
                float f[2][4][2]; /* the chain steps' factors: rows, tokens, chains 0-3 / 4-7 */
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int t = 0; t < 4; t++) {
                        const float da = h2f((uint16_t)as[4 * wp + t][0]);
                        if constexpr (FP4) {
                            f[r][t][0] = s_s[kb][2 * ln + r][2 * h] * da;
                            f[r][t][1] = s_s[kb][2 * ln + r][2 * h + 1] * da;
                        } else {
                            f[r][t][0] = f[r][t][1] = h2f((uint16_t)ws[2 * ln + r][0]) * da;
                        }
                    }
#pragma unroll
                for (int l = 0; l < 8; l++) {
                    /* chain l's four codes: Q8_0 word l; NVFP4 code word 4 h + 2 (l / 4) + l % 2, its
                     * low nibbles for l % 4 < 2, else its high ones */
                    int c[2];
#pragma unroll
                    for (int r = 0; r < 2; r++)
                        c[r] = FP4 ? s_c[kb][2 * ln + r][2 * (4 * h + 2 * (l >> 2) + (l & 1)) + ((l >> 1) & 1)]
                                   : ws[2 * ln + r][1 + l];
#pragma unroll
                    for (int t = 0; t < 4; t++) {
                        const int a = as[4 * wp + t][1 + l];
#pragma unroll
                        for (int r = 0; r < 2; r++) {
                            int s = __dp4a(c[r], a, MAGIC_I);
                            if (FP4 && neg) s += fp4_fix(c[r], a);
                            acc[r][t][l] = fmaf(f[r][t][l >> 2], magic_x(s), acc[r][t][l]);
                        }
                    }
                }
            }
        }
        __syncthreads(); /* the stage (and NVFP4's decoded step) is free again */
    }
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const int row = r0 + 2 * ln + r, tok = t0 + 4 * wp + t;
            if (row < rows && tok < T) y[(size_t)tok * rows + row] = hsum8(acc[r][t]);
        }
}

/* Q8_0 and NVFP4 matmuls of more than Q8T_MIN_T tokens take k_mm_q8t;
 * MUSER_CUDA_Q8_TILE=0: k_mm_q (to compare) */
#define Q8T_MIN_T 16
static bool q8_tile(int T) {
    static const bool on = cu_env_digit("MUSER_CUDA_Q8_TILE", 1) != 0;
    return on && T > Q8T_MIN_T;
}

bool cu_matmul_mma(cudaStream_t st, const dtensor *w, const void *act, size_t act_stride, int T, int n_batch, float *y) {
    const int rows = w->ne1, n = w->ne0;
    const uint8_t *wd = (const uint8_t *)w->d, *a = (const uint8_t *)act;
    if ((w->type == MU_T_Q8_0 || w->type == MU_T_NVFP4) && q8_tile(T)) {
        const dim3 grid((unsigned)((T + Q8T_TOK - 1) / Q8T_TOK), (unsigned)((rows + Q8T_ROWS - 1) / Q8T_ROWS));
        if (w->type == MU_T_Q8_0) k_mm_q8t<MU_T_Q8_0><<<grid, 256, 0, st>>>(wd, w->row_bytes, rows, n / 32, a, act_stride, T, y);
        else k_mm_q8t<MU_T_NVFP4><<<grid, 256, 0, st>>>(wd, w->row_bytes, rows, n / 64, a, act_stride, T, y);
        return true;
    }
    if (!cu_mma_ok()) return false;
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
