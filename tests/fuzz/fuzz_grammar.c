/* fuzz_grammar.c: the GBNF parser and matcher (src/gen/grammar.h).
 * Input: the grammar text, a NUL byte, then text to match up to the next NUL
 * (no NUL: the whole input is the grammar). Refusals must be clean one-line errors; an
 * accepted grammar matches the text fed whole and fed 3 bytes at a time,
 * which must agree when the text is valid UTF-8. Nothing may crash, leak, hang or read out of bounds. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gen/grammar.h"

/* Well-formed UTF-8 (llama.cpp's decoder reads invalid bytes differently
 * depending on where a token boundary falls, so only valid text must agree). */
static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if (((uint8_t)s[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0; /* repetitions expand: keep each run short */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    size_t gl = strlen(text);
    const char *in = text + gl + (gl < size ? 1 : 0);
    size_t n = gl < size ? size - gl - 1 : 0;
    n = strnlen(in, n); /* text ends at a NUL, as llama.cpp's pieces do (C strings) */
    mu_err err = {0};
    mu_grammar *g = NULL;
    int rc = mu_grammar_new(text, NULL, &g, &err);
    if (rc) {
        if (!err.msg[0] || strchr(err.msg, '\n') || strncmp(err.msg, "grammar: ", 9)) abort();
        free(text);
        return 0;
    }
    mu_gmatch *a = NULL, *b = NULL;
    if (mu_gmatch_new(g, NULL, NULL, &a, &err) == 0 && mu_gmatch_new(g, NULL, NULL, &b, &err) == 0) {
        int ra = mu_gmatch_accept_bytes(a, in, n, &err);
        int rb = 0;
        for (size_t i = 0; i < n && !rb; i += 3) rb = mu_gmatch_accept_bytes(b, in + i, n - i < 3 ? n - i : 3, &err);
        if (ra != MU_E_NOMEM && rb != MU_E_NOMEM && valid_utf8(in, n)) {
            if ((ra == 0) != (rb == 0)) abort();
            if (ra == 0 && mu_gmatch_complete(a) != mu_gmatch_complete(b)) abort();
        }
    }
    mu_gmatch_free(a);
    mu_gmatch_free(b);
    mu_grammar_unref(g);
    free(text);
    return 0;
}
