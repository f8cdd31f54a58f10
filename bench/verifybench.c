/* verifybench.c: what a speculative verification step costs, without the
 * scheduler. After a prompt of D tokens, it times forwards of one session
 * that are rolled back after each (mu_session_truncate), interleaved round
 * by round:
 *   decode   1 token (a plain decode step; the reference);
 *   solo K   1 + K tokens with all logits, solo (muser's verification);
 *   batch K  the same block with the batched rounding (what a verification
 *            without the bit-exact guarantee would cost).
 * Prints one JSON line per (mode, K) with the median milliseconds and the
 * ratio to the decode step: a K-draft block at ratio r pays off when more
 * than r - 1 of its drafts are accepted on average. Both wall-clock time
 * and the calling thread's CPU time are reported: with one thread (all the
 * work runs on the calling thread) the CPU time is the cost without the
 * preemptions a loaded machine adds to long forwards.
 * With $VERIFYBENCH_DRAFT naming a DFlash drafter, also:
 *   draft K  the drafter's pass over a block of 1 + K (K drafts) after the
 *            prompt's features were injected (what --spec dflash adds to a
 *            step besides the verification);
 *   inject   the injection of one position's features (added to every step),
 *            measured as 64 positions made rows together (the drafter
 *            gathers a few steps' positions before it makes their rows),
 *            per position;
 *   capture  a decode step that also captures the drafter's features (what
 *            each plain step of a --spec dflash job, paused or not, costs
 *            the target).
 * $VERIFYBENCH_MODES (e.g. "01") limits the rounds to those modes (0 decode,
 * 1 solo, 2 batch, 3 capture), so that a profiler sees one of them.
 * $VERIFYBENCH_BACKEND (cpu, cuda, auto) picks the engine's backend (cpu
 * when unset); on a GPU only the wall-clock columns mean anything.
 * Usage: verifybench MODEL [threads (2)] [depth (256)] [rounds (9)] [K list
 * (1,2,4,8,16)]. Not part of libmuser. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../include/muser.h"

static double clock_ms(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define MAXK 16
#define MAXR 64

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: verifybench MODEL [threads] [depth] [rounds] [K,K,...]\n");
        return 1;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2, depth = argc > 3 ? atoi(argv[3]) : 256;
    int rounds = argc > 4 ? atoi(argv[4]) : 9;
    int ks[MAXK], nk = 0;
    char klist[256];
    snprintf(klist, sizeof klist, "%s", argc > 5 ? argv[5] : "1,2,4,8,16");
    for (char *t = strtok(klist, ","); t && nk < MAXK; t = strtok(NULL, ",")) ks[nk++] = atoi(t);
    if (rounds < 1 || rounds > MAXR || depth < 1) {
        fprintf(stderr, "verifybench: rounds 1..%d, depth >= 1\n", MAXR);
        return 1;
    }
    mu_err err = {0};
    mu_model *m;
    mu_engine *e;
    mu_session *s;
    if (mu_model_open(argv[1], &m, &err)) return fprintf(stderr, "verifybench: %s\n", err.msg), 1;
    const char *backend = getenv("VERIFYBENCH_BACKEND");
    mu_engine_opts eo = {.n_threads = threads, .backend = backend ? backend : "cpu"};
    const mu_model_info *I = mu_model_get_info(m);
    if (mu_engine_new(m, &eo, &e, &err) || mu_session_new(e, depth + 64 + 8, &s, &err))
        return fprintf(stderr, "verifybench: %s\n", err.msg), 1;
    int32_t *toks = malloc((size_t)(depth + 64) * sizeof *toks);
    uint64_t r = 1;
    for (int i = 0; i < depth + 64; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((r >> 33) % (uint64_t)I->n_vocab);
    }
    mu_batch_item it = {.s = s, .tokens = toks, .n_tokens = depth};
    const char *dpath = getenv("VERIFYBENCH_DRAFT");
    mu_drafter *dr = NULL;
    mu_draft_seq *dq = NULL;
    float *feat = NULL;
    if (dpath) {
        if (mu_drafter_open(dpath, e, &dr, &err) || mu_draft_seq_new(dr, depth + 64 + 8, &dq, &err))
            return fprintf(stderr, "verifybench: %s\n", err.msg), 1;
        const mu_drafter_info *di = mu_drafter_get_info(dr);
        feat = calloc((size_t)(depth > 64 ? depth : 64) * di->n_feat, sizeof *feat);
        it.feat = feat;
        it.feat_layers = di->target_layers;
        it.n_feat_layers = di->n_target;
    }
    if (mu_forward(e, &it, 1, &err)) return fprintf(stderr, "verifybench: %s\n", err.msg), 1;
    if (dq && mu_draft_seq_inject(dq, 0, depth, feat, &err)) return fprintf(stderr, "verifybench: %s\n", err.msg), 1;
    /* [mode][k index][round]; mode 0 decode (k ignored), 1 solo, 2 batch,
     * 3 capture (a decode step capturing the features; with a drafter) */
    static double t[4][MAXK][MAXR], c[4][MAXK][MAXR];
    const char *modes = getenv("VERIFYBENCH_MODES");
    if (!modes) modes = "0123";
    for (int rd = 0; rd < rounds + 1; rd++) /* round 0 warms up */
        for (int ki = 0; ki < nk; ki++)
            for (int mode = 0; mode < 4; mode++) {
                if (((mode == 0 || mode == 3) && ki > 0) || !strchr(modes, '0' + mode) || (mode == 3 && !dr))
                    continue;
                const int step = mode == 0 || mode == 3;
                mu_batch_item b = {.s = s, .tokens = toks + depth, .n_tokens = step ? 1 : 1 + ks[ki],
                                   .all_logits = !step, .solo = mode == 1};
                if (mode == 3) {
                    b.feat = feat;
                    b.feat_layers = it.feat_layers;
                    b.n_feat_layers = it.n_feat_layers;
                }
                double t0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
                if (mu_forward(e, &b, 1, &err) || mu_session_truncate(s, depth, &err))
                    return fprintf(stderr, "verifybench: %s\n", err.msg), 1;
                if (rd) {
                    t[mode][ki][rd - 1] = clock_ms(CLOCK_MONOTONIC) - t0;
                    c[mode][ki][rd - 1] = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
                }
            }
    static double td[MAXK + 1][MAXR], cd[MAXK + 1][MAXR];
    const int bmax = dr ? mu_drafter_get_info(dr)->block_size - 1 : 0;
    for (int rd = 0; dr && rd < rounds + 1; rd++)
        for (int ki = 0; ki <= nk; ki++) { /* ki == nk: one injection */
            if (ki < nk && ks[ki] > bmax) continue;
            int32_t out[64];
            double t0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
            int rc = ki < nk ? (mu_draft_seq_draft(dq, toks[depth], depth, ks[ki], out, &err) < 0)
                             : mu_draft_seq_inject(dq, depth, 64, feat, &err);
            if (rc) return fprintf(stderr, "verifybench: %s\n", err.msg), 1;
            if (ki == nk) mu_draft_seq_truncate(dq, depth);
            if (rd) {
                td[ki][rd - 1] = clock_ms(CLOCK_MONOTONIC) - t0;
                cd[ki][rd - 1] = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
            }
        }
    double dec = median(t[0][0], rounds), cdec = median(c[0][0], rounds);
    printf("{\"mode\": \"decode\", \"k\": 0, \"ms\": %.3f, \"ratio\": 1.0, \"cpu_ms\": %.3f, \"cpu_ratio\": 1.0, "
           "\"model\": \"%s\", \"depth\": %d, \"threads\": %d, \"rounds\": %d, \"backend\": \"%s\"}\n",
           dec, cdec, I->name, depth, threads, rounds, mu_engine_backend(e));
    for (int ki = 0; ki < nk; ki++)
        for (int mode = 1; mode < 3; mode++) {
            if (!strchr(modes, '0' + mode)) continue;
            double ms = median(t[mode][ki], rounds), cms = median(c[mode][ki], rounds);
            printf("{\"mode\": \"%s\", \"k\": %d, \"ms\": %.3f, \"ratio\": %.3f, \"cpu_ms\": %.3f, \"cpu_ratio\": %.3f}\n",
                   mode == 1 ? "solo" : "batch", ks[ki], ms, ms / dec, cms, cms / cdec);
        }
    if (dr && strchr(modes, '3')) {
        const double ms = median(t[3][0], rounds), cms = median(c[3][0], rounds);
        printf("{\"mode\": \"capture\", \"k\": 0, \"ms\": %.3f, \"ratio\": %.3f, \"cpu_ms\": %.3f, \"cpu_ratio\": %.3f}\n",
               ms, ms / dec, cms, cms / cdec);
    }
    for (int ki = 0; dr && ki <= nk; ki++) {
        if (ki < nk && ks[ki] > bmax) continue;
        double ms = median(td[ki], rounds), cms = median(cd[ki], rounds);
        if (ki == nk) ms /= 64, cms /= 64; /* per injected position */
        printf("{\"mode\": \"%s\", \"k\": %d, \"ms\": %.3f, \"ratio\": %.3f, \"cpu_ms\": %.3f, \"cpu_ratio\": %.3f}\n",
               ki < nk ? "draft" : "inject", ki < nk ? ks[ki] : 1, ms, ms / dec, cms, cms / cdec);
    }
    mu_draft_seq_free(dq);
    mu_drafter_free(dr);
    free(feat);
    free(toks);
    mu_session_free(s);
    mu_engine_free(e);
    mu_model_close(m);
    return 0;
}
