/* test_synth.c: the synthetic-model API (include/muser_synth.h): presets and
 * type names, the progress events and their order, files that the model
 * API opens with the geometry asked for, bytes independent of the thread
 * count and of how the sliding pattern is given, option errors (no file
 * left behind). The pinned bytes of every type are tests/e2e/test_gen.sh's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "../include/muser.h"
#include "../include/muser_synth.h"
#include "../src/gguf/gguf.h"
#include "../src/kern/quant.h"

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mu_synth_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static long file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static char *slurp(const char *p, long *n) {
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)*n);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return b;
}

static void assert_same_file(const char *a, const char *b) {
    long na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(x, y, (size_t)na);
    free(x);
    free(y);
}

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

/* A small geometry that still has every tensor kind. */
static void small(mu_synth_opts *o) {
    mu_synth_defaults(o);
    o->preset = NULL;
    o->n_layer = 2;
    o->n_vocab = 400;
}

typedef struct {
    mu_synth_event ev[4096];
    int n;
    mu_synth_progress last;
    uint64_t prev_done;
    int order_ok;
} events;

static void on_event(const mu_synth_progress *p, void *user) {
    events *e = user;
    if (e->n < 4096) e->ev[e->n] = p->event;
    if (p->event == MU_SYNTH_EV_DATA && p->bytes_done <= e->prev_done) e->order_ok = 0;
    e->prev_done = p->bytes_done;
    e->n++;
    e->last = *p;
}

