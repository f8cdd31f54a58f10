/* kernbench.c: kernel throughput, without the engine.
 * Owns: two numbers per kernel table and weight type:
 *   decode: vec_dot over a weight matrix far larger than the caches (one
 *           activation row, like a decode step), in GB/s of weights read, to
 *           compare with build/bench/membw (bench/membw.c);
 *   decode2: the same with vec_dot2 (rows in pairs), where the table has it;
 *   gemm:   a 2048 x 2048 weight slice against 64 activation rows (prefill),
 *           in GMAC/s, with the table's gemm or, when it has none, the
 *           vec_dot loop the engine falls back to; each thread makes one
 *           untimed call first (warm: output pages, scratch, tile state).
 * Threads split the rows like the engine does. Not part of libmuser.
 * Usage: kernbench [threads (default 2)] [MiB of weights (default 1024; 0
 * skips the decode number)] [gemm activation rows (default 64)] [n (default
 * 2048)] [types, comma-separated names, e.g. Q4_K,Q6_K (default all)] [table
 * name (default all)]
 *        kernbench dotn [n (default 2048)] [weight rows (default 1024)] [types]
 *        [table name]: one thread, weights in the cache, for 1..16 activation
 *        rows: vec_dotn over all the rows at once (the engine's solo
 *        verification block) against the per-row loop the engine used before
 *        (vec_dot2 pairs where the table has them, else vec_dot), as CPU
 *        time, the best of interleaved repetitions, and its ratio to one
 *        row of the per-row loop (1 + K rows: the cost of verifying K drafts
 *        in decode steps of this matmul);
 *        kernbench attn [table name (default all)]: the attention kernels,
 *        one thread: mm_f16 tinyBLAS (n 128, 2048 cache rows x 64 query
 *        rows: K.Q) and ggml (n 2048, 128 rows x 8: V.softmax; n 128, 2048
 *        rows x 8: a decode step's K.Q, "kq1") in GFLOP/s,
 *        softmax_f16 and swiglu over 2048 values in Gvalues/s. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/kern/kern.h"
#include "../src/synth/quantize.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    const mu_kern *k;
    uint32_t t;
    int n, r0, r1, n_t;
    const uint8_t *w, *a;
    size_t ws, as;
    float *y;
    int gemm; /* 0: vec_dot rows, 1: gemm, 2: vec_dot2 pairs (n_t 1) */
    pthread_barrier_t *bar;
    double cpu;          /* thread CPU seconds of the timed part */
    double wall0, wall1; /* its wall-clock start and end */
} job;

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *run(void *arg) {
    job *j = arg;
    /* gemm: one untimed call first, so that the timed one finds what a
     * worker of the engine finds (its threads live for the whole run): the
     * output pages faulted in, the table's per-thread scratch allocated, the
     * AMX tile state granted to the thread */
    if (j->gemm == 1 && j->k->gemm[j->t])
        j->k->gemm[j->t](j->n, j->w, j->ws, j->r0, j->r1, j->a, j->as, j->n_t, j->y, j->r1);
    pthread_barrier_wait(j->bar);
    j->wall0 = now();
    const double c0 = cpu_now();
    if (j->gemm == 2) { /* vec_dot2: rows in pairs, like the engine's decode */
        int r = j->r0;
        for (; r + 2 <= j->r1; r += 2) {
            float o[2];
            j->k->vec_dot2[j->t](j->n, j->w + (size_t)r * j->ws, j->w + (size_t)(r + 1) * j->ws, j->a, o);
            j->y[r] = o[0];
            j->y[r + 1] = o[1];
        }
        for (; r < j->r1; r++) j->y[r] = j->k->vec_dot[j->t](j->n, j->w + (size_t)r * j->ws, j->a);
    } else if (j->gemm && j->k->gemm[j->t]) {
        j->k->gemm[j->t](j->n, j->w, j->ws, j->r0, j->r1, j->a, j->as, j->n_t, j->y, j->r1);
    } else {
        for (int t = 0; t < j->n_t; t++)
            for (int r = j->r0; r < j->r1; r++)
                j->y[(size_t)t * j->r1 + r] = j->k->vec_dot[j->t](j->n, j->w + (size_t)r * j->ws, j->a + (size_t)t * j->as);
    }
    j->cpu = cpu_now() - c0;
    j->wall1 = now();
    pthread_barrier_wait(j->bar);
    return NULL;
}

/* Wall seconds from the first thread's start to the last one's end (taken by
 * the workers: the calling thread may be descheduled between the barriers);
 * *cpu gets the slowest thread's CPU seconds, which excludes time the thread
 * was descheduled (the machine may be shared). */
