/* embed.c: what an embedding job returns, from the final-norm rows of its
 * prompt (mu_batch_item.embd).
 * Owns: llama.cpp's pooling types (none, mean, cls, last) and its server's
 * normalization of pooled rows (common_embd_normalize: -1 none, 0 max-abs
 * scaled to the int16 range, 2 Euclidean, other p > 0 a p-norm; sums in
 * double; per-token rows are never normalized).
 * Does not own: which rows are computed (sched.c asks the engine for them). */
#include "embed.h"

#include <math.h>
#include <string.h>

static void normalize(const float *x, float *y, int n, int norm) {
    double sum = 0.0;
    if (norm == -1) {
        sum = 1.0;
    } else if (norm == 0) {
        for (int i = 0; i < n; i++)
            if (sum < fabsf(x[i])) sum = fabsf(x[i]);
        sum /= 32760.0;
    } else if (norm == 2) {
        for (int i = 0; i < n; i++) sum += x[i] * x[i];
        sum = sqrt(sum);
    } else {
        for (int i = 0; i < n; i++) sum += pow(fabsf(x[i]), norm);
        sum = pow(sum, 1.0 / norm);
    }
    const float scale = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

int mu_embd_pool(const float *rows, int n, int dim, mu_embd_pooling p, int norm, float *out) {
    if (p == MU_EMBD_NONE) {
        memmove(out, rows, (size_t)n * (size_t)dim * sizeof(float));
        return n;
    }
    if (p == MU_EMBD_MEAN) {
        /* llama.cpp multiplies by a matrix of 1/n: each term is scaled first */
        const float w = 1.0f / (float)n;
        for (int d = 0; d < dim; d++) {
            float acc = 0.0f;
            for (int t = 0; t < n; t++) acc += rows[(size_t)t * dim + d] * w;
            out[d] = acc;
        }
        normalize(out, out, dim, norm);
        return 1;
    }
    const float *row = rows + (p == MU_EMBD_LAST ? (size_t)(n - 1) * dim : 0);
    normalize(row, out, dim, norm);
    return 1;
}
