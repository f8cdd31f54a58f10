/* pool.c: the data-parallel thread pool.
 * Owns: worker threads, the start/finish handshake. Design: a generation
 * counter announces work; workers spin for a short while (decode steps come
 * back-to-back within microseconds) and then block on a condition variable
 * so an idle server costs no CPU. Completion is an atomic countdown the
 * caller spins on. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ITERS 200000
#define YIELD_AFTER 20000

struct mu_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;
    atomic_int pending;
    atomic_int stop;
    mu_pool_fn fn;
    void *arg;
};

typedef struct {
    mu_pool *p;
    int ith;
} worker_arg;

static void *worker(void *va) {
    worker_arg wa = *(worker_arg *)va;
    free(va);
    mu_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                if (spins < YIELD_AFTER) {
#if defined(__x86_64__)
                    __builtin_ia32_pause();
#endif
                } else {
                    sched_yield();
                }
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->arg, wa.ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

int mu_n_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

int mu_pool_new(int n_threads, mu_pool **out, mu_err *err) {
    if (n_threads <= 0) n_threads = mu_n_cpus();
    if (n_threads > 512) return mu_fail(err, MU_E_ARG, "pool: too many threads: %d", n_threads);
    mu_pool *p = calloc(1, sizeof *p);
    if (!p) return mu_fail(err, MU_E_NOMEM, "pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return mu_fail(err, MU_E_NOMEM, "pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i; /* only threads 1..i-1 exist */
            mu_pool_free(p);
            return mu_fail(err, MU_E_NOMEM, "pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return 0;
}

void mu_pool_free(mu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int mu_pool_size(const mu_pool *p) { return p->n; }

void mu_pool_run(mu_pool *p, mu_pool_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    /* spin while the others are likely running; yield once they seem
     * descheduled (a loaded machine), so we do not steal their core */
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < YIELD_AFTER) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
}

void mu_split(int n, int ith, int nth, int align, int *lo, int *hi) {
    if (align < 1) align = 1;
    int blocks = (n + align - 1) / align;
    int per = blocks / nth, rem = blocks % nth;
    int b0 = ith * per + (ith < rem ? ith : rem);
    int b1 = b0 + per + (ith < rem ? 1 : 0);
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

void mu_split_rot(int n, int ith, int nth, int align, int rot, int *lo, int *hi) {
    rot %= nth;
    mu_split(n, (ith + nth - rot) % nth, nth, align, lo, hi);
}

int mu_split_rem(int n, int nth, int align) {
    if (align < 1) align = 1;
    return (n + align - 1) / align % nth;
}
