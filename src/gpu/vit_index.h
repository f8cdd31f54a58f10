/* vit_index.h: the index math of the vision encoder's device kernels
 * (gpu_cuda_vit.cu), one function per kernel, in C that both nvcc and the
 * host compiler build, so a CPU emulation of the device pipeline
 * (tests/unit/test_vit_gpu_emul.c) runs the very same integer arithmetic
 * against the CPU encoder without a GPU. Pure: no memory is touched. */
#ifndef MU_GPU_VIT_INDEX_H
#define MU_GPU_VIT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MU_VI_FN __host__ __device__ static inline
#else
#define MU_VI_FN static inline
#endif

/* attention: queries per block (one thread each), keys per shared tile */
#define MU_VI_AQ 64
#define MU_VI_AK 32

/* im2col element e of [n][3 * ps * ps] (token i = e / K, the kernel's
 * [c][ky][kx] order inside): the offset in chw [3][ny][nx] of the pixel it
 * reads, token i being grid patch perm_i = py * gw + px; -1 outside the
 * image (never, for a valid layout) */
MU_VI_FN int64_t mu_vi_im2col_src(int64_t e, int ps, int nx, int ny, int gw, int perm_i) {
    const int K = 3 * ps * ps, idx = (int)(e % K);
    const int ch = idx / (ps * ps), ky = idx / ps % ps, kx = idx % ps;
    const int py = perm_i / gw, px = perm_i % gw;
    const int y = py * ps + ky, x = px * ps + kx;
    if (perm_i < 0 || y >= ny || x >= nx) return -1;
    return ((int64_t)ch * ny + y) * nx + x;
}

/* RoPE pair pr of a token's row of E (head h = 2 pr / hd): the offset of its
 * first value inside the row, and whether it rotates by the row position
 * (second half of the head) or the column (first half); *cs_i: the index
 * of its (cos, sin) inside a position's hd / 2 table entries */
MU_VI_FN int mu_vi_rope_pair(int pr, int hd, int *by_row, int *cs_i) {
    const int nd = hd / 2, col = pr * 2, h = col / hd, in_head = col % hd;
    const int half = in_head / nd, i = in_head % nd;
    *by_row = half;
    *cs_i = i;
    return h * hd + half * nd + i;
}

/* pixel-shuffle element e of [n_out][4 E] (merged cell o = e / 4E, column
 * c * 4 + s): the grid patch it reads, the s-th (row-major 2x2) patch of
 * cell o; *c gets its channel */
MU_VI_FN int mu_vi_shuffle_src(int64_t e, int E, int gw, int *c) {
    const int o = (int)(e / (4 * E)), cs = (int)(e % (4 * E)), s = cs % 4, ow = gw / 2;
    const int oy = o / ow, ox = o % ow;
    *c = cs / 4;
    return (oy * 2 + s / 2) * gw + ox * 2 + s % 2;
}

#endif
