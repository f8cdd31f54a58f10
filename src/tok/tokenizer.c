/* tokenizer.c: vocabulary, special tokens, BPE and detokenization.
 * Owns: loading the tokenizer.ggml.* keys into hash tables, llama.cpp's
 * load-time attribute fix-ups, special-token partitioning, GPT-2 byte
 * mapping, BPE by merge rank, token pieces and the streaming detokenizer.
 * Does not own the pre-split (tok_pretok.c) nor BOS policy (callers).
 *
 * Key design choice: reproduce llama.cpp's algorithm step by step (same
 * partition order, same merge queue order, same fallback for unknown
 * symbols) rather than a "cleaner" BPE, because ids must be identical; the
 * data structures are what make it fast: open-addressing hash tables for
 * token texts and merge pairs, a trie that tells which special tokens occur
 * in a text at all, and a piece cache built once at load. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/mem.h"
#include "tokenizer.h"

/* ---- hashing ---- */

static inline uint64_t hash_bytes(uint64_t h, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define HASH_SEED 0xcbf29ce484222325ull

static inline uint64_t hash_pair(const char *a, size_t na, const char *b, size_t nb) {
    uint64_t h = hash_bytes(HASH_SEED, a, na);
    h ^= (uint64_t)na * 0x9E3779B97F4A7C15ull; /* the split point is part of the key */
    h *= 0x100000001b3ull;
    return hash_bytes(h, b, nb);
}

static size_t table_cap(size_t n) {
    size_t c = 16;
    while (c < n * 2) c <<= 1;
    return c;
}

/* ---- the tokenizer ---- */

typedef struct {
    uint32_t l_off, l_len, r_off, r_len; /* into merge_arena */
    int32_t rank;
} merge_entry;

typedef struct {
    int32_t child, sibling; /* first child / next sibling node, -1 none */
    int32_t special;        /* index into specials[] ending here, -1 none */
    unsigned char byte;
} trie_node;

struct mu_tok {
    int n_vocab;
    char *text_arena; /* token texts, each NUL-terminated */
    uint32_t *text_off, *text_len;
    uint8_t *attr;
    size_t tok_cap;
    uint64_t *tok_slot; /* token hash: (hash high 32 bits << 32) | (id + 1), 0 empty */

    char *merge_arena;
    merge_entry *merges;
    size_t n_merges, merge_cap;
    uint64_t *merge_slot; /* merge hash: (hash high 32 bits << 32) | (index + 1), 0 empty */

    char *piece_arena; /* special=true pieces (llama.cpp's piece cache) */
    uint32_t *piece_off, *piece_len;
    size_t max_piece;

    int32_t *specials; /* CONTROL/USER_DEFINED/UNKNOWN ids, longest text first */
    int n_specials;
    trie_node *trie;
    int n_trie;

    int32_t byte_tok[256]; /* id of the one-byte text b, or -1 */
    char enc[256][2];      /* GPT-2 byte -> UTF-8 of its code point */
    uint8_t enc_len[256];
    int16_t cp_byte[324];  /* code point (< 0x144) -> byte, -1 when unmapped */

    int32_t bos, eos, eot, eom;
    bool add_bos;
};

/* GPT-2 byte-to-unicode: printable Latin-1 bytes map to themselves, the 68
 * others to U+0100.. in byte order. */
static void byte_map_init(mu_tok *t) {
    int n = 0;
    for (int i = 0; i < 324; i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = keep ? (uint32_t)b : (uint32_t)(256 + n++);
        t->enc_len[b] = (uint8_t)mu_tok_utf8_put(cp, t->enc[b]);
        t->cp_byte[cp] = (int16_t)b;
    }
}

/* Slots pack the upper hash bits with id + 1, so a probe that misses costs
 * one cache line and a hit compares text only when 32 more hash bits agree. */
#define SLOT_HI(h) ((h) & 0xffffffff00000000ull)

static int32_t tok_lookup(const mu_tok *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(HASH_SEED, s, n);
    size_t mask = t->tok_cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        uint64_t v = t->tok_slot[i];
        if (!v) return -1;
        if ((v & 0xffffffff00000000ull) != SLOT_HI(h)) continue;
        int32_t id = (int32_t)(uint32_t)v - 1;
        if (t->text_len[id] == n && !memcmp(t->text_arena + t->text_off[id], s, n)) return id;
    }
}

/* Inserts id; returns the id already holding the same text, or -1. */
static int32_t tok_insert(mu_tok *t, int32_t id) {
    const char *s = t->text_arena + t->text_off[id];
    size_t n = t->text_len[id];
    uint64_t h = hash_bytes(HASH_SEED, s, n);
    size_t mask = t->tok_cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        uint64_t v = t->tok_slot[i];
        if (!v) {
            t->tok_slot[i] = SLOT_HI(h) | (uint32_t)(id + 1);
            return -1;
        }
        if ((v & 0xffffffff00000000ull) != SLOT_HI(h)) continue;
        int32_t o = (int32_t)(uint32_t)v - 1;
        if (t->text_len[o] == n && !memcmp(t->text_arena + t->text_off[o], s, n)) return o;
    }
}

