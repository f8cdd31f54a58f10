/* test_gpu_engine.c: the CUDA engine against the CPU engine on one model
 * (argv[1]), through the public API only:
 *  1. prefill of a long prompt (several chunks, past the sliding window)
 *     and 24 greedy decode steps: the logits of every step on both;
 *  2. four sessions in one batch (a prefill, then a decode step);
 *  3. KV rows moved GPU -> CPU and CPU -> GPU (mu_session_kv_read/write):
 *     the next logits equal the ones the session computed itself.
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

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
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
    mu_batch_item bc = {sc, prompt, n_prompt, false}, bg = {sg, prompt, n_prompt, false};
    CK(mu_forward(ec, &bc, 1, &err));
    CK(mu_forward(eg, &bg, 1, &err));
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
        bc = (mu_batch_item){sc, &tok, 1, false};
        bg = (mu_batch_item){sg, &tok, 1, false};
        CK(mu_forward(ec, &bc, 1, &err));
        CK(mu_forward(eg, &bg, 1, &err));
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
        bg4[j] = (mu_batch_item){g4[j], p4[j], 10 + 10 * j, j == 2};
        bc4[j] = (mu_batch_item){c4[j], p4[j], 10 + 10 * j, j == 2};
    }
    CK(mu_forward(eg, bg4, 4, &err));
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
        bg4[j] = (mu_batch_item){g4[j], &t4[j], 1, false};
        bc4[j] = (mu_batch_item){c4[j], &t4[j], 1, false};
    }
    CK(mu_forward(eg, bg4, 4, &err));
    CK(mu_forward(ec, bc4, 4, &err));
    for (int j = 0; j < 4; j++) {
        char what[64];
        snprintf(what, sizeof what, "batched decode, session %d", j);
        cmp(what, mu_session_logits(c4[j], -1), mu_session_logits(g4[j], -1), V);
        mu_session_free(g4[j]);
        mu_session_free(c4[j]);
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
    bc = (mu_batch_item){c2, &tok, 1, false};
    bg = (mu_batch_item){g2, &tok, 1, false};
    mu_batch_item bs = {sc, &tok, 1, false};
    CK(mu_forward(ec, &bc, 1, &err));
    CK(mu_forward(eg, &bg, 1, &err));
    CK(mu_forward(ec, &bs, 1, &err));
    cmp("GPU rows continued on the CPU", mu_session_logits(sc, -1), mu_session_logits(c2, -1), V);
    cmp("CPU rows continued on the GPU", mu_session_logits(sc, -1), mu_session_logits(g2, -1), V);
    printf("gpu engine (%s, %d positions): max |logit difference| %g, %s\n", argv[1], n_past + 1, worst_all,
           fails ? "FAIL" : "ok");
    free(buf);
    free(prompt);
    return fails ? 1 : 0;
}
