/* draft_compare.h: the DFlash drafter of a CUDA engine against the CPU
 * drafter, through the public API (tests/gpu/test_gpu_draft.c on a device;
 * tests/unit/test_gpu_fake.c on the fake plugin's emulation of the device
 * drafter, fake_gpu_draft.h). One drafter file opened on a CPU engine and on
 * a CUDA engine of the same target; both sequences get the same seeded
 * features and calls:
 *  1. positions injected in pieces of 1, 3, 40 and 56 (pending ones made
 *     rows together, a piece past the pending limit at once), a pass of a
 *     whole block, each draft row's head scores and the drafts;
 *  2. a truncation into the injected rows and new features after a gap
 *     (the rows of rejected drafts dropped: none of the gap's may be read),
 *     the same checks;
 *  3. a shorter draft (the last layer computes fewer rows);
 *  4. a sequence whose first 20 positions are absent (a prompt from a KV
 *     pack), the same checks.
 * The device's matmuls round as the CPU's vec_dot, but the CPU drafter
 * rounds its softmax weights to F16 and the device's norms, RoPE and
 * attention run in another order, so scores are compared with a
 * tolerance: |cpu - gpu| <= tol_rel * max|cpu| + DC_TOL_ABS per row. With
 * F32, F16 or BF16 weights the two stay within about 1e-3 of each other
 * (1e-2 is the bar); with Q8_0 weights a difference in the last bit of an
 * activation sometimes moves its 8-bit rounding, and that step spreads
 * through the next layer's roundings: the CPU drafter's own AVX-512 and
 * reference tables differ by up to 3e-2 there (drafter scores of a
 * random 2-layer Q8_0 drafter, 61 positions), so 5e-2 is the bar. A wrong
 * mask, row or rotation is off by far more (in the emulation: without the
 * absent-position mask 0.13 of the row's largest score, a flipped RoPE
 * sign 0.47). A draft may differ only where the CPU's two best
 * scores are within twice the tolerance (a near tie; counted). Also:
 * info.on_device on the CUDA side only, and MUSER_DRAFT_DEVICE=0 keeps the
 * drafter on the CPU. Test code. */
#ifndef MU_TEST_DRAFT_COMPARE_H
#define MU_TEST_DRAFT_COMPARE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser.h"

typedef struct {
    double tol_rel; /* set by the caller: the tolerance relative to a row's largest score */
    int fails, ties;
    double worst;   /* the largest score difference, relative to its row's largest score */
} draft_cmp;

#define DC_TOL_ABS 1e-4
#define DC_CTX 256

static uint64_t dc_rng = 0x9e3779b97f4a7c15ull;
static float dc_frand(void) {
    dc_rng ^= dc_rng << 13, dc_rng ^= dc_rng >> 7, dc_rng ^= dc_rng << 17;
    return (float)((double)(dc_rng >> 11) / 9007199254740992.0 * 2 - 1);
}

/* the same features into both sequences */
static int dc_inject(mu_draft_seq *qc, mu_draft_seq *qg, int pos0, int n, int n_feat, mu_err *err) {
    float *f = malloc((size_t)n * n_feat * sizeof *f);
    if (!f) return -1;
    for (size_t i = 0; i < (size_t)n * n_feat; i++) f[i] = dc_frand();
    int rc = mu_draft_seq_inject(qc, pos0, n, f, err);
    if (!rc) rc = mu_draft_seq_inject(qg, pos0, n, f, err);
    free(f);
    return rc;
}

/* a pass on both at pos and every kept row's scores and draft */
static int dc_pass(draft_cmp *c, const char *what, mu_draft_seq *qc, mu_draft_seq *qg, int32_t last, int pos,
                   int n_draft, int n_scored, mu_err *err) {
    if (mu_draft_seq_pass(qc, last, pos, n_draft, err) != n_draft) return -1;
    if (mu_draft_seq_pass(qg, last, pos, n_draft, err) != n_draft) return -1;
    float *sc = malloc((size_t)n_scored * sizeof *sc), *sg = malloc((size_t)n_scored * sizeof *sg);
    if (!sc || !sg) {
        free(sc);
        free(sg);
        return -1;
    }
    int32_t dc[128], dg[128];
    const int nc = mu_draft_seq_tokens(qc, 0, n_draft, dc), ng = mu_draft_seq_tokens(qg, 0, n_draft, dg);
    if (nc != n_draft || ng != n_draft) {
        printf("FAIL %s: %d and %d drafts of %d\n", what, nc, ng, n_draft);
        c->fails++;
    }
    int differ = 0;
    for (int r = 0; r < n_draft; r++) {
        if (mu_draft_seq_scores(qc, r, sc) != n_scored || mu_draft_seq_scores(qg, r, sg) != n_scored) {
            printf("FAIL %s row %d: no scores\n", what, r);
            c->fails++;
            continue;
        }
        double mx = 0, d = 0, b1 = -INFINITY, b2 = -INFINITY;
        for (int i = 0; i < n_scored; i++) {
            if (fabs(sc[i]) > mx) mx = fabs(sc[i]);
            const double e = isfinite(sg[i]) ? fabs((double)sc[i] - sg[i]) : INFINITY;
            if (e > d) d = e;
            if (sc[i] > b1) b2 = b1, b1 = sc[i];
            else if (sc[i] > b2) b2 = sc[i];
        }
        const double tol = c->tol_rel * mx + DC_TOL_ABS;
        if (d / (mx > 0 ? mx : 1) > c->worst) c->worst = d / (mx > 0 ? mx : 1);
        if (!(d <= tol)) {
            printf("FAIL %s row %d: scores differ by %.3g (tolerance %.3g, largest %.3g)\n", what, r, d, tol, mx);
            c->fails++;
        }
        if (r < nc && r < ng && dc[r] != dg[r]) {
            differ++;
            if (b1 - b2 <= 2 * tol) {
                c->ties++;
            } else {
                printf("FAIL %s row %d: draft %d on the CPU, %d on the device (margin %.3g)\n", what, r, dc[r], dg[r],
                       b1 - b2);
                c->fails++;
            }
        }
    }
    printf("%s: %d drafts, %d differ (near ties)\n", what, n_draft, differ);
    free(sc);
    free(sg);
    return 0;
}

