/* engine.h: internal structures of the engine (the public API is
 * include/muser.h). Shapes use [rows][cols] with cols contiguous. */
#ifndef MU_ENGINE_ENGINE_H
#define MU_ENGINE_ENGINE_H

#include <stdatomic.h>
#include "../../include/muser.h"
#include "../base/pool.h"
#include "../gpu/gpu.h"
#include "../kern/kern.h"
#include "../model/model.h"

#define MU_UBATCH 512   /* most positions one forward chunk computes */
#define MU_POST_NORM_EPS 1e-8f
#define MU_LOGIT_ROWS 16 /* output-matrix rows computed per pass */
#define MU_ATTN_ROWS 64  /* most (token, head) rows of one attention work item */
#define MU_SCORES_MAX ((size_t)4 << 20) /* floats of attention scores a thread may hold at long contexts (16 MiB) */

/* An attention work item (attn.c). */
typedef struct mu_cells mu_cells;

typedef struct {
    int t0, nt;  /* chunk tokens [t0, t0 + nt), one sequence, consecutive positions */
    int g;       /* KV head */
    int h0, nh;  /* query heads [h0, h0 + nh), all of KV head g */
    int batch;   /* the sequence has >= 2 tokens in the chunk */
} mu_attn_item;

/* Scratch for one chunk of at most MU_UBATCH tokens. */
typedef struct {
    float *h;        /* [T][n_embd] residual stream */
    float *a;        /* [T][max(n_embd, n_q)] normed input / attention out */
    float *q;        /* [T][n_q] */
    float *k, *v;    /* [T][n_kv] */
    float *g;        /* [T][n_q] attention gate */
    float *o;        /* [T][n_embd] projection out */
    float *f1, *f2;  /* [T][n_ff] ffn gate / up */
    uint8_t *qa;     /* quantized activations, [T][row bytes of the widest input] per dot type slot */
    size_t qa_stride;
    uint8_t *qp;     /* [T + 16][widest input] bytes: one slot's rows as the table prepares them
                      * (kern.h mu_prep_fn); NULL when the table prepares none */
    /* attention, per thread: scores [scores_cap], q and output rows
     * [MU_ATTN_ROWS][head_dim]; the work items of one layer */
    float *scores, *attn_q, *attn_o;
    mu_f16 *v16;     /* [T][n_kv] V rows on their way into the transposed cache (job_vt) */
    size_t scores_cap;
    mu_attn_item *attn_items;
    int attn_items_cap;
    int max_ctx;
    /* per token of the chunk */
    mu_session **tok_sess;
    int *tok_pos;
    int *tok_out;    /* logits row in its session, or -1 */
    int *out_tok;    /* [T] chunk token of each output row */
    float **tok_embd; /* [T] where the token's final-norm row goes (mu_batch_item.embd), or NULL */
    const float **tok_in; /* [T] the token's input row (mu_batch_item.in_embd), or NULL: its embedding */
    const mu_batch_item **tok_item; /* [T] the token's item when it captures layer inputs (feat) or
                                       streams its layers (on_layer), else NULL */
    int *tok_idx;    /* [T] the token's index in its item */
    int *tok_cell;   /* [T][2] the token's cell in the full layers' cache and in the sliding ring */
    int n_feat_tok;  /* tokens of the chunk that capture layer inputs */
    int n_layer_tok; /* tokens of the chunk whose item streams its layers (on_layer) */
    int t_solo;      /* chunk tokens [t_solo, T) round as one-token passes (mu_batch_item.solo) */
    float *lg;       /* [MU_LOGIT_ROWS][n_vocab] raw logits */
} mu_scratch;

/* Matrices of one matmul job (forward.c: those sharing an input). */
#define MU_MM_JOB_MAX 4

/* What one pool thread did in the matmuls (forward.c, job_matmul), for
 * tests of the work split, and the claims on its share of the running
 * job: a line of its own, as every thread writes its entry. */
typedef struct {
    uint64_t macs;   /* multiply-adds so far: rows x columns x activation rows */
    int stolen;      /* row blocks of other threads' shares it took in the latest job */
    int toks;        /* tokens of per-token jobs it took so far (forward.c, tok_claim) */
    atomic_int claim[MU_MM_JOB_MAX]; /* the next unclaimed block of this thread's share of matrix m */
    char pad[64 - sizeof(uint64_t) - 2 * sizeof(int) - MU_MM_JOB_MAX * sizeof(atomic_int)];
} mu_thread_work;

struct mu_engine {
    mu_model *m;
    const mu_kern *kern;
    mu_pool *pool;
    mu_scratch s;
    int n_q, n_kv;   /* n_head*head_dim, n_head_kv*head_dim */
    int ubatch;      /* chunk size, MU_UBATCH unless $MUSER_UBATCH says less (tests) */
    bool prof_on;
    bool best_off;   /* $MUSER_LOGITS_BEST=0: mu_session_logits_best answers -1 (A/B comparisons) */
    mu_profile prof; /* mu_engine_profile */
    mu_gpu_model *gpu; /* the CUDA backend's copy of the weights; NULL on the CPU */
    int gpu_dev;       /* its device */
    int cpu_threads;   /* the CPU threads asked for (0: every CPU); a GPU engine's pool has one,
                        * a DFlash drafter bound to it makes a pool of these (draft.c) */
    mu_gpu_stream_stats gpu_stream; /* layer streaming on the GPU so far (counts, for tests) */
    float *rope;       /* GPU: [MU_UBATCH][head_dim] RoPE angles of a chunk */
    mu_thread_work *work; /* [n_threads], the matmuls' work per thread */
    int mm_rot;        /* rotation of the next matrix's row split */
    int mm_hold;       /* test hook: this pool thread starts its matmuls only once every block
                        * of the job is claimed (the others take its share), and its per-token
                        * jobs once every token is; -1: none */
    int attn_split_min; /* cells from which a decode step's full layer splits over the threads (attn.c) */
    atomic_int tok_next; /* a per-token job's next unclaimed token (forward.c, tok_claim) */
    int tok_unit;        /* tokens a claim takes */
};

