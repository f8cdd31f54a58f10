/* test_gguf_write.c: the GGUF writer round-trips through the reader
 * (src/gguf/gguf.c): every key type, string and numeric arrays, tensor
 * infos, 32-byte aligned offsets, data bytes; failures leave no files. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../src/kern/quant.h"
#include "../src/gguf/gguf.h"
#include "../src/synth/gguf_write.h"

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mu_gguf_write_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static void test_round_trip(void **state) {
    (void)state;
    char path[128], tmp[140];
    snprintf(path, sizeof path, "%s/rt.gguf", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    mu_err err = {0};
    mu_gguf_writer *w = NULL;
    assert_int_equal(mu_gguf_writer_new(&w, &err), 0);
    assert_int_equal(mu_gguf_writer_set_str(w, "general.architecture", "muse-glimmer", 12, &err), 0);
    assert_int_equal(mu_gguf_writer_set_u32(w, "a.u32", 4000000000u, &err), 0);
    assert_int_equal(mu_gguf_writer_set_i32(w, "a.i32", -7, &err), 0);
    assert_int_equal(mu_gguf_writer_set_u64(w, "a.u64", 1ull << 40, &err), 0);
    assert_int_equal(mu_gguf_writer_set_f32(w, "a.f32", 0.19611613f, &err), 0);
    assert_int_equal(mu_gguf_writer_set_f64(w, "a.f64", 1e-300, &err), 0);
    assert_int_equal(mu_gguf_writer_set_bool(w, "a.bool", true, &err), 0);
    assert_int_equal(mu_gguf_writer_set_str(w, "a.empty", "", 0, &err), 0);
    const uint8_t bools[5] = {1, 1, 1, 0, 1};
    assert_int_equal(mu_gguf_writer_set_arr(w, "a.bools", MU_GGUF_BOOL, bools, 5, &err), 0);
    const int32_t ints[3] = {1, -2, 3};
    assert_int_equal(mu_gguf_writer_set_arr(w, "a.ints", MU_GGUF_I32, ints, 3, &err), 0);
    const float fl[2] = {1.5f, -2.25f};
    assert_int_equal(mu_gguf_writer_set_arr(w, "a.floats", MU_GGUF_F32, fl, 2, &err), 0);
    const char *strs[3] = {"Ġthe", "", "<|eot|>"};
    assert_int_equal(mu_gguf_writer_set_arr_str(w, "a.strs", strs, NULL, 3, &err), 0);
    assert_int_equal(mu_gguf_writer_set_arr(w, "a.none", MU_GGUF_U8, NULL, 0, &err), 0);

    /* bad keys and values */
    assert_int_equal(mu_gguf_writer_set_u32(w, "a.u32", 1, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "duplicate key"));
    assert_int_equal(mu_gguf_writer_set_u32(w, "", 1, &err), MU_E_ARG);
    const uint8_t badb[1] = {2};
    assert_int_equal(mu_gguf_writer_set_arr(w, "a.badb", MU_GGUF_BOOL, badb, 1, &err), MU_E_ARG);
    assert_int_equal(mu_gguf_writer_set_arr(w, "a.badt", MU_GGUF_STR, ints, 1, &err), MU_E_ARG);

    /* tensors: F32 vector (odd size -> padding), Q8_0 matrix, F16 */
    int64_t ne_a[1] = {5}, ne_b[2] = {64, 3}, ne_c[2] = {8, 2};
    assert_int_equal(mu_gguf_writer_add_tensor(w, "a", MU_T_F32, 1, ne_a, &err), 0);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "b", MU_T_Q8_0, 2, ne_b, &err), 0);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "c", MU_T_F16, 2, ne_c, &err), 0);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "a", MU_T_F32, 1, ne_a, &err), MU_E_ARG);
    int64_t bad[2] = {100, 2};
    assert_int_equal(mu_gguf_writer_add_tensor(w, "d", MU_T_Q4_K, 2, bad, &err), MU_E_ARG);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "e", 99, 1, ne_a, &err), MU_E_ARG);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "f", MU_T_F32, 3, (int64_t[]){1, 0, 1}, &err), MU_E_ARG);
    assert_int_equal(mu_gguf_writer_tensor_bytes(w, 1), 3 * 2 * 34);

    assert_int_equal(mu_gguf_writer_open(w, path, &err), 0);
    assert_true(exists(tmp));
    assert_false(exists(path));
    assert_int_equal(mu_gguf_writer_set_u32(w, "late", 1, &err), MU_E_STATE);
    uint8_t data[20 + 204 + 32];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7 + 1);
    /* write in odd pieces spanning tensor boundaries */
    assert_int_equal(mu_gguf_writer_write(w, data, 3, &err), 0);
    assert_int_equal(mu_gguf_writer_write(w, data + 3, 100, &err), 0);
    assert_int_equal(mu_gguf_writer_write(w, data + 103, sizeof data - 103, &err), 0);
    uint64_t expect_bytes = mu_gguf_writer_file_bytes(w);
    assert_int_equal(mu_gguf_writer_close(w, &err), 0);
    mu_gguf_writer_free(w);
    assert_false(exists(tmp));

    mu_gguf *g = NULL;
    if (mu_gguf_open(path, &g, &err)) fail_msg("reader: %s", err.msg);
    assert_int_equal(mu_gguf_file_bytes(g), expect_bytes);
    int64_t i64;
    double f64;
    bool b;
    const char *s;
    size_t len;
    assert_int_equal(mu_gguf_get_i64(g, "a.u32", &i64, &err), 0);
    assert_int_equal(i64, 4000000000ll);
    assert_int_equal(mu_gguf_get_i64(g, "a.i32", &i64, &err), 0);
    assert_int_equal(i64, -7);
    assert_int_equal(mu_gguf_get_i64(g, "a.u64", &i64, &err), 0);
    assert_int_equal(i64, 1ll << 40);
    assert_int_equal(mu_gguf_get_f64(g, "a.f32", &f64, &err), 0);
    assert_true(f64 == (double)0.19611613f);
    assert_int_equal(mu_gguf_get_f64(g, "a.f64", &f64, &err), 0);
    assert_true(f64 == 1e-300);
    assert_int_equal(mu_gguf_get_bool(g, "a.bool", &b, &err), 0);
    assert_true(b);
    assert_int_equal(mu_gguf_get_str(g, "general.architecture", &s, &len, &err), 0);
    assert_int_equal(len, 12);
    assert_memory_equal(s, "muse-glimmer", 12);
    assert_int_equal(mu_gguf_get_str(g, "a.empty", &s, &len, &err), 0);
    assert_int_equal(len, 0);
    mu_gguf_arr a;
    assert_int_equal(mu_gguf_get_arr(g, "a.bools", &a, &err), 0);
    assert_int_equal(a.type, MU_GGUF_BOOL);
    assert_int_equal(a.n, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(mu_gguf_arr_i64(&a, i), bools[i]);
    assert_int_equal(mu_gguf_get_arr(g, "a.ints", &a, &err), 0);
    assert_int_equal(mu_gguf_arr_i64(&a, 1), -2);
    assert_int_equal(mu_gguf_get_arr(g, "a.floats", &a, &err), 0);
    assert_true(mu_gguf_arr_f64(&a, 1) == -2.25);
    assert_int_equal(mu_gguf_get_arr(g, "a.strs", &a, &err), 0);
    assert_int_equal(a.n, 3);
    for (int i = 0; i < 3; i++) {
        mu_gguf_arr_str(g, &a, i, &s, &len);
        assert_int_equal(len, strlen(strs[i]));
        assert_memory_equal(s, strs[i], len);
    }
    assert_int_equal(mu_gguf_get_arr(g, "a.none", &a, &err), 0);
    assert_int_equal(a.n, 0);
    assert_int_equal(mu_gguf_n_tensors(g), 3);
    const mu_gguf_tensor *ta = mu_gguf_find_tensor(g, "a"), *tb = mu_gguf_find_tensor(g, "b"),
                         *tc = mu_gguf_find_tensor(g, "c");
    assert_non_null(ta);
    assert_non_null(tb);
    assert_non_null(tc);
    assert_int_equal(ta->offset, 0);
    assert_int_equal(tb->offset, 32);
    assert_int_equal(tc->offset, 32 + 224);
    assert_int_equal(tb->ne[0], 64);
    assert_int_equal(tb->ne[1], 3);
    assert_int_equal(tb->type, MU_T_Q8_0);
    assert_int_equal((uintptr_t)ta->data % 32, (uintptr_t)mu_gguf_bytes(g) % 32);
    assert_memory_equal(ta->data, data, 20);
    assert_memory_equal(tb->data, data + 20, 204);
    assert_memory_equal(tc->data, data + 224, 32);
    mu_gguf_close(g);
}

