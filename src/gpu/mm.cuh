/* mm.cuh: device helpers shared by the matmul files (gpu_cuda_mm.cu: the
 * quantization, decode and generic matmuls; gpu_cuda_mmq.cu: prefill on the
 * int8 tensor cores; gpu_cuda_mmw.cu: Q4_K prefill on wgmma), and the
 * prefill entry points. */
#ifndef MU_GPU_MM_CUH
#define MU_GPU_MM_CUH

#include "cuda.cuh"

__device__ __forceinline__ int ld32(const void *p) { return *(const int *)p; }

/* ---- NVFP4 (the CPU's mu_vec_dot_nvfp4_ref) ----------------------------- */

/* a UE4M3 scale byte as a float (the top bit ignored; 0x7f reads as 0) */
__device__ __forceinline__ float nvfp4_scale(uint8_t x) {
    if (x == 0x7f) return 0.f;
    const uint32_t e = (x >> 3) & 15, m = x & 7;
    if (!e) return (float)m * 0x1p-10f;
    return __uint_as_float(((e + 119) << 23) | (m << 20));
}
/* prmt.b32 with its whole selector: a selector nibble's fourth bit set
 * gives the chosen byte's sign in all eight bits, not the byte */
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
    unsigned d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

/* The signed codes (c_fp4 of gpu_cuda_mm.cu) of the eight nibbles of an
 * NVFP4 code word w in the device layout (cu_dev_blocks): *lo those of
 * bits 0..15 (the low nibbles of the word's four bytes in GGUF), *hi those
 * of bits 16..31, a byte each. Byte permutes over the table: the positive
 * half (codes 0..7) and the negative half (8..15) looked up with the three
 * low bits of each nibble (masked: prmt reads the fourth as "replicate the
 * sign"), then a byte of either chosen by the nibble's top bit. */
__device__ __forceinline__ void fp4_codes(unsigned w, int *lo, int *hi) {
    const unsigned P0 = 0x03020100u, P1 = 0x0C080604u; /* 0 1 2 3 | 4 6 8 12 */
    const unsigned N0 = 0xFDFEFF00u, N1 = 0xF4F8FAFCu; /* 0 -1 -2 -3 | -4 -6 -8 -12 */
    const unsigned ix = w & 0x77777777u;
    const unsigned sg = ((w >> 1) & 0x44444444u) | 0x32103210u; /* byte n of the positives, or of the negatives (4 + n) */
    *lo = (int)prmt(prmt(P0, P1, ix), prmt(N0, N1, ix), sg);
    *hi = (int)prmt(prmt(P0, P1, ix >> 16), prmt(N0, N1, ix >> 16), sg >> 16);
}

/* The magnitudes of those codes split by sign, a byte each: *pl, *ph |c|
 * where c >= 0 (the nibble's top bit clear), else 0; *nl, *nh |c| where
 * the top bit is set, else 0 (lo: bits 0..15, hi: 16..31). One permute a
 * four: where the selector's fourth bit is set, prmt gives the sign of a
 * byte of the positive table, 0. */
__device__ __forceinline__ void fp4_mags(unsigned w, unsigned *pl, unsigned *nl, unsigned *ph, unsigned *nh) {
    const unsigned P0 = 0x03020100u, P1 = 0x0C080604u; /* 0 1 2 3 | 4 6 8 12 */
    const unsigned wx = w ^ 0x88888888u;
    *pl = prmt(P0, P1, w);
    *nl = prmt(P0, P1, wx);
    *ph = prmt(P0, P1, w >> 16);
    *nh = prmt(P0, P1, wx >> 16);
}

/* The top bit of each byte of a that is -128 (only a non-finite
 * activation quantizes to -128), else 0 */
