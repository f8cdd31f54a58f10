/* bench.c: `muser bench`: prefill and decode speed at fixed context depths.
 *   muser bench [-m MODEL] [--depths 512,2048,8192] [--gen 64] [--json]
 *               [--threads N] [--kern NAME] [--ubatch N] [--reps N] [--parallel N] [--profile]
 * For each depth: one job on a fresh session, a prompt of `depth` tokens
 * (BOS, then a fixed LCG sequence, the same one bench/compare-llamacpp gives
 * llama.cpp) prefilled in chunks of --ubatch tokens (llama.cpp's batch size,
 * 512), then --gen greedy decode steps starting from token 5 (the job's one
 * forced token). Reports prompt tokens/s,
 * generated tokens/s, peak RSS, kernel table, thread count and commit; with
 * --json one JSON object per depth per line, including the greedy token ids
 * (so a comparison can check they agree with llama.cpp's). --profile adds
 * the engine's phase timers: ms per decode step and per prefill token.
 * Owns: timing and reporting only; generation runs through the scheduler
 * (include/muser_gen.h) like every other program, and the times are the
 * job's own (prompt: slot assigned -> first token; decode: first token ->
 * last). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../../include/muser_gen.h"
#include "cli.h"

#ifndef MU_COMMIT
#define MU_COMMIT "unknown"
#endif

static int usage(void) {
    fprintf(stderr,
            "usage: muser bench [-m MODEL] [--depths 512,2048,8192] [--gen 64] [--json]\n"
            "                   [--threads N] [--kern ref|avx2|avx512|amx|neon] [--ubatch 512] [--reps 1]\n"
            "                   " CLI_BACKEND_USAGE "\n"
            "                   [--parallel N] [--profile]\n");
    return 1;
}

/* Weight bytes one decode step reads: every tensor but the token
 * embedding (one row of it is read), unless the logits use it too. */
