/* test_gpu_fake.c: the engine's GPU side (src/engine/forward_gpu.c) against
 * a fake plugin (fake_gpu_plugin.c, loaded through $MUSER_CUDA_PLUGIN, no
 * device): layer streaming (mu_batch_item.on_layer) per chunk, layers in
 * order, each of the item's positions once per layer, with the session's
 * positions already counted so the callback can read its rows; the rows
 * read there are the plugin's; a read of a layer not yet written, a write
 * or a forward never happens inside a callback (the plugin refuses them);
 * a forward without a callback streams nothing. And images on a CUDA
 * engine whose plugin has no vision encoder: encoded on the CPU, the same
 * rows as a CPU engine's, the reason kept with the projector. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser.h"
#include "../../include/muser_synth.h"
#include "../../src/engine/engine.h"
#include "../../src/vision/mmproj.h"
#include "fake_gpu_row.h"
#include "image_gen.h"
#include "mini_model.h"

static char dir[] = "/tmp/mutest_gpu_fake_XXXXXX";
static mu_model *M;
static mu_engine *E;

static int setup(void **state) {
    (void)state;
    char exe[PATH_MAX], so[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    slash[1] = 0;
    snprintf(so, sizeof so, "%sfake-gpu-plugin.so", exe);
    setenv("MUSER_CUDA_PLUGIN", so, 1); /* before the first GPU call loads a plugin */
    if (!mkdtemp(dir)) return -1;
    mini_cfg c = mini_default();
    char path[512];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    mu_err err = {0};
    if (mini_write(path, &c) || mu_model_open(path, &M, &err)) return -1;
    unlink(path);
    mu_engine_opts o = {.backend = "cuda"};
    if (mu_engine_new(M, &o, &E, &err)) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    mu_engine_free(E);
    mu_model_close(M);
    rmdir(dir);
    return 0;
}

#define N_TOK 21
#define MAX_CALLS 64
typedef struct {
    mu_session *s;
    const int32_t *tok;
    int calls, il[MAX_CALLS], pos0[MAX_CALLS], n[MAX_CALLS];
    int bad_read, bad_rows, bad_past, later_read_ok;
} rec;

static void on_layer(void *user, int il, int pos0, int n) {
    rec *r = user;
    if (r->calls < MAX_CALLS) {
        r->il[r->calls] = il;
        r->pos0[r->calls] = pos0;
        r->n[r->calls] = n;
    }
    r->calls++;
    if (mu_session_n_past(r->s) != pos0 + n) r->bad_past++; /* positions counted as tokens enter the chunk */
    const size_t w = (size_t)E->n_kv;
    uint16_t *k = malloc((size_t)n * w * 2), *v = malloc((size_t)n * w * 2);
    mu_err err = {0};
    if (!k || !v || mu_session_kv_read(r->s, il, pos0, n, k, v, &err)) {
        r->bad_read++;
    } else {
        for (int p = 0; p < n; p++)
            for (size_t i = 0; i < w; i++)
                if (k[p * w + i] != fake_row(r->tok[pos0 + p], pos0 + p, il, (int)i, 0) ||
                    v[p * w + i] != fake_row(r->tok[pos0 + p], pos0 + p, il, (int)i, 1))
                    r->bad_rows++;
    }
    /* the next layer is not written yet: the plugin refuses the read */
    if (il + 1 < mu_model_get_info(M)->n_layer && k && v && !mu_session_kv_read(r->s, il + 1, pos0, 1, k, v, &err))
        r->later_read_ok++;
    free(k);
    free(v);
}

static void prompt(int32_t *ids, int n, int seed) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + seed * 11 + 3) % 70);
}

static void test_stream_per_chunk(void **state) {
    (void)state;
    mu_err err = {0};
    const int L = mu_model_get_info(M)->n_layer, ub = E->ubatch;
    mu_session *a, *b;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &b, &err), 0);
    int32_t p[N_TOK], q[7];
    prompt(p, N_TOK, 8);
    prompt(q, 7, 9);
    rec r = {.s = a, .tok = p};
    const mu_gpu_stream_stats st0 = E->gpu_stream;
    E->ubatch = 8; /* 7 + 8 + 8 + 5 tokens: the item's positions split 1 | 8 | 8 | 4 */
    mu_batch_item two[2] = {{.s = b, .tokens = q, .n_tokens = 7},
                            {.s = a, .tokens = p, .n_tokens = N_TOK, .on_layer = on_layer, .on_layer_user = &r}};
    int rc = mu_forward(E, two, 2, &err);
    E->ubatch = ub;
    assert_int_equal(rc, 0);
    static const int want_pos0[4] = {0, 1, 9, 17}, want_n[4] = {1, 8, 8, 4};
    assert_int_equal(r.calls, 4 * L);
    for (int c = 0; c < 4; c++)
        for (int il = 0; il < L; il++) {
            const int i = c * L + il;
            assert_int_equal(r.il[i], il);
            assert_int_equal(r.pos0[i], want_pos0[c]);
            assert_int_equal(r.n[i], want_n[c]);
        }
    assert_int_equal(r.bad_read, 0);
    assert_int_equal(r.bad_rows, 0);
    assert_int_equal(r.bad_past, 0);
    assert_int_equal(r.later_read_ok, 0);
    assert_int_equal(mu_session_n_past(a), N_TOK);
    assert_int_equal(mu_session_n_past(b), 7);
    assert_int_equal(E->gpu_stream.calls - st0.calls, 4 * L);
    assert_int_equal(E->gpu_stream.open - st0.open, 4 * L);
    assert_true(E->gpu_stream.reads - st0.reads >= 4 * L); /* a read over a ring's wrap is two */
    /* a forward without a callback streams nothing */
    const mu_gpu_stream_stats st1 = E->gpu_stream;
    mu_batch_item one = {.s = a, .tokens = q, .n_tokens = 3};
    assert_int_equal(mu_forward(E, &one, 1, &err), 0);
    assert_int_equal(E->gpu_stream.calls, st1.calls);
    assert_int_equal(mu_session_n_past(a), N_TOK + 3);
    mu_session_free(a);
    mu_session_free(b);
}

