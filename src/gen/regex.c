/* regex.c: trigger patterns (regex.h). The pattern is parsed into a tree,
 * the tree compiled into a small program (bytes, classes, splits that try
 * their first branch first, saves, assertions), and the program run by a
 * backtracking matcher with an explicit stack: the order in which it tries
 * alternatives and repetitions is ECMAScript's, so the first match found is
 * the one std::regex reports. */
#include "regex.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { N_EMPTY, N_BYTE, N_SET, N_ANY, N_CAT, N_ALT, N_GROUP, N_LOOK, N_REP, N_BOL, N_EOL, N_WB, N_NWB };

typedef struct {
    uint8_t kind, lazy, neg;
    int c;           /* byte, set index, capture index (-1: none) */
    int first, next; /* first child; next sibling (-1: none) */
    int min, max;    /* N_REP: max -1 is unbounded */
} rnode;

enum { I_BYTE, I_SET, I_ANY, I_SPLIT, I_JMP, I_SAVE, I_PROG, I_BOL, I_EOL, I_WB, I_NWB, I_LOOK, I_MATCH };

typedef struct {
    uint8_t op, neg;
    uint32_t x, y;
} rinst;

struct mu_re {
    rinst *prog;
    uint32_t n_prog;
    uint8_t (*sets)[32];
    uint32_t n_caps;  /* groups, group 0 included */
    uint32_t n_slots; /* 2 per group, then one per unbounded loop */
    bool anchored;    /* the pattern starts with ^ outside any alternation */
    bool full;        /* it starts with ^ and ends with $: llama.cpp tries a whole-input match first */
};

#define MAX_DEPTH 64
#define MAX_COUNT 65535
#define MAX_STACK (1u << 20)

/* ---- parsing ----------------------------------------------------------- */

typedef struct {
    const char *p;
    size_t n, i;
    rnode *nodes;
    int n_nodes, cap_nodes;
    uint8_t (*sets)[32];
    int n_sets, cap_sets;
    int n_caps, n_loops, depth;
    int rc;
    mu_err *err;
} rp;

static int rfail(rp *P, const char *what) {
    if (!P->rc) P->rc = mu_fail(P->err, MU_E_ARG, "regex: %s: at byte %zu", what, P->i);
    return -1;
}

static int rnomem(rp *P) {
    if (!P->rc) P->rc = mu_fail(P->err, MU_E_NOMEM, "regex: out of memory");
    return -1;
}

