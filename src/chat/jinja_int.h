/* jinja_int.h: internals shared by the jinja_*.c files (not a public API).
 * Values live in one arena per render and are freed all at once: no
 * reference counting, every value is a small struct passed by value. */
#ifndef MU_MODEL_JINJA_INT_H
#define MU_MODEL_JINJA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---- arena ---- */
typedef struct jarena_blk jarena_blk;
typedef struct jarena {
    jarena_blk *head;
    size_t used_total, limit;
    bool failed;
} jarena;
void *ja_alloc(jarena *a, size_t n); /* zeroed; NULL when over the limit */
void ja_free_all(jarena *a);

/* ---- values ---- */
enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC };
enum { JF_TUPLE = 1, JF_NS = 2, JF_LOOP = 4, JF_SAFE = 8 };

typedef struct jstr { size_t len; char s[]; } jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;

typedef struct jv {
    uint8_t t, flags;
    union {
        int64_t i;
        double f;
        jstr *s; /* JV_STR; JV_UNDEF: the "'x' is undefined" hint or NULL */
        jlist *l;
        jdict *d;
        jfunc *fn;
    } u;
} jv;

struct jlist { size_t n, cap; jv *v; };
struct jdict { size_t n, cap; jv *k, *v; };

/* ---- tokens ---- */
enum {
    TK_EOF, TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP
};
/* operator codes (TK_OP .op) */
enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_ASSIGN, OP_DOT, OP_COMMA,
    OP_COLON, OP_PIPE, OP_LPAREN, OP_RPAREN, OP_LBRACKET, OP_RBRACKET,
    OP_LBRACE, OP_RBRACE, OP_SEMI,
    /* not lexer operators, used by the evaluator */
    OP_IN, OP_NOTIN
};

typedef struct jtok {
    int type, op, line;
    const char *s; /* NAME/DATA/STRING (decoded) text, arena owned */
    size_t len;
    int64_t i;
    double f;
} jtok;

typedef struct jlex_out { jtok *toks; size_t n; } jlex_out;

/* Lexes src (already any bytes); returns 0 or MU_E_FORMAT / MU_E_NOMEM. */
int jinja_lex(jarena *a, const char *src, size_t len, jlex_out *out, mu_err *err);

/* ---- AST ---- */
enum {
    /* statements */
    N_BODY, N_DATA, N_PRINT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_BREAK, N_CONTINUE, N_WITH,
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_BINOP,
    N_NEG, N_POS, N_NOT, N_AND, N_OR, N_COMPARE, N_COND, N_LIST, N_TUPLE, N_DICT
};

typedef struct jnode jnode;
typedef struct jnodes { jnode **v; size_t n, cap; } jnodes;

struct jnode {
    int kind, line, op;
    jv val;             /* N_CONST, N_DATA (string) */
    const char *name;   /* NAME, GETATTR attr, FILTER/TEST name, MACRO name, SET attr */
    jnode *a, *b, *c, *d; /* children: see jinja_parse.c */
    jnodes items;       /* BODY statements, LIST/TUPLE/DICT keys, CALL/FILTER/TEST positional args */
    jnodes items2;      /* DICT values, CALL/FILTER kw values, IF else, FOR else, MACRO defaults */
    const char **names; /* kw names, macro params, COMPARE is unused */
    size_t n_names;
    int *ops;           /* COMPARE ops (n = items.n) */
};

/* Parses tokens into a body node; 0 or MU_E_FORMAT with "jinja: line N: ...". */
int jinja_parse(jarena *a, const jlex_out *lx, jnode **out, mu_err *err);

/* ---- render state ---- */
typedef struct jframe jframe;
struct jframe {
    jframe *parent;
    jdict *vars;
};

struct jfunc {
    int kind;          /* JFN_* */
    const char *name;
    jnode *node;       /* MACRO / caller body */
    jframe *closure;
    jv self;           /* bound method receiver */
    jv caller;         /* a macro called from a call block */
};
enum { JFN_MACRO, JFN_CALLER, JFN_METHOD, JFN_GLOBAL };

