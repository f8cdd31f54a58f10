/* gemm_neon.c: the NEON table's matrix-matrix kernels (prefill).
 * Owns: gemm entries and the batch-path dots (vec_dot_batch) of the NEON
 * table, in the rounding kern_ref.c defines, bit for bit: gemm for Q4_K
 * (per-64 "repack gemm" order, its last n_t % 4 activation rows in the
 * vec_dot order), Q5_K, Q6_K, Q8_0 and NVFP4 (the vec_dot lanes), F32, F16
 * and BF16 (llamafile tinyBLAS orders; BF16 with the ref's denormal
 * flushing), and
 * the single-row vec_dot_batch of F32, F16, BF16 and Q4_K.
 * Does not: decide which rows take which path (forward.c does), or define
 * numerics (kern_ref.c).
 * Design: a gemm pass is a tile of 1-2 weight rows x 4 activation rows. For
 * Q4_K the 4 activation rows are the 4 lanes of the float accumulators, so
 * each lane runs exactly the ref's sequential FMA chain for its row; the
 * integer pair sums of the 4 rows are reduced into those lanes by a pairwise
 * add tree. For the other types the ref's own lanes (8 or 16 per dot) are
 * kept, one accumulator set per activation row. Each weight block is
 * decoded once per tile and used for all 4 rows; a chunk of weight rows
 * (about 32 KiB) is swept by every activation quad before the next chunk,
 * so the weights come from memory once per call. Like kern_neon.c, the int8
 * dots come in an SDOT variant and a widening-multiply one for CPUs without
 * the dot-product extension, chosen at fill time (mu_kern_neon_has_sdot);
 * here one always-inlined body takes the choice as a constant.
 * Speed: written for register tiling (no spills in the SDOT tiles with GCC
 * 12), checked for exactness under qemu only; not measured on hardware. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kern.h"

#define AI __attribute__((always_inline)) static inline

/* GCC's first scheduling pass hoists the loads of the unrolled tiles ahead
 * of their use and spills registers to the stack (the Q6_K tile: 118 spill
 * loads/stores in the SDOT variant, 307 in the other); without it, none. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-schedule-insns")
#endif

int mu_kern_neon_has_sdot(void); /* kern_neon.c */

/* The table's own single dots for the paths that fall back to them. */
static mu_vec_dot_fn vd_f32, vd_f16, vd_bf16;

/* ---- shared pieces ------------------------------------------------------ */

/* acc + sums of 4-byte groups of a*b (lane i = bytes 4i..4i+3). The
 * widening form pairs products in 16 bits: |pair| <= 2 * 128 * 127 < 2^15
 * (activations are never -128). */
AI int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b, const int sd) {
    if (sd) return vdotq_s32(acc, a, b);
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vaddq_s32(acc, vpaddlq_s16(vpaddq_s16(lo, hi)));
}

/* Two F16 values (p[0], p[1]) as floats, exactly (FCVTL). */
AI float32x2_t f16x2(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return vget_low_f32(vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(v))));
}

AI float f16_1(mu_f16 h) { return vget_lane_f32(vget_low_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h)))), 0); }

/* The ref's hsum8 of lanes (a0 | a1): ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)). */
AI float hsum8_v(float32x4_t a0, float32x4_t a1) {
    const float32x4_t h = vaddq_f32(a0, a1);
    return vpadds_f32(vadd_f32(vget_low_f32(h), vget_high_f32(h)));
}

/* The ref's hsum16 of the 16 lanes q0 | q1 | q2 | q3. */
AI float hsum16_v(float32x4_t q0, float32x4_t q1, float32x4_t q2, float32x4_t q3) {
    return hsum8_v(vaddq_f32(q0, q2), vaddq_f32(q1, q3));
}

/* Lanes 0..tn-1 of v to y[0], y[ys], ... */
AI void store_lanes(float32x4_t v, float *y, int ys, int tn) {
    float l[4];
    vst1q_f32(l, v);
#pragma GCC unroll 4
    for (int t = 0; t < tn; t++) y[(size_t)t * ys] = l[t];
}

/* Pointers to 4 activation rows starting at row t0 of a; rows past the
 * last (t0 + tn) repeat it, so a partial quad computes valid data. */
AI void quad_rows(const uint8_t *a, size_t as, int t0, int tn, const uint8_t *at[4]) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) at[t] = a + (size_t)(t0 + (t < tn ? t : tn - 1)) * as;
}

/* Weight rows per cache chunk: about 32 KiB, even, at least 2. */
static int rows_per_chunk(size_t ws) {
    size_t c = (32u << 10) / (ws ? ws : 1);
    c = c < 2 ? 2 : c > 4096 ? 4096 : c;
    return (int)(c & ~(size_t)1);
}

/* ---- Q4_K --------------------------------------------------------------- */

/* 6-bit scales (bytes 0..7 of u) and mins (bytes 8..15) of a Q4_K block. */
AI void k4_scales(const uint8_t *scales, uint32_t u[4]) {
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t mins_lo = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = mins_lo;
    u[0] &= 0x3f3f3f3fu;
}

/* [imin_0..imin_3] of one activation block: imin_j = mn[2j] * (bsums[4j] +
 * bsums[4j+1]) + mn[2j+1] * (bsums[4j+2] + bsums[4j+3]). pr: the bsum pairs. */
