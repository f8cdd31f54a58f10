/* dflash.h: a validated binding of a DFlash drafter GGUF (llama.cpp's
 * architecture `dflash`, docs/speculative.md "The drafter file"): geometry,
 * the target layers it reads, the mask token and weight views. Internal to
 * the library; the engine's drafter (src/engine/draft.c) reads the struct. */
#ifndef MU_MODEL_DFLASH_H
#define MU_MODEL_DFLASH_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/err.h"
#include "../gguf/gguf.h"

#define MU_DFLASH_MAX_TARGET 16 /* most target layers one drafter reads */
#define MU_DFLASH_MAX_LAYERS 64
#define MU_DFLASH_MAX_BLOCK 65  /* block_size: the last token + at most 64 masks */

typedef struct {
    const mu_gguf_tensor *attn_norm, *wq, *wk, *wv, *wo, *q_norm, *k_norm;
    const mu_gguf_tensor *attn_post_norm, *ffn_post_norm; /* optional (NULL) */
    const mu_gguf_tensor *ffn_norm, *ffn_gate, *ffn_up, *ffn_down;
} mu_dflash_layer;

typedef struct {
    mu_gguf *g;
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_ctx_train;
    int n_vocab;          /* rows of output (or token_embd); 0 when both come from the target */
    int block_size;       /* dflash.block_size (16 when absent, as llama.cpp) */
    int n_target;         /* entries of target_layers */
    int target_layers[MU_DFLASH_MAX_TARGET]; /* input of target layer il (0: the normed embedding) */
    int32_t mask_id;      /* tokenizer.ggml.mask_token_id */
    float eps, rope_base, emb_scale, kq_scale;
    bool causal;          /* dflash.attention.causal (false: the block attends both ways) */
    int n_swa;            /* 0: no sliding layers */
    bool swa[MU_DFLASH_MAX_LAYERS];
    const mu_gguf_tensor *fc, *enc_norm, *output_norm;
    const mu_gguf_tensor *tok_embd, *output; /* NULL: the target's */
    /* muser.dflash.shortlist (muser's key, optional): the draft head's token
     * ids, increasing; n_shortlist 0 when absent. Ids are checked against the
     * target's vocabulary when a drafter binds (src/engine/draft.c). */
    mu_gguf_arr shortlist;
    int n_shortlist;
    mu_dflash_layer layers[MU_DFLASH_MAX_LAYERS];
} mu_dflash_model;

/* Opens and validates path. Drafters with parts muser does not run
 * (DFlash2 convolutions and selector, DSpark heads, a reduced vocabulary,
 * M-RoPE sections, attention sinks, DeepSeek-V4 stages, GELU) are refused
 * by name. */
int mu_dflash_open(const char *path, mu_dflash_model **out, mu_err *err);
/* Same over a GGUF already opened (takes ownership of g on success). */
int mu_dflash_bind(mu_gguf *g, mu_dflash_model **out, mu_err *err);
void mu_dflash_close(mu_dflash_model *m);

#endif
