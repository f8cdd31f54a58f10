/* test_grammar.c: GBNF grammars (src/gen/grammar.c) against llama.cpp's
 * facts: the rule elements and symbol ids its parser produces (from
 * llama.cpp's test-grammar-parser.cpp), the grammars it refuses, the
 * strings its matcher accepts or rejects (test-grammar-integration.cpp);
 * our one-line errors; and, on the bundled model, the sampler order of
 * llama.cpp's common_sampler_sample (chain first, the grammar only on a
 * refused token, then the chain again over the masked logits) and
 * post-sampling probabilities. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../include/muser_gen.h"
#include "../../src/gen/gen.h"
#include "../../src/gen/grammar.h"

static mu_grammar *parse_ok(const char *text) {
    mu_grammar *g = NULL;
    mu_err err = {0};
    if (mu_grammar_new(text, NULL, &g, &err)) fail_msg("grammar %s: %s", text, err.msg);
    return g;
}

typedef struct {
    uint32_t type, value;
} el;

static void expect_rules(const char *text, const char *const *names, const uint32_t *ids, int n_sym, const el *want,
                         int n_want) {
    mu_grammar *g = parse_ok(text);
    assert_int_equal(mu_grammar_n_symbols(g), n_sym);
    for (int i = 0; i < n_sym; i++) assert_int_equal(mu_grammar_symbol(g, names[i]), ids[i]);
    int k = 0;
    for (uint32_t r = 0; r < mu_grammar_n_rules(g); r++) {
        size_t n;
        const mu_gelem *e = mu_grammar_rule(g, r, &n);
        for (size_t i = 0; i < n; i++, k++) {
            assert_true(k < n_want);
            assert_int_equal(e[i].type, want[k].type);
            assert_int_equal(e[i].value, want[k].value);
        }
    }
    assert_int_equal(k, n_want);
    mu_grammar_unref(g);
}

enum { END = MU_GE_END, ALT = MU_GE_ALT, REF = MU_GE_RULE_REF, CH = MU_GE_CHAR, NOT = MU_GE_CHAR_NOT,
       UP = MU_GE_CHAR_RNG_UPPER, CALT = MU_GE_CHAR_ALT };

/* llama.cpp's test-grammar-parser.cpp expectations */
static void test_parse_rules(void **state) {
    (void)state;
    {
        const char *nm[] = {"root", "root_1"};
        const uint32_t id[] = {0, 1};
        const el w[] = {{REF, 1}, {END, 0}, {CH, 'a'}, {REF, 1}, {ALT, 0}, {END, 0}};
        expect_rules("root ::= \"a\"{0,5000}", nm, id, 2, w, 6);
    }
    {
        const char *nm[] = {"root", "root_1"};
        const uint32_t id[] = {0, 1};
        const el w[] = {{CH, 'a'}, {CH, 'a'}, {CH, 'a'}, {REF, 1}, {END, 0}, {CH, 'a'}, {REF, 1}, {ALT, 0}, {END, 0}};
        expect_rules("\n        root ::= \"a\"{3,5000}\n    ", nm, id, 2, w, 9);
    }
    {
        const char *nm[] = {"root"};
        const uint32_t id[] = {0};
        const el w[] = {{CH, 'a'}, {ALT, 0},   {CH, 'b'}, {CALT, 'd'}, {CALT, 'x'},
                        {UP, 'z'}, {ALT, 0},   {NOT, '1'}, {UP, '3'},  {END, 0}};
        expect_rules("root  ::= \"a\" | [bdx-z] | [^1-3]", nm, id, 1, w, 10);
    }
    {
        const char *nm[] = {"a", "root", "root_2"};
        const uint32_t id[] = {1, 0, 2};
        const el w[] = {{REF, 1}, {REF, 2}, {END, 0}, {CH, 'a'}, {END, 0}, {REF, 1}, {REF, 2}, {ALT, 0}, {END, 0}};
        expect_rules("root  ::= a+\na     ::= \"a\"", nm, id, 3, w, 9);
    }
    {
        const char *nm[] = {"a", "root", "root_2"};
        const uint32_t id[] = {1, 0, 2};
        const el w[] = {{REF, 2}, {END, 0}, {CH, 'a'}, {END, 0}, {REF, 1}, {ALT, 0}, {END, 0}};
        expect_rules("root  ::= a?\na     ::= \"a\"", nm, id, 3, w, 7);
    }
    { /* "a"{5,5}: five chars, no optional rule (the suite's grammar) */
        const char *nm[] = {"root"};
        const uint32_t id[] = {0};
        const el w[] = {{CH, 'a'}, {CH, 'a'}, {CH, 'a'}, {CH, 'a'}, {CH, 'a'}, {END, 0}};
        expect_rules("root ::= \"a\"{5,5}", nm, id, 1, w, 6);
    }
    /* names are letters, digits and '-' only: a generated name (root_1) cannot be written */
}

