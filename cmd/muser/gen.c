/* gen.c: `muser gen`: write a Muse Glimmer GGUF with seeded random weights.
 * Owns: the options (presets, geometry, types, keys), reading the template
 * and corpus files, the progress lines, the exit code, and removing OUT.tmp
 * when a signal interrupts the run.
 * Does not own: the model itself (presets, tensors, weights, quantization,
 * vocabulary, the GGUF bytes): src/synth behind include/muser_synth.h.
 * Key design choice: every check of an option happens here first, with the
 * option's name in the message; the library checks again for other callers. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../include/muser_synth.h"
#include "../../src/base/err.h"
#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muser gen -o OUT.gguf [options]\n"
            "  --preset tiny|fixture|1b|full   geometry defaults (tiny)\n"
            "  --layers N --embd N --ff N --heads N --kv-heads N --head-dim N --vocab N\n"
            "  --window N --ctx N              sliding window, context length\n"
            "  --pattern N                     period: layer il slides iff il %% N < N-1, written as a scalar\n"
            "  --pattern-bools 1,1,1,0,...     one flag per layer (1 = sliding), written as a bool array\n"
            "                                  (default: bool array from period 4)\n"
            "  --type f32|f16|bf16|q8_0|q4_k|q5_k|q6_k|nvfp4   one type for every matrix\n"
            "         q4_k_m|q4_k_s|q5_k_m|q5_k_s      llama.cpp's mixes (default q4_k_m)\n"
            "  --seed S                        (1)\n"
            "  --softcap X | --no-softcap      final logit softcap (20); --no-softcap omits the key\n"
            "  --logit-scale X                 (0.19611613)\n"
            "  --rope-base X                   (500000) --rope-base-swa X adds the sliding-layer key\n"
            "  --name NAME                     general.name\n"
            "  --merges N                      cap on learned BPE merges\n"
            "  --corpus FILE                   BPE training text (default: embedded corpus)\n"
            "  --template FILE | --no-template chat template (default: a minimal built-in one)\n"
            "  --eom-key                       also write tokenizer.ggml.eom_token_id (llama.cpp then stops on <|eom|>)\n"
            "  --quant auto|careful|fast       K-quant search (auto: careful up to 5e8 weights)\n"
            "  --threads N                     worker threads (all cores); output does not depend on it\n"
            "muser gen --dflash -o OUT.gguf [--target MODEL.gguf] ...   a random DFlash drafter (--dflash --help)\n"
            "muser gen --mmproj OUT.gguf [--preset tiny|full] ...   a random vision projector (--mmproj x --help)\n");
}

typedef struct {
    mu_synth_opts o;
    const char *out, *template_path, *corpus_path;
    bool *pattern_bools; /* n_pattern_bools entries when given; o.swa_layers points here */
    int n_pattern_bools;
} gen_cfg;

static bool parse_bools(const char *s, bool **out, int *n) {
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    if (cap > MU_SYNTH_MAX_LAYERS) return false;
    bool *b = malloc((size_t)cap * sizeof *b);
    if (!b) return false;
    int k = 0;
    for (const char *p = s;;) {
        if ((p[0] == '0' || p[0] == '1') && (p[1] == ',' || p[1] == 0)) {
            b[k++] = p[0] == '1';
            if (!p[1]) break;
            p += 2;
        } else {
            free(b);
            return false;
        }
    }
    *out = b;
    *n = k;
    return true;
}

/* ---- options ------------------------------------------------------------ */

static int opt_int(const char *opt, const char *v, long long lo, long long hi, int *out) {
    long long x;
    if (!cli_int(v, lo, hi, &x)) return cli_fail("muser gen: %s needs an integer in [%lld, %lld]: %s", opt, lo, hi, v);
    *out = (int)x;
    return 0;
}

static int opt_float(const char *opt, const char *v, double lo, double hi, double *out) {
    if (!cli_float(v, lo, hi, out)) return cli_fail("muser gen: %s needs a number in [%g, %g]: %s", opt, lo, hi, v);
    return 0;
}