static void test_names(void **state) {
    (void)state;
    mu_synth_opts o;
    mu_synth_defaults(&o);
    assert_string_equal(o.preset, "tiny");
    assert_int_equal(o.n_layer, 4);
    assert_int_equal(o.n_head * o.head_dim, 512);
    assert_int_equal(o.type, MU_SYNTH_Q4_K_M);
    mu_err err = {0};
    assert_int_equal(mu_synth_preset(&o, "full", &err), 0);
    assert_string_equal(o.preset, "full");
    assert_int_equal(o.n_vocab, 202048);
    assert_int_equal(mu_synth_preset(&o, "huge", &err), MU_E_ARG);
    assert_string_equal(o.preset, "full"); /* unchanged */
    assert_non_null(strstr(err.msg, "huge"));
    const char *names[] = {"f32", "f16", "bf16", "q8_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "q4_k_s", "q5_k_s", "q5_k_m", "nvfp4"};
    assert_int_equal(sizeof names / sizeof *names, MU_SYNTH_N_TYPES);
    for (int i = 0; i < MU_SYNTH_N_TYPES; i++) {
        int t = mu_synth_type_parse(names[i]);
        assert_int_equal(t, i);
        const char *label = mu_synth_type_label((mu_synth_type)t);
        for (size_t k = 0; names[i][k]; k++) assert_int_equal(label[k], names[i][k] >= 'a' ? names[i][k] - 32 : names[i][k]);
    }
    assert_int_equal(mu_synth_type_parse("q3_k"), -1);
    assert_int_equal(mu_synth_type_parse("Q4_K_M"), -1);
    assert_string_equal(mu_synth_type_label(MU_SYNTH_N_TYPES), "?");
}

static void test_write_and_open(void **state) {
    (void)state;
    char path[128];
    path_of(path, sizeof path, "a.gguf");
    mu_synth_opts o;
    small(&o);
    o.type = MU_SYNTH_Q8_0;
    o.n_threads = 1;
    events *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->order_ok = 1;
    mu_err err = {0};
    assert_int_equal(mu_synth_write(&o, path, on_event, e, &err), 0);
    /* VOCAB, OPEN, DATA..., DONE */
    assert_true(e->n >= 3 && e->n <= 4096);
    assert_int_equal(e->ev[0], MU_SYNTH_EV_VOCAB);
    assert_int_equal(e->ev[1], MU_SYNTH_EV_OPEN);
    for (int i = 2; i < e->n - 1; i++) assert_int_equal(e->ev[i], MU_SYNTH_EV_DATA);
    assert_int_equal(e->ev[e->n - 1], MU_SYNTH_EV_DONE);
    assert_true(e->order_ok);
    assert_int_equal(e->last.n_threads, 1);
    assert_false(e->last.fast);
    assert_true(e->last.n_merges > 0 && e->last.n_learned > 0);
    assert_int_equal(file_size(path), (long)e->last.file_bytes);
    assert_true(e->last.bytes_done < e->last.file_bytes && e->last.bytes_done > e->last.file_bytes / 2);
    char tmp[140];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(file_size(tmp), -1);

    mu_model *m;
    assert_int_equal(mu_model_open(path, &m, &err), 0);
    const mu_model_info *I = mu_model_get_info(m);
    assert_int_equal(I->n_layer, 2);
    assert_int_equal(I->n_vocab, 400);
    assert_int_equal(I->n_embd, o.n_embd);
    assert_int_equal(I->head_dim, o.head_dim);
    assert_string_equal(I->name, "muse-glimmer-custom-s1-Q8_0");
    assert_true(I->swa_layers[0] && I->swa_layers[1]);
    assert_true(I->softcap == 20.0f);
    assert_int_equal(mu_model_n_tensors(m), 3 + 14 * 2);
    assert_int_equal(e->last.n_weights > 0, 1);
    uint64_t n_elems = 0;
    for (int i = 0; i < mu_model_n_tensors(m); i++) {
        mu_tensor_info t;
        assert_int_equal(mu_model_tensor(m, i, &t, &err), 0);
        assert_string_equal(t.type, t.n_dims == 1 ? "F32" : "Q8_0");
        n_elems += (uint64_t)t.n_elems;
    }
    assert_int_equal(n_elems, e->last.n_weights);
    assert_non_null(mu_model_chat_template(m));
    mu_model_close(m);
    free(e);
}

/* Same options -> same bytes, whatever the thread count; the period-4 bool
 * array given explicitly is the default's array. */
static void test_deterministic(void **state) {
    (void)state;
    char a[128], b[128], c[128];
    path_of(a, sizeof a, "t1.gguf");
    path_of(b, sizeof b, "t3.gguf");
    path_of(c, sizeof c, "bools.gguf");
    mu_synth_opts o;
    small(&o);
    o.n_layer = 5;
    o.type = MU_SYNTH_Q8_0;
    o.n_ff = 2048; /* ffn_gate/up: 2048 rows of 272 bytes, a batch big enough for the workers */
    mu_err err = {0};
    o.n_threads = 1;
    assert_int_equal(mu_synth_write(&o, a, NULL, NULL, &err), 0);
    o.n_threads = 3;
    assert_int_equal(mu_synth_write(&o, b, NULL, NULL, &err), 0);
    assert_same_file(a, b);
    const bool layers[5] = {true, true, true, false, true};
    o.swa_layers = layers;
    assert_int_equal(mu_synth_write(&o, c, NULL, NULL, &err), 0);
    assert_same_file(a, c);
}

static void test_keys(void **state) {
    (void)state;
    char path[128];
    path_of(path, sizeof path, "k.gguf");
    mu_synth_opts o;
    small(&o);
    o.type = MU_SYNTH_F16;
    o.name = "named";
    o.no_chat_template = true;
    o.has_softcap = false;
    o.swa_period = 2;
    o.swa_period_key = true;
    o.rope_base_swa = 10000;
    mu_err err = {0};
    assert_int_equal(mu_synth_write(&o, path, NULL, NULL, &err), 0);
    mu_model *m;
    assert_int_equal(mu_model_open(path, &m, &err), 0);
    const mu_model_info *I = mu_model_get_info(m);
    assert_string_equal(I->name, "named");
    assert_null(mu_model_chat_template(m));
    assert_true(I->softcap == 30.0f); /* llama.cpp's default when the key is absent */
    assert_true(I->swa_layers[0] && !I->swa_layers[1]);
    assert_true(I->rope_base_swa == 10000.0f);
    size_t len;
    const char *pre = mu_model_meta_str(m, "tokenizer.ggml.pre", &len);
    assert_true(pre && len == 6 && !memcmp(pre, "llama4", 6));
    mu_model_close(m);
}

/* --type nvfp4: every matrix NVFP4, norms F32; the model opens, and
 * mu_model_check accepts every scale byte as llama.cpp does (0x7f, E4M3's
 * NaN, reads as 0; 0xff as 240). */
static void test_nvfp4(void **state) {
    (void)state;
    char path[128];
    path_of(path, sizeof path, "nvfp4.gguf");
    mu_synth_opts o;
    small(&o);
    o.type = MU_SYNTH_NVFP4;
    mu_err err = {0};
    assert_int_equal(mu_synth_write(&o, path, NULL, NULL, &err), 0);
    mu_gguf *g;
    assert_int_equal(mu_gguf_open(path, &g, &err), 0);
    const mu_gguf_tensor *t = mu_gguf_find_tensor(g, "blk.1.ffn_up.weight");
    assert_non_null(t);
    assert_int_equal(t->type, MU_T_NVFP4);
    assert_int_equal(t->bytes, (size_t)(t->n_elems / 64 * 36));
    const long at = (long)((const uint8_t *)t->data - (const uint8_t *)mu_gguf_bytes(g));
    mu_gguf_close(g);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    const uint8_t odd[4] = {0x7f, 0xff, 0x80, 0x7e};
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    assert_int_equal(fwrite(odd, 1, 4, f), 4);
    assert_int_equal(fclose(f), 0);
    mu_model *m;
    assert_int_equal(mu_model_open(path, &m, &err), 0);
    assert_string_equal(mu_model_get_info(m)->name, "muse-glimmer-custom-s1-NVFP4");
    for (int i = 0; i < mu_model_n_tensors(m); i++) {
        mu_tensor_info ti;
        assert_int_equal(mu_model_tensor(m, i, &ti, &err), 0);
        assert_string_equal(ti.type, ti.n_dims == 1 ? "F32" : "NVFP4");
    }
    assert_int_equal(mu_model_check(m, 2, NULL, NULL, &err), 0);
    mu_model_close(m);
}

static void expect_fail(const mu_synth_opts *o, const char *name, int code, const char *msg) {
    char path[128], tmp[140];
    path_of(path, sizeof path, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    mu_err err = {0};
    assert_int_equal(mu_synth_write(o, path, NULL, NULL, &err), code);
    assert_non_null(strstr(err.msg, msg));
    assert_int_equal(file_size(path), -1);
    assert_int_equal(file_size(tmp), -1);
}

static void test_errors(void **state) {
    (void)state;
    mu_synth_opts o;
    small(&o);
    o.n_embd = 200;
    o.type = MU_SYNTH_Q4_K;
    /* the message muser gen has always printed after "muser gen: " */
    expect_fail(&o, "rows.gguf", MU_E_ARG,
                "token_embd rows of 200 are not a multiple of Q4_K's block of 256; choose sizes that are or --type "
                "q8_0/f16");
    small(&o);
    o.n_embd = 224;
    o.type = MU_SYNTH_NVFP4;
    expect_fail(&o, "rows64.gguf", MU_E_ARG, "token_embd rows of 224 are not a multiple of NVFP4's block of 64");
    small(&o);
    o.n_head = 5;
    expect_fail(&o, "heads.gguf", MU_E_ARG, "not a multiple of n_head_kv");
    small(&o);
    o.head_dim = 3;
    expect_fail(&o, "hd.gguf", MU_E_ARG, "even");
    small(&o);
    o.n_vocab = 100;
    expect_fail(&o, "vocab.gguf", MU_E_ARG, "n_vocab");
    small(&o);
    o.n_layer = MU_SYNTH_MAX_LAYERS + 1;
    expect_fail(&o, "layers.gguf", MU_E_ARG, "n_layer");
    small(&o);
    const bool layers[2] = {true, false};
    o.swa_layers = layers;
    o.swa_period_key = true;
    expect_fail(&o, "pat.gguf", MU_E_ARG, "swa_period_key");
    small(&o);
    o.chat_template = "x";
    o.chat_template_len = 1;
    o.no_chat_template = true;
    expect_fail(&o, "tmpl.gguf", MU_E_ARG, "no_chat_template");
    small(&o);
    o.type = (mu_synth_type)99;
    expect_fail(&o, "type.gguf", MU_E_ARG, "type");
    small(&o);
    o.n_threads = MU_SYNTH_MAX_THREADS + 1;
    expect_fail(&o, "threads.gguf", MU_E_ARG, "n_threads");
    small(&o);
    expect_fail(&o, "nodir/x.gguf", MU_E_IO, "gguf_write: cannot create");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_write_and_open),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nvfp4),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
