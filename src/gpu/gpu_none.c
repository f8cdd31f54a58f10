/* gpu_none.c: the GPU boundary for CPU-only builds: no devices; every call
 * that would need one fails with MU_E_UNSUPPORTED and says so. */
#include "gpu.h"

int mu_gpu_count(void) { return 0; }

int mu_gpu_probe(int device, mu_gpu_info *info, mu_err *err) {
    (void)info;
    return mu_fail(err, MU_E_UNSUPPORTED, "gpu: device %d: this build has no GPU support (CPU only)", device);
}

int mu_gpu_open(int device, mu_gpu **out, mu_err *err) {
    (void)out;
    return mu_fail(err, MU_E_UNSUPPORTED, "gpu: device %d: this build has no GPU support (CPU only)", device);
}

void mu_gpu_close(mu_gpu *g) { (void)g; }

int mu_gpu_upload(mu_gpu *g, const void *host, size_t n, void **dev, mu_err *err) {
    (void)g; (void)host; (void)dev;
    return mu_fail(err, MU_E_UNSUPPORTED, "gpu: cannot upload %zu bytes: no GPU support in this build", n);
}

void mu_gpu_release(mu_gpu *g, void *dev) { (void)g; (void)dev; }

const char *mu_gpu_backend_name(void) { return "none"; }
