/* test_esc.c: mu_esc (src/base/esc.h) and the messages built on it: valid
 * UTF-8 passes as is; control characters and ill-formed bytes become \xNN;
 * a cut never splits a character; every mu_fail message is escaped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../src/base/err.h"
#include "../src/base/esc.h"

#define EXPECT(lit, want) expect(lit, sizeof lit - 1, want)
static void expect(const char *in, size_t n, const char *want) {
    char out[256];
    mu_esc(out, sizeof out, in, n);
    if (strcmp(out, want)) fail_msg("escaped '%s', want '%s'", out, want);
}

/* strict UTF-8 validity of a NUL-terminated string, no control characters */
static int clean(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t l = mu_utf8_seq(p + i, n - i);
        if (!l || (l == 1 && (p[i] < 0x20 || p[i] == 0x7f))) return 0;
        i += l;
    }
    return 1;
}

static void test_passes_valid(void **st) {
    (void)st;
    EXPECT("hello world", "hello world");
    EXPECT("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    EXPECT("", "");
}

static void test_escapes(void **st) {
    (void)st;
    EXPECT("a\nb\tc\x1b[0m", "a\\x0ab\\x09c\\x1b[0m");
    EXPECT("\x7f", "\\x7f");
    EXPECT("\xc2\x85", "\\xc2\\x85");                  /* C1 control NEL */
    EXPECT("\xff\xfe", "\\xff\\xfe");                  /* never valid */
    EXPECT("\xc0\xaf", "\\xc0\\xaf");                  /* overlong '/' */
    EXPECT("\xed\xa0\x80", "\\xed\\xa0\\x80");         /* surrogate */
    EXPECT("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* above U+10FFFF */
    EXPECT("x\xe2\x82", "x\\xe2\\x82");                /* truncated sequence */
    EXPECT("a\0b", "a\\x00b");                         /* NUL inside */
}

static void test_cut(void **st) {
    (void)st;
    char out[8];
    mu_esc(out, sizeof out, "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac", 9); /* 3 euros, 9 bytes */
    assert_true(clean(out));
    assert_non_null(strstr(out, "..."));
    mu_esc(out, sizeof out, "\xff\xff\xff", 3);
    assert_true(clean(out));
    assert_true(strlen(out) < sizeof out);
    char one[1];
    mu_esc(one, 1, "abc", 3);
    assert_int_equal(one[0], 0);
}

static void test_mu_fail_escapes(void **st) {
    (void)st;
    mu_err err;
    mu_fail(&err, MU_E_FORMAT, "gguf: key '%s': bad", "k\xff\n");
    assert_string_equal(err.msg, "gguf: key 'k\\xff\\x0a': bad");
    char big[600];
    memset(big, 0, sizeof big);
    for (int i = 0; i < 599; i++) big[i] = (char)(i % 3 ? 0xe2 : 0x01);
    mu_fail(&err, MU_E_FORMAT, "x: %s", big);
    assert_true(clean(err.msg));
    assert_true(strlen(err.msg) < sizeof err.msg);
    /* seeded random bytes: always clean */
    uint64_t s = 1;
    for (int t = 0; t < 2000; t++) {
        char in[64];
        for (int i = 0; i < 64; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            in[i] = (char)(s >> 56);
        }
        char out[40];
        mu_esc(out, sizeof out, in, (size_t)(t % 65));
        assert_true(clean(out));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passes_valid),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_mu_fail_escapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
