/* test_vit_gpu_emul.c: the CUDA vision encoder's data flow without a GPU.
 * A plain C emulation of gpu_cuda_vit.cu's pipeline, kernel by kernel, fed
 * exactly what the plugin is fed (mu_vit_gpu_desc, mu_vit_gpu_image) and
 * using the kernels' own index math (src/gpu/vit_index.h) and roundings
 * (F16 matmul inputs, F16 K and V, the GEMM epilogue's order, the
 * attention's per-block key range and online softmax), against the CPU
 * encoder on the tiny projector at several image sizes: cosine >= 0.999
 * and relative L2 <= 0.01, the device test's bar (tests/gpu/
 * test_gpu_vision.c). What it cannot see: the CUDA code's own tiling
 * (tensor-core fragments, shared memory), which only the gpu tier runs.
 * Also: the layout is a permutation with contiguous windows, and the weight
 * conversion of Q8_0 to F16 equals the reference dequantizer, rounded. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser_synth.h"
#include "../../src/base/pool.h"
#include "../../src/gpu/vit_index.h"
#include "../../src/kern/kern.h"
#include "../../src/vision/mmproj.h"
#include "../../src/vision/vit.h"

static char dir[64] = "/tmp/muser-vitemul-XXXXXX", ppath[128], qpath[128];

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    snprintf(ppath, sizeof ppath, "%s/p.gguf", dir);
    snprintf(qpath, sizeof qpath, "%s/q.gguf", dir);
    mu_synth_mmproj_opts o;
    mu_synth_mmproj_defaults(&o);
    mu_err err = {0};
    if (mu_synth_mmproj_write(&o, ppath, &err)) return -1;
    o.type = MU_SYNTH_Q8_0;
    if (mu_synth_mmproj_write(&o, qpath, &err)) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(ppath);
    unlink(qpath);
    rmdir(dir);
    return 0;
}

static float h16(float x) { return mu_f16_to_f32(mu_f32_to_f16(x)); }

/* ---- the device's steps, in C ----------------------------------------- */

typedef struct {
    float *w; /* F16 values */
    int rows, cols;
} emat;

/* k_to_f16 (and the F16 upload) */
static void to_mat(const mu_gpu_tensor *t, emat *m) {
    m->rows = (int)t->ne1, m->cols = (int)t->ne0;
    m->w = malloc((size_t)m->rows * m->cols * sizeof *m->w);
    const size_t n = (size_t)m->rows * m->cols;
    for (size_t e = 0; e < n; e++) {
        const size_t r = e / m->cols, c = e % m->cols;
        float v;
        switch (t->type) {
        case MU_T_F16: v = mu_f16_to_f32(((const mu_f16 *)t->data)[e]); break;
        case MU_T_F32: v = ((const float *)t->data)[e]; break;
        case MU_T_BF16: v = mu_bf16_to_f32(((const mu_bf16 *)t->data)[e]); break;
        default: {
            const uint8_t *b = (const uint8_t *)t->data + r * (m->cols / 32 * 34) + c / 32 * 34;
            v = mu_f16_to_f32((mu_f16)(b[0] | b[1] << 8)) * (float)(int8_t)b[2 + c % 32];
        }
        }
        m->w[e] = h16(v);
    }
}

static const float *vec(const mu_gpu_tensor *t) { return t->data; }

static float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }

/* k_gemm: A holds F16 values; the epilogue's order */
static void gemm(const float *A, int T, const emat *W, const float *bias, const float *res, bool gelu, float *yf,
                 float *yh) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < W->rows; r++) {
            const float *a = A + (size_t)t * W->cols, *w = W->w + (size_t)r * W->cols;
            float acc = 0;
            for (int k = 0; k < W->cols; k++) acc += a[k] * w[k];
            float v = acc;
            if (bias) v = v + bias[r];
            if (gelu) v = gelu_erf(v);
            const size_t o = (size_t)t * W->rows + r;
            if (res) v = v + res[o];
            if (yf) yf[o] = v;
            else yh[o] = h16(v);
        }
}

/* k_ln */
static void ln(const float *x, int n, int E, const float *w, const float *b, float eps, float *yf, float *yh) {
    float *row = malloc((size_t)E * sizeof *row);
    for (int t = 0; t < n; t++) {
        memcpy(row, x + (size_t)t * E, (size_t)E * sizeof *row);
        double s = 0;
        for (int i = 0; i < E; i++) s += row[i];
        const float mean = (float)s / (float)E;
        double v = 0;
        for (int i = 0; i < E; i++) v += (double)((row[i] - mean) * (row[i] - mean));
        const float scale = 1.0f / sqrtf((float)(v / E) + eps);
        for (int i = 0; i < E; i++) {
            float y = (row[i] - mean) * scale;
            if (w) y = y * w[i];
            if (b) y = y + b[i];
            if (yf) yf[(size_t)t * E + i] = y;
            if (yh) yh[(size_t)t * E + i] = h16(y);
        }
    }
    free(row);
}

