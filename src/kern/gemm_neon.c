/* gemm_neon.c: the NEON table's matrix-matrix kernels (prefill).
 * Owns: gemm entries and the batch-path dots (vec_dot_batch) of the NEON
 * table, in the rounding kern_ref.c defines.
 * Does not: decide which rows take which path (forward.c does). */
#include "kern.h"

void mu_kern_fill_gemm_neon(mu_kern *k) { (void)k; }
