/* cli.c: option parsing helpers and the error-line contract. */
#include "../../include/muser_lane.h"
#include "cli.h"

#include "../../include/muser_gen.h"
#include "../../src/base/esc.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

bool cli_bytes(const char *v, size_t *out) {
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (end == v || *v == '-') return false;
    int sh = 0;
    if (*end == 'K' || *end == 'k') sh = 10;
    else if (*end == 'M' || *end == 'm') sh = 20;
    else if (*end == 'G' || *end == 'g') sh = 30;
    if (sh) end++;
    if (*end || n > (~0ULL >> (sh + 1))) return false;
    *out = (size_t)(n << sh);
    return true;
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

/* llama.cpp's sampling flags (common/arg.cpp names and ranges). */
enum {
    O_TEMP, O_TOP_K, O_TOP_P, O_MIN_P, O_SEED, O_MIN_KEEP, O_TYPICAL, O_NSIGMA, O_XTC_P, O_XTC_T, O_DT_RANGE,
    O_DT_EXP, O_REP, O_REP_N, O_PRESENT, O_FREQ, O_DRY_M, O_DRY_B, O_DRY_AL, O_DRY_N, O_DRY_BRK, O_MIRO,
    O_MIRO_LR, O_MIRO_ENT, O_BIAS
};
static const struct {
    const char *name, *alt;
} sample_opts[] = {
    [O_TEMP] = {"--temp", "--temperature"},         [O_TOP_K] = {"--top-k", NULL},
    [O_TOP_P] = {"--top-p", NULL},                  [O_MIN_P] = {"--min-p", NULL},
    [O_SEED] = {"--seed", NULL},                    [O_MIN_KEEP] = {"--min-keep", NULL},
    [O_TYPICAL] = {"--typical", "--typical-p"},     [O_NSIGMA] = {"--top-nsigma", "--top-n-sigma"},
    [O_XTC_P] = {"--xtc-probability", NULL},        [O_XTC_T] = {"--xtc-threshold", NULL},
    [O_DT_RANGE] = {"--dynatemp-range", NULL},      [O_DT_EXP] = {"--dynatemp-exp", NULL},
    [O_REP] = {"--repeat-penalty", NULL},           [O_REP_N] = {"--repeat-last-n", NULL},
    [O_PRESENT] = {"--presence-penalty", NULL},     [O_FREQ] = {"--frequency-penalty", NULL},
    [O_DRY_M] = {"--dry-multiplier", NULL},         [O_DRY_B] = {"--dry-base", NULL},
    [O_DRY_AL] = {"--dry-allowed-length", NULL},    [O_DRY_N] = {"--dry-penalty-last-n", NULL},
    [O_DRY_BRK] = {"--dry-sequence-breaker", NULL}, [O_MIRO] = {"--mirostat", NULL},
    [O_MIRO_LR] = {"--mirostat-lr", NULL},          [O_MIRO_ENT] = {"--mirostat-ent", NULL},
    [O_BIAS] = {"--logit-bias", "-l"},
};

/* The lists the parameters point at: one command line's worth, for the
 * life of the process. */
#define CLI_MAX_BIAS 1024
#define CLI_MAX_BREAKERS 64
static mu_logit_bias cli_bias[CLI_MAX_BIAS];
static const char *cli_breakers[CLI_MAX_BREAKERS];

/* TOKEN_ID(+/-)BIAS, as llama.cpp's --logit-bias: 15043+1, 15043-1, 15043-inf.
 * 0, 1 for a malformed value, 2 for +inf. */
static int parse_bias(const char *v, mu_logit_bias *out) {
    char *end;
    errno = 0;
    long id = strtol(v, &end, 10);
    if (end == v || errno || id < 0 || id > INT32_MAX || (*end != '+' && *end != '-')) return 1;
    const char sign = *end++;
    if (!*end || *end == '+' || *end == '-' || isspace((unsigned char)*end)) return 1;
    char *e2;
    errno = 0;
    double b = strtod(end, &e2);
    if (*e2 || isnan(b) || errno == EINVAL) return 1;
    if (sign == '+' && isinf(b)) return 2; /* every other token would become impossible */
    *out = (mu_logit_bias){(int32_t)id, (float)(sign == '-' ? -b : b)};
    return 0;
}

int cli_sample_opt(const char *cmd, int argc, char **argv, int *i, mu_sample_params *p) {
    const char *a = argv[*i];
    int which = -1;
    for (int k = 0; k < (int)(sizeof sample_opts / sizeof sample_opts[0]); k++)
        if (!strcmp(a, sample_opts[k].name) || (sample_opts[k].alt && !strcmp(a, sample_opts[k].alt))) which = k;
    if (which < 0) return 0;
    if (*i + 1 >= argc) return cli_fail("%s: option %s needs a value", cmd, a), -1;
    const char *v = argv[++*i];
    long long n;
    double d;
#define FLOAT(lo, hi, field, what)                                                         \
    do {                                                                                   \
        if (!cli_float(v, lo, hi, &d)) return cli_fail("%s: %s must be %s: %s", cmd, a, what, v), -1; \
        p->field = (float)d;                                                               \
    } while (0)
#define INT(lo, hi, field, what)                                                           \
    do {                                                                                   \
        if (!cli_int(v, lo, hi, &n)) return cli_fail("%s: %s must be %s: %s", cmd, a, what, v), -1; \
        p->field = (int)n;                                                                 \
    } while (0)
    switch (which) {
    case O_TEMP: FLOAT(0, 100, temp, "0..100"); break;
    case O_TOP_K: INT(0, 1 << 24, top_k, ">= 0 (0: off)"); break;
    case O_TOP_P: FLOAT(0, 1, top_p, "0..1"); break;
    case O_MIN_P: FLOAT(0, 1, min_p, "0..1"); break;
    case O_SEED:
        if (!cli_int(v, 0, 1LL << 62, &n)) return cli_fail("%s: --seed must be a non-negative integer: %s", cmd, v), -1;
        p->seed = (uint64_t)n;
        break;
    case O_MIN_KEEP: INT(0, 1 << 24, min_keep, ">= 0"); break;
    case O_TYPICAL: FLOAT(0, 1e9, typical_p, ">= 0 (1: off)"); break;
    case O_NSIGMA: FLOAT(-1e9, 1e9, top_n_sigma, "a number (<= 0: off)"); break;
    case O_XTC_P: FLOAT(0, 1, xtc_probability, "0..1"); break;
    case O_XTC_T: FLOAT(0, 1, xtc_threshold, "0..1 (> 0.5: off)"); break;
    case O_DT_RANGE: FLOAT(0, 1e9, dynatemp_range, ">= 0"); break;
    case O_DT_EXP: FLOAT(-1e9, 1e9, dynatemp_exponent, "a number"); break;
    case O_REP:
        if (!cli_float(v, 1e-30, 1e30, &d)) return cli_fail("%s: --repeat-penalty must be finite and > 0: %s", cmd, v), -1;
        p->penalty_repeat = (float)d;
        break;
    case O_REP_N: INT(-1, INT32_MAX, penalty_last_n, ">= -1 (0: off, -1: every token)"); break;
    case O_PRESENT: FLOAT(-1e30, 1e30, penalty_present, "finite"); break;
    case O_FREQ: FLOAT(-1e30, 1e30, penalty_freq, "finite"); break;
    case O_DRY_M: FLOAT(0, 1e30, dry_multiplier, ">= 0"); break;
    case O_DRY_B:
        if (!cli_float(v, -1e30, 1e30, &d)) return cli_fail("%s: --dry-base must be a number: %s", cmd, v), -1;
        if (d >= 1) p->dry_base = (float)d; /* llama.cpp ignores a base below 1 */
        break;
    case O_DRY_AL: INT(0, INT32_MAX, dry_allowed_length, ">= 0"); break;
    case O_DRY_N: INT(-1, INT32_MAX, dry_penalty_last_n, ">= -1 (0: off, -1: every token)"); break;
    case O_DRY_BRK:
        /* the first one replaces the defaults; "none" leaves no breaker */
        if (p->dry_breakers != cli_breakers) {
            p->dry_breakers = cli_breakers;
            p->n_dry_breakers = 0;
        }
        if (!strcmp(v, "none")) {
            p->n_dry_breakers = 0;
            break;
        }
        if (!*v) return cli_fail("%s: --dry-sequence-breaker must not be empty", cmd), -1;
        if (p->n_dry_breakers == CLI_MAX_BREAKERS)
            return cli_fail("%s: at most %d --dry-sequence-breaker options", cmd, CLI_MAX_BREAKERS), -1;
        cli_breakers[p->n_dry_breakers++] = v;
        break;
    case O_MIRO: INT(0, 2, mirostat, "0, 1 or 2"); break;
    case O_MIRO_LR: FLOAT(-1e30, 1e30, mirostat_eta, "finite"); break;
    case O_MIRO_ENT: FLOAT(-1e30, 1e30, mirostat_tau, "finite"); break;
    case O_BIAS: {
        mu_logit_bias b;
        int bad = parse_bias(v, &b);
        if (bad == 2) return cli_fail("%s: --logit-bias: a bias of +inf is not allowed (ban with -inf): %s", cmd, v), -1;
        if (bad)
            return cli_fail("%s: --logit-bias must be TOKEN_ID(+/-)BIAS, e.g. 15043+1 or 15043-inf: %s", cmd, v), -1;
        if (p->logit_bias != cli_bias) {
            p->logit_bias = cli_bias;
            p->n_logit_bias = 0;
        }
        if (p->n_logit_bias == CLI_MAX_BIAS) return cli_fail("%s: at most %d --logit-bias options", cmd, CLI_MAX_BIAS), -1;
        cli_bias[p->n_logit_bias++] = b;
        break;
    }
    }
#undef FLOAT
#undef INT
    return 1;
}

int cli_spec_opt(const char *cmd, int argc, char **argv, int *i, cli_spec *p) {
    const char *a = argv[*i];
    int which = !strcmp(a, "--spec") || !strcmp(a, "--spec-type")                ? 0
                : !strcmp(a, "--draft-max") || !strcmp(a, "--spec-draft-n-max") ? 1
                : !strcmp(a, "--draft-min") || !strcmp(a, "--spec-draft-n-min") ? 2
                : !strcmp(a, "--draft") || !strcmp(a, "--model-draft") || !strcmp(a, "-md") ? 3
                                                                                 : -1;
    if (which < 0) return 0;
    if (*i + 1 >= argc) return cli_fail("%s: option %s needs a value", cmd, a), -1;
    const char *v = argv[++*i];
    long long n;
    if (which == 0) {
        int sp = mu_spec_parse(v);
        if (sp < 0) return cli_fail("%s: --spec must be none, ngram or dflash: %s", cmd, v), -1;
        p->spec = sp;
    } else if (which == 3) {
        p->draft = v;
    } else if (which == 1) {
        if (!cli_int(v, 1, MU_SPEC_DRAFT_MAX, &n))
            return cli_fail("%s: --draft-max must be 1..%d: %s", cmd, MU_SPEC_DRAFT_MAX, v), -1;
        p->draft_max = (int)n;
    } else {
        if (!cli_int(v, 0, MU_SPEC_DRAFT_MAX, &n))
            return cli_fail("%s: --draft-min must be 0..%d: %s", cmd, MU_SPEC_DRAFT_MAX, v), -1;
        p->draft_min = (int)n;
    }
    return 1;
}

int cli_lane_opt(const char *cmd, int argc, char **argv, int *i, cli_lane *l) {
    const char *a = argv[*i];
    if (strcmp(a, "--prefill") && strcmp(a, "--node") && strcmp(a, "--breaker")) return 0;
    if (*i + 1 >= argc) return cli_fail("%s: option %s needs a value", cmd, a), -1;
    const char *v = argv[++*i];
    if (!strcmp(a, "--prefill")) {
        if ((l->mode = mu_prefill_parse(v)) < 0) return cli_fail("%s: --prefill must be local, auto or remote: %s", cmd, v), -1;
    } else if (!strcmp(a, "--node")) {
        l->node = v;
    } else {
        int n, sec, k = 0;
        if (sscanf(v, "%d:%d%n", &n, &sec, &k) != 2 || v[k] || n < 1 || n > 1000 || sec < 1 || sec > 86400)
            return cli_fail("%s: --breaker must be FAILURES:SECONDS (1..1000:1..86400): %s", cmd, v), -1;
        l->breaker_n = n;
        l->breaker_s = sec;
    }
    return 1;
}

/* M.dflash.gguf for M.gguf into out (cap bytes); false when model does not
 * end in .gguf or the name does not fit. */
static bool drafter_name(const char *model, char *out, size_t cap) {
    size_t n = model ? strlen(model) : 0;
    return n > 5 && !strcmp(model + n - 5, ".gguf") && n + 8 < cap &&
           snprintf(out, cap, "%.*s.dflash.gguf", (int)(n - 5), model) > 0;
}

/* True when a and b are the same file or files with the same bytes. */
static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) || stat(b, &sb)) return false;
    if (sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino) return true;
    if (sa.st_size != sb.st_size) return false;
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    enum { CHUNK = 1 << 20 };
    char *ba = malloc(CHUNK), *bb = malloc(CHUNK);
    bool same = fa && fb && ba && bb;
    while (same) {
        size_t na = fread(ba, 1, CHUNK, fa), nb = fread(bb, 1, CHUNK, fb);
        if (na != nb || memcmp(ba, bb, na)) same = false;
        if (na < CHUNK) break;
    }
    if (same && (ferror(fa) || ferror(fb))) same = false;
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    free(ba);
    free(bb);
    return same;
}

