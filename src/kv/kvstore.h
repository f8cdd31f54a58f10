/* kvstore.h: files of pack directories: crash-safe publication, reading,
 * the muser home and the root key (kvstore.c). */
#ifndef MU_KV_KVSTORE_H
#define MU_KV_KVSTORE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

/* A pack directory being written: files go into a private partial
 * directory next to the destination (".<name>.partial-<pid>-<n>", 0700),
 * each written and fsynced; publish fsyncs it, swaps it into place with one
 * rename (RENAME_EXCHANGE when a previous pack is there), fsyncs the
 * parent, then removes the previous pack. kv_writer_put may run on several
 * threads at once (distinct names). */
typedef struct {
    char final[PATH_MAX], tmp[PATH_MAX], parent[PATH_MAX];
    int dfd; /* the partial directory */
} kv_writer;
int kv_writer_begin(kv_writer *w, const char *dir, mu_err *err);
int kv_writer_put(kv_writer *w, const char *name, const void *p, size_t n, mu_err *err);
int kv_writer_publish(kv_writer *w, mu_err *err);
/* Hard-links src_dir/name into the partial directory as `as` (a delta
 * pack carries its ancestors' files without copying them). */
int kv_writer_link(kv_writer *w, const char *src_dir, const char *name, const char *as, mu_err *err);
/* Removes the partial directory; fine after a failed or no publish. */
void kv_writer_abort(kv_writer *w);

/* Test hook: SIGKILL right after the n-th write, fsync, rename or unlink
 * of publications from now on (0: off). MUSER_TEST_KILL_AT sets it for
 * whole processes. */
void kv_test_kill_at(long n);

/* Reads the file name of directory dfd whole into *buf (capacity *cap,
 * reused and grown as needed; *n its length), at most max bytes. */
int kv_read_at(int dfd, const char *name, size_t max, uint8_t **buf, size_t *cap, size_t *n, mu_err *err);
/* Reads dir/name whole (malloc'ed), at most max bytes. */
int kv_read_file(const char *dir, const char *name, size_t max, uint8_t **out, size_t *n, mu_err *err);

#endif
