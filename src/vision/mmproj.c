/* mmproj.c: binds a GGUF to Muse Glimmer's vision projector (llama.cpp's
 * mmproj layout, clip.projector_type "muse-glimmer").
 * Owns: reading the clip.vision.* keys llama.cpp's loader reads for this
 * projector, checking every tensor's presence, shape and type, checking the
 * output width against a text model, and the file's SHA-256 (a KV pack made
 * with images names the projector it saw).
 * Does not own: running the encoder (vit.c), decoding images (image.c).
 * Design: what llama.cpp would compute from the file and muser's encoder
 * would not (a fused qkv, q/k norms, layer scales, a gated FFN) is refused
 * here with its name, never half-run. */
#include "mmproj.h"

#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kern/quant.h"

static int bind(const mu_gguf *g, const char *name, int n_dims, const int64_t *ne, bool f32_only, bool optional,
                const mu_gguf_tensor **out, mu_err *err) {
    const mu_gguf_tensor *t = mu_gguf_find_tensor(g, name);
    *out = NULL;
    if (!t) return optional ? 0 : mu_fail(err, MU_E_MODEL, "mmproj: missing tensor: %s", name);
    bool ok = true;
    for (int d = 0; d < MU_GGUF_MAX_DIMS; d++) ok &= t->ne[d] == (d < n_dims ? ne[d] : 1);
    if (!ok)
        return mu_fail(err, MU_E_MODEL, "mmproj: tensor %s has shape {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld, %lld}",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                       (long long)ne[0], (long long)(n_dims > 1 ? ne[1] : 1), (long long)(n_dims > 2 ? ne[2] : 1),
                       (long long)(n_dims > 3 ? ne[3] : 1));
    const mu_type_info *ti = mu_type_get(t->type);
    if (f32_only && t->type != MU_T_F32)
        return mu_fail(err, MU_E_MODEL, "mmproj: tensor %s has type %s, expected F32", name, ti->name);
    if (!ti->supported || !mu_type_row_bytes(t->type, t->ne[0]))
        return mu_fail(err, MU_E_MODEL, "mmproj: tensor %s has unsupported type %s", name, ti->name);
    *out = t;
    return 0;
}

#define VEC(n) ((const int64_t[]){(n), 1, 1, 1})
#define MAT(a, b) ((const int64_t[]){(a), (b), 1, 1})

/* tensors llama.cpp's ViT would use that this encoder does not run */
static int refuse_extras(const mu_gguf *g, int n_layer, mu_err *err) {
    static const char *const fmt[] = {"v.blk.%d.attn_qkv.weight", "v.blk.%d.attn_q_norm.weight",
                                      "v.blk.%d.attn_k_norm.weight", "v.blk.%d.ls1.weight", "v.blk.%d.ls2.weight",
                                      "v.blk.%d.ffn_gate.weight", "v.blk.%d.attn_post_norm.weight",
                                      "v.blk.%d.ffn_post_norm.weight", "v.blk.%d.ffn_gate_exps.weight"};
    char name[96];
    for (int il = 0; il < n_layer; il++)
        for (size_t k = 0; k < sizeof fmt / sizeof fmt[0]; k++) {
            snprintf(name, sizeof name, fmt[k], il);
            if (mu_gguf_find_tensor(g, name))
                return mu_fail(err, MU_E_UNSUPPORTED, "mmproj: tensor %s is not part of Muse Glimmer's encoder", name);
        }
    return 0;
}

