/* test_catalog.c: the `muser up` catalog parser (cmd/muser/catalog.c, format
 * in docs/up.md): lookups, comments and CRLF, every field's error message
 * with its line number, and the repository's own models/catalog.tsv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../cmd/muser/catalog.c"

#define SHA "bede4e2163a5fd0311668b1c7deacb7be9e877a199f0190fd41f1f56eb48b1a8"

static int find(const char *text, const char *name, catalog_entry *e, mu_err *err) {
    return catalog_find(text, strlen(text), name, e, err);
}

static void test_lookup(void **st) {
    (void)st;
    const char *t = "# comment\n\n  # indented comment\r\n"
                    "a\t10\t" SHA "\tMIT\thttp://x/a.gguf  https://y/a.gguf\r\n"
                    "b.c_d-e\t5\tBEDE4E2163A5FD0311668B1C7DEACB7BE9E877A199F0190FD41F1F56EB48B1A8\tApache 2.0\tbundled:models/b.gguf";
    catalog_entry e;
    mu_err err = {0};
    assert_int_equal(find(t, "a", &e, &err), 1);
    assert_string_equal(e.name, "a");
    assert_int_equal(e.bytes, 10);
    assert_string_equal(e.sha256, SHA);
    assert_string_equal(e.license, "MIT");
    assert_false(e.bundled);
    assert_int_equal(e.n_urls, 2);
    assert_string_equal(e.urls[0], "http://x/a.gguf");
    assert_string_equal(e.urls[1], "https://y/a.gguf");
    assert_int_equal(find(t, "b.c_d-e", &e, &err), 1);
    assert_true(e.bundled);
    assert_string_equal(e.path, "models/b.gguf");
    assert_string_equal(e.sha256, SHA); /* lower-cased */
    assert_string_equal(e.license, "Apache 2.0");
    assert_int_equal(find(t, "nope", &e, &err), 0);
    char names[64];
    catalog_names(t, strlen(t), names, sizeof names);
    assert_string_equal(names, "a, b.c_d-e");
    catalog_names(t, strlen(t), names, 4); /* cut, still terminated */
    assert_int_equal(strlen(names), 3);
}

static void test_errors(void **st) {
    (void)st;
    static const struct {
        const char *text, *msg;
    } c[] = {
        {"a\t1\t" SHA "\tMIT\n", "catalog: line 1: expected 5 tab-separated fields, found 4"},
        {"# x\na\t1\t" SHA "\tMIT\thttp://x\tmore\n", "catalog: line 2: more than 5 tab-separated fields"},
        {"\t1\t" SHA "\tMIT\thttp://x\n", "catalog: line 1: name must be 1..64 characters"},
        {"A\t1\t" SHA "\tMIT\thttp://x\n", "catalog: line 1: name may hold only a-z 0-9 . _ -: A"},
        {"a\t0\t" SHA "\tMIT\thttp://x\n", "catalog: line 1: size is 0"},
        {"a\t1k\t" SHA "\tMIT\thttp://x\n", "catalog: line 1: size is not a decimal number"},
        {"a\t12345678901234567\t" SHA "\tMIT\thttp://x\n", "catalog: line 1: size must be 1..16 decimal digits"},
        {"a\t1\tabc\tMIT\thttp://x\n", "catalog: line 1: sha256 must be 64 hex digits"},
        {"a\t1\t" SHA "\t\thttp://x\n", "catalog: line 1: license must be 1..127 printable characters"},
        {"a\t1\t" SHA "\tMIT\tftp://x\n", "catalog: line 1: a URL must start with http:// or https://: ftp://x"},
        {"a\t1\t" SHA "\tMIT\t   \n", "catalog: line 1: no URL"},
        {"a\t1\t" SHA "\tMIT\thttp://1 http://2 http://3 http://4 http://5\n", "catalog: line 1: more than 4 URLs"},
        {"a\t1\t" SHA "\tMIT\tbundled:/etc/passwd\n", "catalog: line 1: bundled path must be relative, without spaces"},
        {"a\t1\t" SHA "\tMIT\tbundled:models/../x\n", "catalog: line 1: bundled path may not contain '..'"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        catalog_entry e;
        mu_err err = {0};
        /* a broken line fails whatever name is looked up */
        int rc = find(c[i].text, "zzz", &e, &err);
        if (rc != MU_E_FORMAT || strcmp(err.msg, c[i].msg))
            fail_msg("case %zu: rc %d, message '%s', want '%s'", i, rc, err.msg, c[i].msg);
    }
    /* a NUL inside the text */
    const char bin[] = "a\t1\t" SHA "\tM\0T\thttp://x\n";
    catalog_entry e;
    mu_err err = {0};
    assert_int_equal(catalog_find(bin, sizeof bin - 1, "a", &e, &err), MU_E_FORMAT);
    assert_string_equal(err.msg, "catalog: line 1: NUL byte");
}

static void test_sha_ok(void **st) {
    (void)st;
    char out[65];
    assert_true(catalog_sha_ok(SHA, out));
    assert_false(catalog_sha_ok(SHA "0", out));
    assert_false(catalog_sha_ok("bede", out));
    assert_false(catalog_sha_ok("gede4e2163a5fd0311668b1c7deacb7be9e877a199f0190fd41f1f56eb48b1a8", out));
}

/* The catalog the repository ships parses and names the bundled model. */
static void test_repo_catalog(void **st) {
    (void)st;
    FILE *f = fopen("models/catalog.tsv", "rb");
    if (!f) skip();
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    catalog_entry e;
    mu_err err = {0};
    int rc = catalog_find(buf, n, "muser-default", &e, &err);
    if (rc != 1) fail_msg("models/catalog.tsv: rc %d: %s", rc, err.msg);
    assert_true(e.bundled);
    assert_string_equal(e.path, "models/muser-default.gguf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_sha_ok),
        cmocka_unit_test(test_repo_catalog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
