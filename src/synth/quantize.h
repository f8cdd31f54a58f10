/* quantize.h: f32 -> weight-type row quantizers (the model generator's side;
 * never on the inference path). */
#ifndef MU_SYNTH_QUANTIZE_H
#define MU_SYNTH_QUANTIZE_H

#include <stdint.h>

/* llama.cpp-style reference quantization of one row: n must be a multiple
 * of the type's block size; y receives mu_type_row_bytes(type, n) bytes
 * (src/kern/quant.h). */
void mu_quantize_row(uint32_t type, const float *x, void *y, int n);

/* Same contract as mu_quantize_row: n must be a multiple of the
 * type's block size; y receives mu_type_row_bytes(type, n) bytes.
 * The fast variant skips the iterative scale search of the K-quants (one
 * min/max pass per sub-block, then the same packing and final rounding with
 * the stored scales), about 10x cheaper and ~5-15% more RMS error on
 * Gaussian data. F32/F16/BF16/Q8_0/NVFP4 are identical in both variants
 * (NVFP4: llama.cpp's quantize_row_nvfp4_ref, byte for byte). */
void mu_quantize_row_fast(uint32_t type, const float *x, void *y, int n);

/* 1 when mu_quantize_row handles `type`, else 0. */
int mu_quantize_supported(uint32_t type);

#endif
