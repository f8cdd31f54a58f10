/* test_gpu_engine.c: the CUDA engine against the CPU engine on one model
 * (argv[1]), through the public API only:
 *  1. prefill of a long prompt (several chunks, past the sliding window)
 *     and 24 greedy decode steps: the logits of every step on both;
 *  2. four sessions in one batch (a prefill, then a decode step);
 *  3. KV rows moved GPU -> CPU and CPU -> GPU (mu_session_kv_read/write):
 *     the next logits equal the ones the session computed itself;
 * and input rows (image rows) between text tokens: logits and cells; and
 * hidden-state capture (mu_batch_item.feat, a DFlash drafter's features):
 * the captured rows and the logits, in a prefill of two sessions, a solo
 * block and lone steps (judged by TOL too: the rows are the residual
 * stream, which the device computes in the CPU's order, so they are
 * expected bit-equal like the cells; the test prints how many differ;
 * by default the lone steps' captures run as graphs,
 * MUSER_CUDA_CAPTURE_GRAPH=0 launches them directly).
 * Every logits row of every GPU pass: the device's best
 * (mu_session_logits_best) equals the host's scans of the downloaded row
 * (its first argmax when every value is finite, else -1), including the
 * row of an input row with a NaN (its logits come out finite: rows that
 * are not are test_gpu_kern's).
 * The device keeps the CPU's arithmetic, so logits are expected bit-equal;
 * the test prints the largest difference and fails above 1e-3 (libm's expf
 * and tanhf on the device may differ from glibc's in rare last bits).
 * Exits 77 (skip) without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser.h"

#define TOL 1e-3f

static int fails;
static double worst_all;

static void cmp(const char *what, const float *a, const float *b, int n) {
    double worst = 0;
    int ndiff = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (memcmp(&a[i], &b[i], 4)) ndiff++;
        if (!(d <= worst)) worst = d;
    }
    if (worst > worst_all) worst_all = worst;
    if (!(worst <= TOL)) {
        fails++;
        printf("FAIL %s: max |d| %g (%d of %d differ)\n", what, worst, ndiff, n);
    }
}

/* a batch item; the fields after solo stay zero */
static mu_batch_item item(mu_session *s, const int32_t *tokens, int n, bool all_logits, float *embd, bool solo) {
    mu_batch_item b = {0};
    b.s = s;
    b.tokens = tokens;
    b.n_tokens = n;
    b.all_logits = all_logits;
    b.embd = embd;
    b.solo = solo;
    return b;
}

