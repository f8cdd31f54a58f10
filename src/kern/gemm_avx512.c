/* gemm_avx512.c: AVX-512 matrix-matrix kernels for the types kern_avx512.c
 * has no gemm for (prefill).
 * Owns: those gemm entries of the AVX-512 table, in the rounding kern_ref.c
 * defines.
 * Does not: decide which rows take which path (forward.c does). */
#include "kern.h"

void mu_kern_fill_gemm_avx512(mu_kern *k) { (void)k; }
