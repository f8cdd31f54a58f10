/* gemm_neon.c: the NEON table's matrix-matrix kernels (prefill).
 * Owns: gemm entries and the batch-path dots (vec_dot_batch) of the NEON
 * table, in the rounding kern_ref.c defines, bit for bit: Q4_K (per-64
 * "repack gemm" order, its last n_t % 4 activation rows in the vec_dot
 * order), Q6_K and Q8_0 (the vec_dot lanes), F16 (tinyBLAS order, n % 16 ==
 * 0), and the single-row vec_dot_batch of F32, F16, BF16 and Q4_K.
 * Does not: decide which rows take which path (forward.c does), or define
 * numerics (kern_ref.c).
 * Design: a gemm pass is a tile of 1-2 weight rows x 4 activation rows. For
 * Q4_K the 4 activation rows are the 4 lanes of the float accumulators, so
 * each lane runs exactly the ref's sequential FMA chain for its row; the
 * integer pair sums of the 4 rows are reduced into those lanes by a pairwise
 * add tree. For Q6_K, Q8_0 and F16 the ref's own lanes (8 or 16 of them per
 * dot) are kept, one accumulator set per activation row. Each weight block
 * is decoded once per tile and used for all 4 rows; a chunk of weight rows
 * (about 32 KiB) is swept by every activation quad before the next chunk,
 * so the weights come from memory once per call. Like kern_neon.c, the int8
 * dots come in an SDOT variant and a widening-multiply one for CPUs without
 * the dot-product extension, chosen at fill time (mu_kern_neon_has_sdot);
 * here one always-inlined body takes the choice as a constant. */
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
static mu_vec_dot_fn vd_f16, vd_bf16;

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

AI float32x4_t f16x4(const mu_f16 *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

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

AI void gemm_q6_K_body(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t, float *y,
                       int ys, const int sd) {
    const int nb = n / MU_QK_K, rc = rows_per_chunk(ws);
    const uint8_t *wb = w, *ab = a;
    for (int c0 = r0; c0 < r1; c0 += rc) {
        const int c1 = c0 + rc < r1 ? c0 + rc : r1;
        for (int t0 = 0; t0 < n_t; t0 += 4) {
            const int tn = n_t - t0 < 4 ? n_t - t0 : 4;
            const uint8_t *at[4];
            quad_rows(ab, as, t0, tn, at);
            for (int r = c0; r < c1; r++)
                q6k_tile(nb, (const mu_block_q6_K *)(wb + (size_t)r * ws), at, y + (size_t)t0 * ys + r, ys, tn, sd);
        }
    }
}

static void gemm_q6_K_sdot(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    gemm_q6_K_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 1);
}
static void gemm_q6_K_mull(int n, const void *w, size_t ws, int r0, int r1, const void *a, size_t as, int n_t,
                           float *y, int ys) {
    gemm_q6_K_body(n, w, ws, r0, r1, a, as, n_t, y, ys, 0);
}

/* ---- fill ---------------------------------------------------------------- */

void mu_kern_fill_gemm_neon(mu_kern *k) {
    const int sd = mu_kern_neon_has_sdot();
    vd_f16 = k->vec_dot[MU_T_F16];
    vd_bf16 = k->vec_dot[MU_T_BF16];
    k->vec_dot_batch[MU_T_Q4_K] = sd ? vec_dot_q4_K_batch_sdot : vec_dot_q4_K_batch_mull;
    k->gemm[MU_T_Q4_K] = sd ? gemm_q4_K_sdot : gemm_q4_K_mull;
    k->gemm[MU_T_Q6_K] = sd ? gemm_q6_K_sdot : gemm_q6_K_mull;
}
#endif
