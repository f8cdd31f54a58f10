/* test_gpu_kern.c: every GPU matmul and row lookup against the CPU's
 * reference kernels (kern_ref.c), on random weights of every type, odd
 * shapes, and token counts on both sides of the batch-rounding rule; at
 * decode sizes the plugin also runs each matmul as a grouped launch of two
 * or three matrices and checks it against the single one.
 * The device keeps the CPU's arithmetic, so the results must be equal bit
 * for bit; the test prints the largest difference when they are not.
 * Needs a CUDA device (the gpu tier); exits 77 (skip) without one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gpu/gpu.h"
#include "../../src/kern/kern.h"
#include "../../src/synth/quantize.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * 0x1p-53) * 2.0f - 1.0f;
}

static int n_fail, n_cases;

/* The CPU's rows for the same matmul (forward.c's choice of vec_dot or
 * vec_dot_batch per token row t < n_batch). */
static void cpu_matmul(const mu_kern *k, uint32_t type, int rows, int cols, int T, int n_batch, const uint8_t *w,
                       const float *x, float *y) {
    const uint32_t dt = mu_kern_dot_type(type);
    const size_t rb = mu_type_row_bytes(type, cols), ab = (size_t)cols * 4 + 64;
    uint8_t *a = malloc(ab);
    for (int t = 0; t < T; t++) {
        k->quant[dt](x + (size_t)t * cols, a, cols);
        mu_vec_dot_fn d = t < n_batch && k->vec_dot_batch[type] ? k->vec_dot_batch[type] : k->vec_dot[type];
        for (int r = 0; r < rows; r++) y[(size_t)t * rows + r] = d(cols, w + (size_t)r * rb, a);
    }
    free(a);
}

/* n_batch as forward.c computes it for a matmul of T rows */
static int batch_rows(uint32_t type, int rows, int cols, int T) {
    if (T < 2) return 0;
    if (type == MU_T_Q4_K) return T & ~3;
    if (type == MU_T_F32 || type == MU_T_F16 || type == MU_T_BF16) return cols % 16 == 0 && rows % 4 == 0 ? T : 0;
    return 0;
}

static void check(const char *what, uint32_t type, int rows, int cols, int T, const float *want, const float *got,
                  size_t n) {
    n_cases++;
    float worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&want[i], &got[i], 4)) {
            bad++;
            float d = fabsf(want[i] - got[i]);
            if (!(d <= worst)) worst = d;
        }
    if (bad) {
        n_fail++;
        printf("FAIL %s %s rows %d cols %d T %d: %zu of %zu differ, max |d| %g\n", what, mu_type_get(type)->name, rows,
               cols, T, bad, n, worst);
        /* MUSER_TEST_VERBOSE=1: the first differences (token t, row r of a matmul's [T][rows]) */
        const char *v = getenv("MUSER_TEST_VERBOSE");
        for (size_t i = 0, k = 0; v && *v == '1' && i < n && k < 8; i++)
            if (memcmp(&want[i], &got[i], 4)) {
                printf("  [%zu] t %zu r %zu: want %.9g got %.9g\n", i, i / (size_t)rows, i % (size_t)rows, want[i], got[i]);
                k++;
            }
    }
}

/* Prefill attention (the tiled kernels) and decode attention (n_sess ==
 * T: every token alone in its session, each at its own depth) against the
 * row kernels, bit for bit: 4, 8 and 16 query heads a KV head; full and
 * sliding layers, rings that wrap; one or two sessions in a prefill chunk;
 * token counts that leave ragged tiles; spans of whole and partial
 * 64-cell groups, shorter and longer than one batch of a decode lane's
 * loads (16 x 64 cells); cells past the positions hold finite garbage
 * (weight 0). */
/* k_best (each logits row's best: mu_gpu_chunk.best) against a plain
 * scan: the first index of the largest value when every value is finite,
 * else -1. Rows of a vocabulary's length and short ones, odd lengths (rows
 * off 16-byte boundaries), ties (the first wins), -0 against +0, the
 * largest value first or last, a NaN, +inf or -inf anywhere, and rows of
 * a single repeated value. */
