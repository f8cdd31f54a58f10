/* fuzz_image.c: the image entry point (src/vision/image.c). Input: encoded
 * bytes, decoded as PNG, JPEG or WebP; a decoded image is preprocessed as
 * for Muse Glimmer with a token cap taken from the last byte (1..64 keeps
 * the float tensor small). A decoded image has positive sides within the
 * limits; the tensor has whole cells; errors are one line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/vision/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mu_image img;
    mu_err err = {0};
    if (mu_image_decode(data, size, &img, &err)) {
        if (strncmp(err.msg, "image: ", 7) || strchr(err.msg, '\n')) abort();
        return 0;
    }
    if (img.w <= 0 || img.h <= 0 || img.w > MU_IMAGE_MAX_SIDE || img.h > MU_IMAGE_MAX_SIDE || !img.rgb) abort();
    /* keep the fuzzer's memory small: big pictures are decoded, not resized */
    if ((long)img.w * img.h <= 4096L * 4096) {
        mu_image_pp pp = {.patch_size = 14, .merge = 2, .min_tokens = 1, .max_tokens = 1 + (size ? data[size - 1] % 64 : 0),
                          .mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}, .image_size = 448};
        float *chw = NULL;
        int nx = 0, ny = 0;
        if (mu_image_preprocess(&img, &pp, &chw, &nx, &ny, &err) == 0) {
            if (nx <= 0 || ny <= 0 || nx % 28 || ny % 28) abort();
            for (long i = 0; i < 3L * nx * ny; i++)
                if (chw[i] < -1.0f || chw[i] > 1.0f) abort();
            free(chw);
        }
    }
    mu_image_free(&img);
    return 0;
}
