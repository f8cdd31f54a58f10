/* test_jinja.c: the Jinja interpreter against Python's Jinja2.
 * Corpus: tests/jinja/expected/<template>.<context>.out|.err made by
 * tests/jinja/make-expected.py (jinja2 in transformers' environment); every
 * .out must match byte for byte, every .err must fail (raise_exception
 * messages must match too). Plus unit cases for limits and bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/chat/jinja.h"

#define CORPUS "tests/jinja"
#define NOW_2024_07_26 1721952000 /* 2024-07-26 00:00:00 UTC, as make-expected.py */

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (!b) {
        fclose(f);
        return NULL;
    }
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

static int render_file(const char *tmpl_path, const json_t *ctx, char **out, size_t *out_len, mu_err *err) {
    size_t n;
    char *t = slurp(tmpl_path, &n);
    if (!t) return -100;
    mu_jinja_opts o = {.now_unix = NOW_2024_07_26};
    int rc = mu_jinja_render_opts(t, n, ctx, &o, out, out_len, err);
    free(t);
    return rc;
}

static void test_corpus(void **state) {
    (void)state;
    setenv("TZ", "UTC", 1);
    tzset();
    DIR *d = opendir(CORPUS "/expected");
    assert_non_null(d);
    struct dirent *e;
    int n_out = 0, n_err = 0, bad = 0;
    while ((e = readdir(d))) {
        char name[256];
        snprintf(name, sizeof name, "%s", e->d_name);
        size_t len = strlen(name);
        if (len < 5) continue;
        bool is_err = !strcmp(name + len - 4, ".err");
        if (!is_err && strcmp(name + len - 4, ".out")) continue;
        name[len - 4] = 0;
        char *dot = strchr(name, '.');
        assert_non_null(dot);
        *dot = 0;
        const char *tmpl = name, *ctxname = dot + 1;
        char tpath[512], cpath[512], epath[512];
        if (!strcmp(tmpl, "errors")) {
            snprintf(tpath, sizeof tpath, CORPUS "/errors/%s.jinja", ctxname);
            snprintf(cpath, sizeof cpath, CORPUS "/contexts/basic.json");
        } else {
            snprintf(tpath, sizeof tpath, CORPUS "/templates/%s.jinja", tmpl);
            snprintf(cpath, sizeof cpath, CORPUS "/contexts/%s.json", ctxname);
        }
        snprintf(epath, sizeof epath, CORPUS "/expected/%s", e->d_name);
        json_error_t je;
        json_t *ctx = json_load_file(cpath, 0, &je);
        assert_non_null(ctx);
        size_t exp_n;
        char *exp = slurp(epath, &exp_n);
        assert_non_null(exp);
        char *out = NULL;
        size_t out_n = 0;
        mu_err err = {0};
        int rc = render_file(tpath, ctx, &out, &out_n, &err);
        if (is_err) {
            n_err++;
            if (rc == 0) {
                bad++;
                fprintf(stderr, "FAIL %s: expected an error (%s), rendered %zu bytes\n", e->d_name, exp, out_n);
            } else if (!strncmp(exp, "TemplateError: ", 15) && !strstr(err.msg, exp + 15)) {
                bad++;
                fprintf(stderr, "FAIL %s: raise_exception message differs: want '%s' got '%s'\n", e->d_name, exp + 15,
                        err.msg);
            } else if (rc == 0 || strncmp(err.msg, "jinja: line ", 12)) {
                bad++;
                fprintf(stderr, "FAIL %s: error message without a line: '%s'\n", e->d_name, err.msg);
            }
        } else {
            n_out++;
            if (rc != 0) {
                bad++;
                fprintf(stderr, "FAIL %s: render failed: %s\n", e->d_name, err.msg);
            } else if (out_n != exp_n || memcmp(out, exp, exp_n)) {
                bad++;
                size_t i = 0;
                while (i < out_n && i < exp_n && out[i] == exp[i]) i++;
                fprintf(stderr, "FAIL %s: differs at byte %zu (got %zu bytes, want %zu)\n  got:  %.80s\n  want: %.80s\n",
                        e->d_name, i, out_n, exp_n, out + i, exp + i);
            }
        }
        free(out);
        free(exp);
        json_decref(ctx);
    }
    closedir(d);
    fprintf(stderr, "jinja corpus: %d outputs, %d error cases, %d matching jinja2, %d failing\n", n_out, n_err,
            n_out + n_err - bad, bad);
    assert_true(n_out >= 100);
    assert_int_equal(bad, 0);
}

