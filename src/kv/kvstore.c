/* kvstore.c: pack directories on disk: crash-safe publication (private
 * partial directory, fsync of every file and of the directory, one atomic
 * rename into place, fsync of the parent), whole-file reads, the muser home
 * and the root key file.
 * Does not own: what the files contain (kvobj.c, kvengine.c).
 * Design: a torn or killed writer never replaces the last good generation:
 * until the rename nothing is visible under the destination name, and the
 * rename (or RENAME_EXCHANGE with the previous pack) is atomic. Leftover
 * partials of writers that died are removed by the next writer of the same
 * destination.
 * Test hook: MUSER_TEST_KILL_AT=N raises SIGKILL right after the N-th
 * write, fsync, rename or unlink of a publication (counted, not timed). */
#include "kvstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../include/muser_kv.h"
#include "kvpack.h"

/* ---- the kill hook ----------------------------------------------------- */

static long kill_at = -1;
static atomic_long n_ops; /* writers of one pack run on several threads */

void kv_test_kill_at(long n) {
    kill_at = n;
    atomic_store(&n_ops, 0);
}

static void kill_init(void) {
    if (kill_at < 0) {
        const char *e = getenv("MUSER_TEST_KILL_AT");
        kill_at = e && *e ? atol(e) : 0;
    }
}

/* (kv_writer_begin set kill_at on the writer's thread before any worker runs) */
static void op_done(void) {
    kill_init();
    if (kill_at > 0 && atomic_fetch_add(&n_ops, 1) + 1 == kill_at) raise(SIGKILL);
}

/* ---- paths ------------------------------------------------------------- */

static int split(const char *dir, char *parent, size_t cap, const char **base, mu_err *err) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    if (n == 0 || n >= cap) return mu_fail(err, MU_E_ARG, "kvpack: bad pack directory name: %s", dir);
    memcpy(parent, dir, n);
    parent[n] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash) {
        *base = dir;
        memmove(parent + 2, parent, n + 1);
        parent[0] = '.';
        parent[1] = 0;
        *base = parent + 2;
    } else if (slash == parent) {
        memmove(parent + 2, slash + 1, strlen(slash + 1) + 1);
        parent[0] = '/';
        parent[1] = 0;
        *base = parent + 2;
    } else {
        *slash = 0;
        *base = slash + 1;
    }
    if (!**base || !strcmp(*base, ".") || !strcmp(*base, ".."))
        return mu_fail(err, MU_E_ARG, "kvpack: bad pack directory name: %s", dir);
    return 0;
}

static void rm_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[PATH_MAX];
            if (snprintf(p, sizeof p, "%s/%s", path, e->d_name) < (int)sizeof p) unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

static int fsync_dir(const char *path, mu_err *err) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return mu_fail(err, MU_E_IO, "kvpack: cannot open directory %s: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    op_done();
    if (rc) return mu_fail(err, MU_E_IO, "kvpack: fsync %s: %s", path, strerror(e));
    return 0;
}

/* ---- the writer -------------------------------------------------------- */

int kv_writer_begin(kv_writer *w, const char *dir, mu_err *err) {
    kill_init();
    memset(w, 0, sizeof *w);
    w->dfd = -1;
    const char *base = NULL;
    int rc = split(dir, w->parent, sizeof w->parent, &base, err);
    if (rc) return rc;
    if ((size_t)snprintf(w->final, sizeof w->final, "%s/%s", w->parent, base) >= sizeof w->final)
        return mu_fail(err, MU_E_ARG, "kvpack: pack directory name too long");
    /* partials of dead writers of this destination */
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, ".%s.partial-", base);
    DIR *d = opendir(w->parent);
    if (!d) return mu_fail(err, MU_E_IO, "kvpack: cannot open directory %s: %s", w->parent, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t pl = strlen(prefix);
        if (strncmp(e->d_name, prefix, pl)) continue;
        long pid = atol(e->d_name + pl);
        if (pid > 0 && kill((pid_t)pid, 0) && errno == ESRCH) {
            char p[PATH_MAX];
            if (snprintf(p, sizeof p, "%s/%s", w->parent, e->d_name) < (int)sizeof p) rm_tree(p);
        }
    }
    closedir(d);
    for (int i = 0; i < 100; i++) {
        if ((size_t)snprintf(w->tmp, sizeof w->tmp, "%s/%s%ld-%d", w->parent, prefix, (long)getpid(), i) >=
            sizeof w->tmp)
            return mu_fail(err, MU_E_ARG, "kvpack: pack directory name too long");
        if (!mkdir(w->tmp, 0700)) {
            w->dfd = open(w->tmp, O_RDONLY | O_DIRECTORY);
            if (w->dfd < 0) {
                rc = mu_fail(err, MU_E_IO, "kvpack: cannot open %s: %s", w->tmp, strerror(errno));
                rmdir(w->tmp);
                w->tmp[0] = 0;
                return rc;
            }
            return 0;
        }
        if (errno != EEXIST) return mu_fail(err, MU_E_IO, "kvpack: cannot create %s: %s", w->tmp, strerror(errno));
    }
    return mu_fail(err, MU_E_IO, "kvpack: cannot create a partial directory next to %s", w->final);
}