static int32_t merge_rank(const mu_tok *t, const char *a, size_t na, const char *b, size_t nb) {
    uint64_t h = hash_pair(a, na, b, nb);
    size_t mask = t->merge_cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        uint64_t v = t->merge_slot[i];
        if (!v) return -1;
        if ((v & 0xffffffff00000000ull) != SLOT_HI(h)) continue;
        const merge_entry *e = &t->merges[(uint32_t)v - 1];
        if (e->l_len == na && e->r_len == nb && !memcmp(t->merge_arena + e->l_off, a, na) &&
            !memcmp(t->merge_arena + e->r_off, b, nb))
            return e->rank;
    }
}

/* First rank wins for a repeated pair (llama.cpp: std::map::emplace). */
static void merge_insert(mu_tok *t, int32_t m) {
    const merge_entry *e = &t->merges[m];
    const char *a = t->merge_arena + e->l_off, *b = t->merge_arena + e->r_off;
    uint64_t h = hash_pair(a, e->l_len, b, e->r_len);
    size_t mask = t->merge_cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        uint64_t v = t->merge_slot[i];
        if (!v) {
            t->merge_slot[i] = SLOT_HI(h) | (uint32_t)(m + 1);
            return;
        }
        if ((v & 0xffffffff00000000ull) != SLOT_HI(h)) continue;
        const merge_entry *f = &t->merges[(uint32_t)v - 1];
        if (f->l_len == e->l_len && f->r_len == e->r_len && !memcmp(t->merge_arena + f->l_off, a, e->l_len) &&
            !memcmp(t->merge_arena + f->r_off, b, e->r_len))
            return;
    }
}

void mu_tok_free(mu_tok *t) {
    if (!t) return;
    free(t->text_arena);
    free(t->text_off);
    free(t->text_len);
    free(t->attr);
    free(t->tok_slot);
    free(t->merge_arena);
    free(t->merges);
    free(t->merge_slot);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->specials);
    free(t->trie);
    free(t);
}

/* ---- loading ---- */

static bool key_present(const mu_gguf *g, const char *key) { return mu_gguf_find(g, key) >= 0; }

/* Optional token-id key: -1 when absent; MU_E_MODEL when present but not an
 * id of this vocabulary (llama.cpp warns and keeps its default; a model we
 * would run with a wrong special id is refused instead). */
static int read_id_key(const mu_gguf *g, const char *key, int n_vocab, bool strict, int32_t *out, mu_err *err) {
    *out = -1;
    if (!key_present(g, key)) return 0;
    int64_t v;
    int rc = mu_gguf_get_i64(g, key, &v, err);
    if (rc) return rc;
    if (v < 0 || v >= n_vocab) {
        if (strict)
            return mu_fail(err, MU_E_MODEL, "tokenizer: %s out of range: %lld (vocab %d)", key, (long long)v, n_vocab);
        return 0; /* non-strict (FIM hints): ignored, as llama.cpp does */
    }
    *out = (int32_t)v;
    return 0;
}

static int load_tokens(mu_tok *t, const mu_gguf *g, mu_err *err) {
    mu_gguf_arr a;
    int rc = mu_gguf_get_arr(g, "tokenizer.ggml.tokens", &a, err);
    if (rc) return rc;
    if (a.type != MU_GGUF_STR)
        return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.tokens: expected strings, found type %u", a.type);
    if (a.n == 0 || a.n > INT32_MAX / 2)
        return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.tokens: bad count: %llu", (unsigned long long)a.n);
    int n = (int)a.n;
    t->n_vocab = n;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const char *s;
        size_t len;
        mu_gguf_arr_str(g, &a, (uint64_t)i, &s, &len);
        if (len > UINT32_MAX / 4)
            return mu_fail(err, MU_E_MODEL, "tokenizer: token %d: text too long: %zu bytes", i, len);
        total += (len ? len : 24) + 1; /* empty texts become "[EMPTY_<id>]" */
        if (total > UINT32_MAX)
            return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.tokens: texts too large");
    }
    t->text_arena = malloc(total);
    t->text_off = malloc((size_t)n * sizeof *t->text_off);
    t->text_len = malloc((size_t)n * sizeof *t->text_len);
    t->attr = malloc((size_t)n);
    t->tok_cap = table_cap((size_t)n);
    t->tok_slot = calloc(t->tok_cap, sizeof *t->tok_slot);
    if (!t->text_arena || !t->text_off || !t->text_len || !t->attr || !t->tok_slot)
        return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory for %d tokens", n);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const char *s;
        size_t len;
        mu_gguf_arr_str(g, &a, (uint64_t)i, &s, &len);
        t->text_off[i] = (uint32_t)off;
        if (len == 0) { /* llama.cpp: "[EMPTY_<id>]" */
            len = (size_t)sprintf(t->text_arena + off, "[EMPTY_%d]", i);
        } else {
            memcpy(t->text_arena + off, s, len);
            t->text_arena[off + len] = 0;
        }
        t->text_len[i] = (uint32_t)len;
        off += len + 1;
        int32_t dup = tok_insert(t, i);
        if (dup >= 0) /* llama.cpp asserts on this */
            return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.tokens: ids %d and %d have the same text", dup, i);
    }
    return 0;
}

