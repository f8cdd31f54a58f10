/* attn_neon.c: the attention and activation kernels of the NEON table
 * (stub: the ref's versions are used until this is written). */
#include "kern.h"

void mu_kern_fill_attn_neon(mu_kern *k) { (void)k; }
