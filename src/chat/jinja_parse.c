/* jinja_parse.c: the Jinja2 parser: tokens -> AST (jnode).
 * Owns: statement tags (if/elif/else, for/else with a filter condition,
 * set and block set, macro, call, filter blocks, with, break/continue) and
 * the expression grammar with Jinja2's precedences:
 *   condexpr < or < and < not < compare (in, not in, ==, ...) < + - < ~
 *   < * / // % < ** < unary - + < primary/postfix (. [] ()) < | filter, is test
 * Does not: evaluate. Tags Jinja2 has but chat templates do not use
 * (include, import, extends, block, do, ...) are syntax errors that name the tag.
 * Node field use (a, b, c, d, items, items2, names):
 *   IF a=cond b=body c=else|elif;  FOR names=targets a=iter b=body c=else d=filter
 *   SET names=targets (op=1: name.names[0] namespace attribute) a=value
 *   SETBLOCK name a=body items=filters;  MACRO name names=params items2=defaults a=body
 *   CALLBLOCK a=call b=body names/items2=caller params;  FILTERBLOCK a=body items=filters
 *   WITH names/items2=assignments a=body;  CALL/FILTER/TEST a=operand items=args names/items2=kwargs
 *   SLICE a=obj b,c,d=start,stop,step;  COMPARE a=first items=rest ops=operators */
#include <stdio.h>
#include <string.h>

#include "jinja_int.h"

typedef struct parser {
    jarena *a;
    jtok *t;
    size_t n, i;
    mu_err *err;
    int rc;
    int depth;
} parser;

#define MAX_DEPTH 200

static jtok *cur(parser *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static jtok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }

static const char *tok_desc(jtok *t, char *buf, size_t cap) {
    static const char *opname[] = {"?", "+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=",
                                   ">", ">=", "=", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}", ";"};
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_NAME: snprintf(buf, cap, "'%.40s'", t->s); return buf;
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_OP: snprintf(buf, cap, "'%s'", t->op > 0 && t->op <= OP_SEMI ? opname[t->op] : "?"); return buf;
    }
    return "?";
}

static void *pfail(parser *P, int line, const char *fmt, const char *arg) {
    if (P->rc == 0) {
        P->rc = MU_E_FORMAT;
        char msg[200];
        snprintf(msg, sizeof msg, fmt, arg ? arg : "");
        mu_fail(P->err, MU_E_FORMAT, "jinja: line %d: %s", line, msg);
    }
    return NULL;
}

static void *unexpected(parser *P, const char *what) {
    char b[64], m[160];
    jtok *t = cur(P);
    snprintf(m, sizeof m, "unexpected %s, expected %s", tok_desc(t, b, sizeof b), what);
    return pfail(P, t->line, "%s", m);
}

static jnode *node(parser *P, int kind, int line) {
    jnode *n = ja_alloc(P->a, sizeof(jnode));
    if (!n) {
        if (P->rc == 0) {
            P->rc = MU_E_NOMEM;
            mu_fail(P->err, MU_E_NOMEM, "jinja: template too large");
        }
        return NULL;
    }
    n->kind = kind;
    n->line = line;
    return n;
}

static bool push(parser *P, jnodes *v, jnode *x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        jnode **nv = ja_alloc(P->a, nc * sizeof(jnode *));
        if (!nv) {
            if (P->rc == 0) {
                P->rc = MU_E_NOMEM;
                mu_fail(P->err, MU_E_NOMEM, "jinja: template too large");
            }
            return false;
        }
        if (v->n) memcpy(nv, v->v, v->n * sizeof(jnode *));
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return true;
}

static bool push_name(parser *P, jnode *n, const char *s) {
    const char **nv = ja_alloc(P->a, (n->n_names + 1) * sizeof(char *));
    if (!nv) {
        if (P->rc == 0) {
            P->rc = MU_E_NOMEM;
            mu_fail(P->err, MU_E_NOMEM, "jinja: template too large");
        }
        return false;
    }
    if (n->n_names) memcpy(nv, n->names, n->n_names * sizeof(char *));
    nv[n->n_names++] = s;
    n->names = nv;
    return true;
}

