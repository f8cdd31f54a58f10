/* tok_pretok.c: the llama4 (GPT-4o) pre-tokenizer, as llama.cpp runs it.
 * Owns: lenient UTF-8 decoding (llama.cpp's rules), the per-code-point
 * category collapse, and a hand-written matcher for the one regex this model
 * uses. Does not byte-encode or merge (tokenizer.c does).
 *
 * Key design choice: llama.cpp does not evaluate the Unicode regex. It
 * replaces every code point >= 128 by one byte standing for its category
 * (letter 0xD2, number 0xD1, whitespace 0x0B, anything else 0xD0..0xD5) and
 * runs std::regex (ECMAScript, first alternative wins, greedy with
 * backtracking) over that byte string, with \p{L} -> [\xD2A-Za-z] and
 * \p{N} -> [\xD10-9]. So a non-ASCII letter is both "upper" ([^a-z]) and
 * "lower" ([^A-Z]), combining marks are not letters, and \s is the C
 * locale's six ASCII spaces plus the 0x0B stand-in. The matcher below works
 * on those classes and reproduces the backtracking result of each
 * alternative in closed form (derivations next to each case). Categories
 * come from utf8proc; llama.cpp's White_Space set above U+007F is exactly
 * the Z* categories plus U+0085. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "../base/mem.h"
#include "tokenizer.h"

/* ---- UTF-8 (llama.cpp's unicode_cpt_from_utf8 / unicode_cpt_to_utf8) ---- */

uint32_t mu_tok_utf8_next(const char *text, size_t len, size_t *off) {
    const unsigned char *s = (const unsigned char *)text;
    size_t o = *off;
    unsigned c = s[o];
    if (!(c & 0x80)) {
        *off = o + 1;
        return c;
    }
    /* a sequence of n bytes needs n-1 continuation bytes; no check for
     * overlong forms or surrogates (llama.cpp accepts them) */
    int n = !(c & 0x40) ? 0 : !(c & 0x20) ? 2 : !(c & 0x10) ? 3 : !(c & 0x08) ? 4 : 0;
    if (n == 0 || o + (size_t)n > len) {
        *off = o + 1;
        return 0xFFFD;
    }
    for (int i = 1; i < n; i++)
        if ((s[o + i] & 0xC0) != 0x80) {
            *off = o + 1;
            return 0xFFFD;
        }
    uint32_t cp;
    if (n == 2) cp = ((c & 0x1Fu) << 6) | (s[o + 1] & 0x3Fu);
    else if (n == 3) cp = ((c & 0x0Fu) << 12) | ((s[o + 1] & 0x3Fu) << 6) | (s[o + 2] & 0x3Fu);
    else
        cp = ((c & 0x07u) << 18) | ((s[o + 1] & 0x3Fu) << 12) | ((s[o + 2] & 0x3Fu) << 6) |
             (s[o + 3] & 0x3Fu);
    *off = o + (size_t)n;
    /* llama.cpp throws when re-encoding these; we substitute (documented) */
    return cp > 0x10FFFF ? 0xFFFD : cp;
}

int mu_tok_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp <= 0x7F) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp <= 0x7FF) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp <= 0xFFFF) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    MU_ASSERT(cp <= 0x10FFFF);
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- category collapse ---- */

enum { C_LETTER = 0xD2, C_NUMBER = 0xD1, C_OTHER = 0xD0, C_SPACE = 0x0B };

static unsigned char collapse(uint32_t cp) {
    if (cp < 128) return (unsigned char)cp;
    if (cp == 0x85) return C_SPACE;
    /* CJK Unified Ideographs Extension I (Unicode 15.1, Lo): llama.cpp's
     * tables have it, utf8proc 2.8 (Unicode 15.0) does not yet. This is the
     * only difference over all code points (checked, docs/tokenizer.md). */
    if (cp >= 0x2EBF0 && cp <= 0x2EE5D) return C_LETTER;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return C_SPACE;
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return C_LETTER;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return C_NUMBER;
    default: return C_OTHER; /* marks, punctuation, symbols, other: one class here */
    }
}

/* ---- character classes of the collapsed regex ---- */

static inline bool is_lower(unsigned c) { return c >= 'a' && c <= 'z'; }
static inline bool is_upper(unsigned c) { return c >= 'A' && c <= 'Z'; }
static inline bool is_L(unsigned c) { return is_lower(c) || is_upper(c) || c == C_LETTER; }
static inline bool is_N(unsigned c) { return (c >= '0' && c <= '9') || c == C_NUMBER; }
/* std::regex \s in the C locale: space, \t \n \v \f \r */
static inline bool is_S(unsigned c) { return c == ' ' || (c >= 0x09 && c <= 0x0D); }
static inline bool is_RN(unsigned c) { return c == '\r' || c == '\n'; }
/* (?=[\p{L}])([^a-z]) and (?=[\p{L}])([^A-Z]) */
static inline bool is_Up(unsigned c) { return is_upper(c) || c == C_LETTER; }
static inline bool is_Lo(unsigned c) { return is_lower(c) || c == C_LETTER; }
/* [^\r\n\p{L}\p{N}] */
static inline bool is_P0(unsigned c) { return !is_RN(c) && !is_L(c) && !is_N(c); }
/* [^\s\p{L}\p{N}] */
static inline bool is_Q(unsigned c) { return !is_S(c) && !is_L(c) && !is_N(c); }

