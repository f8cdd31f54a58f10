/* err.c: error records and the always-on assert. No allocation, no I/O
 * other than the assert's final message on stderr. Every message is passed
 * through mu_esc (esc.h): messages embed file names, GGUF keys, strings and
 * tensor names, so they are made valid UTF-8 without control characters
 * here, once, for every caller. */
#include "err.h"

#include "esc.h"

#include <stdio.h>
#include <stdlib.h>

int mu_fail(mu_err *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        char raw[1024];
        int n = vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        size_t len = n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1;
        mu_esc(err->msg, sizeof err->msg, raw, len);
    }
    return code;
}

const char *mu_status_name(int code) {
    switch (code) {
    case MU_OK: return "ok";
    case MU_E_IO: return "io";
    case MU_E_FORMAT: return "format";
    case MU_E_MODEL: return "model";
    case MU_E_ARG: return "argument";
    case MU_E_NOMEM: return "memory";
    case MU_E_UNSUPPORTED: return "unsupported";
    case MU_E_STATE: return "state";
    }
    return "unknown";
}

void mu_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "muser: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
