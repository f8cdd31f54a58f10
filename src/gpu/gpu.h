/* gpu.h: the GPU boundary, in pure C.
 * Owns: finding the CUDA backend at run time (a plugin, muser-cuda.so,
 * loaded with dlopen, so one binary runs where no NVIDIA driver or CUDA
 * runtime exists), device discovery, and the calls the engine makes: a
 * model's weights uploaded once, sessions' F16 KV cells on the device, and a
 * forward pass over a chunk of tokens that returns logits.
 * Does not: decide which tokens run (the engine does), or see CUDA types;
 * only the plugin's .cu files include CUDA headers.
 *
 * The device forward computes what the CPU engine computes, with its
 * rounding where it matters for parity with llama.cpp: activations are
 * quantized to each weight's dot type (Q8_K, Q8_0, F16, BF16) exactly as
 * the CPU does and the matmuls accumulate in the CPU's order; q and the
 * softmax weights are rounded to F16 for attention; the KV cache has the
 * same cells (position p in cell p % rows), so rows move between CPU and
 * GPU sessions unchanged. docs/cuda.md has the details. */
#ifndef MU_GPU_GPU_H
#define MU_GPU_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[128];
    int major, minor;       /* compute capability */
    size_t total_bytes, free_bytes;
} mu_gpu_info;

/* A weight as the GGUF holds it: rows of ne0 elements, ne1 rows. */
typedef struct {
    const void *data;
    uint32_t type;
    int64_t ne0, ne1;
    size_t bytes;
} mu_gpu_tensor;

typedef struct {
    mu_gpu_tensor attn_norm, wq, wk, wv, wgate, q_norm, k_norm, wo, post_attn_norm;
    mu_gpu_tensor ffn_norm, ffn_gate, ffn_up, ffn_down, post_ffw_norm;
} mu_gpu_layer;

typedef struct {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_swa;
    float eps, post_eps, logit_scale, softcap;
    const bool *swa_layers;  /* [n_layer] */
    mu_gpu_tensor tok_embd, output_norm, output;
    const mu_gpu_layer *layers; /* [n_layer] */
} mu_gpu_model_desc;

typedef struct mu_gpu_model mu_gpu_model;
typedef struct mu_gpu_sess mu_gpu_sess;

/* What layer streaming did, for tests and benchmarks; counts, no times. */
typedef struct mu_gpu_stream_stats {
    long calls;  /* on_layer calls */
    long open;   /* of them, made before the pass's final synchronization */
    long busy;   /* of them, made while the device had not yet finished the pass
                  * (a snapshot: depends on timing, never a test verdict) */
    long reads;  /* mu_gpu_kv_get calls served inside on_layer, on the second stream */
} mu_gpu_stream_stats;

/* One chunk of at most 512 tokens of one or more sessions; a session's
 * tokens are consecutive and at consecutive positions. */
typedef struct {
    int T;
    const int32_t *tokens;        /* [T] */
    const int *pos;               /* [T] */
    mu_gpu_sess *const *sess;     /* [T] */
    const bool *out;              /* [T]: the token wants logits */
    int n_out;                    /* number of true entries in out */
    int t_solo;                   /* tokens [t_solo, T) round as one-token passes (mu_batch_item.solo) */
    const float *rope;            /* [T][head_dim / 2][2] cos, sin of the sliding layers' RoPE */
    float *const *logits;         /* [n_out] host rows of n_vocab, in token order (NULL: not wanted) */
    /* NULL, or [n_out]: NULL, or where row r's best goes: the first index
     * of its largest value (ties: the smallest index; -0 equals +0) when
     * every value of the row is finite, else -1; what the host's
     * mu_logits_argmax and mu_logits_finite would say of the row */
    int32_t *const *best;
    float *const *embd;           /* [n_out] host rows of n_embd for the final-norm state, or NULL */
    /* NULL, or seconds per phase added in (device time, CUDA events), in
     * the engine's phase order: norms, qkv, rope, attn, wo, ffn_up,
     * ffn_down, logits */
    double *prof;
    /* Layer streaming: NULL, or called on the calling thread for il = 0 ..
     * n_layer - 1 in order, each as soon as layer il's K and V rows of the
     * chunk are in the sessions' cells, while the device computes the later
     * layers (before the pass's final synchronization). Inside it,
     * mu_gpu_kv_get reads on a second stream, after the event of the
     * layer it reads, without waiting for the pass; mu_gpu_kv_put and mu_gpu_forward of
     * the same model fail (MU_E_STATE). A streaming pass records one event
     * per layer and never replays a captured graph; passes without it are
     * unchanged. */
    void (*on_layer)(void *user, int il);
    void *on_layer_user;
    mu_gpu_stream_stats *stream_stats; /* NULL, or counts added in (on_layer) */
    /* NULL, or [T]: NULL for a token, or a host row of n_embd floats that
     * takes the place of the token's embedding row (an image row, as
     * llama.cpp's batch.embd; the unweighted norm follows as for tokens) */
    const float *const *in_rows;
    /* Hidden-state capture (a drafter's features, mu_batch_item.feat):
     * NULL, or [T]: NULL for a token, or a host block of n_feat_layers[t]
     * rows of n_embd floats, row k the input of layer feat_layers[t][k]
     * (the residual stream entering it; layer 0: the normed embedding), as
     * forward.c's capture_feat copies it. A pass with captures never
     * replays a captured graph. */
    float *const *feat;
    const int *const *feat_layers; /* [T] */
    const int *n_feat_layers;      /* [T] */
} mu_gpu_chunk;