/* k_rope */
static void rope(const float *x, int n, int E, int hd, const mu_gpu_vit_image *im, float *yf, float *yh) {
    const int nd = hd / 2, pairs = E / 2;
    for (int64_t e = 0; e < (int64_t)n * pairs; e++) {
        const int t = (int)(e / pairs);
        int by_row, i;
        const size_t o = (size_t)t * E + mu_vi_rope_pair((int)(e % pairs), hd, &by_row, &i);
        const int p = by_row ? im->ph[t] : im->pw[t];
        assert_true(p >= 0 && p <= im->n_pos);
        const float c = im->rope_cs[(size_t)p * nd + i], s = im->rope_cs[(size_t)p * nd + i + 1];
        const float x0 = x[o], x1 = x[o + 1];
        const float y0 = fmaf(x0, c, -(x1 * s)), y1 = fmaf(x0, s, x1 * c);
        if (yf) yf[o] = y0, yf[o + 1] = y1;
        else yh[o] = h16(y0), yh[o + 1] = h16(y1);
    }
}

/* k_attn, block by block: the block's key range, tiles of MU_VI_AK keys,
 * each query's own window, the online softmax */
static void attn(const float *q, const float *k, const float *v, int n, int E, int hd, int n_head,
                 const mu_gpu_vit_image *im, bool global, float *out) {
    const float scale = 1.0f / sqrtf((float)hd);
    float *acc = malloc((size_t)hd * sizeof *acc);
    for (int h = 0; h < n_head; h++)
        for (int b0 = 0; b0 < n; b0 += MU_VI_AQ) {
            int b_lo = n, b_hi = 0;
            for (int i = b0; i < b0 + MU_VI_AQ && i < n; i++) {
                const int lo = global ? 0 : im->win_lo[i], hi = global ? n : im->win_hi[i];
                assert_true(lo <= i && i < hi); /* a token sees itself */
                if (lo < b_lo) b_lo = lo;
                if (hi > b_hi) b_hi = hi;
            }
            for (int i = b0; i < b0 + MU_VI_AQ && i < n; i++) {
                const int lo = global ? 0 : im->win_lo[i], hi = global ? n : im->win_hi[i];
                const float *qr = q + (size_t)i * E + (size_t)h * hd;
                float m = -INFINITY, l = 0;
                memset(acc, 0, (size_t)hd * sizeof *acc);
                for (int j0 = b_lo; j0 < b_hi; j0 += MU_VI_AK)
                    for (int r = 0; r < MU_VI_AK && j0 + r < b_hi; r++) {
                        const int j = j0 + r;
                        if (j < lo || j >= hi) continue;
                        const float *kr = k + (size_t)j * E + (size_t)h * hd, *vr = v + (size_t)j * E + (size_t)h * hd;
                        float s = 0;
                        for (int d = 0; d < hd; d++) s = fmaf(qr[d], kr[d], s);
                        s = s * scale;
                        if (s > m) {
                            const float corr = expf(m - s);
                            l = l * corr;
                            for (int d = 0; d < hd; d++) acc[d] = acc[d] * corr;
                            m = s;
                        }
                        const float p = expf(s - m);
                        l = l + p;
                        for (int d = 0; d < hd; d++) acc[d] = fmaf(p, vr[d], acc[d]);
                    }
                const float inv = l > 0 ? 1.0f / l : 0.0f;
                for (int d = 0; d < hd; d++) out[(size_t)i * E + (size_t)h * hd + d] = h16(acc[d] * inv);
            }
        }
    free(acc);
}