AI int32x4_t q4k_imins(int16x8_t pr, int16x8_t mn) {
    return vpaddq_s32(vmull_s16(vget_low_s16(pr), vget_low_s16(mn)), vmull_high_s16(pr, mn));
}

AI int16x8_t bsum_pairs(const mu_block_q8_K *b) { return vpaddq_s16(vld1q_s16(b->bsums), vld1q_s16(b->bsums + 8)); }

AI int16x8_t q4k_mins16(const uint32_t u[4]) {
    return vreinterpretq_s16_u16(vmovl_u8(vld1_u8((const uint8_t *)&u[2])));
}

/* Partial lanes of sc[2j] * (low nibbles . q8[64j..+32]) + sc[2j+1] * (high
 * nibbles . q8[64j+32..+32]); w[0..3]: low 0..15, low 16..31, high 0..15, high 16..31. */
AI int32x4_t q4k_part(const int8x16_t w[4], const int8_t *q8, int s0, int s1, const int sd) {
    const int32x4_t z = vdupq_n_s32(0);
    const int32x4_t pl = dot16(dot16(z, w[0], vld1q_s8(q8), sd), w[1], vld1q_s8(q8 + 16), sd);
    const int32x4_t ph = dot16(dot16(z, w[2], vld1q_s8(q8 + 32), sd), w[3], vld1q_s8(q8 + 48), sd);
    return vmlaq_n_s32(vmulq_n_s32(pl, s0), ph, s1);
}

AI void q4k_unpack(const uint8_t *qs, int8x16_t w[4]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    const uint8x16_t b0 = vld1q_u8(qs), b1 = vld1q_u8(qs + 16);
    w[0] = vreinterpretq_s8_u8(vandq_u8(b0, m4));
    w[1] = vreinterpretq_s8_u8(vandq_u8(b1, m4));
    w[2] = vreinterpretq_s8_u8(vshrq_n_u8(b0, 4));
    w[3] = vreinterpretq_s8_u8(vshrq_n_u8(b1, 4));
}

/* Lane sums of 4 vectors: [sum v0, sum v1, sum v2, sum v3] (exact, integers). */
AI int32x4_t hsum4x4(int32x4_t v0, int32x4_t v1, int32x4_t v2, int32x4_t v3) {
    return vpaddq_s32(vpaddq_s32(v0, v1), vpaddq_s32(v2, v3));
}

/* The ref's vec_dot_batch (per-64 order) of one row: integer sums for the
 * 4 pairs of sub-blocks, then the sequential FMA chains acc, accm. */
AI float q4k_batch_body(int n, const void *w, const void *act, const int sd) {
    const mu_block_q4_K *x = w;
    const mu_block_q8_K *y = act;
    float acc = 0, accm = 0;
    uint32_t u[4];
    for (int i = 0; i < n / MU_QK_K; i++) {
        k4_scales(x[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        int32x4_t v[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            int8x16_t q[4];
            q4k_unpack(x[i].qs + 32 * j, q);
            v[j] = q4k_part(q, y[i].qs + 64 * j, sc[2 * j], sc[2 * j + 1], sd);
        }
        float is[4], im[4];
        vst1q_f32(is, vcvtq_f32_s32(hsum4x4(v[0], v[1], v[2], v[3])));
        vst1q_f32(im, vcvtq_f32_s32(q4k_imins(bsum_pairs(&y[i]), q4k_mins16(u))));
        const float32x2_t dd = f16x2(&x[i].d); /* d, dmin */
        const float d = vget_lane_f32(dd, 0) * y[i].d, dm = vget_lane_f32(dd, 1) * y[i].d;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            acc = fmaf(is[j], d, acc);
            accm = fmaf(im[j], dm, accm);
        }
    }
    return acc - accm;
}

static float vec_dot_q4_K_batch_sdot(int n, const void *w, const void *a) { return q4k_batch_body(n, w, a, 1); }
static float vec_dot_q4_K_batch_mull(int n, const void *w, const void *a) { return q4k_batch_body(n, w, a, 0); }

/* RW (1 or 2) weight rows from w (ws apart) x the 4 activation rows at[]:
 * lane t of acc[r] is row t's chain. per64: the vec_dot_batch order (one FMA
 * per 64 values), else the vec_dot one (one per block). */
AI void q4k_tile(int nb, const uint8_t *w, size_t ws, const uint8_t *const at[4], float *y, int ys, int tn,
                 const int RW, const int per64, const int sd) {
    float32x4_t acc[2], accm[2];
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++) acc[r] = accm[r] = vdupq_n_f32(0);
    for (int i = 0; i < nb; i++) {
        const mu_block_q8_K *b[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) b[t] = (const mu_block_q8_K *)at[t] + i;
        const float32x4_t yd = {b[0]->d, b[1]->d, b[2]->d, b[3]->d};
        int16x8_t pr[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) pr[t] = bsum_pairs(b[t]);
        const mu_block_q4_K *x[2];
        uint32_t u[2][4];
        float32x4_t dv[2];
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++) {
            x[r] = (const mu_block_q4_K *)(w + (size_t)r * ws) + i;
            k4_scales(x[r]->scales, u[r]);
            const float32x2_t dd = f16x2(&x[r]->d);
            dv[r] = vmulq_lane_f32(yd, dd, 0); /* d_x * d_a per lane, as the ref's product */
            const float32x4_t dmv = vmulq_lane_f32(yd, dd, 1);
            /* the mins: imin_j per activation row, transposed to rows j, lanes t */
            const int16x8_t mn = q4k_mins16(u[r]);
            const int32x4_t m0 = q4k_imins(pr[0], mn), m1 = q4k_imins(pr[1], mn);
            const int32x4_t m2 = q4k_imins(pr[2], mn), m3 = q4k_imins(pr[3], mn);
            const int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(m0, m1)), t1 = vreinterpretq_s64_s32(vtrn2q_s32(m0, m1));
            const int64x2_t t2 = vreinterpretq_s64_s32(vtrn1q_s32(m2, m3)), t3 = vreinterpretq_s64_s32(vtrn2q_s32(m2, m3));
            const int32x4_t mj[4] = {vreinterpretq_s32_s64(vtrn1q_s64(t0, t2)), vreinterpretq_s32_s64(vtrn1q_s64(t1, t3)),
                                     vreinterpretq_s32_s64(vtrn2q_s64(t0, t2)), vreinterpretq_s32_s64(vtrn2q_s64(t1, t3))};
            /* accm is its own chain: its FMAs can all run here, in the ref's order */
            if (per64) {
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) accm[r] = vfmaq_f32(accm[r], vcvtq_f32_s32(mj[j]), dmv);
            } else {
                const int32x4_t mt = vaddq_s32(vaddq_s32(mj[0], mj[1]), vaddq_s32(mj[2], mj[3]));
                accm[r] = vfmaq_f32(accm[r], vcvtq_f32_s32(mt), dmv);
            }
        }
        int32x4_t tot[2];
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++) tot[r] = vdupq_n_s32(0);
#pragma GCC unroll 1
        for (int j = 0; j < 4; j++) { /* kept a loop: the code of one j already fills the registers */
            int8x16_t q[2][4];
            int32x4_t v[2][4];
#pragma GCC unroll 4
            for (int r = 0; r < RW; r++) q4k_unpack(x[r]->qs + 32 * j, q[r]);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
#pragma GCC unroll 4
                for (int r = 0; r < RW; r++) {
                    const uint8_t *sc = (const uint8_t *)u[r];
                    v[r][t] = q4k_part(q[r], b[t]->qs + 64 * j, sc[2 * j], sc[2 * j + 1], sd);
                }
#pragma GCC unroll 4
            for (int r = 0; r < RW; r++) {
                const int32x4_t s = hsum4x4(v[r][0], v[r][1], v[r][2], v[r][3]);
                if (per64) acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(s), dv[r]);
                else tot[r] = vaddq_s32(tot[r], s);
            }
        }
        if (!per64) {
#pragma GCC unroll 4
            for (int r = 0; r < RW; r++) acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(tot[r]), dv[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++) store_lanes(vsubq_f32(acc[r], accm[r]), y + r, ys, tn);
}

