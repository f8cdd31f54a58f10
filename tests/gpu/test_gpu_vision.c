/* test_gpu_vision.c: the vision encoder on CUDA (gpu_cuda_vit.cu) against
 * the CPU encoder (src/vision/vit.c, bit-identical to llama.cpp's mtmd) on
 * generated projectors (muser gen --mmproj):
 *   1. tiny (F16): images of several sizes and aspect ratios (one partial
 *      window up to many, windows cut at the edges)
 *   2. tiny in F32, BF16 and Q8_0: printed, not judged (the device computes
 *      those with F16 weights and activations, the CPU in their own types)
 *   3. full (F16, the release's geometry) at 448x448 and 672x364
 *   4. with MODEL (a model of width 256, e.g. g3-q4_k_m): a PNG through
 *      mu_mmproj_encode on a --backend cuda engine (the route `muser run
 *      --backend cuda --mmproj` takes) against a CPU engine
 *   5. a timing line for the full projector at 448 and 896 (a benchmark
 *      print: medians of 3 after one warm-up, never a verdict); --bench:
 *      those lines alone
 * Per image: cosine >= 0.999 and relative L2 <= 0.01 (issue 19), printed
 * with the largest absolute difference. Exits 77 (skip) without a device.
 * usage: test_gpu_vision WORKDIR [MODEL] [--no-full | --bench] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../include/muser_synth.h"
#include "../../src/gpu/gpu.h"
#include "../../src/kern/kern.h"
#include "../../src/vision/mmproj.h"
#include "../../src/vision/vit.h"
#include "../unit/image_gen.h"

#define MIN_COS 0.999
#define MAX_REL 0.01

static int n_fail, n_cases;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* a smooth pattern plus noise, in the normalized pixel range */
static float *make_chw(int nx, int ny, unsigned seed) {
    float *chw = malloc((size_t)3 * nx * ny * sizeof *chw);
    uint64_t s = 0x9e3779b97f4a7c15ull ^ seed;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < ny; y++)
            for (int x = 0; x < nx; x++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                const float noise = (float)((s >> 11) * 0x1p-53) - 0.5f;
                chw[((size_t)c * ny + y) * nx + x] =
                    0.8f * sinf(0.05f * x * (c + 1) + 0.03f * y + seed) + 0.4f * cosf(0.021f * (x + y)) + noise;
            }
    return chw;
}

/* cosine, relative L2 and the largest difference of got against want;
 * judged unless info */
static void compare(const char *what, const float *want, const float *got, size_t n, bool info) {
    double dot = 0, ww = 0, gg = 0, dd = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double a = want[i], b = got[i], d = b - a;
        dot += a * b, ww += a * a, gg += b * b, dd += d * d;
        if (!(fabs(d) <= worst)) worst = fabs(d);
    }
    const double cosv = dot / (sqrt(ww) * sqrt(gg)), rel = sqrt(dd) / sqrt(ww);
    const bool ok = cosv >= MIN_COS && rel <= MAX_REL; /* NaN fails both */
    if (!info) {
        n_cases++;
        if (!ok) n_fail++;
    }
    printf("%s %s: cosine %.7f rel_l2 %.3e max_abs %.3e (%zu values)\n", info ? "info" : ok ? "ok  " : "FAIL", what,
           cosv, rel, worst, n);
}

/* ---- the encoder's kernels alone ------------------------------------------ */

static uint64_t krng = 0x2545f4914f6cdd1dull;
static float krand(void) {
    krng ^= krng << 13, krng ^= krng >> 7, krng ^= krng << 17;
    return (float)((krng >> 11) * 0x1p-53) * 2.0f - 1.0f;
}

static float gelu_ref(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }

