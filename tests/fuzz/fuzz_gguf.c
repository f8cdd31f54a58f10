/* fuzz_gguf.c: the GGUF reader, the muse-glimmer model binding (which
 * also builds the tokenizer) and the DFlash drafter binding over arbitrary
 * bytes. Every accessor is
 * exercised on accepted files; nothing may read outside the input. When the
 * input binds as a model, the tensor-data paths run too: mu_model_check,
 * then (small models only, to keep iterations fast) one forward pass of
 * two tokens on a 4-position context through the public API, whatever
 * garbage the weights hold (non-finite values included). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser.h"
#include "../../src/gguf/gguf.h"
#include "../../src/model/dflash.h"
#include "../../src/model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mu_gguf *g;
    mu_err err;
    if (mu_gguf_open_mem(data, size, &g, &err)) return 0;
    volatile uint64_t sink = 0;
    for (int i = 0; i < mu_gguf_n_kv(g); i++) {
        const char *k = mu_gguf_kv_name(g, i);
        int64_t v;
        double d;
        const char *s;
        size_t len;
        mu_gguf_arr a;
        if (!mu_gguf_get_i64(g, k, &v, NULL)) sink += (uint64_t)v;
        if (!mu_gguf_get_f64(g, k, &d, NULL)) sink += (uint64_t)(d == d);
        if (!mu_gguf_get_str(g, k, &s, &len, NULL) && len) sink += (uint8_t)s[len - 1];
        if (!mu_gguf_get_arr(g, k, &a, NULL) && a.n) {
            if (a.type == MU_GGUF_STR) {
                mu_gguf_arr_str(g, &a, a.n - 1, &s, &len);
                if (len) sink += (uint8_t)s[len - 1];
            } else {
                sink += (uint64_t)mu_gguf_arr_i64(&a, a.n - 1);
            }
        }
    }
    for (int i = 0; i < mu_gguf_n_tensors(g); i++) {
        const mu_gguf_tensor *t = mu_gguf_tensor_at(g, i);
        if (t->bytes) sink += ((const uint8_t *)t->data)[t->bytes - 1];
    }
    mu_dflash_model *dm;
    if (mu_dflash_bind(g, &dm, &err) == 0) { /* a drafter: every view in bounds */
        sink += (uint64_t)dm->n_layer + (uint64_t)dm->target_layers[dm->n_target - 1];
        sink += ((const uint8_t *)dm->fc->data)[dm->fc->bytes - 1];
        mu_dflash_close(dm); /* owns g now */
        (void)sink;
        return 0;
    }
    mu_model *m;
    if (mu_model_bind(g, &m, &err) == 0) {
        const mu_model_info *I = mu_model_get_info(m);
        sink += (uint64_t)I->n_layer;
        mu_err cerr;
        sink += (uint64_t)mu_model_check(m, 1 + (int)(size % 3), NULL, NULL, &cerr);
        mu_engine *e;
        mu_engine_opts eo = {.n_threads = 1, .kern = NULL};
        if ((uint64_t)I->n_layer * (uint64_t)I->n_embd * (uint64_t)(I->n_ff + I->n_embd) <= ((uint64_t)1 << 24) &&
            mu_engine_new(m, &eo, &e, &cerr) == 0) {
            mu_session *s;
            if (mu_session_new(e, 4, &s, &cerr) == 0) {
                const int32_t toks[2] = {0, I->n_vocab > 1 ? 1 : 0};
                mu_batch_item it = {.s = s, .tokens = toks, .n_tokens = 2, .all_logits = false};
                if (mu_forward(e, &it, 1, &cerr) == 0) {
                    const float *l = mu_session_logits(s, -1);
                    if (l) sink += (uint64_t)(l[0] == l[0]);
                }
                mu_session_free(s);
            }
            mu_engine_free(e);
        }
        mu_model_close(m); /* owns g now */
    } else {
        mu_gguf_close(g);
    }
    (void)sink;
    return 0;
}
