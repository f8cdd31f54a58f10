/* jinja_eval.c: the Jinja2 evaluator and the public render entry points.
 * Owns: scopes (a fresh scope per loop iteration, per macro call and per
 * call/with block, as Jinja2 compiles them), statements, operators with
 * Python semantics (int/float/bool arithmetic, str and list concatenation,
 * chained comparisons, `in`), Undefined propagation (printing it gives "",
 * using it in arithmetic, attribute access or calls is an error carrying
 * Jinja2's message), macros and caller(), break/continue, and limits
 * (steps, recursion depth, output size, arena memory).
 * Does not: filters, tests, methods and globals (jinja_builtins.c).
 * Key choice: a tree-walking interpreter over the AST with errors recorded
 * once in the render state; every evaluation returns a value and callers
 * check r->failed, so no longjmp and no partial cleanup paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/mem.h"
#include "jinja_int.h"

static jv eval(jrender *r, jframe *f, jnode *n);
static void exec_body(jrender *r, jframe *f, jnode *body, jbuf *out);

/* ------------------------------------------------------------------ scopes */
static jframe *frame_new(jrender *r, jframe *parent) {
    jframe *f = ja_alloc(r->a, sizeof(jframe));
    if (!f) {
        jr_fail(r, MU_E_NOMEM, "memory limit reached");
        return NULL;
    }
    jv d = jv_dict_new(r, 4);
    if (r->failed) return NULL;
    f->parent = parent;
    f->vars = d.u.d;
    return f;
}

static const char *const GLOBALS[] = {"range", "dict", "namespace", "raise_exception", "strftime_now", NULL};

static jv lookup(jrender *r, jframe *f, const char *name) {
    size_t len = strlen(name);
    for (jframe *x = f; x; x = x->parent) {
        jv *v = jv_dict_gets(x->vars, name, len);
        if (v) return *v;
    }
    for (int i = 0; GLOBALS[i]; i++)
        if (!strcmp(GLOBALS[i], name)) {
            jfunc *fn = ja_alloc(r->a, sizeof(jfunc));
            if (!fn) return jr_fail(r, MU_E_NOMEM, "memory limit reached");
            fn->kind = JFN_GLOBAL;
            fn->name = GLOBALS[i];
            jv v = {0};
            v.t = JV_FUNC;
            v.u.fn = fn;
            return v;
        }
    char hint[160];
    snprintf(hint, sizeof hint, "'%.100s' is undefined", name);
    return jv_undef(hint, r);
}

static void assign(jrender *r, jframe *f, const char *name, jv v) { jv_dict_sets(r, f->vars, name, v); }

static jv undef_fail(jrender *r, jv u) {
    return jr_fail(r, MU_E_ARG, "%s", u.u.s ? u.u.s->s : "undefined value");
}

/* ------------------------------------------------------------------ operators */
static bool is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.u.f : (double)v.u.i; }

static const char *op_sym(int op) {
    switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "** or pow()";
    default: return "?";
    }
}

static jv seq_repeat(jrender *r, jv s, int64_t k) {
    if (k < 0) k = 0;
    if (s.t == JV_STR) {
        size_t total;
        if (!mu_mul_ok(s.u.s->len, (size_t)k, &total) || total > r->max_output)
            return jr_fail(r, MU_E_NOMEM, "string repetition too large");
        jv out = jv_strn(r, "", 0);
        jstr *p = ja_alloc(r->a, sizeof(jstr) + total + 1);
        if (!p) return jr_fail(r, MU_E_NOMEM, "memory limit reached");
        for (int64_t i = 0; i < k; i++) memcpy(p->s + (size_t)i * s.u.s->len, s.u.s->s, s.u.s->len);
        p->len = total;
        out.u.s = p;
        return out;
    }
    size_t total;
    if (!mu_mul_ok(s.u.l->n, (size_t)k, &total) || total > 10000000)
        return jr_fail(r, MU_E_NOMEM, "list repetition too large");
    jv out = jv_list_new(r, total);
    for (int64_t i = 0; i < k && !r->failed; i++)
        for (size_t j = 0; j < s.u.l->n; j++) jv_list_push(r, out, s.u.l->v[j]);
    out.flags = s.flags & JF_TUPLE;
    return out;
}