static void expect_fail(const char *text, const char *msg) {
    mu_grammar *g = NULL;
    mu_err err = {0};
    int rc = mu_grammar_new(text, NULL, &g, &err);
    if (rc != MU_E_ARG) fail_msg("grammar %s: rc %d", text, rc);
    assert_null(g);
    assert_null(strchr(err.msg, '\n'));
    if (msg && strcmp(err.msg, msg)) fail_msg("grammar %s: got '%s', want '%s'", text, err.msg, msg);
}

static void test_parse_errors(void **state) {
    (void)state;
    /* llama.cpp's verify_failure cases */
    expect_fail("\n        root ::= \"a\"{,}\"\n    ", NULL);
    expect_fail("\n        root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}\n    ", NULL);
    expect_fail("\n        root ::= \"a\"{,10}\"\n    ", NULL);
    expect_fail("root ::= \"a\"{5000}", NULL);
    expect_fail("root ::= \"a\"{5000,}", NULL);
    expect_fail("root ::= \"a\"{5000,6000}", NULL);
    /* the suite's invalid grammar, and our messages */
    expect_fail("root ::= this is (not valid GBNF", "grammar: expecting ')' at line 1 column 33: end of input");
    expect_fail("root ::= foo", "grammar: undefined rule 'foo'");
    expect_fail("root ::= \"a\"\nbar ::= baz \"b\"", "grammar: undefined rule 'baz'");
    expect_fail("a ::= \"x\"", "grammar: no 'root' rule");
    expect_fail("   \n# nothing\n", "grammar: no rules");
    expect_fail("root ::= root \"a\" | \"b\"", "grammar: left recursion in rule 'root'");
    expect_fail("root ::= x\nx ::= y? root\ny ::= \"a\" |", NULL);
    expect_fail("root ::= [a-", "grammar: unexpected end of input in a character class at line 1 column 13: end of input");
    expect_fail("root ::= \"\\q\"", "grammar: unknown escape at line 1 column 11: \"?q?\"");
    expect_fail("root ::= \"\\x4\"", "grammar: expecting 2 hex digits at line 1 column 13: \"4?\"");
    expect_fail("root := \"a\"", "grammar: expecting ::= at line 1 column 6: \":= ?a?\"");
    expect_fail("root ::= <hello>", "grammar: no vocabulary to resolve a token at line 1 column 10: \"<hello>\"");
    expect_fail("root ::= \"a\"{3,2}", NULL);
    expect_fail("root ::= \"a\"\nroot_1 ::= \"b\"", "grammar: expecting ::= at line 2 column 5: \"_1 ::= ?b?\"");
    expect_fail("root ::= *", "grammar: expecting an item before */+/?/{ at line 1 column 11: end of input");
    /* nesting is bounded */
    char deep[1200] = "root ::= ";
    for (int i = 0; i < 300; i++) strcat(deep, "(");
    expect_fail(deep, "grammar: groups nested too deep (over 256) at line 1 column 266: \"((((((((((((((((((((((((\"");
}

static bool matches(mu_grammar *g, const char *s) {
    mu_gmatch *m;
    mu_err err;
    if (mu_gmatch_new(g, NULL, NULL, &m, &err)) fail_msg("%s", err.msg);
    bool ok = mu_gmatch_accept_bytes(m, s, strlen(s), &err) == 0 && mu_gmatch_complete(m);
    /* byte by byte: the partial-UTF-8 state carries over */
    mu_gmatch *b;
    if (mu_gmatch_new(g, NULL, NULL, &b, &err)) fail_msg("%s", err.msg);
    bool okb = true;
    for (size_t i = 0; s[i] && okb; i++) okb = mu_gmatch_accept_bytes(b, s + i, 1, &err) == 0;
    okb = okb && mu_gmatch_complete(b);
    assert_int_equal(ok, okb);
    mu_gmatch_free(m);
    mu_gmatch_free(b);
    return ok;
}