static bool is_op(parser *P, int op) { return cur(P)->type == TK_OP && cur(P)->op == op; }
static bool is_name(parser *P, const char *s) { return cur(P)->type == TK_NAME && strcmp(cur(P)->s, s) == 0; }
static bool accept_op(parser *P, int op) {
    if (!is_op(P, op)) return false;
    P->i++;
    return true;
}
static bool accept_name(parser *P, const char *s) {
    if (!is_name(P, s)) return false;
    P->i++;
    return true;
}
static bool expect_op(parser *P, int op, const char *what) {
    if (accept_op(P, op)) return true;
    unexpected(P, what);
    return false;
}

static jnode *parse_expr(parser *P, bool with_cond);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_or(parser *P);

/* ------------------------------------------------------------------ calls and filters */
static bool parse_call_args(parser *P, jnode *n) {
    /* after '(' */
    bool first = true;
    while (!is_op(P, OP_RPAREN)) {
        if (P->rc) return false;
        if (!first && !expect_op(P, OP_COMMA, "',' or ')'")) return false;
        if (is_op(P, OP_RPAREN)) break;
        first = false;
        if (is_op(P, OP_MUL) || is_op(P, OP_POW)) {
            pfail(P, cur(P)->line, "%s", "*args and **kwargs in calls are not supported");
            return false;
        }
        if (cur(P)->type == TK_NAME && peek(P, 1)->type == TK_OP && peek(P, 1)->op == OP_ASSIGN) {
            const char *k = cur(P)->s;
            P->i += 2;
            jnode *v = parse_expr(P, true);
            if (!v || !push_name(P, n, k) || !push(P, &n->items2, v)) return false;
        } else {
            if (n->n_names) {
                pfail(P, cur(P)->line, "%s", "positional argument follows keyword argument");
                return false;
            }
            jnode *v = parse_expr(P, true);
            if (!v || !push(P, &n->items, v)) return false;
        }
    }
    P->i++;
    return true;
}

static const char *parse_dotted_name(parser *P) {
    if (cur(P)->type != TK_NAME) return unexpected(P, "a name");
    const char *s = cur(P)->s;
    P->i++;
    while (is_op(P, OP_DOT) && peek(P, 1)->type == TK_NAME) {
        size_t l1 = strlen(s), l2 = strlen(peek(P, 1)->s);
        char *m = ja_alloc(P->a, l1 + l2 + 2);
        if (!m) return pfail(P, cur(P)->line, "%s", "template too large");
        memcpy(m, s, l1);
        m[l1] = '.';
        memcpy(m + l1 + 1, peek(P, 1)->s, l2 + 1);
        s = m;
        P->i += 2;
    }
    return s;
}

static jnode *parse_filter(parser *P, jnode *operand) {
    /* after '|' */
    int line = cur(P)->line;
    const char *name = parse_dotted_name(P);
    if (!name) return NULL;
    jnode *f = node(P, N_FILTER, line);
    if (!f) return NULL;
    f->a = operand;
    f->name = name;
    if (accept_op(P, OP_LPAREN) && !parse_call_args(P, f)) return NULL;
    return f;
}

static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

static jnode *parse_test(parser *P, jnode *operand) {
    /* after 'is' */
    int line = cur(P)->line;
    bool neg = accept_name(P, "not");
    const char *name = parse_dotted_name(P);
    if (!name) return NULL;
    jnode *t = node(P, N_TEST, line);
    if (!t) return NULL;
    t->a = operand;
    t->name = name;
    t->op = neg;
    jtok *c = cur(P);
    if (accept_op(P, OP_LPAREN)) {
        if (!parse_call_args(P, t)) return NULL;
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT || c->type == TK_FLOAT ||
                (c->type == TK_OP && (c->op == OP_LBRACKET || c->op == OP_LBRACE))) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) return pfail(P, c->line, "%s", "You cannot chain multiple tests with is");
        jnode *arg = parse_primary(P);
        if (!arg) return NULL;
        arg = parse_postfix(P, arg);
        if (!arg || !push(P, &t->items, arg)) return NULL;
    }
    return t;
}

