/* test_gpu_stream.c: layer streaming (mu_batch_item.on_layer) on the CUDA
 * engine against the CPU engine, on one model (argv[1]):
 *  1. a batch of a plain 7-token neighbour and a streaming prompt of
 *     PROMPT tokens (two chunks): the callbacks come per chunk, layers in
 *     order, once per layer, with the chunk's pos0 and n, exactly as the
 *     CPU engine calls them;
 *  2. then a streaming 3-token step (a size that otherwise replays a
 *     captured graph).
 * The K and V rows read inside each callback equal, bit for bit, the CPU
 * engine's rows read inside its callbacks, the rows the session holds
 * after the forward, and the rows of a CUDA run without the callback;
 * streaming changes no logit (the run without it, bit for bit). Every
 * callback ran before the pass's final synchronization, and the reads
 * inside them took the second stream (the engine's counts, not times); how
 * many callbacks found the device still busy is printed, never judged.
 * Exits 77 (skip) without a CUDA device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser.h"
#include "../../src/engine/engine.h"

#define PROMPT 600 /* with the neighbour: 512 + 95 tokens at the default chunk size */
#define NEIGH 7
#define STEP 3
#define NPOS (PROMPT + STEP)
#define MAX_CALLS 4096

static int fails;

#define FAILF(...)                 \
    do {                           \
        fails++;                   \
        printf("FAIL " __VA_ARGS__); \
        printf("\n");              \
    } while (0)

