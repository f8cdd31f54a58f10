/* fuzz_mmproj.c: the vision projector binding (src/vision/mmproj.c) over
 * arbitrary bytes, and when they bind as a small projector, one encode of
 * a 28x28 and a 56x84 image through the reference kernels, whatever
 * garbage the weights hold. Nothing may read outside the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser.h"
#include "../../src/base/pool.h"
#include "../../src/kern/kern.h"
#include "../../src/vision/mmproj.h"
#include "../../src/vision/vit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mu_mmproj *p;
    mu_err err;
    if (mu_mmproj_open_mem(data, size, NULL, &p, &err)) return 0;
    const mu_mmproj_info *I = mu_mmproj_get_info(p);
    const int cell = I->patch_size * I->n_merge;
    if (I->n_layer <= 4 && I->n_embd <= 128 && I->n_ff <= 512 && p->mm_hidden <= 512 && I->n_out <= 512 &&
        cell <= 64) {
        static mu_pool *pool;
        if (!pool && mu_pool_new(1, &pool, &err)) abort();
        static const int sz[2][2] = {{1, 1}, {2, 3}};
        for (int k = 0; k < 2; k++) {
            const int w = cell * sz[k][0], h = cell * sz[k][1], n_out = sz[k][0] * sz[k][1];
            float *chw = malloc((size_t)3 * w * h * sizeof *chw);
            float *out = malloc((size_t)n_out * I->n_out * sizeof *out);
            for (int i = 0; i < 3 * w * h; i++) chw[i] = (float)(i % 17) / 8.0f - 1.0f;
            if (mu_vit_encode(p, mu_kern_ref(), mu_vit_kern_ref(), pool, chw, w, h, out, &err) == 0) {
                volatile float sink = 0;
                for (int i = 0; i < n_out * I->n_out; i++) sink += out[i];
                (void)sink;
            }
            free(chw);
            free(out);
        }
    }
    mu_mmproj_free(p);
    return 0;
}