/* The four cases above for drafter file dpath on engines ec (CPU) and eg
 * (CUDA), at tolerance tol_rel, into c; nonzero (err set) when a call fails
 * outright. */
static int draft_compare(mu_engine *ec, mu_engine *eg, const char *dpath, double tol_rel, draft_cmp *c, mu_err *err) {
    *c = (draft_cmp){.tol_rel = tol_rel};
    mu_drafter *dc = NULL, *dg = NULL, *dh = NULL;
    mu_draft_seq *qc = NULL, *qg = NULL;
    int rc = mu_drafter_open(dpath, ec, &dc, err);
    if (!rc) rc = mu_drafter_open(dpath, eg, &dg, err);
    if (!rc) {
        setenv("MUSER_DRAFT_DEVICE", "0", 1);
        rc = mu_drafter_open(dpath, eg, &dh, err);
        unsetenv("MUSER_DRAFT_DEVICE");
    }
    if (rc) goto out;
    const mu_drafter_info *ic = mu_drafter_get_info(dc), *ig = mu_drafter_get_info(dg);
    if (ic->on_device || !ig->on_device || mu_drafter_get_info(dh)->on_device) {
        printf("FAIL on_device: %d on the CPU engine, %d on the CUDA engine, %d there with MUSER_DRAFT_DEVICE=0\n",
               ic->on_device, ig->on_device, mu_drafter_get_info(dh)->on_device);
        c->fails++;
    }
    const int nf = ic->n_feat, B = ic->block_size - 1, ns = ic->n_scored;
    const int V = mu_model_get_info(mu_engine_model(ec))->n_vocab;
    printf("drafter: %d layers, block %d, %d features, %d ids scored\n", ic->n_layer, ic->block_size, nf, ns);
    /* 1. pieces of 1, 3, 40 and 56 positions, then a pass at 100 */
    if ((rc = mu_draft_seq_new(dc, DC_CTX, &qc, err)) || (rc = mu_draft_seq_new(dg, DC_CTX, &qg, err)) ||
        (rc = dc_inject(qc, qg, 0, 1, nf, err)) || (rc = dc_inject(qc, qg, 1, 3, nf, err)) ||
        (rc = dc_inject(qc, qg, 4, 40, nf, err)) || (rc = dc_inject(qc, qg, 44, 56, nf, err)) ||
        (rc = dc_pass(c, "pass at 100", qc, qg, 7 % V, 100, B, ns, err)))
        goto out;
    /* 2. back to 90, new features from 96 (90 .. 95 no longer present), a
     * pass at 104; 3. a shorter draft */
    mu_draft_seq_truncate(qc, 90);
    mu_draft_seq_truncate(qg, 90);
    if ((rc = dc_inject(qc, qg, 96, 8, nf, err)) ||
        (rc = dc_pass(c, "after a truncation", qc, qg, 11 % V, 104, B, ns, err)) ||
        (rc = dc_pass(c, "a shorter draft", qc, qg, 13 % V, 104, B < 3 ? B : 3, ns, err)))
        goto out;
    mu_draft_seq_free(qc);
    mu_draft_seq_free(qg);
    qc = qg = NULL;
    /* 4. positions 0 .. 19 absent */
    if ((rc = mu_draft_seq_new(dc, DC_CTX, &qc, err)) || (rc = mu_draft_seq_new(dg, DC_CTX, &qg, err)) ||
        (rc = dc_inject(qc, qg, 20, 41, nf, err)) ||
        (rc = dc_pass(c, "20 absent positions", qc, qg, 17 % V, 61, B, ns, err)))
        goto out;
    printf("%s: drafter CPU vs CUDA: largest score difference %.3g of the row's largest; %d near-tie drafts; "
           "%d failures\n", c->fails ? "FAIL" : "ok", c->worst, c->ties, c->fails);
out:
    mu_draft_seq_free(qc);
    mu_draft_seq_free(qg);
    mu_drafter_free(dc);
    mu_drafter_free(dg);
    mu_drafter_free(dh);
    return rc;
}

#endif
