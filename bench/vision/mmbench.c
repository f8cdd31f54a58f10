/* mmbench.c: the vision encoder's kernels (the best table of src/vision/vit.h)
 * alone on one thread, in GFLOP/s, at the full projector's shapes for an
 * 896x896 image (4096 patches):
 *   - the F16 matmul, K = 1536 (q, k, v, o, up) and K = 8960 (down), on
 *     one thread's half of the weight rows;
 *   - one head of attention (hd 96 of 1536): the 1024 rows of one window
 *     of 1024 patches, and the 4096 rows of a global layer;
 *   - the exact GELU on 4M values spread to about +-6 (x / sqrt 2 through
 *     every branch of erff), the table's and the reference's (libm's erff
 *     per value), in ns a value.
 *   cc -O2 -o /tmp/mmbench bench/vision/mmbench.c build/libmuser.a -lm -lpthread
 *   /tmp/mmbench [REPS]
 * Each shape runs REPS times (default 3), interleaved with the others; the
 * median is printed with the runs, and a hash of each output (the same for
 * two builds whose kernels agree bit for bit). Only the kernel call is timed
 * (process CPU time, so a loaded machine slows it less than the wall clock;
 * it still shares caches). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/base/mem.h"
#include "../../src/vision/vit.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t hash(const float *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + i, 4);
        h = (h ^ u) * 1099511628211ull;
    }
    return h;
}

/* 64-byte aligned and zeroed, as the encoder's buffers (mu_alloc) */
static void *alloc64(size_t bytes) {
    void *p = mu_alloc(bytes, 1);
    if (!p) exit(1);
    return p;
}

enum { N_MM = 2, N_ATTN = 2, N_SHAPES = 6 };
static const int mm_shape[N_MM][3] = {{1536, 768, 4096}, {8960, 768, 4096}}; /* K, weight rows, tokens */

/* One run of shape s: GFLOP/s, and the output's hash in *h. */
static double run(const mu_vit_kern *vk, int s, uint64_t *h) {
    if (s < N_MM) {
        const int n = mm_shape[s][0], rows = mm_shape[s][1], T = mm_shape[s][2];
        mu_f16 *w = alloc64((size_t)rows * n * sizeof *w);
        float *a = alloc64((size_t)T * n * sizeof *a), *y = alloc64((size_t)T * rows * sizeof *y);
        for (size_t i = 0; i < (size_t)rows * n; i++) w[i] = mu_f32_to_f16((float)(i * 7919 % 1023) / 1023.0f - 0.5f);
        for (size_t i = 0; i < (size_t)T * n; i++) a[i] = mu_f16_to_f32(mu_f32_to_f16((float)(i * 31 % 97) / 97.0f));
        const double t0 = cpu_s();
        vk->mm_f16(n, w, (size_t)n, 0, rows, a, (size_t)n, T, y, (size_t)rows, NULL);
        const double g = 2.0 * n * rows * T / (cpu_s() - t0) / 1e9;
        *h = hash(y, (size_t)T * rows);
        mu_free(w), mu_free(a), mu_free(y);
        return g;
    }
    if (s >= N_MM + N_ATTN) { /* GELU: ns a value, the reference's (s = 5) or the table's (s = 4) */
        const int n = 1 << 22;
        float *x = alloc64((size_t)n * sizeof *x);
        uint32_t seed = 1;
        for (int i = 0; i < n; i++) {
            float u = 0;
            for (int k = 0; k < 4; k++) seed = seed * 1664525u + 1013904223u, u += (float)(seed >> 8) / 16777216.0f - 0.5f;
            x[i] = 3.0f * u;
        }
        const double t0 = cpu_s();
        (s == N_MM + N_ATTN ? vk->gelu : mu_vit_gelu_erf)(n, x);
        const double g = (cpu_s() - t0) / n * 1e9;
        *h = hash(x, (size_t)n);
        mu_free(x);
        return g;
    }
    const bool global = s == N_MM + 1;
    const int n = 4096, hd = 96, ld = 1536, win = global ? n : 1024, i0 = global ? 0 : 1024,
              i1 = global ? n : 2048; /* as in the encoder: each window's keys converted once for its rows */
    float *q = alloc64((size_t)n * ld * sizeof *q), *out = alloc64((size_t)n * ld * sizeof *out);
    mu_f16 *k = alloc64((size_t)n * ld * sizeof *k), *v = alloc64((size_t)n * ld * sizeof *v);
    int *lo = alloc64((size_t)n * sizeof *lo), *hi = alloc64((size_t)n * sizeof *hi);
    for (size_t i = 0; i < (size_t)n * ld; i++) {
        q[i] = (float)(i * 131 % 1021) / 1021.0f - 0.5f;
        k[i] = mu_f32_to_f16((float)(i * 7919 % 1023) / 1023.0f - 0.5f);
        v[i] = mu_f32_to_f16((float)(i * 337 % 1019) / 1019.0f - 0.5f);
    }
    for (int i = 0; i < n; i++) lo[i] = i / win * win, hi[i] = lo[i] + win;
    const mu_vit_attn_args a = {.n = n, .hd = hd, .ld = ld, .off = 3 * hd, .scale = 0.102f, .q = q, .k = k, .v = v,
                                .win_lo = lo, .win_hi = hi, .out = out};
    const double t0 = cpu_s();
    vk->attn(&a, i0, i1);
    const double g = 4.0 * hd * win * (i1 - i0) / (cpu_s() - t0) / 1e9;
    *h = hash(out + (size_t)i0 * ld, (size_t)(i1 - i0) * ld);
    mu_free(q), mu_free(out), mu_free(k), mu_free(v), mu_free(lo), mu_free(hi);
    return g;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 3;
    const mu_vit_kern *vk = mu_vit_kern_best();
    double g[N_SHAPES][64];
    uint64_t h[N_SHAPES] = {0};
    for (int k = 0; k < reps && k < 64; k++)
        for (int s = 0; s < N_SHAPES; s++) g[s][k] = run(vk, s, &h[s]);
    for (int s = 0; s < N_SHAPES; s++) {
        if (s < N_MM)
            printf("mm_f16 (%s) K %d, %d rows x %d tokens: GFLOP/s", vk->name, mm_shape[s][0], mm_shape[s][1],
                   mm_shape[s][2]);
        else if (s < N_MM + N_ATTN)
            printf("attn (%s) hd 96, %s: GFLOP/s", vk->name, s == N_MM ? "one window of 1024" : "global, 4096 rows");
        else
            printf("gelu (%s), 4M values: ns a value", s != N_MM + N_ATTN ? "ref"
                   : vk->gelu == mu_vit_gelu_erf ? "ref: the table kept it, this libm differs" : vk->name);
        for (int k = 0; k < reps; k++) printf(" %.1f", g[s][k]);
        qsort(g[s], (size_t)reps, sizeof g[s][0], cmp);
        printf("; median %.1f; output %016llx\n", g[s][reps / 2], (unsigned long long)h[s]);
    }
    return 0;
}