/* the matmul against sums in double: within the F32 accumulation's bound */
static void kernel_gemm(int T, int N, int K, bool bias, bool res, bool gelu) {
    uint16_t *a = malloc((size_t)T * K * 2), *w = malloc((size_t)N * K * 2);
    float *b = malloc((size_t)N * 4), *r = malloc((size_t)T * N * 4), *y = calloc((size_t)T * N, 4);
    for (size_t i = 0; i < (size_t)T * K; i++) a[i] = mu_f32_to_f16(krand());
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = mu_f32_to_f16(krand() * 0.1f);
    for (int i = 0; i < N; i++) b[i] = krand();
    for (size_t i = 0; i < (size_t)T * N; i++) r[i] = krand();
    mu_err err = {0};
    char what[96];
    snprintf(what, sizeof what, "kernel gemm T %d N %d K %d%s%s%s", T, N, K, bias ? " +bias" : "", gelu ? " gelu" : "",
             res ? " +res" : "");
    n_cases++;
    if (mu_gpu_vit_test_gemm(0, T, N, K, a, w, bias ? b : NULL, res ? r : NULL, gelu, y, &err)) {
        printf("FAIL %s: %s\n", what, err.msg);
        n_fail++;
    } else {
        double worst = 0;
        size_t bad = 0;
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) {
                double acc = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    const double p = (double)mu_f16_to_f32(a[(size_t)t * K + k]) * mu_f16_to_f32(w[(size_t)n * K + k]);
                    acc += p, mag += fabs(p);
                }
                float v = (float)acc;
                if (bias) v = v + b[n], mag += fabs(b[n]);
                if (gelu) v = gelu_ref(v);
                if (res) v = v + r[(size_t)t * N + n], mag += fabs(r[(size_t)t * N + n]);
                const double d = fabs((double)y[(size_t)t * N + n] - v), tol = (K + 4) * 0x1p-23 * mag + 1e-6;
                if (!(d <= tol)) bad++;
                if (!(d <= worst)) worst = d;
            }
        printf("%s %s: max_abs %.3e%s\n", bad ? "FAIL" : "ok  ", what, worst, bad ? " (beyond the F32 bound)" : "");
        if (bad) n_fail++;
    }
    free(a), free(w), free(b), free(r), free(y);
}

/* attention against a softmax in double; windows: contiguous runs of the
 * given lengths (cycled), or global */
static void kernel_attn(int n, int H, int hd, const int *runs, int n_runs, bool global) {
    const int E = H * hd;
    float *q = malloc((size_t)n * E * 4);
    uint16_t *k = malloc((size_t)n * E * 2), *v = malloc((size_t)n * E * 2), *out = calloc((size_t)n * E, 2);
    int *lo = malloc((size_t)n * 4), *hi = malloc((size_t)n * 4);
    for (size_t i = 0; i < (size_t)n * E; i++) q[i] = krand(), k[i] = mu_f32_to_f16(krand()), v[i] = mu_f32_to_f16(krand());
    for (int i = 0, r = 0; i < n; r++) {
        const int len = runs[r % n_runs], end = i + len < n ? i + len : n;
        for (int j = i; j < end; j++) lo[j] = i, hi[j] = end;
        i = end;
    }
    mu_err err = {0};
    char what[96];
    snprintf(what, sizeof what, "kernel attention n %d heads %d x %d %s", n, H, hd, global ? "global" : "windowed");
    n_cases++;
    if (mu_gpu_vit_test_attn(0, n, H, hd, q, k, v, lo, hi, global, out, &err)) {
        printf("FAIL %s: %s\n", what, err.msg);
        n_fail++;
    } else {
        double worst = 0, *s = malloc((size_t)n * sizeof *s);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const int a = global ? 0 : lo[i], z = global ? n : hi[i];
                double m = -INFINITY, l = 0;
                for (int j = a; j < z; j++) {
                    double dot = 0;
                    for (int d = 0; d < hd; d++)
                        dot += (double)q[(size_t)i * E + h * hd + d] * mu_f16_to_f32(k[(size_t)j * E + h * hd + d]);
                    s[j] = dot / sqrt((double)hd);
                    if (s[j] > m) m = s[j];
                }
                for (int j = a; j < z; j++) l += s[j] = exp(s[j] - m);
                for (int d = 0; d < hd; d++) {
                    double o = 0;
                    for (int j = a; j < z; j++) o += s[j] * mu_f16_to_f32(v[(size_t)j * E + h * hd + d]);
                    const double dd = fabs(o / l - mu_f16_to_f32(out[(size_t)i * E + h * hd + d]));
                    if (!(dd <= worst)) worst = dd;
                }
            }
        free(s);
        const bool ok = worst <= 2e-3; /* F16 output (|o| <= 1): 2^-11 plus the F32 sums */
        printf("%s %s: max_abs %.3e\n", ok ? "ok  " : "FAIL", what, worst);
        if (!ok) n_fail++;
    }
    free(q), free(k), free(v), free(out), free(lo), free(hi);
}