static void check_strings(const char *grammar, const char *const *pass, const char *const *fail) {
    mu_grammar *g = parse_ok(grammar);
    for (int i = 0; pass[i]; i++)
        if (!matches(g, pass[i])) fail_msg("grammar %s should accept '%s'", grammar, pass[i]);
    for (int i = 0; fail[i]; i++)
        if (matches(g, fail[i])) fail_msg("grammar %s should refuse '%s'", grammar, fail[i]);
    mu_grammar_unref(g);
}

/* llama.cpp's test-grammar-integration.cpp cases */
static void test_match_strings(void **state) {
    (void)state;
    check_strings("root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= number\nnumber ::= [0-9]+",
                  (const char *[]){"42", "1+2+3+4+5", "123+456", NULL},
                  (const char *[]){"+", "/ 3", "1+2+3+4+5+", "12a45", NULL});
    check_strings("root ::= expression\n"
                  "expression ::= term ws ((\"+\"|\"-\") ws term)*\n"
                  "term ::= factor ws ((\"*\"|\"/\") ws factor)*\n"
                  "factor ::= number | variable | \"(\" expression \")\" | function-call\n"
                  "number ::= [0-9]+\n"
                  "variable ::= [a-zA-Z_][a-zA-Z0-9_]*\n"
                  "function-call ::= variable ws \"(\" (expression (\",\" ws expression)*)? \")\"\n"
                  "ws ::= [ \\t\\n\\r]?",
                  (const char *[]){"42", "1*2*3*4*5", "x", "x+10", "(a+b)*(c-d)", "func()", "func(x,y+2)",
                                   "f(g(x),h(y,z))", "x + 10", "(a + b) * (c - d)", "func(x, y + 2)", NULL},
                  (const char *[]){"+", "/ 3x", "x + + y", "a * / b", "func(,)", "func(x y)", "(a + b", "x + y)",
                                   "42 +", "func(", "f(g(x), h(y, z)", NULL});
    check_strings("root ::= ... \"abc\" ...",
                  (const char *[]){"abcabcabc", "aaaabcccc",
                                   "\xf0\x9f\x94\xb5\xf0\x9f\x9f\xa0\xe2\x9c\x85" "abc"
                                   "\xe2\x9d\x8c\xf0\x9f\x9f\xa0\xf0\x9f\x94\xb5", NULL},
                  (const char *[]){"aaabcccc", "aaaaabcccc", "aaaabccc", "aaaabccccc",
                                   "\xf0\x9f\x94\xb5\xf0\x9f\x9f\xa0" "abc\xf0\x9f\x9f\xa0\xf0\x9f\x94\xb5", NULL});
    check_strings("root ::= \"a\"*", (const char *[]){"", "a", "aaaaa", NULL},
                  (const char *[]){"b", "ab", "aab", "ba", NULL});
    check_strings("root ::= \"a\"+", (const char *[]){"a", "aaaaa", NULL}, (const char *[]){"", "b", "ab", NULL});
    check_strings("root ::= \"a\"?", (const char *[]){"", "a", NULL}, (const char *[]){"b", "ab", "aa", NULL});
    check_strings("root ::= \"a\"{5,5}", (const char *[]){"aaaaa", NULL},
                  (const char *[]){"", "aaaa", "aaaaaa", "aaaab", NULL});
    check_strings("root ::= [a-z]{2,4}", (const char *[]){"ab", "abc", "abcd", NULL},
                  (const char *[]){"a", "abcde", "a1", NULL});
    check_strings("root ::= [^\\n]+ \"\\n\"", (const char *[]){"hello\n", "\xc3\xa9t\xc3\xa9\n", NULL},
                  (const char *[]){"\n", "a\nb\n", NULL});
    check_strings("root ::= [\\u00e0-\\u00ff]+", (const char *[]){"\xc3\xa0\xc3\xbf", NULL},
                  (const char *[]){"a", "\xc3\x9f", NULL});
    /* comments, CRLF line ends, a NUL ends the text (llama.cpp reads a C string) */
    check_strings("# c\r\nroot ::= (\"x\" # trailing\r\n  | \"y\")\r\n", (const char *[]){"x", "y", NULL},
                  (const char *[]){"xy", NULL});
}

/* A multi-byte character split across feeds: the partial state decides
 * what may come next; an impossible continuation is refused. */