static void test_failures_leave_nothing(void **state) {
    (void)state;
    char path[128], tmp[140];
    snprintf(path, sizeof path, "%s/short.gguf", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    mu_err err = {0};
    mu_gguf_writer *w = NULL;
    int64_t ne[1] = {8};
    assert_int_equal(mu_gguf_writer_new(&w, &err), 0);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "t", MU_T_F32, 1, ne, &err), 0);
    assert_int_equal(mu_gguf_writer_write(w, "x", 1, &err), MU_E_STATE); /* before open */
    assert_int_equal(mu_gguf_writer_open(w, path, &err), 0);
    uint8_t d[40] = {0};
    assert_int_equal(mu_gguf_writer_write(w, d, 16, &err), 0);
    assert_int_equal(mu_gguf_writer_close(w, &err), MU_E_ARG); /* 16 of 32 bytes */
    assert_non_null(strstr(err.msg, "16 of 32"));
    mu_gguf_writer_free(w);
    assert_false(exists(tmp));
    assert_false(exists(path));

    /* too much data */
    assert_int_equal(mu_gguf_writer_new(&w, &err), 0);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "t", MU_T_F32, 1, ne, &err), 0);
    assert_int_equal(mu_gguf_writer_open(w, path, &err), 0);
    assert_int_equal(mu_gguf_writer_write(w, d, 40, &err), MU_E_ARG);
    mu_gguf_writer_free(w);
    assert_false(exists(tmp));
    assert_false(exists(path));

    /* unwritable directory */
    char nd[160];
    snprintf(nd, sizeof nd, "%s/missing/x.gguf", dir);
    assert_int_equal(mu_gguf_writer_new(&w, &err), 0);
    assert_int_equal(mu_gguf_writer_open(w, nd, &err), MU_E_IO);
    assert_non_null(strstr(err.msg, "cannot create"));
    mu_gguf_writer_free(w);
    mu_gguf_writer_free(NULL);
}