/* Called with bytes uploaded so far; nonzero stops the upload (MU_E_STATE). */
typedef int (*mu_gpu_progress_fn)(void *user, uint64_t done, uint64_t total);

/* Devices usable now (0 in CPU-only builds, without the plugin, or without
 * a driver or device); loads the plugin on first use. */
int mu_gpu_count(void);
/* Why mu_gpu_count() is 0 ("" when it is not). */
const char *mu_gpu_why_none(void);
/* "cuda" when the plugin is loaded, else "none". */
const char *mu_gpu_backend_name(void);
int mu_gpu_probe(int device, mu_gpu_info *info, mu_err *err);

int mu_gpu_model_new(int device, const mu_gpu_model_desc *d, mu_gpu_progress_fn fn, void *user, mu_gpu_model **out,
                     mu_err *err);
void mu_gpu_model_free(mu_gpu_model *m);
/* A session's KV cells: rows[il] cells of n_head_kv * head_dim F16 per layer. */
int mu_gpu_sess_new(mu_gpu_model *m, const int *rows, mu_gpu_sess **out, mu_err *err);
void mu_gpu_sess_free(mu_gpu_sess *s);
int mu_gpu_forward(mu_gpu_model *m, const mu_gpu_chunk *c, mu_err *err);
/* Page-locked host memory of `bytes` (zeroed), or NULL where there is no
 * device or the driver refuses. Output rows (mu_gpu_chunk.logits) that lie
 * in it are written by the device directly, without a staging copy. Free
 * with mu_gpu_host_free. */
void *mu_gpu_host_alloc(size_t bytes);
void mu_gpu_host_free(void *p);
/* K and V rows of cells [cell0, cell0 + n) of layer il, as F16 [n][n_kv]. */
/* Every cell of every layer of src into dst, on the device (two sessions
 * of one model with the same rows per layer). */
int mu_gpu_sess_copy(mu_gpu_sess *dst, const mu_gpu_sess *src, mu_err *err);
int mu_gpu_kv_get(mu_gpu_sess *s, int il, int cell0, int n, uint16_t *k, uint16_t *v, mu_err *err);
/* The reverse; never inside mu_gpu_chunk.on_layer. */
int mu_gpu_kv_put(mu_gpu_sess *s, int il, int cell0, int n, const uint16_t *k, const uint16_t *v, mu_err *err);

/* Kernel tests (tests/gpu): one matmul y[T][rows] = W x^T on the device,
 * W a host GGUF-layout weight of `rows` rows of `cols` elements of `type`,
 * x [T][cols] floats quantized on the device to the dot type; rows t <
 * n_batch round as the CPU's vec_dot_batch. And rows `ids` of W dequantized
 * into y [n][cols]. */
int mu_gpu_test_matmul(int device, uint32_t type, int rows, int cols, int T, int n_batch, const void *w,
                       const float *x, float *y, mu_err *err);
int mu_gpu_test_get_rows(int device, uint32_t type, int rows, int cols, const void *w, const int32_t *ids, int n,
                         float *y, mu_err *err);
/* Benchmarks (bench/gpukernbench.c): the matmul of mu_gpu_test_matmul
 * launched reps times after one untimed launch, the activations quantized
 * once; ms[i]: launch i's time between two CUDA events. n_batch < 0: the
 * one forward takes for a matmul of T rows. */
