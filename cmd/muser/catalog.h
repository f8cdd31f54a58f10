/* catalog.h: the model catalog of `muser up` (models/catalog.tsv): one model
 * per line, tab-separated: name, bytes, sha256, license, source. The format
 * is specified in docs/up.md. */
#ifndef MU_CMD_CATALOG_H
#define MU_CMD_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../src/base/err.h"

#define CATALOG_MAX_URLS 4
#define CATALOG_NAME_MAX 64
#define CATALOG_URL_MAX 1024

typedef struct {
    char name[CATALOG_NAME_MAX + 1];
    uint64_t bytes;
    char sha256[65];         /* 64 lowercase hex digits */
    char license[128];
    bool bundled;            /* source "bundled:PATH": a file of the repository */
    char path[CATALOG_URL_MAX + 1];          /* bundled: PATH relative to the repository */
    int n_urls;
    char urls[CATALOG_MAX_URLS][CATALOG_URL_MAX + 1];
} catalog_entry;

/* Parses the whole catalog text (n bytes, no NUL needed) and looks up name.
 * Every line is validated, so a broken catalog fails whatever the name.
 * Returns 1 with *out filled when found, 0 when absent, MU_E_FORMAT with
 * "catalog: line N: what: the value" when the text is malformed. */
int catalog_find(const char *text, size_t n, const char *name, catalog_entry *out, mu_err *err);

/* Names in the catalog, comma-separated, into buf (for "not found" errors).
 * Assumes the text parsed. */
void catalog_names(const char *text, size_t n, char *buf, size_t cap);

/* True when s is 64 hex digits (either case); lower-cases into out[65]. */
bool catalog_sha_ok(const char *s, char out[65]);

#endif
