/* test_vocab_gen.c: the generated vocabulary's id layout, the GPT-2 byte
 * mapping, caps, and that the incremental BPE trainer gives exactly the
 * reference (recount-everything) trainer's merges on several corpora. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../src/synth/vocab_gen.h"

static mu_vocab_gen *build(int n_vocab, int max_merges, int min_count, const char *corpus, size_t len, int ref) {
    mu_vocab_gen_params p = {n_vocab, max_merges, min_count, corpus, len, ref};
    mu_vocab_gen *v = NULL;
    mu_err err = {0};
    if (mu_vocab_gen_build(&p, &v, &err)) fail_msg("build: %s", err.msg);
    return v;
}

static void same(const mu_vocab_gen *a, const mu_vocab_gen *b) {
    assert_int_equal(a->n_vocab, b->n_vocab);
    assert_int_equal(a->n_merges, b->n_merges);
    assert_int_equal(a->n_learned, b->n_learned);
    for (int i = 0; i < a->n_vocab; i++) {
        assert_string_equal(a->tokens[i], b->tokens[i]);
        assert_int_equal(a->types[i], b->types[i]);
    }
    for (int i = 0; i < a->n_merges; i++) assert_string_equal(a->merges[i], b->merges[i]);
}

static void test_layout(void **state) {
    (void)state;
    mu_vocab_gen *v = build(1024, -1, 2, NULL, 0, 0);
    assert_string_equal(v->tokens[0], "\xc4\x80");   /* U+0100 */
    assert_string_equal(v->tokens[' '], "\xc4\xa0"); /* U+0120 'Ġ' */
    assert_string_equal(v->tokens['\n'], "\xc4\x8a");
    assert_string_equal(v->tokens['a'], "a");
    assert_string_equal(v->tokens[255], "\xc3\xbf");
    assert_int_equal(mu_vocab_byte_cp(173), 256 + 67);
    assert_true(v->n_learned > 300 && v->n_merges >= v->n_learned);
    for (int i = 0; i < 256 + v->n_learned; i++) assert_int_equal(v->types[i], MU_VOCAB_TYPE_NORMAL);
    for (int i = 256 + v->n_learned; i < 1024; i++) assert_int_equal(v->types[i], MU_VOCAB_TYPE_CONTROL);
    char name[40];
    snprintf(name, sizeof name, "<|reserved_%d|>", 256 + v->n_learned);
    assert_string_equal(v->tokens[256 + v->n_learned], name);
    for (int k = 0; k < MU_VOCAB_N_SPECIAL; k++) assert_string_equal(v->tokens[1024 - 9 + k], mu_vocab_specials[k]);
    assert_int_equal(v->bos, 1015);
    assert_int_equal(v->eos, 1016);
    assert_int_equal(v->start, 1017);
    assert_int_equal(v->message, 1018);
    assert_int_equal(v->eot, 1019);
    assert_int_equal(v->eom, 1020);
    /* at least 1/16 of the free ids stay reserved by default */
    assert_true(1024 - 9 - 256 - v->n_learned >= (1024 - 265) / 16);
    /* every merge joins two existing token texts */
    for (int m = 0; m < v->n_merges; m++) assert_non_null(strchr(v->merges[m], ' '));
    mu_vocab_gen_free(v);
}

static void test_caps(void **state) {
    (void)state;
    mu_vocab_gen *v = build(600, 10, 2, NULL, 0, 0);
    assert_int_equal(v->n_merges, 10);
    assert_string_equal(v->tokens[599], "<|patch|>");
    mu_vocab_gen_free(v);
    v = build(266, -1, 2, NULL, 0, 0); /* room for exactly one learned token */
    assert_true(v->n_learned <= 1);
    mu_vocab_gen_free(v);
    v = build(202048, -1, 2, NULL, 0, 0);
    assert_int_equal(v->eot, 202043);
    assert_string_equal(v->tokens[202047], "<|patch|>");
    mu_vocab_gen_free(v);
    mu_vocab_gen_params p = {265, -1, 2, NULL, 0, 0};
    mu_vocab_gen *bad = NULL;
    mu_err err = {0};
    assert_int_equal(mu_vocab_gen_build(&p, &bad, &err), MU_E_ARG);
    assert_null(bad);
    assert_non_null(strstr(err.msg, "265"));
}

static void test_incremental_equals_reference(void **state) {
    (void)state;
    /* the embedded corpus */
    mu_vocab_gen *a = build(1024, -1, 2, NULL, 0, 0), *b = build(1024, -1, 2, NULL, 0, 1);
    same(a, b);
    mu_vocab_gen_free(a);
    mu_vocab_gen_free(b);
    /* min count 1: merges run until every word is one token */
    a = build(4000, -1, 1, NULL, 0, 0);
    b = build(4000, -1, 1, NULL, 0, 1);
    same(a, b);
    mu_vocab_gen_free(a);
    mu_vocab_gen_free(b);
    /* seeded random words over a small alphabet: many ties and overlaps (aaa) */
    size_t n = 60000;
    char *text = malloc(n + 1);
    uint64_t s = 7;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(s >> 33) % 23;
        text[i] = r < 4 ? ' ' : r < 5 ? '\n' : r < 6 ? '7' : r < 7 ? '.' : (char)('a' + r % 5);
    }
    text[n] = 0;
    a = build(3000, -1, 2, text, n, 0);
    b = build(3000, -1, 2, text, n, 1);
    same(a, b);
    assert_true(a->n_learned > 500);
    mu_vocab_gen_free(a);
    mu_vocab_gen_free(b);
    free(text);
}

static void test_deterministic_and_odd_input(void **state) {
    (void)state;
    const char odd[] = "\xff\xfe\xc3 \xe6\x95 abc abc abc \0\0 x";
    mu_vocab_gen *a = build(512, -1, 2, odd, sizeof odd - 1, 0), *b = build(512, -1, 2, odd, sizeof odd - 1, 0);
    same(a, b);
    mu_vocab_gen_free(a);
    mu_vocab_gen_free(b);
    a = build(512, -1, 2, "", 0, 0);
    assert_int_equal(a->n_merges, 0);
    assert_int_equal(a->n_learned, 0);
    mu_vocab_gen_free(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_incremental_equals_reference),
        cmocka_unit_test(test_deterministic_and_odd_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
