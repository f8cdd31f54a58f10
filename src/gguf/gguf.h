/* gguf.h: read-only GGUF v3 files through a memory map.
 * Owns: parsing and validating the header, key/value metadata and tensor
 * infos; lookups by name. Does not interpret any key (src/model and the
 * tokenizer, src/tok, do).
 * Every length and offset is bounds-checked on open; after a successful open
 * all accessors are safe on the returned views, which live as long as the
 * mu_gguf handle. */
#ifndef MU_MODEL_GGUF_H
#define MU_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

enum {
    MU_GGUF_U8 = 0, MU_GGUF_I8 = 1, MU_GGUF_U16 = 2, MU_GGUF_I16 = 3,
    MU_GGUF_U32 = 4, MU_GGUF_I32 = 5, MU_GGUF_F32 = 6, MU_GGUF_BOOL = 7,
    MU_GGUF_STR = 8, MU_GGUF_ARR = 9, MU_GGUF_U64 = 10, MU_GGUF_I64 = 11,
    MU_GGUF_F64 = 12,
};

#define MU_GGUF_MAX_DIMS 4

typedef struct mu_gguf mu_gguf;

typedef struct {
    const char *name;   /* NUL-terminated copy owned by the handle */
    uint32_t type;      /* MU_T_* */
    int n_dims;
    int64_t ne[MU_GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    int64_t n_elems;
    const void *data;   /* view into the mapping */
    size_t bytes;
    uint64_t offset;    /* relative to the data section */
} mu_gguf_tensor;

typedef struct {
    uint32_t type;      /* element type (MU_GGUF_*) */
    uint64_t n;
    const uint8_t *data; /* first element (fixed-size types) */
    int kv;             /* owning key index, for string access */
} mu_gguf_arr;

/* Open and fully validate. On failure *out is untouched and err says why. */
int mu_gguf_open(const char *path, mu_gguf **out, mu_err *err);
/* Same over caller memory (fuzzing, tests); the buffer must outlive the handle. */
int mu_gguf_open_mem(const void *data, size_t n, mu_gguf **out, mu_err *err);
void mu_gguf_close(mu_gguf *g);

uint32_t mu_gguf_version(const mu_gguf *g);
size_t mu_gguf_file_bytes(const mu_gguf *g);
/* The whole mapped file (for hashing identity). */
const void *mu_gguf_bytes(const mu_gguf *g);

/* Metadata. Lookups are exact-name. */
int mu_gguf_n_kv(const mu_gguf *g);
const char *mu_gguf_kv_name(const mu_gguf *g, int i);
uint32_t mu_gguf_kv_type(const mu_gguf *g, int i);
int mu_gguf_find(const mu_gguf *g, const char *key); /* index or -1 */

/* Typed getters: MU_E_MODEL "missing key" when absent, MU_E_MODEL when the
 * stored type does not convert (integers accept any integer type in range). */
int mu_gguf_get_i64(const mu_gguf *g, const char *key, int64_t *out, mu_err *err);
int mu_gguf_get_f64(const mu_gguf *g, const char *key, double *out, mu_err *err);
/* A hyperparameter: an integer in [lo, hi], or a finite float; when not
 * required and absent, dflt. MU_E_MODEL naming the key otherwise. */
int mu_gguf_get_int_in(const mu_gguf *g, const char *key, bool required, int64_t dflt, int64_t lo, int64_t hi,
                       int *out, mu_err *err);
int mu_gguf_get_finite(const mu_gguf *g, const char *key, bool required, float dflt, float *out, mu_err *err);
int mu_gguf_get_bool(const mu_gguf *g, const char *key, bool *out, mu_err *err);
int mu_gguf_get_str(const mu_gguf *g, const char *key, const char **s, size_t *len, mu_err *err);
int mu_gguf_get_arr(const mu_gguf *g, const char *key, mu_gguf_arr *out, mu_err *err);
/* Element i of a string array (0 <= i < n): pointer into the map, not NUL-terminated. */
void mu_gguf_arr_str(const mu_gguf *g, const mu_gguf_arr *a, uint64_t i, const char **s, size_t *len);
/* Element i of a numeric array converted to int64 / double. */
int64_t mu_gguf_arr_i64(const mu_gguf_arr *a, uint64_t i);
double mu_gguf_arr_f64(const mu_gguf_arr *a, uint64_t i);

/* Bytes of one value of a fixed-size type (MU_GGUF_U8 .. F64 except STR
 * and ARR); 0 for any other type. */
size_t mu_gguf_scalar_bytes(uint32_t type);

/* Tensors. */
int mu_gguf_n_tensors(const mu_gguf *g);
const mu_gguf_tensor *mu_gguf_tensor_at(const mu_gguf *g, int i);
const mu_gguf_tensor *mu_gguf_find_tensor(const mu_gguf *g, const char *name);

#endif