/* A large tensor streamed in one call bypasses the buffer and stays intact. */
static void test_large_write(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/big.gguf", dir);
    mu_err err = {0};
    mu_gguf_writer *w = NULL;
    int64_t ne1[1] = {3}, ne2[2] = {1024, 3000}; /* 12 MB of F32 */
    assert_int_equal(mu_gguf_writer_new(&w, &err), 0);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "small", MU_T_F32, 1, ne1, &err), 0);
    assert_int_equal(mu_gguf_writer_add_tensor(w, "big", MU_T_F32, 2, ne2, &err), 0);
    assert_int_equal(mu_gguf_writer_open(w, path, &err), 0);
    float *x = malloc(1024 * 3000 * sizeof(float));
    for (int i = 0; i < 1024 * 3000; i++) x[i] = (float)i;
    assert_int_equal(mu_gguf_writer_write(w, x, 12, &err), 0);
    assert_int_equal(mu_gguf_writer_write(w, x, 1024 * 3000 * sizeof(float), &err), 0);
    assert_int_equal(mu_gguf_writer_close(w, &err), 0);
    mu_gguf_writer_free(w);
    mu_gguf *g = NULL;
    if (mu_gguf_open(path, &g, &err)) fail_msg("reader: %s", err.msg);
    const mu_gguf_tensor *t = mu_gguf_find_tensor(g, "big");
    assert_non_null(t);
    assert_int_equal(t->offset, 32);
    assert_memory_equal(t->data, x, 1024 * 3000 * sizeof(float));
    mu_gguf_close(g);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_failures_leave_nothing),
        cmocka_unit_test(test_large_write),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