static int load_types(mu_tok *t, const mu_gguf *g, mu_err *err) {
    int n = t->n_vocab;
    if (!key_present(g, "tokenizer.ggml.token_type")) {
        memset(t->attr, MU_TOK_ATTR_NORMAL, (size_t)n);
        return 0;
    }
    mu_gguf_arr a;
    int rc = mu_gguf_get_arr(g, "tokenizer.ggml.token_type", &a, err);
    if (rc) return rc;
    if (a.type != MU_GGUF_I32)
        return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.token_type: expected int32, found type %u", a.type);
    if (a.n < (uint64_t)n)
        return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.token_type: %llu entries for %d tokens",
                       (unsigned long long)a.n, n);
    for (int i = 0; i < n; i++) {
        switch (mu_gguf_arr_i64(&a, (uint64_t)i)) {
        case 1: t->attr[i] = MU_TOK_ATTR_NORMAL; break;
        case 2: t->attr[i] = MU_TOK_ATTR_UNKNOWN; break;
        case 3: t->attr[i] = MU_TOK_ATTR_CONTROL; break;
        case 4: t->attr[i] = MU_TOK_ATTR_USER_DEFINED; break;
        case 5: t->attr[i] = MU_TOK_ATTR_UNUSED; break;
        case 6: t->attr[i] = MU_TOK_ATTR_BYTE; break;
        default: t->attr[i] = MU_TOK_ATTR_UNDEFINED; break;
        }
    }
    return 0;
}

static int load_merges(mu_tok *t, const mu_gguf *g, mu_err *err) {
    mu_gguf_arr a;
    int rc = mu_gguf_get_arr(g, "tokenizer.ggml.merges", &a, err);
    if (rc) return rc;
    if (a.type != MU_GGUF_STR)
        return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.merges: expected strings, found type %u", a.type);
    if (a.n > INT32_MAX / 2)
        return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.merges: bad count: %llu", (unsigned long long)a.n);
    size_t total = 0;
    for (uint64_t i = 0; i < a.n; i++) {
        const char *s;
        size_t len;
        mu_gguf_arr_str(g, &a, i, &s, &len);
        total += len;
        if (total > UINT32_MAX)
            return mu_fail(err, MU_E_MODEL, "tokenizer: tokenizer.ggml.merges: texts too large");
    }
    t->merge_arena = malloc(total ? total : 1);
    t->merges = malloc((a.n ? a.n : 1) * sizeof *t->merges);
    t->merge_cap = table_cap((size_t)a.n);
    t->merge_slot = calloc(t->merge_cap, sizeof *t->merge_slot);
    if (!t->merge_arena || !t->merges || !t->merge_slot)
        return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory for %llu merges", (unsigned long long)a.n);
    size_t off = 0;
    for (uint64_t i = 0; i < a.n; i++) {
        const char *s;
        size_t len;
        mu_gguf_arr_str(g, &a, i, &s, &len);
        /* llama.cpp splits at the first space at position >= 1; without one
         * the pair is ("", "") which no symbol pair can match */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) continue;
        size_t nl = (size_t)(sp - s), nr = len - nl - 1;
        merge_entry *e = &t->merges[t->n_merges];
        memcpy(t->merge_arena + off, s, nl);
        e->l_off = (uint32_t)off, e->l_len = (uint32_t)nl;
        memcpy(t->merge_arena + off + nl, sp + 1, nr);
        e->r_off = (uint32_t)(off + nl), e->r_len = (uint32_t)nr;
        e->rank = (int32_t)i;
        off += nl + nr;
        merge_insert(t, (int32_t)t->n_merges);
        t->n_merges++;
    }
    return 0;
}

