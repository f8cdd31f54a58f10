/* vit_kern.c: the vision encoder's own kernels, plain C: the reference
 * (specification and test oracle) of every fast variant, and the table
 * dispatch.
 * Owns: ggml's CPU flash attention (tiled path) for one head, its layer
 * norm, exact GELU and bilinear position resize, in ggml's float order.
 * Does not own: matmuls (src/kern), the encoder's data flow (vit.c).
 * Design: each function names the ggml op it reproduces and how its float
 * order goes; where a C++ expression of ggml's is contracted to FMAs by the
 * compiler that builds llama.cpp (x86-64, -march=native), the contraction
 * is written out with fmaf. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "vit.h"

#define TILE 64 /* GGML_FA_TILE_Q = GGML_FA_TILE_KV */

/* ---- attention --------------------------------------------------------- */

/* ggml's one-row path (fewer than 64 query rows): q rounded to F16, one
 * ggml_vec_dot_f16 per key, an online softmax key by key with libm's expf,
 * the V sum kept in F16 (ggml_vec_mad_f16 and ggml_vec_scale_f16: fused on
 * whole groups of 64, and the tail as GCC contracts it, also fused). */
static void attn_rows_ref(const mu_vit_attn_args *a, int i0, int i1) {
    const int hd = a->hd;
    mu_f16 q16[512], acc[512];
    for (int i = i0; i < i1; i++) {
        const float *q = a->q + (size_t)i * a->ld + a->off;
        for (int d = 0; d < hd; d++) q16[d] = mu_f32_to_f16(q[d]), acc[d] = 0;
        float M = -INFINITY, S = 0.0f;
        for (int j = a->win_lo[i]; j < a->win_hi[i]; j++) {
            float s = mu_vec_dot_f16_ref(hd, a->k + (size_t)j * a->ld + a->off, q16);
            s = s * a->scale;
            s += 0.0f;
            const float Mold = M;
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                M = s;
                ms = expf(Mold - M);
                for (int d = 0; d < hd; d++) acc[d] = mu_f32_to_f16(mu_f16_to_f32(acc[d]) * ms);
            } else {
                vs = expf(s - M);
            }
            const mu_f16 *v = a->v + (size_t)j * a->ld + a->off;
            for (int d = 0; d < hd; d++) acc[d] = mu_f32_to_f16(fmaf(mu_f16_to_f32(v[d]), vs, mu_f16_to_f32(acc[d])));
            S = fmaf(S, ms, vs);
        }
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        float *o = a->out + (size_t)i * a->ld + a->off;
        for (int d = 0; d < hd; d++) o[d] = mu_f16_to_f32(acc[d]) * inv;
    }
}

void mu_vit_attn_ref(const mu_vit_attn_args *a, int i0, int i1) {
    const int hd = a->hd;
    if (a->n < TILE) { /* ggml takes the tiled path from 64 query rows on */
        attn_rows_ref(a, i0, i1);
        return;
    }
    float kq[TILE], acc[512];
    for (int i = i0; i < i1; i++) {
        const float *q = a->q + (size_t)i * a->ld + a->off;
        const int lo = a->win_lo[i], hi = a->win_hi[i];
        float M = -INFINITY, S = 0.0f;
        for (int d = 0; d < hd; d++) acc[d] = 0.0f;
        for (int t0 = lo / TILE * TILE; t0 < hi; t0 += TILE) {
            float mx = -INFINITY;
            for (int tk = 0; tk < TILE; tk++) {
                const int j = t0 + tk;
                if (j < lo || j >= hi) {
                    kq[tk] = -INFINITY;
                    continue;
                }
                const mu_f16 *k = a->k + (size_t)j * a->ld + a->off;
                float s = 0.0f;
                for (int d = 0; d < hd; d++) s = fmaf(mu_f16_to_f32(k[d]), q[d], s);
                s *= a->scale;
                s += 0.0f; /* the window mask's 0 */
                kq[tk] = s;
                mx = mx > s ? mx : s;
            }
            if (mx == -INFINITY) continue;
            const float Mnew = fmaxf(M, mx);
            if (Mnew > M) {
                const float ms = expf(M - Mnew);
                for (int d = 0; d < hd; d++) acc[d] *= ms;
                S *= ms;
            }
            M = Mnew;
            double sum = 0;
            for (int g = 0; g < TILE; g += 16) {
                for (int l = 0; l < 16; l++) kq[g + l] = mu_expf_ggml(kq[g + l] - Mnew);
                sum += (double)mu_hsum16(kq + g);
            }
            S = (float)((double)S + sum);
            for (int tk = 0; tk < TILE; tk++) {
                const int j = t0 + tk;
                if (j < lo || j >= hi) continue; /* a zero weight: the FMA leaves acc as it is */
                const mu_f16 *v = a->v + (size_t)j * a->ld + a->off;
                for (int d = 0; d < hd; d++) acc[d] = fmaf(mu_f16_to_f32(v[d]), kq[tk], acc[d]);
            }
        }
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        float *o = a->out + (size_t)i * a->ld + a->off;
        for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
}

/* ---- matmul ------------------------------------------------------------ */

void mu_vit_mm_f16_ref(int n, const mu_f16 *w, size_t ws, int r0, int r1, const float *a, size_t as, int n_t,
                       float *y, size_t ys, const float *bias) {
    for (int t = 0; t < n_t; t++)
        for (int r = r0; r < r1; r++) {
            const mu_f16 *x = w + (size_t)r * ws;
            const float *b = a + (size_t)t * as;
            float acc[16] = {0};
            for (int i = 0; i + 16 <= n; i += 16)
                for (int l = 0; l < 16; l++) acc[l] = fmaf(mu_f16_to_f32(x[i + l]), b[i + l], acc[l]);
            const float v = mu_hsum16(acc);
            y[(size_t)t * ys + r] = bias ? v + bias[r] : v;
        }
}

/* ---- norms, activations, resize --------------------------------------- */

void mu_vit_layer_norm(int n, const float *x, float *y, const float *w, const float *b, float eps) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i];
    const float mean = (float)s / (float)n;
    double v = 0;
    int i = 0;
    for (; i + 15 < n; i += 16) {
        float sq[16];
        for (int l = 0; l < 16; l++) {
            const float d = x[i + l] - mean;
            y[i + l] = d;
            sq[l] = d * d;
        }
        v += (double)mu_hsum16(sq);
    }
    for (; i < n; i++) {
        const float d = x[i] - mean;
        y[i] = d;
        v += (double)(d * d);
    }
    const float var = (float)(v / n);
    const float scale = 1.0f / sqrtf(var + eps);
    for (i = 0; i < n; i++) y[i] *= scale;
    if (w)
        for (i = 0; i < n; i++) y[i] *= w[i];
    if (b)
        for (i = 0; i < n; i++) y[i] += b[i];
}

