/* vit.h: Muse Glimmer's vision encoder on the CPU (the projector's forward
 * pass), and the kernel table of its own pieces.
 * The matmuls go through the engine's kernel table (src/kern), so they round
 * as llama.cpp's CPU backend rounds the same weight types; the pieces below
 * follow ggml's CPU ops bit for bit where the comment says so. */
#ifndef MU_VISION_VIT_H
#define MU_VISION_VIT_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/err.h"
#include "../base/pool.h"
#include "../kern/kern.h"
#include "mmproj.h"

/* One head of attention for the query rows [i0, i1) (ggml's CPU flash
 * attention; from n = 64 rows on its tiled path: 64 x 64 tiles, Q in f32,
 * K and V rounded to F16, scores by one FMA chain per key, the online
 * softmax per key tile with ggml's vector expf and a double sum, V products
 * by FMA chains; below 64 rows its one-row path, vit_kern.c).
 * q, out: rows of ld floats (the head's hd values at column off); k, v: F16
 * rows of ld. Query i sees keys [win_lo[i], win_hi[i]). */
typedef struct {
    int n, hd, ld, off;
    float scale;
    const float *q;
    const mu_f16 *k, *v;
    const int *win_lo, *win_hi;
    float *out;
} mu_vit_attn_args;

/* The F16 matmul of llama.cpp's batched path (llamafile tinyBLAS, AVX-512):
 * y[t * ys + r] = the dot of weight row r (w + r * ws, F16) with activation
 * row t (a + t * as, floats that are exact F16 values: the activations as
 * ggml converts them to the weight's dot type) for r in [r0, r1) and t in
 * [0, n_t): one 16-lane FMA accumulator over steps of 16 (n % 16 == 0),
 * reduced as _mm512_reduce_add_ps (mu_hsum16), then + bias[r] when bias is
 * not NULL (ggml_add of the bias after the matmul: the same two roundings).
 * ws, as: elements. */
typedef void (*mu_vit_mm_f16_fn)(int n, const mu_f16 *w, size_t ws, int r0, int r1, const float *a, size_t as,
                                 int n_t, float *y, size_t ys, const float *bias);

/* One row of the position grid's bilinear resize: o[e] = a[e] (1 - dx)
 * (1 - dy) + b[e] dx (1 - dy) + c[e] (1 - dx) dy + d[e] dx dy, left to right,
 * each product that feeds an add fused (as GCC contracts ggml's
 * ggml_interpolate), e in [0, E). */
typedef void (*mu_vit_blend_fn)(int E, const float *a, const float *b, const float *c, const float *d, float dx,
                                float dy, float *o);

typedef struct {
    const char *name;
    void (*attn)(const mu_vit_attn_args *a, int i0, int i1);
    mu_vit_mm_f16_fn mm_f16;
    void (*gelu)(int n, float *x); /* mu_vit_gelu_erf, bit for bit (libm's erff) */
    mu_vit_blend_fn blend;         /* mu_vit_blend_ref, bit for bit */
} mu_vit_kern;

const mu_vit_kern *mu_vit_kern_ref(void);
void mu_vit_blend_ref(int E, const float *a, const float *b, const float *c, const float *d, float dx, float dy,
                      float *o);
void mu_vit_attn_ref(const mu_vit_attn_args *a, int i0, int i1);
void mu_vit_mm_f16_ref(int n, const mu_f16 *w, size_t ws, int r0, int r1, const float *a, size_t as, int n_t,
                       float *y, size_t ys, const float *bias);
/* Filled by the ISA file (x86-64 builds only). */
void mu_vit_fill_avx512(mu_vit_kern *k);
/* The fastest table this CPU runs (its results equal the reference's). */
const mu_vit_kern *mu_vit_kern_best(void);
/* Every table this CPU can run, for tests; returns the count. */
int mu_vit_kern_available(const mu_vit_kern **out, int cap);