static void test_partial_utf8(void **state) {
    (void)state;
    mu_grammar *g = parse_ok("root ::= [\\u00e0-\\u00ff] \"!\"");
    mu_gmatch *m;
    mu_err err;
    assert_int_equal(mu_gmatch_new(g, NULL, NULL, &m, &err), 0);
    assert_int_equal(mu_gmatch_accept_bytes(m, "\xc3", 1, &err), 0);
    assert_false(mu_gmatch_complete(m));
    assert_int_equal(mu_gmatch_accept_bytes(m, "\xa9!", 2, &err), 0);
    assert_true(mu_gmatch_complete(m));
    assert_true(mu_gmatch_finished(m));
    assert_int_equal(mu_gmatch_accept_bytes(m, "x", 1, &err), MU_E_ARG);
    assert_string_equal(err.msg, "grammar: the text does not fit the grammar");
    mu_gmatch_free(m);
    mu_grammar_unref(g);
}

/* ---- on the bundled model ---------------------------------------------- */

static mu_model *D;

static int setup(void **state) {
    (void)state;
    mu_err err;
    if (mu_model_open("models/muser-default.gguf", &D, &err)) D = NULL;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    mu_model_close(D);
    return 0;
}

static void on_event(void *user, const mu_gen_event *ev) {
    mu_gen_token *t = user;
    if (t && ev->kind == MU_EV_TOKEN) *t = ev->tok;
}

/* llama.cpp's order, replayed by hand with a second sampler of the same
 * seed: draw from the logits; a refused token makes the grammar mask the
 * logits and the chain draw again. mu_gen must pick the same tokens on
 * made-up logits, step after step. */
static void test_rejection_order(void **state) {
    (void)state;
    if (!D) skip();
    const mu_tok *tok = mu_model_tokenizer(D);
    int V = mu_model_get_info(D)->n_vocab;
    mu_grammar *gr;
    mu_err err = {0};
    assert_int_equal(mu_grammar_new("root ::= [a-z ]+ \".\"", tok, &gr, &err), 0);
    mu_gen_req q = {.n_predict = 40, .grammar = gr, .no_text = true};
    q.sp = mu_sample_defaults();
    q.sp.seed = 1234;
    q.sp.temp = 1.5f;
    q.sp.top_k = 0;
    q.sp.top_p = 1;
    q.sp.min_p = 0;
    mu_gen *g;
    assert_int_equal(mu_gen_new(D, &q, 40, false, &g, &err), 0);
    mu_sampler *ref;
    assert_int_equal(mu_sampler_new_model(&q.sp, D, &ref, &err), 0);
    mu_gmatch *m;
    assert_int_equal(mu_gmatch_new(gr, tok, D, &m, &err), 0);
    float *lg = malloc((size_t)V * sizeof *lg), *mk = malloc((size_t)V * sizeof *mk);
    uint64_t s = 99;
    int n_resampled = 0;
    for (int step = 0; step < 40; step++) {
        for (int i = 0; i < V; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            lg[i] = (float)((s >> 40) % 1000) / 100.0f;
        }
        const char *why = NULL;
        int32_t id = mu_gen_pick(g, lg, -1, &why);
        int32_t want = mu_sampler_sample(ref, lg);
        if (!mu_gmatch_allows(m, want)) {
            memcpy(mk, lg, (size_t)V * sizeof *mk);
            assert_true(mu_gmatch_mask(m, mk) > 0);
            want = mu_sampler_sample(ref, mk);
            n_resampled++;
        }
        assert_int_equal(id, want);
        mu_sampler_accept(ref, want);
        assert_int_equal(mu_gmatch_accept(m, want, &err), 0);
        mu_finish f = mu_gen_accept(g, id, lg, on_event, NULL);
        if (f != MU_FINISH_NONE) break;
    }
    assert_true(n_resampled > 0); /* the grammar did refuse draws */
    free(lg);
    free(mk);
    mu_gmatch_free(m);
    mu_sampler_free(ref);
    mu_gen_free(g);
    mu_grammar_unref(gr);
}

/* Every token the mask keeps is one the single-token check allows, and
 * the other way round; end tokens only once the grammar is complete. */
