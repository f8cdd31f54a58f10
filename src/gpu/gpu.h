/* gpu.h: the GPU boundary, in pure C. The engine sees only this header; one
 * implementation per build: gpu_cuda.cu (the only file that sees CUDA) or
 * gpu_none.c (CPU-only builds, every call answers MU_E_UNSUPPORTED).
 *
 * The split of work follows the engine's forward pass: a device holds
 * weights uploaded once (copies of the GGUF views, owned here, never by the
 * model) and the KV rows of the sessions it serves; the engine asks it to run
 * a chunk of tokens and reads back logits. Sessions' KV rows cross the
 * boundary only as F16 rows (mu_session_kv_read/write), which is also how
 * the two-node prefill lane hands KV over. */
#ifndef MU_GPU_GPU_H
#define MU_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

typedef struct {
    char name[128];
    int major, minor;       /* compute capability */
    size_t total_bytes, free_bytes;
} mu_gpu_info;

typedef struct mu_gpu mu_gpu;

/* Number of usable devices (0 in CPU-only builds or without a driver). */
int mu_gpu_count(void);
int mu_gpu_probe(int device, mu_gpu_info *info, mu_err *err);
/* Opens a device for inference. */
int mu_gpu_open(int device, mu_gpu **out, mu_err *err);
void mu_gpu_close(mu_gpu *g);
/* Device memory for a weight or cache buffer; copies n bytes from host. */
int mu_gpu_upload(mu_gpu *g, const void *host, size_t n, void **dev, mu_err *err);
void mu_gpu_release(mu_gpu *g, void *dev);
/* Name of this build's implementation ("none" or "cuda"). */
const char *mu_gpu_backend_name(void);

#endif
