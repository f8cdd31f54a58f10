/* q8dec.cpp: k_mm_q8_dec's per-lane arithmetic (gpu_cuda_mm.cu) run on
 * the host against kern_ref.c's Q8_0 and NVFP4 dots, bit for bit, on
 * random rows (NVFP4: any bytes, so scales 0x7f and 0xff too, uploaded
 * through nvfp4_dev_block) with activation bytes of -128; byte permutes
 * with PTX's generic prmt semantics (a selector nibble's fourth bit
 * replicates the sign). run.sh takes the device functions from the source
 * (q8d_block: one block of a lane's chains, and what it calls); the
 * staging and the end's hsum8 below mirror the kernel's and must follow it
 * when that changes. No GPU needed: the GPU's own check is
 * tests/gpu/test_gpu_kern.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "kern/kern.h"
}
#define __device__
#define __forceinline__ inline

static unsigned prmt(unsigned x, unsigned y, unsigned s) { /* PTX prmt generic: bit 3 = sign replicate */
    uint64_t in = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int n = 0; n < 4; n++) {
        unsigned sel = (s >> 4 * n) & 15;
        unsigned b = (in >> 8 * (sel & 7)) & 0xFF;
        if (sel & 8)
            b = (b & 0x80) ? 0xFF : 0;
        r |= b << 8 * n;
    }
    return r;
}
static unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned sh) {
    sh &= 31;
    uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned)((v << sh) >> 32);
}
static float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float __int_as_float(int u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
struct int2 {
    int x, y;
};
struct float2 {
    float x, y;
};
static int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
}
static float h2f(uint16_t h) { return mu_f16_to_f32(h); }
#include DEV_INC
typedef struct {
    uint16_t d, pad;
    int8_t qs[32];
} dq8_0;
static uint64_t rng = 88172645463325252ull;
static uint32_t rnd() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}
/* the kernel's lane work for one row of nb blocks in the device layout,
 * one token: lane k's chains, then hsum8 in the kernel's order */
template <int TYPE> float emu_row(const uint8_t *w36, int nb, const dq8_0 *act, int neg) {
    const bool FP4 = TYPE == MU_T_NVFP4;
    const int nba = FP4 ? 2 * nb : nb;
    int *s_aq = (int *)malloc(nba * 32);
    float *s_ad = (float *)malloc(nba * 4);
    for (int tb = 0; tb < nba; tb++)
        for (int q = 0; q < 9; q++) {
            int v;
            memcpy(&v, (const uint8_t *)(act + tb) + 4 * q, 4);
            if (q == 0)
                s_ad[tb] = h2f((uint16_t)v);
            else
                s_aq[tb * 8 + q8d_perm<TYPE>(q - 1)] = v;
        }
    float ca[4], cb[4];
    for (int k = 0; k < 4; k++) {
        const int rot0 = 20 - 8 * (k >> 1), rot1 = (rot0 - 16) & 31;
        ca[k] = cb[k] = 0;
        for (int b = 0; b < nb; b++)
            q8d_block<TYPE, 1>(w36 + 36 * b, b, k, rot0, rot1, s_aq, s_ad, nba, 1, neg != 0, &ca[k], &cb[k]);
    }
    float ch[8];
    for (int c = 0; c < 8; c++) {
        const int sl = FP4 ? (c & 1) + 2 * (c >> 2) : c & 3;
        const bool second = FP4 ? (c & 2) != 0 : c >= 4;
        ch[c] = second ? cb[sl] : ca[sl];
    }
    free(s_aq);
    free(s_ad);
    float h0 = ch[0] + ch[4], h1 = ch[1] + ch[5], h2 = ch[2] + ch[6], h3 = ch[3] + ch[7];
    return (h0 + h2) + (h1 + h3);
}
int main() {
    int bad = 0;
    for (int x = 0; x < 256; x++)
        for (int i = 0; i < 4; i++) { /* byte x as uploaded: 0x7f made 0x00 */
            unsigned w = (rnd() & ~(0xFFu << 8 * i)) | ((unsigned)(x == 0x7f ? 0 : x) << 8 * i);
            float a = nvfp4_scale_rot(w, (20 - 8 * i) & 31), b = mu_nvfp4_scale((uint8_t)x);
            if (memcmp(&a, &b, 4)) {
                if (bad++ < 5)
                    printf("scale %02x byte %d: %g vs %g\n", x, i, a, b);
            }
        }
    printf("scales: %d bad\n", bad);
    const mu_kern *K = mu_kern_ref();
    int badq = 0, badf = 0, n = 0;
    for (int it = 0; it < 4000; it++) {
        const int nb = 1 + rnd() % 20;
        /* NVFP4: nb blocks of 36 bytes; Q8_0: nb blocks of 34 (CPU) / 36 (device) */
        uint8_t w[36 * 20], wn[36 * 20], wq[34 * 20], wd[36 * 20];
        for (int i = 0; i < 36 * nb; i++)
            w[i] = rnd();
        for (int b = 0; b < nb; b++)
            nvfp4_dev_block(w + 36 * b, wn + 36 * b);
        for (int b = 0; b < nb; b++) {
            uint16_t d = (uint16_t)(rnd() & 0x3FFF);
            memcpy(wq + 34 * b, &d, 2);
            for (int j = 0; j < 32; j++)
                wq[34 * b + 2 + j] = rnd();
            memcpy(wd + 36 * b, &d, 2);
            wd[36 * b + 2] = wd[36 * b + 3] = 0;
            memcpy(wd + 36 * b + 4, wq + 34 * b + 2, 32);
        }
        /* activations: 2 nb Q8_0 blocks, a -128 now and then */
        dq8_0 a[40];
        uint8_t ac[34 * 40];
        const int with128 = it % 3 == 0;
        int neg = 0;
        for (int b = 0; b < 2 * nb; b++) {
            a[b].d = (uint16_t)(rnd() & 0x3FFF);
            a[b].pad = 0;
            for (int j = 0; j < 32; j++) {
                int v = (int)(int8_t)rnd();
                if (v == -128 && !with128)
                    v = -127;
                if (with128 && rnd() % 16 == 0)
                    v = -128;
                a[b].qs[j] = (int8_t)v;
                if (v == -128)
                    neg = 1;
            }
            memcpy(ac + 34 * b, &a[b].d, 2);
            memcpy(ac + 34 * b + 2, a[b].qs, 32);
        }
        float g = emu_row<MU_T_NVFP4>(wn, nb, a, neg), c = K->vec_dot[MU_T_NVFP4](64 * nb, w, ac);
        if (memcmp(&g, &c, 4)) {
            if (badf++ < 5)
                printf("nvfp4 nb %d: %a vs %a\n", nb, g, c);
        }
        g = emu_row<MU_T_Q8_0>(wd, nb, a, 0);
        c = K->vec_dot[MU_T_Q8_0](32 * nb, wq, ac);
        if (memcmp(&g, &c, 4)) {
            if (badq++ < 5)
                printf("q8_0 nb %d: %a vs %a\n", nb, g, c);
        }
        n++;
    }
    printf("%d rows: nvfp4 %d bad, q8_0 %d bad\n", n, badf, badq);
    return bad || badf || badq;
}
