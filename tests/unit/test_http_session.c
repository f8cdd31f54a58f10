/* test_http_session.c: dashboard login sessions (src/http/session.c): the
 * Cookie header parser, session create / find / drop, expiry, the table's
 * bound (the oldest session gives way), the token format, and the
 * wrong-key throttle. No model and
 * no server needed; the HTTP side is tests/e2e/test_dashboard.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/http/session.h"

static void expect_cookie(const char *hdr, const char *name, const char *want) {
    const char *v = NULL;
    size_t n = 0;
    bool got = mu_http_cookie_get(hdr, name, &v, &n);
    if (!want) {
        assert_false(got);
        return;
    }
    assert_true(got);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(v, want, n);
}

static void test_cookie_parse(void **st) {
    (void)st;
    expect_cookie("muser_1=abc", "muser_1", "abc");
    expect_cookie("a=1; muser_1=abc; b=2", "muser_1", "abc");
    expect_cookie("a=1;muser_1=abc", "muser_1", "abc");
    expect_cookie("  muser_1 = abc  ;", "muser_1", "abc");
    expect_cookie("muser_1=\"abc\"", "muser_1", "abc");
    expect_cookie("muser_1=", "muser_1", "");
    expect_cookie("muser_1=a; muser_1=b", "muser_1", "a");   /* the first wins */
    expect_cookie("muser_10=abc", "muser_1", NULL);          /* a longer name is another cookie */
    expect_cookie("xmuser_1=abc", "muser_1", NULL);
    expect_cookie("muser_1abc", "muser_1", NULL);            /* no '=' */
    expect_cookie("a=muser_1=abc", "muser_1", NULL);         /* inside another value */
    expect_cookie("", "muser_1", NULL);
    expect_cookie(";;;", "muser_1", NULL);
    expect_cookie(NULL, "muser_1", NULL);
}

static bool is_token(const char *t) {
    if (strlen(t) != MU_SESS_TOKEN_LEN) return false;
    for (int i = 0; i < MU_SESS_TOKEN_LEN; i++)
        if (!strchr("0123456789abcdef", t[i])) return false;
    return true;
}

static void test_sessions(void **st) {
    (void)st;
    mu_http_sessions *s = NULL;
    mu_err err = {0};
    assert_int_equal(mu_http_sessions_new(&s, &err), 0);
    char id[MU_SESS_TOKEN_LEN + 1], csrf[MU_SESS_TOKEN_LEN + 1], got[MU_SESS_TOKEN_LEN + 1];
    assert_int_equal(mu_http_session_create(s, 100, id, csrf, &err), 0);
    assert_true(is_token(id));
    assert_true(is_token(csrf));
    assert_string_not_equal(id, csrf);
    assert_true(mu_http_session_find(s, 101, id, MU_SESS_TOKEN_LEN, got));
    assert_string_equal(got, csrf);
    assert_true(mu_http_session_find(s, 101, id, MU_SESS_TOKEN_LEN, NULL));
    /* a changed digit, a prefix, the CSRF token as an id: no session */
    char other[MU_SESS_TOKEN_LEN + 1];
    memcpy(other, id, sizeof other);
    other[17] = other[17] == 'a' ? 'b' : 'a';
    assert_false(mu_http_session_find(s, 101, other, MU_SESS_TOKEN_LEN, got));
    assert_false(mu_http_session_find(s, 101, id, MU_SESS_TOKEN_LEN - 1, got));
    assert_false(mu_http_session_find(s, 101, csrf, MU_SESS_TOKEN_LEN, got));
    assert_false(mu_http_session_find(s, 101, NULL, 0, got));
    /* expiry: alive until 100 + TTL, gone at it */
    assert_true(mu_http_session_find(s, 100 + MU_SESS_TTL_S - 1, id, MU_SESS_TOKEN_LEN, NULL));
    assert_false(mu_http_session_find(s, 100 + MU_SESS_TTL_S, id, MU_SESS_TOKEN_LEN, NULL));
    assert_int_equal(mu_http_session_count(s, 101), 1);
    /* drop */
    char id2[MU_SESS_TOKEN_LEN + 1], csrf2[MU_SESS_TOKEN_LEN + 1];
    assert_int_equal(mu_http_session_create(s, 200, id2, csrf2, &err), 0);
    assert_string_not_equal(id, id2);
    assert_int_equal(mu_http_session_count(s, 201), 2);
    mu_http_session_drop(s, id, MU_SESS_TOKEN_LEN);
    assert_false(mu_http_session_find(s, 201, id, MU_SESS_TOKEN_LEN, NULL));
    assert_true(mu_http_session_find(s, 201, id2, MU_SESS_TOKEN_LEN, NULL));
    mu_http_sessions_free(s);
    mu_http_sessions_free(NULL);
}

