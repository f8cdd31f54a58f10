/* image.h: encoded image bytes to the float tensor the vision tower reads.
 * Owns: decoding PNG, JPEG and WebP into RGB8 (Debian's libpng,
 * libjpeg-turbo, libwebp) and Muse Glimmer's preprocessing as llama.cpp's
 * mtmd does it (token grid, Pillow-style Lanczos stretch, normalization).
 * Not here: the projector file and the encoder (src/vision, issue 19's
 * engine side), HTTP parsing of images (src/http). */
#ifndef MU_VISION_IMAGE_H
#define MU_VISION_IMAGE_H

#include <stddef.h>

#include "../base/err.h"

/* Bumped whenever the decoded pixels or the preprocessed floats of some
 * input change: a KV pack that holds image rows names it. */
#define MU_IMAGE_PP_VERSION 1

/* The largest decoded image, in pixels (w * h), and per side: bigger ones
 * are refused before their pixels are allocated. llama.cpp's resize refuses
 * a target side over 65536 too. */
#define MU_IMAGE_MAX_PIXELS (1L << 26)
#define MU_IMAGE_MAX_SIDE 65536

/* RGB8, row-major, w * h * 3 bytes; owned by the struct (mu_image_free). */
typedef struct mu_image {
    int w, h;
    unsigned char *rgb;
} mu_image;

/* Decodes a PNG, JPEG or WebP file held in buf[0, n). Pixels come out as
 * llama.cpp's stb_image gives them for 3 channels: gray is replicated,
 * alpha is dropped (not composited), 16-bit samples keep their high byte,
 * palettes are expanded, CMYK/YCCK JPEGs are multiplied by K, an animated
 * PNG or WebP gives its first frame. Returns 0 and fills *out, or a
 * negative MU_E_* (MU_E_ARG: not a readable image, with the reason;
 * MU_E_NOMEM) and leaves *out untouched. */
int mu_image_decode(const void *buf, size_t n, mu_image *out, mu_err *err);
/* Frees img->rgb and zeroes the struct; NULL is fine. */
void mu_image_free(mu_image *img);

/* The projector's preprocessing parameters. For muse-glimmer only
 * patch_size, merge, max_tokens, mean and std matter (max_tokens: merged
 * tokens per image, llama.cpp's image_max_pixels / (patch_size*merge)^2,
 * 4096); min_tokens and image_size are carried for other projector kinds
 * and ignored, as llama.cpp's muse-glimmer preprocessor ignores them. */
typedef struct mu_image_pp {
    int patch_size, merge, min_tokens, max_tokens;
    float mean[3], std[3];
    int image_size;
} mu_image_pp;

/* The merged-token grid llama.cpp picks for a w x h image with cells of
 * cell pixels (patch_size * merge): *gx columns, *gy rows, the aspect ratio
 * kept as closely as the integer grid allows with gx * gy <= max_tokens
 * (llama.cpp's fallback for extreme aspect ratios can exceed it: as there).
 * Returns 0, or -1 for a non-positive argument. For tests and for callers
 * that only count tokens. */
int mu_image_grid(int w, int h, int cell, int max_tokens, int *gx, int *gy);

/* Stretches img to the token grid (Lanczos-3, Pillow's fixed-point
 * separable filter, as llama.cpp) and normalizes: *chw is malloc'd
 * [3][*ny][*nx] floats, channel-major; *nx, *ny are pixels, multiples of
 * patch_size * merge. Returns 0 or a negative MU_E_* (MU_E_ARG for
 * parameters out of range or a target side over MU_IMAGE_MAX_SIDE). */
int mu_image_preprocess(const mu_image *img, const mu_image_pp *pp, float **chw, int *nx, int *ny,
                        mu_err *err);

#endif
