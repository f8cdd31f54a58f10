/* gpukernbench: one GPU matmul of a given type and shape, timed launch by
 * launch on the device (CUDA events, mu_gpu_bench_matmul), without a model:
 * a kernel variant selected by an environment switch (docs/cuda.md
 * "Switches for comparisons") costs a second or two to time instead of a
 * full-shape `muser bench`. The weight is 64 distinct quantized random rows
 * repeated (the time does not depend on the values); the activations are
 * random and quantized on the device as forward's are; n_batch is the one
 * forward takes for T rows (the plugin's cu_batch_rows) unless --nbatch
 * says.
 *
 * usage: gpukernbench TYPE ROWS COLS T [--reps 20] [--nbatch N]
 *   TYPE: a type name as GGUF spells it (Q4_K, Q6_K, Q8_0, NVFP4, F16, ...)
 * prints the median, lowest and highest launch time, multiply-adds a
 * second and weight bytes a second at the median. Exits 77 without a
 * device. Full-shape examples: FFN gate+up Q4_K 39936 6656 512; FFN down
 * Q6_K 6656 19968 512; one decode token: T 1.
 *
 * usage: gpukernbench copy MIB [--reps 20]
 * the physical limit the decode matmuls are judged against: MIB MiB copied
 * from one device buffer to another (cudaMemcpyAsync), each copy timed;
 * prints the bytes moved a second (read and written) at the median. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../src/gpu/gpu.h"
#include "../src/kern/quant.h"
#include "../src/synth/quantize.h"

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static double median(float *ms, int n) {
    qsort(ms, (size_t)n, sizeof *ms, cmp_float);
    return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

static int bench_copy(int argc, char **argv) {
    const long mib = atol(argv[2]);
    int reps = 20;
    if (argc == 5 && !strcmp(argv[3], "--reps")) reps = atoi(argv[4]);
    else if (argc != 3) {
        fprintf(stderr, "usage: gpukernbench copy MIB [--reps 20]\n");
        return 2;
    }
    if (mib < 1 || reps < 1) {
        fprintf(stderr, "gpukernbench: copy of %s MiB, %d times\n", argv[2], reps);
        return 2;
    }
    if (mu_gpu_count() == 0) {
        printf("skip: %s\n", mu_gpu_why_none());
        return 77;
    }
    float *ms = malloc((size_t)reps * 4);
    mu_err err = {0};
    if (!ms || mu_gpu_bench_copy(0, (size_t)mib << 20, reps, ms, &err)) {
        fprintf(stderr, "gpukernbench: %s\n", ms ? err.msg : "out of memory");
        return 1;
    }
    const double med = median(ms, reps), bytes = (double)((size_t)mib << 20);
    printf("copy %ld MiB: median %.4f ms (%.4f - %.4f, %d copies), %.0f GB/s moved (read + written)\n", mib, med,
           ms[0], ms[reps - 1], reps, 2 * bytes / (med * 1e-3) / 1e9);
    free(ms);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "copy")) return bench_copy(argc, argv);
    if (argc < 5) {
        fprintf(stderr, "usage: gpukernbench TYPE ROWS COLS T [--reps 20] [--nbatch N]\n"
                        "       gpukernbench copy MIB [--reps 20]\n");
        return 2;
    }
    uint32_t type = MU_T_COUNT;
    for (uint32_t t = 0; t < MU_T_COUNT; t++) {
        const mu_type_info *ti = mu_type_get(t);
        if (ti->blck && ti->supported && !strcasecmp(ti->name, argv[1])) type = t;
    }
    const int rows = atoi(argv[2]), cols = atoi(argv[3]), T = atoi(argv[4]);
    int reps = 20, nb = -1;
    for (int i = 5; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--nbatch")) nb = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "gpukernbench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    const size_t rb = type < MU_T_COUNT ? mu_type_row_bytes(type, cols) : 0;
    if (!rb || rows < 1 || T < 1 || reps < 1) {
        fprintf(stderr, "gpukernbench: no type %s, or cols %d not a multiple of its block, or bad sizes\n", argv[1],
                cols);
        return 2;
    }
    if (mu_gpu_count() == 0) {
        printf("skip: %s\n", mu_gpu_why_none());
        return 77;
    }
    uint8_t *w = malloc(rb * (size_t)rows);
    float *row = malloc((size_t)cols * 4), *x = malloc((size_t)T * cols * 4), *ms = malloc((size_t)reps * 4);
    if (!w || !row || !x || !ms) {
        fprintf(stderr, "gpukernbench: out of memory\n");
        return 1;
    }
    unsigned seed = 12345;
    const int distinct = rows < 64 ? rows : 64;
    for (int r = 0; r < distinct; r++) {
        for (int i = 0; i < cols; i++) row[i] = frand(&seed);
        mu_quantize_row(type, row, w + (size_t)r * rb, cols);
    }
    for (int r = distinct; r < rows; r++) memcpy(w + (size_t)r * rb, w + (size_t)(r % distinct) * rb, rb);
    for (size_t i = 0; i < (size_t)T * cols; i++) x[i] = frand(&seed);
    mu_err err = {0};
    if (mu_gpu_bench_matmul(0, type, rows, cols, T, nb, w, x, reps, ms, &err)) {
        fprintf(stderr, "gpukernbench: %s\n", err.msg);
        return 1;
    }
    const double med = median(ms, reps);
    char nbs[32] = "forward's";
    if (nb >= 0) snprintf(nbs, sizeof nbs, "%d", nb);
    printf("%s rows %d cols %d T %d n_batch %s: median %.4f ms (%.4f - %.4f, %d launches), %.1f TMAC/s, "
           "weights %.0f GB/s\n",
           mu_type_get(type)->name, rows, cols, T, nbs, med, ms[0], ms[reps - 1], reps,
           (double)rows * cols * T / (med * 1e-3) / 1e12, (double)rb * rows / (med * 1e-3) / 1e9);
    free(w);
    free(row);
    free(x);
    free(ms);
    return 0;
}