__device__ __forceinline__ unsigned is_m128(int a) {
    const unsigned t = (unsigned)a ^ 0x80808080u;                            /* zero bytes where a = -128 */
    const unsigned nz = (((t & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) | t) & 0x80808080u; /* top bit: t's byte is not zero */
    return ~nz & 0x80808080u;
}
/* What x86's sign trick adds to dp4a(c, a) for NVFP4 codes c (fp4_mul):
 * 256 c for each byte where a = -128 and c < 0. Branch-free and short: it
 * sits in the unrolled loop, behind a test that is false for finite
 * activations. */
__device__ __forceinline__ int fp4_fix(int c, int a) {
    const unsigned sel = is_m128(a) & (unsigned)c; /* top bit: a = -128 and c < 0 */
    return 256 * __dp4a((int)((unsigned)c & ((sel >> 7) * 0xFFu)), 0x01010101, 0);
}
/* The same for magnitudes n of negative codes (fp4_mags), where dp4a(n, a)
 * is subtracted: 256 n for each byte where a = -128, to add to that dp4a. */
__device__ __forceinline__ int fp4_fix_neg(unsigned n, int a) {
    return 256 * __dp4a((int)(n & ((is_m128(a) >> 7) * 0xFFu)), 0x01010101, 0);
}

/* scale_min_k4 on the 12 scale bytes held as 3 words */
__device__ __forceinline__ int ubyte(const int w[3], int i) {
    const int x = i < 4 ? w[0] : i < 8 ? w[1] : w[2]; /* selects: no local memory for a lane-dependent i */
    return (x >> (8 * (i & 3))) & 0xFF;
}
__device__ __forceinline__ int scale_k4w(int j, const int w[3]) {
    return j < 4 ? ubyte(w, j) & 63 : (ubyte(w, j + 4) & 0xF) | ((ubyte(w, j - 4) >> 6) << 4);
}
__device__ __forceinline__ int min_k4w(int j, const int w[3]) {
    return j < 4 ? ubyte(w, j + 4) & 63 : (ubyte(w, j + 4) >> 4) | ((ubyte(w, j) >> 6) << 4);
}

#define MAGIC_I 0x4B400000 /* the bits of 12582912.f = 1.5 x 2^23 */
#define MAGIC_F 12582912.f

/* the int x, from MAGIC_I + x (|x| < 2^22), exactly */
__device__ __forceinline__ float magic_x(int d) { return __int_as_float(d) - MAGIC_F; }

/* d = a b + c for c the same in all four (no copies of it into d first) */
__device__ __forceinline__ void mma_s8_c(int d[4], const int a[4], const int b[2], int c) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c));
}

/* d = c + a b, the accumulator kept (chained sums) */
__device__ __forceinline__ void mma_s8(int c[4], const int a[4], const int b[2]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* the 6-bit scales (S) and mins (M) of a Q4_K block, four bytes a word:
 * sub-blocks 0..3, then 4..7 */
__device__ __forceinline__ void k4_unpack(const int w[3], int S[2], int M[2]) {
    S[0] = w[0] & 0x3F3F3F3F;
    M[0] = w[1] & 0x3F3F3F3F;
    S[1] = (w[2] & 0x0F0F0F0F) | ((w[0] >> 2) & 0x30303030);
    M[1] = ((w[2] >> 4) & 0x0F0F0F0F) | ((w[1] >> 2) & 0x30303030);
}
/* byte k of x in all four bytes */
__device__ __forceinline__ int byte_bcast(int x, int k) { return (int)__byte_perm((unsigned)x, 0u, 0x1111 * k); }

/* A thread's copies of the weight tile: super-block b of the block's RB
 * rows (clamped to the last row), 144 bytes a row, as words i = tid + NTH
 * k of 16 bytes (row i / 9, word i % 9: at 16 i in the tile), NTH threads;
 * the sources are formed once. */
template <int RB, int NTH>
struct q4w_plan {
    static constexpr int NW = RB * 9, K = (NW + NTH - 1) / NTH;
    const uint8_t *src[K]; /* in super-block 0 */
    __device__ __forceinline__ q4w_plan(const uint8_t *w, size_t w_rb, int r0, int rows) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = min((int)threadIdx.x + NTH * k, NW - 1), r = i / 9, c = i % 9;
            src[k] = w + (size_t)(r0 + r < rows ? r0 + r : rows - 1) * w_rb + 16 * c;
        }
    }
    /* starts copying super-block b into s_w; no commit */
    __device__ __forceinline__ void stage(uint8_t *s_w, int b) const {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = threadIdx.x + NTH * k;
            if (k < K - 1 || i < NW) cp16(s_w + 16 * i, src[k] + (size_t)b * 144);
        }
    }
};

/* Q4_K prefill on the wgmma kernel (gpu_cuda_mmw.cu) where the plugin has
 * sm_90a code for the device and MUSER_CUDA_Q4_WG is not 0: its tiles of
 * 128 tokens below n_batch (T >= 64, 1024 rows or more); returns the
 * tokens taken, 0: none (the int8 kernel takes the rest). */
int cu_mm_q4K_wg(cudaStream_t st, const uint8_t *wd, size_t rb, int rows, int nb, const uint8_t *a, size_t act_stride,
                 int T, int n_batch, float *y);

/* Prefill matmul of w on the int8 tensor cores (gpu_cuda_mmq.cu; Q8_0 and
 * NVFP4 by dp4a), for the types and sizes that have one (T > the decode kernels'
 * tokens); false: not taken, the caller runs another kernel. */
bool cu_matmul_mma(cudaStream_t st, const dtensor *w, const void *act, size_t act_stride, int T, int n_batch, float *y);

/* int8 mma (compute capability 8.0) is there and not switched off
 * (MUSER_CUDA_NO_MMA=1) */
bool cu_mma_ok(void);

#endif