static void test_mask_agrees(void **state) {
    (void)state;
    if (!D) skip();
    const mu_tok *tok = mu_model_tokenizer(D);
    const mu_model_info *I = mu_model_get_info(D);
    int V = I->n_vocab;
    mu_grammar *gr;
    mu_err err = {0};
    assert_int_equal(mu_grammar_new("root ::= \"{\\\"k\\\": \" [0-9]+ \"}\" | \"\\u00e9t\\u00e9\"", tok, &gr, &err), 0);
    mu_gmatch *m;
    assert_int_equal(mu_gmatch_new(gr, tok, D, &m, &err), 0);
    float *mk = malloc((size_t)V * sizeof *mk);
    const char *steps[] = {"{\"", "k\": 1", "2}"};
    for (int k = 0; k <= 3; k++) {
        for (int i = 0; i < V; i++) mk[i] = 0;
        int n = mu_gmatch_mask(m, mk);
        int c = 0;
        for (int i = 0; i < V; i++) {
            bool kept = mk[i] == 0;
            c += kept;
            assert_int_equal(kept, mu_gmatch_allows(m, i));
        }
        assert_int_equal(n, c);
        assert_true(n > 0);
        assert_int_equal(mu_gmatch_allows(m, I->eos), k == 3);
        if (k < 3) assert_int_equal(mu_gmatch_accept_bytes(m, steps[k], strlen(steps[k]), &err), 0);
    }
    assert_int_equal(mu_gmatch_accept(m, I->eos, &err), 0);
    free(mk);
    mu_gmatch_free(m);
    mu_grammar_unref(gr);
}

/* post_sampling: the chain's final candidates; greedy: the pick with 1. */
static void test_post_sampling_probs(void **state) {
    (void)state;
    if (!D) skip();
    int V = mu_model_get_info(D)->n_vocab;
    mu_gen_req q = {.n_predict = 4, .no_text = true, .post_sampling = true, .logprobs = true, .n_top = 10};
    q.sp = mu_sample_defaults();
    q.sp.seed = 7;
    q.sp.top_k = 3;
    mu_gen *g;
    mu_err err = {0};
    assert_int_equal(mu_gen_new(D, &q, 4, false, &g, &err), 0);
    float *lg = calloc((size_t)V, sizeof *lg);
    lg[10] = 5, lg[11] = 4.5f, lg[12] = 4, lg[13] = 3.9f;
    const char *why = NULL;
    int32_t id = mu_gen_pick(g, lg, -1, &why);
    mu_gen_token t = {0};
    mu_gen_accept(g, id, lg, on_event, &t);
    assert_int_equal(t.n_top, 3); /* top_k 3 left three candidates */
    double sum = 0;
    for (int k = 0; k < t.n_top; k++) {
        sum += t.top_probs[k];
        assert_int_equal(t.top_ids[k], 10 + k);
        if (k) assert_true(t.top_probs[k] <= t.top_probs[k - 1]);
        if (t.top_ids[k] == id) assert_float_equal(t.prob, t.top_probs[k], 0);
    }
    assert_float_equal(sum, 1.0, 1e-6);
    /* softmax of (5, 4.5, 4) / 0.8 */
    double e0 = 1, e1 = exp(-0.5 / 0.8), e2 = exp(-1 / 0.8);
    assert_float_equal(t.top_probs[0], e0 / (e0 + e1 + e2), 1e-6);
    mu_gen_free(g);
    q.sp.temp = 0;
    assert_int_equal(mu_gen_new(D, &q, 4, false, &g, &err), 0);
    id = mu_gen_pick(g, lg, -1, &why);
    assert_int_equal(id, 10);
    mu_gen_accept(g, id, lg, on_event, &t);
    assert_int_equal(t.n_top, 1);
    assert_int_equal(t.top_ids[0], 10);
    assert_float_equal(t.prob, 1, 0);
    mu_gen_free(g);
    free(lg);
}

/* llama.cpp's lazy grammars: before the trigger every token is allowed
 * and nothing is masked; a word split over tokens, a token, and a pattern
 * whose group starts inside a token each start the grammar at the right
 * byte (the tokens from there replayed into it). */
static mu_grammar *lazy_gr;

static int32_t one_token(const char *text) {
    int32_t *ids, id;
    int n;
    mu_err err = {0};
    assert_int_equal(mu_tok_encode(mu_model_tokenizer(D), text, strlen(text), false, &ids, &n, &err), 0);
    assert_int_equal(n, 1);
    id = ids[0];
    free(ids);
    return id;
}

