/* test_gguf.c: the GGUF reader: round trip with the writer, every error
 * class with its message, truncation at every offset and every header byte
 * flipped (no crash, no read outside the buffer: run under ASan in
 * `make asan`). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/kern/quant.h"
#include "../../src/gguf/gguf.h"
#include "../../src/synth/gguf_write.h"

static char tmpdir[] = "/tmp/mutest_gguf_XXXXXX";

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* A small file with every value type and two tensors. */
static uint8_t *make_sample(size_t *n) {
    mu_gguf_writer *w;
    mu_err err;
    assert_int_equal(mu_gguf_writer_new(&w, &err), 0);
    assert_int_equal(mu_gguf_writer_set_str(w, "general.architecture", "test", 4, &err), 0);
    assert_int_equal(mu_gguf_writer_set_u32(w, "a.u32", 7, &err), 0);
    assert_int_equal(mu_gguf_writer_set_i32(w, "a.i32", -3, &err), 0);
    assert_int_equal(mu_gguf_writer_set_u64(w, "a.u64", 1ull << 40, &err), 0);
    assert_int_equal(mu_gguf_writer_set_f32(w, "a.f32", 0.5f, &err), 0);
    assert_int_equal(mu_gguf_writer_set_f64(w, "a.f64", 0.25, &err), 0);
    assert_int_equal(mu_gguf_writer_set_bool(w, "a.bool", true, &err), 0);
    const uint8_t flags[3] = {1, 0, 1};
    assert_int_equal(mu_gguf_writer_set_arr(w, "a.bools", MU_GGUF_BOOL, flags, 3, &err), 0);
    const char *strs[3] = {"x", "", "hello"};
    assert_int_equal(mu_gguf_writer_set_arr_str(w, "a.strs", strs, NULL, 3, &err), 0);
    int64_t ne1[1] = {8}, ne2[2] = {32, 2};
    assert_int_equal(mu_gguf_writer_add_tensor(w, "t.f32", MU_T_F32, 1, ne1, &err), 0);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "t.q8", MU_T_Q8_0, 2, ne2, &err), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/sample.gguf", tmpdir);
    assert_int_equal(mu_gguf_writer_open(w, path, &err), 0);
    float f[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(mu_gguf_writer_write(w, f, sizeof f, &err), 0);
    uint8_t q[68];
    memset(q, 3, sizeof q);
    assert_int_equal(mu_gguf_writer_write(w, q, sizeof q, &err), 0);
    assert_int_equal(mu_gguf_writer_close(w, &err), 0);
    mu_gguf_writer_free(w);
    uint8_t *b = slurp(path, n);
    unlink(path);
    return b;
}

static void test_round_trip(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = make_sample(&n);
    mu_gguf *g;
    mu_err err = {0};
    assert_int_equal(mu_gguf_open_mem(b, n, &g, &err), 0);
    assert_int_equal(mu_gguf_version(g), 3);
    int64_t i;
    double d;
    bool bo;
    const char *s;
    size_t len;
    assert_int_equal(mu_gguf_get_i64(g, "a.u32", &i, &err), 0);
    assert_int_equal(i, 7);
    assert_int_equal(mu_gguf_get_i64(g, "a.i32", &i, &err), 0);
    assert_int_equal(i, -3);
    assert_int_equal(mu_gguf_get_i64(g, "a.u64", &i, &err), 0);
    assert_true(i == (1ll << 40));
    assert_int_equal(mu_gguf_get_f64(g, "a.f32", &d, &err), 0);
    assert_true(d == 0.5);
    assert_int_equal(mu_gguf_get_f64(g, "a.f64", &d, &err), 0);
    assert_true(d == 0.25);
    assert_int_equal(mu_gguf_get_bool(g, "a.bool", &bo, &err), 0);
    assert_true(bo);
    assert_int_equal(mu_gguf_get_str(g, "general.architecture", &s, &len, &err), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(s, "test", 4);
    mu_gguf_arr a;
    assert_int_equal(mu_gguf_get_arr(g, "a.strs", &a, &err), 0);
    assert_int_equal(a.n, 3);
    mu_gguf_arr_str(g, &a, 2, &s, &len);
    assert_int_equal(len, 5);
    assert_memory_equal(s, "hello", 5);
    mu_gguf_arr_str(g, &a, 1, &s, &len);
    assert_int_equal(len, 0);
    assert_int_equal(mu_gguf_get_arr(g, "a.bools", &a, &err), 0);
    assert_int_equal(mu_gguf_arr_i64(&a, 0), 1);
    assert_int_equal(mu_gguf_arr_i64(&a, 1), 0);
    /* wrong-type and missing lookups are errors with the key in the message */
    assert_int_equal(mu_gguf_get_bool(g, "a.u32", &bo, &err), MU_E_MODEL);
    assert_non_null(strstr(err.msg, "a.u32"));
    assert_int_equal(mu_gguf_get_i64(g, "nope", &i, &err), MU_E_MODEL);
    assert_non_null(strstr(err.msg, "missing key: nope"));
    const mu_gguf_tensor *t = mu_gguf_find_tensor(g, "t.q8");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 32);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->bytes, 68);
    assert_int_equal(((const uint8_t *)t->data)[0], 3);
    t = mu_gguf_find_tensor(g, "t.f32");
    assert_true(((const float *)t->data)[7] == 8.0f);
    assert_null(mu_gguf_find_tensor(g, "t.none"));
    mu_gguf_close(g);
    free(b);
}

static void expect_fail(const uint8_t *b, size_t n, const char *needle) {
    mu_gguf *g = NULL;
    mu_err err = {0};
    int rc = mu_gguf_open_mem(b, n, &g, &err);
    if (rc == 0) fail_msg("expected failure containing '%s'", needle);
    assert_int_equal(rc, MU_E_FORMAT);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_null(g);
}

