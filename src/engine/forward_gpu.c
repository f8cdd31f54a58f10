/* forward_gpu.c: the engine's side of the CUDA backend.
 * Owns: describing the model's weights to the GPU layer (uploaded once, at
 * mu_engine_new), and a batch's walk in chunks of at most MU_UBATCH tokens
 * exactly as forward.c walks it (the same positions, the same output rows),
 * with the RoPE angles computed here by the CPU's own code so both
 * backends rotate by the same floats, and layer streaming
 * (mu_batch_item.on_layer) per chunk as forward.c calls it, each layer as
 * the device writes its rows, and a drafter's hidden-state capture
 * (mu_batch_item.feat): each capturing token's block of rows in its item's
 * feat, where forward.c's capture_feat puts it, filled by the device;
 * each logits row's best (mu_session_logits_best) next to the row.
 * Does not: compute anything per layer (src/gpu does). */
#include <stdlib.h>
#include <string.h>

#include "../base/mem.h"
#include "engine.h"


int mu_engine_gpu_open(mu_engine *e, int device, mu_check_progress_fn fn, void *user, mu_err *err) {
    const mu_model *m = e->m;
    const mu_model_info *I = &m->info;
    mu_gpu_layer *L = calloc((size_t)I->n_layer, sizeof *L);
    e->rope = mu_alloc((size_t)MU_UBATCH * (size_t)I->head_dim, sizeof(float));
    if (!L || !e->rope) {
        free(L);
        return mu_fail(err, MU_E_NOMEM, "engine: out of memory");
    }
    for (int il = 0; il < I->n_layer; il++) {
        const mu_layer_w *w = &m->layers[il];
        L[il] = (mu_gpu_layer){mu_gpu_tensor_of(w->attn_norm),      mu_gpu_tensor_of(w->wq),
                               mu_gpu_tensor_of(w->wk),             mu_gpu_tensor_of(w->wv),
                               mu_gpu_tensor_of(w->wgate),          mu_gpu_tensor_of(w->q_norm),
                               mu_gpu_tensor_of(w->k_norm),         mu_gpu_tensor_of(w->wo),
                               mu_gpu_tensor_of(w->post_attn_norm), mu_gpu_tensor_of(w->ffn_norm),
                               mu_gpu_tensor_of(w->ffn_gate),       mu_gpu_tensor_of(w->ffn_up),
                               mu_gpu_tensor_of(w->ffn_down),       mu_gpu_tensor_of(w->post_ffw_norm)};
    }
    mu_gpu_model_desc d = {
        .n_layer = I->n_layer, .n_embd = I->n_embd, .n_ff = I->n_ff, .n_head = I->n_head,
        .n_head_kv = I->n_head_kv, .head_dim = I->head_dim, .n_vocab = I->n_vocab, .n_swa = I->n_swa,
        .eps = I->eps, .post_eps = MU_POST_NORM_EPS, .logit_scale = I->logit_scale, .softcap = I->softcap,
        .swa_layers = I->swa_layers, .tok_embd = mu_gpu_tensor_of(m->tok_embd),
        .output_norm = mu_gpu_tensor_of(m->output_norm), .output = mu_gpu_tensor_of(m->output), .layers = L,
    };
    int rc = mu_gpu_model_new(device, &d, (mu_gpu_progress_fn)fn, user, &e->gpu, err);
    e->gpu_dev = device;
    free(L);
    return rc;
}

typedef struct {
    int32_t tok[MU_UBATCH];
    int pos[MU_UBATCH];
    mu_gpu_sess *sess[MU_UBATCH];
    bool out[MU_UBATCH];
    float *logits[MU_UBATCH];
    int32_t *best[MU_UBATCH];             /* the logits row's best (mu_session_logits_best), else NULL */
    float *embd[MU_UBATCH];
    const mu_batch_item *item[MU_UBATCH]; /* the token's item when it streams its layers, else NULL */
    const float *in_row[MU_UBATCH];       /* the token's input row (an image row), else NULL */
    float *feat[MU_UBATCH];               /* the token's capture rows (mu_batch_item.feat), else NULL */
    const int *feat_layers[MU_UBATCH];
    int n_feat_layers[MU_UBATCH];
    int T, n_out, t_solo, n_layer_tok, n_in_rows, n_feat_tok;
    bool rope, seen_solo;
} gchunk;

/* mu_gpu_chunk.on_layer: layer il's rows of the chunk are in the cells;
 * each streaming item hears of its run of positions (forward.c's
 * layer_final). */
static void chunk_layer(void *user, int il) {
    const gchunk *c = user;
    for (int t = 0; t < c->T;) {
        const mu_batch_item *it = c->item[t];
        int u = t + 1;
        while (u < c->T && c->item[u] == it) u++;
        if (it) it->on_layer(it->on_layer_user, il, c->pos[t], u - t);
        t = u;
    }
}

