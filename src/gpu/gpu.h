/* gpu.h: the GPU boundary, in pure C: device discovery, opening a device,
 * buffers uploaded from the host. Only gpu_none.c implements it today
 * (CPU-only builds: no devices, every call that would need one answers
 * MU_E_UNSUPPORTED); the CUDA implementation (gpu_cuda.cu, to be the only
 * file that sees CUDA) is not written, and nothing calls this header yet.
 *
 * The intended split of work follows the engine's forward pass: a device
 * holds weights uploaded once (copies of the GGUF views, owned here, never
 * by the model) and the KV rows of the sessions it serves; the engine asks
 * it to run a chunk of tokens and reads back logits. Sessions' KV rows
 * would cross the boundary only as F16 rows (mu_session_kv_read/write). */
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