static void test_errors(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = make_sample(&n);
    uint8_t *c = malloc(n);
    memcpy(c, b, n);
    memcpy(c, "GGUX", 4);
    expect_fail(c, n, "bad magic");
    memcpy(c, b, n);
    c[4] = 2;
    expect_fail(c, n, "unsupported version: 2");
    memcpy(c, b, n);
    c[4] = 0, c[7] = 3;
    expect_fail(c, n, "big-endian");
    memcpy(c, b, n);
    c[8 + 7] = 0x7f; /* tensor count */
    expect_fail(c, n, "absurd tensor count");
    memcpy(c, b, n);
    c[16 + 6] = 0x01; /* key count huge */
    expect_fail(c, n, "absurd key count");
    expect_fail(b, 3, "bad magic");
    expect_fail(b, n - 1, "truncated file");
    free(c);
    free(b);
}

/* Single-field corruptions of a valid file, each with its precise message. */
static void test_duplicates_and_types(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = make_sample(&n);
    /* rename key "a.i32" to "a.u32": a duplicate */
    uint8_t *p = memmem(b, n, "a.i32", 5);
    assert_non_null(p);
    uint8_t *c = malloc(n);
    memcpy(c, b, n);
    memcpy(c + (p - b), "a.u32", 5);
    expect_fail(c, n, "duplicate key: a.u32");
    /* tensor info of t.q8: name (4 bytes after its length), n_dims (4),
     * two dims (16), type (4), offset (8) */
    memcpy(c, b, n);
    uint8_t *q = memmem(c, n, "t.q8", 4);
    assert_non_null(q);
    uint8_t *type = q + 4 + 4 + 16;
    uint32_t bad = 77;
    memcpy(type, &bad, 4);
    expect_fail(c, n, "unknown type 77");
    memcpy(c, b, n);
    q = memmem(c, n, "t.q8", 4);
    uint64_t off = 3; /* misaligned offset */
    memcpy(q + 4 + 4 + 16 + 4, &off, 8);
    expect_fail(c, n, "not aligned");
    memcpy(c, b, n);
    q = memmem(c, n, "t.q8", 4);
    off = 1 << 20; /* past the end */
    memcpy(q + 4 + 4 + 16 + 4, &off, 8);
    expect_fail(c, n, "runs past the end");
    memcpy(c, b, n);
    q = memmem(c, n, "t.q8", 4);
    uint64_t ne0 = 33; /* not a multiple of the Q8_0 block */
    memcpy(q + 4 + 4, &ne0, 8);
    expect_fail(c, n, "not a multiple");
    /* a key name with invalid UTF-8 and a control character, made a
     * duplicate of "a.u32": the message escapes it */
    memcpy(c, b, n);
    p = memmem(c, n, "a.i32", 5);
    memcpy(p, "a\xff\n32", 5);
    q = memmem(c, n, "a.u32", 5);
    memcpy(q, "a\xff\n32", 5);
    expect_fail(c, n, "duplicate key: a\\xff\\x0a32");
    /* a tensor name likewise, with a bad type */
    memcpy(c, b, n);
    q = memmem(c, n, "t.q8", 4);
    memcpy(q, "\xc0\xaf\x07q", 4);
    memcpy(q + 4 + 4 + 16, &bad, 4);
    expect_fail(c, n, "tensor '\\xc0\\xaf\\x07q': unknown type 77");
    free(c);
    free(b);
}

static void test_truncation_everywhere(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = make_sample(&n);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, b, cut);
        mu_gguf *g = NULL;
        mu_err err = {0};
        int rc = mu_gguf_open_mem(c, cut, &g, &err);
        if (rc == 0) fail_msg("truncation at %zu of %zu accepted", cut, n);
        assert_true(strlen(err.msg) > 0);
        free(c);
    }
    free(b);
}

static void test_flip_every_header_byte(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = make_sample(&n);
    mu_gguf *g0;
    mu_err err;
    assert_int_equal(mu_gguf_open_mem(b, n, &g0, &err), 0);
    size_t header = (size_t)((const uint8_t *)mu_gguf_tensor_at(g0, 0)->data - b);
    mu_gguf_close(g0);
    for (size_t i = 0; i < header; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            uint8_t *c = malloc(n);
            memcpy(c, b, n);
            c[i] ^= (uint8_t)(1u << bit);
            mu_gguf *g = NULL;
            int rc = mu_gguf_open_mem(c, n, &g, &err);
            if (rc == 0) {
                /* accepted: every view must stay inside the buffer */
                for (int t = 0; t < mu_gguf_n_tensors(g); t++) {
                    const mu_gguf_tensor *tt = mu_gguf_tensor_at(g, t);
                    assert_true((const uint8_t *)tt->data >= c && (const uint8_t *)tt->data + tt->bytes <= c + n);
                }
                mu_gguf_close(g);
            } else {
                assert_true(rc < 0 && strlen(err.msg) > 0);
            }
            free(c);
        }
    }
    free(b);
}

static void test_open_errors(void **state) {
    (void)state;
    mu_gguf *g;
    mu_err err;
    assert_int_equal(mu_gguf_open("/nonexistent/x.gguf", &g, &err), MU_E_IO);
    assert_non_null(strstr(err.msg, "cannot open"));
    assert_int_equal(mu_gguf_open("/tmp", &g, &err), MU_E_IO);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_duplicates_and_types),
        cmocka_unit_test(test_truncation_everywhere),
        cmocka_unit_test(test_flip_every_header_byte),
        cmocka_unit_test(test_open_errors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(tmpdir);
    return rc;
}
