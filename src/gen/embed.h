/* embed.h: pooling and normalization of embedding rows (embed.c). */
#ifndef MU_GEN_EMBED_H
#define MU_GEN_EMBED_H

#include "../../include/muser_gen.h"

/* Pools rows [n][dim] (final-norm hidden states of a prompt) into out:
 * [n][dim] for MU_EMBD_NONE (copied, not normalized, as llama.cpp's
 * server), else one row normalized by norm (llama.cpp's embd_normalize).
 * Returns the number of rows written. */
int mu_embd_pool(const float *rows, int n, int dim, mu_embd_pooling p, int norm, float *out);

#endif