static mu_gmatch *lazy_feed(const mu_grammar_trigger *t, const char *gbnf, const char *text, bool *awaiting_before) {
    const mu_tok *tok = mu_model_tokenizer(D);
    mu_grammar *gr;
    mu_grammar_unref(lazy_gr);
    mu_err err = {0};
    assert_int_equal(mu_grammar_new(gbnf, tok, &gr, &err), 0);
    assert_int_equal(mu_grammar_set_lazy(gr, t, 1, &err), 0);
    assert_true(mu_grammar_is_lazy(gr));
    mu_gmatch *m;
    assert_int_equal(mu_gmatch_new(gr, tok, D, &m, &err), 0);
    lazy_gr = gr; /* m borrows it: released with the next call's */
    int32_t *ids;
    int n;
    assert_int_equal(mu_tok_encode(tok, text, strlen(text), false, &ids, &n, &err), 0);
    *awaiting_before = true;
    for (int i = 0; i < n; i++) {
        if (i == n - 1) *awaiting_before = mu_gmatch_awaiting(m);
        assert_true(mu_gmatch_awaiting(m));
        assert_true(mu_gmatch_allows(m, mu_model_get_info(D)->eos)); /* nothing applies yet */
        if (mu_gmatch_accept(m, ids[i], &err)) fail_msg("token %d: %s", i, err.msg);
    }
    free(ids);
    return m;
}

static void test_lazy(void **state) {
    (void)state;
    if (!D) skip();
    const mu_tok *tok = mu_model_tokenizer(D);
    int32_t one = one_token("1"), the = one_token(" the");
    bool before;
    /* a word over two tokens (" you", " are") */
    mu_grammar_trigger w = {.kind = MU_TRIGGER_WORD, .value = "you are", .len = 7};
    mu_gmatch *m = lazy_feed(&w, "root ::= \"you are\" [0-9]+", ", the first time you are", &before);
    assert_false(mu_gmatch_awaiting(m));
    assert_true(mu_gmatch_allows(m, one));
    assert_false(mu_gmatch_allows(m, the));
    float *mk = malloc((size_t)mu_tok_n_vocab(tok) * sizeof *mk);
    for (int i = 0; i < mu_tok_n_vocab(tok); i++) mk[i] = 0;
    int left = mu_gmatch_mask(m, mk);
    assert_true(left > 0 && left < mu_tok_n_vocab(tok) / 10);
    mu_gmatch_free(m);
    /* a pattern whose group begins inside the token " time" */
    mu_grammar_trigger p = {.kind = MU_TRIGGER_PATTERN, .value = "t(ime)", .len = 6};
    m = lazy_feed(&p, "root ::= \"ime\" [0-9]+", ", the first time", &before);
    assert_false(mu_gmatch_awaiting(m));
    assert_true(mu_gmatch_allows(m, one));
    mu_gmatch_free(m);
    /* a token: the grammar starts with it */
    int32_t first = one_token(" first");
    mu_grammar_trigger k = {.kind = MU_TRIGGER_TOKEN, .token = first};
    m = lazy_feed(&k, "root ::= \" first\" [0-9]+", ", the first", &before);
    assert_false(mu_gmatch_awaiting(m));
    assert_true(mu_gmatch_allows(m, one));
    mu_gmatch_free(m);
    /* a full pattern is anchored: "first" alone is not the whole text */
    mu_grammar_trigger f = {.kind = MU_TRIGGER_PATTERN_FULL, .value = "first", .len = 5};
    m = lazy_feed(&f, "root ::= [0-9]+", ", the first", &before);
    assert_true(mu_gmatch_awaiting(m));
    assert_true(mu_gmatch_allows(m, the));
    assert_false(mu_gmatch_finished(m));
    mu_gmatch_free(m);
    /* a bad pattern names its trigger */
    mu_grammar *gr;
    mu_err err = {0};
    assert_int_equal(mu_grammar_new("root ::= \"a\"", tok, &gr, &err), 0);
    mu_grammar_trigger bad[2] = {w, {.kind = MU_TRIGGER_PATTERN, .value = "(a", .len = 2}};
    assert_int_equal(mu_grammar_set_lazy(gr, bad, 2, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "trigger 1: regex: unclosed ("));
    assert_false(mu_grammar_is_lazy(gr));
    mu_grammar_unref(gr);
    mu_grammar_unref(lazy_gr);
    lazy_gr = NULL;
    free(mk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_rules),        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_match_strings),      cmocka_unit_test(test_partial_utf8),
        cmocka_unit_test(test_rejection_order),    cmocka_unit_test(test_mask_agrees),
        cmocka_unit_test(test_post_sampling_probs), cmocka_unit_test(test_lazy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