int kv_writer_put(kv_writer *w, const char *name, const void *p, size_t n, mu_err *err) {
    int fd = openat(w->dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return mu_fail(err, MU_E_IO, "kvpack: cannot create %s/%s: %s", w->tmp, name, strerror(errno));
    const uint8_t *q = p;
    size_t left = n;
    while (left) {
        size_t piece = left < (1u << 20) ? left : (1u << 20);
        ssize_t k = write(fd, q, piece);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : ENOSPC;
            close(fd);
            return mu_fail(err, MU_E_IO, "kvpack: write %s/%s: %s", w->tmp, name, strerror(e));
        }
        op_done();
        q += k;
        left -= (size_t)k;
    }
    if (fsync(fd)) {
        int e = errno;
        close(fd);
        return mu_fail(err, MU_E_IO, "kvpack: fsync %s/%s: %s", w->tmp, name, strerror(e));
    }
    op_done();
    if (close(fd)) return mu_fail(err, MU_E_IO, "kvpack: close %s/%s: %s", w->tmp, name, strerror(errno));
    return 0;
}

/* A destination that exists must be a pack directory (or empty): never
 * swap away someone's unrelated directory. */
static int replaceable(const char *path, mu_err *err) {
    DIR *d = opendir(path);
    if (!d) return mu_fail(err, MU_E_IO, "kvpack: %s exists and is not a directory", path);
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) && !rc) {
        const char *n = e->d_name;
        size_t l = strlen(n);
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "manifest.kvpk") || !strcmp(n, "tokens.kvtok")) continue;
        if (l == 13 && !strncmp(n, "parent-", 7) && n[7] >= '1' && n[7] <= '7' && !strcmp(n + 8, ".kvpk")) continue;
        if (l == 64 + 6 && !strcmp(n + 64, ".kvchk")) continue;
        rc = mu_fail(err, MU_E_ARG, "kvpack: %s exists and is not a pack directory (it holds %s)", path, n);
    }
    closedir(d);
    return rc;
}

int kv_writer_publish(kv_writer *w, mu_err *err) {
    int rc = fsync_dir(w->tmp, err);
    if (rc) return rc;
    close(w->dfd);
    w->dfd = -1;
    struct stat st;
    if (!lstat(w->final, &st)) {
        if ((rc = replaceable(w->final, err))) return rc;
        if (renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->final, RENAME_EXCHANGE))
            return mu_fail(err, MU_E_IO, "kvpack: cannot swap %s into place: %s", w->final, strerror(errno));
        op_done();
        /* the previous generation is at tmp now */
        if ((rc = fsync_dir(w->parent, err))) return rc;
        rm_tree(w->tmp);
        op_done();
    } else {
        if (rename(w->tmp, w->final))
            return mu_fail(err, MU_E_IO, "kvpack: cannot publish %s: %s", w->final, strerror(errno));
        op_done();
        if ((rc = fsync_dir(w->parent, err))) return rc;
    }
    w->tmp[0] = 0;
    return 0;
}

int kv_writer_link(kv_writer *w, const char *src_dir, const char *name, const char *as, mu_err *err) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", src_dir, name) >= sizeof path)
        return mu_fail(err, MU_E_ARG, "kvpack: path too long: %s", src_dir);
    if (linkat(AT_FDCWD, path, w->dfd, as, 0))
        return mu_fail(err, MU_E_IO, "kvpack: cannot link %s into %s: %s", path, w->tmp, strerror(errno));
    op_done();
    return 0;
}

void kv_writer_abort(kv_writer *w) {
    if (w->dfd >= 0) close(w->dfd);
    w->dfd = -1;
    if (w->tmp[0]) rm_tree(w->tmp);
    w->tmp[0] = 0;
}