/* ------------------------------------------------------------------ primary */
static jnode *parse_seq(parser *P, int kind, int close, int line) {
    jnode *n = node(P, kind, line);
    if (!n) return NULL;
    bool first = true;
    while (!is_op(P, close)) {
        if (P->rc) return NULL;
        if (!first && !expect_op(P, OP_COMMA, close == OP_RBRACKET ? "',' or ']'" : "',' or '}'")) return NULL;
        if (is_op(P, close)) break;
        first = false;
        jnode *k = parse_expr(P, true);
        if (!k || !push(P, &n->items, k)) return NULL;
        if (kind == N_DICT) {
            if (!expect_op(P, OP_COLON, "':'")) return NULL;
            jnode *v = parse_expr(P, true);
            if (!v || !push(P, &n->items2, v)) return NULL;
        }
    }
    P->i++;
    return n;
}

static jnode *parse_primary(parser *P) {
    jtok *t = cur(P);
    jnode *n;
    switch (t->type) {
    case TK_NAME:
        P->i++;
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            if (!(n = node(P, N_CONST, t->line))) return NULL;
            n->val = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
            return n;
        }
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            if (!(n = node(P, N_CONST, t->line))) return NULL;
            n->val = jv_none();
            return n;
        }
        if (!(n = node(P, N_NAME, t->line))) return NULL;
        n->name = t->s;
        return n;
    case TK_STRING: {
        /* adjacent string literals concatenate */
        size_t total = 0, j = P->i;
        while (j < P->n && P->t[j].type == TK_STRING) total += P->t[j++].len;
        char *s = ja_alloc(P->a, total + 1);
        if (!s) return pfail(P, t->line, "%s", "template too large");
        size_t k = 0;
        while (P->i < j) {
            memcpy(s + k, P->t[P->i].s, P->t[P->i].len);
            k += P->t[P->i].len;
            P->i++;
        }
        if (!(n = node(P, N_CONST, t->line))) return NULL;
        jstr *js = ja_alloc(P->a, sizeof(jstr) + total + 1);
        if (!js) return pfail(P, t->line, "%s", "template too large");
        js->len = total;
        memcpy(js->s, s, total);
        n->val.t = JV_STR;
        n->val.u.s = js;
        return n;
    }
    case TK_INT:
    case TK_FLOAT:
        P->i++;
        if (!(n = node(P, N_CONST, t->line))) return NULL;
        n->val = t->type == TK_INT ? jv_int(t->i) : jv_float(t->f);
        return n;
    case TK_OP:
        if (t->op == OP_LPAREN) {
            P->i++;
            if (accept_op(P, OP_RPAREN)) return node(P, N_TUPLE, t->line);
            jnode *e = parse_expr(P, true);
            if (!e) return NULL;
            if (is_op(P, OP_COMMA)) {
                jnode *tup = node(P, N_TUPLE, t->line);
                if (!tup || !push(P, &tup->items, e)) return NULL;
                while (accept_op(P, OP_COMMA)) {
                    if (is_op(P, OP_RPAREN)) break;
                    jnode *x = parse_expr(P, true);
                    if (!x || !push(P, &tup->items, x)) return NULL;
                }
                e = tup;
            }
            if (!expect_op(P, OP_RPAREN, "')'")) return NULL;
            return e;
        }
        if (t->op == OP_LBRACKET) {
            P->i++;
            return parse_seq(P, N_LIST, OP_RBRACKET, t->line);
        }
        if (t->op == OP_LBRACE) {
            P->i++;
            return parse_seq(P, N_DICT, OP_RBRACE, t->line);
        }
        break;
    default: break;
    }
    return unexpected(P, "an expression");
}

