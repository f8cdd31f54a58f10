/* fuzz_tokenizer.c: libFuzzer harness for the tokenizer. Builds a small
 * byte-level BPE vocabulary in memory once (tests/tokenizer/mini_gguf.h),
 * then for each input: encodes it with special parsing off and on, checks
 * every id is in range, decodes the ids through the streaming detokenizer
 * and checks (1) strictly valid UTF-8 input comes back byte for byte (the
 * tokenizer is lossless on valid text), (2) MU_DETOK_VALID_UTF8 output is
 * valid UTF-8 whatever the input. Any violation aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gguf/gguf.h"
#include "../../src/tok/tokenizer.h"
#include "../tokenizer/mini_gguf.h"

static mu_tok *tok;

static mu_tok *get_tok(void) {
    if (tok) return tok;
    static mg_buf m;
    mg_init(&m);
    mg_default_keys(&m);
    mu_gguf *g;
    mu_err err;
    if (mu_gguf_open_mem(m.b, m.n, &g, &err) || mu_tok_new(g, &tok, &err)) abort();
    mu_gguf_close(g); /* the tokenizer keeps its own copies */
    return tok;
}

/* strict UTF-8 (no overlongs, surrogates, > U+10FFFF) */
static bool valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) k = 1;
        else if (c >= 0xC2 && c <= 0xDF) k = 2;
        else if (c >= 0xE0 && c <= 0xEF) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else return false;
        if (i + k > n) return false;
        for (size_t j = 1; j < k; j++) {
            uint8_t b = s[i + j];
            if (j == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
        }
        i += k;
    }
    return true;
}

static uint8_t *decode(const int32_t *ids, int n, int flags, size_t *out_n) {
    mu_detok *d;
    mu_err err;
    if (mu_detok_new(get_tok(), flags, &d, &err)) abort();
    size_t cap = 64, len = 0;
    uint8_t *buf = malloc(cap);
    for (int i = 0; i <= n; i++) {
        const char *o;
        size_t on;
        if (i < n) {
            if (mu_detok_push(d, ids[i], &o, &on, &err)) abort();
        } else {
            mu_detok_flush(d, &o, &on);
        }
        while (len + on > cap) buf = realloc(buf, cap *= 2);
        if (!buf) abort();
        memcpy(buf + len, o, on);
        len += on;
    }
    mu_detok_free(d);
    *out_n = len;
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mu_tok *t = get_tok();
    bool valid = valid_utf8(data, size);
    for (int sp = 0; sp < 2; sp++) {
        int32_t *ids;
        int n;
        mu_err err;
        if (mu_tok_encode(t, (const char *)data, size, sp, &ids, &n, &err)) abort();
        for (int i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= mu_tok_n_vocab(t)) abort();
        size_t bn;
        uint8_t *back = decode(ids, n, MU_DETOK_SPECIAL, &bn);
        if (valid && (bn != size || (size && memcmp(back, data, size)))) abort();
        free(back);
        back = decode(ids, n, MU_DETOK_VALID_UTF8, &bn);
        if (!valid_utf8(back, bn)) abort();
        free(back);
        free(ids);
    }
    return 0;
}