static double timed(job *base, int nt, int rows, double *cpu) {
    pthread_t th[16];
    job jobs[16];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
    for (int i = 0; i < nt; i++) {
        jobs[i] = *base;
        jobs[i].r0 = rows * i / nt;
        jobs[i].r1 = rows * (i + 1) / nt;
        jobs[i].y = malloc((size_t)base->n_t * rows * sizeof(float));
        jobs[i].bar = &bar;
        pthread_create(&th[i], NULL, run, &jobs[i]);
    }
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    double w0 = 1e300, w1 = 0;
    *cpu = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        *cpu = jobs[i].cpu > *cpu ? jobs[i].cpu : *cpu;
        w0 = jobs[i].wall0 < w0 ? jobs[i].wall0 : w0;
        w1 = jobs[i].wall1 > w1 ? jobs[i].wall1 : w1;
        free(jobs[i].y);
    }
    const double dt = w1 - w0;
    pthread_barrier_destroy(&bar);
    return dt;
}

/* ---- attn mode ---------------------------------------------------------- */

static double attn_time(const mu_kern *k, int what, int n, int na, int nb, const mu_f16 *A, const float *B, float *C,
                        float *x, const float *u) {
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        int iters = 0;
        const double t0 = now();
        double t;
        do {
            switch (what) {
            case 0: k->mm_f16(n, A, (size_t)n, na, B, (size_t)n, nb, C, (size_t)na, 1); break;
            case 1: k->mm_f16(n, A, (size_t)n, na, B, (size_t)n, nb, C, (size_t)na, 0); break;
            case 2:
                for (int i = 0; i < n; i++) x[i] = u[i] * 8.f;
                k->softmax_f16(n, x, 8.f * 3.f);
                break;
            default:
                for (int i = 0; i < n; i++) x[i] = u[i] * 4.f;
                k->swiglu(n, x, u);
                break;
            }
            iters++;
            t = now() - t0;
        } while (t < 0.05);
        best = t / iters < best ? t / iters : best;
    }
    return best;
}

static int attn_bench(const char *tab) {
    const mu_kern *tabs[8];
    const int ntab = mu_kern_available(tabs, 8);
    const size_t cnt = 2048 * 128;
    mu_f16 *A = malloc(cnt * sizeof(mu_f16));
    float *B = malloc(cnt * sizeof(float)), *C = malloc(2048 * 64 * sizeof(float));
    float *x = malloc(2048 * sizeof(float)), *u = malloc(2048 * sizeof(float));
    srand(1);
    for (size_t i = 0; i < cnt; i++) {
        A[i] = mu_f32_to_f16((float)rand() / RAND_MAX - 0.5f);
        B[i] = mu_f16_to_f32(mu_f32_to_f16((float)rand() / RAND_MAX - 0.5f));
    }
    for (int i = 0; i < 2048; i++) u[i] = (float)rand() / RAND_MAX * 2.f - 1.f;
    for (int k = 0; k < ntab; k++) {
        if (tab && strcmp(tab, tabs[k]->name) != 0) continue;
        const double tq = attn_time(tabs[k], 0, 128, 2048, 64, A, B, C, x, u);
        const double tv = attn_time(tabs[k], 1, 2048, 128, 8, A, B, C, x, u);
        const double tk = attn_time(tabs[k], 1, 128, 2048, 8, A, B, C, x, u); /* a decode step's K.Q */
        const double ts = attn_time(tabs[k], 2, 2048, 0, 0, A, B, C, x, u);
        const double tw = attn_time(tabs[k], 3, 2048, 0, 0, A, B, C, x, u);
        printf("{\"table\": \"%s\", \"mm_f16_tb_gflops\": %.2f, \"mm_f16_ggml_gflops\": %.2f, "
               "\"mm_f16_kq1_gflops\": %.2f, \"softmax_gvals\": %.3f, \"swiglu_gvals\": %.3f}\n",
               tabs[k]->name, 2.0 * 128 * 2048 * 64 / tq / 1e9, 2.0 * 2048 * 128 * 8 / tv / 1e9,
               2.0 * 2048 * 128 * 8 / tk / 1e9, 2048 / ts / 1e9, 2048 / tw / 1e9);
        fflush(stdout);
    }
    free(A);
    free(B);
    free(C);
    free(x);
    free(u);
    return 0;
}

/* ---- dotn mode ---------------------------------------------------------- */

static int in_list(const char *list, const char *name);