static jnode *parse_subscript(parser *P, jnode *obj, int line) {
    /* after '[' */
    jnode *parts[3] = {0};
    int np = 0;
    bool is_slice = false;
    for (;;) {
        if (is_op(P, OP_COLON)) {
            is_slice = true;
            P->i++;
            if (++np > 2) return pfail(P, line, "%s", "invalid slice");
            continue;
        }
        if (is_op(P, OP_RBRACKET)) break;
        if (parts[np]) return unexpected(P, "':' or ']'");
        parts[np] = parse_expr(P, true);
        if (!parts[np]) return NULL;
    }
    P->i++;
    jnode *n = node(P, is_slice ? N_SLICE : N_GETITEM, line);
    if (!n) return NULL;
    n->a = obj;
    if (is_slice) {
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
    } else {
        if (!parts[0]) return pfail(P, line, "%s", "expected an expression in subscript");
        n->b = parts[0];
    }
    return n;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    while (n && !P->rc) {
        jtok *t = cur(P);
        if (accept_op(P, OP_DOT)) {
            jtok *x = cur(P);
            if (x->type == TK_NAME) {
                P->i++;
                jnode *g = node(P, N_GETATTR, t->line);
                if (!g) return NULL;
                g->a = n;
                g->name = x->s;
                n = g;
            } else if (x->type == TK_INT) {
                P->i++;
                jnode *g = node(P, N_GETITEM, t->line), *k = node(P, N_CONST, t->line);
                if (!g || !k) return NULL;
                k->val = jv_int(x->i);
                g->a = n;
                g->b = k;
                n = g;
            } else
                return unexpected(P, "an attribute name");
        } else if (accept_op(P, OP_LBRACKET)) {
            n = parse_subscript(P, n, t->line);
        } else if (accept_op(P, OP_LPAREN)) {
            jnode *c = node(P, N_CALL, t->line);
            if (!c) return NULL;
            c->a = n;
            if (!parse_call_args(P, c)) return NULL;
            n = c;
        } else
            break;
    }
    return n;
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    while (n && !P->rc) {
        if (accept_op(P, OP_PIPE)) n = parse_filter(P, n);
        else if (accept_name(P, "is")) n = parse_test(P, n);
        else if (is_op(P, OP_LPAREN)) {
            int line = cur(P)->line;
            P->i++;
            jnode *c = node(P, N_CALL, line);
            if (!c) return NULL;
            c->a = n;
            if (!parse_call_args(P, c)) return NULL;
            n = c;
        } else
            break;
    }
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    jtok *t = cur(P);
    jnode *n;
    if (++P->depth > MAX_DEPTH) return pfail(P, t->line, "%s", "expression nested too deeply");
    if (is_op(P, OP_SUB) || is_op(P, OP_ADD)) {
        P->i++;
        n = node(P, t->op == OP_SUB ? N_NEG : N_POS, t->line);
        if (!n) return NULL;
        n->a = parse_unary(P, false);
        if (!n->a) return NULL;
    } else
        n = parse_primary(P);
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, int op, jnode *l, jnode *r, int line) {
    if (!l || !r) return NULL;
    jnode *n = node(P, N_BINOP, line);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *l = parse_unary(P, true);
    while (l && is_op(P, OP_POW)) {
        int line = cur(P)->line;
        P->i++;
        l = binop(P, OP_POW, l, parse_unary(P, true), line);
    }
    return l;
}

static jnode *parse_math2(parser *P) {
    jnode *l = parse_pow(P);
    while (l && (is_op(P, OP_MUL) || is_op(P, OP_DIV) || is_op(P, OP_FLOORDIV) || is_op(P, OP_MOD))) {
        jtok *t = cur(P);
        P->i++;
        l = binop(P, t->op, l, parse_pow(P), t->line);
    }
    return l;
}

static jnode *parse_concat(parser *P) {
    jnode *l = parse_math2(P);
    while (l && is_op(P, OP_TILDE)) {
        int line = cur(P)->line;
        P->i++;
        l = binop(P, OP_TILDE, l, parse_math2(P), line);
    }
    return l;
}

static jnode *parse_math1(parser *P) {
    jnode *l = parse_concat(P);
    while (l && (is_op(P, OP_ADD) || is_op(P, OP_SUB))) {
        jtok *t = cur(P);
        P->i++;
        l = binop(P, t->op, l, parse_concat(P), t->line);
    }
    return l;
}

static jnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    jnode *n = NULL;
    int ops[64];
    for (;;) {
        int op = 0;
        jtok *t = cur(P);
        if (t->type == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LE ||
                                 t->op == OP_GT || t->op == OP_GE)) {
            op = t->op;
            P->i++;
        } else if (is_name(P, "in")) {
            op = OP_IN;
            P->i++;
        } else if (is_name(P, "not") && peek(P, 1)->type == TK_NAME && !strcmp(peek(P, 1)->s, "in")) {
            op = OP_NOTIN;
            P->i += 2;
        } else
            break;
        if (!n) {
            n = node(P, N_COMPARE, line);
            if (!n) return NULL;
            n->a = first;
        }
        if (n->items.n >= 64) return pfail(P, line, "%s", "comparison chain too long");
        ops[n->items.n] = op;
        jnode *r = parse_math1(P);
        if (!r || !push(P, &n->items, r)) return NULL;
    }
    if (!n) return first;
    n->ops = ja_alloc(P->a, n->items.n * sizeof(int));
    if (!n->ops) return pfail(P, line, "%s", "template too large");
    memcpy(n->ops, ops, n->items.n * sizeof(int));
    return n;
}

static jnode *parse_not(parser *P) {
    if (is_name(P, "not")) {
        int line = cur(P)->line;
        P->i++;
        if (++P->depth > MAX_DEPTH) return pfail(P, line, "%s", "expression nested too deeply");
        jnode *n = node(P, N_NOT, line);
        if (!n) return NULL;
        n->a = parse_not(P);
        P->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *l = parse_not(P);
    while (l && is_name(P, "and")) {
        int line = cur(P)->line;
        P->i++;
        jnode *r = parse_not(P);
        if (!r) return NULL;
        jnode *n = node(P, N_AND, line);
        if (!n) return NULL;
        n->a = l;
        n->b = r;
        l = n;
    }
    return l;
}

static jnode *parse_or(parser *P) {
    jnode *l = parse_and(P);
    while (l && is_name(P, "or")) {
        int line = cur(P)->line;
        P->i++;
        jnode *r = parse_and(P);
        if (!r) return NULL;
        jnode *n = node(P, N_OR, line);
        if (!n) return NULL;
        n->a = l;
        n->b = r;
        l = n;
    }
    return l;
}

static jnode *parse_expr(parser *P, bool with_cond) {
    if (++P->depth > MAX_DEPTH) return pfail(P, cur(P)->line, "%s", "expression nested too deeply");
    jnode *e = parse_or(P);
    while (with_cond && e && is_name(P, "if")) {
        int line = cur(P)->line;
        P->i++;
        jnode *c = node(P, N_COND, line);
        if (!c) return NULL;
        c->b = e;
        c->a = parse_or(P);
        if (!c->a) return NULL;
        if (accept_name(P, "else")) {
            c->c = parse_expr(P, true);
            if (!c->c) return NULL;
        }
        e = c;
    }
    P->depth--;
    return e;
}

/* expression, or an implicit tuple `a, b` */
static jnode *parse_tuple(parser *P, bool with_cond) {
    int line = cur(P)->line;
    jnode *e = parse_expr(P, with_cond);
    if (!e || !is_op(P, OP_COMMA)) return e;
    jnode *t = node(P, N_TUPLE, line);
    if (!t || !push(P, &t->items, e)) return NULL;
    while (accept_op(P, OP_COMMA)) {
        jtok *c = cur(P);
        if (c->type == TK_VAR_END || c->type == TK_BLOCK_END || is_name(P, "if") || is_name(P, "recursive"))
            break;
        jnode *x = parse_expr(P, with_cond);
        if (!x || !push(P, &t->items, x)) return NULL;
    }
    return t;
}

/* ------------------------------------------------------------------ statements */
static jnode *parse_body(parser *P, const char *const *ends, const char **which);

static bool expect_block_end(parser *P) {
    if (cur(P)->type == TK_BLOCK_END) {
        P->i++;
        return true;
    }
    unexpected(P, "end of statement block");
    return false;
}

static bool parse_targets(parser *P, jnode *n) {
    bool paren = accept_op(P, OP_LPAREN);
    do {
        if (cur(P)->type != TK_NAME) {
            unexpected(P, "a name");
            return false;
        }
        if (!push_name(P, n, cur(P)->s)) return false;
        P->i++;
    } while (accept_op(P, OP_COMMA) && cur(P)->type == TK_NAME);
    if (paren && !expect_op(P, OP_RPAREN, "')'")) return false;
    return true;
}

static jnode *parse_filter_chain(parser *P, jnode *n) {
    /* name(args) | name2 ... until %} ; stored in n->items */
    do {
        jnode *f = parse_filter(P, NULL);
        if (!f || !push(P, &n->items, f)) return NULL;
    } while (accept_op(P, OP_PIPE));
    return n;
}

static bool parse_params(parser *P, jnode *n) {
    /* after '(' : name[=default], ... ')' */
    bool first = true;
    while (!is_op(P, OP_RPAREN)) {
        if (P->rc) return false;
        if (!first && !expect_op(P, OP_COMMA, "',' or ')'")) return false;
        if (is_op(P, OP_RPAREN)) break;
        first = false;
        if (cur(P)->type != TK_NAME) {
            unexpected(P, "a parameter name");
            return false;
        }
        if (!push_name(P, n, cur(P)->s)) return false;
        P->i++;
        jnode *def = NULL;
        if (accept_op(P, OP_ASSIGN)) {
            def = parse_expr(P, true);
            if (!def) return false;
        }
        if (!push(P, &n->items2, def)) return false;
    }
    P->i++;
    return true;
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_ENDIF[] = {"endif", NULL};
static const char *const END_FOR[] = {"else", "endfor", NULL};
static const char *const END_ENDFOR[] = {"endfor", NULL};

static jnode *parse_if(parser *P, int line) {
    jnode *n = node(P, N_IF, line);
    if (!n) return NULL;
    n->a = parse_tuple(P, true);
    if (!n->a || !expect_block_end(P)) return NULL;
    const char *which;
    n->b = parse_body(P, END_IF, &which);
    if (!n->b) return NULL;
    if (!strcmp(which, "elif")) {
        n->c = parse_if(P, cur(P)->line);
        return n->c ? n : NULL;
    }
    if (!strcmp(which, "else")) {
        if (!expect_block_end(P)) return NULL;
        n->c = parse_body(P, END_ENDIF, &which);
        if (!n->c) return NULL;
    }
    return expect_block_end(P) ? n : NULL;
}

static jnode *parse_stmt(parser *P) {
    jtok *t = cur(P);
    int line = t->line;
    if (t->type != TK_NAME) return unexpected(P, "a statement name");
    const char *kw = t->s;
    P->i++;
    jnode *n;
    const char *which;
    if (!strcmp(kw, "if")) return parse_if(P, line);
    if (!strcmp(kw, "for")) {
        if (!(n = node(P, N_FOR, line)) || !parse_targets(P, n)) return NULL;
        if (!accept_name(P, "in")) return unexpected(P, "'in'");
        n->a = parse_tuple(P, false);
        if (!n->a) return NULL;
        if (accept_name(P, "if")) {
            n->d = parse_expr(P, true);
            if (!n->d) return NULL;
        }
        if (is_name(P, "recursive")) return pfail(P, line, "%s", "recursive for loops are not supported");
        if (!expect_block_end(P)) return NULL;
        n->b = parse_body(P, END_FOR, &which);
        if (!n->b) return NULL;
        if (!strcmp(which, "else")) {
            if (!expect_block_end(P)) return NULL;
            n->c = parse_body(P, END_ENDFOR, &which);
            if (!n->c) return NULL;
        }
        return expect_block_end(P) ? n : NULL;
    }
    if (!strcmp(kw, "set")) {
        if (cur(P)->type != TK_NAME) return unexpected(P, "a name");
        /* namespace attribute: set ns.attr = value */
        if (peek(P, 1)->type == TK_OP && peek(P, 1)->op == OP_DOT) {
            if (!(n = node(P, N_SET, line))) return NULL;
            n->op = 1;
            n->name = cur(P)->s;
            P->i += 2;
            if (cur(P)->type != TK_NAME) return unexpected(P, "an attribute name");
            if (!push_name(P, n, cur(P)->s)) return NULL;
            P->i++;
            if (!expect_op(P, OP_ASSIGN, "'='")) return NULL;
            n->a = parse_tuple(P, true);
            return (n->a && expect_block_end(P)) ? n : NULL;
        }
        if (!(peek(P, 1)->type == TK_OP && peek(P, 1)->op == OP_ASSIGN) &&
            !(peek(P, 1)->type == TK_OP && peek(P, 1)->op == OP_COMMA)) {
            /* block set */
            if (!(n = node(P, N_SETBLOCK, line))) return NULL;
            n->name = cur(P)->s;
            P->i++;
            if (accept_op(P, OP_PIPE) && !parse_filter_chain(P, n)) return NULL;
            if (!expect_block_end(P)) return NULL;
            static const char *const E[] = {"endset", NULL};
            n->a = parse_body(P, E, &which);
            return (n->a && expect_block_end(P)) ? n : NULL;
        }
        if (!(n = node(P, N_SET, line)) || !parse_targets(P, n)) return NULL;
        if (!expect_op(P, OP_ASSIGN, "'='")) return NULL;
        n->a = parse_tuple(P, true);
        return (n->a && expect_block_end(P)) ? n : NULL;
    }
    if (!strcmp(kw, "macro")) {
        if (cur(P)->type != TK_NAME) return unexpected(P, "a macro name");
        if (!(n = node(P, N_MACRO, line))) return NULL;
        n->name = cur(P)->s;
        P->i++;
        if (!expect_op(P, OP_LPAREN, "'('") || !parse_params(P, n) || !expect_block_end(P)) return NULL;
        static const char *const E[] = {"endmacro", NULL};
        n->a = parse_body(P, E, &which);
        if (!n->a) return NULL;
        if (cur(P)->type == TK_NAME) P->i++; /* {% endmacro name %} */
        return expect_block_end(P) ? n : NULL;
    }
    if (!strcmp(kw, "call")) {
        if (!(n = node(P, N_CALLBLOCK, line))) return NULL;
        if (accept_op(P, OP_LPAREN) && !parse_params(P, n)) return NULL;
        n->a = parse_expr(P, true);
        if (!n->a) return NULL;
        if (n->a->kind != N_CALL) return pfail(P, line, "%s", "expected a call expression after 'call'");
        if (!expect_block_end(P)) return NULL;
        static const char *const E[] = {"endcall", NULL};
        n->b = parse_body(P, E, &which);
        return (n->b && expect_block_end(P)) ? n : NULL;
    }
    if (!strcmp(kw, "filter")) {
        if (!(n = node(P, N_FILTERBLOCK, line)) || !parse_filter_chain(P, n) || !expect_block_end(P))
            return NULL;
        static const char *const E[] = {"endfilter", NULL};
        n->a = parse_body(P, E, &which);
        return (n->a && expect_block_end(P)) ? n : NULL;
    }
    if (!strcmp(kw, "with")) {
        if (!(n = node(P, N_WITH, line))) return NULL;
        while (cur(P)->type != TK_BLOCK_END) {
            if (n->n_names && !expect_op(P, OP_COMMA, "','")) return NULL;
            if (cur(P)->type != TK_NAME) return unexpected(P, "a name");
            if (!push_name(P, n, cur(P)->s)) return NULL;
            P->i++;
            if (!expect_op(P, OP_ASSIGN, "'='")) return NULL;
            jnode *v = parse_expr(P, true);
            if (!v || !push(P, &n->items2, v)) return NULL;
        }
        P->i++;
        static const char *const E[] = {"endwith", NULL};
        n->a = parse_body(P, E, &which);
        return (n->a && expect_block_end(P)) ? n : NULL;
    }
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        if (!(n = node(P, kw[0] == 'b' ? N_BREAK : N_CONTINUE, line))) return NULL;
        return expect_block_end(P) ? n : NULL;
    }
    if (!strcmp(kw, "include") || !strcmp(kw, "import") || !strcmp(kw, "from") || !strcmp(kw, "extends") ||
        !strcmp(kw, "block") || !strcmp(kw, "do") || !strcmp(kw, "autoescape") || !strcmp(kw, "trans"))
        return pfail(P, line, "unsupported tag '%s'", kw);
    return pfail(P, line, "Encountered unknown tag '%.60s'.", kw);
}

/* Parses statements until `{% <one of ends>`; leaves the cursor after the end
 * name (before its `%}`); ends == NULL parses to end of template. */
static jnode *parse_body(parser *P, const char *const *ends, const char **which) {
    jnode *body = node(P, N_BODY, cur(P)->line);
    if (!body) return NULL;
    if (++P->depth > MAX_DEPTH) return pfail(P, cur(P)->line, "%s", "blocks nested too deeply");
    for (;;) {
        if (P->rc) return NULL;
        jtok *t = cur(P);
        if (t->type == TK_EOF) {
            if (ends) {
                char m[120];
                snprintf(m, sizeof m, "Unexpected end of template. Jinja was looking for '%s'.", ends[0]);
                return pfail(P, t->line, "%s", m);
            }
            break;
        }
        if (t->type == TK_DATA) {
            jnode *d = node(P, N_DATA, t->line);
            if (!d) return NULL;
            jstr *s = ja_alloc(P->a, sizeof(jstr) + t->len + 1);
            if (!s) return pfail(P, t->line, "%s", "template too large");
            s->len = t->len;
            memcpy(s->s, t->s, t->len);
            d->val.t = JV_STR;
            d->val.u.s = s;
            if (!push(P, &body->items, d)) return NULL;
            P->i++;
            continue;
        }
        if (t->type == TK_VAR_BEGIN) {
            P->i++;
            jnode *p = node(P, N_PRINT, t->line);
            if (!p) return NULL;
            p->a = parse_tuple(P, true);
            if (!p->a) return NULL;
            if (cur(P)->type != TK_VAR_END) return unexpected(P, "end of print statement");
            P->i++;
            if (!push(P, &body->items, p)) return NULL;
            continue;
        }
        if (t->type == TK_BLOCK_BEGIN) {
            jtok *nm = peek(P, 1);
            if (nm->type == TK_NAME && ends) {
                for (int k = 0; ends[k]; k++)
                    if (!strcmp(nm->s, ends[k])) {
                        P->i += 2;
                        *which = ends[k];
                        P->depth--;
                        return body;
                    }
            }
            if (nm->type == TK_NAME &&
                (!strncmp(nm->s, "end", 3) || !strcmp(nm->s, "elif") || !strcmp(nm->s, "else"))) {
                char m[160];
                if (ends)
                    snprintf(m, sizeof m, "Encountered unknown tag '%.40s'. Jinja was looking for '%s'.",
                             nm->s, ends[0]);
                else
                    snprintf(m, sizeof m, "Encountered unknown tag '%.40s'.", nm->s);
                return pfail(P, nm->line, "%s", m);
            }
            P->i++;
            jnode *s = parse_stmt(P);
            if (!s || !push(P, &body->items, s)) return NULL;
            continue;
        }
        return unexpected(P, "template data or a tag");
    }
    P->depth--;
    return body;
}

int jinja_parse(jarena *a, const jlex_out *lx, jnode **out, mu_err *err) {
    parser P = {.a = a, .t = lx->toks, .n = lx->n, .err = err};
    const char *which = NULL;
    jnode *body = parse_body(&P, NULL, &which);
    if (!body) return P.rc ? P.rc : mu_fail(err, MU_E_FORMAT, "jinja: parse failed");
    *out = body;
    return 0;
}