/* llama.cpp's load-time attribute fix-ups by token text (llama-vocab.cpp,
 * "auto-detect special tokens by text" and the gpt-oss hack). */
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
};
static const char *const EOT_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>",
};
typedef struct {
    const char *key, *key_old;
    const char *texts[9];
} fim_group;
static const fim_group FIM_GROUPS[] = {
    {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id",
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
      "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL}},
    {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id",
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
      "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL}},
    {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id",
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
      "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL}},
    {"tokenizer.ggml.fim_pad_token_id", NULL, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL}},
    {"tokenizer.ggml.fim_rep_token_id", NULL,
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL}},
    {"tokenizer.ggml.fim_sep_token_id", NULL, {"<|file_sep|>", NULL}},
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int32_t find_cstr(const mu_tok *t, const char *s) { return tok_lookup(t, s, strlen(s)); }

static int fix_attrs(mu_tok *t, const mu_gguf *g, mu_err *err) {
    /* eot: key, else the first candidate text present (llama.cpp scans an
     * unordered_map; with one candidate in the vocab the result is the same) */
    if (t->eot < 0)
        for (size_t i = 0; i < COUNT(EOT_TEXTS) && t->eot < 0; i++) t->eot = find_cstr(t, EOT_TEXTS[i]);
    if (t->eom < 0) t->eom = find_cstr(t, "<|eom_id|>");
    for (size_t gi = 0; gi < COUNT(FIM_GROUPS); gi++) {
        const fim_group *f = &FIM_GROUPS[gi];
        int32_t id = -1, id_old = -1;
        int rc = read_id_key(g, f->key, t->n_vocab, false, &id, err);
        if (!rc && f->key_old) rc = read_id_key(g, f->key_old, t->n_vocab, false, &id_old, err);
        if (rc) return rc;
        if (id >= 0 || id_old >= 0) continue;
        for (int k = 0; f->texts[k]; k++) {
            int32_t c = find_cstr(t, f->texts[k]);
            if (c >= 0) {
                t->attr[c] |= MU_TOK_ATTR_CONTROL;
                break;
            }
        }
    }
    bool has[COUNT(EOG_TEXTS)];
    for (size_t i = 0; i < COUNT(EOG_TEXTS); i++) {
        int32_t c = find_cstr(t, EOG_TEXTS[i]);
        has[i] = c >= 0;
        if (c >= 0) t->attr[c] |= MU_TOK_ATTR_CONTROL;
    }
    static const char *const ALWAYS_RENDER[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < COUNT(ALWAYS_RENDER); i++) {
        int32_t c = find_cstr(t, ALWAYS_RENDER[i]);
        if (c >= 0) t->attr[c] = MU_TOK_ATTR_USER_DEFINED;
    }
    /* o200k_harmony / solar-open: "<|end|>" is not end-of-generation */
    bool h_end = has[2], h_return = has[3], h_call = has[4] || has[6], h_flush = has[5];
    if ((h_return && h_call && h_end) || (h_call && h_flush && h_end))
        t->attr[find_cstr(t, "<|end|>")] = MU_TOK_ATTR_USER_DEFINED;
    /* gemma4: "</s>" is a normal token when "<|tool_response>" exists */
    if (has[9] && has[19]) t->attr[find_cstr(t, "</s>")] = MU_TOK_ATTR_NORMAL;
    return 0;
}

/* llama_decode_text: byte-level decode; code points outside the byte map
 * render as "[UNK_BYTE_0x<hex of its UTF-8>" + the whole token text + "]". */
static size_t decode_text(const mu_tok *t, const char *s, size_t n, char *out) {
    size_t w = 0;
    for (size_t off = 0; off < n;) {
        uint32_t cp = mu_tok_utf8_next(s, n, &off);
        if (cp < 324 && t->cp_byte[cp] >= 0) {
            if (out) out[w] = (char)t->cp_byte[cp];
            w++;
            continue;
        }
        char u[4];
        int k = mu_tok_utf8_put(cp, u);
        char tmp[32];
        int m = sprintf(tmp, "[UNK_BYTE_0x");
        for (int i = 0; i < k; i++) m += sprintf(tmp + m, "%02x", (unsigned char)u[i]);
        if (out) memcpy(out + w, tmp, (size_t)m);
        w += (size_t)m;
        if (out) memcpy(out + w, s, n);
        w += n;
        if (out) out[w] = ']';
        w++;
    }
    return w;
}

/* The special=true piece of token i (llama.cpp's token_to_piece cache). */
static int piece_of(const mu_tok *t, int i, char *out, size_t *n, mu_err *err) {
    const char *s = t->text_arena + t->text_off[i];
    size_t len = t->text_len[i];
    uint8_t a = t->attr[i];
    if (a & (MU_TOK_ATTR_UNKNOWN | MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_USER_DEFINED)) {
        if (out) memcpy(out, s, len);
        *n = len;
    } else if (a & MU_TOK_ATTR_NORMAL) {
        *n = decode_text(t, s, len, out);
    } else if (a & MU_TOK_ATTR_BYTE) {
        /* llama.cpp: strtol(text.substr(3, 2), 16), "<0xAB>" style */
        if (len < 3) return mu_fail(err, MU_E_MODEL, "tokenizer: byte token %d: text too short: %zu bytes", i, len);
        char hex[3] = {0};
        memcpy(hex, s + 3, len - 3 < 2 ? len - 3 : 2);
        if (out) out[0] = (char)strtol(hex, NULL, 16);
        *n = 1;
    } else {
        *n = 0;
    }
    return 0;
}

static int build_pieces(mu_tok *t, mu_err *err) {
    int n = t->n_vocab;
    t->piece_off = malloc((size_t)n * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)n * sizeof *t->piece_len);
    if (!t->piece_off || !t->piece_len) return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory for pieces");
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        int rc = piece_of(t, i, NULL, &len, err);
        if (rc) return rc;
        if (total + len > ((size_t)1 << 30)) /* only a hostile vocabulary gets near this */
            return mu_fail(err, MU_E_MODEL, "tokenizer: token pieces too large at token %d", i);
        t->piece_off[i] = (uint32_t)total;
        t->piece_len[i] = (uint32_t)len;
        if (len > t->max_piece) t->max_piece = len;
        total += len;
    }
    t->piece_arena = malloc(total ? total : 1);
    if (!t->piece_arena) return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory for pieces");
    for (int i = 0; i < n; i++) {
        size_t len;
        piece_of(t, i, t->piece_arena + t->piece_off[i], &len, err);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int trie_child(const mu_tok *t, int node, unsigned char b) {
    for (int c = t->trie[node].child; c >= 0; c = t->trie[c].sibling)
        if (t->trie[c].byte == b) return c;
    return -1;
}

static int build_specials(mu_tok *t, mu_err *err) {
    int n = t->n_vocab, k = 0;
    size_t total = 1;
    for (int i = 0; i < n; i++)
        if (t->attr[i] & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_USER_DEFINED | MU_TOK_ATTR_UNKNOWN)) {
            k++;
            total += t->text_len[i];
        }
    t->specials = malloc((size_t)(k ? k : 1) * sizeof *t->specials);
    if (total > INT32_MAX) return mu_fail(err, MU_E_MODEL, "tokenizer: special token texts too large");
    t->trie = malloc(total * sizeof *t->trie);
    if (!t->specials || !t->trie) return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory for special tokens");
    k = 0;
    for (int i = 0; i < n; i++)
        if (t->attr[i] & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_USER_DEFINED | MU_TOK_ATTR_UNKNOWN)) t->specials[k++] = i;
    t->n_specials = k;
    /* llama.cpp: std::sort by text length, longest first (not stable; ties
     * here go by id, see docs/tokenizer.md) */
    uint64_t *key = malloc((size_t)(k ? k : 1) * sizeof *key);
    if (!key) return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory for special tokens");
    for (int i = 0; i < k; i++)
        key[i] = ((uint64_t)(UINT32_MAX - t->text_len[t->specials[i]]) << 32) | (uint32_t)t->specials[i];
    qsort(key, (size_t)k, sizeof *key, cmp_u64);
    for (int i = 0; i < k; i++) t->specials[i] = (int32_t)(key[i] & 0xffffffffu);
    free(key);
    t->trie[0] = (trie_node){-1, -1, -1, 0};
    t->n_trie = 1;
    for (int si = 0; si < k; si++) {
        const unsigned char *s = (const unsigned char *)t->text_arena + t->text_off[t->specials[si]];
        int node = 0;
        for (uint32_t j = 0; j < t->text_len[t->specials[si]]; j++) {
            int c = trie_child(t, node, s[j]);
            if (c < 0) {
                c = t->n_trie++;
                t->trie[c] = (trie_node){-1, t->trie[node].child, -1, s[j]};
                t->trie[node].child = c;
            }
            node = c;
        }
        t->trie[node].special = si;
    }
    return 0;
}