void mu_vit_gelu_erf(int n, float *x) {
    for (int i = 0; i < n; i++) {
        const float xi = x[i];
        x[i] = 0.5f * xi * (1.0f + erff(xi * 0.70710678118654752440084436210484f));
    }
}

void mu_vit_blend_ref(int E, const float *a, const float *b, const float *c, const float *d, float dx, float dy,
                      float *o) {
    const float omx = 1 - dx, omy = 1 - dy;
    for (int e = 0; e < E; e++) o[e] = fmaf(d[e] * dx, dy, fmaf(c[e] * omx, dy, fmaf(a[e] * omx, omy, b[e] * dx * omy)));
}

/* the source rows and weight of output coordinate i of g along an axis of side */
static void resize_axis(int i, int g, int side, int *lo, int *hi, float *w) {
    const float sf = (float)g / (float)side, x = ((float)i + 0.5f) / sf - 0.5f;
    int x0 = (int)floorf(x), x1 = x0 + 1;
    x0 = x0 < 0 ? 0 : x0 > side - 1 ? side - 1 : x0;
    x1 = x1 < 0 ? 0 : x1 > side - 1 ? side - 1 : x1;
    float dx = x - (float)x0;
    *lo = x0, *hi = x1, *w = dx < 0 ? 0 : dx > 1 ? 1 : dx;
}

void mu_vit_pos_resize(const mu_vit_kern *vk, const float *grid, int side, int E, int gw, int gh, const int *cells,
                       int n, float *out) {
    if (!vk) vk = mu_vit_kern_best();
    if (!cells) n = gw * gh;
    const bool same = gw == side && gh == side;
    for (int k = 0; k < n; k++) {
        const int cell = cells ? cells[k] : k, i1 = cell / gw, i0 = cell % gw;
        float *o = out + (size_t)k * E;
        if (same) {
            memcpy(o, grid + (size_t)cell * E, (size_t)E * sizeof *o);
            continue;
        }
        int y0, y1, x0, x1;
        float dy, dx;
        resize_axis(i1, gh, side, &y0, &y1, &dy);
        resize_axis(i0, gw, side, &x0, &x1, &dx);
        vk->blend(E, grid + ((size_t)y0 * side + x0) * E, grid + ((size_t)y0 * side + x1) * E,
                  grid + ((size_t)y1 * side + x0) * E, grid + ((size_t)y1 * side + x1) * E, dx, dy, o);
    }
}

/* ---- tables ------------------------------------------------------------ */

static const mu_vit_kern REF = {"ref", mu_vit_attn_ref, mu_vit_mm_f16_ref, mu_vit_gelu_erf, mu_vit_blend_ref};

const mu_vit_kern *mu_vit_kern_ref(void) { return &REF; }

#if defined(__x86_64__)
static mu_vit_kern AVX512;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool have_avx512;
static void init_tables(void) {
    __builtin_cpu_init();
    have_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    if (have_avx512) {
        AVX512 = REF;
        mu_vit_fill_avx512(&AVX512);
    }
}
#endif

const mu_vit_kern *mu_vit_kern_best(void) {
#if defined(__x86_64__)
    pthread_once(&once, init_tables);
    if (have_avx512) return &AVX512;
#endif
    return &REF;
}

int mu_vit_kern_available(const mu_vit_kern **out, int cap) {
    int n = 0;
    if (n < cap) out[n++] = &REF;
#if defined(__x86_64__)
    pthread_once(&once, init_tables);
    if (have_avx512 && n < cap) out[n++] = &AVX512;
#endif
    return n;
}
