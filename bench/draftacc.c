/* draftacc.c: muser's DFlash drafts at every position of a token sequence,
 * policy-free, for comparing with the PyTorch drafter
 * (tools/train/dflash_compare.py) and with the training script's held-out
 * evaluation. One forward of the target over the whole sequence captures
 * the drafter's features (mu_batch_item.feat), which are injected once;
 * then for every anchor a from START on, the block [ids[a], mask x K] at
 * positions a.. drafts from the rows of positions < a (the drafter reads
 * only those, so one injection serves every anchor). Prints one JSON line
 * per anchor: {"a": a, "drafts": [...]}; with --accept also the accepted
 * length against the sequence itself (the drafts that equal ids[a+1..]),
 * meaningful when the sequence is the target's greedy continuation.
 * Usage: draftacc MODEL DRAFTER START K [--accept] < ids (whitespace or
 * comma separated). Not part of libmuser. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/muser.h"

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: draftacc MODEL DRAFTER START K [--accept] < ids\n");
        return 1;
    }
    const int start = atoi(argv[3]), K = atoi(argv[4]), acc = argc > 5 && !strcmp(argv[5], "--accept");
    int cap = 1024, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int c, v = -1;
    while ((c = getchar()) != EOF || v >= 0) {
        if (c >= '0' && c <= '9') {
            v = (v < 0 ? 0 : v * 10) + (c - '0');
            continue;
        }
        if (v >= 0) {
            if (n == cap) ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            ids[n++] = v;
            v = -1;
        }
        if (c == EOF) break;
    }
    mu_err err = {0};
    mu_model *m;
    mu_engine *e;
    mu_session *s;
    mu_drafter *dr;
    mu_draft_seq *dq;
    if (mu_model_open(argv[1], &m, &err)) return fprintf(stderr, "draftacc: %s\n", err.msg), 1;
    mu_engine_opts eo = {.n_threads = 1};
    if (mu_engine_new(m, &eo, &e, &err) || mu_session_new(e, n + 64, &s, &err) ||
        mu_drafter_open(argv[2], e, &dr, &err) || mu_draft_seq_new(dr, n + 64, &dq, &err))
        return fprintf(stderr, "draftacc: %s\n", err.msg), 1;
    const mu_drafter_info *di = mu_drafter_get_info(dr);
    float *feat = malloc((size_t)n * (size_t)di->n_feat * sizeof *feat);
    mu_batch_item it = {.s = s, .tokens = ids, .n_tokens = n, .feat = feat, .feat_layers = di->target_layers,
                        .n_feat_layers = di->n_target};
    if (mu_forward(e, &it, 1, &err) || mu_draft_seq_inject(dq, 0, n, feat, &err))
        return fprintf(stderr, "draftacc: %s\n", err.msg), 1;
    int32_t out[64];
    for (int a = start; a < n; a++) {
        if (mu_draft_seq_draft(dq, ids[a], a, K, out, &err) < 0) return fprintf(stderr, "draftacc: %s\n", err.msg), 1;
        printf("{\"a\": %d, \"drafts\": [", a);
        for (int k = 0; k < K; k++) printf("%s%d", k ? ", " : "", out[k]);
        printf("]");
        if (acc) {
            int l = 0;
            while (l < K && a + 1 + l < n && out[l] == ids[a + 1 + l]) l++;
            printf(", \"accepted\": %d", l);
        }
        printf("}\n");
    }
    free(feat);
    free(ids);
    mu_draft_seq_free(dq);
    mu_drafter_free(dr);
    mu_session_free(s);
    mu_engine_free(e);
    mu_model_close(m);
    return 0;
}
