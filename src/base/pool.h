/* pool.h: a fixed thread pool for data-parallel loops with low
 * synchronization cost (workers spin briefly on a generation counter, then
 * sleep on a condition variable). The calling thread is worker 0. */
#ifndef MU_BASE_POOL_H
#define MU_BASE_POOL_H

#include "err.h"

typedef struct mu_pool mu_pool;
/* fn runs once on every thread: ith in [0, nth). */
typedef void (*mu_pool_fn)(void *arg, int ith, int nth);

int mu_pool_new(int n_threads, mu_pool **out, mu_err *err);
void mu_pool_free(mu_pool *p);
int mu_pool_size(const mu_pool *p);
/* Runs fn on all threads and returns when all are done. Not reentrant. */
void mu_pool_run(mu_pool *p, mu_pool_fn fn, void *arg);
/* Even split of [0, n) for thread ith of nth, aligned to `align` items. */
void mu_split(int n, int ith, int nth, int align, int *lo, int *hi);
/* The same split, with the slices rotated by `rot`: thread ith takes slice
 * (ith + nth - rot % nth) % nth. The slices that hold one block more are
 * the first n_blocks % nth ones, so the rotation decides which threads get
 * them; a caller that splits several arrays in turn and advances rot by
 * each one's n_blocks % nth (mu_split_rem) hands those extras round the
 * threads instead of always to the first ones. */
void mu_split_rot(int n, int ith, int nth, int align, int rot, int *lo, int *hi);
/* The number of slices of that split holding one block more. */
int mu_split_rem(int n, int nth, int align);
/* Online CPU count. */
int mu_n_cpus(void);

#endif