/* (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])? at e */
static size_t contraction(const unsigned char *c, size_t n, size_t e) {
    if (e + 1 >= n || c[e] != '\'') return e;
    unsigned a = c[e + 1] | 0x20; /* ASCII letters only; others never match below */
    if (!is_L(c[e + 1]) || c[e + 1] == C_LETTER) return e;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return e + 2;
    if (e + 2 < n && is_L(c[e + 2]) && c[e + 2] != C_LETTER) {
        unsigned b = c[e + 2] | 0x20;
        if ((a == 'r' || a == 'v') && b == 'e') return e + 3;
        if (a == 'l' && b == 'l') return e + 3;
    }
    return e;
}

/* Length of the match starting at p (always >= 1: every class starts one). */
static size_t match_at(const unsigned char *c, size_t n, size_t p) {
    unsigned c0 = c[p];

    /* Alternatives 1 and 2 (words):
     *   A1 = P0? Up* Lo+ C?     A2 = P0? Up+ Lo* C?
     * P0? is greedy; when it cannot be taken the word starts at p, when it
     * can, skipping it leaves a non-letter at p and both fail, so s is fixed.
     * A1: Up* takes the run [s,ue). If c[ue] is in Lo, Lo+ takes its run.
     * Otherwise backtracking gives Up* back one char at a time until Lo+ can
     * start at some j < ue, i.e. at the last non-ASCII letter of the run
     * (the only chars in both Up and Lo); Lo+ then takes exactly c[j] since
     * c[j+1] is uppercase ASCII or c[ue]. A2 only runs when A1 failed. */
    size_t s = is_P0(c0) ? p + 1 : p;
    if (s < n && is_L(c[s])) {
        size_t ue = s;
        while (ue < n && is_Up(c[ue])) ue++;
        if (ue < n && is_Lo(c[ue])) {
            size_t we = ue;
            while (we < n && is_Lo(c[we])) we++;
            return contraction(c, n, we) - p;
        }
        for (size_t j = ue; j > s; j--)
            if (c[j - 1] == C_LETTER) return contraction(c, n, j) - p;
        if (ue > s) return contraction(c, n, ue) - p; /* A2 with Lo* empty */
        /* s is a letter, so it is in Up or in Lo: unreachable */
    }

    /* A3: \p{N}{1,3} */
    if (is_N(c0)) {
        size_t e = p;
        while (e < n && e - p < 3 && is_N(c[e])) e++;
        return e - p;
    }

    /* A4: ' '?[^\s\p{L}\p{N}]+[\r\n/]* (taking the space only works when a
     * Q char follows; not taking it leaves the space, which is not Q) */
    size_t q = (c0 == ' ' && p + 1 < n && is_Q(c[p + 1])) ? p + 1 : is_Q(c0) ? p : n;
    if (q < n) {
        size_t e = q;
        while (e < n && is_Q(c[e])) e++;
        while (e < n && (is_RN(c[e]) || c[e] == '/')) e++;
        return e - p;
    }

    /* here c0 is whitespace */
    size_t se = p;
    while (se < n && is_S(c[se])) se++;
    /* A5: \s*[\r\n]+ : \s* gives back chars until [\r\n]+ can start; it ends
     * one past the last \r or \n of the run */
    for (size_t j = se; j > p; j--)
        if (is_RN(c[j - 1])) return j - p;
    /* A6: \s+(?!\S) : the whole run at the end of the text, else all but its
     * last char (followed by a space); fails for a single space before \S */
    if (se == n) return se - p;
    if (se - 1 > p) return se - 1 - p;
    /* A7: \s+ */
    return se - p;
}

int mu_tok_pretok_split(const char *text, size_t len, uint32_t **cpts_out, size_t *n_cpts,
                        size_t **words_out, size_t *n_words, mu_err *err) {
    if (!text && len) return mu_fail(err, MU_E_ARG, "tokenizer: text is NULL");
    size_t cap = len ? len : 1;
    uint32_t *cpts = malloc(cap * sizeof *cpts);
    unsigned char *cls = malloc(cap);
    size_t *words = malloc(cap * sizeof *words);
    if (!cpts || !cls || !words) {
        free(cpts), free(cls), free(words);
        return mu_fail(err, MU_E_NOMEM, "tokenizer: out of memory splitting %zu bytes", len);
    }
    size_t n = 0;
    for (size_t off = 0; off < len;) {
        uint32_t cp = mu_tok_utf8_next(text, len, &off);
        cpts[n] = cp;
        cls[n] = collapse(cp);
        n++;
    }
    size_t nw = 0;
    for (size_t p = 0; p < n;) {
        size_t m = match_at(cls, n, p);
        MU_ASSERT(m >= 1 && p + m <= n);
        words[nw++] = m;
        p += m;
    }
    free(cls);
    *cpts_out = cpts;
    *n_cpts = n;
    *words_out = words;
    *n_words = nw;
    return 0;
}
