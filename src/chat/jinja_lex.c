/* jinja_lex.c: the Jinja2 lexer: template text -> tokens.
 * Owns: newline normalisation, the data/tag split, whitespace control
 * (`-` and `+` markers, trim_blocks, lstrip_blocks exactly as Jinja2's
 * lexer applies them), raw blocks, comments, and expression tokens with
 * Python string-literal escapes. Does not: parse.
 * Key choice: the whole token array is built up front (templates are a few
 * kB) so the parser can look ahead freely; end markers are ignored while
 * brackets are open, as Jinja2 does, so `{{ {'a': {'b': 1}} }}` lexes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

typedef struct lexer {
    jarena *a;
    const char *s;
    size_t n, pos;
    int line;
    jtok *toks;
    size_t nt, cap;
    mu_err *err;
    int rc;
} lexer;

static int lex_fail(lexer *L, int line, const char *msg, const char *detail) {
    if (L->rc == 0) {
        L->rc = MU_E_FORMAT;
        mu_fail(L->err, MU_E_FORMAT, "jinja: line %d: %s%s", line, msg, detail ? detail : "");
    }
    return L->rc;
}

static jtok *emit(lexer *L, int type, int line) {
    if (L->nt == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 256;
        jtok *nt = ja_alloc(L->a, nc * sizeof(jtok));
        if (!nt) {
            if (L->rc == 0) {
                L->rc = MU_E_NOMEM;
                mu_fail(L->err, MU_E_NOMEM, "jinja: template too large");
            }
            return NULL;
        }
        if (L->nt) memcpy(nt, L->toks, L->nt * sizeof(jtok));
        L->toks = nt;
        L->cap = nc;
    }
    jtok *t = &L->toks[L->nt++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = line;
    return t;
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Python's str.isspace for the code point starting at s (0 if not space), else its byte length */
static size_t py_space_at(const char *s, size_t n) {
    unsigned char c = (unsigned char)s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c < 0x80) return 0;
    size_t adv;
    int cp = u8_decode(s, n, &adv);
    if (cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
        cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000)
        return adv;
    return 0;
}

/* length of s[0..n) after Python's rstrip() */
static size_t py_rstrip_len(const char *s, size_t n) {
    size_t i = 0, keep = 0;
    while (i < n) {
        size_t k = py_space_at(s + i, n - i);
        if (k) i += k;
        else {
            size_t adv;
            u8_decode(s + i, n - i, &adv);
            i += adv;
            keep = i;
        }
    }
    return keep;
}

static size_t py_lstrip_adv(const char *s, size_t n) {
    size_t i = 0, k;
    while (i < n && (k = py_space_at(s + i, n - i))) i += k;
    return i;
}

static bool all_space(const char *s, size_t n) { return n > 0 && py_lstrip_adv(s, n) == n; }

static void emit_data(lexer *L, const char *s, size_t n, int line) {
    if (n == 0) return;
    jtok *t = emit(L, TK_DATA, line);
    if (!t) return;
    char *p = ja_alloc(L->a, n + 1);
    if (!p) {
        L->rc = MU_E_NOMEM;
        mu_fail(L->err, MU_E_NOMEM, "jinja: template too large");
        return;
    }
    memcpy(p, s, n);
    t->s = p;
    t->len = n;
}

/* Applies the start-of-tag stripping to the data before a tag and emits it. */
static void emit_text_before(lexer *L, size_t start, size_t end, char sign, bool is_var, bool line_starting) {
    const char *text = L->s + start;
    size_t n = end - start;
    if (sign == '-') {
        n = py_rstrip_len(text, n);
    } else if (sign != '+' && !is_var) { /* lstrip_blocks */
        size_t l_pos = 0;
        for (size_t i = n; i > 0; i--)
            if (text[i - 1] == '\n') {
                l_pos = i;
                break;
            }
        if ((l_pos > 0 || line_starting) && all_space(text + l_pos, n - l_pos)) n = l_pos;
    }
    emit_data(L, text, n, L->line);
}

static bool starts(lexer *L, size_t p, const char *lit) {
    size_t k = strlen(lit);
    return p + k <= L->n && memcmp(L->s + p, lit, k) == 0;
}