/* ggml's layer norm (ggml_norm, then * w, + b; w, b may be NULL): the mean
 * from a double sum, the variance from 16-lane float squares summed in
 * double (ggml_vec_cvar_f32, AVX-512 build). x and y may alias. */
void mu_vit_layer_norm(int n, const float *x, float *y, const float *w, const float *b, float eps);
/* x = 0.5 x (1 + erf(x / sqrt 2)) (ggml_gelu_erf) */
void mu_vit_gelu_erf(int n, float *x);
/* ggml's bilinear resize (ggml_interpolate, GGML_SCALE_MODE_BILINEAR,
 * half-pixel centres, no corner alignment) of the position grid
 * [side][side][E] to [gh][gw][E], rows blended by vk (NULL: the best
 * table). cells: out row k is resized cell cells[k] (of gw * gh, row-major;
 * the GPU's permuted order), n rows; NULL: every cell in order. */
void mu_vit_pos_resize(const mu_vit_kern *vk, const float *grid, int side, int E, int gw, int gh, const int *cells,
                       int n, float *out);

/* One image's token layout, shared by the CPU and CUDA encoders: tokens in
 * llama.cpp's permuted order (windows of pos_side x pos_side patches in
 * row-major window order, row-major inside a window); token i is grid
 * patch perm[i] (inv is the inverse), at 1-based RoPE positions pw[i]
 * (column), ph[i] (row), and sees keys [wlo[i], whi[i]) in the windowed
 * layers. rope_cs: [n_pos + 1][head_dim / 2] the cos, sin pairs of each
 * position (theta advanced by float products, as ggml's rope). */
typedef struct {
    int gw, gh, n, n_pos;
    int *perm, *inv, *pw, *ph, *wlo, *whi;
    float *rope_cs;
} mu_vit_plan;
int mu_vit_plan_new(const mu_mmproj *p, int nx, int ny, mu_vit_plan *pl, mu_err *err);
void mu_vit_plan_free(mu_vit_plan *pl);

/* The encoder over one preprocessed image: chw is [3][ny][nx] floats
 * (nx, ny multiples of patch_size * n_merge); out receives
 * [(nx/ps/2) * (ny/ps/2)][n_out] rows in row-major merged-grid order.
 * kern: the matmuls' table; vk: the encoder's own (NULL: the best). */
int mu_vit_encode(const mu_mmproj *p, const mu_kern *kern, const mu_vit_kern *vk, mu_pool *pool, const float *chw,
                  int nx, int ny, float *out, mu_err *err);

/* mu_vit_encode on CUDA device `device` (src/gpu, gpu_cuda_vit.cu): the
 * weights are uploaded on the first call and kept with p (released by
 * mu_mmproj_free); the caller serializes calls (mu_mmproj_lock). Not bit
 * for bit the CPU's: the device sums in another order (docs/vision.md).
 * MU_E_UNSUPPORTED when the plugin has no vision encoder or a weight type
 * is not one the device converts (the failure is remembered, later calls
 * fail at once), or when $MUSER_CUDA_VISION is 0. */
int mu_vit_encode_gpu(mu_mmproj *p, int device, const float *chw, int nx, int ny, float *out, mu_err *err);
/* Its two host steps, for mu_vit_encode_gpu and for tests that emulate the
 * device (tests/unit/test_vit_gpu_emul.c): the weights as src/gpu takes
 * them (d->layers and d->global malloc'ed), and one image's layout (the
 * plan's arrays and the permuted position grid, im->pos malloc'ed). */
int mu_vit_gpu_desc(const mu_mmproj *p, mu_gpu_vit_desc *d, mu_err *err);
void mu_vit_gpu_desc_free(mu_gpu_vit_desc *d);
int mu_vit_gpu_image(const mu_mmproj *p, const float *chw, int nx, int ny, float *out, mu_gpu_vit_image *im,
                     mu_vit_plan *pl, mu_err *err);
void mu_vit_gpu_image_free(mu_gpu_vit_image *im, mu_vit_plan *pl);

#endif
