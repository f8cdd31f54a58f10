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

/* The logits row of n values the fake plugin writes for a token at a
 * position: zeros in mode 0 ($MUSER_FAKE_GPU_LOGITS unset); in mode 1 one
 * of eight shapes picked by (tok, pos), some of them with ties, -0.0
 * against +0.0, a NaN, +inf or -inf; mode 2 only the finite shapes (for
 * generation). a and b are two different indices. */
static inline int fake_logits_shape(int32_t tok, int pos, int mode) {
    const uint32_t u = ((uint32_t)tok * 2654435761u) ^ ((uint32_t)pos * 40503u);
    const int shape = mode == 0 ? 0 : (int)((u >> 7) % 8u);
    return mode == 2 && shape >= 5 ? shape - 3 : shape;
}

static inline void fake_logits(int32_t tok, int pos, float *l, int n, int mode) {
    const uint32_t a = ((uint32_t)tok * 7u + (uint32_t)pos * 13u) % (uint32_t)n;
    const uint32_t b = n > 1 ? (a + 1 + ((uint32_t)tok * 3u + (uint32_t)pos) % (uint32_t)(n - 1)) % (uint32_t)n : a;
    const int shape = fake_logits_shape(tok, pos, mode);
    for (int i = 0; i < n; i++) l[i] = shape == 3 ? -1.0f : 0.0f;
    switch (shape) {
    case 1: l[0] = -0.0f; break;                   /* equals every +0.0 after it: index 0 */
    case 2: l[a] = l[b] = 2.0f; break;             /* a tie: the smaller index */
    case 3: l[a] = -0.0f, l[b] = 0.0f; break;      /* a tie of -0 and +0 */
    case 4: l[a] = 1.5f, l[b] = 1.25f; break;
    case 5: l[a] = __builtin_nanf(""); break;
    case 6: l[a] = __builtin_inff(); break;
    case 7: l[a] = -__builtin_inff(); break;
    default: break;
    }
}

#endif