/* A Q4_K gemm call covers a whole matmul of n_t activation rows and rounds
 * as llama.cpp's repack path does: rows below n_t & ~3 in the per-64 order
 * (its gemm), the last n_t % 4 as vec_dot (its gemv). */
AI void gemm_q4_K_body(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t, float *y,
                       int ys, const int sd) {
    const int nb = n / MU_QK_K, nb4 = n_t & ~3, rc = rows_per_chunk(ws);
    const uint8_t *wb = w, *ab = a;
    for (int c0 = r0; c0 < r1; c0 += rc) {
        const int c1 = c0 + rc < r1 ? c0 + rc : r1;
        for (int t0 = 0; t0 < n_t; t0 += 4) {
            const int tn = n_t - t0 < 4 ? n_t - t0 : 4;
            const uint8_t *at[4];
            quad_rows(ab, as, t0, tn, at);
            float *yt = y + (size_t)t0 * ys;
            int r = c0;
            if (t0 < nb4) {
                for (; r + 2 <= c1; r += 2) q4k_tile(nb, wb + (size_t)r * ws, ws, at, yt + r, ys, 4, 2, 1, sd);
                if (r < c1) q4k_tile(nb, wb + (size_t)r * ws, ws, at, yt + r, ys, 4, 1, 1, sd);
            } else {
                for (; r + 2 <= c1; r += 2) q4k_tile(nb, wb + (size_t)r * ws, ws, at, yt + r, ys, tn, 2, 0, sd);
                if (r < c1) q4k_tile(nb, wb + (size_t)r * ws, ws, at, yt + r, ys, tn, 1, 0, sd);
            }
        }
    }
}

static void gemm_q4_K_sdot(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    gemm_q4_K_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 1);
}
static void gemm_q4_K_mull(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    gemm_q4_K_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 0);
}

/* ---- Q6_K --------------------------------------------------------------- */

/* Half `half` (bytes 16*half..+16 of every 32-value chunk) of one Q6_K
 * block against 4 activation blocks: acc[t] += scale * (codes . q8) in the
 * ref's lanes, scales 2c + half. */