static int32_t best_ref(const float *l, int n) {
    int32_t b = 0;
    for (int i = 0; i < n; i++)
        if (!isfinite(l[i])) return -1;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static int test_best(void) {
    static const int lens[] = {202048, 1000, 33, 7, 4097};
    enum { ROWS = 12 };
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int n = lens[li];
        float *rows = malloc((size_t)ROWS * n * 4);
        int32_t got[ROWS];
        for (int r = 0; r < ROWS; r++) {
            float *l = rows + (size_t)r * n;
            for (int i = 0; i < n; i++) l[i] = frand() * 8.0f;
            const int a = (r * 7919) % n, b = (a + n / 2 + 1) % n, lo = a < b ? a : b, hi = a < b ? b : a;
            switch (r) {
            case 1: l[lo] = l[hi] = 30.0f; break;                   /* a tie: the first index */
            case 2: l[lo] = -0.0f, l[hi] = 0.0f;                     /* -0 == +0, both the largest */
                for (int i = 0; i < n; i++) if (i != lo && i != hi) l[i] = -fabsf(l[i]) - 1.0f;
                break;
            case 3: l[0] = 50.0f; break;
            case 4: l[n - 1] = 50.0f; break;
            case 5: l[a] = NAN; break;
            case 6: l[a] = INFINITY; break;
            case 7: l[a] = -INFINITY; break;
            case 8: l[n - 1] = NAN; break;
            case 9: for (int i = 0; i < n; i++) l[i] = -3.0f; break; /* every value the largest: index 0 */
            case 10: l[0] = NAN; break;
            default: break;
            }
        }
        mu_err err = {0};
        if (mu_gpu_test_best(0, rows, ROWS, n, got, &err)) {
            printf("FAIL best: %s\n", err.msg);
            free(rows);
            return 1;
        }
        for (int r = 0; r < ROWS; r++) {
            n_cases++;
            const int32_t want = best_ref(rows + (size_t)r * n, n);
            if (got[r] != want) {
                n_fail++;
                printf("FAIL best: row %d of %d values: device %d, want %d\n", r, n, got[r], want);
            }
        }
        free(rows);
    }
    return 0;
}

