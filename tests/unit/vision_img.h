/* vision_img.h: the seeded test images of the vision tests, shared by the
 * unit test and tools/mtmd_ref (which made the reference embeddings from the
 * same pixels). RGB8, row-major: a diagonal gradient per channel plus
 * splitmix noise, so every patch and channel differs. */
#ifndef MU_TESTS_VISION_IMG_H
#define MU_TESTS_VISION_IMG_H

#include <stdint.h>

static inline void vision_test_image(int w, int h, uint64_t seed, unsigned char *rgb) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                uint64_t z = (s += 0x9E3779B97F4A7C15ull);
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
                z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
                z ^= z >> 31;
                int v = (x * (3 + c) + y * (5 - c) + c * 80) % 256 + (int)(z % 48) - 24;
                rgb[((size_t)y * w + x) * 3 + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
}

#endif
