/* engine.h: internal structures of the engine (the public API is
 * include/muser.h). Shapes use [rows][cols] with cols contiguous. */
#ifndef MU_ENGINE_ENGINE_H
#define MU_ENGINE_ENGINE_H

#include "../../include/muser.h"
#include "../base/pool.h"
#include "../kern/kern.h"
#include "../model/model.h"

#define MU_UBATCH 512   /* most positions one forward chunk computes */
#define MU_POST_NORM_EPS 1e-8f
#define MU_LOGIT_ROWS 16 /* output-matrix rows computed per pass */

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
    float *scores;   /* [n_threads][max_ctx] attention scores */
    mu_f16 *q16;     /* [n_threads][head_dim] */
    int max_ctx;
    /* per token of the chunk */
    mu_session **tok_sess;
    int *tok_pos;
    int *tok_out;    /* logits row in its session, or -1 */
    int *out_tok;    /* [T] chunk token of each output row */
    float *lg;       /* [MU_LOGIT_ROWS][n_vocab] raw logits */
} mu_scratch;

struct mu_engine {
    mu_model *m;
    const mu_kern *kern;
    mu_pool *pool;
    mu_scratch s;
    int n_q, n_kv;   /* n_head*head_dim, n_head_kv*head_dim */
    int ubatch;      /* chunk size, MU_UBATCH unless $MUSER_UBATCH says less (tests) */
};

struct mu_session {
    mu_engine *e;
    int n_ctx, n_past;
    int *rows;          /* [n_layer] cache rows of each layer (ring for sliding layers) */
    mu_f16 **kc, **vc;  /* [n_layer] -> [rows][n_kv] */
    size_t kv_map_bytes;
    void *kv_map;       /* one anonymous mapping holding every layer */
    float *logits;      /* [n_logits_cap][n_vocab] */
    int n_logits_cap, n_logits;
};

/* Grows the attention scratch to hold n_ctx scores per thread. */
int mu_engine_reserve_ctx(mu_engine *e, int n_ctx, mu_err *err);

#endif
