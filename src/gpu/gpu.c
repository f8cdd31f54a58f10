/* gpu.c: finds and loads the CUDA plugin, and forwards gpu.h to it.
 * Owns: the search for muser-cuda.so ($MUSER_CUDA_PLUGIN, else next to the
 * running executable), the ABI check, and the reason there is no GPU.
 * Loading happens once, on the first call that needs it; a missing plugin
 * or driver is not an error here: the count is 0 and mu_gpu_why_none()
 * says why. Compiled in every build; it never includes CUDA headers. */
#include "gpu.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const mu_gpu_plugin *g_plugin;
static int g_count;
static char g_why[PATH_MAX + 256];

/* Directory of the running executable, with a trailing slash, or "". */
static void exe_dir(char *buf, size_t cap) {
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    buf[0] = 0;
    if (n <= 0) return;
    path[n] = 0;
    char *slash = strrchr(path, '/');
    if (!slash) return;
    slash[1] = 0;
    snprintf(buf, cap, "%s", path);
}

static void load(void) {
    const char *env = getenv("MUSER_CUDA_PLUGIN");
    char path[PATH_MAX + 32];
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        char dir[PATH_MAX];
        exe_dir(dir, sizeof dir);
        snprintf(path, sizeof path, "%smuser-cuda.so", dir);
        if (access(path, F_OK) != 0) {
            snprintf(g_why, sizeof g_why, "no CUDA plugin (%s): this build is CPU only", path);
            return;
        }
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_why, sizeof g_why, "cannot load the CUDA plugin: %s", dlerror());
        return;
    }
    mu_gpu_plugin_fn fn = (mu_gpu_plugin_fn)dlsym(h, MU_GPU_PLUGIN_SYMBOL);
    const mu_gpu_plugin *p = fn ? fn() : NULL;
    if (!p || p->abi != MU_GPU_PLUGIN_ABI) {
        snprintf(g_why, sizeof g_why, "CUDA plugin %s does not match this muser (ABI %d, want %d): rebuild both", path,
                 p ? p->abi : -1, MU_GPU_PLUGIN_ABI);
        dlclose(h);
        return;
    }
    g_plugin = p; /* kept loaded for the life of the process */
    const char *why = NULL;
    g_count = p->count(&why);
    if (g_count <= 0) {
        g_count = 0;
        snprintf(g_why, sizeof g_why, "%s", why ? why : "no CUDA device");
    }
}

static const mu_gpu_plugin *plugin(void) {
    pthread_once(&g_once, load);
    return g_plugin;
}

int mu_gpu_count(void) {
    plugin();
    return g_count;
}

const char *mu_gpu_why_none(void) {
    plugin();
    return g_count ? "" : g_why;
}

const char *mu_gpu_backend_name(void) { return plugin() ? plugin()->name : "none"; }

static int need_device(int device, mu_err *err) {
    if (mu_gpu_count() == 0) return mu_fail(err, MU_E_UNSUPPORTED, "gpu: no usable GPU: %s", g_why);
    if (device < 0 || device >= g_count)
        return mu_fail(err, MU_E_ARG, "gpu: device %d does not exist (%d device%s)", device, g_count,
                       g_count == 1 ? "" : "s");
    return 0;
}

int mu_gpu_probe(int device, mu_gpu_info *info, mu_err *err) {
    int rc = need_device(device, err);
    return rc ? rc : g_plugin->probe(device, info, err);
}

int mu_gpu_model_new(int device, const mu_gpu_model_desc *d, mu_gpu_progress_fn fn, void *user, mu_gpu_model **out,
                     mu_err *err) {
    int rc = need_device(device, err);
    return rc ? rc : g_plugin->model_new(device, d, fn, user, out, err);
}

/* The calls below take objects only a loaded plugin can have made. */
void mu_gpu_model_free(mu_gpu_model *m) {
    if (m) g_plugin->model_free(m);
}

int mu_gpu_sess_new(mu_gpu_model *m, const int *rows, mu_gpu_sess **out, mu_err *err) {
    return g_plugin->sess_new(m, rows, out, err);
}

void mu_gpu_sess_free(mu_gpu_sess *s) {
    if (s) g_plugin->sess_free(s);
}

int mu_gpu_forward(mu_gpu_model *m, const mu_gpu_chunk *c, mu_err *err) { return g_plugin->forward(m, c, err); }

void *mu_gpu_host_alloc(size_t bytes) { return mu_gpu_count() > 0 ? g_plugin->host_alloc(bytes) : NULL; }

void mu_gpu_host_free(void *p) {
    if (p) g_plugin->host_free(p);
}

int mu_gpu_sess_copy(mu_gpu_sess *dst, const mu_gpu_sess *src, mu_err *err) {
    return g_plugin->sess_copy(dst, src, err);
}

int mu_gpu_kv_get(mu_gpu_sess *s, int il, int cell0, int n, uint16_t *k, uint16_t *v, mu_err *err) {
    return g_plugin->kv_get(s, il, cell0, n, k, v, err);
}

int mu_gpu_kv_put(mu_gpu_sess *s, int il, int cell0, int n, const uint16_t *k, const uint16_t *v, mu_err *err) {
    return g_plugin->kv_put(s, il, cell0, n, k, v, err);
}

int mu_gpu_test_matmul(int device, uint32_t type, int rows, int cols, int T, int n_batch, const void *w,
                       const float *x, float *y, mu_err *err) {
    int rc = need_device(device, err);
    return rc ? rc : g_plugin->test_matmul(device, type, rows, cols, T, n_batch, w, x, y, err);
}