static int test_attention(void) {
    static const struct {
        int G, T, n_sess, rows, pos0, swa, n_swa;
    } cases[] = {
        {16, 1, 1, 8448, 8191, 0, 0},    {16, 3, 3, 9000, 5000, 0, 0},   {8, 4, 4, 2304, 2100, 1, 2048},
        {16, 8, 8, 1100, 1050, 0, 0},    {4, 2, 2, 700, 3000, 1, 512},   {16, 5, 5, 2304, 9000, 1, 2048},
        {16, 2, 2, 64, 10, 0, 0},
        {16, 67, 1, 4096, 0, 0, 0},      {16, 37, 1, 4096, 1500, 0, 0},  {8, 130, 1, 1024, 300, 0, 0},
        {4, 9, 1, 512, 17, 0, 0},        {16, 45, 2, 2816, 700, 0, 0},   {16, 61, 1, 96, 200, 1, 40},
        {8, 50, 1, 2816, 3000, 1, 2048}, {16, 23, 2, 160, 90, 1, 64},    {4, 6, 1, 256, 0, 1, 100},
        {16, 512, 1, 2048, 1400, 0, 0},
        {16, 20, 2, 17000, 16900, 0, 0}, /* spans past k_softmax_t's shared row: its weights packed in place */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int G = cases[ci].G, T = cases[ci].T, ns = cases[ci].n_sess, rows = cases[ci].rows;
        const int n_head_kv = 2, n_head = G * n_head_kv, hd = 128, nq = n_head * hd, n_kv = n_head_kv * hd;
        float *q = malloc((size_t)T * nq * 4), *gate = malloc((size_t)T * nq * 4), *o1 = malloc((size_t)T * nq * 4),
              *o2 = malloc((size_t)T * nq * 4);
        int *pos = malloc((size_t)T * 4), *sess = malloc((size_t)T * 4), rws[8];
        uint16_t *kk[8], *vv[8];
        for (int s = 0; s < ns; s++) {
            rws[s] = ns == T && s % 2 && rows > 1024 ? rows - 64 * s - 8 : rows; /* lone tokens: sessions of other sizes */
            kk[s] = malloc((size_t)rws[s] * n_kv * 2);
            vv[s] = malloc((size_t)rws[s] * n_kv * 2);
            for (size_t i = 0; i < (size_t)rws[s] * n_kv; i++) {
                kk[s][i] = mu_f32_to_f16(frand() * (i % 29 == 0 ? 6.0f : 1.5f));
                vv[s][i] = mu_f32_to_f16(frand() * 2.0f);
            }
        }
        const int t1 = ns == 2 ? T / 2 : T; /* tokens [0, t1) of session 0, the rest of session 1 */
        for (int t = 0; t < T; t++) {
            sess[t] = t < t1 ? 0 : 1;
            pos[t] = t < t1 ? cases[ci].pos0 + t : cases[ci].pos0 / 2 + (t - t1); /* session 1 at another depth */
            if (ns == T) { /* decode: token t alone in session t, each at its own depth, inside its cells */
                sess[t] = t;
                pos[t] = cases[ci].pos0 - 37 * t;
                if (!cases[ci].swa && pos[t] >= rws[t]) pos[t] = rws[t] - 1 - 5 * t;
                if (pos[t] < 0) pos[t] = t;
            }
        }
        for (size_t i = 0; i < (size_t)T * nq; i++) {
            q[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f);
            gate[i] = frand() * 4.0f;
        }
        mu_gpu_attn_case c = {T, n_head, n_head_kv, hd, cases[ci].n_swa, cases[ci].swa != 0, q, gate, pos, sess, ns, rws,
                              (const uint16_t *const *)kk, (const uint16_t *const *)vv};
        mu_err err = {0};
        if (mu_gpu_test_attention(0, &c, o1, o2, &err)) {
            printf("FAIL attention: %s\n", err.msg);
            return 1;
        }
        n_cases++;
        int nd = 0;
        for (size_t i = 0; i < (size_t)T * nq; i++) nd += memcmp(&o1[i], &o2[i], 4) != 0;
        if (nd) {
            n_fail++;
            printf("FAIL attention case %zu (G %d, T %d, sessions %d, rows %d, swa %d): %d of %d values differ\n", ci, G,
                   T, ns, rows, cases[ci].swa, nd, T * nq);
        }
        for (int s = 0; s < ns; s++) free(kk[s]), free(vv[s]);
        free(q), free(gate), free(o1), free(o2), free(pos), free(sess);
    }
    return 0;
}