static double step_weight_bytes(const mu_model *m) {
    double total = 0, embd = 0;
    bool has_output = false;
    mu_tensor_info t;
    for (int i = 0; i < mu_model_n_tensors(m); i++) {
        if (mu_model_tensor(m, i, &t, NULL)) continue;
        total += (double)t.bytes;
        if (!strcmp(t.name, "token_embd.weight")) embd = (double)t.bytes;
        if (!strcmp(t.name, "output.weight")) has_output = true;
    }
    return has_output ? total - embd : total;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* BOS, then x = (x * 1103515245 + 12345) mod 2^31 from 12345, token x % 30000
 * (capped below the vocabulary), as in bench/compare-llamacpp. */
static void bench_prompt(int32_t *p, int n, int32_t bos, int n_vocab) {
    const int mod = n_vocab < 30000 ? n_vocab : 30000;
    unsigned long long x = 12345;
    p[0] = bos >= 0 ? bos : 1;
    for (int i = 1; i < n; i++) {
        x = (x * 1103515245ull + 12345ull) % 2147483648ull;
        p[i] = (int32_t)(x % (unsigned long long)mod);
    }
}

typedef struct {
    double prefill_s, decode_s;
    int32_t *ids;   /* [gen] greedy ids, without a final end-of-generation token */
    int n_ids;
    int n_steps;    /* decode forward passes: n_ids, plus one when generation ended */
} bench_run;

/* One depth: prefill `depth` prompt tokens, then `gen` greedy steps, or
 * fewer when the model picks an end-of-generation token (llama.cpp stops
 * there too, so both engines do the same work). Each run gets a scheduler
 * with a fresh session of just the context it needs (depth + gen + 16), as
 * a fresh llama.cpp context has: the KV cache's size shapes the attention's
 * memory access. */
static int bench_depth(mu_engine *e, const int32_t *prompt, int depth, int gen, int ubatch, int n_par, bench_run *r,
                       mu_err *err) {
    static const int32_t first = 5;
    mu_gen_req q = {.prompt = prompt, .n_prompt = depth, .n_predict = 1 + gen, .sp = {.temp = 0},
                    .no_text = true, .forced = &first, .n_forced = 1};
    mu_sched_opts so = {.n_slots = n_par, .n_ctx = depth + gen + 16, .prefill_chunk = ubatch};
    mu_sched *sched;
    mu_job *jobs[MU_SCHED_MAX_SLOTS];
    int rc = mu_sched_new(e, &so, &sched, err);
    if (rc) return rc;
    /* --parallel N: N choices of one request (the prompt evaluated once,
     * its KV copied to the other slots), so the slots decode in the same
     * steps; decode time is the slowest job's, the tokens are all jobs' (an
     * aggregate rate), the ids are job 0's */
    mu_gen_req qs[MU_SCHED_MAX_SLOTS];
    for (int j = 0; j < n_par; j++) qs[j] = q;
    if ((rc = mu_sched_submit(sched, qs, n_par, jobs, err))) {
        mu_sched_free(sched);
        return rc;
    }
    const int n_sub = n_par;
    r->n_ids = r->n_steps = 0;
    r->prefill_s = r->decode_s = 0;
    for (int j = 0; j < n_sub; j++) {
        mu_gen_event ev;
        int n_tok = 0, steps = 0;
        mu_job_wait_end(jobs[j]); /* no wake-up per token while timing */
        while (mu_job_next(jobs[j], &ev, 0) == 1) {
            if (ev.kind == MU_EV_TOKEN && n_tok++ > 0) {
                if (j == 0) r->ids[r->n_ids] = ev.tok.id;
                if (j == 0) r->n_ids++;
                steps++;
            }
            if (ev.kind != MU_EV_FINISH) continue;
            if ((ev.finish == MU_FINISH_ERROR || ev.finish == MU_FINISH_CANCEL) && !rc)
                rc = mu_fail(err, MU_E_STATE, "%s", ev.err[0] ? ev.err : "generation failed");
            if (j == 0 && ev.finish == MU_FINISH_STOP) r->n_ids--;
            r->n_steps += steps;
            if (ev.stats.prompt_ms / 1e3 > r->prefill_s) r->prefill_s = ev.stats.prompt_ms / 1e3;
            if (ev.stats.gen_ms / 1e3 > r->decode_s) r->decode_s = ev.stats.gen_ms / 1e3;
            break;
        }
        mu_job_free(jobs[j]);
    }
    mu_sched_free(sched);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The phase timers of one depth's runs: ms per decode step, ms per prompt
 * token (prefill), and each phase's share of the decode step. */
static void print_profile(const mu_engine *e, int depth, long long reps, bool json) {
    mu_profile p;
    mu_engine_profile_get(e, &p);
    const double nd = p.decode_passes > 0 ? (double)p.decode_passes : 1, np = (double)depth * (double)reps;
    double total = 0;
    for (int i = 0; i < MU_PH_COUNT; i++) total += p.decode_s[i];
    if (json) {
        printf(", \"profile_decode_ms_per_step\": {");
        for (int i = 0; i < MU_PH_COUNT; i++) printf("%s\"%s\": %.4f", i ? ", " : "", mu_phase_names[i], p.decode_s[i] / nd * 1e3);
        printf("}, \"profile_prefill_ms_per_token\": {");
        for (int i = 0; i < MU_PH_COUNT; i++) printf("%s\"%s\": %.4f", i ? ", " : "", mu_phase_names[i], p.prefill_s[i] / np * 1e3);
        printf("}");
        return;
    }
    printf("  profile %-9s %12s %8s %18s\n", "phase", "decode ms/step", "share", "prefill ms/token");
    for (int i = 0; i < MU_PH_COUNT; i++)
        printf("  profile %-9s %12.3f %7.1f%% %18.4f\n", mu_phase_names[i], p.decode_s[i] / nd * 1e3,
               total > 0 ? 100 * p.decode_s[i] / total : 0, p.prefill_s[i] / np * 1e3);
    printf("  profile %-9s %12.3f %7.1f%%   (%ld decode steps)\n", "total", total / nd * 1e3, 100.0, p.decode_passes);
}

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *kern = NULL, *depths_arg = "512,2048,8192";
    long long gen = 64, threads = 0, ubatch = 512, reps = 1, par = 1;
    bool json = false, profile = false;
    cli_backend backend = CLI_BACKEND_DEFAULT;
    for (int i = 1; i < argc; i++) {
        int bo = cli_backend_opt("muser bench", argc, argv, &i, &backend);
        if (bo < 0) return 1;
        if (bo) continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                \
    do {                                                                      \
        if (!v) return cli_fail("muser bench: option %s needs a value", a);   \
        i++;                                                                  \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model = v; }
        else if (!strcmp(a, "--profile")) profile = true;
        else if (!strcmp(a, "--depths")) { NEED(); depths_arg = v; }
        else if (!strcmp(a, "--gen")) { NEED(); if (!cli_int(v, 1, 1 << 20, &gen)) return cli_fail("muser bench: --gen must be 1..1048576: %s", v); }
        else if (!strcmp(a, "--threads")) { NEED(); if (!cli_int(v, 1, 512, &threads)) return cli_fail("muser bench: --threads must be 1..512: %s", v); }
        else if (!strcmp(a, "--ubatch")) { NEED(); if (!cli_int(v, 1, 1 << 20, &ubatch)) return cli_fail("muser bench: --ubatch must be 1..1048576: %s", v); }
        else if (!strcmp(a, "--reps")) { NEED(); if (!cli_int(v, 1, 1000, &reps)) return cli_fail("muser bench: --reps must be 1..1000: %s", v); }
        else if (!strcmp(a, "--kern")) { NEED(); kern = v; }
        else if (!strcmp(a, "--parallel")) { NEED(); if (!cli_int(v, 1, MU_SCHED_MAX_SLOTS, &par)) return cli_fail("muser bench: --parallel must be 1..%d: %s", MU_SCHED_MAX_SLOTS, v); }
        else if (!strcmp(a, "--json")) json = true;
        else return cli_fail("muser bench: unknown option '%s' (see muser bench --help)", a);
#undef NEED
    }
    int32_t *depths = NULL;
    int n_depths = 0;
    if (!cli_ids(depths_arg, &depths, &n_depths) || n_depths == 0)
        return cli_fail("muser bench: --depths must be a comma-separated list of positive integers: %s", depths_arg);
    for (int i = 0; i < n_depths; i++)
        if (depths[i] < 1) {
            const int bad = depths[i];
            free(depths);
            return cli_fail("muser bench: --depths must be positive: %d", bad);
        }
    if (!model && !(model = cli_default_model())) {
        free(depths);
        return 1;
    }

    mu_err err = {0};
    mu_model *m = NULL;
    mu_engine *e = NULL;
    int32_t *prompt = NULL, *ids = NULL;
    double *pre = NULL, *dec = NULL;
    int rc = 1, n_ids = 0, n_steps = 0;
    if (mu_model_open(model, &m, &err)) {
        cli_fail("muser bench: %s", err.msg);
        goto done;
    }
    const mu_model_info *I = mu_model_get_info(m);
    int max_depth = 0;
    for (int i = 0; i < n_depths; i++) max_depth = depths[i] > max_depth ? depths[i] : max_depth;
    if (max_depth + gen + 16 > I->n_ctx_train) {
        cli_fail("muser bench: depth %d + gen %lld exceed the model's context (%d)", max_depth, gen, I->n_ctx_train);
        goto done;
    }
    mu_engine_opts eo = cli_engine_opts(&backend, (int)threads, kern);
    if (mu_engine_new(m, &eo, &e, &err)) {
        cli_fail("muser bench: %s", err.msg);
        goto done;
    }
    prompt = malloc((size_t)max_depth * sizeof *prompt);
    ids = malloc(((size_t)gen + 1) * sizeof *ids);
    pre = malloc((size_t)reps * sizeof *pre);
    dec = malloc((size_t)reps * sizeof *dec);
    if (!prompt || !ids || !pre || !dec) {
        cli_fail("muser bench: out of memory");
        goto done;
    }
    bench_prompt(prompt, max_depth, I->bos, I->n_vocab);

    /* warm-up: fault the weights in and spin up the pool */
    {
        bench_run w = {.ids = ids};
        if (bench_depth(e, prompt, max_depth < 32 ? max_depth : 32, 2, (int)ubatch, 1, &w, &err)) {
            cli_fail("muser bench: %s", err.msg);
            goto done;
        }
    }
    const double wb = step_weight_bytes(m);
    if (!json)
        printf("model %s (%.1f MB of weights read per decode step)\nbackend %s, kern %s, threads %d, ubatch %lld, commit %s\n",
               model, wb / 1e6, mu_engine_backend(e), mu_engine_kern_name(e), mu_engine_n_threads(e), ubatch, MU_COMMIT);
    for (int di = 0; di < n_depths; di++) {
        const int depth = depths[di];
        if (profile) mu_engine_profile(e, true); /* zeroed per depth */
        for (int r = 0; r < reps; r++) {
            bench_run br = {.ids = ids};
            if (bench_depth(e, prompt, depth, (int)gen, (int)ubatch, (int)par, &br, &err)) {
                cli_fail("muser bench: %s", err.msg);
                goto done;
            }
            pre[r] = br.prefill_s;
            dec[r] = br.decode_s;
            n_ids = br.n_ids;
            n_steps = br.n_steps;
        }
        qsort(pre, (size_t)reps, sizeof *pre, cmp_double);
        qsort(dec, (size_t)reps, sizeof *dec, cmp_double);
        const double ps = pre[reps / 2], ds = dec[reps / 2];
        if (json) {
            printf("{\"model\": \"%s\", \"depth\": %d, \"gen\": %lld, \"prefill_s\": %.6f, \"decode_s\": %.6f, "
                   "\"prefill_tps\": %.2f, \"decode_tokens\": %d, \"decode_tps\": %.2f, \"peak_rss_mib\": %.1f, "
                   "\"step_weight_bytes\": %.0f, \"decode_weight_gbps\": %.2f, "
                   "\"backend\": \"%s\", \"kern\": \"%s\", \"threads\": %d, \"ubatch\": %lld, \"reps\": %lld, "
                   "\"parallel\": %lld, \"commit\": \"%s\", \"ids\": [",
                   model, depth, gen, ps, ds, depth / ps, n_steps, n_steps / ds, peak_rss_mib(), wb,
                   n_steps / par * wb / ds / 1e9,
                   mu_engine_backend(e), mu_engine_kern_name(e), mu_engine_n_threads(e), ubatch, reps, par, MU_COMMIT);
            for (int g = 0; g < n_ids; g++) printf("%s%d", g ? ", " : "", ids[g]);
            printf("]");
            if (profile) print_profile(e, depth, reps, true);
            printf("}\n");
        } else {
            /* the weights are read once per step, whatever the slots */
            printf("depth %6d: prefill %8.2f tok/s (%.3f s)   decode %7.2f tok/s (%.3f s, %d tokens%s%s, weights at "
                   "%.1f GB/s)   peak RSS %.0f MiB\n",
                   depth, depth / ps, ps, n_steps / ds, ds, n_steps, par > 1 ? " of all slots" : "",
                   n_steps < gen * par ? ", stopped at end of generation" : "", n_steps / par * wb / ds / 1e9,
                   peak_rss_mib());
            if (profile) print_profile(e, depth, reps, false);
        }
        fflush(stdout);
    }
    rc = 0;
done:
    free(prompt);
    free(ids);
    free(pre);
    free(dec);
    free(depths);
    mu_engine_free(e);
    mu_model_close(m);
    return rc;
}
