/* err.h: status codes and the error record every fallible call fills.
 * Owns: the status enum, mu_err, formatting helpers.
 * Convention: functions return 0 or a negative MU_E_* code and take
 * `mu_err *err` last; the message is "module: what failed: the value". */
#ifndef MU_BASE_ERR_H
#define MU_BASE_ERR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#define MU_NORETURN [[noreturn]]
#else
#define MU_NORETURN _Noreturn
#endif

enum {
    MU_OK = 0,
    MU_E_IO = -1,       /* file or socket failed */
    MU_E_FORMAT = -2,   /* bad bytes: magic, version, truncation, offsets */
    MU_E_MODEL = -3,    /* well-formed file, wrong model or geometry */
    MU_E_ARG = -4,      /* caller passed something out of range */
    MU_E_NOMEM = -5,    /* allocation or size overflow */
    MU_E_UNSUPPORTED = -6,
    MU_E_STATE = -7,    /* operation not valid in this state */
};

typedef struct mu_err {
    int code;
    char msg[256];
} mu_err;

/* Sets err (if non-NULL) and returns code, so callers can `return mu_fail(...)`. */
int mu_fail(mu_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *mu_status_name(int code);

/* Always-on invariant check: bugs abort with file:line, never silently continue. */
#define MU_ASSERT(c)                                                          \
    do {                                                                      \
        if (!(c)) mu_assert_fail(#c, __FILE__, __LINE__);                     \
    } while (0)
MU_NORETURN void mu_assert_fail(const char *expr, const char *file, int line);

#ifdef __cplusplus
}
#endif

#endif
