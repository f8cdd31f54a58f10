/* cli.h: small helpers shared by the subcommands: option parsing and the
 * one-line error contract (message on stderr, exit code 1). */
#ifndef MU_CMD_CLI_H
#define MU_CMD_CLI_H

#include <stdbool.h>
#include <stdint.h>

/* Prints "msg\n" to stderr and returns 1 (the exit code for every failure). */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Strict number parsing: whole string, range-checked. Return false on error. */
bool cli_int(const char *s, long long lo, long long hi, long long *out);
bool cli_float(const char *s, double lo, double hi, double *out);
/* Comma-separated int32 list; *out is malloc'ed. */
bool cli_ids(const char *s, int32_t **out, int *n);

/* The model used when -m is omitted (bundled, or generated on first use).
 * Returns a path or NULL after printing why. */
const char *cli_default_model(void);

#endif