/* The table holds MU_SESS_MAX sessions; one more replaces the one that
 * expires first, and the others stay. */
static void test_session_bound(void **st) {
    (void)st;
    mu_http_sessions *s = NULL;
    mu_err err = {0};
    assert_int_equal(mu_http_sessions_new(&s, &err), 0);
    static char ids[MU_SESS_MAX + 1][MU_SESS_TOKEN_LEN + 1];
    char csrf[MU_SESS_TOKEN_LEN + 1];
    for (int i = 0; i <= MU_SESS_MAX; i++)
        assert_int_equal(mu_http_session_create(s, 1000 + i, ids[i], csrf, &err), 0);
    assert_int_equal(mu_http_session_count(s, 2000), MU_SESS_MAX);
    assert_false(mu_http_session_find(s, 2000, ids[0], MU_SESS_TOKEN_LEN, NULL));
    for (int i = 1; i <= MU_SESS_MAX; i++) assert_true(mu_http_session_find(s, 2000, ids[i], MU_SESS_TOKEN_LEN, NULL));
    mu_http_sessions_free(s);
}

/* Wrong keys per address: the 10th within the window blocks the address
 * for 60 s (others go on), the block ends, a new window starts; failures
 * further apart than the window never block; a full table takes new
 * addresses. */
static void test_throttle(void **st) {
    (void)st;
    mu_http_throttle *t = NULL;
    mu_err err = {0};
    assert_int_equal(mu_http_throttle_new(&t, &err), 0);
    unsigned char a[16] = {10, 0, 0, 1}, b[16] = {10, 0, 0, 2};
    for (int i = 0; i < MU_THROTTLE_FAILS - 1; i++) mu_http_throttle_fail(t, a, 100 + i);
    assert_int_equal(mu_http_throttle_wait(t, a, 109), 0);
    mu_http_throttle_fail(t, a, 109);
    assert_int_equal(mu_http_throttle_wait(t, a, 109), MU_THROTTLE_BLOCK_S);
    assert_int_equal(mu_http_throttle_wait(t, a, 109.5), MU_THROTTLE_BLOCK_S);
    assert_int_equal(mu_http_throttle_wait(t, a, 109 + MU_THROTTLE_BLOCK_S - 0.5), 1);
    assert_int_equal(mu_http_throttle_wait(t, b, 110), 0);
    assert_int_equal(mu_http_throttle_wait(t, a, 109 + MU_THROTTLE_BLOCK_S), 0);
    /* after the block: a new window, one failure is not enough */
    mu_http_throttle_fail(t, a, 200);
    assert_int_equal(mu_http_throttle_wait(t, a, 200), 0);
    /* spread out: never blocked */
    double now = 1000;
    for (int i = 0; i < 3 * MU_THROTTLE_FAILS; i++, now += MU_THROTTLE_WINDOW_S / 5.0) {
        mu_http_throttle_fail(t, b, now);
        assert_int_equal(mu_http_throttle_wait(t, b, now), 0);
    }
    /* a full table still counts a new address */
    unsigned char c[16] = {0};
    for (int i = 0; i < MU_THROTTLE_ADDRS + 5; i++) {
        c[0] = (unsigned char)(i >> 8);
        c[1] = (unsigned char)i;
        c[2] = 7;
        mu_http_throttle_fail(t, c, 5000 + i);
    }
    unsigned char d[16] = {192, 168, 1, 1};
    for (int i = 0; i < MU_THROTTLE_FAILS; i++) mu_http_throttle_fail(t, d, 6000);
    assert_int_equal(mu_http_throttle_wait(t, d, 6000), MU_THROTTLE_BLOCK_S);
    mu_http_throttle_free(t);
    mu_http_throttle_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cookie_parse),
        cmocka_unit_test(test_sessions),
        cmocka_unit_test(test_session_bound),
        cmocka_unit_test(test_throttle),
    };
    return cmocka_run_group_tests_name("http_session", tests, NULL, NULL);
}