AI void q6k_half(const mu_block_q6_K *x, const mu_block_q8_K *const b[4], const int half, int32x4_t acc[4],
                 const int sd) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(0x30);
    const int o = 16 * half;
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        const int8_t *sc = x->scales + 8 * h + half;
        const uint8x16_t qa = vld1q_u8(ql + o), qb = vld1q_u8(ql + 32 + o), hb = vld1q_u8(qh + o);
        int8x16_t q[4];
        q[0] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(qa, m4), vandq_u8(vshlq_n_u8(hb, 4), m3)));
        q[1] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(qb, m4), vandq_u8(vshlq_n_u8(hb, 2), m3)));
        q[2] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(qa, 4), vandq_u8(hb, m3)));
        q[3] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(qb, 4), vandq_u8(vshrq_n_u8(hb, 2), m3)));
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const int8_t *q8 = b[t]->qs + 128 * h + o;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                acc[t] = vmlaq_n_s32(acc[t], dot16(vdupq_n_s32(0), q[k], vld1q_s8(q8 + 32 * k), sd), sc[2 * k]);
        }
    }
}

/* One weight row x 4 activation rows in the ref's vec_dot lanes: lanes m < 4
 * (lo) from the first 16 bytes of each 32-value chunk (scale 2c), m >= 4
 * (hi) from the second (scale 2c+1), unsigned codes, minus 32 * (bsums .
 * scales) of sub-blocks 2m, 2m+1; FMA by d per lane; hsum8. */
AI void q6k_tile(int nb, const mu_block_q6_K *x, const uint8_t *const at[4], float *y, int ys, int tn, const int sd) {
    float32x4_t a0[4], a1[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) a0[t] = a1[t] = vdupq_n_f32(0);
    for (int i = 0; i < nb; i++) {
        const mu_block_q8_K *b[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) b[t] = (const mu_block_q8_K *)at[t] + i;
        int32x4_t lo[4], hi[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) lo[t] = hi[t] = vdupq_n_s32(0);
        q6k_half(&x[i], b, 0, lo, sd);
        q6k_half(&x[i], b, 1, hi, sd);
        const int16x8_t s0 = vmovl_s8(vld1_s8(x[i].scales)), s1 = vmovl_s8(vld1_s8(x[i].scales + 8));
        const float dx = f16_1(x[i].d);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const int16x8_t b0 = vld1q_s16(b[t]->bsums), b1 = vld1q_s16(b[t]->bsums + 8);
            const int32x4_t c0 = vpaddq_s32(vmull_s16(vget_low_s16(b0), vget_low_s16(s0)), vmull_high_s16(b0, s0));
            const int32x4_t c1 = vpaddq_s32(vmull_s16(vget_low_s16(b1), vget_low_s16(s1)), vmull_high_s16(b1, s1));
            const float d = b[t]->d * dx;
            a0[t] = vfmaq_n_f32(a0[t], vcvtq_f32_s32(vsubq_s32(lo[t], vshlq_n_s32(c0, 5))), d);
            a1[t] = vfmaq_n_f32(a1[t], vcvtq_f32_s32(vsubq_s32(hi[t], vshlq_n_s32(c1, 5))), d);
        }
    }
    float res[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) res[t] = hsum8_v(a0[t], a1[t]);
    for (int t = 0; t < tn; t++) y[(size_t)t * ys] = res[t];
}

/* A gemm over weight rows one at a time (chunks of about 32 KiB of rows, 4
 * activation rows per tile) in both dot variants, for a tile function
 * TILE(nb, row, at, y, ys, tn, sd). */
#define ROW_GEMM(T, BLK, TILE)                                                                                  \
    AI void gemm_##T##_body(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t, \
                            float *y, int ys, const int sd) {                                                   \
        const int nb = n / MU_QK_K, rc = rows_per_chunk(ws);                                                    \
        const uint8_t *wb = w, *ab = a;                                                                         \
        for (int c0 = r0; c0 < r1; c0 += rc) {                                                                  \
            const int c1 = c0 + rc < r1 ? c0 + rc : r1;                                                         \
            for (int t0 = 0; t0 < n_t; t0 += 4) {                                                               \
                const int tn = n_t - t0 < 4 ? n_t - t0 : 4;                                                     \
                const uint8_t *at[4];                                                                           \
                quad_rows(ab, as, t0, tn, at);                                                                  \
                for (int r = c0; r < c1; r++)                                                                   \
                    TILE(nb, (const BLK *)(wb + (size_t)r * ws), at, y + (size_t)t0 * ys + r, ys, tn, sd);      \
            }                                                                                                   \
        }                                                                                                       \
    }                                                                                                           \
    static void gemm_##T##_sdot(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as,      \
                                int n_t, float *y, int ys) {                                                    \
        gemm_##T##_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 1);                                                \
    }                                                                                                           \
    static void gemm_##T##_mull(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as,      \
                                int n_t, float *y, int ys) {                                                    \
        gemm_##T##_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 0);                                                \
    }

ROW_GEMM(q6_K, mu_block_q6_K, q6k_tile)

/* ---- Q5_K --------------------------------------------------------------- */

/* One weight row x 4 activation rows in the ref's vec_dot lanes: lanes m of
 * 8 (lo: bytes 4m..4m+3 of the first 16 of each 32-value sub-block, hi: of
 * the second 16), scaled per sub-block, acc = fma(d_a*d_x, lanes, acc); the
 * mins in a chain summs = fma(imin, -d_a*dmin_x, summs) per activation row
 * (the lanes of one vector); result hsum8(acc) + summs. */