/* After a tag end at L->pos (just past the closing chars): whitespace control. */
static bool after_end(lexer *L, char sign, bool trim) {
    if (sign == '-') {
        size_t k = py_lstrip_adv(L->s + L->pos, L->n - L->pos);
        L->line += count_nl(L->s + L->pos, k);
        L->pos += k;
        return k > 0 && L->s[L->pos - 1] == '\n';
    }
    if (sign != '+' && trim && L->pos < L->n && L->s[L->pos] == '\n') {
        L->pos++;
        L->line++;
        return true;
    }
    return false;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Python "unicode-escape" decoding of a string literal body. */
static int lex_string(lexer *L, char q, int line) {
    size_t p = L->pos + 1;
    size_t cap = 0;
    while (p < L->n && L->s[p] != q) p += (L->s[p] == '\\' && p + 1 < L->n) ? 2 : 1;
    if (p >= L->n) return lex_fail(L, line, "unexpected end of string literal", NULL);
    cap = p - L->pos;
    char *o = ja_alloc(L->a, cap * 2 + 8);
    if (!o) return lex_fail(L, line, "template too large", NULL);
    size_t k = 0;
    for (size_t i = L->pos + 1; i < p; i++) {
        char c = L->s[i];
        if (c != '\\') {
            o[k++] = c;
            continue;
        }
        char e = L->s[++i];
        switch (e) {
        case '\n': break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'v': o[k++] = '\v'; break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            int cp = 0;
            for (int j = 0; j < nd; j++) {
                int h = (i + 1 + (size_t)j < p) ? hexval(L->s[i + 1 + j]) : -1;
                if (h < 0) return lex_fail(L, line, "truncated \\x/\\u escape in string literal", NULL);
                cp = cp * 16 + h;
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return lex_fail(L, line, "invalid code point in string literal escape", NULL);
            i += (size_t)nd;
            k += u8_encode(cp, o + k);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                int cp = e - '0', nd = 1;
                while (nd < 3 && i + 1 < p && L->s[i + 1] >= '0' && L->s[i + 1] <= '7') {
                    cp = cp * 8 + (L->s[++i] - '0');
                    nd++;
                }
                k += u8_encode(cp, o + k);
            } else {
                o[k++] = '\\';
                o[k++] = e;
            }
        }
    }
    o[k] = 0;
    jtok *t = emit(L, TK_STRING, line);
    if (!t) return L->rc;
    t->s = o;
    t->len = k;
    L->line += count_nl(L->s + L->pos, p + 1 - L->pos);
    L->pos = p + 1;
    return 0;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* digits with optional single underscores between them; returns end */
static size_t scan_digits(const char *s, size_t p, size_t n) {
    if (p >= n || !is_digit(s[p])) return p;
    p++;
    while (p < n) {
        if (is_digit(s[p])) p++;
        else if (s[p] == '_' && p + 1 < n && is_digit(s[p + 1])) p += 2;
        else break;
    }
    return p;
}

static int lex_number(lexer *L, int line) {
    const char *s = L->s;
    size_t p = L->pos, n = L->n;
    char buf[128];
    size_t k = 0;
    /* 0x / 0o / 0b */
    if (s[p] == '0' && p + 1 < n && strchr("xXoObB", s[p + 1])) {
        int base = (s[p + 1] | 32) == 'x' ? 16 : (s[p + 1] | 32) == 'o' ? 8 : 2;
        size_t q = p + 2;
        unsigned long long v = 0;
        int nd = 0;
        while (q < n) {
            if (s[q] == '_') { q++; continue; }
            int h = hexval(s[q]);
            if (h < 0 || h >= base) break;
            if (v > (0x7fffffffffffffffULL - (unsigned)h) / (unsigned)base)
                return lex_fail(L, line, "integer literal too large", NULL);
            v = v * (unsigned)base + (unsigned)h;
            q++;
            nd++;
        }
        if (nd) {
            jtok *t = emit(L, TK_INT, line);
            if (!t) return L->rc;
            t->i = (int64_t)v;
            L->pos = q;
            return 0;
        }
    }
    size_t q = scan_digits(s, p, n);
    bool is_float = false;
    size_t fe = q;
    if (fe + 1 < n && s[fe] == '.' && is_digit(s[fe + 1])) {
        fe = scan_digits(s, fe + 1, n);
        is_float = true;
    }
    if (fe < n && (s[fe] == 'e' || s[fe] == 'E')) {
        size_t x = fe + 1;
        if (x < n && (s[x] == '+' || s[x] == '-')) x++;
        size_t y = scan_digits(s, x, n);
        if (y > x) {
            fe = y;
            is_float = true;
        }
    }
    size_t end = is_float ? fe : q;
    for (size_t i = p; i < end && k < sizeof buf - 1; i++)
        if (s[i] != '_') buf[k++] = s[i];
    buf[k] = 0;
    if (end - p >= sizeof buf - 1) return lex_fail(L, line, "number literal too long", NULL);
    jtok *t = emit(L, is_float ? TK_FLOAT : TK_INT, line);
    if (!t) return L->rc;
    if (is_float) t->f = strtod(buf, NULL);
    else {
        char *ep;
        errno = 0;
        long long v = strtoll(buf, &ep, 10);
        if (errno) return lex_fail(L, line, "integer literal too large", NULL);
        t->i = v;
    }
    L->pos = end;
    return 0;
}

static const struct { const char *s; int op; } OPS[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {">=", OP_GE}, {"<=", OP_LE},
    {"+", OP_ADD}, {"-", OP_SUB}, {"/", OP_DIV}, {"*", OP_MUL}, {"%", OP_MOD}, {"~", OP_TILDE},
    {"<", OP_LT}, {">", OP_GT}, {"=", OP_ASSIGN}, {".", OP_DOT}, {",", OP_COMMA}, {":", OP_COLON},
    {"|", OP_PIPE}, {"(", OP_LPAREN}, {")", OP_RPAREN}, {"[", OP_LBRACKET}, {"]", OP_RBRACKET},
    {"{", OP_LBRACE}, {"}", OP_RBRACE}, {";", OP_SEMI},
};

/* Lexes the inside of a {{ }} or {% %} tag; returns with L->pos past the end
 * marker. *line_starting is set from the end marker's match. */
static int lex_tag(lexer *L, bool is_var, bool *line_starting) {
    int depth = 0;
    char stack[64];
    int start_line = L->line;
    for (;;) {
        if (L->rc) return L->rc;
        if (L->pos >= L->n)
            return lex_fail(L, start_line, is_var ? "unexpected end of template, expected '}}'"
                                                  : "unexpected end of template, expected '%}'",
                            NULL);
        const char *s = L->s;
        size_t p = L->pos;
        if (depth == 0) {
            char sign = 0;
            size_t q = p;
            if (s[q] == '-' || s[q] == '+') sign = s[q++];
            const char *end = is_var ? "}}" : "%}";
            if (starts(L, q, end) && !(is_var && sign == '+')) {
                jtok *t = emit(L, is_var ? TK_VAR_END : TK_BLOCK_END, L->line);
                if (!t) return L->rc;
                L->pos = q + 2;
                *line_starting = after_end(L, sign, !is_var);
                return 0;
            }
        }
        size_t ws = 0;
        while (p + ws < L->n && (s[p + ws] == ' ' || s[p + ws] == '\t' || s[p + ws] == '\n' ||
                                 s[p + ws] == '\r' || s[p + ws] == '\f' || s[p + ws] == '\v'))
            ws++;
        if (ws) {
            L->line += count_nl(s + p, ws);
            L->pos += ws;
            continue;
        }
        char c = s[p];
        if (c == '\'' || c == '"') {
            if (lex_string(L, c, L->line)) return L->rc;
            continue;
        }
        if (is_digit(c)) {
            if (lex_number(L, L->line)) return L->rc;
            continue;
        }
        if (is_ident0(c)) {
            size_t q = p + 1;
            while (q < L->n && (is_ident0(s[q]) || is_digit(s[q]))) q++;
            jtok *t = emit(L, TK_NAME, L->line);
            if (!t) return L->rc;
            char *nm = ja_alloc(L->a, q - p + 1);
            if (!nm) return lex_fail(L, L->line, "template too large", NULL);
            memcpy(nm, s + p, q - p);
            t->s = nm;
            t->len = q - p;
            L->pos = q;
            continue;
        }
        int op = 0;
        size_t oplen = 0;
        for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
            if (starts(L, p, OPS[i].s)) {
                op = OPS[i].op;
                oplen = strlen(OPS[i].s);
                break;
            }
        if (!op) {
            char d[16];
            snprintf(d, sizeof d, "'%c'", (c >= 0x20 && c < 0x7f) ? c : '?');
            return lex_fail(L, L->line, "unexpected char ", d);
        }
        if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
            if (depth >= (int)sizeof stack) return lex_fail(L, L->line, "brackets nested too deeply", NULL);
            stack[depth++] = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : '}';
        } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
            char want = op == OP_RPAREN ? ')' : op == OP_RBRACKET ? ']' : '}';
            if (depth == 0) {
                char d[8];
                snprintf(d, sizeof d, "'%c'", want);
                return lex_fail(L, L->line, "unexpected ", d);
            }
            if (stack[depth - 1] != want) {
                char d[32];
                snprintf(d, sizeof d, "'%c', expected '%c'", want, stack[depth - 1]);
                return lex_fail(L, L->line, "unexpected ", d);
            }
            depth--;
        }
        jtok *t = emit(L, TK_OP, L->line);
        if (!t) return L->rc;
        t->op = op;
        L->pos += oplen;
    }
}

