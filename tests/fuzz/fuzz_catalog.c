/* fuzz_catalog.c: the `muser up` catalog parser (cmd/muser/catalog.c).
 * Input: a name line, then the catalog text. Lookup must fail cleanly
 * (MU_E_FORMAT with a message) or find an entry that keeps the format's
 * promises: the name asked for, a size, 64 lowercase hex digits, and either
 * a bundled path or 1..4 http(s) URLs. None may crash or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../cmd/muser/catalog.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    const char *nl = memchr(p, '\n', size);
    if (!nl || nl - p > CATALOG_NAME_MAX) return 0;
    char name[CATALOG_NAME_MAX + 1];
    memcpy(name, p, (size_t)(nl - p));
    name[nl - p] = 0;
    size_t n = size - (size_t)(nl - p) - 1;
    /* the text without a NUL after it: ASan catches a read past the end */
    char *text = malloc(n ? n : 1);
    if (!text) return 0;
    memcpy(text, nl + 1, n);
    catalog_entry e;
    mu_err err = {0};
    int rc = catalog_find(text, n, name, &e, &err);
    if (rc < 0 && (rc != MU_E_FORMAT || !err.msg[0])) abort();
    if (rc == 1) {
        if (strcmp(e.name, name) || !e.bytes || strlen(e.sha256) != 64) abort();
        for (int i = 0; i < 64; i++)
            if (!strchr("0123456789abcdef", e.sha256[i])) abort();
        if (e.bundled ? (e.n_urls != 0 || !e.path[0]) : (e.n_urls < 1 || e.n_urls > CATALOG_MAX_URLS)) abort();
    }
    char names[256];
    catalog_names(text, n, names, sizeof names);
    free(text);
    return 0;
}