static jv binop(jrender *r, int op, jv a, jv b) {
    if (op == OP_TILDE) {
        jbuf buf = {0};
        jv_to_str(r, &buf, a);
        jv_to_str(r, &buf, b);
        jv out = r->failed ? jv_none() : jv_strn(r, buf.p ? buf.p : "", buf.n);
        free(buf.p);
        return out;
    }
    if (a.t == JV_UNDEF) return undef_fail(r, a);
    if (b.t == JV_UNDEF) return undef_fail(r, b);
    if (is_num(a) && is_num(b)) {
        bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
        int64_t x = a.u.i, y = b.u.i, z;
        double p = num_f(a), q = num_f(b);
        switch (op) {
        case OP_ADD:
            if (fl) return jv_float(p + q);
            if (__builtin_add_overflow(x, y, &z)) return jr_fail(r, MU_E_ARG, "integer overflow");
            return jv_int(z);
        case OP_SUB:
            if (fl) return jv_float(p - q);
            if (__builtin_sub_overflow(x, y, &z)) return jr_fail(r, MU_E_ARG, "integer overflow");
            return jv_int(z);
        case OP_MUL:
            if (fl) return jv_float(p * q);
            if (__builtin_mul_overflow(x, y, &z)) return jr_fail(r, MU_E_ARG, "integer overflow");
            return jv_int(z);
        case OP_DIV:
            if (q == 0) return jr_fail(r, MU_E_ARG, "division by zero");
            return jv_float(p / q);
        case OP_FLOORDIV:
            if (fl) {
                if (q == 0) return jr_fail(r, MU_E_ARG, "float floor division by zero");
                return jv_float(floor(p / q));
            }
            if (y == 0) return jr_fail(r, MU_E_ARG, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return jr_fail(r, MU_E_ARG, "integer overflow");
            z = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
            return jv_int(z);
        case OP_MOD:
            if (fl) {
                if (q == 0) return jr_fail(r, MU_E_ARG, "float modulo");
                double m = fmod(p, q);
                if (m != 0 && ((m < 0) != (q < 0))) m += q;
                return jv_float(m);
            }
            if (y == 0) return jr_fail(r, MU_E_ARG, "integer division or modulo by zero");
            if (y == -1) return jv_int(0);
            z = x % y;
            if (z != 0 && ((z < 0) != (y < 0))) z += y;
            return jv_int(z);
        case OP_POW:
            if (fl || y < 0) {
                if (p == 0 && q < 0) return jr_fail(r, MU_E_ARG, "0.0 cannot be raised to a negative power");
                return jv_float(pow(p, q));
            }
            z = 1;
            for (int64_t i = 0; i < y; i++) {
                if (__builtin_mul_overflow(z, x, &z)) return jr_fail(r, MU_E_ARG, "integer overflow");
                if (z == 0 || z == 1) break;
            }
            if (z == -1 || (x == -1)) z = (y % 2) ? x : 1;
            return jv_int(z);
        }
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        jbuf buf = {0};
        jb_put(r, &buf, a.u.s->s, a.u.s->len);
        jb_put(r, &buf, b.u.s->s, b.u.s->len);
        jv out = r->failed ? jv_none() : jv_strn(r, buf.p ? buf.p : "", buf.n);
        free(buf.p);
        return out;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && (a.flags & JF_TUPLE) == (b.flags & JF_TUPLE)) {
        jv out = jv_list_new(r, a.u.l->n + b.u.l->n);
        for (size_t i = 0; i < a.u.l->n && !r->failed; i++) jv_list_push(r, out, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n && !r->failed; i++) jv_list_push(r, out, b.u.l->v[i]);
        out.flags = a.flags & JF_TUPLE;
        return out;
    }
    if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL))
        return seq_repeat(r, a, b.u.i);
    if (op == OP_MUL && (b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL))
        return seq_repeat(r, b, a.u.i);
    if (op == OP_ADD && a.t == JV_STR)
        return jr_fail(r, MU_E_ARG, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (op == OP_ADD && a.t == JV_LIST)
        return jr_fail(r, MU_E_ARG, "can only concatenate list (not \"%s\") to list", jv_type_name(b));
    if (op == OP_MOD && a.t == JV_STR)
        return jr_fail(r, MU_E_UNSUPPORTED, "printf-style string formatting with %% is not supported");
    return jr_fail(r, MU_E_ARG, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op), jv_type_name(a),
                   jv_type_name(b));
}