static int run(mu_engine *e, gchunk *c, mu_err *err) {
    const mu_model_info *I = &e->m->info;
    const int hd = I->head_dim;
    if (c->rope) {
        float cs[256], sn[256];
        for (int t = 0; t < c->T; t++) {
            mu_rope_angles(cs, sn, hd, c->pos[t], I->rope_base_swa);
            for (int i = 0; i < hd / 2; i++) {
                e->rope[(size_t)t * hd + 2 * i] = cs[i];
                e->rope[(size_t)t * hd + 2 * i + 1] = sn[i];
            }
        }
    }
    double *prof = !e->prof_on ? NULL : c->T == 1 ? e->prof.decode_s : e->prof.prefill_s;
    mu_gpu_chunk g = {.T = c->T, .tokens = c->tok, .pos = c->pos, .sess = c->sess, .out = c->out,
                      .n_out = c->n_out, .t_solo = c->t_solo < c->T ? c->t_solo : c->T, .rope = c->rope ? e->rope : NULL, .logits = c->logits, .best = c->best, .embd = c->embd,
                      .prof = prof, .on_layer = c->n_layer_tok ? chunk_layer : NULL, .on_layer_user = c,
                      .stream_stats = &e->gpu_stream, .in_rows = c->n_in_rows ? c->in_row : NULL,
                      .feat = c->n_feat_tok ? c->feat : NULL, .feat_layers = c->feat_layers,
                      .n_feat_layers = c->n_feat_layers};
    int rc = mu_gpu_forward(e->gpu, &g, err);
    if (!rc && prof) ++*(c->T == 1 ? &e->prof.decode_passes : &e->prof.prefill_passes);
    c->T = c->n_out = c->n_layer_tok = c->n_in_rows = c->n_feat_tok = 0;
    c->t_solo = c->seen_solo ? 0 : MU_UBATCH;
    return rc;
}

int mu_forward_gpu(mu_engine *e, const mu_batch_item *items, int n_items, mu_err *err) {
    const mu_model_info *I = &e->m->info;
    const size_t V = (size_t)I->n_vocab;
    gchunk c = {.T = 0, .t_solo = MU_UBATCH}; /* from the first solo item on, every token is solo (forward.c) */
    for (int il = 0; il < I->n_layer; il++) c.rope |= I->swa_layers[il];
    MU_ASSERT(I->head_dim <= 512);
    int rc = 0;
    for (int i = 0; i < n_items && !rc; i++) {
        const mu_batch_item *it = &items[i];
        mu_session *s = it->s;
        if (it->solo && !c.seen_solo) {
            c.seen_solo = true;
            c.t_solo = c.T;
        }
        for (int t = 0; t < it->n_tokens && !rc; t++) {
            const bool out = it->embd || it->all_logits || t == it->n_tokens - 1;
            c.tok[c.T] = it->in_embd ? 0 : it->tokens[t]; /* an image row: token 0's lookup, then replaced (forward.c) */
            c.in_row[c.T] = it->in_embd ? it->in_embd + (size_t)t * I->n_embd : NULL;
            c.n_in_rows += it->in_embd != NULL;
            c.pos[c.T] = s->n_past++; /* positions are assigned as tokens enter the chunk (forward.c) */
            c.sess[c.T] = s->gs;
            c.out[c.T] = out;
            c.item[c.T] = it->on_layer ? it : NULL;
            c.n_layer_tok += it->on_layer != NULL;
            /* token t's rows: feat[t][k] is layer feat_layers[k]'s input (forward.c's capture_feat) */
            c.feat[c.T] = it->feat ? it->feat + (size_t)t * it->n_feat_layers * I->n_embd : NULL;
            c.feat_layers[c.T] = it->feat_layers;
            c.n_feat_layers[c.T] = it->feat ? it->n_feat_layers : 0;
            c.n_feat_tok += it->feat != NULL;
            if (out) {
                /* an embedding row leaves after the final norm, a logits row after the output matmul */
                c.embd[c.n_out] = it->embd ? it->embd + (size_t)t * I->n_embd : NULL;
                c.best[c.n_out] = it->embd ? NULL : s->logits_best + s->n_logits;
                c.logits[c.n_out++] = it->embd ? NULL : s->logits + (size_t)s->n_logits++ * V;
            }
            if (++c.T == e->ubatch) rc = run(e, &c, err);
        }
    }
    if (!rc && c.T) rc = run(e, &c, err);
    if (rc) {
        /* a failed pass may have overwritten ring cells the sessions still
         * needed: they start over rather than continue from broken state */
        for (int i = 0; i < n_items; i++) mu_session_reset(items[i].s);
        return rc;
    }
    return 0;
}