static void dotn_loop(const mu_kern *k, uint32_t t, int n, const uint8_t *w, size_t ws, int rows, const uint8_t *a,
                      size_t as, int na, float *y, int use_dotn) {
    if (use_dotn && na >= 2 && k->vec_dotn[t]) {
        k->vec_dotn[t](n, w, ws, rows, a, as, na, y, (size_t)rows);
        return;
    }
    for (int j = 0; j < na; j++) {
        int r = 0;
        for (; k->vec_dot2[t] && r + 2 <= rows; r += 2)
            k->vec_dot2[t](n, w + (size_t)r * ws, w + (size_t)(r + 1) * ws, a + (size_t)j * as, y + (size_t)j * rows + r);
        for (; r < rows; r++) y[(size_t)j * rows + r] = k->vec_dot[t](n, w + (size_t)r * ws, a + (size_t)j * as);
    }
}

static int dotn_bench(int n, int rows, const char *only, const char *tab) {
    static const uint32_t types[] = {MU_T_Q4_K, MU_T_Q5_K, MU_T_Q6_K, MU_T_Q8_0, MU_T_F16};
    const mu_kern *tabs[8];
    const int ntab = mu_kern_available(tabs, 8);
    float *x = malloc((size_t)n * sizeof(float));
    float *y = malloc((size_t)MU_DOTN_MAX * rows * sizeof(float)), *y2 = malloc((size_t)MU_DOTN_MAX * rows * sizeof(float));
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t t = types[ti], dt = mu_kern_dot_type(t);
        if (only && !in_list(only, mu_type_get(t)->name)) continue;
        const size_t ws = mu_type_row_bytes(t, n), as = mu_type_row_bytes(dt, n);
        uint8_t *w = malloc(ws * rows), *a = malloc(as * MU_DOTN_MAX);
        srand(7);
        for (int r = 0; r < rows; r++) {
            for (int i = 0; i < n; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
            mu_quantize_row(t, x, w + (size_t)r * ws, n);
        }
        for (int j = 0; j < MU_DOTN_MAX; j++) {
            for (int i = 0; i < n; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
            mu_kern_ref()->quant[dt](x, a + (size_t)j * as, n);
        }
        for (int k = 0; k < ntab; k++) {
            if (tab && strcmp(tab, tabs[k]->name) != 0) continue;
            if (!tabs[k]->vec_dotn[t]) continue;
            double best[2][MU_DOTN_MAX + 1];
            for (int na = 1; na <= MU_DOTN_MAX; na++) best[0][na] = best[1][na] = 1e9;
            for (int rep = 0; rep < 15; rep++)
                for (int na = 1; na <= MU_DOTN_MAX; na++)
                    for (int v = 0; v < 2; v++) {
                        const double c0 = cpu_now();
                        dotn_loop(tabs[k], t, n, w, ws, rows, a, as, na, v ? y2 : y, v);
                        const double c = cpu_now() - c0;
                        best[v][na] = c < best[v][na] ? c : best[v][na];
                    }
            if (memcmp(y, y2, (size_t)MU_DOTN_MAX * rows * sizeof(float)))
                fprintf(stderr, "kernbench: %s %s: vec_dotn differs from vec_dot\n", tabs[k]->name, mu_type_get(t)->name);
            for (int na = 1; na <= MU_DOTN_MAX; na++)
                printf("{\"table\": \"%s\", \"type\": \"%s\", \"n\": %d, \"rows\": %d, \"act_rows\": %d, "
                       "\"per_row_ms\": %.4f, \"dotn_ms\": %.4f, \"per_row_ratio\": %.3f, \"dotn_ratio\": %.3f}\n",
                       tabs[k]->name, mu_type_get(t)->name, n, rows, na, best[0][na] * 1e3, best[1][na] * 1e3,
                       best[0][na] / best[0][1], best[1][na] / best[0][1]);
            fflush(stdout);
        }
        free(w);
        free(a);
    }
    free(x);
    free(y);
    free(y2);
    return 0;
}

/* name is one of the comma-separated entries of list (exactly: "BF16" is not "F16") */
static int in_list(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "attn")) return attn_bench(argc > 2 ? argv[2] : NULL);
    if (argc > 1 && !strcmp(argv[1], "dotn"))
        return dotn_bench(argc > 2 ? atoi(argv[2]) : 2048, argc > 3 ? atoi(argv[3]) : 1024, argc > 4 ? argv[4] : NULL,
                          argc > 5 ? argv[5] : NULL);
    const int nt = argc > 1 ? atoi(argv[1]) : 2;
    const size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    static const uint32_t types[] = {MU_T_Q4_K, MU_T_Q5_K, MU_T_Q6_K, MU_T_Q8_0, MU_T_NVFP4, MU_T_F16, MU_T_BF16, MU_T_F32};
    const mu_kern *tabs[8];
    const int ntab = mu_kern_available(tabs, 8);
    const int gnt = argc > 3 ? atoi(argv[3]) : 64;
    const int n = argc > 4 ? atoi(argv[4]) : 2048;
    const char *only = argc > 5 ? argv[5] : NULL;
    const char *tab = argc > 6 ? argv[6] : NULL;
    const int nx = gnt > 64 ? gnt : 64;
    float *x = malloc((size_t)nx * n * sizeof(float));
    srand(1);
    for (int i = 0; i < nx * n; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t t = types[ti], dt = mu_kern_dot_type(t);
        if (only && !in_list(only, mu_type_get(t)->name)) continue;
        const size_t ws = mu_type_row_bytes(t, n);
        const size_t as = dt == MU_T_Q8_K ? (size_t)(n / 256) * sizeof(mu_block_q8_K) : mu_type_row_bytes(dt, n);
        const int grows = 2048;
        int rows = (int)((mib << 20) / ws);
        rows = rows < grows ? grows : rows;
        uint8_t *w = malloc(ws * rows), *a = malloc(as * nx);
        /* sane f16 scales: rewrite the row from a quantized Gaussian-ish row */
        uint8_t *row = malloc(ws);
        mu_quantize_row(t, x, row, n);
        /* distinct rows (no page or cache-line repeats): flip code bits only */
        const int bb = mu_type_get(t)->type_bytes, nb = (int)(ws / bb);
        for (int r = 0; r < rows; r++) {
            uint8_t *wr = w + (size_t)r * ws;
            memcpy(wr, row, ws);
            for (int b = 0; b < nb; b++) {
                uint8_t *blk = wr + (size_t)b * bb;
                const uint8_t z = (uint8_t)(r * 31 + b * 7);
                switch (t) {
                case MU_T_Q4_K: for (int i = 16; i < 144; i++) blk[i] ^= z; break;
                case MU_T_Q5_K: for (int i = 48; i < 176; i++) blk[i] ^= z; break;
                case MU_T_Q6_K: for (int i = 0; i < 192; i++) blk[i] ^= z; break;
                case MU_T_Q8_0: for (int i = 2; i < 34; i++) blk[i] ^= z & 0x3f; break;
                case MU_T_NVFP4: for (int i = 4; i < 36; i++) blk[i] ^= z; break;
                default: blk[0] ^= z & 0x3f; break; /* f16, bf16, f32: low mantissa byte */
                }
            }
        }
        for (int i = 0; i < nx; i++) mu_kern_ref()->quant[dt](x + (size_t)i * n, a + i * as, n);
        for (int k = 0; k < ntab; k++) {
            if (tab && strcmp(tab, tabs[k]->name) != 0) continue;
            job j = {.k = tabs[k], .t = t, .n = n, .n_t = 1, .w = w, .a = a, .ws = ws, .as = as};
            double best = 1e9, cbest = 1e9, c;
            for (int rep = 0; rep < (mib ? 3 : 0); rep++) {
                const double s = timed(&j, nt, rows, &c);
                best = s < best ? s : best;
                cbest = c < cbest ? c : cbest;
            }
            const double gbps = (double)ws * rows / best / 1e9;
            double best2 = 1e9, cbest2 = 1e9;
            if (tabs[k]->vec_dot2[t]) {
                j.gemm = 2;
                for (int rep = 0; rep < (mib ? 3 : 0); rep++) {
                    const double s = timed(&j, nt, rows, &c);
                    best2 = s < best2 ? s : best2;
                    cbest2 = c < cbest2 ? c : cbest2;
                }
            }
            j.n_t = gnt;
            j.gemm = 1;
            double gbest = 1e9, gcbest = 1e9;
            for (int rep = 0; rep < 3; rep++) {
                const double s = timed(&j, nt, grows, &c);
                gbest = s < gbest ? s : gbest;
                gcbest = c < gcbest ? c : gcbest;
            }
            printf("{\"table\": \"%s\", \"type\": \"%s\", \"threads\": %d, \"decode_gbps\": %.2f, \"gemm_gmacs\": %.2f, "
                   "\"decode_gbps_cpu\": %.2f, \"gemm_gmacs_cpu\": %.2f, \"gemm\": %s}\n",
                   tabs[k]->name, mu_type_get(t)->name, nt, gbps, (double)gnt * n * grows / gbest / 1e9,
                   (double)ws * rows / cbest / 1e9, (double)gnt * n * grows / gcbest / 1e9,
                   tabs[k]->gemm[t] ? "true" : "false");
            if (tabs[k]->vec_dot2[t] && mib)
                printf("{\"table\": \"%s\", \"type\": \"%s\", \"threads\": %d, \"decode2_gbps\": %.2f, "
                       "\"decode2_gbps_cpu\": %.2f}\n",
                       tabs[k]->name, mu_type_get(t)->name, nt, (double)ws * rows / best2 / 1e9,
                       (double)ws * rows / cbest2 / 1e9);
            fflush(stdout);
        }
        free(w);
        free(a);
        free(row);
    }
    free(x);
    return 0;
}
