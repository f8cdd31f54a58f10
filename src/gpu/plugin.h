/* plugin.h: the table the CUDA plugin (muser-cuda.so) exports and gpu.c
 * loads. Pure C; the plugin fills a mu_err itself (it cannot call into the
 * binary that loads it). MU_GPU_PLUGIN_ABI changes whenever this table or
 * a structure of gpu.h changes, so a stale plugin is refused, never called.
 * ABI 11: the DFlash drafter (draft_*, dseq_*; NULL in a plugin without
 * one). ABI 12: bench_matmul. ABI 13: bench_copy. */
#ifndef MU_GPU_PLUGIN_H
#define MU_GPU_PLUGIN_H

#include "gpu.h"

#define MU_GPU_PLUGIN_ABI 13
#define MU_GPU_PLUGIN_SYMBOL "mu_gpu_plugin_v1"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int abi;                      /* MU_GPU_PLUGIN_ABI */
    const char *name;             /* "cuda" */
    /* devices usable now; on 0, why is set to a reason */
    int (*count)(const char **why);
    int (*probe)(int device, mu_gpu_info *info, mu_err *err);
    int (*model_new)(int device, const mu_gpu_model_desc *d, mu_gpu_progress_fn fn, void *user, mu_gpu_model **out,
                     mu_err *err);
    void (*model_free)(mu_gpu_model *m);
    int (*sess_new)(mu_gpu_model *m, const int *rows, mu_gpu_sess **out, mu_err *err);
    void (*sess_free)(mu_gpu_sess *s);
    int (*forward)(mu_gpu_model *m, const mu_gpu_chunk *c, mu_err *err);
    int (*kv_get)(mu_gpu_sess *s, int il, int cell0, int n, uint16_t *k, uint16_t *v, mu_err *err);
    int (*kv_put)(mu_gpu_sess *s, int il, int cell0, int n, const uint16_t *k, const uint16_t *v, mu_err *err);
    int (*test_matmul)(int device, uint32_t type, int rows, int cols, int T, int n_batch, const void *w,
                       const float *x, float *y, mu_err *err);
    int (*test_get_rows)(int device, uint32_t type, int rows, int cols, const void *w, const int32_t *ids, int n,
                         float *y, mu_err *err);
    int (*test_attention)(int device, const mu_gpu_attn_case *c, float *out_prefill, float *out_rows, mu_err *err);
    /* the vision encoder (ABI 7); NULL in a plugin without one */
    int (*vit_new)(int device, const mu_gpu_vit_desc *d, mu_gpu_vit **out, mu_err *err);
    void (*vit_free)(mu_gpu_vit *v);
    int (*vit_encode)(mu_gpu_vit *v, const mu_gpu_vit_image *im, mu_err *err);
    int (*vit_test_gemm)(int device, int T, int N, int K, const uint16_t *a, const uint16_t *w, const float *bias,
                         const float *res, bool gelu, float *y, mu_err *err);
    int (*vit_test_attn)(int device, int n, int n_head, int hd, const float *q, const uint16_t *k, const uint16_t *v,
                         const int *lo, const int *hi, bool global, uint16_t *out, mu_err *err);
    /* page-locked host memory (ABI 9): NULL when the driver refuses */
    int (*sess_copy)(mu_gpu_sess *dst, const mu_gpu_sess *src, mu_err *err);
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* k_best on rows given by the host (ABI 10) */
    int (*test_best)(int device, const float *rows, int n_rows, int n, int32_t *best, mu_err *err);
    /* the DFlash drafter (ABI 11); NULL in a plugin without one */
    int (*draft_new)(int device, const mu_gpu_draft_desc *d, mu_gpu_draft **out, mu_err *err);
    void (*draft_free)(mu_gpu_draft *d);
    int (*draft_set_head)(mu_gpu_draft *d, const mu_gpu_tensor *head, mu_err *err);
    int (*dseq_new)(mu_gpu_draft *d, int n_ctx, mu_gpu_dseq **out, mu_err *err);
    void (*dseq_free)(mu_gpu_dseq *q);
    int (*dseq_inject)(mu_gpu_dseq *q, int pos0, int n, const float *feat, const float *cs, const float *sn,
                       mu_err *err);
    int (*dseq_truncate)(mu_gpu_dseq *q, int n, int n_past, mu_err *err);
    int (*dseq_pass)(mu_gpu_dseq *q, const float *x0, const float *cs, const float *sn, int pos, int n_ctx_rows,
                     int n_draft, mu_err *err);
    int (*dseq_head)(mu_gpu_dseq *q, int from, int n, int32_t *best, float *scores, mu_err *err);
    /* timed matmuls for bench/gpukernbench.c (ABI 12); NULL in a plugin without them */
    int (*bench_matmul)(int device, uint32_t type, int rows, int cols, int T, int n_batch, const void *w,
                        const float *x, int reps, float *ms, mu_err *err);
    /* the device-to-device copy rate (ABI 13) */
    int (*bench_copy)(int device, size_t bytes, int reps, float *ms, mu_err *err);
} mu_gpu_plugin;

typedef const mu_gpu_plugin *(*mu_gpu_plugin_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