int kv_read_file(const char *dir, const char *name, size_t max, uint8_t **out, size_t *n, mu_err *err) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return mu_fail(err, MU_E_ARG, "kvpack: path too long: %s", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mu_fail(err, MU_E_IO, "kvpack: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return mu_fail(err, MU_E_IO, "kvpack: %s is not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return kv_fail(err, KV_BOUNDS, "%s has %lld bytes, more than any valid object", name, (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    uint8_t *p = malloc(len ? len : 1);
    if (!p) {
        close(fd);
        return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory reading %s", path);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, p + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got != len) {
        free(p);
        return mu_fail(err, MU_E_IO, "kvpack: short read of %s", path);
    }
    *out = p;
    *n = len;
    return 0;
}

int kv_read_at(int dfd, const char *name, size_t max, uint8_t **buf, size_t *cap, size_t *n, mu_err *err) {
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mu_fail(err, MU_E_IO, "kvpack: cannot open %s: %s", name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return mu_fail(err, MU_E_IO, "kvpack: %s is not a regular file", name);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return kv_fail(err, KV_BOUNDS, "%s has %lld bytes, more than any valid object", name, (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    if (*cap < len || !*buf) {
        uint8_t *p = realloc(*buf, len ? len : 1);
        if (!p) {
            close(fd);
            return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory reading %s", name);
        }
        *buf = p;
        *cap = len ? len : 1;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, *buf + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got != len) return mu_fail(err, MU_E_IO, "kvpack: short read of %s", name);
    *n = len;
    return 0;
}

/* ---- the muser home and the root key ---------------------------------- */

int mu_kv_home(char *out, size_t cap, bool create, mu_err *err) {
    const char *h = getenv("MUSER_HOME");
    int n;
    if (h && *h) n = snprintf(out, cap, "%s", h);
    else {
        const char *home = getenv("HOME");
        if (!home || !*home) return mu_fail(err, MU_E_ARG, "kvpack: neither MUSER_HOME nor HOME is set");
        n = snprintf(out, cap, "%s/.muser", home);
    }
    if (n < 0 || (size_t)n >= cap) return mu_fail(err, MU_E_ARG, "kvpack: the muser home path is too long");
    if (create && mkdir(out, 0700) && errno != EEXIST)
        return mu_fail(err, MU_E_IO, "kvpack: cannot create the muser home %s: %s", out, strerror(errno));
    return 0;
}

void mu_kv_key_wipe(uint8_t key[32]) {
    volatile uint8_t *p = key;
    for (int i = 0; i < 32; i++) p[i] = 0;
}

static int key_read(const char *path, uint8_t key[32], mu_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mu_fail(err, MU_E_IO, "kvpack: cannot open key file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size != 32) {
        close(fd);
        return mu_fail(err, MU_E_ARG, "kvpack: key file %s must hold exactly 32 bytes", path);
    }
    if (st.st_mode & 077) {
        close(fd);
        return mu_fail(err, MU_E_ARG, "kvpack: key file %s is readable by others (mode %03o; chmod 600)", path,
                       (unsigned)(st.st_mode & 0777));
    }
    ssize_t k = read(fd, key, 32);
    close(fd);
    if (k != 32) return mu_fail(err, MU_E_IO, "kvpack: cannot read key file %s", path);
    return 0;
}

int mu_kv_root_key(const char *key_file, uint8_t key[32], mu_err *err) {
    if (key_file) return key_read(key_file, key, err);
    char home[PATH_MAX - 32], path[PATH_MAX];
    int rc = mu_kv_home(home, sizeof home, true, err);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/kvpack.key", home);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        uint8_t k[32];
        int rfd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        ssize_t got = rfd >= 0 ? read(rfd, k, 32) : -1;
        if (rfd >= 0) close(rfd);
        bool ok = got == 32 && write(fd, k, 32) == 32 && !fsync(fd);
        close(fd);
        mu_kv_key_wipe(k);
        if (!ok) {
            unlink(path);
            return mu_fail(err, MU_E_IO, "kvpack: cannot create key file %s", path);
        }
        fsync_dir(home, NULL);
    } else if (errno != EEXIST) {
        return mu_fail(err, MU_E_IO, "kvpack: cannot create key file %s: %s", path, strerror(errno));
    }
    return key_read(path, key, err);
}

/* ---- the store ------------------------------------------------------------ */

int mu_kv_store_default(char *out, size_t cap, bool create, mu_err *err) {
    char home[PATH_MAX - 16];
    int rc = mu_kv_home(home, sizeof home, create, err);
    if (rc) return rc;
    if ((size_t)snprintf(out, cap, "%s/packs", home) >= cap) return mu_fail(err, MU_E_ARG, "kvpack: path too long");
    if (create && mkdir(out, 0700) && errno != EEXIST)
        return mu_fail(err, MU_E_IO, "kvpack: cannot create the pack store %s: %s", out, strerror(errno));
    return 0;
}

typedef struct {
    char name[256];
    uint64_t bytes;
    int64_t mtime;
} gc_pack;

static int gc_cmp(const void *a, const void *b) {
    const gc_pack *x = a, *y = b;
    if (x->mtime != y->mtime) return x->mtime < y->mtime ? -1 : 1;
    return strcmp(x->name, y->name);
}

static uint64_t dir_bytes(const char *path) {
    DIR *d = opendir(path);
    if (!d) return 0;
    uint64_t sum = 0;
    struct dirent *de;
    struct stat st;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && !fstatat(dirfd(d), de->d_name, &st, 0) && S_ISREG(st.st_mode))
            sum += (uint64_t)st.st_size;
    closedir(d);
    return sum;
}

int mu_kv_store_gc(const char *dir, uint64_t max_bytes, bool dry_run, mu_kv_gc_report *rep, mu_err *err) {
    return mu_kv_store_gc_keep(dir, max_bytes, NULL, dry_run, rep, err);
}

int mu_kv_store_gc_keep(const char *dir, uint64_t max_bytes, const char *keep, bool dry_run, mu_kv_gc_report *rep,
                        mu_err *err) {
    memset(rep, 0, sizeof *rep);
    DIR *d = opendir(dir);
    if (!d) return mu_fail(err, MU_E_IO, "kvpack: cannot open the pack store %s: %s", dir, strerror(errno));
    gc_pack *packs = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    char path[PATH_MAX];
    int rc = 0;
    while ((de = readdir(d))) {
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        struct stat st;
        if (lstat(path, &st) || !S_ISDIR(st.st_mode)) continue;
        if (de->d_name[0] == '.') {
            /* a partial of a writer that is gone, or a removal that did not finish */
            const char *pp = strstr(de->d_name, ".partial-"), *gp = strstr(de->d_name, ".gc-");
            long pid = pp ? atol(pp + 9) : gp ? atol(gp + 4) : 0;
            if (pid > 0 && kill((pid_t)pid, 0) && errno == ESRCH) {
                rep->n_partials++;
                if (!dry_run) rm_tree(path);
            }
            continue;
        }
        char man[PATH_MAX + 16];
        snprintf(man, sizeof man, "%s/manifest.kvpk", path);
        if (access(man, F_OK) || strlen(de->d_name) >= sizeof packs[0].name) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            gc_pack *np = realloc(packs, (size_t)cap * sizeof *np);
            if (!np) {
                rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
                break;
            }
            packs = np;
        }
        strcpy(packs[n].name, de->d_name);
        packs[n].mtime = (int64_t)st.st_mtime;
        packs[n].bytes = dir_bytes(path);
        rep->bytes += packs[n].bytes;
        n++;
    }
    closedir(d);
    rep->n_packs = n;
    if (!rc && n) qsort(packs, (size_t)n, sizeof *packs, gc_cmp);
    uint64_t left = rep->bytes;
    static atomic_int seq;
    for (int i = 0; !rc && i < n && left > max_bytes; i++) {
        if (keep && !strcmp(packs[i].name, keep)) continue;
        left -= packs[i].bytes;
        rep->n_removed++;
        rep->bytes_removed += packs[i].bytes;
        if (dry_run) continue;
        char from[PATH_MAX], to[PATH_MAX];
        snprintf(from, sizeof from, "%s/%s", dir, packs[i].name);
        if (snprintf(to, sizeof to, "%s/.%s.gc-%ld-%d", dir, packs[i].name, (long)getpid(), atomic_fetch_add(&seq, 1)) >= (int)sizeof to)
            continue;
        /* one rename takes it out of sight; then its files go */
        if (rename(from, to)) {
            if (errno == ENOENT) continue; /* another gc took it first */
            rc = mu_fail(err, MU_E_IO, "kvpack: cannot remove %s: %s", from, strerror(errno));
            break;
        }
        rm_tree(to);
    }
    free(packs);
    return rc;
}

int mu_kv_pack_remove(const char *dir, mu_err *err) {
    char parent[PATH_MAX], to[PATH_MAX];
    const char *base;
    int rc = split(dir, parent, sizeof parent, &base, err);
    if (rc) return rc;
    static atomic_int seq;
    if (snprintf(to, sizeof to, "%s/.%s.gc-%ld-r%d", parent, base, (long)getpid(), atomic_fetch_add(&seq, 1)) >=
        (int)sizeof to)
        return mu_fail(err, MU_E_ARG, "kvpack: pack directory name too long: %s", dir);
    /* one rename takes it out of sight (a reader opens a whole pack or none); then its files go */
    if (rename(dir, to)) {
        if (errno == ENOENT) return 0;
        return mu_fail(err, MU_E_IO, "kvpack: cannot remove %s: %s", dir, strerror(errno));
    }
    rm_tree(to);
    return fsync_dir(parent, err);
}