AI void q5k_tile(int nb, const mu_block_q5_K *x, const uint8_t *const at[4], float *y, int ys, int tn, const int sd) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), b16 = vdupq_n_u8(16);
    float32x4_t a0[4], a1[4], summs = vdupq_n_f32(0);
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) a0[t] = a1[t] = vdupq_n_f32(0);
    for (int i = 0; i < nb; i++) {
        const mu_block_q8_K *b[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) b[t] = (const mu_block_q8_K *)at[t] + i;
        uint32_t u[4];
        k4_scales(x[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        const int16x8_t mn = q4k_mins16(u);
        int32x4_t mt[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const int16x8_t pr = bsum_pairs(b[t]);
            mt[t] = vmlal_high_s16(vmull_s16(vget_low_s16(pr), vget_low_s16(mn)), pr, mn);
        }
        const float32x4_t yd = {b[0]->d, b[1]->d, b[2]->d, b[3]->d};
        const float32x2_t dd = f16x2(&x[i].d); /* d, dmin */
        summs = vfmaq_f32(summs, vcvtq_f32_s32(hsum4x4(mt[0], mt[1], mt[2], mt[3])), vmulq_lane_f32(vnegq_f32(yd), dd, 1));
        int32x4_t lo[4], hi[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) lo[t] = hi[t] = vdupq_n_s32(0);
        const uint8x16_t h0 = vld1q_u8(x[i].qh), h1 = vld1q_u8(x[i].qh + 16);
        for (int j = 0; j < 4; j++) {
            const uint8x16_t ml = vdupq_n_u8((uint8_t)(1 << (2 * j))), mh = vdupq_n_u8((uint8_t)(2 << (2 * j)));
            const uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * j), q1 = vld1q_u8(x[i].qs + 32 * j + 16);
            const int8x16_t l0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q0, m4), vandq_u8(vtstq_u8(h0, ml), b16)));
            const int8x16_t l1 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q1, m4), vandq_u8(vtstq_u8(h1, ml), b16)));
            const int8x16_t u0 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q0, 4), vandq_u8(vtstq_u8(h0, mh), b16)));
            const int8x16_t u1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q1, 4), vandq_u8(vtstq_u8(h1, mh), b16)));
            const int s0 = sc[2 * j], s1 = sc[2 * j + 1];
            const int32x4_t z = vdupq_n_s32(0);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const int8_t *q8 = b[t]->qs + 64 * j;
                lo[t] = vmlaq_n_s32(lo[t], dot16(z, l0, vld1q_s8(q8), sd), s0);
                hi[t] = vmlaq_n_s32(hi[t], dot16(z, l1, vld1q_s8(q8 + 16), sd), s0);
                lo[t] = vmlaq_n_s32(lo[t], dot16(z, u0, vld1q_s8(q8 + 32), sd), s1);
                hi[t] = vmlaq_n_s32(hi[t], dot16(z, u1, vld1q_s8(q8 + 48), sd), s1);
            }
        }
        const float32x4_t dv = vmulq_lane_f32(yd, dd, 0);
        float dl[4];
        vst1q_f32(dl, dv);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            a0[t] = vfmaq_n_f32(a0[t], vcvtq_f32_s32(lo[t]), dl[t]);
            a1[t] = vfmaq_n_f32(a1[t], vcvtq_f32_s32(hi[t]), dl[t]);
        }
    }
    float res[4], sm[4];
    vst1q_f32(sm, summs);
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) res[t] = hsum8_v(a0[t], a1[t]) + sm[t];
    for (int t = 0; t < tn; t++) y[(size_t)t * ys] = res[t];
}

ROW_GEMM(q5_K, mu_block_q5_K, q5k_tile)

/* ---- Q8_0 --------------------------------------------------------------- */

/* RW (1 or 2) weight rows x 4 activation rows in the ref's vec_dot lanes:
 * lane l of 8 = bytes 4l..4l+3 of each block, acc = fma(d_x*d_a, sum, acc),
 * then hsum8. */
AI void q80_tile(int nb, const uint8_t *w, size_t ws, const uint8_t *const at[4], float *y, int ys, int tn,
                 const int RW, const int sd) {
    float32x4_t acc[2][4][2];
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++)
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) acc[r][t][0] = acc[r][t][1] = vdupq_n_f32(0);
    for (int i = 0; i < nb; i++) {
        const mu_block_q8_0 *b[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) b[t] = (const mu_block_q8_0 *)at[t] + i;
        const uint16x4_t hd = {b[0]->d, b[1]->d, b[2]->d, b[3]->d};
        const float32x4_t dy = vcvt_f32_f16(vreinterpret_f16_u16(hd));
        int8x16_t xq[2][2];
        float dl[2][4];
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++) {
            const mu_block_q8_0 *x = (const mu_block_q8_0 *)(w + (size_t)r * ws) + i;
            xq[r][0] = vld1q_s8(x->qs);
            xq[r][1] = vld1q_s8(x->qs + 16);
            vst1q_f32(dl[r], vmulq_n_f32(dy, f16_1(x->d))); /* d_x * d_a, as the ref's product */
        }
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const int8x16_t y0 = vld1q_s8(b[t]->qs), y1 = vld1q_s8(b[t]->qs + 16);
#pragma GCC unroll 4
            for (int r = 0; r < RW; r++) {
                const int32x4_t s0 = dot16(vdupq_n_s32(0), xq[r][0], y0, sd);
                const int32x4_t s1 = dot16(vdupq_n_s32(0), xq[r][1], y1, sd);
                acc[r][t][0] = vfmaq_n_f32(acc[r][t][0], vcvtq_f32_s32(s0), dl[r][t]);
                acc[r][t][1] = vfmaq_n_f32(acc[r][t][1], vcvtq_f32_s32(s1), dl[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++) {
        float res[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) res[t] = hsum8_v(acc[r][t][0], acc[r][t][1]);
        for (int t = 0; t < tn; t++) y[(size_t)t * ys + r] = res[t];
    }
}

AI void gemm_q8_0_body(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t, float *y,
                       int ys, const int sd) {
    const int nb = n / MU_QK8_0, rc = rows_per_chunk(ws);
    const uint8_t *wb = w, *ab = a;
    for (int c0 = r0; c0 < r1; c0 += rc) {
        const int c1 = c0 + rc < r1 ? c0 + rc : r1;
        for (int t0 = 0; t0 < n_t; t0 += 4) {
            const int tn = n_t - t0 < 4 ? n_t - t0 : 4;
            const uint8_t *at[4];
            quad_rows(ab, as, t0, tn, at);
            float *yt = y + (size_t)t0 * ys;
            int r = c0;
            for (; r + 2 <= c1; r += 2) q80_tile(nb, wb + (size_t)r * ws, ws, at, yt + r, ys, tn, 2, sd);
            if (r < c1) q80_tile(nb, wb + (size_t)r * ws, ws, at, yt + r, ys, tn, 1, sd);
        }
    }
}

static void gemm_q8_0_sdot(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    gemm_q8_0_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 1);
}
static void gemm_q8_0_mull(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    gemm_q8_0_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 0);
}