typedef struct jbuf { char *p; size_t n, cap; } jbuf;

typedef struct jrender {
    jarena *a;
    mu_err *err;
    bool failed;
    int code;
    int line;            /* line of the node being evaluated */
    uint64_t steps, max_steps;
    int depth, max_depth;
    size_t max_output;
    int64_t now_unix;
    int brk;             /* 1 break, 2 continue pending */
    bool json_ascii;     /* tojson(ensure_ascii=True) in progress */
    jframe *globals;
} jrender;

/* errors: set once (the first error wins), return an undefined value */
jv jr_fail(jrender *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- value helpers (jinja_value.c) ---- */
jv jv_undef(const char *hint_or_null, jrender *r);
jv jv_undef_attr(jrender *r, jv obj, const char *name);
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.t = JV_BOOL; v.u.i = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.u.f = f; return v; }
jv jv_strn(jrender *r, const char *s, size_t n);
jv jv_str(jrender *r, const char *s);
jv jv_list_new(jrender *r, size_t cap);
bool jv_list_push(jrender *r, jv list, jv item);
jv jv_dict_new(jrender *r, size_t cap);
bool jv_dict_set(jrender *r, jdict *d, jv key, jv val);
jv *jv_dict_get(jdict *d, jv key);
jv *jv_dict_gets(jdict *d, const char *key, size_t len);
bool jv_dict_sets(jrender *r, jdict *d, const char *key, jv val);

bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
/* -2: not comparable (error set), else -1/0/1 */
int jv_compare(jrender *r, jv a, jv b);
const char *jv_type_name(jv v); /* Python type names: 'dict', 'list', 'str', ... */

/* Python str() / repr() into a buffer */
bool jb_put(jrender *r, jbuf *b, const char *s, size_t n);
bool jb_puts(jrender *r, jbuf *b, const char *s);
bool jv_to_str(jrender *r, jbuf *b, jv v);
bool jv_to_repr(jrender *r, jbuf *b, jv v);
jv jv_as_str(jrender *r, jv v); /* str(v) as a new string value; strings pass through */
void jv_fmt_float(double f, char *buf, size_t cap); /* Python repr(float) */

/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) */
bool jv_to_json(jrender *r, jbuf *b, jv v, const char *indent, const char *item_sep,
                const char *key_sep, bool sort_keys, int level);
jv jv_from_json(jrender *r, const void *json_t_ptr);

/* UTF-8 helpers */
size_t u8_len(const char *s, size_t n);                      /* code points */
size_t u8_offset(const char *s, size_t n, size_t cp_index);  /* byte offset of code point i */
int u8_decode(const char *s, size_t n, size_t *adv);         /* -1 on invalid byte (adv=1) */
size_t u8_encode(int cp, char *out);

/* ---- builtins (jinja_builtins.c) ---- */
typedef struct jargs {
    jv *pos; size_t n_pos;
    const char **kw_names; jv *kw; size_t n_kw;
} jargs;
jv jinja_filter(jrender *r, const char *name, jv v, jargs *args);
bool jinja_has_filter(const char *name);
/* returns 0/1, or -1 on error */
int jinja_test(jrender *r, const char *name, jv v, jargs *args);
bool jinja_has_test(const char *name);
jv jinja_getattr(jrender *r, jv obj, const char *name, size_t len); /* obj.name */
jv jinja_getitem(jrender *r, jv obj, jv key);                       /* obj[key] */
jv jinja_call_method(jrender *r, jv self, const char *name, jargs *args);
jv jinja_call_global(jrender *r, const char *name, jargs *args);
jv jinja_iterate(jrender *r, jv v); /* list of items for `for`; error if not iterable */

/* ---- evaluator (jinja_eval.c) ---- */
jv jinja_call(jrender *r, jv fn, jargs *args);

#endif