/* Python `item in container`: 1, 0, or -1 on error */
static int contains(jrender *r, jv container, jv item) {
    switch (container.t) {
    case JV_UNDEF: return 0;
    case JV_STR:
        if (item.t == JV_UNDEF) return 0;
        if (item.t != JV_STR) {
            jr_fail(r, MU_E_ARG, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
            return -1;
        }
        if (item.u.s->len == 0) return 1;
        return memmem(container.u.s->s, container.u.s->len, item.u.s->s, item.u.s->len) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (jv_equal(container.u.l->v[i], item)) return 1;
        return 0;
    case JV_DICT: return jv_dict_get(container.u.d, item) != NULL;
    default:
        jr_fail(r, MU_E_ARG, "argument of type '%s' is not iterable", jv_type_name(container));
        return -1;
    }
}

static int compare_op(jrender *r, int op, jv a, jv b) {
    int c;
    switch (op) {
    case OP_EQ: return jv_equal(a, b);
    case OP_NE: return !jv_equal(a, b);
    case OP_IN: return contains(r, b, a);
    case OP_NOTIN: c = contains(r, b, a); return c < 0 ? -1 : !c;
    }
    c = jv_compare(r, a, b);
    if (c == -2) return -1;
    switch (op) {
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    case OP_GE: return c >= 0;
    }
    return -1;
}

/* ------------------------------------------------------------------ calls */
static bool eval_args(jrender *r, jframe *f, jnode *n, jargs *out) {
    memset(out, 0, sizeof *out);
    if (n->items.n) {
        out->pos = ja_alloc(r->a, n->items.n * sizeof(jv));
        if (!out->pos) {
            jr_fail(r, MU_E_NOMEM, "memory limit reached");
            return false;
        }
        for (size_t i = 0; i < n->items.n; i++) {
            out->pos[i] = eval(r, f, n->items.v[i]);
            if (r->failed) return false;
        }
        out->n_pos = n->items.n;
    }
    if (n->n_names) {
        out->kw = ja_alloc(r->a, n->n_names * sizeof(jv));
        if (!out->kw) {
            jr_fail(r, MU_E_NOMEM, "memory limit reached");
            return false;
        }
        for (size_t i = 0; i < n->n_names; i++) {
            out->kw[i] = eval(r, f, n->items2.v[i]);
            if (r->failed) return false;
        }
        out->kw_names = n->names;
        out->n_kw = n->n_names;
    }
    return true;
}

/* Does the subtree read the name `nm`? (Jinja2 lets a macro take extra
 * positional/keyword arguments only when its body reads varargs/kwargs.) */
static bool reads_name(jnode *n, const char *nm, int depth) {
    if (!n || depth > 400) return false;
    if (n->kind == N_NAME && !strcmp(n->name, nm)) return true;
    if (reads_name(n->a, nm, depth + 1) || reads_name(n->b, nm, depth + 1) || reads_name(n->c, nm, depth + 1) ||
        reads_name(n->d, nm, depth + 1))
        return true;
    for (size_t i = 0; i < n->items.n; i++)
        if (reads_name(n->items.v[i], nm, depth + 1)) return true;
    for (size_t i = 0; i < n->items2.n; i++)
        if (reads_name(n->items2.v[i], nm, depth + 1)) return true;
    return false;
}

static jv call_macro(jrender *r, jfunc *fn, jargs *args) {
    jnode *m = fn->node;
    if (!(m->op & 1)) { /* computed once per macro node */
        m->op = 1 | (reads_name(m->a, "varargs", 0) ? 2 : 0) | (reads_name(m->a, "kwargs", 0) ? 4 : 0);
    }
    if (args->n_pos > m->n_names && !(m->op & 2))
        return jr_fail(r, MU_E_ARG, "macro '%s' takes not more than %zu argument(s)", fn->name, m->n_names);
    for (size_t i = 0; i < args->n_kw && !(m->op & 4); i++) {
        bool known = !strcmp(args->kw_names[i], "caller") && fn->caller.t == JV_FUNC;
        for (size_t j = 0; j < m->n_names; j++) known = known || !strcmp(m->names[j], args->kw_names[i]);
        if (!known) return jr_fail(r, MU_E_ARG, "macro '%s' takes no keyword argument '%s'", fn->name, args->kw_names[i]);
    }
    if (r->depth >= r->max_depth) return jr_fail(r, MU_E_NOMEM, "recursion limit of %d calls exceeded", r->max_depth);
    jframe *f = frame_new(r, fn->closure);
    if (!f) return jv_none();
    jv varargs = jv_list_new(r, 4), kwargs = jv_dict_new(r, 4);
    if (r->failed) return jv_none();
    for (size_t i = 0; i < args->n_pos; i++) {
        if (i < m->n_names) assign(r, f, m->names[i], args->pos[i]);
        else jv_list_push(r, varargs, args->pos[i]);
    }
    for (size_t i = 0; i < args->n_kw; i++) {
        bool found = false;
        for (size_t j = 0; j < m->n_names; j++)
            if (!strcmp(m->names[j], args->kw_names[i])) {
                if (j < args->n_pos)
                    return jr_fail(r, MU_E_ARG, "macro '%s' got multiple values for argument '%s'", fn->name,
                                   m->names[j]);
                assign(r, f, m->names[j], args->kw[i]);
                found = true;
            }
        if (!found) jv_dict_sets(r, kwargs.u.d, args->kw_names[i], args->kw[i]);
    }
    for (size_t j = 0; j < m->n_names && !r->failed; j++) {
        if (jv_dict_gets(f->vars, m->names[j], strlen(m->names[j]))) continue;
        if (m->items2.v[j]) {
            jv d = eval(r, f, m->items2.v[j]);
            assign(r, f, m->names[j], d);
        } else {
            char hint[160];
            snprintf(hint, sizeof hint, "'%.100s' is undefined", m->names[j]);
            assign(r, f, m->names[j], jv_undef(hint, r));
        }
    }
    varargs.flags |= JF_TUPLE;
    assign(r, f, "varargs", varargs);
    assign(r, f, "kwargs", kwargs);
    if (fn->caller.t == JV_FUNC) assign(r, f, "caller", fn->caller);
    if (r->failed) return jv_none();
    jbuf out = {0};
    r->depth++;
    int saved_brk = r->brk;
    exec_body(r, f, m->a, &out);
    r->brk = saved_brk;
    r->depth--;
    jv res = r->failed ? jv_none() : jv_strn(r, out.p ? out.p : "", out.n);
    free(out.p);
    res.flags |= JF_SAFE;
    return res;
}

static jv call_caller(jrender *r, jfunc *fn, jargs *args) {
    jnode *cb = fn->node; /* CALLBLOCK: names/items2 params, b body */
    if (r->depth >= r->max_depth) return jr_fail(r, MU_E_NOMEM, "recursion limit of %d calls exceeded", r->max_depth);
    jframe *f = frame_new(r, fn->closure);
    if (!f) return jv_none();
    for (size_t i = 0; i < cb->n_names && !r->failed; i++) {
        jv v;
        bool have = false;
        if (i < args->n_pos) {
            v = args->pos[i];
            have = true;
        }
        for (size_t k = 0; k < args->n_kw; k++)
            if (!strcmp(args->kw_names[k], cb->names[i])) {
                v = args->kw[k];
                have = true;
            }
        if (!have) v = cb->items2.v[i] ? eval(r, f, cb->items2.v[i]) : jv_undef(NULL, r);
        assign(r, f, cb->names[i], v);
    }
    if (r->failed) return jv_none();
    jbuf out = {0};
    r->depth++;
    exec_body(r, f, cb->b, &out);
    r->depth--;
    jv res = r->failed ? jv_none() : jv_strn(r, out.p ? out.p : "", out.n);
    free(out.p);
    return res;
}

jv jinja_call(jrender *r, jv fn, jargs *args) {
    if (fn.t == JV_UNDEF) return undef_fail(r, fn);
    if (fn.t != JV_FUNC) return jr_fail(r, MU_E_ARG, "'%s' object is not callable", jv_type_name(fn));
    switch (fn.u.fn->kind) {
    case JFN_MACRO: return call_macro(r, fn.u.fn, args);
    case JFN_CALLER: return call_caller(r, fn.u.fn, args);
    case JFN_METHOD: return jinja_call_method(r, fn.u.fn->self, fn.u.fn->name, args);
    default: return jinja_call_global(r, fn.u.fn->name, args);
    }
}

/* ------------------------------------------------------------------ slices */
static jv do_slice(jrender *r, jv obj, jv a, jv b, jv c) {
    if (obj.t == JV_UNDEF) return undef_fail(r, obj);
    bool is_str = obj.t == JV_STR;
    if (!is_str && obj.t != JV_LIST) return jr_fail(r, MU_E_ARG, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t len = is_str ? (int64_t)u8_len(obj.u.s->s, obj.u.s->len) : (int64_t)obj.u.l->n;
    jv parts[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (parts[i].t != JV_NONE && parts[i].t != JV_UNDEF && parts[i].t != JV_INT && parts[i].t != JV_BOOL)
            return jr_fail(r, MU_E_ARG, "slice indices must be integers or None or have an __index__ method");
    int64_t step = (c.t == JV_INT || c.t == JV_BOOL) ? c.u.i : 1;
    if (step == 0) return jr_fail(r, MU_E_ARG, "slice step cannot be zero");
    int64_t start, stop;
    bool has_a = a.t == JV_INT || a.t == JV_BOOL, has_b = b.t == JV_INT || b.t == JV_BOOL;
    if (step > 0) {
        start = has_a ? a.u.i : 0;
        stop = has_b ? b.u.i : len;
        if (start < 0) start = start + len < 0 ? 0 : start + len;
        if (start > len) start = len;
        if (stop < 0) stop = stop + len < 0 ? 0 : stop + len;
        if (stop > len) stop = len;
    } else {
        start = has_a ? a.u.i : len - 1;
        stop = has_b ? b.u.i : -1;
        if (has_a) {
            if (start < 0) start = start + len < 0 ? -1 : start + len;
            if (start >= len) start = len - 1;
        }
        if (has_b) {
            if (stop < 0) stop = stop + len < 0 ? -1 : stop + len;
            if (stop >= len) stop = len - 1;
        }
    }
    if (is_str) {
        /* code point offsets */
        size_t *off = ja_alloc(r->a, ((size_t)len + 1) * sizeof(size_t));
        if (!off) return jr_fail(r, MU_E_NOMEM, "memory limit reached");
        size_t i = 0, k = 0, adv;
        while (i < obj.u.s->len) {
            off[k++] = i;
            u8_decode(obj.u.s->s + i, obj.u.s->len - i, &adv);
            i += adv;
        }
        off[k] = obj.u.s->len;
        jbuf buf = {0};
        for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step)
            jb_put(r, &buf, obj.u.s->s + off[x], off[x + 1] - off[x]);
        jv out = r->failed ? jv_none() : jv_strn(r, buf.p ? buf.p : "", buf.n);
        free(buf.p);
        return out;
    }
    jv out = jv_list_new(r, 4);
    for (int64_t x = start; (step > 0 ? x < stop : x > stop) && !r->failed; x += step)
        jv_list_push(r, out, obj.u.l->v[x]);
    out.flags = obj.flags & JF_TUPLE;
    return out;
}

/* ------------------------------------------------------------------ expressions */
static jv eval(jrender *r, jframe *f, jnode *n) {
    if (r->failed) return jv_none();
    if (++r->steps > r->max_steps) return jr_fail(r, MU_E_NOMEM, "step limit of %llu reached", (unsigned long long)r->max_steps);
    r->line = n->line;
    switch (n->kind) {
    case N_CONST: return n->val;
    case N_NAME: return lookup(r, f, n->name);
    case N_GETATTR: {
        jv o = eval(r, f, n->a);
        if (r->failed) return o;
        if (o.t == JV_UNDEF) return undef_fail(r, o);
        r->line = n->line;
        return jinja_getattr(r, o, n->name, strlen(n->name));
    }
    case N_GETITEM: {
        jv o = eval(r, f, n->a);
        jv k = eval(r, f, n->b);
        if (r->failed) return o;
        if (o.t == JV_UNDEF) return undef_fail(r, o);
        r->line = n->line;
        return jinja_getitem(r, o, k);
    }
    case N_SLICE: {
        jv o = eval(r, f, n->a);
        jv a = n->b ? eval(r, f, n->b) : jv_none();
        jv b = n->c ? eval(r, f, n->c) : jv_none();
        jv c = n->d ? eval(r, f, n->d) : jv_none();
        if (r->failed) return o;
        return do_slice(r, o, a, b, c);
    }
    case N_CALL: {
        jv fn = eval(r, f, n->a);
        jargs args;
        if (r->failed || !eval_args(r, f, n, &args)) return jv_none();
        r->line = n->line;
        return jinja_call(r, fn, &args);
    }
    case N_FILTER: {
        jv v = eval(r, f, n->a);
        jargs args;
        if (r->failed || !eval_args(r, f, n, &args)) return jv_none();
        r->line = n->line;
        return jinja_filter(r, n->name, v, &args);
    }
    case N_TEST: {
        jv v = eval(r, f, n->a);
        jargs args;
        if (r->failed || !eval_args(r, f, n, &args)) return jv_none();
        r->line = n->line;
        int t = jinja_test(r, n->name, v, &args);
        if (t < 0) return jv_none();
        return jv_bool(n->op ? !t : t);
    }
    case N_BINOP: {
        jv a = eval(r, f, n->a);
        jv b = eval(r, f, n->b);
        if (r->failed) return a;
        r->line = n->line;
        return binop(r, n->op, a, b);
    }
    case N_NEG:
    case N_POS: {
        jv a = eval(r, f, n->a);
        if (r->failed) return a;
        if (a.t == JV_UNDEF) return undef_fail(r, a);
        if (a.t == JV_FLOAT) return jv_float(n->kind == N_NEG ? -a.u.f : a.u.f);
        if (a.t == JV_INT || a.t == JV_BOOL) {
            if (n->kind == N_POS) return jv_int(a.u.i);
            if (a.u.i == INT64_MIN) return jr_fail(r, MU_E_ARG, "integer overflow");
            return jv_int(-a.u.i);
        }
        return jr_fail(r, MU_E_ARG, "bad operand type for unary %s: '%s'", n->kind == N_NEG ? "-" : "+",
                       jv_type_name(a));
    }
    case N_NOT: {
        jv a = eval(r, f, n->a);
        return jv_bool(!jv_truthy(a));
    }
    case N_AND: {
        jv a = eval(r, f, n->a);
        if (r->failed || !jv_truthy(a)) return a;
        return eval(r, f, n->b);
    }
    case N_OR: {
        jv a = eval(r, f, n->a);
        if (r->failed || jv_truthy(a)) return a;
        return eval(r, f, n->b);
    }
    case N_COMPARE: {
        jv left = eval(r, f, n->a);
        for (size_t i = 0; i < n->items.n; i++) {
            jv right = eval(r, f, n->items.v[i]);
            if (r->failed) return jv_none();
            r->line = n->line;
            int c = compare_op(r, n->ops[i], left, right);
            if (c < 0) return jv_none();
            if (!c) return jv_bool(false);
            left = right;
        }
        return jv_bool(true);
    }
    case N_COND: {
        jv c = eval(r, f, n->a);
        if (r->failed) return c;
        if (jv_truthy(c)) return eval(r, f, n->b);
        if (n->c) return eval(r, f, n->c);
        return jv_undef("the inline if-expression evaluated to false and no else section was defined.", r);
    }
    case N_LIST:
    case N_TUPLE: {
        jv l = jv_list_new(r, n->items.n);
        for (size_t i = 0; i < n->items.n && !r->failed; i++) jv_list_push(r, l, eval(r, f, n->items.v[i]));
        if (n->kind == N_TUPLE) l.flags |= JF_TUPLE;
        return l;
    }
    case N_DICT: {
        jv d = jv_dict_new(r, n->items.n);
        for (size_t i = 0; i < n->items.n && !r->failed; i++) {
            jv k = eval(r, f, n->items.v[i]);
            jv v = eval(r, f, n->items2.v[i]);
            if (r->failed) break;
            if (k.t == JV_LIST && !(k.flags & JF_TUPLE)) return jr_fail(r, MU_E_ARG, "unhashable type: 'list'");
            if (k.t == JV_DICT) return jr_fail(r, MU_E_ARG, "unhashable type: 'dict'");
            jv_dict_set(r, d.u.d, k, v);
        }
        return d;
    }
    }
    return jr_fail(r, MU_E_STATE, "internal: bad expression node %d", n->kind);
}

/* ------------------------------------------------------------------ statements */
static void output_value(jrender *r, jv v, jbuf *out) {
    if (v.t == JV_UNDEF) return;
    jv_to_str(r, out, v);
}

static jv apply_filters(jrender *r, jframe *f, jnode *chain, jv v) {
    for (size_t i = 0; i < chain->items.n && !r->failed; i++) {
        jnode *fl = chain->items.v[i];
        jargs args;
        if (!eval_args(r, f, fl, &args)) break;
        r->line = fl->line;
        v = jinja_filter(r, fl->name, v, &args);
    }
    return v;
}

static void bind_targets(jrender *r, jframe *f, jnode *n, jv v) {
    if (n->n_names == 1) {
        assign(r, f, n->names[0], v);
        return;
    }
    jv items = jinja_iterate(r, v);
    if (r->failed) return;
    if (items.u.l->n != n->n_names) {
        jr_fail(r, MU_E_ARG, "%s values to unpack (expected %zu, got %zu)",
                items.u.l->n > n->n_names ? "too many" : "not enough", n->n_names, items.u.l->n);
        return;
    }
    for (size_t i = 0; i < n->n_names; i++) assign(r, f, n->names[i], items.u.l->v[i]);
}

static void exec_for(jrender *r, jframe *f, jnode *n, jbuf *out) {
    jv it = eval(r, f, n->a);
    if (r->failed) return;
    r->line = n->line;
    jv items = jinja_iterate(r, it);
    if (r->failed) return;
    if (n->d) { /* for x in y if cond: filter first, loop.length counts the kept items */
        jv kept = jv_list_new(r, items.u.l->n);
        for (size_t i = 0; i < items.u.l->n && !r->failed; i++) {
            jframe *tf = frame_new(r, f);
            if (!tf) return;
            bind_targets(r, tf, n, items.u.l->v[i]);
            jv c = eval(r, tf, n->d);
            if (jv_truthy(c)) jv_list_push(r, kept, items.u.l->v[i]);
        }
        items = kept;
    }
    size_t len = items.u.l->n;
    if (len == 0) {
        if (n->c) exec_body(r, f, n->c, out);
        return;
    }
    for (size_t i = 0; i < len && !r->failed; i++) {
        jframe *lf = frame_new(r, f);
        if (!lf) return;
        jv loop = jv_dict_new(r, 12);
        if (r->failed) return;
        loop.flags = JF_LOOP;
        jdict *d = loop.u.d;
        jv_dict_sets(r, d, "index", jv_int((int64_t)i + 1));
        jv_dict_sets(r, d, "index0", jv_int((int64_t)i));
        jv_dict_sets(r, d, "revindex", jv_int((int64_t)(len - i)));
        jv_dict_sets(r, d, "revindex0", jv_int((int64_t)(len - i - 1)));
        jv_dict_sets(r, d, "first", jv_bool(i == 0));
        jv_dict_sets(r, d, "last", jv_bool(i + 1 == len));
        jv_dict_sets(r, d, "length", jv_int((int64_t)len));
        jv_dict_sets(r, d, "depth", jv_int(1));
        jv_dict_sets(r, d, "depth0", jv_int(0));
        if (i > 0) jv_dict_sets(r, d, "previtem", items.u.l->v[i - 1]);
        if (i + 1 < len) jv_dict_sets(r, d, "nextitem", items.u.l->v[i + 1]);
        assign(r, lf, "loop", loop);
        bind_targets(r, lf, n, items.u.l->v[i]);
        if (r->failed) return;
        exec_body(r, lf, n->b, out);
        if (r->brk == 1) {
            r->brk = 0;
            break;
        }
        r->brk = 0;
    }
}

static void exec_stmt(jrender *r, jframe *f, jnode *n, jbuf *out) {
    if (++r->steps > r->max_steps) {
        jr_fail(r, MU_E_NOMEM, "step limit of %llu reached", (unsigned long long)r->max_steps);
        return;
    }
    r->line = n->line;
    switch (n->kind) {
    case N_DATA: jb_put(r, out, n->val.u.s->s, n->val.u.s->len); return;
    case N_PRINT: {
        jv v = eval(r, f, n->a);
        if (!r->failed) output_value(r, v, out);
        return;
    }
    case N_IF: {
        jv c = eval(r, f, n->a);
        if (r->failed) return;
        if (jv_truthy(c)) exec_body(r, f, n->b, out);
        else if (n->c) {
            if (n->c->kind == N_IF) exec_stmt(r, f, n->c, out);
            else exec_body(r, f, n->c, out);
        }
        return;
    }
    case N_FOR: exec_for(r, f, n, out); return;
    case N_SET: {
        jv v = eval(r, f, n->a);
        if (r->failed) return;
        if (n->op == 1) {
            jv ns = lookup(r, f, n->name);
            if (r->failed) return;
            r->line = n->line;
            if (ns.t != JV_DICT || !(ns.flags & JF_NS)) {
                jr_fail(r, MU_E_ARG, "Cannot assign attribute on non-namespace object");
                return;
            }
            jv_dict_sets(r, ns.u.d, n->names[0], v);
            return;
        }
        bind_targets(r, f, n, v);
        return;
    }
    case N_SETBLOCK: {
        jbuf tmp = {0};
        exec_body(r, f, n->a, &tmp);
        jv v = r->failed ? jv_none() : jv_strn(r, tmp.p ? tmp.p : "", tmp.n);
        free(tmp.p);
        if (r->failed) return;
        v = apply_filters(r, f, n, v);
        if (!r->failed) assign(r, f, n->name, v);
        return;
    }
    case N_MACRO: {
        jfunc *fn = ja_alloc(r->a, sizeof(jfunc));
        if (!fn) {
            jr_fail(r, MU_E_NOMEM, "memory limit reached");
            return;
        }
        fn->kind = JFN_MACRO;
        fn->name = n->name;
        fn->node = n;
        fn->closure = f;
        jv v = {0};
        v.t = JV_FUNC;
        v.u.fn = fn;
        assign(r, f, n->name, v);
        return;
    }
    case N_CALLBLOCK: {
        jnode *call = n->a;
        jv fnv = eval(r, f, call->a);
        jargs args;
        if (r->failed || !eval_args(r, f, call, &args)) return;
        jfunc *caller = ja_alloc(r->a, sizeof(jfunc));
        if (!caller) {
            jr_fail(r, MU_E_NOMEM, "memory limit reached");
            return;
        }
        caller->kind = JFN_CALLER;
        caller->name = "caller";
        caller->node = n;
        caller->closure = f;
        if (fnv.t != JV_FUNC || fnv.u.fn->kind != JFN_MACRO) {
            if (fnv.t == JV_UNDEF) undef_fail(r, fnv);
            else jr_fail(r, MU_E_ARG, "call block needs a macro");
            return;
        }
        jfunc *bound = ja_alloc(r->a, sizeof(jfunc));
        if (!bound) {
            jr_fail(r, MU_E_NOMEM, "memory limit reached");
            return;
        }
        *bound = *fnv.u.fn;
        bound->caller.t = JV_FUNC;
        bound->caller.u.fn = caller;
        jv v = call_macro(r, bound, &args);
        if (!r->failed) output_value(r, v, out);
        return;
    }
    case N_FILTERBLOCK: {
        jbuf tmp = {0};
        exec_body(r, f, n->a, &tmp);
        jv v = r->failed ? jv_none() : jv_strn(r, tmp.p ? tmp.p : "", tmp.n);
        free(tmp.p);
        if (r->failed) return;
        v = apply_filters(r, f, n, v);
        if (!r->failed) output_value(r, v, out);
        return;
    }
    case N_WITH: {
        jframe *wf = frame_new(r, f);
        if (!wf) return;
        for (size_t i = 0; i < n->n_names && !r->failed; i++) assign(r, wf, n->names[i], eval(r, f, n->items2.v[i]));
        if (!r->failed) exec_body(r, wf, n->a, out);
        return;
    }
    case N_BREAK: r->brk = 1; return;
    case N_CONTINUE: r->brk = 2; return;
    case N_BODY: exec_body(r, f, n, out); return;
    }
    jr_fail(r, MU_E_STATE, "internal: bad statement node %d", n->kind);
}

static void exec_body(jrender *r, jframe *f, jnode *body, jbuf *out) {
    for (size_t i = 0; i < body->items.n && !r->failed && !r->brk; i++) exec_stmt(r, f, body->items.v[i], out);
}

/* ------------------------------------------------------------------ static checks */
/* Jinja2 rejects unknown filters and tests when it compiles the template,
 * except inside `if` bodies and inline-if branches, where it defers the
 * error to run time (both verified against jinja2 3.1); break/continue
 * outside a loop are syntax errors. */
static int check_tree(jnode *n, int in_loop, int in_cond, mu_err *err) {
    if (!n) return 0;
    if (!in_cond && n->kind == N_FILTER && !jinja_has_filter(n->name))
        return mu_fail(err, MU_E_FORMAT, "jinja: line %d: No filter named '%.60s'.", n->line, n->name);
    if (!in_cond && n->kind == N_TEST && !jinja_has_test(n->name))
        return mu_fail(err, MU_E_FORMAT, "jinja: line %d: No test named '%.60s'.", n->line, n->name);
    if ((n->kind == N_BREAK || n->kind == N_CONTINUE) && !in_loop)
        return mu_fail(err, MU_E_FORMAT, "jinja: line %d: Encountered unknown tag '%s'.", n->line,
                       n->kind == N_BREAK ? "break" : "continue");
    if (n->kind == N_MACRO) in_loop = 0;
    int branch = (n->kind == N_IF || n->kind == N_COND) ? 1 : in_cond;
    int rc;
    if ((rc = check_tree(n->a, in_loop, n->kind == N_COND ? in_cond : in_cond, err))) return rc;
    if ((rc = check_tree(n->c, in_loop, branch, err)) || (rc = check_tree(n->d, in_loop, in_cond, err))) return rc;
    if ((rc = check_tree(n->b, n->kind == N_FOR ? 1 : (n->kind == N_CALLBLOCK ? 0 : in_loop), branch, err)))
        return rc;
    for (size_t i = 0; i < n->items.n; i++)
        if ((rc = check_tree(n->items.v[i], in_loop, in_cond, err))) return rc;
    for (size_t i = 0; i < n->items2.n; i++)
        if ((rc = check_tree(n->items2.v[i], in_loop, in_cond, err))) return rc;
    return 0;
}

/* ------------------------------------------------------------------ entry points */
int mu_jinja_render_opts(const char *tmpl, size_t len, const json_t *ctx, const mu_jinja_opts *opts, char **out,
                         size_t *out_len, mu_err *err) {
    mu_jinja_opts o = {.now_unix = -1};
    if (opts) o = *opts;
    if (!o.max_output_bytes) o.max_output_bytes = (size_t)16 << 20;
    if (!o.max_memory_bytes) o.max_memory_bytes = (size_t)256 << 20;
    if (!o.max_steps) o.max_steps = 50000000;
    if (!o.max_depth) o.max_depth = 64;
    if (!tmpl && len) return mu_fail(err, MU_E_ARG, "jinja: template is NULL");
    if (ctx && !json_is_object(ctx)) return mu_fail(err, MU_E_ARG, "jinja: context is not a JSON object");

    jarena arena = {.limit = o.max_memory_bytes};
    jlex_out lx;
    jnode *root = NULL;
    int rc = jinja_lex(&arena, tmpl ? tmpl : "", len, &lx, err);
    if (rc == 0) rc = jinja_parse(&arena, &lx, &root, err);
    if (rc == 0) rc = check_tree(root, 0, 0, err);
    if (rc) {
        ja_free_all(&arena);
        return rc;
    }
    jrender r = {.a = &arena, .err = err, .line = 1, .max_steps = o.max_steps, .max_depth = o.max_depth,
                 .max_output = o.max_output_bytes, .now_unix = o.now_unix < 0 ? (int64_t)time(NULL) : o.now_unix};
    jbuf buf = {0};
    jframe *g = frame_new(&r, NULL);
    if (g && ctx) {
        jv c = jv_from_json(&r, ctx);
        if (!r.failed) g->vars = c.u.d;
    }
    r.globals = g;
    jframe *top = r.failed ? NULL : frame_new(&r, g);
    if (top) exec_body(&r, top, root, &buf);
    if (!r.failed && !jb_put(&r, &buf, "", 0)) r.failed = true;
    ja_free_all(&arena);
    if (r.failed) {
        free(buf.p);
        if (arena.failed && r.code != MU_E_NOMEM) return mu_fail(err, MU_E_NOMEM, "jinja: memory limit reached");
        return r.code ? r.code : MU_E_ARG;
    }
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return 0;
}

int mu_jinja_render(const char *tmpl, size_t len, const json_t *ctx, char **out, size_t *out_len, mu_err *err) {
    mu_jinja_opts o = {.now_unix = -1};
    return mu_jinja_render_opts(tmpl, len, ctx, &o, out, out_len, err);
}