/* ---- NVFP4 ---------------------------------------------------------------- */

/* One weight row x 4 activation rows in the ref's vec_dot order: lanes 0-3
 * sub-blocks 0 then 2, lanes 4-7 sub-blocks 1 then 3, acc = fma(scale * d_a,
 * sum, acc) per half block; each block's codes decoded once for the 4 rows.
 * The byte products use x86's sign trick (|c| times a negated where c < 0,
 * wrapping), as the ref. */
AI void nvfp4_tile(int nb, const mu_block_nvfp4 *x, const uint8_t *const at[4], float *y, int ys, int tn,
                   const int sd) {
    const int8x16_t tbl = vld1q_s8(mu_fp4_codes);
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    float32x4_t acc[4][2];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) acc[t][0] = acc[t][1] = vdupq_n_f32(0);
    for (int i = 0; i < nb; i++) {
        int8x16_t c[4], ac[4];
        uint8x16_t neg[4];
        float sc[4];
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) {
            const uint8x16_t q = vld1q_u8(x[i].qs + 16 * k);
            const uint8x16_t lo = vandq_u8(q, m4), hi = vshrq_n_u8(q, 4);
            c[2 * k] = vqtbl1q_s8(tbl, vcombine_u8(vget_low_u8(lo), vget_low_u8(hi)));
            c[2 * k + 1] = vqtbl1q_s8(tbl, vcombine_u8(vget_high_u8(lo), vget_high_u8(hi)));
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            ac[k] = vabsq_s8(c[k]);
            neg[k] = vcltzq_s8(c[k]);
            sc[k] = mu_nvfp4_scale(x[i].d[k]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const mu_block_q8_0 *b = (const mu_block_q8_0 *)at[t] + 2 * i;
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const float dy = f16_1(b[h].d);
                const int8x16_t y0 = vld1q_s8(b[h].qs), y1 = vld1q_s8(b[h].qs + 16);
                const int32x4_t p0 = dot16(vdupq_n_s32(0), ac[2 * h], vbslq_s8(neg[2 * h], vnegq_s8(y0), y0), sd);
                const int32x4_t p1 =
                    dot16(vdupq_n_s32(0), ac[2 * h + 1], vbslq_s8(neg[2 * h + 1], vnegq_s8(y1), y1), sd);
                acc[t][0] = vfmaq_n_f32(acc[t][0], vcvtq_f32_s32(p0), sc[2 * h] * dy);
                acc[t][1] = vfmaq_n_f32(acc[t][1], vcvtq_f32_s32(p1), sc[2 * h + 1] * dy);
            }
        }
    }
    for (int t = 0; t < tn; t++) y[(size_t)t * ys] = hsum8_v(acc[t][0], acc[t][1]);
}

AI void gemm_nvfp4_body(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                        float *y, int ys, const int sd) {
    const int nb = n / MU_QK_NVFP4, rc = rows_per_chunk(ws);
    const uint8_t *wb = w, *ab = a;
    for (int c0 = r0; c0 < r1; c0 += rc) {
        const int c1 = c0 + rc < r1 ? c0 + rc : r1;
        for (int t0 = 0; t0 < n_t; t0 += 4) {
            const int tn = n_t - t0 < 4 ? n_t - t0 : 4;
            const uint8_t *at[4];
            quad_rows(ab, as, t0, tn, at);
            for (int r = c0; r < c1; r++)
                nvfp4_tile(nb, (const mu_block_nvfp4 *)(wb + (size_t)r * ws), at, y + (size_t)t0 * ys + r, ys, tn, sd);
        }
    }
}

static void gemm_nvfp4_sdot(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                            float *y, int ys) {
    gemm_nvfp4_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 1);
}
static void gemm_nvfp4_mull(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                            float *y, int ys) {
    gemm_nvfp4_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 0);
}

/* ---- F32, F16, BF16: llamafile tinyBLAS orders --------------------------- */