int cli_spec_open(const char *cmd, cli_spec *p, mu_engine *e, const char *model) {
    if (p->draft && p->spec == MU_SPEC_NONE) p->spec = MU_SPEC_DFLASH;
    char near[4096];
    if (p->spec == MU_SPEC_DFLASH && !p->draft) {
        /* the model's own drafter: M.dflash.gguf next to M.gguf */
        if (drafter_name(model, near, sizeof near) && access(near, R_OK) == 0) p->draft = near;
        /* the bundled model (also a copy of it elsewhere): the bundled drafter */
        const char *b = p->draft ? NULL : cli_bundled_model();
        if (b && model && same_file(model, b)) {
            if (!drafter_name(b, near, sizeof near)) return cli_fail("%s: the bundled model's path is too long: %s", cmd, b);
            if (access(near, R_OK))
                return cli_fail("%s: --spec dflash: the bundled model's drafter is missing: %s (give --draft D.gguf)", cmd,
                                near);
            p->draft = near;
        }
        if (!p->draft) return cli_fail("%s: --spec dflash needs --draft D.gguf (or a drafter next to the model, M.dflash.gguf)", cmd);
    }
    if (!p->draft) return 0;
    mu_err err;
    int rc = mu_drafter_open(p->draft, e, &p->drafter, &err);
    if (p->draft == near) p->draft = NULL; /* not to outlive this call */
    if (rc) return cli_fail("%s: %s", cmd, err.msg);
    return 0;
}