static int parse_args(int argc, char **argv, gen_cfg *c) {
    memset(c, 0, sizeof *c);
    mu_synth_opts *o = &c->o;
    mu_synth_defaults(o);
    /* the preset first, so explicit options override it wherever they appear */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset")) {
            if (i + 1 >= argc) return cli_fail("muser gen: --preset needs a value");
            if (mu_synth_preset(o, argv[i + 1], NULL))
                return cli_fail("muser gen: unknown preset (tiny, fixture, 1b, full): %s", argv[i + 1]);
        }
    }
    bool custom = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        /* flags without a value */
        if (!strcmp(a, "--no-softcap")) { o->has_softcap = false; continue; }
        if (!strcmp(a, "--no-template")) { o->no_chat_template = true; continue; }
        if (!strcmp(a, "--eom-key")) { o->eom_key = true; continue; }
        if (a[0] != '-') return cli_fail("muser gen: unexpected argument: %s", a);
        if (i + 1 >= argc) return cli_fail("muser gen: %s needs a value", a);
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) c->out = v;
        else if (!strcmp(a, "--preset")) continue;
        else if (!strcmp(a, "--layers")) rc = opt_int(a, v, 1, MU_SYNTH_MAX_LAYERS, &o->n_layer), custom = true;
        else if (!strcmp(a, "--embd")) rc = opt_int(a, v, 1, 1 << 20, &o->n_embd), custom = true;
        else if (!strcmp(a, "--ff")) rc = opt_int(a, v, 1, 1 << 22, &o->n_ff), custom = true;
        else if (!strcmp(a, "--heads")) rc = opt_int(a, v, 1, 4096, &o->n_head), custom = true;
        else if (!strcmp(a, "--kv-heads")) rc = opt_int(a, v, 1, 4096, &o->n_head_kv), custom = true;
        else if (!strcmp(a, "--head-dim")) rc = opt_int(a, v, 2, 4096, &o->head_dim), custom = true;
        else if (!strcmp(a, "--vocab")) rc = opt_int(a, v, MU_SYNTH_MIN_VOCAB, 1 << 24, &o->n_vocab), custom = true;
        else if (!strcmp(a, "--window")) rc = opt_int(a, v, 1, INT32_MAX, &o->n_swa), custom = true;
        else if (!strcmp(a, "--ctx")) rc = opt_int(a, v, 1, INT32_MAX, &o->n_ctx), custom = true;
        else if (!strcmp(a, "--pattern")) {
            rc = opt_int(a, v, 1, MU_SYNTH_MAX_LAYERS, &o->swa_period);
            o->swa_period_key = true;
            custom = true;
        } else if (!strcmp(a, "--pattern-bools")) {
            free(c->pattern_bools);
            c->pattern_bools = NULL;
            if (!parse_bools(v, &c->pattern_bools, &c->n_pattern_bools))
                return cli_fail("muser gen: --pattern-bools needs a comma-separated list of 0/1: %s", v);
            custom = true;
        } else if (!strcmp(a, "--type")) {
            int t = mu_synth_type_parse(v);
            if (t < 0)
                return cli_fail("muser gen: unknown type (f32 f16 bf16 q8_0 q4_k q5_k q6_k nvfp4 q4_k_m q4_k_s q5_k_m q5_k_s): %s", v);
            o->type = (mu_synth_type)t;
        } else if (!strcmp(a, "--seed")) {
            long long s;
            if (!cli_int(v, 0, INT64_MAX, &s)) return cli_fail("muser gen: --seed needs a non-negative integer: %s", v);
            o->seed = (uint64_t)s;
        } else if (!strcmp(a, "--softcap")) rc = opt_float(a, v, 1e-3, 1e6, &o->softcap), o->has_softcap = true;
        else if (!strcmp(a, "--logit-scale")) rc = opt_float(a, v, 1e-6, 1e6, &o->logit_scale);
        else if (!strcmp(a, "--rope-base")) rc = opt_float(a, v, 1.0, 1e12, &o->rope_base);
        else if (!strcmp(a, "--rope-base-swa")) rc = opt_float(a, v, 1.0, 1e12, &o->rope_base_swa);
        else if (!strcmp(a, "--name")) o->name = v;
        else if (!strcmp(a, "--merges")) rc = opt_int(a, v, 0, 1 << 24, &o->max_merges);
        else if (!strcmp(a, "--template")) c->template_path = v;
        else if (!strcmp(a, "--corpus")) c->corpus_path = v;
        else if (!strcmp(a, "--threads")) rc = opt_int(a, v, 1, MU_SYNTH_MAX_THREADS, &o->n_threads);
        else if (!strcmp(a, "--quant")) {
            if (!strcmp(v, "auto")) o->quant = MU_SYNTH_QUANT_AUTO;
            else if (!strcmp(v, "careful")) o->quant = MU_SYNTH_QUANT_CAREFUL;
            else if (!strcmp(v, "fast")) o->quant = MU_SYNTH_QUANT_FAST;
            else return cli_fail("muser gen: --quant is auto, careful or fast: %s", v);
        } else return cli_fail("muser gen: unknown option: %s (see muser gen --help)", a);
        if (rc) return rc;
    }
    if (custom) o->preset = NULL;
    if (!c->out) return cli_fail("muser gen: missing -o OUT.gguf");
    if (o->n_head % o->n_head_kv)
        return cli_fail("muser gen: --heads %d is not a multiple of --kv-heads %d", o->n_head, o->n_head_kv);
    if (o->head_dim % 2) return cli_fail("muser gen: --head-dim must be even (RoPE pairs): %d", o->head_dim);
    if (c->pattern_bools && c->n_pattern_bools != o->n_layer)
        return cli_fail("muser gen: --pattern-bools has %d entries for %d layers", c->n_pattern_bools, o->n_layer);
    if (c->pattern_bools && o->swa_period_key) return cli_fail("muser gen: give --pattern or --pattern-bools, not both");
    if ((int64_t)o->n_head * o->head_dim > (1 << 22)) return cli_fail("muser gen: attention width too large");
    if (c->template_path && o->no_chat_template) return cli_fail("muser gen: give --template or --no-template, not both");
    o->swa_layers = c->pattern_bools;
    return 0;
}