/* 16 lanes of a weight type from p (elements), as 4 quarters. */
AI void f32x16(const float *p, float32x4_t q[4]) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) q[k] = vld1q_f32(p + 4 * k);
}
AI void f16x16(const mu_f16 *p, float32x4_t q[4]) {
    const uint16x8_t a = vld1q_u16(p), b = vld1q_u16(p + 8);
    q[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(a)));
    q[1] = vcvt_high_f32_f16(vreinterpretq_f16_u16(a));
    q[2] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(b)));
    q[3] = vcvt_high_f32_f16(vreinterpretq_f16_u16(b));
}

/* The tail of a single-row tinyBLAS dot when n % 16 != 0 (forward.c never
 * takes the batch path then, and the ref reads past the row): the lanes of
 * the last partial step accumulate only the elements that exist. */
static float tb_tail(float32x4_t q0, float32x4_t q1, float32x4_t q2, float32x4_t q3, const float *xf,
                     const mu_f16 *xh, const float *yf, const mu_f16 *yh, int i, int n) {
    float l[16];
    vst1q_f32(l, q0);
    vst1q_f32(l + 4, q1);
    vst1q_f32(l + 8, q2);
    vst1q_f32(l + 12, q3);
    for (int k = i; k < n; k++)
        l[k - i] = xf ? fmaf(xf[k], yf[k], l[k - i]) : fmaf(mu_f16_to_f32(xh[k]), mu_f16_to_f32(yh[k]), l[k - i]);
    return mu_hsum16(l);
}

/* ref vec_dot_batch F32: one 16-lane FMA accumulator, hsum16. */
static float vec_dot_f32_batch_neon(int n, const void *w, const void *a) {
    const float *x = w, *y = a;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        float32x4_t xq[4], yq[4];
        f32x16(x + i, xq);
        f32x16(y + i, yq);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[k] = vfmaq_f32(acc[k], xq[k], yq[k]);
    }
    if (i < n) return tb_tail(acc[0], acc[1], acc[2], acc[3], x, NULL, y, NULL, i, n);
    return hsum16_v(acc[0], acc[1], acc[2], acc[3]);
}

/* ref vec_dot_batch F16: the same over F16 values (their products are exact
 * in float, so the FMA rounds as the ref's add). */
static float vec_dot_f16_batch_neon(int n, const void *w, const void *a) {
    const mu_f16 *x = w, *y = a;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        float32x4_t xq[4], yq[4];
        f16x16(x + i, xq);
        f16x16(y + i, yq);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[k] = vfmaq_f32(acc[k], xq[k], yq[k]);
    }
    if (i < n) return tb_tail(acc[0], acc[1], acc[2], acc[3], NULL, x, NULL, y, i, n);
    return hsum16_v(acc[0], acc[1], acc[2], acc[3]);
}

/* BF16 (VDPBF16PS as the ref models it): inputs with a zero exponent read as
 * +0, each FMA result below 2^-126 in magnitude flushed to a zero of its
 * sign. */
AI uint16x8_t bf16_daz(uint16x8_t h) { return vandq_u16(h, vtstq_u16(h, vdupq_n_u16(0x7f80))); }
AI float32x4_t bf16_lo(uint16x8_t h) { return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)); }
AI float32x4_t bf16_hi(uint16x8_t h) { return vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)); }
AI float32x4_t ftz(float32x4_t v) {
    const uint32x4_t tiny = vandq_u32(vcaltq_f32(v, vdupq_n_f32(0x1p-126f)), vdupq_n_u32(0x7fffffffu));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(v), tiny));
}
/* Lanes 8h..8h+7 of a 32-element step: pair 2l, 2l+1 per lane l, as
 * (odd, even) quarters for lanes 8h..8h+3 and 8h+4..8h+7. */
AI void bf16_pairs(const mu_bf16 *p, float32x4_t od[2], float32x4_t ev[2]) {
    const uint16x8x2_t v = vld2q_u16(p);
    const uint16x8_t e = bf16_daz(v.val[0]), o = bf16_daz(v.val[1]);
    ev[0] = bf16_lo(e);
    ev[1] = bf16_hi(e);
    od[0] = bf16_lo(o);
    od[1] = bf16_hi(o);
}
/* acc = ftz(fma(odd)), then ftz(fma(even)): the ref's dpbf16_pair (acc is
 * already flushed). */
AI float32x4_t dpbf16(float32x4_t acc, float32x4_t xo, float32x4_t yo, float32x4_t xe, float32x4_t ye) {
    return ftz(vfmaq_f32(ftz(vfmaq_f32(acc, xo, yo)), xe, ye));
}

/* ref vec_dot_batch BF16: tinyBLAS, one 16-lane accumulator over steps of
 * 32 when n % 32 == 0, else the vec_dot. */
static float vec_dot_bf16_batch_neon(int n, const void *w, const void *a) {
    if (n % 32) return vd_bf16(n, w, a);
    const mu_bf16 *x = w, *y = a;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    for (int i = 0; i < n; i += 32)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            float32x4_t xo[2], xe[2], yo[2], ye[2];
            bf16_pairs(x + i + 16 * h, xo, xe);
            bf16_pairs(y + i + 16 * h, yo, ye);
            acc[2 * h] = dpbf16(acc[2 * h], xo[0], yo[0], xe[0], ye[0]);
            acc[2 * h + 1] = dpbf16(acc[2 * h + 1], xo[1], yo[1], xe[1], ye[1]);
        }
    return hsum16_v(acc[0], acc[1], acc[2], acc[3]);
}

