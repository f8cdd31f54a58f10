/* grammar.c: GBNF grammars (grammar.h), step for step as llama.cpp's
 * llama-grammar.cpp parses and applies them, so a grammar allows exactly
 * the tokens llama.cpp allows.
 * Parser: recursive descent over the NUL-terminated text (llama.cpp reads
 * the request string as a C string: text after a NUL byte is not seen);
 * symbols keep llama.cpp's ids (names in order of first mention, groups and
 * repetitions get generated names `<rule>_<id>`), so the rules are
 * llama.cpp's element for element (tests/unit/test_grammar.c compares
 * them). Errors are one line with the line and column of the offending
 * text. Limits llama.cpp does not have (a request must not exhaust the
 * server): text, elements after expansion, group nesting, live stacks.
 * Matcher: a set of stacks of element indices (llama_grammar_stacks); a
 * stack's top is always a terminal (char class or token). Stacks are
 * compared by content, as llama.cpp's std::find does.
 * Design: the rules live in one element array (each rule ends with END),
 * a stack holds indices into it; the code points of every token's piece
 * (decoded from a clean UTF-8 state) are computed once per matcher, the
 * decode from a partial character per call. */
#include "grammar.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tok/tokenizer.h"
#include "regex.h"

#define MAX_REPETITION_THRESHOLD 2000

/* ---- the compiled grammar ---------------------------------------------- */

struct mu_grammar {
    atomic_int refs;
    mu_gelem *el;       /* every rule, each ending with END */
    size_t n_el;
    uint32_t *rule_off; /* [n_rules] start of rule i in el */
    uint32_t *rule_len; /* [n_rules] elements of rule i, END included */
    uint32_t n_rules;
    uint32_t root;
    char **sym_name;    /* symbols: names and ids (llama.cpp's symbol_ids) */
    uint32_t *sym_id;
    size_t n_sym;
    /* llama.cpp's lazy grammar: inactive until one of these appears in
     * the output (mu_grammar_set_lazy) */
    bool lazy;
    int32_t *trig_tok;
    int n_trig_tok;
    mu_re **trig_re;
    int n_trig_re;
};

/* ---- parser state ------------------------------------------------------ */

typedef struct {
    mu_gelem *v;
    size_t n, cap;
} gvec;

typedef struct {
    const mu_tok *tok;
    const char *src;
    mu_err *err;
    bool failed;
    int rc;
    /* symbols: open-addressing table over names */
    char **names;
    uint32_t *ids;
    size_t n_sym, cap_sym;
    size_t *slot; /* [cap_tab] index into names + 1, 0 empty */
    size_t cap_tab;
    /* rules by id; n == 0: undefined */
    gvec *rules;
    size_t n_rules, cap_rules;
    size_t n_el; /* elements in all rules (the size limit) */
    int depth;
} gp;

