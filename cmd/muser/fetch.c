/* fetch.c: getting a model file for `muser up` (fetch.h, docs/up.md).
 * Owns: the resumable download (libcurl; one connection at a time, HTTP Range
 * from the partial file's size), the progress display, SHA-256 (OpenSSL EVP)
 * of whole files, the verification stamp, and the one-line errors: wrong
 * hash, short file, server without Range support, full disk.
 * Does not own: choosing the model or the URLs (up.c, catalog.c).
 * Design: a partial download (DEST.part) is only ever appended to and is
 * hashed in full before it is renamed to DEST, so nothing unverified is ever
 * opened as a model; a dropped connection resumes at the partial's size. */
#include "fetch.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../../src/base/esc.h"
#include "cli.h"

/* ---- progress ---------------------------------------------------------- */

typedef struct {
    char what[160];      /* escaped: it may be a file name */
    const char *verb;
    bool tty, lines;     /* lines: a plain line per 10 % when not a terminal */
    bool drawn;          /* a bar is on the terminal's current line */
    uint64_t base;       /* bytes already there when this run started */
    double t0, t_draw;
    int decile;
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *human(uint64_t b, char *buf, size_t cap) {
    if (b >= 1000000000ull) snprintf(buf, cap, "%.2f GB", b / 1e9);
    else if (b >= 1000000ull) snprintf(buf, cap, "%.1f MB", b / 1e6);
    else if (b >= 1000ull) snprintf(buf, cap, "%.1f kB", b / 1e3);
    else snprintf(buf, cap, "%" PRIu64 " B", b);
    return buf;
}

/* Ends a bar left on the terminal's line, so a message starts on its own. */
static void progress_end_line(progress *p) {
    if (p->tty && p->drawn) fputc('\n', stderr);
    p->drawn = false;
}

static void progress_init(progress *p, const char *what, const char *verb, uint64_t base, bool lines) {
    *p = (progress){.verb = verb, .tty = isatty(2) == 1, .lines = lines, .base = base, .t0 = now_s()};
    mu_esc(p->what, sizeof p->what, what, strlen(what));
    p->decile = -1;
}

/* done of total (total 0: unknown). final: the last call. */
static void progress_show(progress *p, uint64_t done, uint64_t total, bool final) {
    double t = now_s(), dt = t - p->t0;
    double rate = dt > 0 ? (double)(done - p->base) / dt : 0;
    char a[32], b[32], r[32];
    if (p->tty) {
        if (!final && t - p->t_draw < 0.1) return;
        p->t_draw = t;
        char eta[32] = "";
        if (total && rate > 0 && done < total) {
            long s = (long)((total - done) / rate);
            snprintf(eta, sizeof eta, "  ETA %ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
        }
        int width = 24, fill = total ? (int)(width * (double)done / total) : 0;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r\033[K%s %s [%s] %s / %s  %5.1f%%  %s/s%s", p->verb, p->what, bar, human(done, a, sizeof a),
                total ? human(total, b, sizeof b) : "?", total ? 100.0 * done / total : 0.0, human((uint64_t)rate, r, sizeof r),
                eta);
        p->drawn = !final;
        if (final) fputc('\n', stderr);
        return;
    }
    if (!p->lines || !total) return;
    int d = (int)(10 * (double)done / total);
    if (d <= p->decile || (d < 10 && final)) return;
    p->decile = d;
    fprintf(stderr, "muser up: %s %s: %d%% (%s of %s, %s/s)\n", p->verb, p->what, d * 10, human(done, a, sizeof a),
            human(total, b, sizeof b), human((uint64_t)rate, r, sizeof r));
}

/* ---- hashing ----------------------------------------------------------- */

static void hex_of(const unsigned char *d, char hex[65]) {
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

int fetch_sha256_file(const char *path, const char *what, char hex[65]) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cli_fail("muser up: %s: cannot open %s: %s", what, path, strerror(errno));
    struct stat st;
    uint64_t total = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!ctx || !buf || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        free(buf);
        close(fd);
        return cli_fail("muser up: %s: cannot start SHA-256 (out of memory)", what);
    }
    progress p;
    bool big = total > (256ull << 20);
    progress_init(&p, what, "verifying", 0, big);
    if (!big) p.tty = false;
    uint64_t done = 0;
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            EVP_MD_CTX_free(ctx);
            free(buf);
            close(fd);
            return cli_fail("muser up: %s: cannot read %s: %s", what, path, strerror(e));
        }
        if (n == 0) break;
        EVP_DigestUpdate(ctx, buf, (size_t)n);
        done += (uint64_t)n;
        progress_show(&p, done, total, false);
    }
    progress_show(&p, done, total, true);
    unsigned char md[32];
    unsigned int mdn = 0;
    EVP_DigestFinal_ex(ctx, md, &mdn);
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    hex_of(md, hex);
    return 0;
}