static void kernels(void) {
    kernel_gemm(1, 1, 1, false, false, false);
    kernel_gemm(5, 7, 13, true, false, false);
    kernel_gemm(64, 64, 32, false, false, false);
    kernel_gemm(65, 130, 588, true, true, false); /* the patch matmul's K: no 16-byte loads */
    kernel_gemm(100, 96, 1536, true, true, false);
    kernel_gemm(37, 200, 160, true, false, true);
    kernel_gemm(130, 72, 8960, true, true, false);
    kernel_gemm(300, 520, 1536, true, true, false); /* several tiles each way, ragged in both */
    kernel_gemm(129, 257, 8, false, false, true);   /* one k-step of 8 */
    kernel_gemm(256, 128, 4096, false, true, false);
    static const int w16[] = {16}, odd[] = {50, 70, 80, 3, 1}, one[] = {1}, win[] = {1024, 76}, mix[] = {64, 200, 9};
    kernel_attn(1, 1, 32, one, 1, true);
    kernel_attn(100, 2, 32, w16, 1, false);
    kernel_attn(200, 3, 96, odd, 5, false);
    kernel_attn(77, 2, 72, odd, 5, false); /* hd 72: padded to 96 inside */
    kernel_attn(130, 1, 128, one, 1, true);
    kernel_attn(150, 2, 64, one, 1, false); /* every token alone */
    kernel_attn(1100, 2, 96, win, 2, false); /* a whole 32 x 32 window, then a cut one */
    kernel_attn(700, 2, 64, one, 1, true);   /* global over many key tiles */
    kernel_attn(333, 3, 32, mix, 3, false);  /* windows across query blocks */
}

static int gen(const char *path, const char *preset, mu_synth_type type) {
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    mu_synth_mmproj_opts o;
    mu_synth_mmproj_defaults(&o);
    mu_err err = {0};
    o.type = type;
    const double t0 = now();
    if (mu_synth_mmproj_preset(&o, preset, &err) || mu_synth_mmproj_write(&o, path, &err)) {
        printf("FAIL gen %s: %s\n", path, err.msg);
        return 1;
    }
    printf("gen %s (%s): %.1f s\n", path, preset, now() - t0);
    return 0;
}