/* {% raw %} ... {% endraw %}: returns true when a raw block starts at p. */
static bool raw_begin(lexer *L, size_t p, size_t *after, char *end_sign) {
    size_t q = p + 2;
    if (q < L->n && (L->s[q] == '-' || L->s[q] == '+')) q++;
    while (q < L->n && strchr(" \t\n\r\f\v", L->s[q])) q++;
    if (!starts(L, q, "raw")) return false;
    q += 3;
    while (q < L->n && strchr(" \t\n\r\f\v", L->s[q])) q++;
    *end_sign = 0;
    if (q < L->n && L->s[q] == '-') {
        *end_sign = '-';
        q++;
    }
    if (!starts(L, q, "%}")) return false;
    *after = q + 2;
    return true;
}

/* finds `{%[-+]? endraw [-+]?%}` from p; returns its start or n */
static size_t raw_end(lexer *L, size_t p, size_t *tag_end, char *open_sign, char *close_sign) {
    for (size_t i = p; i + 1 < L->n; i++) {
        if (L->s[i] != '{' || L->s[i + 1] != '%') continue;
        size_t q = i + 2;
        *open_sign = 0;
        if (q < L->n && (L->s[q] == '-' || L->s[q] == '+')) *open_sign = L->s[q++];
        while (q < L->n && strchr(" \t\n\r\f\v", L->s[q])) q++;
        if (!starts(L, q, "endraw")) continue;
        q += 6;
        while (q < L->n && strchr(" \t\n\r\f\v", L->s[q])) q++;
        *close_sign = 0;
        if (q < L->n && (L->s[q] == '-' || L->s[q] == '+')) *close_sign = L->s[q++];
        if (!starts(L, q, "%}")) continue;
        *tag_end = q + 2;
        return i;
    }
    return L->n;
}

