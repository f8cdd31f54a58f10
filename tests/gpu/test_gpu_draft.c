/* test_gpu_draft.c: the DFlash drafter on the device (gpu_cuda_draft.cu)
 * against the CPU drafter (src/engine/draft.c) for target argv[1] and
 * drafter argv[2]: tests/unit/draft_compare.h's cases (injections in
 * pieces, truncation, a shorter draft, absent positions) at tolerance
 * argv[3] (default 1e-2; 5e-2 for Q8_0 drafters, as draft_compare.h says).
 * The unit tier runs the same cases on the fake plugin's emulation of the
 * device drafter (test_gpu_fake.c); this runs the CUDA code itself.
 * Exits 77 (skip) without a CUDA device. */
#include <stdio.h>
#include <stdlib.h>

#include "../../include/muser.h"
#include "../unit/draft_compare.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_gpu_draft TARGET.gguf DRAFTER.gguf [TOLERANCE]\n");
        return 2;
    }
    mu_gpu_device dev;
    if (mu_gpu_devices(&dev, 1) == 0) {
        printf("skip: %s\n", mu_gpu_devices_why());
        return 77;
    }
    mu_err err = {0};
    mu_model *m = NULL;
    mu_engine *ec = NULL, *eg = NULL;
    mu_engine_opts oc = {.backend = "cpu"}, og = {.backend = "cuda"};
    draft_cmp c;
    int rc = mu_model_open(argv[1], &m, &err);
    if (!rc) rc = mu_engine_new(m, &oc, &ec, &err);
    if (!rc) rc = mu_engine_new(m, &og, &eg, &err);
    if (!rc) rc = draft_compare(ec, eg, argv[2], argc > 3 ? atof(argv[3]) : 1e-2, &c, &err);
    if (rc) printf("FAIL %s: %s\n", argv[2], err.msg);
    mu_engine_free(ec);
    mu_engine_free(eg);
    mu_model_close(m);
    return rc || c.fails ? 1 : 0;
}
