/* mprompt.c: prompts with images (include/muser.h, "images").
 * Owns: one image's way from its file bytes to rows in the text model's
 * embedding width (decode and preprocess in src/vision/image.c, the encoder
 * in src/vision/vit.c with the engine's kernel table on the projector's own
 * threads), and the
 * layout of a prompt of text and images as llama.cpp's mtmd lays it out:
 * the text split at each media marker, each piece tokenized alone (special
 * tokens parsed), each image wrapped in <|image_start|> ... <|image_end|>,
 * BOS first when asked.
 * Does not own: evaluating the prompt (the scheduler feeds image rows as
 * mu_batch_item.in_embd, one llama.cpp chunk per forward step).
 * Design: an image row's id is negative and derived from the image's rows
 * (its encoder output) and the row index, so prefix matching on ids treats equal images as equal text
 * and never confuses two images. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../vision/image.h"
#include "../vision/mmproj.h"
#include "../vision/vit.h"
#include "engine.h"

struct mu_mprompt {
    int n;              /* positions */
    int32_t *ids;       /* [n] */
    const float **row;  /* [n]: the input row of an image position, NULL for text */
    float **blocks;     /* each image's rows, owned */
    int n_blocks, n_out;
    atomic_int refs;    /* owners (mu_mprompt_ref) */
};

int mu_mmproj_encode(const mu_mmproj *p, mu_engine *e, const mu_media *img, float **rows, int *n_rows, int *nx,
                     int *ny, mu_err *err) {
    if (!img || !img->data || !img->size) return mu_fail(err, MU_E_ARG, "image: empty input");
    if (!e->kern) return mu_fail(err, MU_E_STATE, "image: the engine has no CPU kernels");
    const mu_mmproj_info *I = &p->info;
    mu_image im = {0};
    int rc = mu_image_decode(img->data, img->size, &im, err);
    if (rc) return rc < 0 ? rc : MU_E_ARG;
    mu_image_pp pp = {.patch_size = I->patch_size, .merge = I->n_merge, .min_tokens = I->min_tokens,
                      .max_tokens = I->max_tokens, .image_size = I->image_size};
    memcpy(pp.mean, I->mean, sizeof pp.mean);
    memcpy(pp.std, I->std, sizeof pp.std);
    float *chw = NULL;
    int w = 0, h = 0;
    rc = mu_image_preprocess(&im, &pp, &chw, &w, &h, err);
    mu_image_free(&im);
    if (rc) return rc < 0 ? rc : MU_E_ARG;
    const int cell = I->patch_size * I->n_merge, gx = w / cell, gy = h / cell;
    float *out = malloc((size_t)gx * gy * I->n_out * sizeof *out);
    if (!out) {
        free(chw);
        return mu_fail(err, MU_E_NOMEM, "image: out of memory for %d rows", gx * gy);
    }
    /* the projector's own threads (as many as the engine's): this may run on
     * any thread while the scheduler's runs a forward on the engine's pool */
    mu_mmproj *pm = (mu_mmproj *)p; /* the lock is the only state encoding changes */
    mu_pool *pool = mu_mmproj_lock(pm, mu_engine_n_threads(e), err);
    if (!pool) rc = err ? err->code : MU_E_NOMEM;
    else {
        rc = MU_E_UNSUPPORTED;
        if (e->gpu) { /* --backend cuda: the device encoder, else the CPU's with a notice */
            mu_err gerr = {0};
            rc = mu_vit_encode_gpu(pm, e->gpu_dev, chw, w, h, out, &gerr);
            if (rc == MU_E_UNSUPPORTED && !pm->gpu_noticed) {
                pm->gpu_noticed = true;
                fprintf(stderr, "muser: images are encoded on the CPU: %s\n", gerr.msg);
            } else if (rc && err) {
                *err = gerr;
            }
        }
        if (rc == MU_E_UNSUPPORTED) rc = mu_vit_encode(p, e->kern, NULL, pool, chw, w, h, out, err);
        mu_mmproj_unlock(pm);
    }
    free(chw);
    if (rc) {
        free(out);
        return rc;
    }
    *rows = out;
    *n_rows = gx * gy;
    if (nx) *nx = gx;
    if (ny) *ny = gy;
    return 0;
}

static int grow(mu_mprompt *mp, int *cap, int more, mu_err *err) {
    if (mp->n + more <= *cap) return 0;
    int nc = *cap ? *cap : 64;
    while (nc < mp->n + more) nc *= 2;
    int32_t *ids = realloc(mp->ids, (size_t)nc * sizeof *ids);
    if (ids) mp->ids = ids;
    const float **row = realloc(mp->row, (size_t)nc * sizeof *row);
    if (row) mp->row = row;
    if (!ids || !row) return mu_fail(err, MU_E_NOMEM, "prompt: out of memory");
    *cap = nc;
    return 0;
}

