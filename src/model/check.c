/* check.c: mu_model_check, weight validation as llama.cpp's --check-tensors
 * (ggml_validate_row_data): F32/F16/BF16 values and the block scales of the
 * quantized types must be finite.
 * Owns: the per-type rules and the parallel pass over the tensor data.
 * Does not: judge magnitudes (llama.cpp does not either). The scales of
 * the types muser reads but cannot run (Q4_0 .. Q3_K, Q8_K) are checked as
 * llama.cpp does, for a complete report. NVFP4 has nothing to check: its
 * UE4M3 scales decode to a finite value from every byte (kern.h
 * mu_nvfp4_scale), and llama.cpp accepts every block.
 * Design: the tensors are cut into chunks of whole blocks (about 4 MiB);
 * threads take chunks in file order from an atomic counter, and a chunk
 * after the earliest bad one found so far is skipped, so the error names
 * the first bad block of the file whatever the thread schedule. The calling
 * thread works too and reports progress between its chunks. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../base/esc.h"
#include "../base/pool.h"
#include "../kern/kern.h"
#include "../kern/quant.h"
#include "model.h"

#define CHUNK_BYTES ((size_t)4 << 20)

typedef struct {
    int tensor;        /* index in the GGUF */
    uint64_t b0, b1;   /* blocks [b0, b1) of the tensor (elements for F32/F16/BF16) */
} chunk;

typedef struct {
    const mu_gguf *g;
    chunk *chunks;
    int n_chunks;
    atomic_int next;
    atomic_int first_bad;      /* lowest bad chunk index, n_chunks when none */
    atomic_int stop;
    atomic_uint_least64_t done;
    /* the bad block of each chunk is found again by the reporter */
} job;

static int f16_bad(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return (h & 0x7c00) == 0x7c00;
}

/* Offsets of the f16 scales inside one block, per type; n_sc = 0 for the
 * float types (checked per element). */
static int scale_offsets(uint32_t type, int off[2]) {
    switch (type) {
    case MU_T_Q8_0: case MU_T_Q4_0: case MU_T_Q5_0: off[0] = 0; return 1; /* d */
    case MU_T_Q4_1: case MU_T_Q5_1: case MU_T_Q8_1: off[0] = 0, off[1] = 2; return 2; /* d, m (s) */
    case MU_T_Q4_K: case MU_T_Q5_K: off[0] = 0, off[1] = 2; return 2; /* d, dmin */
    case MU_T_Q2_K: off[0] = 80, off[1] = 82; return 2; /* scales[16] qs[64] d dmin */
    case MU_T_Q3_K: off[0] = 108; return 1;        /* hmask[32] qs[64] scales[12] d */
    case MU_T_Q6_K: off[0] = 208; return 1;        /* ql[128] qh[64] scales[16] d */
    default: return 0; /* NVFP4 too: every scale byte is finite */
    }
}

/* First bad unit in [b0, b1) of tensor t, or UINT64_MAX; *what names it. */
static uint64_t scan(const mu_gguf_tensor *t, uint64_t b0, uint64_t b1, const char **what) {
    const uint8_t *d = t->data;
    const mu_type_info *ti = mu_type_get(t->type);
    switch (t->type) {
    case MU_T_F32:
        for (uint64_t i = b0; i < b1; i++) {
            uint32_t u;
            memcpy(&u, d + 4 * i, 4);
            if ((u & 0x7f800000u) == 0x7f800000u) return *what = (u & 0x7fffffu) ? "nan" : "inf", i;
        }
        return UINT64_MAX;
    case MU_T_F16:
        for (uint64_t i = b0; i < b1; i++) {
            uint16_t h;
            memcpy(&h, d + 2 * i, 2);
            if ((h & 0x7c00) == 0x7c00) return *what = (h & 0x3ff) ? "nan" : "inf", i;
        }
        return UINT64_MAX;
    case MU_T_BF16:
        for (uint64_t i = b0; i < b1; i++) {
            uint16_t h;
            memcpy(&h, d + 2 * i, 2);
            if ((h & 0x7f80) == 0x7f80) return *what = (h & 0x7f) ? "nan" : "inf", i;
        }
        return UINT64_MAX;
    case MU_T_Q8_K: /* d is a float */
        for (uint64_t i = b0; i < b1; i++) {
            uint32_t u;
            memcpy(&u, d + i * (size_t)ti->type_bytes, 4);
            if ((u & 0x7f800000u) == 0x7f800000u) return *what = "d", i;
        }
        return UINT64_MAX;
    default: {
        int off[2];
        const int n_sc = scale_offsets(t->type, off);
        for (uint64_t i = b0; i < b1; i++)
            for (int s = 0; s < n_sc; s++)
                if (f16_bad(d + i * (size_t)ti->type_bytes + off[s])) {
                    *what = !s ? "d" : t->type == MU_T_Q8_1 ? "s" : (t->type == MU_T_Q4_1 || t->type == MU_T_Q5_1) ? "m" : "dmin";
                    return i;
                }
        return UINT64_MAX;
    }
    }
}

static int unit_bytes(uint32_t type) { return mu_type_get(type)->type_bytes; }
static uint64_t n_units(const mu_gguf_tensor *t) { return (uint64_t)t->n_elems / (uint64_t)mu_type_get(t->type)->blck; }

