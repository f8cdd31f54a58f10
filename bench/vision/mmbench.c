/* mmbench.c: the vision encoder's F16 matmul (the best table's mm_f16,
 * src/vision/vit.h) alone on one thread, in GFLOP/s, for the full
 * projector's shapes: K = 1536 (q, k, v, o, up) and K = 8960 (down).
 *   cc -O2 -o /tmp/mmbench bench/vision/mmbench.c build/libmuser.a -lm -lpthread
 *   /tmp/mmbench [REPS]
 * Each shape runs REPS times (default 3), interleaved with the others; the
 * median is printed with the runs. Process CPU time, so a loaded machine
 * slows it less than the wall clock (it still shares caches). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 3;
    static const int shape[][3] = {{1536, 768, 1024}, {8960, 768, 256}}; /* K, weight rows (one thread's half), tokens */
    const mu_vit_kern *vk = mu_vit_kern_best();
    double g[2][64];
    for (int k = 0; k < reps && k < 64; k++)
        for (int s = 0; s < 2; s++) {
            const int n = shape[s][0], rows = shape[s][1], T = shape[s][2];
            mu_f16 *w = malloc((size_t)rows * n * sizeof *w);
            float *a = malloc((size_t)T * n * sizeof *a), *y = malloc((size_t)T * rows * sizeof *y);
            if (!w || !a || !y) return 1;
            for (size_t i = 0; i < (size_t)rows * n; i++) w[i] = mu_f32_to_f16((float)(i * 7919 % 1023) / 1023.0f - 0.5f);
            for (size_t i = 0; i < (size_t)T * n; i++) a[i] = mu_f16_to_f32(mu_f32_to_f16((float)(i * 31 % 97) / 97.0f));
            const double t0 = cpu_s();
            vk->mm_f16(n, w, (size_t)n, 0, rows, a, (size_t)n, T, y, (size_t)rows, NULL);
            g[s][k] = 2.0 * n * rows * T / (cpu_s() - t0) / 1e9;
            free(w), free(a), free(y);
        }
    for (int s = 0; s < 2; s++) {
        printf("mm_f16 (%s) K %d, %d rows x %d tokens: GFLOP/s", vk->name, shape[s][0], shape[s][1], shape[s][2]);
        for (int k = 0; k < reps; k++) printf(" %.1f", g[s][k]);
        qsort(g[s], (size_t)reps, sizeof g[s][0], cmp);
        printf("; median %.1f\n", g[s][reps / 2]);
    }
    return 0;
}
