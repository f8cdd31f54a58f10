/* amx_tiles.h: the AMX tile instructions as gemm_amx.c and gemm_amx_q8.c
 * use them, on hardware or emulated, and the per-thread scratch they share.
 * Include only from files built with kern_avx512.c's flags.
 * Owns: the tile configuration layout, the T_* instruction macros (inline
 * assembly, or with `sim` set a C model of each instruction over this
 * thread's emulated tile file), loading and releasing a configuration, the
 * scratch slots (gemm_amx.c keeps the buffers).
 * Does not: choose tile shapes (each gemm fills its own tilecfg) nor detect
 * AMX (kern_dispatch.c). */
#ifndef MU_KERN_AMX_TILES_H
#define MU_KERN_AMX_TILES_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kern.h"

/* ldtilecfg's 64-byte operand (palette 1) */
typedef struct {
    uint8_t palette, start_row, pad[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* The emulated tile file of this thread: rows x colsb bytes per tile as
 * configured (what is past them reads as zero, as in hardware). */
static _Thread_local struct {
    tilecfg cfg;
    uint8_t t[8][16][64];
} emu;

static inline void emu_load(int n, const void *p, size_t stride) {
    memset(emu.t[n], 0, sizeof emu.t[n]);
    for (int r = 0; r < emu.cfg.rows[n]; r++) memcpy(emu.t[n][r], (const uint8_t *)p + r * stride, emu.cfg.colsb[n]);
}
static inline void emu_store(int n, void *p, size_t stride) {
    for (int r = 0; r < emu.cfg.rows[n]; r++) memcpy((uint8_t *)p + r * stride, emu.t[n][r], emu.cfg.colsb[n]);
}
static inline void emu_zero(int n) { memset(emu.t[n], 0, sizeof emu.t[n]); }
/* Tile numbers must be literals (they are part of the instruction). The
 * "memory" clobbers order the tile loads and stores with the C code that
 * writes their sources and reads their results. */
#define T_LOAD(sim, n, p, s)                                                                                        \
    do {                                                                                                            \
        if (sim) emu_load(n, p, s);                                                                                 \
        else __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #n ::"r"(p), "r"((long)(s)) : "memory");               \
    } while (0)
#define T_STORE(sim, n, p, s)                                                                                       \
    do {                                                                                                            \
        if (sim) emu_store(n, p, s);                                                                                \
        else __asm__ volatile("tilestored %%tmm" #n ", (%0,%1,1)" ::"r"(p), "r"((long)(s)) : "memory");           \
    } while (0)
#define T_ZERO(sim, n)                                                                                              \
    do {                                                                                                            \
        if (sim) emu_zero(n);                                                                                       \
        else __asm__ volatile("tilezero %%tmm" #n ::);                                                              \
    } while (0)
/* c: the filled configuration, 64-byte aligned */
static inline void tiles_load(int sim, const tilecfg *c) {
    if (sim) emu.cfg = *c;
    else __asm__ volatile("ldtilecfg (%0)" ::"r"(c) : "memory");
}
static inline void tiles_end(int sim) {
    if (!sim) __asm__ volatile("tilerelease" ::);
}

/* C += A . B, both signed (AT&T operand order: b, a, c) */
#define T_DPBSSD(sim, c, a, b)                                                                                      \
    do {                                                                                                            \
        if (sim) emu_dpbssd(c, a, b);                                                                               \
        else __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::);                                    \
    } while (0)

/* TDPBSSD c, a, b: C[m][j] += sum over k < colsb(a) / 4, e < 4 of
 * (int8)A[m][4 k + e] * (int8)B[k][4 j + e], in int32, wrapping. With
 * B = (B ^ 0x80) - 128 bytewise, each k adds VPDPBUSD of the flipped
 * (unsigned) B row against the dword k of A row m broadcast (exact: 4 byte
 * products cannot leave int32) minus 128 times the sum of A's 4 bytes (the
 * same for every column). Tiles are used whole (the config of cfg_fill): the
 * zeros past colsb add nothing. */
static inline void emu_dpbssd(int c, int a, int b) {
    const int M = emu.cfg.rows[c], K = emu.cfg.colsb[a] / 4;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int m = 0; m < M; m++) {
        __m512i acc = _mm512_loadu_si512(emu.t[c][m]);
        int32_t corr = 0;
        for (int k = 0; k < K; k++) {
            int32_t ad;
            memcpy(&ad, &emu.t[a][m][4 * k], 4);
            for (int e = 0; e < 4; e++) corr += (int8_t)emu.t[a][m][4 * k + e];
            acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512(_mm512_loadu_si512(emu.t[b][k]), flip),
                                      _mm512_set1_epi32(ad));
        }
        acc = _mm512_sub_epi32(acc, _mm512_set1_epi32((int32_t)((uint32_t)corr << 7)));
        _mm512_storeu_si512(emu.t[c][m], acc);
    }
}

/* Scratch of the calling thread, kept between calls and freed when the
 * thread exits: slot k grown to at least `bytes`, 64-byte aligned; NULL
 * when that fails (gemm_amx.c). */
enum { SCR_WB, SCR_META, SCR_A, SCR_AX, SCR_N };
void *mu_kern_amx_scratch(int k, size_t bytes);

/* the Q8_0 and NVFP4 gemms (gemm_amx_q8.c), called by
 * mu_kern_fill_gemm_amx after it took the AVX-512 table's entries */
void mu_kern_fill_gemm_amx_q8(mu_kern *k, int sim);

#endif