int mu_gpu_bench_matmul(int device, uint32_t type, int rows, int cols, int T, int n_batch, const void *w,
                        const float *x, int reps, float *ms, mu_err *err);
/* The copy rate (bench/gpukernbench.c copy): one untimed device-to-device
 * copy of bytes, then reps copies, ms[i] copy i's time between two events. */
int mu_gpu_bench_copy(int device, size_t bytes, int reps, float *ms, mu_err *err);
/* Kernel tests: one layer's attention on the prefill kernels (every
 * session has >= 2 tokens in the chunk) or the decode kernels (every token
 * alone in its session, at most 8), into out_prefill, and on the row
 * kernels, into out_rows ([T][n_head * head_dim] each). */
typedef struct {
    int T, n_head, n_head_kv, head_dim, n_swa;
    bool swa;
    const float *q, *gate;               /* [T][n_head * head_dim] */
    const int *pos, *sess;               /* [T] */
    int n_sess;
    const int *rows;                     /* [n_sess] cells */
    const uint16_t *const *k, *const *v; /* [n_sess] -> F16 [rows][n_head_kv * head_dim] */
} mu_gpu_attn_case;
int mu_gpu_test_attention(int device, const mu_gpu_attn_case *c, float *out_prefill, float *out_rows, mu_err *err);
/* The best (mu_gpu_chunk.best) of n_rows rows of n floats, rows[r * n + i],
 * as the device computes it for logits rows (the rows copied to the device
 * at float offset 1 when n is odd, so a row's start is not always 16-byte
 * aligned) */
int mu_gpu_test_best(int device, const float *rows, int n_rows, int n, int32_t *best, mu_err *err);

/* Muse Glimmer's vision encoder on the device (gpu_cuda_vit.cu): the
 * projector's weights uploaded once (matrices as F16: F16 as they are,
 * F32, BF16 and Q8_0 converted on the device; vectors F32), then one image
 * at a time. Matrices are rows of ne0 elements (the patch kernel flattened
 * to [n_embd][3 * ps * ps], [c][ky][kx] inside a row). Biases and the
 * pre/post norms may have data == NULL (absent). */
typedef struct {
    mu_gpu_tensor ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
    mu_gpu_tensor ln2_w, ln2_b, up_w, up_b, down_w, down_b;
} mu_gpu_vit_layer;

typedef struct {
    int n_layer, n_embd, n_ff, n_head, head_dim, patch_size, mm_hidden, n_out;
    float eps;
    const bool *global;                    /* [n_layer]: full attention (else windowed) */
    mu_gpu_tensor patch_w, patch_b, pre_w, pre_b, post_w, post_b, mm[3];
    const mu_gpu_vit_layer *layers;        /* [n_layer] */
} mu_gpu_vit_desc;

/* One image, laid out by the host (src/vision/vit.h, mu_vit_plan): tokens
 * in the permuted (window) order. */
typedef struct {
    int nx, ny;                            /* pixels, multiples of 2 * patch_size */
    const float *chw;                      /* [3][ny][nx] */
    int gw, gh;                            /* patch grid; n = gw * gh tokens */
    const int *perm;                       /* [n] token i is grid patch perm[i] */
    const int *inv;                        /* [n] the inverse */
    const int *pw, *ph;                    /* [n] 1-based RoPE positions (column, row) */
    const int *win_lo, *win_hi;            /* [n] token i's window of keys (windowed layers) */
    const float *pos;                      /* [n][n_embd] the resized position grid, permuted */
    const float *rope_cs;                  /* [n_pos + 1][head_dim / 2] cos, sin pairs */
    int n_pos;
    float *out;                            /* [(gw / 2) * (gh / 2)][n_out] host rows */
} mu_gpu_vit_image;

typedef struct mu_gpu_vit mu_gpu_vit;
/* MU_E_UNSUPPORTED when the plugin has no vision encoder or a weight type
 * is not one it converts. */
int mu_gpu_vit_new(int device, const mu_gpu_vit_desc *d, mu_gpu_vit **out, mu_err *err);
void mu_gpu_vit_free(mu_gpu_vit *v);
int mu_gpu_vit_encode(mu_gpu_vit *v, const mu_gpu_vit_image *im, mu_err *err);
/* Kernel tests of the encoder (tests/gpu/test_gpu_vision.c): its matmul,
 * y[t][r] = a row t . w row r (+ bias[r], GELU, + res[t][r]; each
 * optional) with a [T][K] and w [N][K] F16 bits, y [T][N]; and its
 * attention of n_head heads of hd over n rows of E = n_head * hd: q F32,
 * k and v F16 bits, query i sees keys [lo[i], hi[i]) or all n when global,
 * out F16 bits. */
