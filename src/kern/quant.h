/* quant.h: ggml tensor type ids and quant block layouts, in plain C that
 * CUDA code can share (there is none yet).
 * Owns: the byte layout of every block type muser reads, and the type table
 * (block size, bytes per block). The layouts are the GGUF on-disk format and
 * must never change; static asserts pin their sizes. */
#ifndef MU_KERN_QUANT_H
#define MU_KERN_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ggml type ids as stored in GGUF tensor infos. */
enum {
    MU_T_F32 = 0, MU_T_F16 = 1, MU_T_Q4_0 = 2, MU_T_Q4_1 = 3,
    MU_T_Q5_0 = 6, MU_T_Q5_1 = 7, MU_T_Q8_0 = 8, MU_T_Q8_1 = 9,
    MU_T_Q2_K = 10, MU_T_Q3_K = 11, MU_T_Q4_K = 12, MU_T_Q5_K = 13,
    MU_T_Q6_K = 14, MU_T_Q8_K = 15, MU_T_BF16 = 30,
    MU_T_COUNT = 40,
};

#define MU_QK8_0 32
#define MU_QK_K 256
#define MU_K_SCALE_SIZE 12

typedef uint16_t mu_f16;  /* IEEE half, raw bits */
typedef uint16_t mu_bf16; /* bfloat16, raw bits */

typedef struct { mu_f16 d; int8_t qs[MU_QK8_0]; } mu_block_q8_0;
/* 8 sub-blocks of 32: 6-bit scales and mins packed in scales[12]. */
typedef struct { mu_f16 d, dmin; uint8_t scales[MU_K_SCALE_SIZE]; uint8_t qs[MU_QK_K / 2]; } mu_block_q4_K;
typedef struct { mu_f16 d, dmin; uint8_t scales[MU_K_SCALE_SIZE]; uint8_t qh[MU_QK_K / 8]; uint8_t qs[MU_QK_K / 2]; } mu_block_q5_K;
/* 16 sub-blocks of 16: low 4 bits in ql, high 2 bits in qh, int8 scales. */
typedef struct { uint8_t ql[MU_QK_K / 2]; uint8_t qh[MU_QK_K / 4]; int8_t scales[MU_QK_K / 16]; mu_f16 d; } mu_block_q6_K;
/* Activation block for K-quant dot products (what llama.cpp's CPU backend uses). */
typedef struct { float d; int8_t qs[MU_QK_K]; int16_t bsums[MU_QK_K / 16]; } mu_block_q8_K;

#ifndef __cplusplus /* the CUDA plugin includes this header as C++ */
_Static_assert(sizeof(mu_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(mu_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(mu_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(mu_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(mu_block_q8_K) == 292, "q8_K layout");
#endif

typedef struct {
    const char *name;
    int blck;         /* elements per block; 0 = unknown type */
    int type_bytes;   /* bytes per block */
    int supported;    /* muser computes with it */
} mu_type_info;

/* Table lookup; returns an entry with blck == 0 for ids ggml does not define. */
const mu_type_info *mu_type_get(uint32_t type);

/* Bytes of a row of n elements, or 0 when n is not a multiple of the block. */
size_t mu_type_row_bytes(uint32_t type, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
