/* fuzz_regex.c: lazy-grammar trigger patterns (src/gen/regex.h).
 * Input: the pattern, a NUL byte, then the text to search (no NUL: the
 * whole input is the pattern, searched in itself). Refusals must be clean
 * one-line errors; a search must end (a match, none, or the step limit's
 * error) with a position inside the text. Nothing may crash, leak, hang or
 * read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gen/regex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    const char *s = (const char *)data;
    const char *nul = memchr(s, 0, size);
    size_t pl = nul ? (size_t)(nul - s) : size;
    const char *in = nul ? nul + 1 : s;
    size_t n = nul ? size - pl - 1 : size;
    mu_err err = {0};
    mu_re *re = NULL;
    int rc = mu_re_new(s, pl, &re, &err);
    if (rc) {
        if (re || !err.msg[0] || strchr(err.msg, '\n') || strncmp(err.msg, "regex: ", 7)) abort();
        return 0;
    }
    size_t pos = 0;
    rc = mu_re_find(re, in, n, &pos, &err);
    if (rc == 0 && pos != SIZE_MAX && pos > n) abort();
    if (rc && rc != MU_E_ARG && rc != MU_E_NOMEM) abort();
    mu_re_free(re);
    return 0;
}