int mu_tok_open(const char *path, mu_tok **out, mu_err *err) {
    mu_gguf *g;
    int rc = mu_gguf_open(path, &g, err);
    if (rc) return rc;
    rc = mu_tok_new(g, out, err); /* the tokenizer copies what it needs */
    mu_gguf_close(g);
    return rc;
}

int mu_tok_new(const mu_gguf *g, mu_tok **out, mu_err *err) {
    const char *s;
    size_t len;
    int rc = mu_gguf_get_str(g, "tokenizer.ggml.model", &s, &len, err);
    if (rc) return rc;
    if (len != 4 || memcmp(s, "gpt2", 4))
        return mu_fail(err, MU_E_UNSUPPORTED, "tokenizer: unsupported tokenizer.ggml.model: %.*s", (int)(len > 64 ? 64 : len), s);
    if (!key_present(g, "tokenizer.ggml.pre"))
        return mu_fail(err, MU_E_UNSUPPORTED, "tokenizer: tokenizer.ggml.pre missing (need llama4)");
    rc = mu_gguf_get_str(g, "tokenizer.ggml.pre", &s, &len, err);
    if (rc) return rc;
    if (!((len == 6 && !memcmp(s, "llama4", 6)) || (len == 6 && !memcmp(s, "gpt-4o", 6))))
        return mu_fail(err, MU_E_UNSUPPORTED, "tokenizer: unsupported tokenizer.ggml.pre: %.*s", (int)(len > 64 ? 64 : len), s);

    mu_tok *t = calloc(1, sizeof *t);
    if (!t) return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory");
    byte_map_init(t);
    if ((rc = load_tokens(t, g, err)) || (rc = load_types(t, g, err)) || (rc = load_merges(t, g, err))) goto fail;

    int32_t id;
    t->bos = t->n_vocab > 11 ? 11 : -1; /* llama.cpp's defaults for "gpt2" */
    t->eos = t->bos;
    if ((rc = read_id_key(g, "tokenizer.ggml.bos_token_id", t->n_vocab, true, &id, err))) goto fail;
    if (id >= 0) t->bos = id;
    if ((rc = read_id_key(g, "tokenizer.ggml.eos_token_id", t->n_vocab, true, &id, err))) goto fail;
    if (id >= 0) t->eos = id;
    if ((rc = read_id_key(g, "tokenizer.ggml.eot_token_id", t->n_vocab, true, &t->eot, err))) goto fail;
    if ((rc = read_id_key(g, "tokenizer.ggml.eom_token_id", t->n_vocab, true, &t->eom, err))) goto fail;
    t->add_bos = false;
    if (key_present(g, "tokenizer.ggml.add_bos_token") &&
        (rc = mu_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)))
        goto fail;
    if ((rc = fix_attrs(t, g, err))) goto fail;

    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_tok[b] = tok_lookup(t, &c, 1);
    }
    if ((rc = build_pieces(t, err)) || (rc = build_specials(t, err))) goto fail;
    *out = t;
    return 0;
fail:
    mu_tok_free(t);
    return rc;
}

/* ---- accessors ---- */

int mu_tok_n_vocab(const mu_tok *t) { return t->n_vocab; }
int32_t mu_tok_bos(const mu_tok *t) { return t->bos; }
int32_t mu_tok_eos(const mu_tok *t) { return t->eos; }
int32_t mu_tok_eot(const mu_tok *t) { return t->eot; }
int32_t mu_tok_eom(const mu_tok *t) { return t->eom; }
bool mu_tok_add_bos(const mu_tok *t) { return t->add_bos; }
size_t mu_tok_max_piece(const mu_tok *t) { return t->max_piece; }