/* ---- the verification stamp -------------------------------------------- */

/* DEST.sha256: "sha256 HEX bytes N mtime S.NS": a file whose size and mtime
 * still match was hashed before and is not hashed again. */
static void stamp_path(const char *dest, char *out, size_t cap) { snprintf(out, cap, "%s.sha256", dest); }

static bool stamp_ok(const char *dest, const char *sha) {
    char sp[PATH_MAX + 16], line[256], hex[80];
    stamp_path(dest, sp, sizeof sp);
    struct stat st;
    if (stat(dest, &st)) return false;
    FILE *f = fopen(sp, "r");
    if (!f) return false;
    bool ok = false;
    unsigned long long bytes, sec, nsec;
    if (fgets(line, sizeof line, f) &&
        sscanf(line, "sha256 %79s bytes %llu mtime %llu.%llu", hex, &bytes, &sec, &nsec) == 4)
        ok = !strcmp(hex, sha) && bytes == (unsigned long long)st.st_size &&
             sec == (unsigned long long)st.st_mtim.tv_sec && nsec == (unsigned long long)st.st_mtim.tv_nsec;
    fclose(f);
    return ok;
}

static void stamp_write(const char *dest, const char *sha) {
    char sp[PATH_MAX + 16];
    stamp_path(dest, sp, sizeof sp);
    struct stat st;
    if (stat(dest, &st)) return;
    FILE *f = fopen(sp, "w");
    if (!f) return; /* no stamp: the next start hashes again */
    fprintf(f, "sha256 %s bytes %llu mtime %llu.%09llu\n", sha, (unsigned long long)st.st_size,
            (unsigned long long)st.st_mtim.tv_sec, (unsigned long long)st.st_mtim.tv_nsec);
    fclose(f);
}

int fetch_mkdirs(const char *dir) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return cli_fail("muser up: path too long: %s", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST) return cli_fail("muser up: cannot create %s: %s", p, strerror(errno));
            *s = c;
            if (!c) break;
        }
    }
    return 0;
}

/* ---- one transfer ------------------------------------------------------ */

typedef enum { XF_OK, XF_RETRY, XF_URL, XF_FATAL } outcome;

typedef struct {
    const fetch_req *r;
    const char *url;
    int fd;
    uint64_t have, total, start;
    bool checked;
    long status;
    bool cr_seen;
    uint64_t cr_start, cr_total;
    int64_t content_length;
    enum { F_NONE, F_NORANGE, F_RANGE, F_SIZE, F_HTTP, F_DISK, F_WRITE } fail;
    uint64_t server_size;
    int write_errno;
    CURL *c;
    progress pr;
} xfer;

static size_t on_header(char *p, size_t size, size_t n, void *u) {
    xfer *x = u;
    size_t len = size * n;
    char line[512];
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, p, k);
    line[k] = 0;
    if (!strncmp(line, "HTTP/", 5)) { /* a new response (after a redirect) */
        x->cr_seen = false;
        x->content_length = -1;
    } else if (!strncasecmp(line, "content-range:", 14)) {
        unsigned long long a, b, t;
        if (sscanf(line + 14, " bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
            x->cr_seen = true;
            x->cr_start = a;
            x->cr_total = t;
        }
    } else if (!strncasecmp(line, "content-length:", 15)) {
        unsigned long long v;
        if (sscanf(line + 15, " %llu", &v) == 1) x->content_length = (int64_t)v;
    }
    return len;
}

/* The first body byte: is this the answer we asked for? */
static bool check_response(xfer *x) {
    x->checked = true;
    curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->start > 0) {
        if (x->status == 200) return x->fail = F_NORANGE, false;
        if (x->status != 206) return x->fail = F_HTTP, false;
        if (!x->cr_seen || x->cr_start != x->start) return x->fail = F_RANGE, false;
        if (x->total && x->cr_total != x->total) return x->server_size = x->cr_total, x->fail = F_SIZE, false;
        x->total = x->cr_total;
        return true;
    }
    if (x->status != 200) return x->fail = F_HTTP, false;
    if (x->content_length >= 0) {
        if (x->total && (uint64_t)x->content_length != x->total)
            return x->server_size = (uint64_t)x->content_length, x->fail = F_SIZE, false;
        x->total = (uint64_t)x->content_length;
    }
    return true;
}

