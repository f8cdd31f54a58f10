/* vit_gpu.c: the vision encoder on CUDA, the host's side.
 * Owns: describing the projector's weights to src/gpu (uploaded once, kept
 * with the mu_mmproj), and each image's token layout (mu_vit_plan, the CPU
 * encoder's own) with the resized position grid in the permuted order, so
 * the device takes every index and every table float from the same code as
 * the CPU.
 * Does not: compute the encoder (gpu_cuda_vit.cu does) or decide when the
 * GPU is used (the engine's backend, src/engine/mprompt.c). */
#include <stdlib.h>
#include <string.h>

#include "vit.h"

static mu_gpu_tensor gt(const mu_gguf_tensor *t) {
    if (!t) return (mu_gpu_tensor){0};
    return (mu_gpu_tensor){.data = t->data, .type = t->type, .ne0 = t->ne[0], .ne1 = t->ne[1], .bytes = t->bytes};
}

void mu_vit_gpu_desc_free(mu_gpu_vit_desc *d) {
    free((void *)d->layers), free((void *)d->global);
    memset(d, 0, sizeof *d);
}

int mu_vit_gpu_desc(const mu_mmproj *p, mu_gpu_vit_desc *d, mu_err *err) {
    const mu_mmproj_info *I = &p->info;
    const int L = I->n_layer;
    memset(d, 0, sizeof *d);
    mu_gpu_vit_layer *layers = calloc((size_t)L, sizeof *layers);
    bool *global = calloc((size_t)L, sizeof *global);
    if (!layers || !global) {
        free(layers), free(global);
        return mu_fail(err, MU_E_NOMEM, "vision: out of memory");
    }
    for (int il = 0; il < L; il++) {
        const mu_vit_layer *w = &p->layers[il];
        layers[il] = (mu_gpu_vit_layer){gt(w->ln1_w), gt(w->ln1_b), gt(w->q_w),  gt(w->q_b),    gt(w->k_w),
                                        gt(w->k_b),   gt(w->v_w),   gt(w->v_b),  gt(w->o_w),    gt(w->o_b),
                                        gt(w->ln2_w), gt(w->ln2_b), gt(w->up_w), gt(w->up_b),   gt(w->down_w),
                                        gt(w->down_b)};
        global[il] = il == L - 1 || (il + 1) % p->sparse_factor == 0; /* as vit.c */
    }
    /* the conv kernel [ps][ps][3][E] as E rows of 3 * ps * ps */
    mu_gpu_tensor patch = gt(p->patch_w);
    patch.ne0 = 3 * I->patch_size * I->patch_size;
    patch.ne1 = I->n_embd;
    *d = (mu_gpu_vit_desc){.n_layer = L, .n_embd = I->n_embd, .n_ff = I->n_ff, .n_head = I->n_head,
                           .head_dim = I->head_dim, .patch_size = I->patch_size, .mm_hidden = p->mm_hidden,
                           .n_out = I->n_out, .eps = I->eps, .global = global, .patch_w = patch,
                           .patch_b = gt(p->patch_b), .pre_w = gt(p->pre_w), .pre_b = gt(p->pre_b),
                           .post_w = gt(p->post_w), .post_b = gt(p->post_b),
                           .mm = {gt(p->mm[0]), gt(p->mm[1]), gt(p->mm[2])}, .layers = layers};
    return 0;
}

void mu_vit_gpu_image_free(mu_gpu_vit_image *im, mu_vit_plan *pl) {
    free((void *)im->pos);
    mu_vit_plan_free(pl);
    memset(im, 0, sizeof *im);
}

int mu_vit_gpu_image(const mu_mmproj *p, const float *chw, int nx, int ny, float *out, mu_gpu_vit_image *im,
                     mu_vit_plan *pl, mu_err *err) {
    const mu_mmproj_info *I = &p->info;
    const int E = I->n_embd;
    memset(im, 0, sizeof *im);
    int rc = mu_vit_plan_new(p, nx, ny, pl, err);
    if (rc) return rc;
    const int n = pl->n;
    float *pos = malloc((size_t)n * E * sizeof *pos);
    if (!pos) {
        mu_vit_plan_free(pl);
        return mu_fail(err, MU_E_NOMEM, "vision: out of memory for an image of %dx%d", nx, ny);
    }
    mu_vit_pos_resize(NULL, p->pos->data, I->pos_side, E, pl->gw, pl->gh, pl->perm, n, pos);
    *im = (mu_gpu_vit_image){.nx = nx, .ny = ny, .chw = chw, .gw = pl->gw, .gh = pl->gh, .perm = pl->perm,
                             .inv = pl->inv, .pw = pl->pw, .ph = pl->ph, .win_lo = pl->wlo, .win_hi = pl->whi,
                             .pos = pos, .rope_cs = pl->rope_cs, .n_pos = pl->n_pos, .out = out};
    return 0;
}

int mu_vit_encode_gpu(mu_mmproj *p, int device, const float *chw, int nx, int ny, float *out, mu_err *err) {
    const char *off = getenv("MUSER_CUDA_VISION");
    if (off && !strcmp(off, "0"))
        return mu_fail(err, MU_E_UNSUPPORTED, "vision: the CUDA encoder is off (MUSER_CUDA_VISION=0)");
    if (p->gpu && p->gpu_dev != device)
        return mu_fail(err, MU_E_ARG, "vision: the projector is on CUDA device %d, not %d", p->gpu_dev, device);
    if (!p->gpu && p->gpu_err.code) {
        if (err) *err = p->gpu_err;
        return p->gpu_err.code;
    }
    if (!p->gpu) {
        mu_gpu_vit_desc d;
        int rc = mu_vit_gpu_desc(p, &d, &p->gpu_err);
        if (!rc) rc = mu_gpu_vit_new(device, &d, &p->gpu, &p->gpu_err);
        mu_vit_gpu_desc_free(&d);
        if (rc) {
            if (!p->gpu_err.code) p->gpu_err.code = rc;
            if (err) *err = p->gpu_err;
            return rc;
        }
        p->gpu_dev = device;
    }
    mu_gpu_vit_image im;
    mu_vit_plan pl;
    int rc = mu_vit_gpu_image(p, chw, nx, ny, out, &im, &pl, err);
    if (rc) return rc;
    rc = mu_gpu_vit_encode(p->gpu, &im, err);
    mu_vit_gpu_image_free(&im, &pl);
    return rc;
}
