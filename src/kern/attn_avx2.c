/* attn_avx2.c: the attention and activation kernels of the AVX2 table
 * (stub: the ref's versions are used until this is written). */
#include "kern.h"

void mu_kern_fill_attn_avx2(mu_kern *k) { (void)k; }