int mu_tok_attr(const mu_tok *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->attr[id] : 0;
}

const char *mu_tok_text(const mu_tok *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->text_len[id];
    return t->text_arena + t->text_off[id];
}

void mu_tok_text_copy(const mu_tok *t, int32_t id, char *buf, size_t cap) {
    size_t n = 0;
    const char *s = mu_tok_text(t, id, &n);
    if (!cap) return;
    buf[0] = 0;
    if (s && n < cap) {
        memcpy(buf, s, n);
        buf[n] = 0;
    }
}

int32_t mu_tok_find_n(const mu_tok *t, const char *text, size_t len) {
    if (!text) return -1;
    return tok_lookup(t, text, len);
}
int32_t mu_tok_find(const mu_tok *t, const char *text) { return text ? tok_lookup(t, text, strlen(text)) : -1; }

const char *mu_tok_piece_view(const mu_tok *t, int32_t id, bool special, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (!special && (t->attr[id] & (MU_TOK_ATTR_UNKNOWN | MU_TOK_ATTR_CONTROL))) {
        *len = 0;
        return t->piece_arena;
    }
    *len = t->piece_len[id];
    return t->piece_arena + t->piece_off[id];
}

int mu_tok_piece(const mu_tok *t, int32_t id, bool special, char *buf, size_t cap) {
    size_t len;
    const char *p = mu_tok_piece_view(t, id, special, &len);
    if (!p) return 0;
    if (len > cap) return -(int)len;
    if (len) memcpy(buf, p, len);
    return (int)len;
}

/* ---- encoding ---- */

typedef struct {
    int32_t *v;
    size_t n, cap;
} ids_buf;

static bool ids_push(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t c = b->cap ? b->cap * 2 : 64;
        int32_t *v = realloc(b->v, c * sizeof *v);
        if (!v) return false;
        b->v = v, b->cap = c;
    }
    b->v[b->n++] = id;
    return true;
}

typedef struct {
    int32_t id; /* special token id, or -1 for raw text */
    size_t off, len;
} fragment;

typedef struct {
    int32_t rank, left, right;
    uint32_t ln, rn; /* symbol lengths when queued: stale if they changed */
} bigram;

/* Per-call scratch, grown as needed. */
typedef struct {
    char *word;
    size_t word_cap;
    uint32_t *sym_off, *sym_n;
    int32_t *prev, *next;
    size_t sym_cap;
    bigram *heap;
    size_t heap_n, heap_cap;
} bpe_scratch;