/* the same capture request on the CPU engine's item c and the GPU engine's g */
static void want_feat(mu_batch_item *c, mu_batch_item *g, float *fc, float *fg, const int *layers, int n) {
    c->feat = fc, g->feat = fg;
    c->feat_layers = g->feat_layers = layers;
    c->n_feat_layers = g->n_feat_layers = n;
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static long best_rows, best_bad;

/* The device's best of each of s's first n rows against the host's scans. */
static void check_best(mu_session *s, int n, int V) {
    for (int i = 0; i < n; i++) {
        const float *l = mu_session_logits(s, i);
        const int32_t want = mu_logits_finite(l, V) ? argmax(l, V) : -1, got = mu_session_logits_best(s, i);
        best_rows++;
        if (got != want) {
            fails++;
            if (best_bad++ < 10) printf("FAIL logits row %d: device best %d, the host's scans say %d\n", i, got, want);
        }
    }
}

/* mu_forward on the GPU engine, then check_best of every row it wrote. */
static int forward_gpu(mu_engine *e, const mu_batch_item *items, int n, mu_err *err) {
    int rc = mu_forward(e, items, n, err);
    const int V = mu_model_get_info(mu_engine_model(e))->n_vocab;
    for (int i = 0; !rc && i < n; i++)
        if (!items[i].embd) check_best(items[i].s, items[i].all_logits ? items[i].n_tokens : 1, V);
    return rc;
}

#define CK(x)                                                  \
    do {                                                       \
        if (x) {                                               \
            printf("FAIL %s: %s\n", #x, err.msg);              \
            return 1;                                          \
        }                                                      \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_gpu_engine MODEL.gguf\n");
        return 2;
    }
    mu_gpu_device d;
    if (mu_gpu_devices(&d, 1) == 0) {
        printf("skip: %s\n", mu_gpu_devices_why());
        return 77;
    }
    mu_err err = {0};
    mu_model *m;
    CK(mu_model_open(argv[1], &m, &err));
    const mu_model_info *I = mu_model_get_info(m);
    const int V = I->n_vocab;
    mu_engine *ec, *eg;
    mu_engine_opts oc = {.backend = "cpu"}, og = {.backend = "cuda"};
    CK(mu_engine_new(m, &oc, &ec, &err));
    CK(mu_engine_new(m, &og, &eg, &err));
    /* TEST_PROMPT=N: another prompt length (bisecting a failure) */
    const int n_prompt = getenv("TEST_PROMPT") ? atoi(getenv("TEST_PROMPT")) : 700 + I->n_swa, n_ctx = n_prompt + 64;
    int32_t *prompt = malloc(n_prompt * sizeof *prompt);
    for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    mu_session *sc, *sg;
    CK(mu_session_new(ec, n_ctx, &sc, &err));
    CK(mu_session_new(eg, n_ctx, &sg, &err));
    /* 1. prefill in one batch (two chunks), then greedy steps */
    mu_batch_item bc = item(sc, prompt, n_prompt, false, NULL, false), bg = item(sg, prompt, n_prompt, false, NULL, false);
    CK(mu_forward(ec, &bc, 1, &err));
    CK(forward_gpu(eg, &bg, 1, &err));
    cmp("prefill logits", mu_session_logits(sc, -1), mu_session_logits(sg, -1), V);
    {
        /* the cells themselves: every layer's K and V rows after the prefill */
        const int n_kv = I->n_head_kv * I->head_dim, lo = n_prompt > 256 ? n_prompt - 256 : 0, n = n_prompt - lo;
        uint16_t *kc = malloc((size_t)n * n_kv * 2), *vc = malloc((size_t)n * n_kv * 2);
        uint16_t *kg = malloc((size_t)n * n_kv * 2), *vg = malloc((size_t)n * n_kv * 2);
        for (int il = 0; il < I->n_layer; il++) {
            CK(mu_session_kv_read(sc, il, lo, n, kc, vc, &err));
            CK(mu_session_kv_read(sg, il, lo, n, kg, vg, &err));
            int nk = 0, nv = 0, first = -1;
            for (size_t i = 0; i < (size_t)n * n_kv; i++) {
                if (kc[i] != kg[i] && first < 0) first = (int)(i / n_kv);
                nk += kc[i] != kg[i];
                nv += vc[i] != vg[i];
            }
            if (nk || nv) {
                fails++;
                printf("FAIL layer %d (%s) cells: %d K and %d V values differ of %d (first at position %d)\n", il,
                       I->swa_layers[il] ? "sliding" : "full", nk, nv, n * n_kv, lo + first);
            }
        }
        free(kc); free(vc); free(kg); free(vg);
    }
    int32_t tok = argmax(mu_session_logits(sc, -1), V);
    for (int s = 0; s < 24; s++) {
        bc = item(sc, &tok, 1, false, NULL, false);
        bg = item(sg, &tok, 1, false, NULL, false);
        CK(mu_forward(ec, &bc, 1, &err));
        CK(forward_gpu(eg, &bg, 1, &err));
        char what[64];
        snprintf(what, sizeof what, "decode step %d", s);
        cmp(what, mu_session_logits(sc, -1), mu_session_logits(sg, -1), V);
        tok = argmax(mu_session_logits(sc, -1), V);
    }
    /* 2. four sessions in one batch, all-logits rows and lone rows, on both
     * (the CPU's rounding of a Q4_K matmul depends on the batch's size, so
     * the CPU runs the same batch) */
    mu_session *g4[4], *c4[4];
    mu_batch_item bg4[4], bc4[4];
    int32_t p4[4][40];
    for (int j = 0; j < 4; j++) {
        CK(mu_session_new(eg, 128, &g4[j], &err));
        CK(mu_session_new(ec, 128, &c4[j], &err));
        for (int i = 0; i < 40; i++) p4[j][i] = (int32_t)((i * 31 + j * 101 + 5) % V);
        bg4[j] = item(g4[j], p4[j], 10 + 10 * j, j == 2, NULL, false);
        bc4[j] = item(c4[j], p4[j], 10 + 10 * j, j == 2, NULL, false);
    }
    CK(forward_gpu(eg, bg4, 4, &err));
    CK(mu_forward(ec, bc4, 4, &err));
    for (int j = 0; j < 4; j++) {
        char what[64];
        snprintf(what, sizeof what, "batched session %d", j);
        cmp(what, mu_session_logits(c4[j], -1), mu_session_logits(g4[j], -1), V);
        if (j == 2) cmp("batched all-logits row 3", mu_session_logits(c4[j], 3), mu_session_logits(g4[j], 3), V);
    }
    /* then one decode step of all four in one batch (four lone tokens) */
    int32_t t4[4];
    for (int j = 0; j < 4; j++) {
        t4[j] = argmax(mu_session_logits(c4[j], -1), V);
        bg4[j] = item(g4[j], &t4[j], 1, false, NULL, false);
        bc4[j] = item(c4[j], &t4[j], 1, false, NULL, false);
    }
    CK(forward_gpu(eg, bg4, 4, &err));
    CK(mu_forward(ec, bc4, 4, &err));
    for (int j = 0; j < 4; j++) {
        char what[64];
        snprintf(what, sizeof what, "batched decode, session %d", j);
        cmp(what, mu_session_logits(c4[j], -1), mu_session_logits(g4[j], -1), V);
        mu_session_free(g4[j]);
        mu_session_free(c4[j]);
    }
    /* a solo block (speculative verification): 6 tokens with all logits,
     * each rounding as a decode step, after a lone-token neighbour */
    {
        mu_session *c1, *g1, *c2b, *g2b;
        CK(mu_session_new(ec, 128, &c1, &err));
        CK(mu_session_new(eg, 128, &g1, &err));
        CK(mu_session_new(ec, 128, &c2b, &err));
        CK(mu_session_new(eg, 128, &g2b, &err));
        mu_batch_item pc[2] = {item(c1, p4[0], 20, false, NULL, false), item(c2b, p4[3], 20, false, NULL, false)};
        mu_batch_item pg[2] = {item(g1, p4[0], 20, false, NULL, false), item(g2b, p4[3], 20, false, NULL, false)};
        CK(mu_forward(ec, pc, 2, &err));
        CK(forward_gpu(eg, pg, 2, &err));
        mu_batch_item sc2[2] = {item(c2b, p4[2], 1, false, NULL, false), item(c1, p4[1], 6, true, NULL, true)};
        mu_batch_item sg2[2] = {item(g2b, p4[2], 1, false, NULL, false), item(g1, p4[1], 6, true, NULL, true)};
        CK(mu_forward(ec, sc2, 2, &err));
        CK(forward_gpu(eg, sg2, 2, &err));
        for (int r = 0; r < 6; r++) {
            char what[64];
            snprintf(what, sizeof what, "solo block row %d", r);
            cmp(what, mu_session_logits(c1, r), mu_session_logits(g1, r), V);
        }
        cmp("solo block's neighbour", mu_session_logits(c2b, -1), mu_session_logits(g2b, -1), V);
        if (getenv("TEST_KV_DIFF")) { /* which layer's cells of the step differ first */
            const int n_kv = I->n_head_kv * I->head_dim;
            uint16_t *kc = malloc((size_t)n_kv * 2), *vc = malloc((size_t)n_kv * 2), *kg = malloc((size_t)n_kv * 2),
                     *vg = malloc((size_t)n_kv * 2);
            for (int who = 0; who < 2; who++)
                for (int il = 0; il < I->n_layer; il++) {
                    mu_session *a1 = who ? c1 : c2b, *b1 = who ? g1 : g2b;
                    CK(mu_session_kv_read(a1, il, 20, 1, kc, vc, &err));
                    CK(mu_session_kv_read(b1, il, 20, 1, kg, vg, &err));
                    int nk = 0, nv = 0;
                    for (int i = 0; i < n_kv; i++) nk += kc[i] != kg[i], nv += vc[i] != vg[i];
                    if (nk || nv) printf("  %s layer %d: %d K %d V differ at position 20\n", who ? "solo" : "neighbour", il, nk, nv);
                }
        }
        mu_session_free(c1);
        mu_session_free(g1);
        mu_session_free(c2b);
        mu_session_free(g2b);
    }
    /* hidden-state capture: several layers in any order (0 is the normed
     * embedding, n_layer - 1 the last layer's input, before its gather of
     * output rows), two sessions in a prefill, then a lone token and a solo
     * block, then lone steps with and without capture (the second replays
     * a graph) */
    {
        const int E = I->n_embd, nl = I->n_layer;
        const int la[4] = {nl - 1, 0, nl / 2, 1 % nl}, lb[2] = {nl / 2, nl - 1};
        mu_session *c1, *g1, *c2, *g2;
        CK(mu_session_new(ec, 128, &c1, &err));
        CK(mu_session_new(eg, 128, &g1, &err));
        CK(mu_session_new(ec, 128, &c2, &err));
        CK(mu_session_new(eg, 128, &g2, &err));
        float *fc = calloc((size_t)20 * 4 * E, 4), *fg = calloc((size_t)20 * 4 * E, 4);
        float *hc = calloc((size_t)15 * 2 * E, 4), *hg = calloc((size_t)15 * 2 * E, 4);
        mu_batch_item pc[2] = {item(c1, p4[0], 20, false, NULL, false), item(c2, p4[3], 15, false, NULL, false)};
        mu_batch_item pg[2] = {item(g1, p4[0], 20, false, NULL, false), item(g2, p4[3], 15, false, NULL, false)};
        want_feat(&pc[0], &pg[0], fc, fg, la, 4);
        want_feat(&pc[1], &pg[1], hc, hg, lb, 2);
        CK(mu_forward(ec, pc, 2, &err));
        CK(forward_gpu(eg, pg, 2, &err));
        size_t nd = 0, nall = 0;
        double wd = 0;
#define CAP_CMP(what, a, b, n)                                                                     \
    do {                                                                                          \
        cmp(what, a, b, n);                                                                       \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++) {                                             \
            double d_ = fabs((double)(a)[i_] - (double)(b)[i_]);                                  \
            nd += memcmp(&(a)[i_], &(b)[i_], 4) != 0;                                             \
            if (!(d_ <= wd)) wd = d_;                                                             \
        }                                                                                         \
        nall += (size_t)(n);                                                                      \
    } while (0)
        CAP_CMP("capture: prefill, session 1 (4 layers)", fc, fg, 20 * 4 * E);
        CAP_CMP("capture: prefill, session 2 (2 layers)", hc, hg, 15 * 2 * E);
        cmp("capture: prefill logits 1", mu_session_logits(c1, -1), mu_session_logits(g1, -1), V);
        cmp("capture: prefill logits 2", mu_session_logits(c2, -1), mu_session_logits(g2, -1), V);
        /* a lone token of session 2, then session 1's solo block of 6 (verification) */
        int32_t t2 = argmax(mu_session_logits(c2, -1), V);
        mu_batch_item sc2[2] = {item(c2, &t2, 1, false, NULL, false), item(c1, p4[1], 6, true, NULL, true)};
        mu_batch_item sg2[2] = {item(g2, &t2, 1, false, NULL, false), item(g1, p4[1], 6, true, NULL, true)};
        want_feat(&sc2[0], &sg2[0], hc, hg, lb, 2);
        want_feat(&sc2[1], &sg2[1], fc, fg, la, 4);
        CK(mu_forward(ec, sc2, 2, &err));
        CK(forward_gpu(eg, sg2, 2, &err));
        CAP_CMP("capture: solo block (4 layers)", fc, fg, 6 * 4 * E);
        CAP_CMP("capture: the block's lone neighbour", hc, hg, 2 * E);
        for (int r = 0; r < 6; r++) {
            char what[64];
            snprintf(what, sizeof what, "capture: solo block row %d", r);
            cmp(what, mu_session_logits(c1, r), mu_session_logits(g1, r), V);
        }
        cmp("capture: the block's neighbour", mu_session_logits(c2, -1), mu_session_logits(g2, -1), V);
        /* lone steps of session 2: two with capture (by default a graph
         * captured, then replayed on new rows; directly with
         * MUSER_CUDA_CAPTURE_GRAPH=0), then one without (a graph) */
        for (int k = 0; k < 3; k++) {
            t2 = argmax(mu_session_logits(c2, -1), V);
            mu_batch_item lc = item(c2, &t2, 1, false, NULL, false), lg = item(g2, &t2, 1, false, NULL, false);
            if (k < 2) want_feat(&lc, &lg, hc, hg, lb, 2);
            CK(mu_forward(ec, &lc, 1, &err));
            CK(forward_gpu(eg, &lg, 1, &err));
            if (k < 2) CAP_CMP(k ? "capture: a second lone step" : "capture: a lone step", hc, hg, 2 * E);
            cmp(k == 2 ? "capture: lone step after" : "capture: lone step", mu_session_logits(c2, -1),
                mu_session_logits(g2, -1), V);
        }
#undef CAP_CMP
        printf("capture rows: max |d| %g, %zu of %zu values differ\n", wd, nd, nall);
        free(fc), free(fg), free(hc), free(hg);
        mu_session_free(c1);
        mu_session_free(g1);
        mu_session_free(c2);
        mu_session_free(g2);
    }
    /* embeddings: the final-norm rows of every token of a prompt */
    {
        float *ec_rows = malloc((size_t)30 * I->n_embd * 4), *eg_rows = malloc((size_t)30 * I->n_embd * 4);
        mu_session *c1, *g1;
        CK(mu_session_new(ec, 128, &c1, &err));
        CK(mu_session_new(eg, 128, &g1, &err));
        mu_batch_item be = item(c1, p4[1], 30, false, ec_rows, false), bge = item(g1, p4[1], 30, false, eg_rows, false);
        CK(mu_forward(ec, &be, 1, &err));
        CK(forward_gpu(eg, &bge, 1, &err));
        cmp("embedding rows", ec_rows, eg_rows, 30 * I->n_embd);
        mu_session_free(c1);
        mu_session_free(g1);
        free(ec_rows);
        free(eg_rows);
    }
    /* input rows (image rows, mu_batch_item.in_embd): text, 40 rows, text,
     * in one forward and with a lone row after it; logits and the cells of
     * the rows' positions */
    {
        const int E = I->n_embd, n_kv = I->n_head_kv * I->head_dim;
        float *rows = malloc((size_t)41 * E * 4);
        for (size_t i = 0; i < (size_t)41 * E; i++) rows[i] = (float)((int)((i * 2654435761u) >> 20 & 1023) - 512) / 256.0f;
        mu_session *c1, *g1;
        CK(mu_session_new(ec, 128, &c1, &err));
        CK(mu_session_new(eg, 128, &g1, &err));
        mu_batch_item ic[3] = {item(c1, p4[0], 7, false, NULL, false), item(c1, NULL, 40, false, NULL, false),
                               item(c1, p4[1], 9, false, NULL, false)};
        mu_batch_item ig[3] = {item(g1, p4[0], 7, false, NULL, false), item(g1, NULL, 40, false, NULL, false),
                               item(g1, p4[1], 9, false, NULL, false)};
        ic[1].in_embd = ig[1].in_embd = rows;
        for (int k = 0; k < 3; k++) { /* one item a forward: a session appears once in a batch */
            CK(mu_forward(ec, &ic[k], 1, &err));
            CK(forward_gpu(eg, &ig[k], 1, &err));
        }
        cmp("after input rows", mu_session_logits(c1, -1), mu_session_logits(g1, -1), V);
        mu_batch_item lc = item(c1, NULL, 1, false, NULL, false), lg = item(g1, NULL, 1, false, NULL, false);
        lc.in_embd = lg.in_embd = rows + (size_t)40 * E;
        CK(mu_forward(ec, &lc, 1, &err));
        CK(forward_gpu(eg, &lg, 1, &err));
        cmp("a lone input row", mu_session_logits(c1, -1), mu_session_logits(g1, -1), V);
        uint16_t *kc = malloc((size_t)57 * n_kv * 2), *vc = malloc((size_t)57 * n_kv * 2);
        uint16_t *kg = malloc((size_t)57 * n_kv * 2), *vg = malloc((size_t)57 * n_kv * 2);
        for (int il = 0; il < I->n_layer; il++) {
            const int lo = I->swa_layers[il] && I->n_swa < 57 ? 57 - I->n_swa : 0; /* what a sliding layer holds */
            CK(mu_session_kv_read(c1, il, lo, 57 - lo, kc, vc, &err));
            CK(mu_session_kv_read(g1, il, lo, 57 - lo, kg, vg, &err));
            int nd = 0;
            for (size_t i = 0; i < (size_t)(57 - lo) * n_kv; i++) nd += (kc[i] != kg[i]) + (vc[i] != vg[i]);
            if (nd) {
                fails++;
                printf("FAIL input rows: layer %d: %d K/V values differ\n", il, nd);
            }
        }
        /* a NaN in an input row: the activation quantizers pass over NaN
         * (their largest magnitude ignores it), so the logits come out
         * finite; forward_gpu checks the row's best
         * against the host's scans (non-finite rows: test_gpu_kern's
         * test_best) */
        float *nan_row = malloc((size_t)E * 4);
        memcpy(nan_row, rows, (size_t)E * 4);
        nan_row[E / 2] = NAN;
        lg.in_embd = nan_row;
        CK(forward_gpu(eg, &lg, 1, &err));
        free(nan_row);
        free(kc); free(vc); free(kg); free(vg);
        mu_session_free(c1);
        mu_session_free(g1);
        free(rows);
    }
    /* 3. KV rows both ways: copy every layer's held rows, then one step */
    mu_session *c2, *g2;
    CK(mu_session_new(ec, n_ctx, &c2, &err));
    CK(mu_session_new(eg, n_ctx, &g2, &err));
    const int n_past = mu_session_n_past(sg);
    const size_t cap = mu_session_state_bytes(sg);
    void *buf = malloc(cap);
    size_t wr;
    CK(mu_session_state_save(sg, buf, cap, &wr, &err));
    CK(mu_session_state_load(c2, buf, wr, &err));
    CK(mu_session_state_save(sc, buf, cap, &wr, &err));
    CK(mu_session_state_load(g2, buf, wr, &err));
    bc = item(c2, &tok, 1, false, NULL, false);
    bg = item(g2, &tok, 1, false, NULL, false);
    mu_batch_item bs = item(sc, &tok, 1, false, NULL, false);
    CK(mu_forward(ec, &bc, 1, &err));
    CK(forward_gpu(eg, &bg, 1, &err));
    CK(mu_forward(ec, &bs, 1, &err));
    cmp("GPU rows continued on the CPU", mu_session_logits(sc, -1), mu_session_logits(c2, -1), V);
    cmp("CPU rows continued on the GPU", mu_session_logits(sc, -1), mu_session_logits(g2, -1), V);
    printf("logits rows' best: %ld rows checked, %ld differ from the host's scans\n", best_rows, best_bad);
    printf("gpu engine (%s, %d positions): max |logit difference| %g, %s\n", argv[1], n_past + 1, worst_all,
           fails ? "FAIL" : "ok");
    free(buf);
    free(prompt);
    return fails ? 1 : 0;
}