/* the CPU encoder and the device encoder on one image of nx x ny */
static void one(mu_mmproj *p, const char *name, mu_pool *pool, int nx, int ny, bool info) {
    const mu_mmproj_info *I = &p->info;
    const int cell = I->patch_size * 2, n_out = (nx / cell) * (ny / cell);
    float *chw = make_chw(nx, ny, (unsigned)(nx * 31 + ny));
    float *cpu = malloc((size_t)n_out * I->n_out * sizeof *cpu), *dev = malloc((size_t)n_out * I->n_out * sizeof *dev);
    mu_err err = {0};
    char what[128];
    snprintf(what, sizeof what, "%s %dx%d (%d rows)", name, nx, ny, n_out);
    double t0 = now();
    if (mu_vit_encode(p, mu_kern_select(NULL), NULL, pool, chw, nx, ny, cpu, &err)) {
        printf("FAIL %s: cpu: %s\n", what, err.msg);
        n_fail++;
    } else {
        const double t_cpu = now() - t0;
        t0 = now();
        if (mu_vit_encode_gpu(p, 0, chw, nx, ny, dev, &err)) {
            printf("FAIL %s: cuda: %s\n", what, err.msg);
            n_fail++;
        } else {
            const double t_dev = now() - t0;
            compare(what, cpu, dev, (size_t)n_out * I->n_out, info);
            printf("     (cpu %.3f s, cuda %.3f s incl. upload on first use)\n", t_cpu, t_dev);
        }
    }
    free(chw), free(cpu), free(dev);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void timing(mu_mmproj *p, int nx, int ny) {
    const mu_mmproj_info *I = &p->info;
    const int n_out = (nx / 28) * (ny / 28);
    float *chw = make_chw(nx, ny, 7), *out = malloc((size_t)n_out * I->n_out * sizeof *out);
    mu_err err = {0};
    double t[4];
    for (int r = 0; r < 4; r++) {
        const double t0 = now();
        if (mu_vit_encode_gpu(p, 0, chw, nx, ny, out, &err)) {
            printf("FAIL timing %dx%d: %s\n", nx, ny, err.msg);
            n_fail++;
            break;
        }
        t[r] = now() - t0;
        if (r == 3) {
            qsort(t + 1, 3, sizeof *t, cmp_double);
            printf("bench cuda vision full %dx%d (%d patches): %.1f ms median of 3 (first %.1f ms; host layout, "
                   "upload and download included)\n",
                   nx, ny, (nx / 14) * (ny / 14), t[2] * 1e3, t[0] * 1e3);
        }
    }
    free(chw), free(out);
}

static mu_mmproj *open_p(const char *path, const mu_model *m) {
    mu_mmproj *p = NULL;
    mu_err err = {0};
    if (mu_mmproj_open(path, m, &p, &err)) {
        printf("FAIL open %s: %s\n", path, err.msg);
        n_fail++;
        return NULL;
    }
    return p;
}

/* the engine's route: mu_mmproj_encode on a CUDA engine vs a CPU engine */
static void engine_route(const char *model, const char *tiny) {
    mu_model *m = NULL;
    mu_engine *ec = NULL, *eg = NULL;
    mu_mmproj *p = NULL;
    mu_err err = {0};
    mu_engine_opts oc = {.backend = "cpu"}, og = {.backend = "cuda"};
    if (mu_model_open(model, &m, &err) || mu_engine_new(m, &oc, &ec, &err) || mu_engine_new(m, &og, &eg, &err) ||
        !(p = open_p(tiny, m))) {
        printf("FAIL engine route (%s): %s\n", model, err.msg);
        n_fail++;
        goto out;
    }
    static const int sizes[][2] = {{100, 37}, {640, 480}, {37, 300}};
    for (int i = 0; i < 3; i++) {
        ig_buf png = ig_png(sizes[i][0], sizes[i][1], PNG_COLOR_TYPE_RGB, 8, 0, 40 + i);
        mu_media img = {png.p, png.n};
        float *rc = NULL, *rg = NULL;
        int nc = 0, ng = 0;
        char what[96];
        snprintf(what, sizeof what, "engine route png %dx%d", sizes[i][0], sizes[i][1]);
        if (mu_mmproj_encode(p, ec, &img, &rc, &nc, NULL, NULL, &err) ||
            mu_mmproj_encode(p, eg, &img, &rg, &ng, NULL, NULL, &err)) {
            printf("FAIL %s: %s\n", what, err.msg);
            n_fail++;
        } else if (nc != ng) {
            printf("FAIL %s: %d rows on the CPU, %d on CUDA\n", what, nc, ng);
            n_fail++;
        } else if (!p->gpu) {
            printf("FAIL %s: the CUDA engine encoded on the CPU (%s)\n", what, p->gpu_err.msg);
            n_fail++;
        } else {
            compare(what, rc, rg, (size_t)nc * p->info.n_out, false);
        }
        free(rc), free(rg), free(png.p);
    }
out:
    mu_mmproj_free(p);
    mu_engine_free(eg);
    mu_engine_free(ec);
    mu_model_close(m);
}

int main(int argc, char **argv) {
    const char *dir = NULL, *model = NULL;
    bool full = true, bench = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-full")) full = false;
        else if (!strcmp(argv[i], "--bench")) bench = true;
        else if (!dir) dir = argv[i];
        else model = argv[i];
    }
    if (!dir) {
        fprintf(stderr, "usage: test_gpu_vision WORKDIR [MODEL] [--no-full | --bench]\n");
        return 2;
    }
    if (mu_gpu_count() == 0) {
        printf("gpu vision: skipped: %s\n", mu_gpu_why_none());
        return 77;
    }
    mu_err err = {0};
    mu_pool *pool = NULL;
    const long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    if (mu_pool_new(nproc > 0 ? (int)nproc : 1, &pool, &err)) {
        printf("FAIL pool: %s\n", err.msg);
        return 1;
    }
    printf("cpu encoder: kernels %s, vision kernels %s, %ld threads\n", mu_kern_select(NULL)->name,
           mu_vit_kern_best()->name, nproc);
    char path[4096];
    if (bench) { /* the timing lines alone */
        snprintf(path, sizeof path, "%s/vision-full-f16.gguf", dir);
        mu_mmproj *p = gen(path, "full", MU_SYNTH_F16) ? NULL : open_p(path, NULL);
        const bool opened = p != NULL;
        if (p) timing(p, 448, 448), timing(p, 896, 896);
        mu_mmproj_free(p);
        mu_pool_free(pool);
        return opened && !n_fail ? 0 : 1;
    }
    kernels();
    static const struct {
        const char *tag;
        mu_synth_type type;
    } TYPES[] = {{"f16", MU_SYNTH_F16}, {"f32", MU_SYNTH_F32}, {"bf16", MU_SYNTH_BF16}, {"q8_0", MU_SYNTH_Q8_0}};
    static const int TINY[][2] = {{28, 28}, {56, 84}, {84, 56}, {112, 112}, {224, 224}, {140, 252},
                                  {252, 140}, {364, 28}, {28, 364}, {308, 196}};
    for (int ti = 0; ti < 4; ti++) {
        snprintf(path, sizeof path, "%s/vision-tiny-%s.gguf", dir, TYPES[ti].tag);
        if (gen(path, "tiny", TYPES[ti].type)) {
            n_fail++;
            continue;
        }
        mu_mmproj *p = open_p(path, NULL);
        if (!p) continue;
        char name[32];
        snprintf(name, sizeof name, "tiny-%s", TYPES[ti].tag);
        for (int i = 0; i < (ti == 0 ? 10 : 2); i++) one(p, name, pool, TINY[i][0], TINY[i][1], ti != 0);
        mu_mmproj_free(p);
    }
    if (model) {
        snprintf(path, sizeof path, "%s/vision-tiny-f16.gguf", dir);
        engine_route(model, path);
    }
    if (full) {
        snprintf(path, sizeof path, "%s/vision-full-f16.gguf", dir);
        mu_mmproj *p = gen(path, "full", MU_SYNTH_F16) ? NULL : open_p(path, NULL);
        if (p) {
            one(p, "full-f16", pool, 448, 448, false);
            timing(p, 448, 448);
            timing(p, 896, 896);
            one(p, "full-f16", pool, 672, 364, false); /* windows cut at the edges, at full width */
            mu_mmproj_free(p);
        } else {
            n_fail++;
        }
    }
    mu_pool_free(pool);
    printf("gpu vision: %d judged images (cosine >= %.3f, rel L2 <= %.2f), %d failures: %s\n", n_cases, MIN_COS,
           MAX_REL, n_fail, n_fail ? "FAILED" : "passed");
    return n_fail ? 1 : 0;
}