static inline bool bigram_before(const bigram *a, const bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static bool heap_push(bpe_scratch *s, bigram b) {
    if (s->heap_n == s->heap_cap) {
        size_t c = s->heap_cap ? s->heap_cap * 2 : 64;
        bigram *h = realloc(s->heap, c * sizeof *h);
        if (!h) return false;
        s->heap = h, s->heap_cap = c;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = b;
    return true;
}

static bigram heap_pop(bpe_scratch *s) {
    bigram top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static bool add_bigram(const mu_tok *t, bpe_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    int32_t rank = merge_rank(t, s->word + s->sym_off[l], s->sym_n[l], s->word + s->sym_off[r], s->sym_n[r]);
    if (rank < 0) return true;
    return heap_push(s, (bigram){rank, l, r, s->sym_n[l], s->sym_n[r]});
}

/* BPE over one byte-encoded word in s->word[0..wn); appends ids. */
static bool bpe_word(const mu_tok *t, bpe_scratch *s, size_t wn, ids_buf *out) {
    static const uint8_t utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    if (wn > s->sym_cap) {
        size_t c = wn * 2;
        uint32_t *o = realloc(s->sym_off, c * sizeof *o);
        if (o) s->sym_off = o;
        uint32_t *n = realloc(s->sym_n, c * sizeof *n);
        if (n) s->sym_n = n;
        int32_t *p = realloc(s->prev, c * sizeof *p);
        if (p) s->prev = p;
        int32_t *x = realloc(s->next, c * sizeof *x);
        if (x) s->next = x;
        if (!o || !n || !p || !x) return false;
        s->sym_cap = c;
    }
    int32_t ns = 0;
    for (size_t off = 0; off < wn;) {
        size_t cl = utf8_len[(unsigned char)s->word[off] >> 4];
        if (cl > wn - off) cl = wn - off;
        s->sym_off[ns] = (uint32_t)off;
        s->sym_n[ns] = (uint32_t)cl;
        s->prev[ns] = ns - 1;
        off += cl;
        s->next[ns] = off == wn ? -1 : ns + 1;
        ns++;
    }
    s->heap_n = 0;
    for (int32_t i = 1; i < ns; i++)
        if (!add_bigram(t, s, i - 1, i)) return false;
    while (s->heap_n) {
        bigram b = heap_pop(s);
        uint32_t ln = s->sym_n[b.left], rn = s->sym_n[b.right];
        /* stale: a side was merged away or grew since it was queued */
        if (ln == 0 || rn == 0 || ln != b.ln || rn != b.rn) continue;
        s->sym_n[b.left] = ln + rn;
        s->sym_n[b.right] = 0;
        s->next[b.left] = s->next[b.right];
        if (s->next[b.right] >= 0) s->prev[s->next[b.right]] = b.left;
        if (!add_bigram(t, s, s->prev[b.left], b.left) || !add_bigram(t, s, b.left, s->next[b.left])) return false;
    }
    for (int32_t i = 0; i < ns; i++) {
        if (s->sym_n[i] == 0) continue;
        const char *p = s->word + s->sym_off[i];
        int32_t id = tok_lookup(t, p, s->sym_n[i]);
        if (id >= 0) {
            if (!ids_push(out, id)) return false;
            continue;
        }
        /* llama.cpp: each byte of the byte-encoded symbol as a one-byte
         * token text; bytes without one are dropped */
        for (uint32_t j = 0; j < s->sym_n[i]; j++) {
            int32_t bt = t->byte_tok[(unsigned char)p[j]];
            if (bt >= 0 && !ids_push(out, bt)) return false;
        }
    }
    return true;
}

static int encode_raw(const mu_tok *t, const char *text, size_t len, bpe_scratch *s, ids_buf *out, mu_err *err) {
    uint32_t *cpts;
    size_t n_cpts, *words, n_words;
    int rc = mu_tok_pretok_split(text, len, &cpts, &n_cpts, &words, &n_words, err);
    if (rc) return rc;
    size_t c = 0;
    for (size_t w = 0; w < n_words; w++) {
        size_t need = words[w] * 8; /* <= 4 UTF-8 bytes per code point, <= 2 per byte */
        if (need > s->word_cap) {
            char *nw = realloc(s->word, need);
            if (!nw) goto nomem;
            s->word = nw, s->word_cap = need;
        }
        size_t wn = 0;
        for (size_t k = 0; k < words[w]; k++) {
            char u[4];
            int m = mu_tok_utf8_put(cpts[c++], u);
            for (int i = 0; i < m; i++) {
                unsigned char b = (unsigned char)u[i];
                memcpy(s->word + wn, t->enc[b], t->enc_len[b]);
                wn += t->enc_len[b];
            }
        }
        if (!bpe_word(t, s, wn, out)) goto nomem;
    }
    free(cpts);
    free(words);
    return 0;
nomem:
    free(cpts);
    free(words);
    return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory encoding %zu bytes", len);
}

/* Which specials occur anywhere in text (a special absent from the whole
 * text cannot occur in any fragment of it). */
static void specials_present(const mu_tok *t, const char *text, size_t len, bool *present) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t p = 0; p < len; p++) {
        int node = 0;
        for (size_t q = p; q < len; q++) {
            node = trie_child(t, node, s[q]);
            if (node < 0) break;
            if (t->trie[node].special >= 0) present[t->trie[node].special] = true;
        }
    }
}

/* llama.cpp's tokenizer_st_partition: for each special (longest first), split
 * every raw fragment at each leftmost non-overlapping occurrence. */
static bool frag_push(fragment **f, size_t *n, size_t *cap, fragment x) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        fragment *nf = realloc(*f, c * sizeof *nf);
        if (!nf) return false;
        *f = nf, *cap = c;
    }
    (*f)[(*n)++] = x;
    return true;
}

static int partition(const mu_tok *t, const char *text, size_t len, bool parse_special, fragment **frags,
                     size_t *n_frags, mu_err *err) {
    size_t n = 0, cap = 0, gn = 0, gcap = 0;
    fragment *f = NULL, *g = NULL;
    bool *present = t->n_specials ? calloc((size_t)t->n_specials, 1) : NULL;
    if ((t->n_specials && !present) || !frag_push(&f, &n, &cap, (fragment){-1, 0, len})) goto nomem;
    specials_present(t, text, len, present);
    for (int si = 0; si < t->n_specials; si++) {
        if (!present[si]) continue;
        int32_t id = t->specials[si];
        if (!parse_special && (t->attr[id] & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_UNKNOWN))) continue;
        const char *st = t->text_arena + t->text_off[id];
        size_t sl = t->text_len[id];
        gn = 0;
        for (size_t i = 0; i < n; i++) {
            if (f[i].id >= 0) {
                if (!frag_push(&g, &gn, &gcap, f[i])) goto nomem;
                continue;
            }
            size_t pos = f[i].off, end = f[i].off + f[i].len;
            const char *x;
            while ((x = memmem(text + pos, end - pos, st, sl))) {
                size_t mo = (size_t)(x - text);
                if (mo > pos && !frag_push(&g, &gn, &gcap, (fragment){-1, pos, mo - pos})) goto nomem;
                if (!frag_push(&g, &gn, &gcap, (fragment){id, mo, sl})) goto nomem;
                pos = mo + sl;
            }
            if (pos < end && !frag_push(&g, &gn, &gcap, (fragment){-1, pos, end - pos})) goto nomem;
        }
        fragment *tf = f;
        size_t tcap = cap;
        f = g, n = gn, cap = gcap;
        g = tf, gcap = tcap;
    }
    free(present);
    free(g);
    *frags = f;
    *n_frags = n;
    return 0;
nomem:
    free(f);
    free(g);
    free(present);
    return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory partitioning %zu bytes", len);
}

