/* fake_gpu_row.h: the K (kv = 0) and V (kv = 1) values the fake GPU plugin
 * (fake_gpu_plugin.c) writes for element i of a token's row at a position
 * and layer; test_gpu_fake.c checks the rows it reads against them. */
#ifndef MU_TEST_FAKE_GPU_ROW_H
#define MU_TEST_FAKE_GPU_ROW_H

#include <stdint.h>

static inline uint16_t fake_row(int32_t tok, int pos, int il, int i, int kv) {
    return (uint16_t)(((uint32_t)tok * 131u + (uint32_t)pos * 7919u + (uint32_t)il * 1009u + (uint32_t)i * 3u +
                       (uint32_t)kv * 40503u) &
                      0xffffu);
}

/* The token an input row (mu_gpu_chunk.in_rows) stands for in fake_row:
 * 100000 + its first value. */
static inline int32_t fake_row_tok(const float *row) { return 100000 + (int32_t)row[0]; }

/* Element i of the hidden-state row (mu_gpu_chunk.feat) the fake plugin
 * captures for a token at a position entering layer il: an integer below
 * 2^20, exact as a float. */
static inline float fake_feat(int32_t tok, int pos, int il, int i) {
    return (float)(((uint32_t)tok * 257u + (uint32_t)pos * 4099u + (uint32_t)il * 65537u + (uint32_t)i * 5u) &
                   0xfffffu);
}

#endif