static size_t on_body(char *p, size_t size, size_t n, void *u) {
    xfer *x = u;
    size_t len = size * n;
    if (!x->checked && !check_response(x)) return 0;
    if (x->total && x->have + len > x->total) return x->server_size = x->have + len, x->fail = F_SIZE, 0;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(x->fd, p + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            x->write_errno = errno;
            x->fail = errno == ENOSPC || errno == EDQUOT ? F_DISK : F_WRITE;
            return 0;
        }
        off += (size_t)w;
        x->have += (uint64_t)w;
    }
    progress_show(&x->pr, x->have, x->total, false);
    return len;
}

static bool transient(CURLcode rc) {
    switch (rc) {
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return true;
    default:
        return false;
    }
}

/* One connection: appends to part (open as x->fd) from x->have. */
static outcome transfer(xfer *x, const char *part, char *msg, size_t cap) {
    const fetch_req *r = x->r;
    char a[32], b[32];
    x->start = x->have;
    x->checked = false;
    x->cr_seen = false;
    x->content_length = -1;
    x->fail = F_NONE;
    x->status = 0;
    CURL *c = x->c = curl_easy_init();
    if (!c) {
        return snprintf(msg, cap, "muser up: %s: cannot start libcurl", r->what), XF_FATAL;
    }
    char range[48];
    snprintf(range, sizeof range, "%" PRIu64 "-", x->start);
    curl_easy_setopt(c, CURLOPT_URL, x->url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_USERAGENT, "muser/" MU_COMMIT);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* stalled for a minute: reconnect */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    if (x->start > 0) curl_easy_setopt(c, CURLOPT_RANGE, range);
    CURLcode rc = curl_easy_perform(c);
    if (!x->checked && rc == CURLE_OK && !check_response(x)) rc = CURLE_WRITE_ERROR; /* an empty body */
    const char *eff = x->url;
    curl_easy_cleanup(c);
    x->c = NULL;
    int ferr = fsync(x->fd) && errno != EINVAL ? errno : 0; /* EINVAL: not a file that syncs */
    switch (x->fail) {
    case F_NORANGE:
        snprintf(msg, cap,
                 "muser up: %s: the server does not support resuming (it answered a Range request with the whole "
                 "file): %s; remove %s to download from the start",
                 r->what, eff, part);
        return XF_URL;
    case F_RANGE:
        snprintf(msg, cap, "muser up: %s: the server answered a Range request with another range: %s", r->what, eff);
        return XF_URL;
    case F_SIZE:
        snprintf(msg, cap, "muser up: %s: short file: the server has %" PRIu64 " bytes, expected %" PRIu64 ": %s",
                 r->what, x->server_size, x->total, eff);
        return XF_URL;
    case F_HTTP:
        if (x->status == 416)
            snprintf(msg, cap, "muser up: %s: short file: the server's file ends before the partial download (%s): %s",
                     r->what, human(x->start, a, sizeof a), eff);
        else
            snprintf(msg, cap, "muser up: %s: HTTP %ld from %s", r->what, x->status, eff);
        return XF_URL;
    case F_DISK: {
        snprintf(msg, cap, "muser up: %s: disk full writing %s (%s of %s written; free space and run again to resume)",
                 r->what, part, human(x->have, a, sizeof a), x->total ? human(x->total, b, sizeof b) : "?");
        return XF_FATAL;
    }
    case F_WRITE:
        snprintf(msg, cap, "muser up: %s: cannot write %s: %s", r->what, part, strerror(x->write_errno));
        return XF_FATAL;
    case F_NONE:
        break;
    }
    if (ferr) {
        snprintf(msg, cap, "muser up: %s: cannot write %s: %s", r->what, part, strerror(ferr));
        return XF_FATAL;
    }
    if (rc == CURLE_OK) {
        if (x->total && x->have < x->total) { /* a clean end before the promised size */
            snprintf(msg, cap, "muser up: %s: short file: the server sent %" PRIu64 " bytes, expected %" PRIu64 ": %s",
                     r->what, x->have, x->total, eff);
            return XF_URL;
        }
        return XF_OK;
    }
    if (transient(rc)) {
        snprintf(msg, cap, "muser up: %s: connection ended at %s of %s (%s): %s", r->what, human(x->have, a, sizeof a),
                 x->total ? human(x->total, b, sizeof b) : "?", curl_easy_strerror(rc), eff);
        return XF_RETRY;
    }
    snprintf(msg, cap, "muser up: %s: %s: %s", r->what, curl_easy_strerror(rc), eff);
    return XF_URL;
}

/* ---- the whole file ---------------------------------------------------- */