int jinja_lex(jarena *a, const char *src, size_t len, jlex_out *out, mu_err *err) {
    /* newline normalisation: \r\n and \r become \n; one trailing newline is dropped */
    char *s = ja_alloc(a, len + 1);
    if (!s) return mu_fail(err, MU_E_NOMEM, "jinja: template too large: %zu bytes", len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else
            s[n++] = src[i];
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;

    lexer L = {.a = a, .s = s, .n = n, .line = 1, .err = err};
    bool line_starting = true;
    while (L.pos < L.n && L.rc == 0) {
        /* earliest tag start */
        size_t p = L.pos;
        const char *hit = NULL;
        while (p + 1 < L.n) {
            hit = memchr(L.s + p, '{', L.n - p - 1);
            if (!hit) break;
            p = (size_t)(hit - L.s);
            char c = L.s[p + 1];
            if (c == '{' || c == '%' || c == '#') break;
            p++;
            hit = NULL;
        }
        if (!hit) {
            emit_data(&L, L.s + L.pos, L.n - L.pos, L.line);
            break;
        }
        char kind = L.s[p + 1];
        char sign = (p + 2 < L.n && (L.s[p + 2] == '-' || L.s[p + 2] == '+')) ? L.s[p + 2] : 0;
        emit_text_before(&L, L.pos, p, sign, kind == '{', line_starting);
        L.line += count_nl(L.s + L.pos, p - L.pos);
        int tag_line = L.line;
        size_t after;
        char rsign;
        if (kind == '%' && raw_begin(&L, p, &after, &rsign)) {
            L.line += count_nl(L.s + p, after - p);
            L.pos = after;
            after_end(&L, rsign, false);
            size_t tag_end;
            char osign, csign;
            size_t e = raw_end(&L, L.pos, &tag_end, &osign, &csign);
            if (e >= L.n) return lex_fail(&L, tag_line, "missing end of raw directive", NULL);
            emit_text_before(&L, L.pos, e, osign, false, false);
            L.line += count_nl(L.s + L.pos, tag_end - L.pos);
            L.pos = tag_end;
            line_starting = after_end(&L, csign, true);
            continue;
        }
        if (kind == '#') {
            size_t q = p + 2;
            size_t e = 0;
            bool found = false;
            for (; q + 1 < L.n; q++)
                if (L.s[q] == '#' && L.s[q + 1] == '}') {
                    found = true;
                    break;
                }
            if (!found) return lex_fail(&L, tag_line, "missing end of comment tag", NULL);
            char csign = 0;
            if (q > p + 2 && (L.s[q - 1] == '-' || L.s[q - 1] == '+')) csign = L.s[q - 1];
            e = q + 2;
            L.line += count_nl(L.s + p, e - p);
            L.pos = e;
            line_starting = after_end(&L, csign, true);
            continue;
        }
        jtok *t = emit(&L, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, tag_line);
        if (!t) break;
        L.pos = p + 2 + (sign ? 1 : 0);
        if (lex_tag(&L, kind == '{', &line_starting)) break;
    }
    if (L.rc) return L.rc;
    jtok *t = emit(&L, TK_EOF, L.line);
    if (!t) return L.rc;
    out->toks = L.toks;
    out->n = L.nt;
    return 0;
}