static int node_new(rp *P, int kind) {
    if (P->n_nodes == P->cap_nodes) {
        int cap = P->cap_nodes ? P->cap_nodes * 2 : 32;
        rnode *nn = realloc(P->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return rnomem(P);
        P->nodes = nn;
        P->cap_nodes = cap;
    }
    rnode *x = &P->nodes[P->n_nodes];
    memset(x, 0, sizeof *x);
    x->kind = (uint8_t)kind;
    x->first = x->next = -1;
    return P->n_nodes++;
}

static int set_new(rp *P) {
    if (P->n_sets == P->cap_sets) {
        int cap = P->cap_sets ? P->cap_sets * 2 : 8;
        uint8_t(*ns)[32] = realloc(P->sets, (size_t)cap * sizeof *ns);
        if (!ns) return rnomem(P);
        P->sets = ns;
        P->cap_sets = cap;
    }
    memset(P->sets[P->n_sets], 0, 32);
    return P->n_sets++;
}

static void set_add(uint8_t *s, unsigned c) { s[c >> 3] |= (uint8_t)(1u << (c & 7)); }
static bool set_has(const uint8_t *s, unsigned c) { return s[c >> 3] >> (c & 7) & 1; }
static bool is_word(unsigned c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_space(unsigned c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* \d \D \w \W \s \S into s (negated classes as their complement) */
static void class_escape(uint8_t *s, char e) {
    bool neg = e == 'D' || e == 'W' || e == 'S';
    char k = (char)(neg ? e + ('a' - 'A') : e);
    for (unsigned c = 0; c < 256; c++) {
        bool in = k == 'd' ? (c >= '0' && c <= '9') : k == 'w' ? is_word(c) : is_space(c);
        if (in != neg) set_add(s, c);
    }
}

static int hex_val(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* One escaped byte after the backslash (P->i at the letter); -1 after a
 * failure. Class escapes and assertions are handled by the callers. */
static int escape_byte(rp *P, bool in_class) {
    char e = P->p[P->i++];
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case 'b': if (in_class) return '\b'; break;
    case '0':
        if (P->i < P->n && P->p[P->i] >= '0' && P->p[P->i] <= '9') break;
        return 0;
    case 'c':
        if (P->i < P->n && ((P->p[P->i] >= 'a' && P->p[P->i] <= 'z') || (P->p[P->i] >= 'A' && P->p[P->i] <= 'Z')))
            return P->p[P->i++] % 32;
        return rfail(P, "\\c needs a letter");
    case 'x':
    case 'u': {
        int len = e == 'x' ? 2 : 4, v = 0;
        if (P->i + (size_t)len > P->n) return rfail(P, "short \\x or \\u escape");
        for (int k = 0; k < len; k++) {
            int h = hex_val(P->p[P->i + (size_t)k]);
            if (h < 0) return rfail(P, "bad hex digit in an escape");
            v = v * 16 + h;
        }
        P->i += (size_t)len;
        if (e == 'u' && v > 0x7F) return rfail(P, "\\u escapes above 0x7F are not supported (write the UTF-8 bytes)");
        return v;
    }
    default:
        if (!is_word((unsigned char)e) && e != 0) return (unsigned char)e; /* identity escape */
        break;
    }
    P->i--;
    if (e >= '1' && e <= '9') return rfail(P, "backreferences are not supported");
    return rfail(P, "unknown escape");
}

static int parse_class(rp *P) {
    int si = set_new(P);
    if (si < 0) return -1;
    bool neg = P->i < P->n && P->p[P->i] == '^';
    if (neg) P->i++;
    uint8_t s[32] = {0};
    for (;;) {
        if (P->i >= P->n) return rfail(P, "unclosed [");
        char c = P->p[P->i];
        if (c == ']') {
            P->i++;
            break;
        }
        int lo;
        P->i++;
        if (c == '\\') {
            if (P->i >= P->n) return rfail(P, "trailing backslash");
            char e = P->p[P->i];
            if (strchr("dDwWsS", e) && e) {
                P->i++;
                class_escape(s, e);
                if (P->i + 1 < P->n && P->p[P->i] == '-' && P->p[P->i + 1] != ']')
                    return rfail(P, "a class escape cannot bound a range");
                continue;
            }
            if ((lo = escape_byte(P, true)) < 0) return -1;
        } else {
            lo = (unsigned char)c;
        }
        int hi = lo;
        if (P->i + 1 < P->n && P->p[P->i] == '-' && P->p[P->i + 1] != ']') {
            P->i++;
            char d = P->p[P->i++];
            if (d == '\\') {
                if (P->i >= P->n) return rfail(P, "trailing backslash");
                if (strchr("dDwWsS", P->p[P->i]) && P->p[P->i]) return rfail(P, "a class escape cannot bound a range");
                if ((hi = escape_byte(P, true)) < 0) return -1;
            } else {
                hi = (unsigned char)d;
            }
            if (hi < lo) return rfail(P, "range out of order in a class");
        }
        for (int k = lo; k <= hi; k++) set_add(s, (unsigned)k);
    }
    for (int k = 0; k < 32; k++) P->sets[si][k] = neg ? (uint8_t)~s[k] : s[k];
    int x = node_new(P, N_SET);
    if (x >= 0) P->nodes[x].c = si;
    return x;
}

static int parse_alt(rp *P);

static int parse_atom(rp *P) {
    char c = P->p[P->i++];
    int x;
    switch (c) {
    case '(': {
        if (++P->depth > MAX_DEPTH) return rfail(P, "groups nested too deep");
        int kind = N_GROUP, cap = -1;
        bool neg = false;
        if (P->i < P->n && P->p[P->i] == '?') {
            char k = P->i + 1 < P->n ? P->p[P->i + 1] : 0;
            if (k == ':') kind = N_GROUP;
            else if (k == '=' || k == '!') kind = N_LOOK, neg = k == '!';
            else if (k == '<') return rfail(P, "lookbehind and named groups are not supported");
            else return rfail(P, "unknown group kind after (?");
            P->i += 2;
        } else {
            cap = ++P->n_caps;
        }
        int child = parse_alt(P);
        if (child < 0) return -1;
        if (P->i >= P->n || P->p[P->i] != ')') return rfail(P, "unclosed (");
        P->i++;
        P->depth--;
        if ((x = node_new(P, kind)) < 0) return -1;
        P->nodes[x].first = child;
        P->nodes[x].c = cap;
        P->nodes[x].neg = neg;
        return x;
    }
    case '[': return parse_class(P);
    case '.': return node_new(P, N_ANY);
    case '^': return node_new(P, N_BOL);
    case '$': return node_new(P, N_EOL);
    case '*':
    case '+':
    case '?':
        P->i--;
        return rfail(P, "nothing to repeat");
    case '{':
        P->i--;
        return rfail(P, "a { that starts no {n,m}");
    case '\\': {
        if (P->i >= P->n) return rfail(P, "trailing backslash");
        char e = P->p[P->i];
        if (e == 'b' || e == 'B') {
            P->i++;
            return node_new(P, e == 'b' ? N_WB : N_NWB);
        }
        if (e && strchr("dDwWsS", e)) {
            P->i++;
            int si = set_new(P);
            if (si < 0) return -1;
            class_escape(P->sets[si], e);
            if ((x = node_new(P, N_SET)) >= 0) P->nodes[x].c = si;
            return x;
        }
        int b = escape_byte(P, false);
        if (b < 0) return -1;
        if ((x = node_new(P, N_BYTE)) >= 0) P->nodes[x].c = b;
        return x;
    }
    default:
        if ((x = node_new(P, N_BYTE)) >= 0) P->nodes[x].c = (unsigned char)c;
        return x;
    }
}

static bool parse_count(rp *P, int *v) {
    size_t s = P->i;
    long acc = 0;
    while (P->i < P->n && P->p[P->i] >= '0' && P->p[P->i] <= '9') {
        acc = acc * 10 + (P->p[P->i++] - '0');
        if (acc > MAX_COUNT) return rfail(P, "repetition count above 65535"), false;
    }
    *v = (int)acc;
    return P->i > s;
}

static int parse_quantified(rp *P) {
    int x = parse_atom(P);
    if (x < 0 || P->i >= P->n) return x;
    char q = P->p[P->i];
    int min, max;
    if (q == '*') min = 0, max = -1;
    else if (q == '+') min = 1, max = -1;
    else if (q == '?') min = 0, max = 1;
    else if (q == '{') {
        P->i++;
        if (!parse_count(P, &min)) return P->rc ? -1 : rfail(P, "bad {n,m}");
        max = min;
        if (P->i < P->n && P->p[P->i] == ',') {
            P->i++;
            if (!parse_count(P, &max)) {
                if (P->rc) return -1;
                max = -1;
            }
        }
        if (P->i >= P->n || P->p[P->i] != '}') return rfail(P, "bad {n,m}");
        if (max >= 0 && max < min) return rfail(P, "{n,m} with m < n");
    } else {
        return x;
    }
    P->i++;
    int k = P->nodes[x].kind;
    if (k == N_BOL || k == N_EOL || k == N_WB || k == N_NWB || k == N_LOOK) return rfail(P, "nothing to repeat");
    bool lazy = P->i < P->n && P->p[P->i] == '?';
    if (lazy) P->i++;
    if (P->i < P->n && strchr("*+?{", P->p[P->i]) && P->p[P->i]) return rfail(P, "nothing to repeat");
    int r = node_new(P, N_REP);
    if (r < 0) return -1;
    P->nodes[r].first = x;
    P->nodes[r].min = min;
    P->nodes[r].max = max;
    P->nodes[r].lazy = lazy;
    if (max < 0) P->nodes[r].c = P->n_loops++;
    return r;
}

static int parse_seq(rp *P) {
    int cat = node_new(P, N_CAT), last = -1;
    if (cat < 0) return -1;
    while (P->i < P->n && P->p[P->i] != '|' && P->p[P->i] != ')') {
        int x = parse_quantified(P);
        if (x < 0) return -1;
        if (last < 0) P->nodes[cat].first = x;
        else P->nodes[last].next = x;
        last = x;
    }
    return cat;
}

static int parse_alt(rp *P) {
    int alt = node_new(P, N_ALT), last = -1;
    if (alt < 0) return -1;
    for (;;) {
        int x = parse_seq(P);
        if (x < 0) return -1;
        if (last < 0) P->nodes[alt].first = x;
        else P->nodes[last].next = x;
        last = x;
        if (P->i >= P->n || P->p[P->i] != '|') break;
        P->i++;
    }
    return alt;
}

/* ---- compiling --------------------------------------------------------- */

typedef struct {
    rp *P;
    rinst *prog;
    uint32_t n, cap;
    uint32_t loop_base; /* first loop slot */
} rc_t;

static int64_t emit(rc_t *C, int op, uint32_t x, uint32_t y) {
    if (C->n >= MU_RE_MAX_PROG) {
        rfail(C->P, "pattern too large once its repetitions are expanded");
        return -1;
    }
    if (C->n == C->cap) {
        uint32_t cap = C->cap ? C->cap * 2 : 64;
        rinst *np = realloc(C->prog, cap * sizeof *np);
        if (!np) return rnomem(C->P);
        C->prog = np;
        C->cap = cap;
    }
    C->prog[C->n] = (rinst){.op = (uint8_t)op, .x = x, .y = y};
    return C->n++;
}

static bool compile(rc_t *C, int xi) {
    const rnode *x = &C->P->nodes[xi];
    switch (x->kind) {
    case N_BYTE: return emit(C, I_BYTE, (uint32_t)x->c, 0) >= 0;
    case N_SET: return emit(C, I_SET, (uint32_t)x->c, 0) >= 0;
    case N_ANY: return emit(C, I_ANY, 0, 0) >= 0;
    case N_BOL: return emit(C, I_BOL, 0, 0) >= 0;
    case N_EOL: return emit(C, I_EOL, 0, 0) >= 0;
    case N_WB: return emit(C, I_WB, 0, 0) >= 0;
    case N_NWB: return emit(C, I_NWB, 0, 0) >= 0;
    case N_CAT:
        for (int k = x->first; k >= 0; k = C->P->nodes[k].next)
            if (!compile(C, k)) return false;
        return true;
    case N_ALT: {
        if (C->P->nodes[x->first].next < 0) return compile(C, x->first);
        /* SPLIT next-branch; branch; JMP end ... the last branch plain */
        int64_t chain = -1; /* the branches' JMPs, linked through y until patched */
        for (int k = x->first; k >= 0; k = C->P->nodes[k].next) {
            bool last = C->P->nodes[k].next < 0;
            int64_t split = -1;
            if (!last && (split = emit(C, I_SPLIT, 0, 0)) < 0) return false;
            if (split >= 0) C->prog[split].x = C->n;
            if (!compile(C, k)) return false;
            if (!last) {
                int64_t j = emit(C, I_JMP, 0, (uint32_t)(chain < 0 ? UINT32_MAX : chain));
                if (j < 0) return false;
                chain = j;
                C->prog[split].y = C->n;
            }
        }
        while (chain >= 0) { /* every branch's JMP lands here */
            uint32_t nx = C->prog[chain].y;
            C->prog[chain].x = C->n;
            C->prog[chain].y = 0;
            chain = nx == UINT32_MAX ? -1 : (int64_t)nx;
        }
        return true;
    }
    case N_GROUP:
        if (x->c >= 0 && emit(C, I_SAVE, 2u * (uint32_t)x->c, 0) < 0) return false;
        if (!compile(C, x->first)) return false;
        return x->c < 0 || emit(C, I_SAVE, 2u * (uint32_t)x->c + 1, 0) >= 0;
    case N_LOOK: {
        int64_t l = emit(C, I_LOOK, 0, 0);
        if (l < 0 || !compile(C, x->first) || emit(C, I_MATCH, 0, 0) < 0) return false;
        C->prog[l].neg = x->neg;
        C->prog[l].x = C->n;
        return true;
    }
    case N_REP: {
        for (int k = 0; k < x->min; k++)
            if (!compile(C, x->first)) return false;
        if (x->max < 0) {
            uint32_t slot = C->loop_base + (uint32_t)x->c;
            int64_t top = emit(C, I_SPLIT, 0, 0);
            if (top < 0 || emit(C, I_SAVE, slot, 0) < 0 || !compile(C, x->first) || emit(C, I_PROG, slot, 0) < 0 ||
                emit(C, I_JMP, (uint32_t)top, 0) < 0)
                return false;
            uint32_t body = (uint32_t)top + 1, out = C->n;
            C->prog[top].x = x->lazy ? out : body;
            C->prog[top].y = x->lazy ? body : out;
            return true;
        }
        int64_t chain = -1;
        for (int k = x->min; k < x->max; k++) {
            int64_t s = emit(C, I_SPLIT, 0, (uint32_t)(chain < 0 ? UINT32_MAX : chain));
            if (s < 0 || !compile(C, x->first)) return false;
            chain = s;
        }
        while (chain >= 0) {
            uint32_t nx = C->prog[chain].y, body = (uint32_t)chain + 1, out = C->n;
            C->prog[chain].x = x->lazy ? out : body;
            C->prog[chain].y = x->lazy ? body : out;
            chain = nx == UINT32_MAX ? -1 : (int64_t)nx;
        }
        return true;
    }
    default: return true; /* N_EMPTY */
    }
}

void mu_re_free(mu_re *re) {
    if (!re) return;
    free(re->prog);
    free(re->sets);
    free(re);
}

int mu_re_new(const char *pat, size_t n, mu_re **out, mu_err *err) {
    if (n > MU_RE_MAX_PATTERN) return mu_fail(err, MU_E_ARG, "regex: pattern longer than %d bytes", MU_RE_MAX_PATTERN);
    rp P = {.p = pat, .n = n, .err = err};
    int top = parse_alt(&P);
    if (top >= 0 && P.i < P.n) rfail(&P, "unmatched )");
    mu_re *re = NULL;
    rc_t C = {.P = &P};
    if (!P.rc) {
        C.loop_base = 2u * ((uint32_t)P.n_caps + 1);
        if (!(re = calloc(1, sizeof *re))) rnomem(&P);
    }
    if (!P.rc && emit(&C, I_SAVE, 0, 0) >= 0 && compile(&C, top) && emit(&C, I_SAVE, 1, 0) >= 0)
        emit(&C, I_MATCH, 0, 0);
    if (P.rc) {
        free(C.prog);
        free(P.nodes);
        free(P.sets);
        free(re);
        return P.rc;
    }
    re->prog = C.prog;
    re->n_prog = C.n;
    re->sets = P.sets;
    re->n_caps = (uint32_t)P.n_caps + 1;
    re->n_slots = C.loop_base + (uint32_t)P.n_loops;
    /* ^ first in the only alternative: no match can start past 0 */
    const rnode *t = &P.nodes[top];
    if (P.nodes[t->first].next < 0) {
        int f = P.nodes[t->first].first;
        re->anchored = f >= 0 && P.nodes[f].kind == N_BOL;
    }
    re->full = n >= 2 && pat[0] == '^' && pat[n - 1] == '$';
    free(P.nodes);
    *out = re;
    return 0;
}

/* ---- matching ---------------------------------------------------------- */

typedef struct {
    uint32_t pc;   /* UINT32_MAX: a slot to restore */
    uint32_t slot;
    size_t v;      /* the thread's position, or the slot's old value */
} rframe;

typedef struct {
    const mu_re *re;
    const uint8_t *s;
    size_t n;
    uint64_t steps;
    size_t live; /* backtracking entries held, lookaheads' stacks included */
    bool full; /* a match must end at n (std::regex_match) */
    int rc;
    mu_err *err;
} rrun;

static bool push(rrun *R, rframe **st, size_t *len, size_t *cap, rframe f) {
    if (R->live >= MAX_STACK) {
        R->rc = mu_fail(R->err, MU_E_ARG, "regex: the match needs more than %u backtracking entries", MAX_STACK);
        return false;
    }
    if (*len == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        rframe *ns = realloc(*st, nc * sizeof *ns);
        if (!ns) {
            R->rc = mu_fail(R->err, MU_E_NOMEM, "regex: out of memory");
            return false;
        }
        *st = ns;
        *cap = nc;
    }
    (*st)[(*len)++] = f;
    R->live++;
    return true;
}

/* Runs the program from pc at position sp; 1 match (slots hold its
 * captures), 0 none, -1 error (R->rc). end_ok: MATCH needs sp == n. */
static int run(rrun *R, uint32_t pc0, size_t sp0, size_t *slots, bool end_ok) {
    const rinst *prog = R->re->prog;
    rframe *st = NULL;
    size_t len = 0, cap = 0;
    int res = 0;
    if (!push(R, &st, &len, &cap, (rframe){.pc = pc0, .v = sp0})) goto out;
    while (len) {
        rframe f = st[--len];
        R->live--;
        if (f.pc == UINT32_MAX) {
            slots[f.slot] = f.v;
            continue;
        }
        uint32_t pc = f.pc;
        size_t sp = f.v;
        for (;;) {
            if (++R->steps > MU_RE_MAX_STEPS) {
                R->rc = mu_fail(R->err, MU_E_ARG, "regex: the match took more than %u steps", MU_RE_MAX_STEPS);
                res = -1;
                goto out;
            }
            const rinst *in = &prog[pc];
            bool ok = true;
            switch (in->op) {
            case I_BYTE: ok = sp < R->n && R->s[sp] == in->x, sp++, pc++; break;
            case I_SET: ok = sp < R->n && set_has(R->re->sets[in->x], R->s[sp]), sp++, pc++; break;
            case I_ANY: ok = sp < R->n && R->s[sp] != '\n' && R->s[sp] != '\r', sp++, pc++; break;
            case I_JMP: pc = in->x; break;
            case I_SPLIT:
                if (!push(R, &st, &len, &cap, (rframe){.pc = in->y, .v = sp})) {
                    res = -1;
                    goto out;
                }
                pc = in->x;
                break;
            case I_SAVE:
                if (!push(R, &st, &len, &cap, (rframe){.pc = UINT32_MAX, .slot = in->x, .v = slots[in->x]})) {
                    res = -1;
                    goto out;
                }
                slots[in->x] = sp;
                pc++;
                break;
            case I_PROG: ok = slots[in->x] != sp, pc++; break; /* an empty iteration ends the loop */
            case I_BOL: ok = sp == 0, pc++; break;
            case I_EOL: ok = sp == R->n, pc++; break;
            case I_WB:
            case I_NWB: {
                bool a = sp > 0 && is_word(R->s[sp - 1]), b = sp < R->n && is_word(R->s[sp]);
                ok = (a != b) == (in->op == I_WB), pc++;
                break;
            }
            case I_LOOK: {
                size_t *tmp = malloc(R->re->n_slots * sizeof *tmp);
                if (!tmp) {
                    R->rc = mu_fail(R->err, MU_E_NOMEM, "regex: out of memory");
                    res = -1;
                    goto out;
                }
                memcpy(tmp, slots, R->re->n_slots * sizeof *tmp);
                int r = run(R, pc + 1, sp, tmp, false);
                free(tmp);
                if (r < 0) {
                    res = -1;
                    goto out;
                }
                ok = (r == 1) != in->neg;
                pc = in->x;
                break;
            }
            case I_MATCH:
                if (end_ok && sp != R->n) {
                    ok = false;
                    break;
                }
                res = 1;
                goto out;
            }
            if (!ok) break;
        }
    }
out:
    R->live -= len;
    free(st);
    return res;
}

static size_t start_of(const mu_re *re, const size_t *slots) {
    for (uint32_t g = 1; g < re->n_caps; g++) {
        size_t a = slots[2 * g], b = slots[2 * g + 1];
        if (a != SIZE_MAX && b != SIZE_MAX && b > a) return a;
    }
    return slots[0];
}

int mu_re_find(const mu_re *re, const char *s, size_t n, size_t *pos, mu_err *err) {
    size_t *slots = malloc(re->n_slots * sizeof *slots);
    if (!slots) return mu_fail(err, MU_E_NOMEM, "regex: out of memory");
    rrun R = {.re = re, .s = (const uint8_t *)s, .n = n, .err = err};
    *pos = SIZE_MAX;
    int r = 0;
    if (re->full) { /* std::regex_match over the whole input first */
        for (uint32_t k = 0; k < re->n_slots; k++) slots[k] = SIZE_MAX;
        r = run(&R, 0, 0, slots, true);
    }
    for (size_t start = 0; r == 0 && start <= n; start++) {
        for (uint32_t k = 0; k < re->n_slots; k++) slots[k] = SIZE_MAX;
        r = run(&R, 0, start, slots, false);
        if (re->anchored) break;
    }
    if (r == 1) *pos = start_of(re, slots);
    free(slots);
    return r < 0 ? R.rc : 0;
}