static int read_file(const char *path, size_t max, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail("muser gen: cannot open: %s: %s", path, strerror(errno));
    char *b = malloc(max + 1);
    size_t n = b ? fread(b, 1, max + 1, f) : 0;
    int bad = !b || ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return cli_fail("muser gen: cannot read: %s", path);
    }
    if (n > max) {
        free(b);
        return cli_fail("muser gen: file too large (over %zu bytes): %s", max, path);
    }
    b[n] = 0;
    *out = b;
    *len = n;
    return 0;
}

/* ---- progress ----------------------------------------------------------- */

typedef struct {
    const gen_cfg *c;
    double t0, t_vocab; /* start of the command, vocabulary time */
    uint64_t total, done;
    double t_open, last;
    bool on, tty;
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress_tick(progress *p, bool final) {
    if (!p->on) return;
    double t = now_s();
    if (!final && t - p->last < (p->tty ? 0.5 : 10.0)) return;
    p->last = t;
    double el = t - p->t_open, mb = (double)p->done / 1e6;
    fprintf(stderr, "%sgen: %3.0f%% %.2f of %.2f GB, %.0f MB/s, %.0f s%s", p->tty ? "\r" : "",
            100.0 * (double)p->done / (double)(p->total ? p->total : 1), mb / 1e3, (double)p->total / 1e9,
            el > 0 ? mb / el : 0.0, el, final || !p->tty ? "\n" : "");
}

/* Lines only for files over 64 MiB; smaller ones are written in silence. */
static void on_progress(const mu_synth_progress *e, void *user) {
    progress *p = user;
    const gen_cfg *c = p->c;
    switch (e->event) {
    case MU_SYNTH_EV_VOCAB:
        p->t_vocab = now_s() - p->t0;
        break;
    case MU_SYNTH_EV_OPEN:
        p->total = e->file_bytes;
        p->t_open = p->last = now_s();
        p->on = e->file_bytes > (64u << 20);
        p->tty = isatty(2) != 0;
        if (p->on)
            fprintf(stderr, "gen: %s, %d layers, %llu weights, %s quantization, %d threads -> %s (%.2f GB)\n",
                    mu_synth_type_label(c->o.type), c->o.n_layer, (unsigned long long)e->n_weights,
                    e->fast ? "fast" : "careful", e->n_threads, c->out, (double)e->file_bytes / 1e9);
        break;
    case MU_SYNTH_EV_DATA:
        p->done = e->bytes_done;
        progress_tick(p, false);
        break;
    case MU_SYNTH_EV_DONE:
        p->done = e->bytes_done;
        progress_tick(p, true);
        if (p->on)
            fprintf(stderr, "gen: done in %.1f s (vocabulary %.2f s: %d merges, %d learned tokens)\n", now_s() - p->t0,
                    p->t_vocab, e->n_merges, e->n_learned);
        break;
    }
}

/* ---- entry -------------------------------------------------------------- */

/* An interrupted run removes its OUT.tmp (the library only renames on success). */
static char tmp_path[4096];

static void on_signal(int sig) {
    if (tmp_path[0]) unlink(tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- DFlash drafters ------------------------------------------------------ */

static void usage_dflash(FILE *f) {
    fprintf(f,
            "usage: muser gen --dflash -o OUT.gguf [--target MODEL.gguf] [options]\n"
            "  a DFlash drafter with seeded random weights in llama.cpp's dflash layout\n"
            "  --target MODEL.gguf             the target (default: the bundled model): width, tokenizer\n"
            "  --layers N                      drafter layers (1)\n"
            "  --ff N --heads N --kv-heads N --head-dim N   (the target's)\n"
            "  --block-size N                  trained block: last token + N-1 drafts (16)\n"
            "  --target-layers 1,4,7           target layer inputs the drafter reads (three, spread)\n"
            "  --mask-token ID                 (<|mask|>, else the last <|reserved_N|>, else the last id)\n"
            "  --own-head                      also write token_embd and output (else the target's are used)\n"
            "  --type f32|f16|bf16|q8_0        matrices (f16)\n"
            "  --seed S                        (1)\n"
            "  --name NAME                     general.name\n");
}

static int cmd_gen_dflash(int argc, char **argv) {
    mu_synth_dflash_opts o;
    mu_synth_dflash_defaults(&o);
    const char *out = NULL;
    int tl[16], n_tl = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--dflash")) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_dflash(stdout);
            return 0;
        }
        if (!strcmp(a, "--own-head")) {
            o.own_head = true;
            continue;
        }
        if (a[0] != '-') return cli_fail("muser gen: unexpected argument: %s", a);
        if (i + 1 >= argc) return cli_fail("muser gen: %s needs a value", a);
        const char *v = argv[++i];
        int rc = 0, x = -1;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--target")) o.target = v;
        else if (!strcmp(a, "--layers")) rc = opt_int(a, v, 1, 64, &o.n_layer);
        else if (!strcmp(a, "--ff")) rc = opt_int(a, v, 32, 1 << 18, &o.n_ff);
        else if (!strcmp(a, "--heads")) rc = opt_int(a, v, 1, 1024, &o.n_head);
        else if (!strcmp(a, "--kv-heads")) rc = opt_int(a, v, 1, 1024, &o.n_head_kv);
        else if (!strcmp(a, "--head-dim")) rc = opt_int(a, v, 32, 1024, &o.head_dim);
        else if (!strcmp(a, "--block-size")) rc = opt_int(a, v, 2, 65, &o.block_size);
        else if (!strcmp(a, "--mask-token")) rc = opt_int(a, v, 0, INT32_MAX, &x), o.mask_id = x;
        else if (!strcmp(a, "--name")) o.name = v;
        else if (!strcmp(a, "--seed")) {
            long long sd;
            if (!cli_int(v, 0, INT64_MAX, &sd)) return cli_fail("muser gen: --seed needs a non-negative integer: %s", v);
            o.seed = (uint64_t)sd;
        } else if (!strcmp(a, "--type")) {
            int t = mu_synth_type_parse(v);
            if (t != MU_SYNTH_F32 && t != MU_SYNTH_F16 && t != MU_SYNTH_BF16 && t != MU_SYNTH_Q8_0)
                return cli_fail("muser gen: a drafter's --type is f32, f16, bf16 or q8_0: %s", v);
            o.type = (mu_synth_type)t;
        } else if (!strcmp(a, "--target-layers")) {
            n_tl = 0;
            for (const char *p = v; *p;) {
                char *end;
                long id = strtol(p, &end, 10);
                if (end == p || id < 0 || id > 4096 || n_tl == 16 || (*end && *end != ','))
                    return cli_fail("muser gen: --target-layers needs up to 16 layer ids, comma-separated: %s", v);
                tl[n_tl++] = (int)id;
                p = *end ? end + 1 : end;
            }
            o.target_layers = tl;
            o.n_target_layers = n_tl;
        } else return cli_fail("muser gen: unknown option with --dflash: %s", a);
        if (rc) return rc;
    }
    if (!out) return cli_fail("muser gen: -o OUT.gguf is required");
    if (!o.target && !(o.target = cli_default_model())) return 1;
    mu_err err = {0};
    if (mu_synth_dflash_write(&o, out, &err)) return cli_fail("muser gen: %s", err.msg);
    fprintf(stderr, "muser gen: wrote drafter %s\n", out);
    return 0;
}

/* ---- vision projectors ------------------------------------------------ */

static void usage_mmproj(FILE *f) {
    fprintf(f,
            "usage: muser gen --mmproj OUT.gguf [options]\n"
            "  a Muse Glimmer vision projector with seeded random weights in llama.cpp's mmproj layout\n"
            "  --preset tiny|full              tiny: 4 layers of width 64, output 256 (the tiny model's);\n"
            "                                  full: the release's geometry, output 6656 (tiny)\n"
            "  --width N                       output width: the text model's embedding width (the preset's)\n"
            "  --type f32|f16|bf16|q8_0        matrices (f16)\n"
            "  --seed S                        (1)\n"
            "  --name NAME                     general.name\n");
}

static int cmd_gen_mmproj(int argc, char **argv) {
    mu_synth_mmproj_opts o;
    mu_synth_mmproj_defaults(&o);
    const char *out = NULL;
    int width = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--preset") && i + 1 < argc && mu_synth_mmproj_preset(&o, argv[i + 1], NULL))
            return cli_fail("muser gen: unknown projector preset (tiny, full): %s", argv[i + 1]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_mmproj(stdout);
            return 0;
        }
        if (a[0] != '-') return cli_fail("muser gen: unexpected argument: %s", a);
        if (i + 1 >= argc) return cli_fail("muser gen: %s needs a value", a);
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--mmproj") || !strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--preset")) continue;
        else if (!strcmp(a, "--width")) rc = opt_int(a, v, 1, 1 << 16, &width);
        else if (!strcmp(a, "--name")) o.name = v;
        else if (!strcmp(a, "--seed")) {
            long long sd;
            if (!cli_int(v, 0, INT64_MAX, &sd)) return cli_fail("muser gen: --seed needs a non-negative integer: %s", v);
            o.seed = (uint64_t)sd;
        } else if (!strcmp(a, "--type")) {
            int t = mu_synth_type_parse(v);
            if (t != MU_SYNTH_F32 && t != MU_SYNTH_F16 && t != MU_SYNTH_BF16 && t != MU_SYNTH_Q8_0)
                return cli_fail("muser gen: a projector's --type is f32, f16, bf16 or q8_0: %s", v);
            o.type = (mu_synth_type)t;
        } else return cli_fail("muser gen: unknown option with --mmproj: %s", a);
        if (rc) return rc;
    }
    if (!out) return cli_fail("muser gen: --mmproj needs the output path");
    if (width) o.n_out = width;
    mu_err err = {0};
    if (mu_synth_mmproj_write(&o, out, &err)) return cli_fail("muser gen: %s", err.msg);
    fprintf(stderr, "muser gen: wrote projector %s\n", out);
    return 0;
}

