/* mini_gguf.h: builds small tokenizer-only GGUF v3 images in memory for the
 * tokenizer unit tests and fuzz harness (open them with mu_gguf_open_mem).
 * Header-only, test code: aborts on allocation failure.
 *
 * mg_vocab_default() makes a byte-level BPE vocabulary:
 *   ids 0..255   the 256 GPT-2 byte-mapped characters (id = byte value)
 *   256..        merges: "h e" "l l" "he ll" "hell o" "Ġ w" "o r" "Ġw or" "l d" "Ġwor ld" "Ġ Ġ"
 *                (one token per merge, in that order; ids MG_HE.. below)
 *   then         <|begin_of_text|> (control), <|eot|> (control), <|start|>
 *                (control, forced user-defined by llama.cpp's rule),
 *                <|message|> (control), <|ud|> (user-defined), <|ud|>x
 *                (control, longer than <|ud|>), <0x41> (byte), <|unused|>
 *                (unused), "€" (normal, not byte-mapped: renders as UNK_BYTE) */
#ifndef MU_TESTS_MINI_GGUF_H
#define MU_TESTS_MINI_GGUF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *b;
    size_t n, cap;
    uint64_t n_kv;
} mg_buf;

static void mg_put(mg_buf *m, const void *p, size_t n) {
    if (m->n + n > m->cap) {
        while (m->n + n > m->cap) m->cap = m->cap ? m->cap * 2 : 4096;
        m->b = realloc(m->b, m->cap);
        if (!m->b) abort();
    }
    memcpy(m->b + m->n, p, n);
    m->n += n;
}
static void mg_u32v(mg_buf *m, uint32_t v) { mg_put(m, &v, 4); }
static void mg_u64v(mg_buf *m, uint64_t v) { mg_put(m, &v, 8); }
static void mg_strv(mg_buf *m, const char *s, size_t n) {
    mg_u64v(m, n);
    mg_put(m, s, n);
}

static void mg_init(mg_buf *m) {
    memset(m, 0, sizeof *m);
    mg_put(m, "GGUF", 4);
    mg_u32v(m, 3);
    mg_u64v(m, 0); /* tensors */
    mg_u64v(m, 0); /* kv count, patched by mg_key */
}
static void mg_key(mg_buf *m, const char *key, uint32_t type) {
    mg_strv(m, key, strlen(key));
    mg_u32v(m, type);
    m->n_kv++;
    memcpy(m->b + 16, &m->n_kv, 8);
}
static void mg_str(mg_buf *m, const char *key, const char *s) {
    mg_key(m, key, 8);
    mg_strv(m, s, strlen(s));
}
static void mg_u32(mg_buf *m, const char *key, uint32_t v) {
    mg_key(m, key, 4);
    mg_u32v(m, v);
}
static void mg_bool(mg_buf *m, const char *key, bool v) {
    uint8_t b = v;
    mg_key(m, key, 7);
    mg_put(m, &b, 1);
}
/* strings with explicit lengths (lens NULL: NUL-terminated) */
static void mg_strarr(mg_buf *m, const char *key, const char *const *s, const size_t *lens, size_t n) {
    mg_key(m, key, 9);
    mg_u32v(m, 8);
    mg_u64v(m, n);
    for (size_t i = 0; i < n; i++) mg_strv(m, s[i], lens ? lens[i] : strlen(s[i]));
}
static void mg_arr(mg_buf *m, const char *key, uint32_t elem_type, const void *v, size_t elem_size, size_t n) {
    mg_key(m, key, 9);
    mg_u32v(m, elem_type);
    mg_u64v(m, n);
    mg_put(m, v, elem_size * n);
}

/* ---- the default test vocabulary ---- */

enum {
    MG_HE = 256, MG_LL, MG_HELL, MG_HELLO, MG_SP_W, MG_OR, MG_SP_WOR, MG_LD, MG_SP_WORLD, MG_SP_SP,
    MG_BOS, MG_EOT, MG_START, MG_MESSAGE, MG_UD, MG_UDX, MG_BYTE_A, MG_UNUSED, MG_EURO, MG_N_VOCAB
};

typedef struct {
    char text[MG_N_VOCAB][24];
    size_t len[MG_N_VOCAB];
    int32_t type[MG_N_VOCAB];
} mg_vocab;

static size_t mg_byte_utf8(unsigned b, char *out) {
    static int16_t cp_of[256];
    static bool init;
    if (!init) {
        int n = 0;
        for (int i = 0; i < 256; i++) {
            bool keep = (i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
            cp_of[i] = (int16_t)(keep ? i : 256 + n++);
        }
        init = true;
    }
    unsigned cp = (unsigned)cp_of[b];
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static void mg_vocab_fill(mg_vocab *v) {
    memset(v, 0, sizeof *v);
    for (unsigned b = 0; b < 256; b++) {
        v->len[b] = mg_byte_utf8(b, v->text[b]);
        v->type[b] = 1;
    }
    static const char *const rest[] = {
        "he", "ll", "hell", "hello", "\xc4\xa0w", "or", "\xc4\xa0wor", "ld", "\xc4\xa0world", "\xc4\xa0\xc4\xa0",
        "<|begin_of_text|>", "<|eot|>", "<|start|>", "<|message|>", "<|ud|>", "<|ud|>x", "<0x41>", "<|unused|>",
        "\xe2\x82\xac",
    };
    static const int32_t rest_type[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 4, 3, 6, 5, 1};
    for (int i = 256; i < MG_N_VOCAB; i++) {
        v->len[i] = strlen(rest[i - 256]);
        memcpy(v->text[i], rest[i - 256], v->len[i]);
        v->type[i] = rest_type[i - 256];
    }
}

static const char *const MG_MERGES[] = {
    "h e", "l l", "he ll", "hell o", "\xc4\xa0 w", "o r", "\xc4\xa0w or", "l d", "\xc4\xa0wor ld", "\xc4\xa0 \xc4\xa0",
};

/* Tokenizer keys of the default vocabulary, without the closing steps. */
static void mg_default_keys(mg_buf *m) {
    static mg_vocab v;
    mg_vocab_fill(&v);
    const char *texts[MG_N_VOCAB];
    for (int i = 0; i < MG_N_VOCAB; i++) texts[i] = v.text[i];
    mg_str(m, "general.architecture", "muse-glimmer");
    mg_str(m, "tokenizer.ggml.model", "gpt2");
    mg_str(m, "tokenizer.ggml.pre", "llama4");
    mg_strarr(m, "tokenizer.ggml.tokens", texts, v.len, MG_N_VOCAB);
    mg_arr(m, "tokenizer.ggml.token_type", 5, v.type, 4, MG_N_VOCAB);
    mg_strarr(m, "tokenizer.ggml.merges", MG_MERGES, NULL, sizeof MG_MERGES / sizeof MG_MERGES[0]);
    mg_u32(m, "tokenizer.ggml.bos_token_id", MG_BOS);
    mg_u32(m, "tokenizer.ggml.eos_token_id", MG_EOT);
    mg_u32(m, "tokenizer.ggml.eot_token_id", MG_EOT);
    mg_bool(m, "tokenizer.ggml.add_bos_token", true);
}

#endif
