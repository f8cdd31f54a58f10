/* gguf_write.h: write GGUF v3 files (the counterpart of gguf.h).
 * Owns: serializing metadata (every GGUF value type, arrays included), tensor
 * infos with 32-byte aligned offsets, and streaming tensor data to disk with
 * large buffered writes. Knows nothing about any model (synth.c decides the
 * keys and tensors).
 *
 * Use: new -> set_* / add_tensor (any order; keys and tensors keep their
 * insertion order) -> open(path) -> write(...) the bytes of every tensor in
 * order (padding between tensors is inserted automatically) -> close.
 * The file is written to "<path>.tmp" and renamed to <path> only by a
 * successful close; free() without close removes the temporary file, so a
 * failure never leaves a half-written <path>. */
#ifndef MU_MODEL_GGUF_WRITE_H
#define MU_MODEL_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

#define MU_GGUF_ALIGN 32

typedef struct mu_gguf_writer mu_gguf_writer;

int mu_gguf_writer_new(mu_gguf_writer **out, mu_err *err);
/* Accepts NULL; removes the temporary file when close did not succeed. */
void mu_gguf_writer_free(mu_gguf_writer *w);

/* Metadata. Duplicate keys are MU_E_ARG. Strings are copied. */
int mu_gguf_writer_set_u32(mu_gguf_writer *w, const char *key, uint32_t v, mu_err *err);
int mu_gguf_writer_set_i32(mu_gguf_writer *w, const char *key, int32_t v, mu_err *err);
int mu_gguf_writer_set_u64(mu_gguf_writer *w, const char *key, uint64_t v, mu_err *err);
int mu_gguf_writer_set_f32(mu_gguf_writer *w, const char *key, float v, mu_err *err);
int mu_gguf_writer_set_f64(mu_gguf_writer *w, const char *key, double v, mu_err *err);
int mu_gguf_writer_set_bool(mu_gguf_writer *w, const char *key, bool v, mu_err *err);
int mu_gguf_writer_set_str(mu_gguf_writer *w, const char *key, const char *s, size_t len, mu_err *err);
/* Array of a fixed-size element type (MU_GGUF_U8 .. MU_GGUF_F64 except STR
 * and ARR): n elements in host (little-endian) layout; BOOL elements are one
 * byte each (0 or 1). */
int mu_gguf_writer_set_arr(mu_gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                           uint64_t n, mu_err *err);
/* Array of strings: s[i] has lens[i] bytes (lens NULL: NUL-terminated). */
int mu_gguf_writer_set_arr_str(mu_gguf_writer *w, const char *key, const char *const *s,
                               const size_t *lens, uint64_t n, mu_err *err);

/* Tensor info: ne[0] is the contiguous dimension; type is a MU_T_* id whose
 * block size divides ne[0]. */
int mu_gguf_writer_add_tensor(mu_gguf_writer *w, const char *name, uint32_t type, int n_dims,
                              const int64_t *ne, mu_err *err);
/* Bytes of tensor i's data (after add_tensor). */
uint64_t mu_gguf_writer_tensor_bytes(const mu_gguf_writer *w, int i);
/* Total file size once complete (valid after the last add_tensor). */
uint64_t mu_gguf_writer_file_bytes(const mu_gguf_writer *w);

/* Creates "<path>.tmp" and writes header, metadata, tensor infos. */
int mu_gguf_writer_open(mu_gguf_writer *w, const char *path, mu_err *err);
/* Appends n bytes of tensor data (may span tensors; never more than declared). */
int mu_gguf_writer_write(mu_gguf_writer *w, const void *data, size_t n, mu_err *err);
/* Checks every declared byte was written, flushes, renames to path. */
int mu_gguf_writer_close(mu_gguf_writer *w, mu_err *err);

#endif