int mu_gpu_vit_test_gemm(int device, int T, int N, int K, const uint16_t *a, const uint16_t *w, const float *bias,
                         const float *res, bool gelu, float *y, mu_err *err);
int mu_gpu_vit_test_attn(int device, int n, int n_head, int hd, const float *q, const uint16_t *k, const uint16_t *v,
                         const int *lo, const int *hi, bool global, uint16_t *out, mu_err *err);

/* A DFlash drafter on the device (gpu_cuda_draft.cu; src/engine/draft.c
 * uses it when its target runs on CUDA): the drafter's weights uploaded
 * once in their own types, its rows of the target's features kept on the
 * device per sequence, and the drafting pass and the draft head run there.
 * The matmuls are the target's kernels (the CPU's vec_dot rounding, as the
 * CPU drafter's multi-row dots); norms, RoPE, attention and SwiGLU are
 * plain float code in another order than the CPU drafter's: a draft only
 * proposes tokens, the target decides every one (docs/speculative.md).
 * Norm vectors are F32 (data NULL: absent, the post norms). */
typedef struct {
    mu_gpu_tensor attn_norm, wq, wk, wv, wo, q_norm, k_norm, attn_post_norm;
    mu_gpu_tensor ffn_norm, ffn_gate, ffn_up, ffn_down, ffn_post_norm;
    bool swa;                              /* a sliding layer (n_swa) */
} mu_gpu_draft_layer;

typedef struct {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, block_size, n_feat, n_swa;
    float eps, kq_scale;
    bool causal;
    mu_gpu_tensor fc, enc_norm, output_norm;
    const mu_gpu_draft_layer *layers;      /* [n_layer] */
} mu_gpu_draft_desc;

typedef struct mu_gpu_draft mu_gpu_draft;
typedef struct mu_gpu_dseq mu_gpu_dseq;

/* Most rows of one mu_gpu_dseq_inject call. */
#define MU_GPU_DRAFT_ROWS 64

/* MU_E_UNSUPPORTED when the plugin has no drafter or a weight type is not
 * one the device runs. The head is set apart (mu_gpu_draft_set_head). */
int mu_gpu_draft_new(int device, const mu_gpu_draft_desc *d, mu_gpu_draft **out, mu_err *err);
void mu_gpu_draft_free(mu_gpu_draft *d);
/* The draft head: `head` rows of n_embd (the shortlist's rows of the
 * output matrix, or all of it), replacing the one before. */
int mu_gpu_draft_set_head(mu_gpu_draft *d, const mu_gpu_tensor *head, mu_err *err);
/* A sequence of n_ctx positions, none present. */
int mu_gpu_dseq_new(mu_gpu_draft *d, int n_ctx, mu_gpu_dseq **out, mu_err *err);
void mu_gpu_dseq_free(mu_gpu_dseq *q);
/* The rows of positions pos0 .. pos0 + n - 1 (n <= MU_GPU_DRAFT_ROWS)
 * from their features [n][n_feat]; cs, sn [n][head_dim / 2]: RoPE's cos
 * and sin of each position. They become present. */
int mu_gpu_dseq_inject(mu_gpu_dseq *q, int pos0, int n, const float *feat, const float *cs, const float *sn,
                       mu_err *err);
/* Positions [n, n_past) are no longer present. */
int mu_gpu_dseq_truncate(mu_gpu_dseq *q, int n, int n_past, mu_err *err);
/* The pass over the block x0 [block_size][n_embd] (embedded rows) at
 * positions pos .., cs, sn [block_size][head_dim / 2]; it attends to the
 * present rows of positions < n_ctx_rows and to the block; rows 1 ..
 * n_draft are kept after the final norm. */
int mu_gpu_dseq_pass(mu_gpu_dseq *q, const float *x0, const float *cs, const float *sn, int pos, int n_ctx_rows,
                     int n_draft, mu_err *err);
/* Kept rows [from, from + n) through the head: best[i] the first index of
 * row i's largest score (-1: not finite), and with scores, the rows'
 * scores [n][head rows]. */
int mu_gpu_dseq_head(mu_gpu_dseq *q, int from, int n, int32_t *best, float *scores, mu_err *err);

#ifdef __cplusplus
}
#endif
#endif