/* One weight row x 4 activation rows of a tinyBLAS dot: per row a 16-lane
 * accumulator (4 quarters); the weight's 16 values converted once. */
#define TB_F32 0
#define TB_F16 1
#define TB_BF16 2
AI void tb_tile(int n, const uint8_t *x, const uint8_t *const at[4], float *y, int ys, int tn, const int K) {
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[t][k] = vdupq_n_f32(0);
    if (K == TB_BF16) {
        /* lanes 0..7 (h = 0) and 8..15 (h = 1) are independent chains over
         * the two halves of every 32 values: one pass each keeps the live
         * accumulators at 8 */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < n; i += 32) {
                float32x4_t xo[2], xe[2];
                bf16_pairs((const mu_bf16 *)x + i + 16 * h, xo, xe);
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    float32x4_t yo[2], ye[2];
                    bf16_pairs((const mu_bf16 *)at[t] + i + 16 * h, yo, ye);
                    acc[t][2 * h] = dpbf16(acc[t][2 * h], xo[0], yo[0], xe[0], ye[0]);
                    acc[t][2 * h + 1] = dpbf16(acc[t][2 * h + 1], xo[1], yo[1], xe[1], ye[1]);
                }
            }
    } else {
        for (int i = 0; i < n; i += 16) {
            float32x4_t xq[4];
            if (K == TB_F32) f32x16((const float *)x + i, xq);
            else f16x16((const mu_f16 *)x + i, xq);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                float32x4_t yq[4];
                if (K == TB_F32) f32x16((const float *)at[t] + i, yq);
                else f16x16((const mu_f16 *)at[t] + i, yq);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) acc[t][k] = vfmaq_f32(acc[t][k], xq[k], yq[k]);
            }
        }
    }
    float res[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) res[t] = hsum16_v(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
    for (int t = 0; t < tn; t++) y[(size_t)t * ys] = res[t];
}

/* gemm of the tinyBLAS orders; n not a multiple of the step (16, BF16 32):
 * tinyBLAS declines and llama.cpp runs vec_dot for every row, so does this. */
AI void gemm_tb_body(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t, float *y,
                     int ys, const int K, mu_vec_dot_fn single) {
    const uint8_t *wb = w, *ab = a;
    if (n % (K == TB_BF16 ? 32 : 16)) {
        for (int t = 0; t < n_t; t++)
            for (int r = r0; r < r1; r++) y[(size_t)t * ys + r] = single(n, wb + (size_t)r * ws, ab + (size_t)t * as);
        return;
    }
    const int rc = rows_per_chunk(ws);
    for (int c0 = r0; c0 < r1; c0 += rc) {
        const int c1 = c0 + rc < r1 ? c0 + rc : r1;
        for (int t0 = 0; t0 < n_t; t0 += 4) {
            const int tn = n_t - t0 < 4 ? n_t - t0 : 4;
            const uint8_t *at[4];
            quad_rows(ab, as, t0, tn, at);
            for (int r = c0; r < c1; r++) tb_tile(n, wb + (size_t)r * ws, at, y + (size_t)t0 * ys + r, ys, tn, K);
        }
    }
}

static void gemm_f32_neon(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                          float *y, int ys) {
    gemm_tb_body(n, w, ws, r0, r1, a, as, n_t, y, ys, TB_F32, vd_f32);
}
static void gemm_f16_neon(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                          float *y, int ys) {
    gemm_tb_body(n, w, ws, r0, r1, a, as, n_t, y, ys, TB_F16, vd_f16);
}
static void gemm_bf16_neon(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    gemm_tb_body(n, w, ws, r0, r1, a, as, n_t, y, ys, TB_BF16, vd_bf16);
}

/* ---- fill ---------------------------------------------------------------- */

void mu_kern_fill_gemm_neon(mu_kern *k) {
    const int sd = mu_kern_neon_has_sdot();
    vd_f32 = k->vec_dot[MU_T_F32];
    vd_f16 = k->vec_dot[MU_T_F16];
    vd_bf16 = k->vec_dot[MU_T_BF16];
    k->vec_dot_batch[MU_T_Q4_K] = sd ? vec_dot_q4_K_batch_sdot : vec_dot_q4_K_batch_mull;
    k->gemm[MU_T_Q4_K] = sd ? gemm_q4_K_sdot : gemm_q4_K_mull;
    k->gemm[MU_T_Q6_K] = sd ? gemm_q6_K_sdot : gemm_q6_K_mull;
    k->gemm[MU_T_Q8_0] = sd ? gemm_q8_0_sdot : gemm_q8_0_mull;
    k->gemm[MU_T_NVFP4] = sd ? gemm_nvfp4_sdot : gemm_nvfp4_mull;
    k->gemm[MU_T_Q5_K] = sd ? gemm_q5_K_sdot : gemm_q5_K_mull;
    k->vec_dot_batch[MU_T_F32] = vec_dot_f32_batch_neon;
    k->vec_dot_batch[MU_T_F16] = vec_dot_f16_batch_neon;
    k->vec_dot_batch[MU_T_BF16] = vec_dot_bf16_batch_neon;
    k->gemm[MU_T_F32] = gemm_f32_neon;
    k->gemm[MU_T_F16] = gemm_f16_neon;
    k->gemm[MU_T_BF16] = gemm_bf16_neon;
}
#endif
