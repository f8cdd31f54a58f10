/* mem.h: checked size arithmetic and allocation helpers. */
#ifndef MU_BASE_MEM_H
#define MU_BASE_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Return false on overflow; *out is written only on success. */
static inline bool mu_mul_ok(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
static inline bool mu_add_ok(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

/* 64-byte aligned, zeroed; NULL on failure or overflow. Free with mu_free. */
void *mu_alloc(size_t n, size_t size);
void mu_free(void *p);

#endif