#define CK(x)                                                  \
    do {                                                       \
        if (x) {                                               \
            printf("FAIL %s: %s\n", #x, err.msg);              \
            return 1;                                          \
        }                                                      \
    } while (0)

/* What one engine's callbacks saw. */
typedef struct {
    mu_session *s;
    mu_engine *e;          /* the CUDA engine (its counts), or NULL */
    int n_layer;
    size_t n_kv;
    int calls, il[MAX_CALLS], pos0[MAX_CALLS], n[MAX_CALLS];
    int bad_read, not_open;
    long open0;            /* the engine's open count before the forward */
    uint16_t *k, *v;       /* [n_layer][NPOS][n_kv] as read in the callbacks */
} rec;

static void on_layer(void *user, int il, int pos0, int n) {
    rec *r = user;
    if (r->calls < MAX_CALLS) {
        r->il[r->calls] = il;
        r->pos0[r->calls] = pos0;
        r->n[r->calls] = n;
    }
    r->calls++;
    /* the CUDA engine counted this call as made before the final sync */
    if (r->e && r->e->gpu_stream.open != r->open0 + r->calls) r->not_open++;
    mu_err err = {0};
    const size_t at = ((size_t)il * NPOS + (size_t)pos0) * r->n_kv;
    if (il < 0 || il >= r->n_layer || pos0 < 0 || pos0 + n > NPOS ||
        mu_session_kv_read(r->s, il, pos0, n, r->k + at, r->v + at, &err)) {
        r->bad_read++;
        if (r->bad_read == 1) printf("  read in the callback (layer %d, %d+%d): %s\n", il, pos0, n, err.msg);
    }
}

static int rec_init(rec *r, mu_session *s, mu_engine *e, const mu_model_info *I) {
    memset(r, 0, sizeof *r);
    r->s = s;
    r->e = e;
    r->n_layer = I->n_layer;
    r->n_kv = (size_t)I->n_head_kv * I->head_dim;
    r->k = calloc((size_t)I->n_layer * NPOS * r->n_kv, 2);
    r->v = calloc((size_t)I->n_layer * NPOS * r->n_kv, 2);
    return r->k && r->v ? 0 : 1;
}

/* The calls of one forward, from call index c0: per chunk, every layer in
 * order with the item's run of positions in that chunk. */
static void check_calls(const char *what, const rec *r, int c0, const int *want_pos0, const int *want_n, int n_chunks) {
    const int L = r->n_layer;
    if (r->calls - c0 != n_chunks * L) {
        FAILF("%s: %d callbacks, want %d (%d chunks x %d layers)", what, r->calls - c0, n_chunks * L, n_chunks, L);
        return;
    }
    for (int c = 0; c < n_chunks; c++)
        for (int il = 0; il < L; il++) {
            const int i = c0 + c * L + il;
            if (i >= MAX_CALLS) return;
            if (r->il[i] != il || r->pos0[i] != want_pos0[c] || r->n[i] != want_n[c]) {
                FAILF("%s: callback %d is (layer %d, %d+%d), want (layer %d, %d+%d)", what, i - c0, r->il[i],
                      r->pos0[i], r->n[i], il, want_pos0[c], want_n[c]);
                return;
            }
        }
}

static int count_diff(const uint16_t *a, const uint16_t *b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}

/* Positions [p0, p1): the rows read in the CUDA callbacks against the CPU
 * callbacks' rows, the CUDA session's rows now (where its layer still holds
 * them) and the rows of the CUDA session run without the callback. */
static int compare_rows(const char *what, const rec *g, const rec *c, mu_session *ref, int p0, int p1) {
    mu_err err = {0};
    const size_t w = g->n_kv;
    uint16_t *k = malloc(w * 2), *v = malloc(w * 2), *k2 = malloc(w * 2), *v2 = malloc(w * 2);
    if (!k || !v || !k2 || !v2) return 1;
    int held = 0, cpu_rows = 0;
    for (int il = 0; il < g->n_layer; il++)
        for (int pos = p0; pos < p1; pos++) {
            const size_t at = ((size_t)il * NPOS + pos) * w;
            int dk = count_diff(g->k + at, c->k + at, w), dv = count_diff(g->v + at, c->v + at, w);
            if ((dk || dv) && !cpu_rows++) /* the first; the streaming checks go on */
                printf("  %s: layer %d position %d: %d K and %d V values of the CUDA callback differ from the CPU's\n",
                       what, il, pos, dk, dv);
            if (mu_session_kv_read(g->s, il, pos, 1, k, v, &err)) continue; /* a sliding layer's ring moved on */
            if (mu_session_kv_read(ref, il, pos, 1, k2, v2, &err)) {
                FAILF("%s: the reference session lacks layer %d position %d: %s", what, il, pos, err.msg);
                goto out;
            }
            held++;
            if (memcmp(k, g->k + at, w * 2) || memcmp(v, g->v + at, w * 2)) {
                FAILF("%s: layer %d position %d: the session's rows after the forward differ from the callback's", what,
                      il, pos);
                goto out;
            }
            if (memcmp(k2, k, w * 2) || memcmp(v2, v, w * 2)) {
                FAILF("%s: layer %d position %d: the rows differ from a CUDA run without the callback", what, il, pos);
                goto out;
            }
        }
    if (held == 0) FAILF("%s: no row held after the forward", what); /* the last positions always are */
    if (cpu_rows) FAILF("%s: %d rows read in CUDA callbacks differ from the CPU engine's", what, cpu_rows);
out:
    free(k);
    free(v);
    free(k2);
    free(v2);
    return 0;
}

static void logits_equal(const char *what, const float *a, const float *b, int n) {
    if (memcmp(a, b, (size_t)n * sizeof *a)) FAILF("%s: logits differ", what);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_gpu_stream MODEL.gguf\n");
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
    const int V = I->n_vocab, L = I->n_layer;
    mu_engine *ec, *eg;
    mu_engine_opts oc = {.backend = "cpu"}, og = {.backend = "cuda"};
    CK(mu_engine_new(m, &oc, &ec, &err));
    CK(mu_engine_new(m, &og, &eg, &err));
    if (ec->ubatch != eg->ubatch) {
        printf("FAIL chunk sizes differ: CPU %d, CUDA %d\n", ec->ubatch, eg->ubatch);
        return 1;
    }
    const int ub = eg->ubatch, n_ctx = NPOS + 16;
    int32_t p[NPOS], q[NEIGH];
    for (int i = 0; i < NPOS; i++) p[i] = (int32_t)((i * 7919 + 13) % V);
    for (int i = 0; i < NEIGH; i++) q[i] = (int32_t)((i * 31 + 5) % V);
    mu_session *cs, *cq, *gs, *gq, *rs, *rq; /* CPU, CUDA streaming, CUDA reference; prompt and neighbour */
    CK(mu_session_new(ec, n_ctx, &cs, &err));
    CK(mu_session_new(ec, n_ctx, &cq, &err));
    CK(mu_session_new(eg, n_ctx, &gs, &err));
    CK(mu_session_new(eg, n_ctx, &gq, &err));
    CK(mu_session_new(eg, n_ctx, &rs, &err));
    CK(mu_session_new(eg, n_ctx, &rq, &err));
    rec rc_, rg;
    if (rec_init(&rc_, cs, NULL, I) || rec_init(&rg, gs, eg, I)) {
        printf("FAIL out of memory\n");
        return 1;
    }

    /* 1. the neighbour's tokens first, the prompt's after them */
    mu_batch_item bc[2] = {{.s = cq, .tokens = q, .n_tokens = NEIGH},
                           {.s = cs, .tokens = p, .n_tokens = PROMPT, .on_layer = on_layer, .on_layer_user = &rc_}};
    mu_batch_item bg[2] = {{.s = gq, .tokens = q, .n_tokens = NEIGH},
                           {.s = gs, .tokens = p, .n_tokens = PROMPT, .on_layer = on_layer, .on_layer_user = &rg}};
    mu_batch_item br[2] = {{.s = rq, .tokens = q, .n_tokens = NEIGH}, {.s = rs, .tokens = p, .n_tokens = PROMPT}};
    const mu_gpu_stream_stats st0 = eg->gpu_stream;
    rg.open0 = st0.open;
    CK(mu_forward(ec, bc, 2, &err));
    CK(mu_forward(eg, bg, 2, &err));
    const mu_gpu_stream_stats st1 = eg->gpu_stream;
    CK(mu_forward(eg, br, 2, &err));
    int want_pos0[8], want_n[8], n_chunks = 0;
    for (int t = NEIGH, pos = 0; pos < PROMPT && n_chunks < 8; n_chunks++) { /* t: the batch index of pos */
        const int room = ub - t % ub, n = PROMPT - pos < room ? PROMPT - pos : room;
        want_pos0[n_chunks] = pos;
        want_n[n_chunks] = n;
        pos += n;
        t += n;
    }
    check_calls("prompt, CPU", &rc_, 0, want_pos0, want_n, n_chunks);
    check_calls("prompt, CUDA", &rg, 0, want_pos0, want_n, n_chunks);
    if (rc_.bad_read || rg.bad_read) FAILF("prompt: %d CPU and %d CUDA reads failed in callbacks", rc_.bad_read, rg.bad_read);
    compare_rows("prompt", &rg, &rc_, rs, 0, PROMPT);
    logits_equal("prompt, CUDA with and without streaming", mu_session_logits(gs, -1), mu_session_logits(rs, -1), V);
    logits_equal("neighbour, CUDA with and without streaming", mu_session_logits(gq, -1), mu_session_logits(rq, -1), V);
    const long calls1 = st1.calls - st0.calls, open1 = st1.open - st0.open, reads1 = st1.reads - st0.reads;
    if (calls1 != rg.calls || open1 != rg.calls || rg.not_open)
        FAILF("prompt: the engine counted %ld callbacks, %ld before the final sync (%d made; %d not counted open in time)",
              calls1, open1, rg.calls, rg.not_open);
    if (reads1 < rg.calls) /* a read over a ring's wrap is two */
        FAILF("prompt: %ld reads in callbacks took the second stream, want at least %d", reads1, rg.calls);
    printf("  prompt: %d callbacks in %d chunks, %ld while the device still computed the pass\n", rg.calls, n_chunks,
           st1.busy - st0.busy);

    /* 2. a short streaming step */
    const int c0c = rc_.calls, c0g = rg.calls;
    mu_batch_item sc = {.s = cs, .tokens = p + PROMPT, .n_tokens = STEP, .on_layer = on_layer, .on_layer_user = &rc_};
    mu_batch_item sg = {.s = gs, .tokens = p + PROMPT, .n_tokens = STEP, .on_layer = on_layer, .on_layer_user = &rg};
    mu_batch_item sr = {.s = rs, .tokens = p + PROMPT, .n_tokens = STEP};
    rg.open0 = eg->gpu_stream.open - rg.calls;
    const mu_gpu_stream_stats st2 = eg->gpu_stream;
    CK(mu_forward(ec, &sc, 1, &err));
    CK(mu_forward(eg, &sg, 1, &err));
    const mu_gpu_stream_stats st3 = eg->gpu_stream;
    CK(mu_forward(eg, &sr, 1, &err));
    const int sp0[1] = {PROMPT}, sn[1] = {STEP};
    check_calls("step, CPU", &rc_, c0c, sp0, sn, 1);
    check_calls("step, CUDA", &rg, c0g, sp0, sn, 1);
    if (rc_.bad_read || rg.bad_read) FAILF("step: %d CPU and %d CUDA reads failed in callbacks", rc_.bad_read, rg.bad_read);
    compare_rows("step", &rg, &rc_, rs, PROMPT, NPOS);
    logits_equal("step, CUDA with and without streaming", mu_session_logits(gs, -1), mu_session_logits(rs, -1), V);
    if (st3.open - st2.open != L || st3.calls - st2.calls != L || rg.not_open)
        FAILF("step: the engine counted %ld callbacks, %ld before the final sync, want %d", st3.calls - st2.calls,
              st3.open - st2.open, L);
    if (st3.reads - st2.reads < L) FAILF("step: %ld reads took the second stream, want at least %d", st3.reads - st2.reads, L);

    /* a plain forward after streaming ones: the same answer as the reference */
    int32_t tok = p[0];
    mu_batch_item pg = {.s = gs, .tokens = &tok, .n_tokens = 1}, pr = {.s = rs, .tokens = &tok, .n_tokens = 1};
    CK(mu_forward(eg, &pg, 1, &err));
    CK(mu_forward(eg, &pr, 1, &err));
    logits_equal("decode after streaming", mu_session_logits(gs, -1), mu_session_logits(rs, -1), V);
    if (eg->gpu_stream.calls != st3.calls) FAILF("a forward without callbacks streamed");

    printf("gpu stream (%s, %d layers): %s\n", argv[1], L, fails ? "FAIL" : "ok");
    mu_session_free(cs);
    mu_session_free(cq);
    mu_session_free(gs);
    mu_session_free(gq);
    mu_session_free(rs);
    mu_session_free(rq);
    free(rc_.k);
    free(rc_.v);
    free(rg.k);
    free(rg.v);
    mu_engine_free(ec);
    mu_engine_free(eg);
    mu_model_close(m);
    return fails ? 1 : 0;
}