int main(void) {
    if (mu_gpu_count() == 0) {
        printf("skip: %s\n", mu_gpu_why_none());
        return 77;
    }
    const mu_kern *k = mu_kern_ref();
    const uint32_t types[] = {MU_T_F32, MU_T_F16, MU_T_BF16, MU_T_Q8_0, MU_T_Q4_K, MU_T_Q5_K, MU_T_Q6_K, MU_T_NVFP4};
    const int rows_l[] = {1, 3, 4, 7, 36};
    const int Ts[] = {1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 17, 67};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t type = types[ti];
        const int blk = mu_type_get(type)->blck;
        /* 20224 = 79 super-blocks: the decode kernel's chunks of 16, ragged */
        const int cols_l[] = {blk == 256 ? 256 : 96, blk == 256 ? 768 : 200, blk == 256 ? 2816 : 1024,
                              blk == 256 ? 6656 : 6656, blk == 256 ? 20224 : 4096};
        for (size_t ci = 0; ci < 5; ci++) {
            const int cols = cols_l[ci] / blk * blk;
            for (size_t ri = 0; ri < sizeof rows_l / sizeof *rows_l; ri++) {
                const int rows = rows_l[ri];
                const size_t rb = mu_type_row_bytes(type, cols);
                uint8_t *w = malloc(rb * rows);
                float *row = malloc((size_t)cols * 4);
                for (int r = 0; r < rows; r++) {
                    /* rows of different scales, some large values */
                    const float s = (r % 3 == 0) ? 0.02f : (r % 3 == 1) ? 1.0f : 40.0f;
                    for (int i = 0; i < cols; i++) row[i] = frand() * s * (i % 97 == 0 ? 8 : 1);
                    mu_quantize_row(type, row, w + (size_t)r * rb, cols);
                }
                if (type == MU_T_NVFP4 && ci == 2) /* any bytes: scales 0x7f (0) and 0xff (240), codes of -0 */
                    for (size_t i = 0; i < rb * rows; i++) {
                        frand();
                        w[i] = i % 36 == 0 ? 0x7f : i % 36 == 1 ? 0xff : (uint8_t)(rng >> 24);
                    }
                for (size_t tj = 0; tj < sizeof Ts / sizeof *Ts; tj++) {
                    const int T = Ts[tj], nb = batch_rows(type, rows, cols, T);
                    float *x = malloc((size_t)T * cols * 4), *want = malloc((size_t)T * rows * 4),
                          *got = malloc((size_t)T * rows * 4);
                    for (size_t i = 0; i < (size_t)T * cols; i++) x[i] = frand() * (i % 13 == 0 ? 5.0f : 0.5f);
                    if (T == 3) memset(x, 0, (size_t)cols * 4); /* an all-zero activation row */
                    /* a NaN activation (Q8_0 dot type): it quantizes to -128,
                     * where NVFP4's x86 products differ from plain ones;
                     * the block's scale stays finite */
                    if ((T == 2 || T == 9 || T == 67) && (type == MU_T_Q8_0 || type == MU_T_NVFP4)) x[cols + 7] = NAN;
                    cpu_matmul(k, type, rows, cols, T, nb, w, x, want);
                    mu_err err = {0};
                    if (mu_gpu_test_matmul(0, type, rows, cols, T, nb, w, x, got, &err)) {
                        printf("FAIL matmul: %s\n", err.msg);
                        return 1;
                    }
                    check("matmul", type, rows, cols, T, want, got, (size_t)T * rows);
                    free(x);
                    free(want);
                    free(got);
                }
                /* row lookup of every row */
                int32_t ids[36];
                for (int r = 0; r < rows; r++) ids[r] = rows - 1 - r;
                float *want = malloc((size_t)rows * cols * 4), *got = malloc((size_t)rows * cols * 4);
                for (int r = 0; r < rows; r++) k->dequant[type](w + (size_t)ids[r] * rb, want + (size_t)r * cols, cols);
                mu_err err = {0};
                if (mu_gpu_test_get_rows(0, type, rows, cols, w, ids, rows, got, &err)) {
                    printf("FAIL get_rows: %s\n", err.msg);
                    return 1;
                }
                check("get_rows", type, rows, cols, rows, want, got, (size_t)rows * cols);
                free(want);
                free(got);
                free(w);
                free(row);
            }
        }
    }
    /* the prefill kernels (tensor cores; Q8_0 by dp4a): several row and token tiles, ragged
     * edges on both sides */
    const uint32_t big_types[] = {MU_T_Q4_K, MU_T_Q6_K, MU_T_Q8_0, MU_T_NVFP4};
    /* (Q4_K: tiles of 128 tokens below n_batch in matrices of 1024 rows or more take the wgmma kernel where
     * the plugin has one for the device, the rest the int8 one) */
    const int big[][3] = {{130, 512, 150},   {200, 2816, 70},  {65, 768, 300},  {64, 256, 33},   {1100, 1024, 257},
                          {1024, 768, 300}, {1090, 2816, 64}, {40, 512, 71},   {1030, 512, 131}};
    const int n_big = sizeof big / sizeof *big;
    for (size_t ti = 0; ti < sizeof big_types / sizeof *big_types; ti++)
        for (int bi = 0; bi < n_big; bi++) {
            const uint32_t type = big_types[ti];
            const int rows = big[bi][0], cols = big[bi][1], T = big[bi][2], nb = batch_rows(type, rows, cols, T);
            const bool extreme = bi >= n_big - 2; /* the largest integer sums the formats allow */
            const size_t rb = mu_type_row_bytes(type, cols);
            uint8_t *w = malloc(rb * rows);
            float *row = malloc((size_t)cols * 4), *x = malloc((size_t)T * cols * 4),
                  *want = malloc((size_t)T * rows * 4), *got = malloc((size_t)T * rows * 4);
            for (int r = 0; r < rows; r++) {
                const float s = (r % 3 == 0) ? 0.02f : (r % 3 == 1) ? 1.0f : 40.0f;
                for (int i = 0; i < cols; i++) row[i] = frand() * s * (i % 97 == 0 ? 8 : 1);
                mu_quantize_row(type, row, w + (size_t)r * rb, cols);
            }
            for (size_t i = 0; i < (size_t)T * cols; i++) x[i] = frand() * (i % 13 == 0 ? 5.0f : 0.5f);
            if (bi % 2 == 0 && (type == MU_T_Q8_0 || type == MU_T_NVFP4)) x[cols + 7] = NAN; /* an activation byte of -128 */
            if (extreme) { /* codes, scales and mins at their largest magnitude, activations all +-127 */
                for (size_t i = 0; i < (size_t)T * cols; i++) x[i] = (i / cols) % 2 ? -1.0f : 1.0f;
                for (int r = 0; r < rows; r++)
                    for (int b = 0; b < cols / mu_type_get(type)->blck; b++) {
                        uint8_t *blk = w + (size_t)r * rb + (size_t)b * mu_type_get(type)->type_bytes;
                        if (type == MU_T_Q8_0) { /* codes -128 and 127 */
                            mu_block_q8_0 *q = (mu_block_q8_0 *)blk;
                            q->d = 0x2000;
                            memset(q->qs, r % 2 ? 0x80 : 0x7F, sizeof q->qs);
                        } else if (type == MU_T_NVFP4) { /* codes -12 and 12, the largest finite scale */
                            mu_block_nvfp4 *q = (mu_block_nvfp4 *)blk;
                            memset(q->d, 0x7E, sizeof q->d);
                            memset(q->qs, r % 2 ? 0xFF : 0x77, sizeof q->qs);
                        } else if (type == MU_T_Q4_K) {
                            mu_block_q4_K *q = (mu_block_q4_K *)blk;
                            q->d = q->dmin = 0x2000;
                            memset(q->scales, 0xFF, sizeof q->scales);
                            memset(q->qs, r % 2 ? 0xFF : 0x0F, sizeof q->qs);
                        } else {
                            mu_block_q6_K *q = (mu_block_q6_K *)blk; /* codes 0 and 63 */
                            memset(q->ql, r % 4 < 2 ? 0 : 0xFF, sizeof q->ql);
                            memset(q->qh, r % 4 < 2 ? 0 : 0xFF, sizeof q->qh);
                            memset(q->scales, r % 2 ? 0x80 : 0x7F, sizeof q->scales);
                            q->d = 0x2000;
                        }
                    }
            }
            cpu_matmul(k, type, rows, cols, T, nb, w, x, want);
            mu_err err = {0};
            if (mu_gpu_test_matmul(0, type, rows, cols, T, nb, w, x, got, &err)) {
                printf("FAIL matmul: %s\n", err.msg);
                return 1;
            }
            check(extreme ? "matmul (tiles, extremes)" : "matmul (tiles)", type, rows, cols, T, want, got, (size_t)T * rows);
            free(w), free(row), free(x), free(want), free(got);
        }
    if (test_attention()) return 1;
    if (test_best()) return 1;
    printf("gpu kernels: %d cases, %d failed\n", n_cases, n_fail);
    return n_fail ? 1 : 0;
}
