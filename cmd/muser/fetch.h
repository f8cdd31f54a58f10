/* fetch.h: model files for `muser up`: download with resume (libcurl, HTTP
 * Range), a progress display, and SHA-256 verification before first use
 * (OpenSSL). docs/up.md describes the behaviour and its error lines. */
#ifndef MU_CMD_FETCH_H
#define MU_CMD_FETCH_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *what;        /* the model's name, for messages */
    const char *const *urls; /* tried in order */
    int n_urls;
    const char *dest;        /* the verified file; DEST.part while incomplete */
    uint64_t bytes;          /* expected size; 0 = what the server says */
    const char *sha256;      /* 64 lowercase hex digits: required */
    int max_attempts;        /* connections per URL before giving up; 0: 20 */
} fetch_req;

/* Makes r->dest a verified copy: a file already there is checked (its
 * verification stamp DEST.sha256 is trusted only while size and mtime match),
 * a partial download DEST.part is resumed and the result hashed before it is
 * renamed into place; a wrong hash removes it. Progress on stderr (a
 * rewritten bar on a terminal, a line per 10 % otherwise). Returns 0, or 1
 * after printing the one-line error ("muser up: ..."). */
int fetch_model(const fetch_req *r);

/* Hashes a whole file (progress on stderr for files over 256 MiB). Returns 0
 * with hex[65] filled, or 1 after printing the error. */
int fetch_sha256_file(const char *path, const char *what, char hex[65]);

/* Creates dir and its parents (mode 0755). 0, or 1 after printing. */
int fetch_mkdirs(const char *dir);

#endif