int mu_tok_encode(const mu_tok *t, const char *text, size_t len, bool parse_special, int32_t **ids, int *n_ids,
                  mu_err *err) {
    if (!text && len) return mu_fail(err, MU_E_ARG, "tokenizer: text is NULL");
    /* 256 MiB keeps every per-word offset (<= 8 bytes per input byte) in 32 bits */
    if (len > ((size_t)1 << 28)) return mu_fail(err, MU_E_ARG, "tokenizer: text too long: %zu bytes", len);
    *ids = NULL;
    *n_ids = 0;
    if (len == 0) return 0;
    fragment *f = NULL;
    size_t nf = 0;
    int rc = partition(t, text, len, parse_special, &f, &nf, err);
    if (rc) return rc;
    ids_buf out = {0};
    bpe_scratch s = {0};
    for (size_t i = 0; i < nf && !rc; i++) {
        if (f[i].id >= 0) {
            if (!ids_push(&out, f[i].id)) rc = mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory");
        } else {
            rc = encode_raw(t, text + f[i].off, f[i].len, &s, &out, err);
        }
    }
    free(f);
    free(s.word);
    free(s.sym_off);
    free(s.sym_n);
    free(s.prev);
    free(s.next);
    free(s.heap);
    if (rc || out.n > INT_MAX) {
        free(out.v);
        return rc ? rc : mu_fail(err, MU_E_NOMEM, "tokenizer: too many tokens");
    }
    if (out.n == 0) {
        free(out.v);
        out.v = NULL;
    }
    *ids = out.v;
    *n_ids = (int)out.n;
    return 0;
}

/* ---- streaming detokenizer ---- */

struct mu_detok {
    const mu_tok *t;
    int flags;
    unsigned char pend[4]; /* start of a character not yet complete */
    size_t n_pend;
    char *buf; /* output: 3 bytes per input byte at most (U+FFFD) */
    size_t cap;
};

int mu_detok_new(const mu_tok *t, int flags, mu_detok **out, mu_err *err) {
    mu_detok *d = calloc(1, sizeof *d);
    size_t cap;
    if (!d || !mu_mul_ok(t->max_piece + 8, 3, &cap) || !(d->buf = malloc(cap))) {
        free(d);
        return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory for detokenizer");
    }
    d->t = t;
    d->flags = flags;
    d->cap = cap;
    *out = d;
    return 0;
}

void mu_detok_free(mu_detok *d) {
    if (!d) return;
    free(d->buf);
    free(d);
}

void mu_detok_reset(mu_detok *d) { d->n_pend = 0; }

/* Length of the valid UTF-8 sequence at s[0..n): > 0 complete, 0 when s is
 * a proper prefix of a valid sequence (needs more bytes), -k when invalid,
 * k >= 1 being the maximal valid prefix (the unit one U+FFFD replaces).
 * Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
static int utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) return 0;
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -i;
    }
    return need;
}

/* Moves complete units of src[0..n) to d->buf; holds back a trailing proper
 * prefix of a character unless final. */
static size_t detok_emit(mu_detok *d, const unsigned char *src, size_t n, bool final, size_t w) {
    size_t i = 0;
    while (i < n) {
        int k = utf8_seq(src + i, n - i);
        if (k == 0 && !final) {
            memcpy(d->pend, src + i, n - i);
            d->n_pend = n - i;
            return w;
        }
        if (k > 0) {
            memcpy(d->buf + w, src + i, (size_t)k);
            w += (size_t)k;
            i += (size_t)k;
            continue;
        }
        /* invalid unit, or an unfinished one at the end of the stream */
        size_t u = k < 0 ? (size_t)-k : n - i;
        if (d->flags & MU_DETOK_VALID_UTF8) {
            memcpy(d->buf + w, "\xEF\xBF\xBD", 3);
            w += 3;
        } else {
            memcpy(d->buf + w, src + i, u);
            w += u;
        }
        i += u;
    }
    d->n_pend = 0;
    return w;
}

int mu_detok_push(mu_detok *d, int32_t id, const char **out, size_t *n_out, mu_err *err) {
    return mu_detok_push_ex(d, id, false, out, n_out, err);
}

int mu_detok_push_ex(mu_detok *d, int32_t id, bool special, const char **out, size_t *n_out, mu_err *err) {
    size_t len;
    const char *p = mu_tok_piece_view(d->t, id, special || (d->flags & MU_DETOK_SPECIAL) != 0, &len);
    if (!p) return mu_fail(err, MU_E_ARG, "tokenizer: token id out of range: %d", id);
    /* pending bytes (< 4) + the piece, in the tail of buf; output goes to
     * the front and never overtakes the input (1 byte in -> <= 3 out, and
     * the input starts 2/3 into the buffer) */
    size_t in_n = d->n_pend + len;
    unsigned char *in = (unsigned char *)d->buf + d->cap - in_n;
    memmove(in + d->n_pend, p, len);
    memcpy(in, d->pend, d->n_pend);
    size_t w = detok_emit(d, in, in_n, false, 0);
    *out = d->buf;
    *n_out = w;
    return 0;
}

void mu_detok_flush(mu_detok *d, const char **out, size_t *n_out) {
    unsigned char in[4];
    size_t n = d->n_pend;
    memcpy(in, d->pend, n);
    *n_out = detok_emit(d, in, n, true, 0);
    *out = d->buf;
    d->n_pend = 0;
}