/* Input rows (image rows) between tokens reach the plugin as rows, at
 * their positions, in one forward and across chunks; the tokens around
 * them as tokens. */
static void test_input_rows(void **state) {
    (void)state;
    mu_err err = {0};
    const int L = mu_model_get_info(M)->n_layer, n_embd = mu_model_get_info(M)->n_embd, ub = E->ubatch;
    const int n_kv = mu_model_get_info(M)->n_head_kv * mu_model_get_info(M)->head_dim;
    mu_session *a;
    assert_int_equal(mu_session_new(E, 64, &a, &err), 0);
    int32_t p[4], q[3];
    prompt(p, 4, 3);
    prompt(q, 3, 4);
    float *rows = calloc((size_t)11 * n_embd, sizeof *rows);
    for (int r = 0; r < 11; r++) rows[(size_t)r * n_embd] = (float)(r + 1);
    mu_batch_item it[3] = {{.s = a, .tokens = p, .n_tokens = 4}, {.s = a, .n_tokens = 11, .in_embd = rows},
                           {.s = a, .tokens = q, .n_tokens = 3}};
    E->ubatch = 8; /* 4 + 11 + 3 positions over chunks of 8: rows in the first, second and third */
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) rc = mu_forward(E, &it[k], 1, &err);
    E->ubatch = ub;
    assert_int_equal(rc, 0);
    assert_int_equal(mu_session_n_past(a), 18);
    uint16_t *k = malloc((size_t)18 * n_kv * 2), *v = malloc((size_t)18 * n_kv * 2);
    int bad = 0;
    for (int il = 0; il < L; il++) {
        assert_int_equal(mu_session_kv_read(a, il, 0, 18, k, v, &err), 0);
        for (int pos = 0; pos < 18; pos++) {
            const int32_t tok = pos < 4 ? p[pos] : pos < 15 ? fake_row_tok(rows + (size_t)(pos - 4) * n_embd) : q[pos - 15];
            for (int i = 0; i < n_kv; i++)
                bad += k[(size_t)pos * n_kv + i] != fake_row(tok, pos, il, i, 0) ||
                       v[(size_t)pos * n_kv + i] != fake_row(tok, pos, il, i, 1);
        }
    }
    assert_int_equal(bad, 0);
    free(k), free(v), free(rows);
    mu_session_free(a);
}

static void test_vision_fallback(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/p.gguf", dir);
    mu_synth_mmproj_opts o;
    mu_synth_mmproj_defaults(&o);
    mu_err err = {0};
    mu_mmproj *p = NULL;
    mu_engine *ec = NULL;
    mu_engine_opts oc = {.backend = "cpu"};
    assert_int_equal(mu_synth_mmproj_write(&o, path, &err), 0);
    assert_int_equal(mu_mmproj_open(path, NULL, &p, &err), 0);
    unlink(path);
    assert_int_equal(mu_engine_new(M, &oc, &ec, &err), 0);
    ig_buf png = ig_png(100, 61, PNG_COLOR_TYPE_RGB, 8, 0, 3);
    mu_media img = {png.p, png.n};
    float *rg = NULL, *rc = NULL;
    int ng = 0, nc = 0;
    assert_int_equal(mu_mmproj_encode(p, E, &img, &rg, &ng, NULL, NULL, &err), 0);
    assert_null(p->gpu);
    assert_int_equal(p->gpu_err.code, MU_E_UNSUPPORTED);
    assert_true(p->gpu_noticed);
    assert_int_equal(mu_mmproj_encode(p, ec, &img, &rc, &nc, NULL, NULL, &err), 0);
    assert_int_equal(ng, nc);
    assert_memory_equal(rg, rc, (size_t)ng * p->info.n_out * sizeof(float));
    free(rg), free(rc), free(png.p);
    mu_engine_free(ec);
    mu_mmproj_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_per_chunk),
        cmocka_unit_test(test_input_rows),
        cmocka_unit_test(test_vision_fallback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