static int add_text(mu_mprompt *mp, int *cap, const mu_model *m, const char *s, size_t len, mu_err *err) {
    if (!len) return 0;
    int32_t *ids = NULL;
    int n = 0;
    int rc = mu_tokenize(m, s, len, false, true, &ids, &n, err);
    if (!rc) rc = grow(mp, cap, n, err);
    for (int i = 0; !rc && i < n; i++) {
        mp->ids[mp->n] = ids[i];
        mp->row[mp->n++] = NULL;
    }
    free(ids);
    return rc;
}

int mu_mprompt_new(mu_engine *e, const mu_mmproj *p, const char *text, size_t len, bool add_bos,
                   const mu_media *media, int n_media, mu_mprompt **out, mu_err *err) {
    const size_t ml = strlen(MU_MEDIA_MARKER);
    int n_markers = 0;
    for (size_t i = 0; i + ml <= len; i++)
        if (!memcmp(text + i, MU_MEDIA_MARKER, ml)) n_markers++, i += ml - 1;
    if (n_markers != n_media)
        return mu_fail(err, MU_E_ARG, "prompt: %d media markers for %d images", n_markers, n_media);
    if (n_media && !p) return mu_fail(err, MU_E_ARG, "prompt: images need a vision projector (--mmproj)");
    mu_mprompt *mp = calloc(1, sizeof *mp);
    if (!mp) return mu_fail(err, MU_E_NOMEM, "prompt: out of memory");
    atomic_init(&mp->refs, 1);
    mp->blocks = calloc((size_t)(n_media > 0 ? n_media : 1), sizeof *mp->blocks);
    if (!mp->blocks) {
        free(mp);
        return mu_fail(err, MU_E_NOMEM, "prompt: out of memory");
    }
    const mu_model *m = e->m;
    const mu_model_info *MI = mu_model_get_info(m);
    int cap = 0, rc = 0;
    if (add_bos && MI->bos >= 0 && !(rc = grow(mp, &cap, 1, err))) {
        mp->ids[mp->n] = MI->bos;
        mp->row[mp->n++] = NULL;
    }
    size_t start = 0;
    int im = 0;
    for (size_t i = 0; !rc && i <= len; i++) {
        const bool at_marker = i + ml <= len && !memcmp(text + i, MU_MEDIA_MARKER, ml);
        if (!at_marker && i < len) continue;
        if ((rc = add_text(mp, &cap, m, text + start, i - start, err))) break;
        if (!at_marker) break;
        /* the image: <|image_start|>, its rows, <|image_end|> */
        float *rows = NULL;
        int n_rows = 0;
        if ((rc = mu_mmproj_encode(p, e, &media[im], &rows, &n_rows, NULL, NULL, err))) break;
        mp->blocks[mp->n_blocks++] = rows;
        mp->n_out = p->info.n_out;
        uint64_t hsh = 1469598103934665603ull;
        for (size_t b = 0; b < (size_t)n_rows * mp->n_out; b++) {
            uint32_t u;
            memcpy(&u, &rows[b], 4);
            hsh = (hsh ^ u) * 1099511628211ull;
        }
        if ((rc = add_text(mp, &cap, m, "<|image_start|>", 15, err)) || (rc = grow(mp, &cap, n_rows, err))) break;
        for (int r = 0; r < n_rows; r++) {
            uint64_t z = hsh + (uint64_t)r * 0x9E3779B97F4A7C15ull;
            z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
            mp->ids[mp->n] = -1 - (int32_t)(z >> 34);
            mp->row[mp->n++] = rows + (size_t)r * mp->n_out;
        }
        if ((rc = add_text(mp, &cap, m, "<|image_end|>", 13, err))) break;
        im++;
        start = i + ml;
        i += ml - 1;
    }
    if (!rc && mp->n == 0) rc = mu_fail(err, MU_E_ARG, "prompt: empty");
    if (rc) {
        mu_mprompt_free(mp);
        return rc;
    }
    *out = mp;
    return 0;
}

mu_mprompt *mu_mprompt_ref(const mu_mprompt *mp) {
    mu_mprompt *m = (mu_mprompt *)mp; /* the count is the only state that changes */
    atomic_fetch_add(&m->refs, 1);
    return m;
}

void mu_mprompt_free(mu_mprompt *mp) {
    if (!mp || atomic_fetch_sub(&mp->refs, 1) != 1) return;
    for (int i = 0; i < mp->n_blocks; i++) free(mp->blocks[i]);
    free(mp->blocks);
    free(mp->ids);
    free(mp->row);
    free(mp);
}

int mu_mprompt_n(const mu_mprompt *mp) { return mp->n; }
const int32_t *mu_mprompt_tokens(const mu_mprompt *mp) { return mp->ids; }
const float *mu_mprompt_embd(const mu_mprompt *mp, int i) { return i >= 0 && i < mp->n ? mp->row[i] : NULL; }
