/* fuzz_vocab_gen.c: BPE training (pre-split and merge loop) over arbitrary
 * bytes, as `muser gen --corpus FILE` feeds it. Checks the id layout
 * invariants: every id has a text, byte tokens first, merged tokens unique,
 * specials last, every merge joins two token texts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/base/err.h"
#include "../../src/synth/vocab_gen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 16)) return 0;
    mu_vocab_gen_params p = {400, -1, 1, (const char *)data, size, 0};
    mu_vocab_gen *v = NULL;
    mu_err err;
    if (mu_vocab_gen_build(&p, &v, &err)) abort();
    for (int i = 0; i < v->n_vocab; i++)
        if (!v->tokens[i] || !v->tokens[i][0]) abort();
    for (int i = 256; i < 256 + v->n_learned; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(v->tokens[i], v->tokens[j])) abort();
    for (int k = 0; k < MU_VOCAB_N_SPECIAL; k++)
        if (strcmp(v->tokens[v->n_vocab - MU_VOCAB_N_SPECIAL + k], mu_vocab_specials[k])) abort();
    for (int m = 0; m < v->n_merges; m++) {
        const char *sp = strchr(v->merges[m], ' ');
        if (!sp || sp == v->merges[m] || !sp[1] || strchr(sp + 1, ' ')) abort();
    }
    mu_vocab_gen_free(v);
    return 0;
}