/* cu_vit_encode */
static void emulate(const mu_gpu_vit_desc *d, const mu_gpu_vit_image *im) {
    const int E = d->n_embd, F = d->n_ff, ps = d->patch_size, K = 3 * ps * ps, gw = im->gw;
    const int n = im->gw * im->gh, n_out = n / 4, hd = d->head_dim;
    float *col = malloc((size_t)n * K * 4), *h = malloc((size_t)n * E * 4), *x16 = malloc((size_t)n * E * 4);
    float *qf = malloc((size_t)n * E * 4), *kf = malloc((size_t)n * E * 4), *k16 = malloc((size_t)n * E * 4);
    float *v16 = malloc((size_t)n * E * 4), *ao = malloc((size_t)n * E * 4), *big = malloc((size_t)n * F * 4);
    float *a1 = malloc((size_t)n_out * d->mm_hidden * 4), *a2 = malloc((size_t)n_out * d->mm_hidden * 4);
    emat patch;
    to_mat(&d->patch_w, &patch);
    for (int64_t e = 0; e < (int64_t)n * K; e++) {
        const int64_t src = mu_vi_im2col_src(e, ps, im->nx, im->ny, gw, im->perm[e / K]);
        assert_true(src >= 0 && src < (int64_t)3 * im->nx * im->ny);
        col[e] = h16(im->chw[src]);
    }
    gemm(col, n, &patch, vec(&d->patch_b), im->pos, false, h, NULL);
    free(patch.w);
    ln(h, n, E, vec(&d->pre_w), vec(&d->pre_b), d->eps, h, NULL);
    for (int il = 0; il < d->n_layer; il++) {
        const mu_gpu_vit_layer *L = &d->layers[il];
        emat q, k, v, o, up, down;
        to_mat(&L->q_w, &q), to_mat(&L->k_w, &k), to_mat(&L->v_w, &v), to_mat(&L->o_w, &o);
        to_mat(&L->up_w, &up), to_mat(&L->down_w, &down);
        ln(h, n, E, vec(&L->ln1_w), vec(&L->ln1_b), d->eps, NULL, x16);
        gemm(x16, n, &q, vec(&L->q_b), NULL, false, qf, NULL);
        gemm(x16, n, &k, vec(&L->k_b), NULL, false, kf, NULL);
        gemm(x16, n, &v, vec(&L->v_b), NULL, false, NULL, v16);
        rope(qf, n, E, hd, im, qf, NULL);
        rope(kf, n, E, hd, im, NULL, k16);
        attn(qf, k16, v16, n, E, hd, d->n_head, im, d->global[il], ao);
        gemm(ao, n, &o, vec(&L->o_b), h, false, h, NULL);
        ln(h, n, E, vec(&L->ln2_w), vec(&L->ln2_b), d->eps, NULL, x16);
        gemm(x16, n, &up, vec(&L->up_b), NULL, true, NULL, big);
        gemm(big, n, &down, vec(&L->down_b), h, false, h, NULL);
        free(q.w), free(k.w), free(v.w), free(o.w), free(up.w), free(down.w);
    }
    ln(h, n, E, vec(&d->post_w), vec(&d->post_b), d->eps, h, NULL);
    for (int64_t e = 0; e < (int64_t)n_out * 4 * E; e++) {
        int c;
        const int g = mu_vi_shuffle_src(e, E, gw, &c);
        assert_true(g >= 0 && g < n && c >= 0 && c < E);
        x16[e] = h16(h[(size_t)im->inv[g] * E + c]);
    }
    emat m[3];
    for (int i = 0; i < 3; i++) to_mat(&d->mm[i], &m[i]);
    gemm(x16, n_out, &m[0], NULL, NULL, true, NULL, a1);
    gemm(a1, n_out, &m[1], NULL, NULL, true, NULL, a2);
    gemm(a2, n_out, &m[2], NULL, NULL, false, im->out, NULL);
    for (int i = 0; i < 3; i++) free(m[i].w);
    free(col), free(h), free(x16), free(qf), free(kf), free(k16), free(v16), free(ao), free(big), free(a1), free(a2);
}

/* ---- tests -------------------------------------------------------------- */

static float *make_chw(int nx, int ny, unsigned seed) {
    float *chw = malloc((size_t)3 * nx * ny * sizeof *chw);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < ny; y++)
            for (int x = 0; x < nx; x++)
                chw[((size_t)c * ny + y) * nx + x] = 0.9f * sinf(0.07f * x * (c + 1) + 0.05f * y + (float)seed);
    return chw;
}

static void test_layout(void **state) {
    (void)state;
    mu_mmproj *p = NULL;
    mu_err err = {0};
    assert_int_equal(mu_mmproj_open(ppath, NULL, &p, &err), 0);
    static const int sizes[][2] = {{28, 28}, {140, 252}, {364, 28}, {224, 224}};
    for (int s = 0; s < 4; s++) {
        mu_vit_plan pl;
        assert_int_equal(mu_vit_plan_new(p, sizes[s][0], sizes[s][1], &pl, &err), 0);
        char *seen = calloc((size_t)pl.n, 1);
        for (int i = 0; i < pl.n; i++) {
            assert_true(pl.perm[i] >= 0 && pl.perm[i] < pl.n && !seen[pl.perm[i]]);
            seen[pl.perm[i]] = 1;
            assert_int_equal(pl.inv[pl.perm[i]], i);
            assert_true(pl.wlo[i] <= i && i < pl.whi[i]);
            assert_true(pl.whi[i] - pl.wlo[i] <= p->info.pos_side * p->info.pos_side);
            /* every token of the window shares it, and is in the same window cell */
            for (int j = pl.wlo[i]; j < pl.whi[i]; j++) {
                assert_int_equal(pl.wlo[j], pl.wlo[i]);
                assert_int_equal((pl.pw[j] - 1) / p->info.pos_side, (pl.pw[i] - 1) / p->info.pos_side);
                assert_int_equal((pl.ph[j] - 1) / p->info.pos_side, (pl.ph[i] - 1) / p->info.pos_side);
            }
            assert_true(pl.pw[i] >= 1 && pl.pw[i] <= pl.n_pos && pl.ph[i] >= 1 && pl.ph[i] <= pl.n_pos);
        }
        free(seen);
        mu_vit_plan_free(&pl);
    }
    /* the shuffle reads every patch once */
    const int E = 8, gw = 6, gh = 4, n_out = gw * gh / 4;
    int *count = calloc((size_t)gw * gh * E, sizeof *count);
    for (int64_t e = 0; e < (int64_t)n_out * 4 * E; e++) {
        int c;
        const int g = mu_vi_shuffle_src(e, E, gw, &c);
        assert_true(g >= 0 && g < gw * gh);
        count[g * E + c]++;
    }
    for (int i = 0; i < gw * gh * E; i++) assert_int_equal(count[i], 1);
    free(count);
    mu_mmproj_free(p);
}