const char *cli_sample_usage(void) {
    return "sampling (llama.cpp's flags and defaults; chain: logit bias, penalties, DRY, top-n-sigma, top-k,\n"
           "typical, top-p, min-p, XTC, temperature; --temp 0 is greedy):\n"
           "  --temp T (0.8)  --top-k K (40, 0 off)  --top-p P (0.95)  --min-p P (0.05)  --seed S  --min-keep N (0)\n"
           "  --repeat-penalty X (1, off)  --repeat-last-n N (64; 0 off, -1 every token)\n"
           "  --presence-penalty X (0)  --frequency-penalty X (0)\n"
           "  --dry-multiplier X (0, off)  --dry-base X (1.75)  --dry-allowed-length N (2)\n"
           "  --dry-penalty-last-n N (64; -1 every token)  --dry-sequence-breaker S (repeatable; 'none')\n"
           "  --typical P (1, off)  --top-nsigma N (-1, off)  --xtc-probability P (0)  --xtc-threshold P (0.1)\n"
           "  --dynatemp-range X (0)  --dynatemp-exp X (1)  --mirostat 0|1|2  --mirostat-lr X (0.1)\n"
           "  --mirostat-ent X (5)  --logit-bias ID(+/-)BIAS (repeatable, e.g. 15043+1, 15043-inf)\n";
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

/* ---- prefill progress (run, chat) ---------------------------------------- */

bool cli_prefill_wanted(void) { return isatty(2) == 1; }

void cli_prefill_line(char *buf, size_t cap, int n_done, int n_total, double dt) {
    const double pct = n_total > 0 ? 100.0 * n_done / n_total : 100.0;
    if (dt > 0 && n_done > 0)
        snprintf(buf, cap, "prefill: %d/%d tokens (%.0f%%), %.0f tok/s", n_done, n_total, pct, n_done / dt);
    else
        snprintf(buf, cap, "prefill: %d/%d tokens (%.0f%%)", n_done, n_total, pct);
}

void cli_prefill_event(cli_prefill *p, int n_done, int n_total) {
    const double now = mono_s();
    if (n_done == 0) p->t0 = now; /* the job has its slot: the prefill starts */
    if (n_total <= CLI_PREFILL_MIN || !cli_prefill_wanted()) return;
    if (n_done >= n_total) {
        cli_prefill_end(p);
        return;
    }
    char line[128];
    cli_prefill_line(line, sizeof line, n_done, n_total, now - p->t0);
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    p->shown = true;
    p->last = now;
}

void cli_prefill_end(cli_prefill *p) {
    if (!p->shown) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    p->shown = false;
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
