/* attnbench.c: the AVX-512 attention kernels at long depth, one thread,
 * shaped as the engine calls them on the 1B shape (head_dim 128, 2 KV heads
 * of 8 query heads, one KV head's cells read at a stride of 256 values).
 * Owns: CPU time per call (the kernel calls alone) of
 *   pre_kq  K.Q of a prefill item: 64 query rows (8 tokens x 8 heads) over
 *           the cells, tinyBLAS rounding (mm_f16, tb 1);
 *   pre_sm  those 64 rows' softmax (the softmax_f16 calls only, each row
 *           fresh from the K.Q's scores as in attn.c);
 *   pre_v   the V product of those rows over the transposed cache (tb 1);
 *   dec_kq, dec_sm, dec_v  the same for a decode step's unit (8 query heads
 *           of one KV head, ggml_vec_dot_f16 rounding, tb 0);
 * medians of interleaved repetitions, and a hash of each output's bits (a
 * binary built from another attn_avx512.c must print the same hashes).
 * Not part of libmuser: it compiles the attention file it is given, so two
 * versions can be compared side by side (bench/build.sh builds it from the
 * tree's file; `ATTN_SRC=path bench/build.sh` from another).
 * Cells: a multiple of 16 (softmax_f16's contract: with rows packed at a
 * ragged length its last chunk takes in the next row's first scores, and
 * the pre_sm/dec_sm checks differ).
 * Usage: attnbench [cells (default 32768)] [reps (default 7)] [score row
 * padding in floats (default 0)] [phases, comma-separated (default all)]
 *        attnbench check [cells]: every phase against kern_ref.c, bit for bit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define mu_kern_fill_attn_avx512 bench_fill_attn
#include ATTN_SRC
#undef mu_kern_fill_attn_avx512

enum { HD = 128, NKV = 2, GROUP = 8, PRE_ROWS = 64 };

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t hash(const float *x, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h = (h ^ u) * 16777619u;
    }
    return h;
}

typedef struct {
    int m;        /* cells */
    size_t ldc;   /* score row stride */
    mu_f16 *kc;   /* [m][NKV * HD] */
    mu_f16 *vt;   /* [NKV * HD][m] */
    float *q;     /* [PRE_ROWS][HD], F16-exact */
    float *sc;    /* [PRE_ROWS][ldc] */
    float *sc0;   /* the scores the softmax phases start from */
    float *o;     /* [PRE_ROWS][HD] */
} shape;

static const char *NAMES[] = {"pre_kq", "pre_sm", "pre_v", "dec_kq", "dec_sm", "dec_v"};

/* phase p with table k; *t: the CPU time of the kernel calls alone (not
 * of the setup or the hash); returns the output's hash */
static uint32_t run(const mu_kern *k, shape *s, int p, double *t) {
    const int dec = p >= 3, R = dec ? GROUP : PRE_ROWS;
    const double c0 = cpu_now();
    switch (p % 3) {
    case 0:
        k->mm_f16(HD, s->kc, NKV * HD, s->m, s->q, HD, R, s->sc, s->ldc, !dec);
        *t += cpu_now() - c0;
        return hash(s->sc, (size_t)(R - 1) * s->ldc + (size_t)s->m);
    case 1:
        for (int r = 0; r < R; r++) {
            float *row = s->sc + (size_t)r * s->ldc, mx = -1e30f;
            memcpy(row, s->sc0 + (size_t)r * s->ldc, (size_t)s->m * sizeof(float));
            for (int i = 0; i < s->m; i++) mx = row[i] > mx ? row[i] : mx;
            const double c1 = cpu_now();
            k->softmax_f16(s->m, row, mx);
            *t += cpu_now() - c1;
        }
        return hash(s->sc, (size_t)(R - 1) * s->ldc + (size_t)s->m);
    default:
        k->mm_f16(s->m, s->vt, (size_t)s->m, HD, s->sc0, s->ldc, R, s->o, HD, !dec);
        *t += cpu_now() - c0;
        return hash(s->o, (size_t)R * HD);
    }
}

int main(int argc, char **argv) {
    const int check = argc > 1 && !strcmp(argv[1], "check");
    if (check) argv++, argc--;
    const int m = argc > 1 ? atoi(argv[1]) : 32768;
    const int reps = argc > 2 ? atoi(argv[2]) : 7;
    const int pad = argc > 3 ? atoi(argv[3]) : 0;
    const char *only = argc > 4 ? argv[4] : NULL;
    mu_kern kt;
    memset(&kt, 0, sizeof kt);
    bench_fill_attn(&kt);
    shape s = {.m = m, .ldc = (size_t)m + (size_t)pad};
    s.kc = malloc((size_t)m * NKV * HD * sizeof(mu_f16));
    s.vt = malloc((size_t)m * NKV * HD * sizeof(mu_f16));
    s.q = malloc((size_t)PRE_ROWS * HD * sizeof(float));
    s.sc = malloc((size_t)PRE_ROWS * s.ldc * sizeof(float));
    s.sc0 = malloc((size_t)PRE_ROWS * s.ldc * sizeof(float));
    s.o = malloc((size_t)PRE_ROWS * HD * sizeof(float));
    srand(1);
    for (size_t i = 0; i < (size_t)m * NKV * HD; i++) {
        s.kc[i] = mu_f32_to_f16((float)rand() / RAND_MAX - 0.5f);
        s.vt[i] = mu_f32_to_f16((float)rand() / RAND_MAX - 0.5f);
    }
    for (int i = 0; i < PRE_ROWS * HD; i++) s.q[i] = mu_f16_to_f32(mu_f32_to_f16((float)rand() / RAND_MAX - 0.5f));
    /* softmax-like weights: F16 values that sum to about 1 per row */
    for (size_t i = 0; i < (size_t)PRE_ROWS * s.ldc; i++)
        s.sc0[i] = mu_f16_to_f32(mu_f32_to_f16((float)rand() / RAND_MAX * 2.0f / (float)m));
    if (check) {
        const mu_kern *ref = mu_kern_ref();
        int bad = 0;
        for (int p = 0; p < 6; p++) {
            const uint32_t a = run(&kt, &s, p, &(double){0}), b = run(ref, &s, p, &(double){0});
            printf("%-7s %08x %08x %s\n", NAMES[p], a, b, a == b ? "ok" : "DIFFER");
            bad |= a != b;
        }
        return bad;
    }
    double t[6][64];
    uint32_t h[6] = {0};
    const int R = reps < 64 ? reps : 64;
    for (int r = 0; r < R; r++)
        for (int p = 0; p < 6; p++) {
            if (only && !strstr(only, NAMES[p])) continue;
            double tk = 0;
            h[p] = run(&kt, &s, p, &tk);
            t[p][r] = tk;
        }
    for (int p = 0; p < 6; p++) {
        if (only && !strstr(only, NAMES[p])) continue;
        for (int i = 1; i < R; i++) /* insertion sort for the median */
            for (int j = i; j > 0 && t[p][j] < t[p][j - 1]; j--) {
                const double x = t[p][j];
                t[p][j] = t[p][j - 1];
                t[p][j - 1] = x;
            }
        const double med = t[p][R / 2], fl = p % 3 == 1 ? 0 : 2.0 * HD * m * (p >= 3 ? GROUP : PRE_ROWS);
        printf("%-7s %8.3f ms  min %8.3f  %6.1f GFLOP/s  hash %08x\n", NAMES[p], med * 1e3, t[p][0] * 1e3,
               fl / med / 1e9, h[p]);
    }
    return 0;
}