static int bind_all(mu_mmproj *p, const mu_model *m, mu_err *err) {
    const mu_gguf *g = p->g;
    mu_mmproj_info *I = &p->info;
    const char *s;
    size_t n;
    int rc;
    /* the projector type: the common key, else the vision one (mixed-modality files) */
    const char *key = mu_gguf_find(g, "clip.projector_type") >= 0 ? "clip.projector_type" : "clip.vision.projector_type";
    if (mu_gguf_find(g, key) < 0) return mu_fail(err, MU_E_MODEL, "mmproj: not a projector (no clip.projector_type)");
    if ((rc = mu_gguf_get_str(g, key, &s, &n, err))) return rc;
    if (n != 12 || memcmp(s, "muse-glimmer", 12))
        return mu_fail(err, MU_E_MODEL, "mmproj: projector type is not muse-glimmer: %.*s", (int)(n > 64 ? 64 : n), s);
    bool has_v = true;
    if (mu_gguf_find(g, "clip.has_vision_encoder") >= 0 && (rc = mu_gguf_get_bool(g, "clip.has_vision_encoder", &has_v, err)))
        return rc;
    if (!has_v) return mu_fail(err, MU_E_MODEL, "mmproj: the file has no vision encoder (clip.has_vision_encoder false)");
    if ((rc = mu_gguf_get_int_in(g, "clip.vision.embedding_length", true, 0, 2, 1 << 16, &I->n_embd, err)) ||
        (rc = mu_gguf_get_int_in(g, "clip.vision.attention.head_count", true, 0, 1, 1024, &I->n_head, err)) ||
        (rc = mu_gguf_get_int_in(g, "clip.vision.feed_forward_length", true, 0, 1, 1 << 20, &I->n_ff, err)) ||
        (rc = mu_gguf_get_int_in(g, "clip.vision.block_count", true, 0, 1, 1024, &I->n_layer, err)) ||
        (rc = mu_gguf_get_int_in(g, "clip.vision.projection_dim", true, 0, 1, 1 << 20, &I->n_out, err)) ||
        (rc = mu_gguf_get_int_in(g, "clip.vision.image_size", true, 0, 0, 8192, &I->image_size, err)) ||
        (rc = mu_gguf_get_int_in(g, "clip.vision.patch_size", true, 0, 1, 1024, &I->patch_size, err)) ||
        (rc = mu_gguf_get_int_in(g, "clip.vision.spatial_merge_size", false, 2, 1, 16, &I->n_merge, err)) ||
        (rc = mu_gguf_get_int_in(g, "clip.vision.attention.head_dim", false, I->n_embd / I->n_head, 1, 1 << 16,
                                 &I->head_dim, err)) ||
        (rc = mu_gguf_get_finite(g, "clip.vision.attention.layer_norm_epsilon", true, 0, &I->eps, err)))
        return rc;
    if (I->eps < 0) return mu_fail(err, MU_E_MODEL, "mmproj: negative layer norm epsilon: %g", (double)I->eps);
    if (I->n_merge != 2)
        return mu_fail(err, MU_E_UNSUPPORTED, "mmproj: spatial merge %d (Muse Glimmer's pixel shuffle is 2)", I->n_merge);
    if (I->head_dim > 512)
        return mu_fail(err, MU_E_UNSUPPORTED, "mmproj: head dim %d (the encoder takes at most 512)", I->head_dim);
    if (I->head_dim * I->n_head != I->n_embd || I->head_dim % 4)
        return mu_fail(err, MU_E_MODEL, "mmproj: %d heads of %d do not make width %d with a head dim divisible by 4",
                       I->n_head, I->head_dim, I->n_embd);
    for (int k = 0; k < 2; k++) {
        const char *ak = k ? "clip.vision.image_std" : "clip.vision.image_mean";
        mu_gguf_arr a;
        if ((rc = mu_gguf_get_arr(g, ak, &a, err))) return rc;
        if (a.n < 3 || (a.type != MU_GGUF_F32 && a.type != MU_GGUF_F64))
            return mu_fail(err, MU_E_MODEL, "mmproj: %s must hold at least 3 floats", ak);
        for (int c = 0; c < 3; c++) {
            double v = mu_gguf_arr_f64(&a, (uint64_t)c);
            if (!isfinite(v) || (k && v == 0)) return mu_fail(err, MU_E_MODEL, "mmproj: %s[%d] is %g", ak, c, v);
            (k ? I->std : I->mean)[c] = (float)v;
        }
    }
    const int E = I->n_embd, ps = I->patch_size, L = I->n_layer;
    if ((rc = refuse_extras(g, L, err))) return rc;
    /* patch embedding, position grid, the outer norms */
    const int64_t conv_ne[4] = {ps, ps, 3, E};
    if ((rc = bind(g, "v.patch_embd.weight", 4, conv_ne, false, false, &p->patch_w, err))) return rc;
    if (p->patch_w->type != MU_T_F16 && p->patch_w->type != MU_T_F32)
        return mu_fail(err, MU_E_MODEL, "mmproj: tensor v.patch_embd.weight must be F16 or F32");
    if ((rc = bind(g, "v.patch_embd.bias", 1, VEC(E), true, true, &p->patch_b, err))) return rc;
    const mu_gguf_tensor *pos = mu_gguf_find_tensor(g, "v.position_embd.weight");
    if (!pos) return mu_fail(err, MU_E_MODEL, "mmproj: missing tensor: v.position_embd.weight");
    const int side = pos->ne[1] >= 1 && pos->ne[1] <= 1 << 20 ? (int)sqrt((double)pos->ne[1]) : 0;
    if (!side || (int64_t)side * side != pos->ne[1])
        return mu_fail(err, MU_E_MODEL, "mmproj: position grid of %lld entries is not a square", (long long)pos->ne[1]);
    I->pos_side = side;
    if ((rc = bind(g, "v.position_embd.weight", 2, MAT(E, (int64_t)side * side), true, false, &p->pos, err))) return rc;
    if ((rc = bind(g, "v.pre_ln.weight", 1, VEC(E), true, true, &p->pre_w, err)) ||
        (rc = bind(g, "v.pre_ln.bias", 1, VEC(E), true, true, &p->pre_b, err)) ||
        (rc = bind(g, "v.post_ln.weight", 1, VEC(E), true, true, &p->post_w, err)) ||
        (rc = bind(g, "v.post_ln.bias", 1, VEC(E), true, true, &p->post_b, err)))
        return rc;
    p->layers = calloc((size_t)L, sizeof *p->layers);
    if (!p->layers) return mu_fail(err, MU_E_NOMEM, "mmproj: out of memory");
    const int F = I->n_ff;
    char nm[96];
    for (int il = 0; il < L; il++) {
        mu_vit_layer *y = &p->layers[il];
#define B(field, suffix, nd, ne, f32, opt)                                                                  \
    snprintf(nm, sizeof nm, "v.blk.%d.%s", il, suffix);                                                    \
    if ((rc = bind(g, nm, nd, ne, f32, opt, &y->field, err))) return rc;
        B(ln1_w, "ln1.weight", 1, VEC(E), true, false)
        B(ln1_b, "ln1.bias", 1, VEC(E), true, true)
        B(q_w, "attn_q.weight", 2, MAT(E, E), false, false)
        B(q_b, "attn_q.bias", 1, VEC(E), true, true)
        B(k_w, "attn_k.weight", 2, MAT(E, E), false, false)
        B(k_b, "attn_k.bias", 1, VEC(E), true, true)
        B(v_w, "attn_v.weight", 2, MAT(E, E), false, false)
        B(v_b, "attn_v.bias", 1, VEC(E), true, true)
        B(o_w, "attn_out.weight", 2, MAT(E, E), false, false)
        B(o_b, "attn_out.bias", 1, VEC(E), true, true)
        B(ln2_w, "ln2.weight", 1, VEC(E), true, false)
        B(ln2_b, "ln2.bias", 1, VEC(E), true, true)
        B(up_w, "ffn_up.weight", 2, MAT(E, F), false, false)
        B(up_b, "ffn_up.bias", 1, VEC(F), true, true)
        B(down_w, "ffn_down.weight", 2, MAT(F, E), false, false)
        B(down_b, "ffn_down.bias", 1, VEC(E), true, true)
#undef B
    }
    /* the adapter: [4E] -> hidden -> hidden -> n_out */
    const mu_gguf_tensor *m0 = mu_gguf_find_tensor(g, "mm.0.weight");
    if (!m0) return mu_fail(err, MU_E_MODEL, "mmproj: missing tensor: mm.0.weight");
    p->mm_hidden = (int)(m0->ne[1] > 0 && m0->ne[1] < 1 << 20 ? m0->ne[1] : 1);
    const int M = p->mm_hidden;
    if ((rc = bind(g, "mm.0.weight", 2, MAT(4 * E, M), false, false, &p->mm[0], err)) ||
        (rc = bind(g, "mm.1.weight", 2, MAT(M, M), false, false, &p->mm[1], err)) ||
        (rc = bind(g, "mm.2.weight", 2, MAT(M, I->n_out), false, false, &p->mm[2], err)))
        return rc;
    if (m) {
        const int want = mu_model_get_info(m)->n_embd;
        if (I->n_out != want)
            return mu_fail(err, MU_E_MODEL, "mmproj: output width %d differs from the model's embedding width %d",
                           I->n_out, want);
    }
    I->min_tokens = 1;
    I->max_tokens = 4096;
    p->sparse_factor = 4;
    p->rope_base = 10000.0f;
    return 0;
}