int mu_gpu_bench_matmul(int device, uint32_t type, int rows, int cols, int T, int n_batch, const void *w,
                        const float *x, int reps, float *ms, mu_err *err) {
    int rc = need_device(device, err);
    if (rc) return rc;
    if (!g_plugin->bench_matmul) return mu_fail(err, MU_E_UNSUPPORTED, "gpu: the CUDA plugin has no timed matmuls");
    return g_plugin->bench_matmul(device, type, rows, cols, T, n_batch, w, x, reps, ms, err);
}

int mu_gpu_bench_copy(int device, size_t bytes, int reps, float *ms, mu_err *err) {
    int rc = need_device(device, err);
    if (rc) return rc;
    if (!g_plugin->bench_copy) return mu_fail(err, MU_E_UNSUPPORTED, "gpu: the CUDA plugin has no timed copies");
    return g_plugin->bench_copy(device, bytes, reps, ms, err);
}

int mu_gpu_test_get_rows(int device, uint32_t type, int rows, int cols, const void *w, const int32_t *ids, int n,
                         float *y, mu_err *err) {
    int rc = need_device(device, err);
    return rc ? rc : g_plugin->test_get_rows(device, type, rows, cols, w, ids, n, y, err);
}

int mu_gpu_test_attention(int device, const mu_gpu_attn_case *c, float *out_prefill, float *out_rows, mu_err *err) {
    int rc = need_device(device, err);
    return rc ? rc : g_plugin->test_attention(device, c, out_prefill, out_rows, err);
}

int mu_gpu_test_best(int device, const float *rows, int n_rows, int n, int32_t *best, mu_err *err) {
    int rc = need_device(device, err);
    return rc ? rc : g_plugin->test_best(device, rows, n_rows, n, best, err);
}

int mu_gpu_vit_new(int device, const mu_gpu_vit_desc *d, mu_gpu_vit **out, mu_err *err) {
    int rc = need_device(device, err);
    if (rc) return rc;
    if (!g_plugin->vit_new || !g_plugin->vit_free || !g_plugin->vit_encode)
        return mu_fail(err, MU_E_UNSUPPORTED, "gpu: the CUDA plugin has no vision encoder");
    return g_plugin->vit_new(device, d, out, err);
}

void mu_gpu_vit_free(mu_gpu_vit *v) {
    if (v) g_plugin->vit_free(v);
}

int mu_gpu_vit_encode(mu_gpu_vit *v, const mu_gpu_vit_image *im, mu_err *err) {
    return g_plugin->vit_encode(v, im, err);
}

int mu_gpu_vit_test_gemm(int device, int T, int N, int K, const uint16_t *a, const uint16_t *w, const float *bias,
                         const float *res, bool gelu, float *y, mu_err *err) {
    int rc = need_device(device, err);
    if (rc) return rc;
    if (!g_plugin->vit_test_gemm) return mu_fail(err, MU_E_UNSUPPORTED, "gpu: the CUDA plugin has no vision encoder");
    return g_plugin->vit_test_gemm(device, T, N, K, a, w, bias, res, gelu, y, err);
}

int mu_gpu_vit_test_attn(int device, int n, int n_head, int hd, const float *q, const uint16_t *k, const uint16_t *v,
                         const int *lo, const int *hi, bool global, uint16_t *out, mu_err *err) {
    int rc = need_device(device, err);
    if (rc) return rc;
    if (!g_plugin->vit_test_attn) return mu_fail(err, MU_E_UNSUPPORTED, "gpu: the CUDA plugin has no vision encoder");
    return g_plugin->vit_test_attn(device, n, n_head, hd, q, k, v, lo, hi, global, out, err);
}

int mu_gpu_draft_new(int device, const mu_gpu_draft_desc *d, mu_gpu_draft **out, mu_err *err) {
    int rc = need_device(device, err);
    if (rc) return rc;
    const mu_gpu_plugin *p = g_plugin;
    if (!p->draft_new || !p->draft_free || !p->draft_set_head || !p->dseq_new || !p->dseq_free || !p->dseq_inject ||
        !p->dseq_truncate || !p->dseq_pass || !p->dseq_head)
        return mu_fail(err, MU_E_UNSUPPORTED, "gpu: the CUDA plugin has no drafter");
    return g_plugin->draft_new(device, d, out, err);
}

void mu_gpu_draft_free(mu_gpu_draft *d) {
    if (d) g_plugin->draft_free(d);
}

int mu_gpu_draft_set_head(mu_gpu_draft *d, const mu_gpu_tensor *head, mu_err *err) {
    return g_plugin->draft_set_head(d, head, err);
}

int mu_gpu_dseq_new(mu_gpu_draft *d, int n_ctx, mu_gpu_dseq **out, mu_err *err) {
    return g_plugin->dseq_new(d, n_ctx, out, err);
}

void mu_gpu_dseq_free(mu_gpu_dseq *q) {
    if (q) g_plugin->dseq_free(q);
}

int mu_gpu_dseq_inject(mu_gpu_dseq *q, int pos0, int n, const float *feat, const float *cs, const float *sn,
                       mu_err *err) {
    return g_plugin->dseq_inject(q, pos0, n, feat, cs, sn, err);
}

int mu_gpu_dseq_truncate(mu_gpu_dseq *q, int n, int n_past, mu_err *err) {
    return g_plugin->dseq_truncate(q, n, n_past, err);
}

int mu_gpu_dseq_pass(mu_gpu_dseq *q, const float *x0, const float *cs, const float *sn, int pos, int n_ctx_rows,
                     int n_draft, mu_err *err) {
    return g_plugin->dseq_pass(q, x0, cs, sn, pos, n_ctx_rows, n_draft, err);
}

int mu_gpu_dseq_head(mu_gpu_dseq *q, int from, int n, int32_t *best, float *scores, mu_err *err) {
    return g_plugin->dseq_head(q, from, n, best, scores, err);
}
