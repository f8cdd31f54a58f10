/* mem.c: aligned zeroed allocation with overflow-checked sizes. */
#include "mem.h"

#include <stdlib.h>
#include <string.h>

void *mu_alloc(size_t n, size_t size) {
    size_t bytes;
    if (!mu_mul_ok(n, size, &bytes)) return NULL;
    if (bytes == 0) bytes = 1;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) return NULL;
    void *p = aligned_alloc(64, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

void mu_free(void *p) { free(p); }