static int finish_open(mu_mmproj *p, const mu_model *m, mu_mmproj **out, mu_err *err) {
    pthread_mutex_init(&p->mu, NULL);
    int rc = bind_all(p, m, err);
    if (!rc) {
        uint8_t h[32];
        unsigned hl = 0;
        if (!EVP_Digest(mu_gguf_bytes(p->g), mu_gguf_file_bytes(p->g), h, &hl, EVP_sha256(), NULL) || hl != 32)
            rc = mu_fail(err, MU_E_STATE, "mmproj: SHA-256 failed");
        for (int i = 0; i < 32 && !rc; i++) snprintf(p->info.sha256 + 2 * i, 3, "%02x", h[i]);
    }
    if (rc) {
        mu_mmproj_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int mu_mmproj_open(const char *path, const mu_model *m, mu_mmproj **out, mu_err *err) {
    mu_mmproj *p = calloc(1, sizeof *p);
    if (!p) return mu_fail(err, MU_E_NOMEM, "mmproj: out of memory");
    int rc = mu_gguf_open(path, &p->g, err);
    if (rc) {
        free(p);
        return rc;
    }
    return finish_open(p, m, out, err);
}

int mu_mmproj_open_mem(const void *data, size_t n, const mu_model *m, mu_mmproj **out, mu_err *err) {
    mu_mmproj *p = calloc(1, sizeof *p);
    if (!p) return mu_fail(err, MU_E_NOMEM, "mmproj: out of memory");
    int rc = mu_gguf_open_mem(data, n, &p->g, err);
    if (rc) {
        free(p);
        return rc;
    }
    return finish_open(p, m, out, err);
}

mu_pool *mu_mmproj_lock(mu_mmproj *p, int n_threads, mu_err *err) {
    pthread_mutex_lock(&p->mu);
    if (!p->pool && mu_pool_new(n_threads > 0 ? n_threads : 1, &p->pool, err)) {
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    return p->pool;
}

void mu_mmproj_unlock(mu_mmproj *p) { pthread_mutex_unlock(&p->mu); }

void mu_mmproj_free(mu_mmproj *p) {
    if (!p) return;
    if (p->g) pthread_mutex_destroy(&p->mu);
    mu_pool_free(p->pool);
    mu_gpu_vit_free(p->gpu);
    mu_gguf_close(p->g);
    free(p->layers);
    free(p);
}

const mu_mmproj_info *mu_mmproj_get_info(const mu_mmproj *p) { return &p->info; }
