/* model.h: a validated binding of a muse-glimmer GGUF: geometry, weight
 * views, the tokenizer and the chat template. Internal to the library (the
 * engine reads the struct); the public face is include/muser.h. */
#ifndef MU_MODEL_MODEL_H
#define MU_MODEL_MODEL_H

#include "../../include/muser.h"
#include "../gguf/gguf.h"
#include "../tok/tokenizer.h"

typedef struct {
    const mu_gguf_tensor *attn_norm, *wq, *wk, *wv, *q_norm, *k_norm, *wgate, *wo;
    const mu_gguf_tensor *post_attn_norm, *ffn_norm, *ffn_gate, *ffn_up, *ffn_down, *post_ffw_norm;
} mu_layer_w;

struct mu_model {
    mu_gguf *g;
    mu_model_info info;
    bool *swa;            /* [n_layer] */
    mu_layer_w *layers;   /* [n_layer] */
    const mu_gguf_tensor *tok_embd, *output_norm, *output;
    char *name;
    mu_tok *tok;          /* NULL when the GGUF has no tokenizer */
    char *chat_template;  /* tokenizer.chat_template, NULL when absent */
};

/* Binds a GGUF already opened (takes ownership of g on success). */
int mu_model_bind(mu_gguf *g, mu_model **out, mu_err *err);
const mu_gguf *mu_model_gguf(const mu_model *m);

#endif