static void test_emulation(void **state) {
    (void)state;
    mu_mmproj *p = NULL;
    mu_err err = {0};
    mu_pool *pool = NULL;
    assert_int_equal(mu_mmproj_open(ppath, NULL, &p, &err), 0);
    assert_int_equal(mu_pool_new(2, &pool, &err), 0);
    mu_gpu_vit_desc d;
    assert_int_equal(mu_vit_gpu_desc(p, &d, &err), 0);
    assert_int_equal((int)d.patch_w.ne0 * (int)d.patch_w.ne1 * 2, (int)d.patch_w.bytes);
    static const int sizes[][2] = {{28, 28}, {140, 252}, {224, 224}, {364, 56}};
    for (int s = 0; s < 4; s++) {
        const int nx = sizes[s][0], ny = sizes[s][1], rows = (nx / 28) * (ny / 28);
        float *chw = make_chw(nx, ny, (unsigned)s);
        float *cpu = malloc((size_t)rows * p->info.n_out * 4), *dev = malloc((size_t)rows * p->info.n_out * 4);
        assert_int_equal(mu_vit_encode(p, mu_kern_ref(), mu_vit_kern_ref(), pool, chw, nx, ny, cpu, &err), 0);
        mu_gpu_vit_image im;
        mu_vit_plan pl;
        assert_int_equal(mu_vit_gpu_image(p, chw, nx, ny, dev, &im, &pl, &err), 0);
        emulate(&d, &im);
        mu_vit_gpu_image_free(&im, &pl);
        double dot = 0, ww = 0, gg = 0, dd = 0;
        for (size_t i = 0; i < (size_t)rows * p->info.n_out; i++) {
            dot += (double)cpu[i] * dev[i], ww += (double)cpu[i] * cpu[i], gg += (double)dev[i] * dev[i];
            dd += ((double)dev[i] - cpu[i]) * ((double)dev[i] - cpu[i]);
        }
        const double cosv = dot / sqrt(ww * gg), rel = sqrt(dd / ww);
        print_message("emulated device vs CPU, tiny %dx%d: cosine %.7f rel L2 %.3e\n", nx, ny, cosv, rel);
        assert_true(cosv >= 0.999 && rel <= 0.01);
        free(chw), free(cpu), free(dev);
    }
    mu_vit_gpu_desc_free(&d);
    mu_pool_free(pool);
    mu_mmproj_free(p);
}

/* k_to_f16 of Q8_0 rows == the reference dequantizer, rounded to F16 */
static void test_q8_0_convert(void **state) {
    (void)state;
    mu_mmproj *p = NULL;
    mu_err err = {0};
    assert_int_equal(mu_mmproj_open(qpath, NULL, &p, &err), 0);
    mu_gpu_vit_desc d;
    assert_int_equal(mu_vit_gpu_desc(p, &d, &err), 0);
    const mu_gpu_tensor *t = &d.layers[0].up_w;
    assert_int_equal(t->type, MU_T_Q8_0);
    emat m;
    to_mat(t, &m);
    float *row = malloc((size_t)m.cols * sizeof *row);
    const size_t rb = (size_t)m.cols / 32 * 34;
    for (int r = 0; r < m.rows; r++) {
        mu_dequant_q8_0_ref((const uint8_t *)t->data + r * rb, row, m.cols);
        for (int c = 0; c < m.cols; c++) assert_true(h16(row[c]) == m.w[(size_t)r * m.cols + c]);
    }
    free(row), free(m.w);
    mu_vit_gpu_desc_free(&d);
    mu_mmproj_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_emulation),
        cmocka_unit_test(test_q8_0_convert),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
