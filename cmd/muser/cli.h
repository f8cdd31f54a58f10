/* cli.h: small helpers shared by the subcommands: option parsing and the
 * one-line error contract (message on stderr, exit code 1). */
#ifndef MU_CMD_CLI_H
#define MU_CMD_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "../../include/muser.h"

/* Prints "msg\n" to stderr and returns 1 (the exit code for every failure). */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Strict number parsing: whole string, range-checked. Return false on error. */
bool cli_int(const char *s, long long lo, long long hi, long long *out);
/* A byte count: digits with an optional K, M or G (powers of 1024). */
bool cli_bytes(const char *s, size_t *out);
bool cli_float(const char *s, double lo, double hi, double *out);
/* Comma-separated int32 list; *out is malloc'ed. */
bool cli_ids(const char *s, int32_t **out, int *n);

/* Parses one sampling option (llama.cpp's names: --temp --top-k --top-p
 * --min-p --seed --repeat-penalty --dry-multiplier ... --logit-bias, the
 * list cli_sample_usage prints) at argv[*i] into p, which starts as
 * mu_sample_defaults(). Returns 1 when it consumed the option and its value
 * (advancing *i), 0 when argv[*i] is not a sampling option, -1 after
 * printing the error line ("CMD: ..."). The logit biases and DRY breakers
 * p then points at live as long as the process (and argv). */
int cli_sample_opt(const char *cmd, int argc, char **argv, int *i, mu_sample_params *p);
/* The sampling options' usage lines. */
const char *cli_sample_usage(void);

/* --backend auto|cpu|cuda and --gpu N, shared by run, chat, serve, bench. */
typedef struct {
    const char *backend; /* "auto" unless given */
    int gpu;
} cli_backend;
#define CLI_BACKEND_DEFAULT ((cli_backend){.backend = "auto", .gpu = 0})
/* Parses --backend / --gpu at argv[*i] into b; returns as cli_sample_opt. */
int cli_backend_opt(const char *cmd, int argc, char **argv, int *i, cli_backend *b);
/* Engine options for b with a progress line for the GPU upload on stderr
 * (when it is a terminal). */
mu_engine_opts cli_engine_opts(const cli_backend *b, int n_threads, const char *kern);
/* "BACKEND_USAGE" text for the commands' --help. */
#define CLI_BACKEND_USAGE "[--backend auto|cpu|cuda] [--gpu N]"
/* Speculative decoding options, as a request carries them (mu_gen_req). */
typedef struct {
    int spec;       /* mu_spec */
    int draft_max;  /* 0: the method's default */
    int draft_min;
    const char *draft;   /* --draft D.gguf: a DFlash drafter */
    mu_drafter *drafter; /* opened by cli_spec_open */
} cli_spec;

/* Parses one speculative decoding option at argv[*i] into p: --spec
 * none|ngram|dflash (alias --spec-type), --draft-max N (alias
 * --spec-draft-n-max), --draft-min N (alias --spec-draft-n-min), --draft
 * D.gguf (alias --model-draft, -md). Returns 1, 0 or -1 as cli_sample_opt. */
int cli_spec_opt(const char *cmd, int argc, char **argv, int *i, cli_spec *p);
/* After the engine exists: --draft alone means --spec dflash; dflash
 * without --draft takes the model's own drafter, MODEL.dflash.gguf next to
 * MODEL.gguf, when there is one, else, when the model is the bundled one
 * (the same file, or a file with the same bytes), the bundled drafter,
 * muser-default.dflash.gguf beside the bundled model (an error naming it
 * when it is missing); opens the drafter into p->drafter (free it after the
 * scheduler). Returns 0, or 1 after printing "CMD: <error>". */
int cli_spec_open(const char *cmd, cli_spec *p, mu_engine *e, const char *model);

/* Remote prefill options (docs/lane.md), as run, chat and serve take them:
 * --prefill local|auto|remote, --node NAME, --breaker N:SECONDS. */
typedef struct {
    int mode;         /* mu_prefill_mode */
    const char *node; /* NULL: the only registered node */
    int breaker_n, breaker_s;
} cli_lane;
/* Parses one option at argv[*i]; returns 1, 0 or -1 as cli_sample_opt. */
int cli_lane_opt(const char *cmd, int argc, char **argv, int *i, cli_lane *l);
#define CLI_LANE_USAGE "[--prefill local|auto|remote] [--node NAME] [--breaker N:SECONDS]"

/* Runs mu_model_check on m with progress on stderr (a rewritten line with
 * bytes and rate when stderr is a terminal; else, with `lines`, a plain line
 * per quarter). Returns 0, or 1 after printing "CMD: <error>". */
int cli_check_model(const char *cmd, const mu_model *m, int n_threads, bool lines);

/* Prefill progress of one job (its MU_EV_PROGRESS events: submit with
 * mu_gen_req.progress = cli_prefill_wanted()) on stderr when stderr is a
 * terminal: "prefill: D/T tokens (P%), R tok/s" rewritten in place, for
 * prompts of more than CLI_PREFILL_MIN tokens, erased when the prefill is
 * done (before the reply's first text) or the job ends. */
#define CLI_PREFILL_MIN 512
typedef struct {
    double t0, last;
    bool shown;
} cli_prefill;
bool cli_prefill_wanted(void);
/* One MU_EV_PROGRESS event (its n_done and n_total). */
void cli_prefill_event(cli_prefill *p, int n_done, int n_total);
/* Erases the line if one is shown (call when the job ends). */
void cli_prefill_end(cli_prefill *p);
/* The line for n_done of n_total tokens after dt seconds (for tests and
 * the display). */
void cli_prefill_line(char *buf, size_t cap, int n_done, int n_total, double dt);

/* The model used when -m is omitted (bundled, or generated on first use).
 * Returns a path or NULL after printing why. */
const char *cli_default_model(void);
/* The bundled models/muser-default.gguf next to the binary (or one level
 * up), or NULL when there is none; ignores $MUSER_MODEL. */
const char *cli_bundled_model(void);

/* Set by `muser up` before it runs cmd_serve: called once the server accepts
 * connections; returning true stops the server at once (up's
 * --exit-after-start). NULL: nothing is called. */
extern bool (*cli_serve_ready)(bool tls, const char *host, int port);

#endif