static int verify_into_place(const fetch_req *r, const char *part) {
    char got[65];
    if (fetch_sha256_file(part, r->what, got)) return 1;
    if (strcmp(got, r->sha256)) {
        unlink(part);
        return cli_fail("muser up: %s: wrong SHA-256: expected %s, got %s (the download was removed)", r->what,
                        r->sha256, got);
    }
    if (rename(part, r->dest)) return cli_fail("muser up: %s: cannot rename %s: %s", r->what, part, strerror(errno));
    stamp_write(r->dest, r->sha256);
    fprintf(stderr, "muser up: %s: SHA-256 verified: %s\n", r->what, r->dest);
    return 0;
}

static int fetch_locked(const fetch_req *r, const char *part, int fd);

int fetch_model(const fetch_req *r) {
    char part[PATH_MAX];
    if (snprintf(part, sizeof part, "%s.part", r->dest) >= (int)sizeof part)
        return cli_fail("muser up: %s: path too long: %s", r->what, r->dest);
    struct stat st;
    /* a finished file: verified before first use, and again whenever it changed */
    if (stat(r->dest, &st) == 0) {
        if (stamp_ok(r->dest, r->sha256)) return 0;
        char got[65];
        if (fetch_sha256_file(r->dest, r->what, got)) return 1;
        if (strcmp(got, r->sha256))
            return cli_fail("muser up: %s: wrong SHA-256 in %s: expected %s, got %s; remove it to download again",
                            r->what, r->dest, r->sha256, got);
        stamp_write(r->dest, r->sha256);
        return 0;
    }
    if (r->n_urls == 0) return cli_fail("muser up: %s: no URL to download from", r->what);
    /* one process per partial file: it holds a lock on it until done */
    int fd = open(part, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return cli_fail("muser up: %s: cannot write %s: %s", r->what, part, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        close(fd);
        return cli_fail("muser up: %s: another process is downloading %s", r->what, part);
    }
    int rc = fetch_locked(r, part, fd);
    close(fd);
    return rc;
}

static int fetch_locked(const fetch_req *r, const char *part, int fd) {
    char a[32], b[32];
    struct stat st;
    uint64_t have = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (r->bytes && have > r->bytes) {
        fprintf(stderr, "muser up: %s: the partial download is larger than the model (%s > %s); starting over\n",
                r->what, human(have, a, sizeof a), human(r->bytes, b, sizeof b));
        if (ftruncate(fd, 0)) return cli_fail("muser up: %s: cannot truncate %s: %s", r->what, part, strerror(errno));
        have = 0;
    }
    if (r->bytes && have == r->bytes) return verify_into_place(r, part);
    /* free space, up front (the writes catch a disk that fills meanwhile) */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", r->dest);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    struct statvfs vfs;
    if (r->bytes && statvfs(dir, &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (avail < r->bytes - have)
            return cli_fail("muser up: %s: not enough disk space in %s: the download needs %s more, %s are free", r->what,
                            dir, human(r->bytes - have, a, sizeof a), human(avail, b, sizeof b));
    }
    static bool curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT)) return cli_fail("muser up: cannot initialize libcurl");
        curl_ready = true;
    }
    int max_attempts = r->max_attempts > 0 ? r->max_attempts : 20;
    char msg[4 * PATH_MAX] = "";
    for (int u = 0; u < r->n_urls; u++) {
        xfer x = {.r = r, .url = r->urls[u], .fd = fd, .have = have, .total = r->bytes};
        if (have) {
            fprintf(stderr, "muser up: %s: resuming the partial download at %s of %s\n", r->what,
                    human(have, a, sizeof a), r->bytes ? human(r->bytes, b, sizeof b) : "?");
        }
        fprintf(stderr, "muser up: %s: downloading %s\n", r->what, x.url);
        progress_init(&x.pr, r->what, "downloading", have, true);
        outcome o = XF_RETRY;
        int stalls = 0, attempts = 0;
        while (attempts < max_attempts && o == XF_RETRY) {
            attempts++;
            uint64_t before = x.have;
            o = transfer(&x, part, msg, sizeof msg);
            if (o == XF_RETRY) {
                progress_end_line(&x.pr);
                fprintf(stderr, "%s; resuming\n", msg);
                stalls = x.have > before ? 0 : stalls + 1;
                if (stalls >= 3) break;
                if (stalls) sleep((unsigned)stalls); /* a connection that gives nothing: back off */
            }
        }
        have = x.have;
        if (o == XF_OK) {
            progress_show(&x.pr, x.have, x.total, true);
            return verify_into_place(r, part);
        }
        progress_end_line(&x.pr);
        if (o == XF_FATAL) return cli_fail("%s", msg);
        if (o == XF_RETRY)
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " (gave up after %d connections)", attempts);
        if (u + 1 < r->n_urls) fprintf(stderr, "%s; trying the next URL\n", msg);
    }
    return cli_fail("%s", msg);
}
