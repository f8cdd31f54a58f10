/* test_model.c: binding a GGUF to muse-glimmer: accepted geometries and
 * every rejection with its precise message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser.h"
#include "mini_model.h"

static char dir[] = "/tmp/mutest_model_XXXXXX";

static int open_cfg(const mini_cfg *c, mu_model **m, mu_err *err) {
    char path[256];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    assert_int_equal(mini_write(path, c), 0);
    int rc = mu_model_open(path, m, err);
    unlink(path);
    return rc;
}

static void expect_reject(mini_cfg c, const char *needle) {
    mu_model *m = NULL;
    mu_err err = {0};
    int rc = open_cfg(&c, &m, &err);
    if (rc == 0) fail_msg("accepted a model that should fail with '%s'", needle);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_null(m);
}

static void test_accepts_and_reads_geometry(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    mu_model *m;
    mu_err err = {0};
    assert_int_equal(open_cfg(&c, &m, &err), 0);
    const mu_model_info *I = mu_model_get_info(m);
    assert_int_equal(I->n_layer, 4);
    assert_int_equal(I->head_dim, 32);
    assert_int_equal(I->n_vocab, 80);
    assert_true(I->softcap == 20.f);
    assert_true(I->swa_layers[0] && I->swa_layers[1] && I->swa_layers[2] && !I->swa_layers[3]);
    assert_null(mu_model_tokenizer(m));
    mu_model_close(m);
}

static void test_defaults_and_scalar_pattern(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    c.no_softcap = true;
    c.pattern_period = 2;
    c.skip_key = "rope.freq_base";
    mu_model *m;
    mu_err err = {0};
    assert_int_equal(open_cfg(&c, &m, &err), 0);
    const mu_model_info *I = mu_model_get_info(m);
    assert_true(I->softcap == 30.f); /* llama.cpp's default when the key is absent */
    assert_true(I->rope_base == 10000.f);
    for (int il = 0; il < 4; il++) assert_int_equal(I->swa_layers[il], il % 2 == 0);
    mu_model_close(m);
}

static void test_rejections(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    c.arch = "llama";
    expect_reject(c, "unsupported architecture: llama");
    c = mini_default();
    c.skip_key = "logit_scale";
    expect_reject(c, "missing key: muse-glimmer.logit_scale");
    c = mini_default();
    c.skip_key = "attention.head_count_kv";
    expect_reject(c, "missing key: muse-glimmer.attention.head_count_kv");
    c = mini_default();
    c.skip_tensor = "blk.2.attn_gate.weight";
    expect_reject(c, "missing tensor: blk.2.attn_gate.weight");
    c = mini_default();
    c.extra_tensor = "blk.9.attn_norm.weight";
    expect_reject(c, "unexpected tensor: blk.9.attn_norm.weight");
    c = mini_default();
    c.bad_shape = "blk.1.attn_k.weight";
    expect_reject(c, "tensor blk.1.attn_k.weight has shape {64, 65}, expected {64, 64}");
    c = mini_default();
    c.bool_len_delta = -1;
    expect_reject(c, "has 3 entries, expected one per layer (4)");
    c = mini_default();
    c.n_head = 3; /* not a multiple of the 2 kv heads */
    expect_reject(c, "not a multiple of head_count_kv");
}

static int check_progress_calls;
static int count_progress(void *user, uint64_t done, uint64_t total) {
    (void)user;
    assert_true(done <= total);
    check_progress_calls++;
    return 0;
}
static int stop_progress(void *user, uint64_t done, uint64_t total) { return 1; }

/* mu_model_check (llama.cpp's --check-tensors rules): the first bad tensor
 * and value named; F32 and F16; any thread count gives the same answer. */
static void test_check(void **state) {
    (void)state;
    mu_model *m = NULL;
    mu_err err = {0};
    mini_cfg c = mini_default();
    assert_int_equal(open_cfg(&c, &m, &err), 0);
    check_progress_calls = 0;
    assert_int_equal(mu_model_check(m, 3, count_progress, NULL, &err), 0);
    assert_true(check_progress_calls >= 1);
    assert_int_equal(mu_model_check(m, 2, stop_progress, NULL, &err), MU_E_STATE);
    mu_model_close(m);
    const uint32_t types[2] = {MU_T_F32, MU_T_F16};
    for (int t = 0; t < 2; t++) {
        c = mini_default();
        c.wtype = types[t];
        c.nan_tensor = "blk.2.ffn_up.weight";
        assert_int_equal(open_cfg(&c, &m, &err), 0);
        for (int nth = 1; nth <= 4; nth++) {
            assert_int_equal(mu_model_check(m, nth, NULL, NULL, &err), MU_E_MODEL);
            const char *want = t ? "model: tensor 'blk.2.ffn_up.weight' (F16): value 0 (row 0, column 0) is not finite: nan"
                                 : "model: tensor 'blk.2.ffn_up.weight' (F32): value 0 (row 0, column 0) is not finite: nan";
            assert_string_equal(err.msg, want);
        }
        mu_model_close(m);
    }
}

/* A tensor name that is not UTF-8 is escaped in the message. */
static void test_non_utf8_tensor_name(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    c.extra_tensor = "bad\xff\x1b[2Jname";
    expect_reject(c, "model: unexpected tensor: bad\\xff\\x1b[2Jname");
}

static void test_garbage_files(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/junk.gguf", dir);
    FILE *f = fopen(path, "wb");
    fputs("this is not a gguf file, just some text that is long enough", f);
    fclose(f);
    mu_model *m;
    mu_err err = {0};
    assert_int_equal(mu_model_open(path, &m, &err), MU_E_FORMAT);
    assert_non_null(strstr(err.msg, "bad magic"));
    unlink(path);
    assert_int_equal(mu_model_open("/nonexistent.gguf", &m, &err), MU_E_IO);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_and_reads_geometry),
        cmocka_unit_test(test_defaults_and_scalar_pattern),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_garbage_files),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_non_utf8_tensor_name),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(dir);
    return rc;
}
