/* test_regex.c: the trigger patterns of lazy grammars (src/gen/regex.c)
 * against the facts of llama.cpp's llama_grammar_trigger_pattern::find
 * over libstdc++'s std::regex (ECMAScript): where each pattern's first
 * non-empty capturing group (else the match) begins, -1 for no match; the
 * patterns refused, each with a one-line error; the step and
 * backtracking limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/gen/regex.h"

static const struct {
    const char *pat, *in;
    long want;
} cases[] = {
    {"abc", "xxabcxx", 2},
    {"a(b)c", "xxabcxx", 3},
    {"a()bc", "xxabcxx", 2},
    {"^abc", "abcabc", 0},
    {"^abc", "xabc", -1},
    {"abc$", "abcabc", 3},
    {"^abc$", "abc", 0},
    {"^a|b$", "ab", 0},
    {"^(a|ab)(c|bcd)$", "abcd", 0},
    {"(a|ab)(c|bcd)", "abcd", 0},
    {"a*?(b)", "aaab", 3},
    {"a{2,3}(a)", "aaaaa", 3},
    {"a{2,3}?(a)", "aaaaa", 2},
    {"[\\s\\S]*?(<tool>)", "hello <tool> x", 6},
    {"^[\\s\\S]*?(<tool>)[\\s\\S]*$", "hello <tool> x", 6},
    {".(b)", "a\nb", -1},
    {"x.", "x\n", -1},
    {"[^<]*?(<)", "ab<c", 2},
    {"\\bfoo\\b", "a foo b", 2},
    {"\\Bfoo", "afoo", 1},
    {"(?:^|<\\|start\\|>assistant)( to=(?!self<\\|message\\|>)(?!user<\\|message\\|>)[^<]*?<\\|message\\|>)", "<|start|>assistant to=functions.get<|message|>{", 18},
    {"(?:^|<\\|start\\|>assistant)( to=(?!self<\\|message\\|>)(?!user<\\|message\\|>)[^<]*?<\\|message\\|>)", " to=user<|message|>hi", -1},
    {"(?:^|<\\|start\\|>assistant)( to=(?!self<\\|message\\|>)(?!user<\\|message\\|>)[^<]*?<\\|message\\|>)", " to=fn<|message|>hi", 0},
    {">>>(?!all)", ">>>all >>>get", 7},
    {"^\\s+to$", "  to", 0},
    {"(a*)*b", "aaab", 0},
    {"(a*)+$", "aaa", 0},
    {"\\d+(\\w)", "ab 123x", 6},
    {"[a-c-]+", "x-ab-", 1},
    {"[\\]]", "a]b", 1},
    {"[]a", "xa", -1},
    {"[^]a", "xa", 0},
    {"\\x41(B)", "zAB", 2},
    {"\\u0041", "A", 0},
    {"a{3}", "aa", -1},
    {"(?=b)(b)", "ab", 1},
    {"(a)|b", "b", 0},
};

static void test_find(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mu_re *re;
        mu_err err = {0};
        if (mu_re_new(cases[i].pat, strlen(cases[i].pat), &re, &err)) fail_msg("%s: %s", cases[i].pat, err.msg);
        size_t pos;
        assert_int_equal(mu_re_find(re, cases[i].in, strlen(cases[i].in), &pos, &err), 0);
        long got = pos == SIZE_MAX ? -1 : (long)pos;
        if (got != cases[i].want) fail_msg("/%s/ on '%s': %ld, want %ld", cases[i].pat, cases[i].in, got, cases[i].want);
        mu_re_free(re);
    }
}

static void test_refused(void **state) {
    (void)state;
    static const char *const bad[] = {"(a", "a)", "[a", "*a", "a**", "a{2,1}", "(?<=a)b", "(?<n>a)", "(a)\\1",
                                      "\\u00e9", "\\q", "a\\", "[z-a]", "[\\d-z]", "^*", "(?=a)*", "{1}", "\\xg0",
                                      "a{70000}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mu_re *re = NULL;
        mu_err err = {0};
        int rc = mu_re_new(bad[i], strlen(bad[i]), &re, &err);
        if (rc != MU_E_ARG) fail_msg("/%s/ accepted (%d)", bad[i], rc);
        assert_null(re);
        assert_true(!strncmp(err.msg, "regex: ", 7) && !strchr(err.msg, '\n'));
    }
    /* repetitions that expand past the program limit */
    mu_re *re = NULL;
    mu_err err = {0};
    assert_int_equal(mu_re_new("((a{1000}){1000}){1000}", 23, &re, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "too large"));
}

/* catastrophic backtracking ends with an error, not a hang */
static void test_step_limit(void **state) {
    (void)state;
    mu_re *re;
    mu_err err = {0};
    assert_int_equal(mu_re_new("(a|aa)+$", 8, &re, &err), 0);
    char in[200];
    memset(in, 'a', sizeof in);
    in[sizeof in - 1] = 'b';
    size_t pos;
    assert_int_equal(mu_re_find(re, in, sizeof in, &pos, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "steps"));
    mu_re_free(re);
    /* a greedy loop over a long text holds backtracking entries: bounded */
    assert_int_equal(mu_re_new("[\\s\\S]*x", 9, &re, &err), 0);
    size_t big = 1u << 20;
    char *t = malloc(big);
    assert_non_null(t);
    memset(t, 'a', big);
    assert_int_equal(mu_re_find(re, t, big, &pos, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "backtracking entries"));
    free(t);
    mu_re_free(re);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_step_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