/* Line and column of p in the source, and up to 24 bytes of it. */
static bool pfail(gp *P, const char *p, const char *what) {
    if (P->failed) return false;
    int line = 1, col = 1;
    for (const char *q = P->src; q < p; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    char near[80];
    size_t k = 0;
    for (const char *q = p; *q && *q != '\n' && *q != '\r' && k < 24; q++) {
        unsigned char c = (unsigned char)*q;
        near[k++] = c >= 0x20 && c != 0x7f && c != '"' && c != '\\' ? (char)c : '?';
    }
    near[k] = 0;
    if (*p) P->rc = mu_fail(P->err, MU_E_ARG, "grammar: %s at line %d column %d: \"%s\"", what, line, col, near);
    else P->rc = mu_fail(P->err, MU_E_ARG, "grammar: %s at line %d column %d: end of input", what, line, col);
    P->failed = true;
    return false;
}

static bool pnomem(gp *P) {
    if (!P->failed) P->rc = mu_fail(P->err, MU_E_NOMEM, "grammar: out of memory");
    P->failed = true;
    return false;
}

static bool gvec_push(gp *P, gvec *r, uint32_t type, uint32_t value) {
    if (P->n_el >= MU_GRAMMAR_MAX_ELEMS) {
        if (!P->failed)
            P->rc = mu_fail(P->err, MU_E_ARG, "grammar: too large: more than %u rule elements after expanding repetitions",
                    MU_GRAMMAR_MAX_ELEMS);
        P->failed = true;
        return false;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        mu_gelem *v = realloc(r->v, cap * sizeof *v);
        if (!v) return pnomem(P);
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = (mu_gelem){type, value};
    P->n_el++;
    return true;
}

static bool gvec_append(gp *P, gvec *r, const mu_gelem *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!gvec_push(P, r, v[i].type, v[i].value)) return false;
    return true;
}

static void gvec_resize(gp *P, gvec *r, size_t n) {
    if (n < r->n) {
        P->n_el -= r->n - n;
        r->n = n;
    }
}

static uint64_t hash_name(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* Index of the name in names[], or -1. */
static long sym_find(const gp *P, const char *s, size_t n) {
    if (!P->cap_tab) return -1;
    for (size_t h = hash_name(s, n) & (P->cap_tab - 1);; h = (h + 1) & (P->cap_tab - 1)) {
        size_t k = P->slot[h];
        if (!k) return -1;
        if (strlen(P->names[k - 1]) == n && !memcmp(P->names[k - 1], s, n)) return (long)(k - 1);
    }
}

/* Adds a name that is not there yet with id. */
static bool sym_insert(gp *P, const char *s, size_t n, uint32_t id) {
    if ((P->n_sym + 1) * 2 > P->cap_tab) {
        size_t cap = P->cap_tab ? P->cap_tab * 2 : 64;
        size_t *slot = calloc(cap, sizeof *slot);
        if (!slot) return pnomem(P);
        for (size_t i = 0; i < P->n_sym; i++) {
            size_t h = hash_name(P->names[i], strlen(P->names[i])) & (cap - 1);
            while (slot[h]) h = (h + 1) & (cap - 1);
            slot[h] = i + 1;
        }
        free(P->slot);
        P->slot = slot;
        P->cap_tab = cap;
    }
    if (P->n_sym == P->cap_sym) {
        size_t cap = P->cap_sym ? P->cap_sym * 2 : 32;
        char **nm = realloc(P->names, cap * sizeof *nm);
        if (!nm) return pnomem(P);
        P->names = nm;
        uint32_t *ids = realloc(P->ids, cap * sizeof *ids);
        if (!ids) return pnomem(P);
        P->ids = ids;
        P->cap_sym = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return pnomem(P);
    memcpy(c, s, n);
    c[n] = 0;
    P->names[P->n_sym] = c;
    P->ids[P->n_sym] = id;
    size_t h = hash_name(s, n) & (P->cap_tab - 1);
    while (P->slot[h]) h = (h + 1) & (P->cap_tab - 1);
    P->slot[h] = ++P->n_sym;
    return true;
}

/* llama_grammar_parser::get_symbol_id: the name's id, a new one (the
 * symbol count) for a new name. UINT32_MAX on failure. */
static uint32_t get_symbol_id(gp *P, const char *s, size_t n) {
    long k = sym_find(P, s, n);
    if (k >= 0) return P->ids[k];
    uint32_t id = (uint32_t)P->n_sym;
    return sym_insert(P, s, n, id) ? id : UINT32_MAX;
}

/* llama_grammar_parser::generate_symbol_id: "<base>_<count>" := count,
 * overwriting a symbol of that name (as std::map's operator[] does). */
static uint32_t generate_symbol_id(gp *P, const char *base) {
    uint32_t id = (uint32_t)P->n_sym;
    char name[400];
    int n = snprintf(name, sizeof name, "%s_%u", base, id);
    if (n < 0 || (size_t)n >= sizeof name) n = (int)sizeof name - 1;
    long k = sym_find(P, name, (size_t)n);
    if (k >= 0) {
        P->ids[k] = id;
        return id;
    }
    return sym_insert(P, name, (size_t)n, id) ? id : UINT32_MAX;
}

static bool add_rule(gp *P, uint32_t id, gvec *rule) {
    if (id >= P->cap_rules) {
        size_t cap = P->cap_rules ? P->cap_rules : 16;
        while (cap <= id) cap *= 2;
        gvec *r = realloc(P->rules, cap * sizeof *r);
        if (!r) return pnomem(P);
        memset(r + P->cap_rules, 0, (cap - P->cap_rules) * sizeof *r);
        P->rules = r;
        P->cap_rules = cap;
    }
    if (id >= P->n_rules) P->n_rules = id + 1;
    gvec *dst = &P->rules[id];
    P->n_el -= dst->n; /* replaced (llama.cpp's rules[id] = rule) */
    free(dst->v);
    *dst = *rule;      /* moved: the caller's vector is now empty */
    *rule = (gvec){0};
    return true;
}

/* ---- lexical helpers (llama.cpp's) ------------------------------------- */

static bool is_digit_char(char c) { return c >= '0' && c <= '9'; }
static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || is_digit_char(c);
}

/* decode_utf8 of the parser: assumes UTF-8, stops at NUL */
static const char *decode_utf8_src(const char *src, uint32_t *out) {
    static const int lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    uint8_t first = (uint8_t)*src;
    int len = lookup[first >> 4];
    uint8_t mask = (uint8_t)((1 << (8 - len)) - 1);
    uint32_t value = first & mask;
    const char *end = src + len, *pos = src + 1;
    for (; pos < end && *pos; pos++) value = (value << 6) + ((uint8_t)*pos & 0x3F);
    *out = value;
    return pos;
}

static const char *parse_space(const char *src, bool newline_ok) {
    const char *pos = src;
    while (*pos == ' ' || *pos == '\t' || *pos == '#' || (newline_ok && (*pos == '\r' || *pos == '\n'))) {
        if (*pos == '#')
            while (*pos && *pos != '\r' && *pos != '\n') pos++;
        else
            pos++;
    }
    return pos;
}

static const char *parse_name(gp *P, const char *src) {
    const char *pos = src;
    while (is_word_char(*pos)) pos++;
    if (pos == src) return pfail(P, src, "expecting a name"), NULL;
    return pos;
}

static const char *parse_int(gp *P, const char *src) {
    const char *pos = src;
    while (is_digit_char(*pos)) pos++;
    if (pos == src) return pfail(P, src, "expecting an integer"), NULL;
    return pos;
}

/* std::stoull / std::stoul of a digit run: out of range is an error */
static bool to_u64(gp *P, const char *s, const char *e, uint64_t max, uint64_t *out) {
    uint64_t v = 0;
    for (const char *p = s; p < e; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (max - d) / 10) return pfail(P, s, "number out of range");
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static const char *parse_hex(gp *P, const char *src, int size, uint32_t *out) {
    const char *pos = src, *end = src + size;
    uint32_t value = 0;
    for (; pos < end && *pos; pos++) {
        char c = *pos;
        value <<= 4;
        if (c >= 'a' && c <= 'f') value += (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') value += (uint32_t)(c - 'A' + 10);
        else if (c >= '0' && c <= '9') value += (uint32_t)(c - '0');
        else break;
    }
    if (pos != end) {
        char m[48];
        snprintf(m, sizeof m, "expecting %d hex digits", size);
        return pfail(P, src, m), NULL;
    }
    *out = value;
    return pos;
}

static const char *parse_char(gp *P, const char *src, uint32_t *out) {
    if (*src == '\\') {
        switch (src[1]) {
        case 'x': return parse_hex(P, src + 2, 2, out);
        case 'u': return parse_hex(P, src + 2, 4, out);
        case 'U': return parse_hex(P, src + 2, 8, out);
        case 't': *out = '\t'; return src + 2;
        case 'r': *out = '\r'; return src + 2;
        case 'n': *out = '\n'; return src + 2;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-': *out = (uint8_t)src[1]; return src + 2;
        default: return pfail(P, src, "unknown escape"), NULL;
        }
    }
    if (*src) return decode_utf8_src(src, out);
    return pfail(P, src, "unexpected end of input"), NULL;
}

/* <[id]> or <text> (text that tokenizes, specials parsed, to one token) */
static const char *parse_token(gp *P, const char *src, uint32_t *out) {
    const char *pos = src;
    if (*pos != '<') return pfail(P, pos, "expecting '<'"), NULL;
    pos++;
    if (*pos == '[') {
        pos++;
        const char *e = parse_int(P, pos);
        if (!e) return NULL;
        uint64_t v;
        if (!to_u64(P, pos, e, UINT64_MAX, &v)) return NULL; /* std::stoul (64-bit), then uint32 */
        pos = e;
        if (*pos != ']') return pfail(P, pos, "expecting ']'"), NULL;
        pos++;
        if (*pos != '>') return pfail(P, pos, "expecting '>'"), NULL;
        *out = (uint32_t)v;
        return pos + 1;
    }
    if (!P->tok) return pfail(P, src, "no vocabulary to resolve a token"), NULL;
    while (*pos && *pos != '>') pos++;
    if (*pos != '>') return pfail(P, pos, "expecting '>'"), NULL;
    pos++;
    int32_t *ids = NULL;
    int n = 0;
    mu_err e2;
    if (mu_tok_encode(P->tok, src, (size_t)(pos - src), true, &ids, &n, &e2)) return pnomem(P), NULL;
    uint32_t id = n == 1 ? (uint32_t)ids[0] : 0;
    free(ids);
    if (n != 1) return pfail(P, src, "not exactly one token"), NULL;
    *out = id;
    return pos;
}

/* ---- rules ------------------------------------------------------------- */

static const char *parse_alternates(gp *P, const char *src, const char *rule_name, uint32_t rule_id, bool nested);

/* handle_repetitions of parse_sequence */
static bool repetitions(gp *P, const char *pos, const char *rule_name, gvec *rule, size_t last_sym_start,
                        uint64_t *n_prev_rules, uint64_t min_times, uint64_t max_times) {
    bool no_max = max_times == UINT64_MAX;
    if (last_sym_start == rule->n) return pfail(P, pos, "expecting an item before */+/?/{");
    uint64_t total = 1;
    if (!no_max && max_times > 0) total = max_times;
    else if (min_times > 0) total = min_times;
    if (*n_prev_rules * total > MAX_REPETITION_THRESHOLD)
        return pfail(P, pos, "too many repetitions (rules repeated times repetitions over 2000)");
    size_t np = rule->n - last_sym_start;
    mu_gelem *prev = malloc((np ? np : 1) * sizeof *prev);
    if (!prev) return pnomem(P);
    memcpy(prev, rule->v + last_sym_start, np * sizeof *prev);
    bool ok = true;
    if (min_times == 0) gvec_resize(P, rule, last_sym_start);
    else
        for (uint64_t i = 1; i < min_times && ok; i++) ok = gvec_append(P, rule, prev, np);
    uint32_t last_rec = 0;
    uint64_t n_opt = no_max ? 1 : max_times - min_times;
    for (uint64_t i = 0; i < n_opt && ok; i++) {
        gvec rec = {0};
        ok = gvec_append(P, &rec, prev, np);
        uint32_t rec_id = ok ? generate_symbol_id(P, rule_name) : UINT32_MAX;
        ok = rec_id != UINT32_MAX;
        if (ok && (i > 0 || no_max)) ok = gvec_push(P, &rec, MU_GE_RULE_REF, no_max ? rec_id : last_rec);
        if (ok) ok = gvec_push(P, &rec, MU_GE_ALT, 0) && gvec_push(P, &rec, MU_GE_END, 0);
        if (ok) ok = add_rule(P, rec_id, &rec);
        if (!ok) {
            P->n_el -= rec.n;
            free(rec.v);
        }
        last_rec = rec_id;
    }
    if (ok && n_opt > 0) ok = gvec_push(P, rule, MU_GE_RULE_REF, last_rec);
    free(prev);
    *n_prev_rules *= total;
    return ok;
}

static const char *parse_sequence(gp *P, const char *src, const char *rule_name, gvec *rule, bool nested) {
    size_t last_sym_start = rule->n;
    const char *pos = src;
    uint64_t n_prev_rules = 1;
    while (*pos && !P->failed) {
        if (*pos == '"') {
            pos++;
            last_sym_start = rule->n;
            n_prev_rules = 1;
            while (*pos != '"') {
                if (!*pos) return pfail(P, pos, "unexpected end of input in a string"), NULL;
                uint32_t c;
                if (!(pos = parse_char(P, pos, &c)) || !gvec_push(P, rule, MU_GE_CHAR, c)) return NULL;
            }
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '[') {
            pos++;
            uint32_t start_type = MU_GE_CHAR;
            if (*pos == '^') {
                pos++;
                start_type = MU_GE_CHAR_NOT;
            }
            last_sym_start = rule->n;
            n_prev_rules = 1;
            while (*pos != ']') {
                if (!*pos) return pfail(P, pos, "unexpected end of input in a character class"), NULL;
                uint32_t c;
                if (!(pos = parse_char(P, pos, &c))) return NULL;
                uint32_t type = last_sym_start < rule->n ? MU_GE_CHAR_ALT : start_type;
                if (!gvec_push(P, rule, type, c)) return NULL;
                if (pos[0] == '-' && pos[1] != ']') {
                    if (!pos[1]) return pfail(P, pos + 1, "unexpected end of input in a character class"), NULL;
                    uint32_t e;
                    if (!(pos = parse_char(P, pos + 1, &e)) || !gvec_push(P, rule, MU_GE_CHAR_RNG_UPPER, e))
                        return NULL;
                }
            }
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '<' || *pos == '!') {
            uint32_t type = MU_GE_TOKEN;
            if (*pos == '!') {
                type = MU_GE_TOKEN_NOT;
                pos++;
            }
            uint32_t id;
            const char *e = parse_token(P, pos, &id);
            if (!e) return NULL;
            last_sym_start = rule->n;
            n_prev_rules = 1;
            if (!gvec_push(P, rule, type, id)) return NULL;
            pos = parse_space(e, nested);
        } else if (is_word_char(*pos)) {
            const char *e = parse_name(P, pos);
            if (!e) return NULL;
            uint32_t ref = get_symbol_id(P, pos, (size_t)(e - pos));
            if (ref == UINT32_MAX) return NULL;
            pos = parse_space(e, nested);
            last_sym_start = rule->n;
            n_prev_rules = 1;
            if (!gvec_push(P, rule, MU_GE_RULE_REF, ref)) return NULL;
        } else if (*pos == '(') {
            if (P->depth >= MU_GRAMMAR_MAX_NEST) return pfail(P, pos, "groups nested too deep (over 256)"), NULL;
            pos = parse_space(pos + 1, true);
            size_t n_before = P->n_sym;
            uint32_t sub = generate_symbol_id(P, rule_name);
            if (sub == UINT32_MAX) return NULL;
            P->depth++;
            pos = parse_alternates(P, pos, rule_name, sub, true);
            P->depth--;
            if (!pos) return NULL;
            uint32_t made = (uint32_t)P->n_sym - (uint32_t)n_before;
            n_prev_rules = made > 1 ? made : 1;
            last_sym_start = rule->n;
            if (!gvec_push(P, rule, MU_GE_RULE_REF, sub)) return NULL;
            if (*pos != ')') return pfail(P, pos, "expecting ')'"), NULL;
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '.') {
            last_sym_start = rule->n;
            n_prev_rules = 1;
            if (!gvec_push(P, rule, MU_GE_CHAR_ANY, 0)) return NULL;
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '*' || *pos == '+' || *pos == '?') {
            char op = *pos;
            pos = parse_space(pos + 1, nested);
            uint64_t mn = op == '+' ? 1 : 0, mx = op == '?' ? 1 : UINT64_MAX;
            if (!repetitions(P, pos, rule_name, rule, last_sym_start, &n_prev_rules, mn, mx)) return NULL;
        } else if (*pos == '{') {
            pos = parse_space(pos + 1, nested);
            if (!is_digit_char(*pos)) return pfail(P, pos, "expecting an integer"), NULL;
            const char *e = parse_int(P, pos);
            uint64_t mn, mx = UINT64_MAX;
            if (!e || !to_u64(P, pos, e, UINT64_MAX, &mn)) return NULL;
            pos = parse_space(e, nested);
            if (*pos == '}') {
                mx = mn;
                pos = parse_space(pos + 1, nested);
            } else if (*pos == ',') {
                pos = parse_space(pos + 1, nested);
                if (is_digit_char(*pos)) {
                    e = parse_int(P, pos);
                    if (!e || !to_u64(P, pos, e, UINT64_MAX, &mx)) return NULL;
                    pos = parse_space(e, nested);
                }
                if (*pos != '}') return pfail(P, pos, "expecting '}'"), NULL;
                pos = parse_space(pos + 1, nested);
            } else {
                return pfail(P, pos, "expecting ','"), NULL;
            }
            if (mn > MAX_REPETITION_THRESHOLD) return pfail(P, pos, "more than 2000 repetitions"), NULL;
            if (mx != UINT64_MAX && mx > MAX_REPETITION_THRESHOLD) mx = UINT64_MAX;
            if (mx != UINT64_MAX && mx < mn) return pfail(P, pos, "repetition maximum below its minimum"), NULL;
            if (!repetitions(P, pos, rule_name, rule, last_sym_start, &n_prev_rules, mn, mx)) return NULL;
        } else {
            break;
        }
    }
    return P->failed ? NULL : pos;
}

static const char *parse_alternates(gp *P, const char *src, const char *rule_name, uint32_t rule_id, bool nested) {
    gvec rule = {0};
    const char *pos = parse_sequence(P, src, rule_name, &rule, nested);
    while (pos && *pos == '|') {
        if (!gvec_push(P, &rule, MU_GE_ALT, 0)) pos = NULL;
        else pos = parse_sequence(P, parse_space(pos + 1, true), rule_name, &rule, nested);
    }
    if (pos && gvec_push(P, &rule, MU_GE_END, 0) && add_rule(P, rule_id, &rule)) return pos;
    P->n_el -= rule.n;
    free(rule.v);
    return NULL;
}

static const char *parse_rule(gp *P, const char *src) {
    const char *name_end = parse_name(P, src);
    if (!name_end) return NULL;
    const char *pos = parse_space(name_end, false);
    size_t name_len = (size_t)(name_end - src);
    uint32_t id = get_symbol_id(P, src, name_len);
    if (id == UINT32_MAX) return NULL;
    char name[300];
    if (name_len >= sizeof name) return pfail(P, src, "rule name longer than 256 bytes"), NULL;
    memcpy(name, src, name_len);
    name[name_len] = 0;
    if (!(pos[0] == ':' && pos[1] == ':' && pos[2] == '=')) return pfail(P, pos, "expecting ::="), NULL;
    pos = parse_space(pos + 3, true);
    P->depth = 0;
    pos = parse_alternates(P, pos, name, id, false);
    if (!pos) return NULL;
    if (*pos == '\r') pos += pos[1] == '\n' ? 2 : 1;
    else if (*pos == '\n') pos++;
    else if (*pos) return pfail(P, pos, "expecting a newline or the end"), NULL;
    return parse_space(pos, true);
}

/* Rule ids reachable as leftmost symbols (through rules with an empty
 * alternative) must not lead back to the rule: llama.cpp's
 * detect_left_recursion, iterative, each rule explored once. */
static bool left_recursion(const mu_grammar *g, uint32_t *where) {
    uint32_t n = g->n_rules;
    uint8_t *st = calloc(n ? n : 1, 1); /* 0 new, 1 in progress, 2 done */
    uint8_t *empty = calloc(n ? n : 1, 1);
    struct fr {
        uint32_t rule, i;
        bool rec;
    } *stk = malloc((n ? n : 1) * sizeof *stk);
    bool found = false;
    if (!st || !empty || !stk) {
        free(st), free(empty), free(stk);
        *where = UINT32_MAX;
        return true;
    }
    for (uint32_t r0 = 0; r0 < n && !found; r0++) {
        if (st[r0]) continue;
        size_t sp = 0;
        stk[sp++] = (struct fr){r0, 0, true};
        st[r0] = 1;
        const mu_gelem *R = g->el + g->rule_off[r0];
        bool at_start = true;
        for (uint32_t i = 0; i < g->rule_len[r0]; i++) {
            bool eos = R[i].type == MU_GE_END || R[i].type == MU_GE_ALT;
            if (eos && at_start) {
                empty[r0] = 1;
                break;
            }
            at_start = eos;
        }
        while (sp && !found) {
            struct fr *f = &stk[sp - 1];
            const mu_gelem *E = g->el + g->rule_off[f->rule];
            if (f->i >= g->rule_len[f->rule]) {
                st[f->rule] = 2;
                sp--;
                continue;
            }
            const mu_gelem *e = &E[f->i];
            if (e->type == MU_GE_RULE_REF && f->rec) {
                uint32_t c = e->value;
                if (st[c] == 1) {
                    found = true;
                    *where = c;
                    break;
                }
                if (st[c] == 0) { /* descend; resume here afterwards */
                    st[c] = 1;
                    const mu_gelem *C = g->el + g->rule_off[c];
                    bool s2 = true;
                    for (uint32_t i = 0; i < g->rule_len[c]; i++) {
                        bool eos = C[i].type == MU_GE_END || C[i].type == MU_GE_ALT;
                        if (eos && s2) {
                            empty[c] = 1;
                            break;
                        }
                        s2 = eos;
                    }
                    stk[sp++] = (struct fr){c, 0, true};
                    continue;
                }
                /* c is done: it may be passed over when it may be empty */
                if (!empty[c]) f->rec = false;
                f->i++;
            } else {
                f->rec = e->type == MU_GE_END || e->type == MU_GE_ALT;
                f->i++;
            }
        }
    }
    free(st), free(empty), free(stk);
    return found;
}

static void gp_free(gp *P) {
    for (size_t i = 0; i < P->n_sym; i++) free(P->names[i]);
    free(P->names);
    free(P->ids);
    free(P->slot);
    for (size_t i = 0; i < P->n_rules; i++) free(P->rules[i].v);
    free(P->rules);
}

void mu_grammar_unref(mu_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (size_t i = 0; i < g->n_sym; i++) free(g->sym_name[i]);
    free(g->sym_name);
    free(g->sym_id);
    free(g->el);
    free(g->rule_off);
    free(g->rule_len);
    free(g->trig_tok);
    for (int i = 0; i < g->n_trig_re; i++) mu_re_free(g->trig_re[i]);
    free(g->trig_re);
    free(g);
}

mu_grammar *mu_grammar_ref(mu_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

/* The name of rule id for messages (llama.cpp: the first in name order). */
static const char *rule_name_of(const gp *P, uint32_t id) {
    const char *best = NULL;
    for (size_t i = 0; i < P->n_sym; i++)
        if (P->ids[i] == id && (!best || strcmp(P->names[i], best) < 0)) best = P->names[i];
    return best ? best : "?";
}

int mu_grammar_new(const char *text, const mu_tok *tok, mu_grammar **out, mu_err *err) {
    if (!text) return mu_fail(err, MU_E_ARG, "grammar: no text");
    size_t len = strnlen(text, (size_t)MU_GRAMMAR_MAX_TEXT + 1);
    if (len > MU_GRAMMAR_MAX_TEXT)
        return mu_fail(err, MU_E_ARG, "grammar: longer than %u bytes", (unsigned)MU_GRAMMAR_MAX_TEXT);
    gp P = {.tok = tok, .src = text, .err = err};
    const char *pos = parse_space(text, true);
    while (pos && *pos) pos = parse_rule(&P, pos);
    int rc = 0;
    if (!pos) rc = P.rc ? P.rc : MU_E_ARG;
    /* every rule defined, every reference to a defined rule */
    for (size_t i = 0; !rc && i < P.n_rules; i++) {
        if (!P.rules[i].n) {
            rc = mu_fail(err, MU_E_ARG, "grammar: undefined rule '%s'", rule_name_of(&P, (uint32_t)i));
            break;
        }
        for (size_t k = 0; k < P.rules[i].n; k++) {
            const mu_gelem *e = &P.rules[i].v[k];
            if (e->type == MU_GE_RULE_REF && (e->value >= P.n_rules || !P.rules[e->value].n)) {
                rc = mu_fail(err, MU_E_ARG, "grammar: undefined rule '%s'", rule_name_of(&P, e->value));
                break;
            }
        }
    }
    if (!rc && !P.n_rules) rc = mu_fail(err, MU_E_ARG, "grammar: no rules");
    long root = rc ? -1 : sym_find(&P, "root", 4);
    if (!rc && root < 0) rc = mu_fail(err, MU_E_ARG, "grammar: no 'root' rule");
    mu_grammar *g = NULL;
    if (!rc) {
        g = calloc(1, sizeof *g);
        if (g) {
            atomic_init(&g->refs, 1);
            g->n_rules = (uint32_t)P.n_rules;
            g->el = malloc((P.n_el ? P.n_el : 1) * sizeof *g->el);
            g->rule_off = malloc(P.n_rules * sizeof *g->rule_off);
            g->rule_len = malloc(P.n_rules * sizeof *g->rule_len);
        }
        if (!g || !g->el || !g->rule_off || !g->rule_len) {
            rc = mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
        } else {
            size_t o = 0;
            for (size_t i = 0; i < P.n_rules; i++) {
                g->rule_off[i] = (uint32_t)o;
                g->rule_len[i] = (uint32_t)P.rules[i].n;
                memcpy(g->el + o, P.rules[i].v, P.rules[i].n * sizeof *g->el);
                o += P.rules[i].n;
            }
            g->n_el = o;
            g->root = P.ids[root];
            /* the symbols move to g (tests read them) */
            g->sym_name = P.names;
            g->sym_id = P.ids;
            g->n_sym = P.n_sym;
            P.names = NULL;
            P.ids = NULL;
            P.n_sym = 0;
            uint32_t where;
            if (left_recursion(g, &where)) {
                const char *nm = NULL;
                for (size_t i = 0; i < g->n_sym; i++)
                    if (g->sym_id[i] == where && (!nm || strcmp(g->sym_name[i], nm) < 0)) nm = g->sym_name[i];
                rc = where == UINT32_MAX ? mu_fail(err, MU_E_NOMEM, "grammar: out of memory")
                                         : mu_fail(err, MU_E_ARG, "grammar: left recursion in rule '%s'", nm ? nm : "?");
            }
        }
    }
    gp_free(&P);
    if (rc) {
        mu_grammar_unref(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* ---- lazy grammars ----------------------------------------------------- */

/* llama.cpp's regex_escape: a word trigger is the pattern matching it */
static char *escape_word(const char *w, size_t n) {
    char *o = malloc(2 * n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i] && strchr(".^$|()*+?[]{}\\", w[i])) o[k++] = '\\';
        o[k++] = w[i];
    }
    o[k] = 0;
    return o;
}

int mu_grammar_set_lazy(mu_grammar *g, const mu_grammar_trigger *t, int n, mu_err *err) {
    if (g->lazy || atomic_load(&g->refs) != 1) return mu_fail(err, MU_E_STATE, "grammar: already lazy or shared");
    if (n < 0 || n > MU_GRAMMAR_MAX_TRIGGERS || (n && !t))
        return mu_fail(err, MU_E_ARG, "grammar: 0..%d triggers: %d", MU_GRAMMAR_MAX_TRIGGERS, n);
    int32_t *tok = malloc(((size_t)n + 1) * sizeof *tok);
    mu_re **re = calloc((size_t)n + 1, sizeof *re);
    int n_tok = 0, n_re = 0, rc = 0;
    if (!tok || !re) rc = mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
    for (int i = 0; !rc && i < n; i++) {
        const mu_grammar_trigger *x = &t[i];
        if (x->kind == MU_TRIGGER_TOKEN) {
            if (x->token < 0) rc = mu_fail(err, MU_E_ARG, "grammar: trigger %d: token id %d", i, (int)x->token);
            else tok[n_tok++] = x->token;
            continue;
        }
        if (x->kind < MU_TRIGGER_TOKEN || x->kind > MU_TRIGGER_PATTERN_FULL || !x->value) {
            rc = mu_fail(err, MU_E_ARG, "grammar: trigger %d: unknown kind %d", i, (int)x->kind);
            break;
        }
        char *pat = NULL;
        size_t pl = x->len;
        if (x->kind == MU_TRIGGER_WORD) {
            pat = escape_word(x->value, x->len);
            pl = pat ? strlen(pat) : 0;
        } else if (x->kind == MU_TRIGGER_PATTERN) {
            pat = malloc(pl + 1);
            if (pat) memcpy(pat, x->value, pl), pat[pl] = 0;
        } else { /* llama.cpp anchors a full pattern at both ends ("^$" when empty) */
            bool a = pl && x->value[0] == '^', b = pl && x->value[pl - 1] == '$';
            pat = malloc(pl + 3);
            if (pat) {
                size_t k = 0;
                if (!pl || !a) pat[k++] = '^';
                memcpy(pat + k, x->value, pl), k += pl;
                if (!pl || !b) pat[k++] = '$';
                pat[k] = 0;
                pl = k;
            }
        }
        if (!pat) {
            rc = mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
            break;
        }
        mu_err e = {0};
        rc = mu_re_new(pat, pl, &re[n_re], &e);
        free(pat);
        if (rc) mu_fail(err, rc, "grammar: trigger %d: %s", i, e.msg);
        else n_re++;
    }
    if (rc) {
        free(tok);
        for (int i = 0; re && i < n_re; i++) mu_re_free(re[i]);
        free(re);
        return rc;
    }
    g->lazy = true;
    g->trig_tok = tok;
    g->n_trig_tok = n_tok;
    g->trig_re = re;
    g->n_trig_re = n_re;
    return 0;
}

bool mu_grammar_is_lazy(const mu_grammar *g) { return g->lazy; }

const mu_gelem *mu_grammar_rule(const mu_grammar *g, uint32_t i, size_t *n) {
    if (i >= g->n_rules) return NULL;
    *n = g->rule_len[i];
    return g->el + g->rule_off[i];
}
size_t mu_grammar_n_rules(const mu_grammar *g) { return g->n_rules; }
size_t mu_grammar_n_symbols(const mu_grammar *g) { return g->n_sym; }
int64_t mu_grammar_symbol(const mu_grammar *g, const char *name) {
    for (size_t i = 0; i < g->n_sym; i++)
        if (!strcmp(g->sym_name[i], name)) return g->sym_id[i];
    return -1;
}

/* ---- stacks ------------------------------------------------------------ */

/* A set of stacks (element indices, bottom first), in insertion order. */
typedef struct {
    uint32_t *data;
    size_t n_data, cap_data;
    size_t *off;
    uint32_t *len;
    size_t n, cap;
    bool oom;
} sset;

static void sset_free(sset *s) {
    free(s->data);
    free(s->off);
    free(s->len);
    *s = (sset){0};
}

static void sset_clear(sset *s) {
    s->n_data = 0;
    s->n = 0;
}

static const uint32_t *sset_get(const sset *s, size_t i, uint32_t *len) {
    *len = s->len[i];
    return s->data + s->off[i];
}

static bool sset_has(const sset *s, const uint32_t *st, uint32_t len) {
    for (size_t i = 0; i < s->n; i++)
        if (s->len[i] == len && !memcmp(s->data + s->off[i], st, len * sizeof *st)) return true;
    return false;
}

/* Appends st (+ optional extra elements pushed on top). */
static void sset_add(sset *s, const uint32_t *st, uint32_t len, const uint32_t *top, uint32_t n_top) {
    if (s->oom) return;
    size_t need = s->n_data + len + n_top;
    if (need > s->cap_data || !s->data) { /* allocated even for empty stacks */
        size_t cap = s->cap_data ? s->cap_data * 2 : 64;
        while (cap < need) cap *= 2;
        uint32_t *d = realloc(s->data, cap * sizeof *d);
        if (!d) {
            s->oom = true;
            return;
        }
        s->data = d;
        s->cap_data = cap;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        size_t *o = realloc(s->off, cap * sizeof *o);
        if (o) s->off = o;
        uint32_t *l = o ? realloc(s->len, cap * sizeof *l) : NULL;
        if (l) s->len = l;
        if (!o || !l) {
            s->oom = true;
            return;
        }
        s->cap = cap;
    }
    s->off[s->n] = s->n_data;
    s->len[s->n] = len + n_top;
    if (len) memcpy(s->data + s->n_data, st, len * sizeof *st);
    if (n_top) memcpy(s->data + s->n_data + len, top, n_top * sizeof *top);
    s->n_data += len + n_top;
    s->n++;
}

/* Removes the last stack (it is at the end of data). */
static void sset_pop(sset *s, uint32_t *buf, uint32_t *len) {
    s->n--;
    *len = s->len[s->n];
    memcpy(buf, s->data + s->off[s->n], *len * sizeof *buf);
    s->n_data = s->off[s->n];
}

static bool is_end_of_seq(const mu_gelem *e) { return e->type == MU_GE_END || e->type == MU_GE_ALT; }

struct mu_gmatch {
    const mu_grammar *g;
    const mu_tok *tok;
    int n_vocab;
    uint8_t *eog;            /* [n_vocab] */
    sset stacks;
    uint32_t pv;             /* partial UTF-8: value so far, bytes remaining (-1 invalid) */
    int pn;
    /* code points of each token's piece decoded from a clean state, each
     * list ending with 0, and the partial state it ends in */
    uint32_t *cp;
    size_t *cp_off;
    uint32_t *cp_pv;
    int8_t *cp_pn;
    uint8_t *usable;         /* [n_vocab] piece non-empty, first byte not NUL */
    /* scratch */
    sset todo, seen, tmp_a, tmp_b, adv;
    uint32_t *buf;           /* one stack */
    size_t cap_buf;
    uint32_t *cp_scratch;    /* decode from a partial state */
    size_t cap_scratch;
    bool oom;
    /* a lazy grammar before its trigger: the output so far and where each
     * token's piece lies in it (llama.cpp's trigger_buffer and positions) */
    bool awaiting;
    char *tbuf;
    size_t n_tbuf, cap_tbuf;
    struct tpos {
        int32_t id;
        size_t a, b;
    } *tpos;
    size_t n_tpos, cap_tpos;
};

static bool buf_room(mu_gmatch *mt, size_t n) {
    if (n <= mt->cap_buf) return true;
    size_t cap = mt->cap_buf ? mt->cap_buf : 64;
    while (cap < n) cap *= 2;
    uint32_t *b = realloc(mt->buf, cap * sizeof *b);
    if (!b) return mt->oom = true, false;
    mt->buf = b;
    mt->cap_buf = cap;
    return true;
}

/* llama_grammar_advance_stack: expands rule references at the top of st
 * until every stack ends at a terminal (or is empty); adds those not yet
 * in out. */
static void advance_stack(mu_gmatch *mt, const uint32_t *st, uint32_t len, sset *out) {
    const mu_gelem *el = mt->g->el;
    sset *todo = &mt->todo, *seen = &mt->seen;
    sset_clear(todo);
    sset_clear(seen);
    sset_add(todo, st, len, NULL, 0);
    while (todo->n && !todo->oom && !seen->oom && !out->oom) {
        uint32_t cl;
        if (!buf_room(mt, todo->len[todo->n - 1] + 2)) return;
        sset_pop(todo, mt->buf, &cl);
        const uint32_t *cur = mt->buf;
        if (sset_has(seen, cur, cl)) continue;
        sset_add(seen, cur, cl, NULL, 0);
        if (cl == 0) {
            if (!sset_has(out, cur, 0)) sset_add(out, cur, 0, NULL, 0);
            continue;
        }
        uint32_t top = cur[cl - 1];
        const mu_gelem *pos = &el[top];
        switch (pos->type) {
        case MU_GE_RULE_REF: {
            uint32_t sub = mt->g->rule_off[pos->value];
            for (;;) {
                uint32_t push[2];
                uint32_t np = 0;
                if (!is_end_of_seq(pos + 1)) push[np++] = top + 1;
                if (!is_end_of_seq(&el[sub])) push[np++] = sub;
                sset_add(todo, cur, cl - 1, push, np);
                while (!is_end_of_seq(&el[sub])) sub++;
                if (el[sub].type == MU_GE_ALT) sub++;
                else break;
            }
            break;
        }
        case MU_GE_CHAR:
        case MU_GE_CHAR_NOT:
        case MU_GE_CHAR_ANY:
        case MU_GE_TOKEN:
        case MU_GE_TOKEN_NOT:
            if (!sset_has(out, cur, cl)) sset_add(out, cur, cl, NULL, 0);
            break;
        default: /* END, ALT, CHAR_ALT, CHAR_RNG_UPPER never sit at a top */
            abort();
        }
    }
    if (todo->oom || seen->oom || out->oom) mt->oom = true;
    if (out->n > MU_GRAMMAR_MAX_STACKS) mt->oom = true;
}

/* llama_grammar_match_char: does chr satisfy the class at pos; *next is
 * the element after the class */
static bool match_char(const mu_gelem *pos, uint32_t chr, const mu_gelem **next) {
    bool found = false;
    bool positive = pos->type == MU_GE_CHAR || pos->type == MU_GE_CHAR_ANY;
    do {
        if (pos[1].type == MU_GE_CHAR_RNG_UPPER) {
            found = found || (pos->value <= chr && chr <= pos[1].value);
            pos += 2;
        } else if (pos->type == MU_GE_CHAR_ANY) {
            found = true;
            pos += 1;
        } else {
            found = found || pos->value == chr;
            pos += 1;
        }
    } while (pos->type == MU_GE_CHAR_ALT);
    *next = pos;
    return found == positive;
}

/* llama_grammar_match_partial_char */
static bool match_partial_char(const mu_gelem *pos, uint32_t pv, int pn) {
    bool positive = pos->type == MU_GE_CHAR || pos->type == MU_GE_CHAR_ANY;
    if (pn < 0 || (pn == 1 && pv < 2)) return false;
    uint32_t low = pv << (pn * 6);
    uint32_t high = low | ((1u << (pn * 6)) - 1);
    if (low == 0) {
        if (pn == 2) low = 1u << 11;
        else if (pn == 3) low = 1u << 16;
    }
    do {
        if (pos[1].type == MU_GE_CHAR_RNG_UPPER) {
            if (pos->value <= high && low <= pos[1].value) return positive;
            pos += 2;
        } else if (pos->type == MU_GE_CHAR_ANY) {
            return true;
        } else {
            if (low <= pos->value && pos->value <= high) return positive;
            pos += 1;
        }
    } while (pos->type == MU_GE_CHAR_ALT);
    return !positive;
}

static bool match_token(const mu_gelem *pos, int32_t tok) {
    if (pos->type == MU_GE_TOKEN) return pos->value == (uint32_t)tok;
    if (pos->type == MU_GE_TOKEN_NOT) return pos->value != (uint32_t)tok;
    return false;
}

/* decode_utf8 of a piece (up to its first NUL) from a partial state:
 * writes the code points and a terminating 0 to out (room: n + 2), the
 * state it ends in to *pv, *pn. */
static void decode_piece(const char *s, size_t n, uint32_t pv0, int pn0, uint32_t *out, size_t *n_out, uint32_t *pv,
                         int *pn) {
    static const int lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    size_t pos = 0, k = 0;
    uint32_t value = pv0;
    int n_remain = pn0;
    while (pos < n && s[pos] && n_remain > 0) {
        uint8_t b = (uint8_t)s[pos];
        if ((b >> 6) != 2) {
            out[0] = 0;
            *n_out = 1;
            *pv = 0;
            *pn = -1;
            return;
        }
        value = (value << 6) + (b & 0x3F);
        pos++;
        n_remain--;
    }
    if (pn0 > 0 && n_remain == 0) out[k++] = value;
    while (pos < n && s[pos]) {
        uint8_t first = (uint8_t)s[pos];
        n_remain = lookup[first >> 4] - 1;
        if (n_remain < 0) {
            out[0] = 0;
            *n_out = 1;
            *pv = 0;
            *pn = n_remain;
            return;
        }
        uint8_t mask = (uint8_t)((1 << (7 - n_remain)) - 1);
        value = first & mask;
        pos++;
        while (pos < n && s[pos] && n_remain > 0) {
            value = (value << 6) + ((uint8_t)s[pos] & 0x3F);
            pos++;
            n_remain--;
        }
        if (n_remain == 0) out[k++] = value;
    }
    out[k++] = 0;
    *n_out = k;
    *pv = value;
    *pn = n_remain;
}

static const char *piece_of(const mu_gmatch *mt, int32_t id, size_t *n) {
    const char *p = mu_tok_piece_view(mt->tok, id, true, n);
    if (!p) *n = 0;
    return p;
}

/* llama.cpp's end-of-generation set: eos, eot, eom and tokens whose text
 * is one of its end markers */
static bool eog_text(const char *t) {
    static const char *const names[] = {
        "<|eot_id|>", "<|im_end|>",  "<|end|>",         "<|return|>", "<|call|>",  "<|flush|>",
        "<|calls|>",  "<end_of_turn>", "<|endoftext|>", "</s>",       "<|eom_id|>", "<EOT>",
        "_<EOT>",     "[EOT]",       "[EOS]",           "<|end_of_text|>", "<end_of_utterance>", "<eos>",
        "<turn|>",    "<|tool_response>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "[e~[",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(t, names[i])) return true;
    return false;
}

int mu_gmatch_new(const mu_grammar *g, const mu_tok *tok, const mu_model *m, mu_gmatch **out, mu_err *err) {
    mu_gmatch *mt = calloc(1, sizeof *mt);
    if (!mt) return mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
    mt->g = g;
    mt->tok = tok;
    mt->n_vocab = tok ? mu_tok_n_vocab(tok) : 0;
    bool ok = true;
    if (tok) {
        size_t nv = (size_t)mt->n_vocab, total = 0;
        mt->eog = calloc(nv, 1);
        mt->usable = calloc(nv, 1);
        mt->cp_off = malloc(nv * sizeof *mt->cp_off);
        mt->cp_pv = malloc(nv * sizeof *mt->cp_pv);
        mt->cp_pn = malloc(nv);
        ok = mt->eog && mt->usable && mt->cp_off && mt->cp_pv && mt->cp_pn;
        for (size_t i = 0; ok && i < nv; i++) {
            size_t n;
            piece_of(mt, (int32_t)i, &n);
            total += n + 2;
        }
        if (ok) ok = (mt->cp = malloc(total * sizeof *mt->cp)) != NULL;
        const mu_model_info *I = m ? mu_model_get_info(m) : NULL;
        size_t o = 0;
        for (size_t i = 0; ok && i < nv; i++) {
            int32_t id = (int32_t)i;
            size_t tl = 0;
            const char *t = mu_tok_text(tok, id, &tl);
            mt->eog[i] = (I && (id == I->eos || id == I->eot || id == I->eom)) || (t && eog_text(t));
            size_t n;
            const char *p = piece_of(mt, id, &n);
            mt->usable[i] = n > 0 && p[0] != 0;
            size_t k;
            int pn;
            decode_piece(p ? p : "", n, 0, 0, mt->cp + o, &k, &mt->cp_pv[i], &pn);
            mt->cp_pn[i] = (int8_t)pn;
            mt->cp_off[i] = o;
            o += k;
        }
        /* decodes from a partial state: at most n + 2 code points a token */
        if (ok) ok = (mt->cp_scratch = malloc(total * sizeof *mt->cp_scratch)) != NULL;
        mt->cap_scratch = ok ? total : 0;
    }
    /* the start: one stack per alternative of root, advanced */
    if (ok) {
        uint32_t pos = g->rule_off[g->root];
        for (;;) {
            uint32_t st[1] = {pos};
            advance_stack(mt, st, is_end_of_seq(&g->el[pos]) ? 0 : 1, &mt->stacks);
            while (!is_end_of_seq(&g->el[pos])) pos++;
            if (g->el[pos].type == MU_GE_ALT) pos++;
            else break;
        }
        ok = !mt->oom;
    }
    mt->awaiting = g->lazy && tok;
    if (!ok) {
        mu_gmatch_free(mt);
        return mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
    }
    *out = mt;
    return 0;
}

void mu_gmatch_free(mu_gmatch *mt) {
    if (!mt) return;
    free(mt->eog);
    free(mt->usable);
    free(mt->cp);
    free(mt->cp_off);
    free(mt->cp_pv);
    free(mt->cp_pn);
    free(mt->cp_scratch);
    free(mt->tbuf);
    free(mt->tpos);
    sset_free(&mt->stacks);
    sset_free(&mt->todo);
    sset_free(&mt->seen);
    sset_free(&mt->tmp_a);
    sset_free(&mt->tmp_b);
    sset_free(&mt->adv);
    free(mt->buf);
    free(mt);
}

bool mu_gmatch_complete(const mu_gmatch *mt) {
    for (size_t i = 0; i < mt->stacks.n; i++)
        if (mt->stacks.len[i] == 0) return true;
    return false;
}

bool mu_gmatch_finished(const mu_gmatch *mt) {
    if (mt->awaiting) return false;
    for (size_t i = 0; i < mt->stacks.n; i++)
        if (mt->stacks.len[i] != 0) return false;
    return true;
}

size_t mu_gmatch_n_stacks(const mu_gmatch *mt) { return mt->stacks.n; }

bool mu_gmatch_awaiting(const mu_gmatch *mt) { return mt->awaiting; }

/* ---- rejecting candidates ---------------------------------------------- */

typedef struct {
    uint32_t index;
    const uint32_t *cp;
    uint32_t pv;
    int pn;
    int32_t id;
} gcand;

static size_t reject_stacks(mu_gmatch *mt, const sset *stacks, const gcand *c, size_t n, gcand *out);

/* llama_grammar_reject_candidates_for_stack: the candidates stack st
 * cannot take; out has room for n. */
static size_t reject_for_stack(mu_gmatch *mt, const uint32_t *st, uint32_t len, const gcand *c, size_t n,
                               gcand *out) {
    size_t nr = 0;
    if (len == 0) {
        for (size_t i = 0; i < n; i++)
            if (*c[i].cp != 0 || c[i].pn != 0) out[nr++] = c[i];
        return nr;
    }
    const mu_gelem *el = mt->g->el;
    const mu_gelem *pos = &el[st[len - 1]];
    if (pos->type == MU_GE_TOKEN || pos->type == MU_GE_TOKEN_NOT) {
        for (size_t i = 0; i < n; i++) {
            if (*c[i].cp == 0) {
                if (c[i].pn != 0) out[nr++] = c[i];
            } else if (!match_token(pos, c[i].id)) {
                out[nr++] = c[i];
            }
        }
        return nr;
    }
    gcand *next = malloc((n ? n : 1) * sizeof *next);
    if (!next) {
        mt->oom = true;
        return 0;
    }
    size_t nn = 0;
    const mu_gelem *after;
    for (size_t i = 0; i < n; i++) {
        if (*c[i].cp == 0) {
            if (c[i].pn != 0 && !match_partial_char(pos, c[i].pv, c[i].pn)) out[nr++] = c[i];
        } else if (match_char(pos, *c[i].cp, &after)) {
            next[nn] = c[i];
            next[nn].cp++;
            nn++;
        } else {
            out[nr++] = c[i];
        }
    }
    match_char(pos, 0, &after);
    if (nn) {
        sset next_stacks = {0};
        uint32_t top = (uint32_t)(after - el);
        uint32_t *tmp = malloc(((size_t)len + 1) * sizeof *tmp);
        if (!tmp) {
            free(next);
            mt->oom = true;
            return nr;
        }
        memcpy(tmp, st, ((size_t)len - 1) * sizeof *tmp);
        uint32_t nl = len - 1;
        if (!is_end_of_seq(after)) tmp[nl++] = top;
        advance_stack(mt, tmp, nl, &next_stacks);
        free(tmp);
        gcand *rej = malloc(nn * sizeof *rej);
        if (!rej || next_stacks.oom) {
            mt->oom = true;
        } else {
            size_t k = reject_stacks(mt, &next_stacks, next, nn, rej);
            for (size_t i = 0; i < k; i++) {
                out[nr] = rej[i];
                out[nr].cp--;
                nr++;
            }
        }
        free(rej);
        sset_free(&next_stacks);
    }
    free(next);
    return nr;
}

/* llama_grammar_reject_candidates */
static size_t reject_stacks(mu_gmatch *mt, const sset *stacks, const gcand *c, size_t n, gcand *out) {
    if (!n) return 0;
    if (!stacks->n) { /* llama.cpp asserts this never happens */
        memcpy(out, c, n * sizeof *c);
        return n;
    }
    uint32_t len;
    const uint32_t *st = sset_get(stacks, 0, &len);
    size_t nr = reject_for_stack(mt, st, len, c, n, out);
    if (stacks->n == 1 || !nr) return nr;
    gcand *a = malloc(nr * sizeof *a);
    if (!a) {
        mt->oom = true;
        return nr;
    }
    for (size_t i = 1; i < stacks->n && nr; i++) {
        memcpy(a, out, nr * sizeof *a);
        st = sset_get(stacks, i, &len);
        nr = reject_for_stack(mt, st, len, a, nr, out);
    }
    free(a);
    return nr;
}

/* The candidate for token id from the current partial state; cps is room
 * for its code points when the state is partial. */
static void cand_of(mu_gmatch *mt, int32_t id, uint32_t index, uint32_t *cps, gcand *c) {
    c->index = index;
    c->id = id;
    if (mt->pn <= 0) {
        c->cp = mt->cp + mt->cp_off[id];
        c->pv = mt->cp_pv[id];
        c->pn = mt->cp_pn[id];
        return;
    }
    size_t n, k;
    const char *p = piece_of(mt, id, &n);
    int pn;
    decode_piece(p, n, mt->pv, mt->pn, cps, &k, &c->pv, &pn);
    c->pn = pn;
    c->cp = cps;
}

bool mu_gmatch_allows(mu_gmatch *mt, int32_t id) {
    if (!mt->tok || id < 0 || id >= mt->n_vocab) return false;
    if (mt->awaiting) return true; /* llama.cpp applies nothing before the trigger */
    if (mt->eog[id]) return mu_gmatch_complete(mt);
    if (!mt->usable[id]) return false;
    gcand c, r;
    cand_of(mt, id, 0, mt->cp_scratch, &c);
    size_t nr = reject_stacks(mt, &mt->stacks, &c, 1, &r);
    return nr == 0 && !mt->oom;
}

int mu_gmatch_mask(mu_gmatch *mt, float *logits) {
    if (!mt->tok) return -1;
    if (mt->awaiting) {
        int left = 0;
        for (int32_t id = 0; id < mt->n_vocab; id++) left += logits[id] != -INFINITY;
        return left;
    }
    bool allow_eog = mu_gmatch_complete(mt);
    gcand *c = malloc((size_t)mt->n_vocab * sizeof *c);
    gcand *r = malloc((size_t)mt->n_vocab * sizeof *r);
    if (!c || !r) {
        free(c), free(r);
        return -1;
    }
    size_t n = 0, used = 0;
    for (int32_t id = 0; id < mt->n_vocab; id++) {
        if (logits[id] == -INFINITY) continue; /* stays so whatever the grammar says */
        if (mt->eog[id]) {
            if (!allow_eog) logits[id] = -INFINITY;
        } else if (!mt->usable[id]) {
            logits[id] = -INFINITY;
        } else {
            size_t pl;
            piece_of(mt, id, &pl);
            cand_of(mt, id, (uint32_t)id, mt->cp_scratch + used, &c[n]);
            if (mt->pn > 0) used += pl + 2;
            n++;
        }
    }
    size_t nr = reject_stacks(mt, &mt->stacks, c, n, r);
    for (size_t i = 0; i < nr; i++) logits[r[i].index] = -INFINITY;
    free(c), free(r);
    if (mt->oom) return -1;
    int left = 0;
    for (int32_t id = 0; id < mt->n_vocab; id++) left += logits[id] != -INFINITY;
    return left;
}

/* ---- accepting --------------------------------------------------------- */

/* llama_grammar_accept_chr: stack st after chr, advanced, into out */
static void accept_chr(mu_gmatch *mt, const uint32_t *st, uint32_t len, uint32_t chr, sset *out) {
    if (len == 0) return;
    const mu_gelem *el = mt->g->el;
    const mu_gelem *pos = &el[st[len - 1]];
    if (pos->type == MU_GE_TOKEN || pos->type == MU_GE_TOKEN_NOT) return;
    const mu_gelem *after;
    if (!match_char(pos, chr, &after)) return;
    uint32_t *tmp = malloc(((size_t)len + 1) * sizeof *tmp);
    if (!tmp) {
        mt->oom = true;
        return;
    }
    memcpy(tmp, st, ((size_t)len - 1) * sizeof *tmp);
    uint32_t nl = len - 1;
    if (!is_end_of_seq(after)) tmp[nl++] = (uint32_t)(after - el);
    advance_stack(mt, tmp, nl, out);
    free(tmp);
}

static void swap_sets(sset *a, sset *b) {
    sset t = *a;
    *a = *b;
    *b = t;
}

/* code points of s from the current partial state (malloc'ed) */
static uint32_t *decode_text(mu_gmatch *mt, const char *s, size_t n, size_t *k, uint32_t *pv, int *pn) {
    uint32_t *cps = malloc((n + 2) * sizeof *cps);
    if (!cps) return NULL;
    decode_piece(s, n, mt->pv, mt->pn, cps, k, pv, pn);
    return cps;
}

static int after_accept(mu_gmatch *mt, sset *fresh, uint32_t pv, int pn, const char *what, mu_err *err) {
    if (mt->oom || fresh->oom) {
        mt->oom = false;
        return mu_fail(err, MU_E_NOMEM, "grammar: out of memory (or more than %d parse stacks)",
                       MU_GRAMMAR_MAX_STACKS);
    }
    if (!fresh->n) return mu_fail(err, MU_E_ARG, "grammar: %s does not fit the grammar", what);
    swap_sets(&mt->stacks, fresh);
    mt->pv = pv;
    mt->pn = pn;
    return 0;
}

int mu_gmatch_accept_bytes(mu_gmatch *mt, const char *s, size_t n, mu_err *err) {
    size_t k;
    uint32_t pv;
    int pn;
    uint32_t *cps = decode_text(mt, s, n, &k, &pv, &pn);
    if (!cps) return mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
    sset *cur = &mt->tmp_a, *nxt = &mt->tmp_b;
    sset_clear(cur);
    for (size_t i = 0; i < mt->stacks.n; i++) {
        uint32_t l;
        const uint32_t *st = sset_get(&mt->stacks, i, &l);
        sset_add(cur, st, l, NULL, 0);
    }
    for (size_t i = 0; i + 1 < k; i++) { /* llama_grammar_accept for each code point */
        sset_clear(nxt);
        for (size_t j = 0; j < cur->n; j++) {
            uint32_t l;
            const uint32_t *st = sset_get(cur, j, &l);
            accept_chr(mt, st, l, cps[i], nxt);
        }
        swap_sets(cur, nxt);
    }
    free(cps);
    return after_accept(mt, cur, pv, pn, "the text", err);
}

/* llama_grammar_accept_token: advances past token id whose text is p[0, n)
 * (its piece, or the part of it from a trigger pattern's start) */
static int accept_piece(mu_gmatch *mt, int32_t id, const char *p, size_t n, mu_err *err) {
    size_t k;
    uint32_t pv;
    int pn;
    uint32_t *cps = decode_text(mt, p ? p : "", n, &k, &pv, &pn);
    if (!cps) return mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
    const mu_gelem *el = mt->g->el;
    sset *fresh = &mt->adv;
    sset_clear(fresh);
    for (size_t i = 0; i < mt->stacks.n && !mt->oom; i++) {
        uint32_t len;
        const uint32_t *st = sset_get(&mt->stacks, i, &len);
        if (len == 0) continue;
        const mu_gelem *pos = &el[st[len - 1]];
        if (pos->type == MU_GE_TOKEN || pos->type == MU_GE_TOKEN_NOT) {
            if (!match_token(pos, id)) continue;
            uint32_t *tmp = malloc(((size_t)len + 1) * sizeof *tmp);
            if (!tmp) {
                mt->oom = true;
                break;
            }
            memcpy(tmp, st, ((size_t)len - 1) * sizeof *tmp);
            uint32_t nl = len - 1;
            if (!is_end_of_seq(pos + 1)) tmp[nl++] = st[len - 1] + 1;
            advance_stack(mt, tmp, nl, fresh);
            free(tmp);
            continue;
        }
        sset *cur = &mt->tmp_a, *nxt = &mt->tmp_b;
        sset_clear(cur);
        sset_add(cur, st, len, NULL, 0);
        for (size_t c = 0; c + 1 < k && cur->n; c++) {
            sset_clear(nxt);
            for (size_t j = 0; j < cur->n; j++) {
                uint32_t l;
                const uint32_t *s2 = sset_get(cur, j, &l);
                accept_chr(mt, s2, l, cps[c], nxt);
            }
            swap_sets(cur, nxt);
        }
        if (cur->oom || nxt->oom) mt->oom = true;
        for (size_t j = 0; j < cur->n; j++) {
            uint32_t l;
            const uint32_t *s2 = sset_get(cur, j, &l);
            if (!sset_has(fresh, s2, l)) sset_add(fresh, s2, l, NULL, 0);
        }
    }
    free(cps);
    char what[64];
    snprintf(what, sizeof what, "token %d", id);
    return after_accept(mt, fresh, pv, pn, what, err);
}

/* Appends token id's piece to the trigger buffer; then a trigger pattern
 * that matches it ends the wait: the tokens from the match's start on are
 * replayed into the grammar (the first of them from that byte). */
static int await_accept(mu_gmatch *mt, int32_t id, mu_err *err) {
    const mu_grammar *g = mt->g;
    size_t n;
    const char *p = piece_of(mt, id, &n);
    for (int i = 0; i < g->n_trig_tok; i++)
        if (g->trig_tok[i] == id) {
            mt->awaiting = false;
            mt->n_tbuf = mt->n_tpos = 0;
            return accept_piece(mt, id, p ? p : "", n, err);
        }
    if (mt->n_tbuf + n + 1 > mt->cap_tbuf) {
        size_t cap = (mt->n_tbuf + n + 1) * 2;
        char *nb = realloc(mt->tbuf, cap);
        if (!nb) return mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
        mt->tbuf = nb;
        mt->cap_tbuf = cap;
    }
    if (mt->n_tpos == mt->cap_tpos) {
        size_t cap = mt->cap_tpos ? mt->cap_tpos * 2 : 64;
        struct tpos *np = realloc(mt->tpos, cap * sizeof *np);
        if (!np) return mu_fail(err, MU_E_NOMEM, "grammar: out of memory");
        mt->tpos = np;
        mt->cap_tpos = cap;
    }
    mt->tpos[mt->n_tpos++] = (struct tpos){.id = id, .a = mt->n_tbuf, .b = mt->n_tbuf + n};
    if (n) memcpy(mt->tbuf + mt->n_tbuf, p, n);
    mt->n_tbuf += n;
    for (int i = 0; i < g->n_trig_re; i++) {
        size_t start;
        mu_err e;
        int rc = mu_re_find(g->trig_re[i], mt->tbuf, mt->n_tbuf, &start, &e);
        if (rc) return mu_fail(err, rc, "grammar: trigger pattern %d: %s", i, e.msg);
        if (start == SIZE_MAX) continue;
        mt->awaiting = false;
        for (size_t k = 0; k < mt->n_tpos; k++) {
            const struct tpos *t = &mt->tpos[k];
            if (t->b <= start) continue;
            size_t from = t->a < start ? start : t->a;
            if ((rc = accept_piece(mt, t->id, mt->tbuf + from, t->b - from, err))) return rc;
        }
        mt->n_tbuf = mt->n_tpos = 0;
        return 0;
    }
    return 0;
}

int mu_gmatch_accept(mu_gmatch *mt, int32_t id, mu_err *err) {
    if (!mt->tok || id < 0 || id >= mt->n_vocab) return mu_fail(err, MU_E_ARG, "grammar: token id out of range: %d", id);
    if (mt->awaiting) return await_accept(mt, id, err);
    if (mt->eog[id]) {
        if (mu_gmatch_complete(mt)) return 0;
        return mu_fail(err, MU_E_ARG, "grammar: end of generation before the grammar is complete");
    }
    size_t n;
    const char *p = piece_of(mt, id, &n);
    return accept_piece(mt, id, p ? p : "", n, err);
}
