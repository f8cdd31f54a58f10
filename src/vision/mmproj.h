/* mmproj.h: a Muse Glimmer vision projector bound from its GGUF (llama.cpp's
 * mmproj layout). The public handle is mu_mmproj (include/muser.h); this is
 * its inside, for the encoder (vit.c) and the engine's image prompts. */
#ifndef MU_VISION_MMPROJ_H
#define MU_VISION_MMPROJ_H

#include <pthread.h>

#include "../../include/muser.h"
#include "../base/pool.h"
#include "../gguf/gguf.h"
#include "../gpu/gpu.h"

typedef struct {
    const mu_gguf_tensor *ln1_w, *ln1_b, *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
    const mu_gguf_tensor *ln2_w, *ln2_b, *up_w, *up_b, *down_w, *down_b; /* biases may be NULL */
} mu_vit_layer;

struct mu_mmproj {
    mu_gguf *g;
    mu_mmproj_info info;
    const mu_gguf_tensor *patch_w, *patch_b, *pos; /* conv kernel [ps][ps][3][E] (F16 or F32), bias, grid */
    const mu_gguf_tensor *pre_w, *pre_b, *post_w, *post_b; /* may be NULL (llama.cpp skips a missing norm) */
    mu_vit_layer *layers;
    const mu_gguf_tensor *mm[3];
    int mm_hidden;
    int sparse_factor;     /* 4: layer il is global iff (il + 1) % 4 == 0 or it is the last */
    float rope_base;       /* 10000 */
    /* the encoder's threads: its own pool (never the engine's, which the
     * scheduler's thread drives), made on first use; mu serializes images */
    pthread_mutex_t mu;
    mu_pool *pool;
    /* the encoder on CUDA (vit_gpu.c), made on first use under mu */
    mu_gpu_vit *gpu;
    int gpu_dev;
    mu_err gpu_err;      /* why it could not be made (code 0: not tried or made) */
    bool gpu_noticed;    /* the CPU fallback was announced (src/engine/mprompt.c) */
};

/* Locks p's encoder and returns its pool, made with n_threads threads on
 * first use (NULL and err set when that fails; p stays unlocked then). */
mu_pool *mu_mmproj_lock(mu_mmproj *p, int n_threads, mu_err *err);
void mu_mmproj_unlock(mu_mmproj *p);

/* The same as mu_mmproj_open over memory the caller keeps (fuzzing, tests);
 * the SHA-256 is of those bytes. */
int mu_mmproj_open_mem(const void *data, size_t n, const mu_model *m, mu_mmproj **out, mu_err *err);

#endif
