/* cli.c: option parsing helpers and the error-line contract. */
#include "cli.h"

#include "../../include/muser.h"
#include "../../src/base/esc.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The line embeds file names and user-given strings: it is escaped (mu_esc)
 * into valid UTF-8 without control characters, so it stays one line. */
int cli_fail(const char *fmt, ...) {
    char raw[2048], line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1;
    fprintf(stderr, "%s\n", mu_esc(line, sizeof line, raw, len));
    return 1;
}

bool cli_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_float(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_ids(const char *s, int32_t **out, int *n) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return false;
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return false;
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p) {
            free(ids);
            return false;
        }
    }
    if (k == 0) {
        free(ids);
        return false;
    }
    *out = ids;
    *n = k;
    return true;
}

int cli_sample_opt(const char *cmd, int argc, char **argv, int *i, mu_sample_params *p) {
    const char *a = argv[*i];
    static const char *names[] = {"--temp", "--top-k", "--top-p", "--min-p", "--seed"};
    int which = -1;
    for (int k = 0; k < 5; k++)
        if (!strcmp(a, names[k])) which = k;
    if (which < 0) return 0;
    if (*i + 1 >= argc) return cli_fail("%s: option %s needs a value", cmd, a), -1;
    const char *v = argv[++*i];
    long long n;
    double d;
    switch (which) {
    case 0:
        if (!cli_float(v, 0, 100, &d)) return cli_fail("%s: --temp must be 0..100: %s", cmd, v), -1;
        p->temp = (float)d;
        break;
    case 1:
        if (!cli_int(v, 0, 1 << 24, &n)) return cli_fail("%s: --top-k must be >= 0 (0: off): %s", cmd, v), -1;
        p->top_k = (int)n;
        break;
    case 2:
        if (!cli_float(v, 0, 1, &d)) return cli_fail("%s: --top-p must be 0..1: %s", cmd, v), -1;
        p->top_p = (float)d;
        break;
    case 3:
        if (!cli_float(v, 0, 1, &d)) return cli_fail("%s: --min-p must be 0..1: %s", cmd, v), -1;
        p->min_p = (float)d;
        break;
    case 4:
        if (!cli_int(v, 0, 1LL << 62, &n)) return cli_fail("%s: --seed must be a non-negative integer: %s", cmd, v), -1;
        p->seed = (uint64_t)n;
        break;
    }
    return 1;
}

/* ---- weight check (--check, --check-tensors) ------------------------------ */

#include <time.h>
#include <unistd.h>

typedef struct {
    bool tty, lines;
    double t0, last;
    int last_quarter;
} check_progress;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int on_check_progress(void *user, uint64_t done, uint64_t total) {
    check_progress *p = user;
    const double now = mono_s(), dt = now - p->t0;
    const double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    if (p->tty) {
        if (now - p->last < 0.1 && done < total) return 0;
        p->last = now;
        fprintf(stderr, "\rcheck: %3.0f%% %.2f of %.2f GB, %.0f MB/s ", pct, done / 1e9, total / 1e9,
                dt > 0 ? done / 1e6 / dt : 0.0);
    } else if (p->lines) {
        const int q = total ? (int)(4 * done / total) : 4;
        if (q <= p->last_quarter) return 0;
        p->last_quarter = q;
        fprintf(stderr, "check: %3.0f%% %llu of %llu bytes\n", pct, (unsigned long long)done, (unsigned long long)total);
    }
    return 0;
}

int cli_check_model(const char *cmd, const mu_model *m, int n_threads, bool lines) {
    check_progress p = {.tty = isatty(2) == 1, .lines = lines, .t0 = mono_s(), .last_quarter = 0};
    mu_err err = {0};
    const int rc = mu_model_check(m, n_threads, on_check_progress, &p, &err);
    if (p.tty) fprintf(stderr, "\r%60s\r", "");
    if (rc) return cli_fail("%s: %s", cmd, err.msg);
    return 0;
}

/* ---- backend (--backend, --gpu) and the GPU upload's progress ------------- */

int cli_backend_opt(const char *cmd, int argc, char **argv, int *i, cli_backend *b) {
    const char *a = argv[*i];
    if (strcmp(a, "--backend") && strcmp(a, "--gpu")) return 0;
    if (*i + 1 >= argc) {
        cli_fail("%s: option %s needs a value", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(a, "--backend")) {
        if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
            cli_fail("%s: --backend must be auto, cpu or cuda: %s", cmd, v);
            return -1;
        }
        b->backend = v;
        return 1;
    }
    long long n;
    if (!cli_int(v, 0, 63, &n)) {
        cli_fail("%s: --gpu must be a device number 0..63: %s", cmd, v);
        return -1;
    }
    b->gpu = (int)n;
    return 1;
}

static check_progress g_upload;

static int on_upload(void *user, uint64_t done, uint64_t total) {
    check_progress *p = user;
    if (!p->tty) return 0;
    const double now = mono_s(), dt = now - p->t0;
    if (now - p->last < 0.1 && done < total) return 0;
    p->last = now;
    fprintf(stderr, "\rgpu: uploading weights %3.0f%% %.2f of %.2f GB, %.0f MB/s ", total ? 100.0 * done / total : 100.0,
            done / 1e9, total / 1e9, dt > 0 ? done / 1e6 / dt : 0.0);
    if (done >= total) fprintf(stderr, "\r%70s\r", "");
    return 0;
}

mu_engine_opts cli_engine_opts(const cli_backend *b, int n_threads, const char *kern) {
    g_upload = (check_progress){.tty = isatty(2) == 1, .t0 = mono_s()};
    return (mu_engine_opts){.n_threads = n_threads, .kern = kern, .backend = b->backend, .gpu_device = b->gpu,
                            .progress = on_upload, .progress_user = &g_upload};
}