struct mu_session {
    mu_engine *e;
    int n_ctx, n_past;
    int *rows;          /* [n_layer] cache cells of each layer: position p is in cell p % rows */
    mu_f16 **kc;        /* [n_layer] -> [rows][n_kv] */
    mu_f16 **vt;        /* [n_layer] -> [n_head_kv][head_dim][rows] (transposed) */
    size_t kv_map_bytes;
    void *kv_map;       /* one anonymous mapping holding every layer */
    float *logits;      /* [n_logits_cap][n_vocab] */
    int32_t *logits_best; /* [n_logits_cap] row i's argmax when every value is finite, else -1 (not
                             known): written by the pass that writes row i (the GPU's, or -1) */
    int n_logits_cap, n_logits;
    bool logits_pinned; /* logits is page-locked (mu_gpu_host_alloc): the device writes it directly */
    mu_gpu_sess *gs;    /* the cells on the GPU (kc, vt unused) when the engine has one */
    int hi;             /* the most positions held since the last reset: which ring cells a
                           truncation emptied (shift.c builds the cell map from it) */
    bool installed;     /* rows came from outside (kv_write, state_load) since the last reset */
    mu_cells *cells;    /* [2] after a context shift (shift.c): the full layers' cells and the
                           sliding ring's, as llama.cpp's allocator placed them; NULL while
                           position p is in cell p % rows */
};

/* One KV cache's cells after a context shift (shift.c), as llama.cpp's
 * llama_kv_cells holds them for one sequence. */
struct mu_cells {
    int n;        /* cells */
    int *pos;     /* [n] position held, -1 when empty */
    int *shift;   /* [n] rotation owed to the cell's K rows (applied at the next forward) */
    int head;     /* where the next search starts */
    int used;     /* cells that hold a position */
    bool pending; /* some cell moved since the last K rotation */
};

/* Context shift internals (shift.c). Cell of chunk token t on layer il. */
static inline int mu_tok_cell(const mu_engine *e, int t, int il) {
    return e->s.tok_cell[2 * t + (e->m->info.swa_layers[il] ? 1 : 0)];
}
/* Places the chunk's tokens [t0, t0 + n) of session s (consecutive
 * positions) in cells: p % rows, or llama.cpp's find_slot and apply_ubatch
 * on a shifted session. Called once per session run, before the chunk's
 * layers. */
void mu_shift_place(mu_engine *e, mu_session *s, int t0, int n);
/* Rotates the K rows a shift moved (llama.cpp's K-shift graph) before a
 * forward reads them. */
void mu_shift_apply(mu_session *s);
/* The shifted session's cells [0, *hi) hold every position (used_max_p1). */
int mu_shift_used_end(const mu_session *s, int il);
void mu_shift_free(mu_session *s);
/* Truncation of a shifted session (llama.cpp's seq_rm(n, -1)). */
int mu_shift_truncate(mu_session *s, int n, bool dry, mu_err *err);

/* Grows the attention scratch for sessions of n_ctx positions. */
int mu_engine_reserve_ctx(mu_engine *e, int n_ctx, mu_err *err);

/* Writes one position's K and V rows ([n_kv] F16 each) into the cache. */
void mu_session_row_put(mu_session *s, int il, int pos, const uint16_t *k, const uint16_t *v);
#if defined(__x86_64__)
/* dst[c * ds + r] = src[r * ss + c] for r, c < 16 (rows_avx2.c; AVX2 CPUs) */
void mu_rows_tr16_avx2(const uint16_t *src, size_t ss, uint16_t *dst, size_t ds);
#endif

/* y_r = x_r / sqrt(mean(x_r^2) + eps) [* w] for rows r < n_rows of n
 * floats (row stride `stride` in x and y; y may be x): llama.cpp's
 * rms_norm (forward.c; the drafter's norms too). */
void mu_rms_rows(const mu_kern *k, float *y, const float *x, const float *w, int n, int n_rows, size_t stride,
                 float eps);

/* t as the GPU layer describes a weight (zeroed for NULL: an absent one). */
static inline mu_gpu_tensor mu_gpu_tensor_of(const mu_gguf_tensor *t) {
    if (!t) return (mu_gpu_tensor){0};
    return (mu_gpu_tensor){.data = t->data, .type = t->type, .ne0 = t->ne[0], .ne1 = t->ne[1], .bytes = t->bytes};
}

/* GPU backend (forward_gpu.c): upload the weights, run one batch. */
int mu_engine_gpu_open(mu_engine *e, int device, mu_check_progress_fn fn, void *user, mu_err *err);
/* Frees the session's logits rows, page-locked or not (none left). */
void mu_session_logits_free(mu_session *s);
int mu_forward_gpu(mu_engine *e, const mu_batch_item *items, int n_items, mu_err *err);

/* GPT-J RoPE angles of one position (forward.c): cs[i], sn[i] for i < hd/2. */
void mu_rope_angles(float *cs, float *sn, int hd, int pos, float base);

/* Attention of layer il for the chunk's T tokens (q, k, v in scratch, the
 * cache already holding this chunk's rows): gated output into s.a. */
void mu_attn_layer(mu_engine *e, int il, int T);

#endif