static int render_str(const char *t, const char *ctx_json, char **out, mu_err *err) {
    json_t *ctx = ctx_json ? json_loads(ctx_json, 0, NULL) : NULL;
    size_t n;
    int rc = mu_jinja_render(t, strlen(t), ctx, out, &n, err);
    json_decref(ctx);
    return rc;
}

static void expect(const char *t, const char *ctx, const char *want) {
    char *out = NULL;
    mu_err err = {0};
    int rc = render_str(t, ctx, &out, &err);
    if (rc) fprintf(stderr, "render of %s failed: %s\n", t, err.msg);
    assert_int_equal(rc, 0);
    assert_string_equal(out, want);
    free(out);
}

static void expect_fail(const char *t, int code, const char *msg_part) {
    char *out = (char *)0x1;
    mu_err err = {0};
    int rc = render_str(t, NULL, &out, &err);
    assert_int_equal(rc, code);
    assert_ptr_equal(out, (char *)0x1); /* untouched on failure */
    if (msg_part && !strstr(err.msg, msg_part)) {
        fprintf(stderr, "message '%s' lacks '%s'\n", err.msg, msg_part);
        fail();
    }
}

static void test_basics(void **state) {
    (void)state;
    expect("", NULL, "");
    expect("plain\n", NULL, "plain");        /* one trailing newline is dropped */
    expect("a\r\nb\rc", NULL, "a\nb\nc");    /* newlines are normalised */
    expect("{{ x }}", "{\"x\": 1.0}", "1.0");
    expect("{{ x }}", "{\"x\": 1e20}", "1e+20");
    expect("{{ [x, y, z] }}", "{\"x\": true, \"y\": null, \"z\": \"q'\"}", "[True, None, \"q'\"]");
    expect("{{ m.content }}", "{\"m\": {\"content\": \"hi\"}}", "hi");
    expect("{{ u }}|{{ u is defined }}", NULL, "|False");
}

static void test_errors(void **state) {
    (void)state;
    expect_fail("{% if %}", MU_E_FORMAT, "line 1");
    expect_fail("\n\n{{ 1 +* }}", MU_E_FORMAT, "line 3");
    expect_fail("{{ raise_exception('my message') }}", MU_E_ARG, "my message");
    expect_fail("a\n{{ x.y }}", MU_E_ARG, "line 2: 'x' is undefined");
    expect_fail("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", MU_E_NOMEM, "recursion");
    expect_fail("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", MU_E_NOMEM,
                "limit");
    expect_fail("{{ 'x' * 100000000 }}", MU_E_NOMEM, NULL);
    /* deep nesting is refused, not a stack overflow */
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    expect_fail(deep, MU_E_FORMAT, NULL);
    /* embedded NUL bytes and invalid UTF-8 do not crash */
    char *out = NULL;
    mu_err err = {0};
    assert_int_equal(mu_jinja_render("a\0b{{ 'x\xff' }}", 13, NULL, &out, NULL, &err), 0);
    assert_memory_equal(out, "a\0bx\xff", 5);
    free(out);
}

static void test_limits(void **state) {
    (void)state;
    mu_jinja_opts o = {.max_output_bytes = 10, .now_unix = 0};
    char *out = NULL;
    size_t n;
    mu_err err = {0};
    const char *t = "{% for i in range(100) %}x{% endfor %}";
    assert_int_equal(mu_jinja_render_opts(t, strlen(t), NULL, &o, &out, &n, &err), MU_E_NOMEM);
    assert_non_null(strstr(err.msg, "output"));
    const char *t2 = "{{ strftime_now('%Y') }}";
    setenv("TZ", "UTC", 1);
    tzset();
    o.max_output_bytes = 0;
    assert_int_equal(mu_jinja_render_opts(t2, strlen(t2), NULL, &o, &out, &n, &err), 0);
    assert_string_equal(out, "1970");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