/* one worker: returns after the queue is empty or stop is set */
static void work(job *j, mu_check_progress_fn fn, void *user, uint64_t total, int *cancelled) {
    for (;;) {
        if (atomic_load(&j->stop)) return;
        const int c = atomic_fetch_add(&j->next, 1);
        if (c >= j->n_chunks) return;
        if (c > atomic_load(&j->first_bad)) continue;
        const chunk *ch = &j->chunks[c];
        const mu_gguf_tensor *t = mu_gguf_tensor_at(j->g, ch->tensor);
        const char *what;
        if (scan(t, ch->b0, ch->b1, &what) != UINT64_MAX) {
            int cur = atomic_load(&j->first_bad);
            while (c < cur && !atomic_compare_exchange_weak(&j->first_bad, &cur, c)) {}
        }
        const uint64_t done = atomic_fetch_add(&j->done, (ch->b1 - ch->b0) * (uint64_t)unit_bytes(t->type)) +
                              (ch->b1 - ch->b0) * (uint64_t)unit_bytes(t->type);
        if (fn && fn(user, done, total)) {
            *cancelled = 1;
            atomic_store(&j->stop, 1);
            return;
        }
    }
}

static void *thread_main(void *arg) {
    int ignored = 0;
    work(arg, NULL, NULL, 0, &ignored);
    return NULL;
}

int mu_model_check(const mu_model *m, int n_threads, mu_check_progress_fn fn, void *user, mu_err *err) {
    const mu_gguf *g = m->g;
    const int nt = mu_gguf_n_tensors(g);
    /* count chunks, then fill them */
    size_t n_chunks = 0;
    uint64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        chunk *chunks = NULL;
        if (pass) {
            chunks = malloc((n_chunks ? n_chunks : 1) * sizeof *chunks);
            if (!chunks) return mu_fail(err, MU_E_NOMEM, "model: out of memory for %zu check chunks", n_chunks);
        }
        size_t k = 0;
        for (int i = 0; i < nt; i++) {
            const mu_gguf_tensor *t = mu_gguf_tensor_at(g, i);
            const int ub = unit_bytes(t->type);
            if (ub == 0) continue;
            const uint64_t nu = n_units(t), per = CHUNK_BYTES / (size_t)ub ? CHUNK_BYTES / (size_t)ub : 1;
            if (!pass) total += nu * (uint64_t)ub;
            for (uint64_t b = 0; b < nu; b += per) {
                if (pass) chunks[k] = (chunk){i, b, b + per < nu ? b + per : nu};
                k++;
            }
        }
        if (!pass) {
            n_chunks = k;
            if (n_chunks > (size_t)INT32_MAX / 2) return mu_fail(err, MU_E_NOMEM, "model: %zu check chunks", n_chunks);
            continue;
        }
        job j = {.g = g, .chunks = chunks, .n_chunks = (int)n_chunks};
        atomic_init(&j.next, 0);
        atomic_init(&j.first_bad, (int)n_chunks);
        atomic_init(&j.stop, 0);
        atomic_init(&j.done, 0);
        if (n_threads <= 0) n_threads = mu_n_cpus();
        if (n_threads > 64) n_threads = 64;
        if ((size_t)n_threads > n_chunks) n_threads = n_chunks ? (int)n_chunks : 1;
        pthread_t th[64];
        int started = 0;
        for (int w = 1; w < n_threads; w++)
            if (!pthread_create(&th[started], NULL, thread_main, &j)) started++;
        int cancelled = 0;
        work(&j, fn, user, total, &cancelled);
        for (int w = 0; w < started; w++) pthread_join(th[w], NULL);
        const int bad = atomic_load(&j.first_bad);
        int rc = 0;
        if (cancelled) rc = mu_fail(err, MU_E_STATE, "model: weight check cancelled");
        else if (bad < (int)n_chunks) {
            const chunk *ch = &chunks[bad];
            const mu_gguf_tensor *t = mu_gguf_tensor_at(g, ch->tensor);
            const char *what = "";
            const uint64_t u = scan(t, ch->b0, ch->b1, &what);
            const mu_type_info *ti = mu_type_get(t->type);
            const uint64_t elem = u * (uint64_t)ti->blck;
            char name[96];
            mu_esc_str(name, sizeof name, t->name);
            if (ti->blck == 1)
                rc = mu_fail(err, MU_E_MODEL, "model: tensor '%s' (%s): value %llu (row %llu, column %llu) is not finite: %s",
                             name, ti->name, (unsigned long long)u, (unsigned long long)(elem / (uint64_t)t->ne[0]),
                             (unsigned long long)(elem % (uint64_t)t->ne[0]), what);
            else
                rc = mu_fail(err, MU_E_MODEL, "model: tensor '%s' (%s): block %llu (row %llu) has a non-finite scale %s",
                             name, ti->name, (unsigned long long)u, (unsigned long long)(elem / (uint64_t)t->ne[0]),
                             what);
        } else if (fn && fn(user, total, total))
            rc = mu_fail(err, MU_E_STATE, "model: weight check cancelled");
        free(chunks);
        return rc;
    }
    return 0;
}