int cmd_gen(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--dflash")) return cmd_gen_dflash(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--mmproj")) return cmd_gen_mmproj(argc, argv);
    gen_cfg c;
    int rc = parse_args(argc, argv, &c);
    if (rc) {
        free(c.pattern_bools);
        return rc < 0 ? 0 : rc;
    }
    progress pg = {.c = &c, .t0 = now_s()};
    char *tmpl = NULL, *corpus = NULL;
    size_t tmpl_len = 0, corpus_len = 0;
    mu_err err = {0};
    if (c.template_path && (rc = read_file(c.template_path, 1 << 20, &tmpl, &tmpl_len))) goto out;
    if (c.corpus_path && (rc = read_file(c.corpus_path, (size_t)256 << 20, &corpus, &corpus_len))) goto out;
    c.o.chat_template = tmpl;
    c.o.chat_template_len = tmpl_len;
    c.o.corpus = corpus;
    c.o.corpus_len = corpus_len;
    if (strlen(c.out) + 5 > sizeof tmp_path) {
        rc = cli_fail("muser gen: output path too long: %s", c.out);
        goto out;
    }
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", c.out);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    if (mu_synth_write(&c.o, c.out, on_progress, &pg, &err)) rc = cli_fail("muser gen: %s", err.msg);
    tmp_path[0] = 0;
out:
    free(tmpl);
    free(corpus);
    free(c.pattern_bools);
    return rc;
}
