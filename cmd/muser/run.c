/* run.c: `muser run`: one-shot generation.
 *   muser run [-m MODEL] (--prompt-ids 1,2,3 | -p TEXT | -f FILE) [-n N]
 *             [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S]
 *             [--json] [--top K] [--ignore-eos] [--ctx N] [--threads N] [--kern NAME]
 *             [--check-tensors]
 * With --json, one line per generated token: {"id": ID, "top": [[id, prob], ...]}
 * (prob = softmax of the final logits, after logit scale and softcap). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser_gen.h"
#include "cli.h"
#include "prompt.h"

static int usage(void) {
    fprintf(stderr,
            "usage: muser run [-m MODEL] (--prompt-ids 1,2,3 | -p TEXT | -f FILE) [-n N] [--temp T]\n"
            "                 [--top-k K] [--top-p P] [--min-p P] [--seed S] [--json] [--top K]\n"
            "                 [--ignore-eos] [--ctx N] [--threads N] [--kern ref|avx2|avx512|neon]\n"
            "                 " CLI_BACKEND_USAGE "\n"
            "                 [--check-tensors]\n");
    return 1;
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *ids_arg = NULL, *text = NULL, *file = NULL, *kern = NULL;
    long long n_gen = 64, top = 0, threads = 0, ctx = 0;
    mu_sample_params sp = mu_sample_defaults();
    cli_backend backend = CLI_BACKEND_DEFAULT;
    bool json = false, ignore_eos = false, check = false;
    for (int i = 1; i < argc; i++) {
        int so = cli_sample_opt("muser run", argc, argv, &i, &sp);
        if (so < 0) return 1;
        if (so) continue;
        int bo = cli_backend_opt("muser run", argc, argv, &i, &backend);
        if (bo < 0) return 1;
        if (bo) continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                          \
    do {                                                                \
        if (!v) return cli_fail("muser run: option %s needs a value", a); \
        i++;                                                            \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model = v; }
        else if (!strcmp(a, "--prompt-ids")) { NEED(); ids_arg = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEED(); text = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { NEED(); file = v; }
        else if (!strcmp(a, "-n")) { NEED(); if (!cli_int(v, 0, 1 << 24, &n_gen)) return cli_fail("muser run: -n must be an integer >= 0: %s", v); }
        else if (!strcmp(a, "--top")) { NEED(); if (!cli_int(v, 0, 1000, &top)) return cli_fail("muser run: --top must be 0..1000: %s", v); }
        else if (!strcmp(a, "--threads")) { NEED(); if (!cli_int(v, 1, 512, &threads)) return cli_fail("muser run: --threads must be 1..512: %s", v); }
        else if (!strcmp(a, "--ctx")) { NEED(); if (!cli_int(v, 1, 1 << 24, &ctx)) return cli_fail("muser run: --ctx must be a positive integer: %s", v); }
        else if (!strcmp(a, "--kern")) { NEED(); kern = v; }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = true;
        else if (!strcmp(a, "--check-tensors")) check = true;
        else return cli_fail("muser run: unknown option '%s' (see muser run --help)", a);
#undef NEED
    }
    if (!!ids_arg + !!text + !!file != 1) return cli_fail("muser run: give exactly one of --prompt-ids, -p, -f");
    if (!model && !(model = cli_default_model())) return 1;

    mu_err err = {0};
    mu_model *m;
    if (mu_model_open(model, &m, &err)) return cli_fail("muser run: %s", err.msg);
    if (check && cli_check_model("muser run", m, (int)threads, false)) {
        mu_model_close(m);
        return 1;
    }
    const mu_model_info *I = mu_model_get_info(m);
    int rc = 1;
    int32_t *prompt = NULL;
    int n_prompt = 0;
    mu_engine *e = NULL;
    mu_sched *sched = NULL;
    mu_job *job = NULL;
    if (ids_arg) {
        if (!cli_ids(ids_arg, &prompt, &n_prompt)) {
            cli_fail("muser run: --prompt-ids must be a comma-separated list of token ids");
            goto done;
        }
        for (int i = 0; i < n_prompt; i++)
            if (prompt[i] >= I->n_vocab) {
                cli_fail("muser run: prompt token id %d is outside the vocabulary (%d)", prompt[i], I->n_vocab);
                goto done;
            }
    } else if (cli_prompt_tokens(m, text, file, &prompt, &n_prompt)) {
        goto done;
    }
    if (n_prompt == 0) {
        cli_fail("muser run: the prompt is empty");
        goto done;
    }
    int n_ctx = ctx ? (int)ctx : n_prompt + (int)n_gen;
    if (n_ctx > I->n_ctx_train) n_ctx = I->n_ctx_train;
    if (n_prompt + (int)n_gen > n_ctx) {
        cli_fail("muser run: prompt (%d) + generation (%lld) exceed the context (%d)", n_prompt, n_gen, n_ctx);
        goto done;
    }
    mu_engine_opts eo = cli_engine_opts(&backend, (int)threads, kern);
    mu_sched_opts so = {.n_slots = 1, .n_ctx = n_ctx};
    if (mu_engine_new(m, &eo, &e, &err) || (n_gen > 0 && mu_sched_new(e, &so, &sched, &err))) {
        cli_fail("muser run: %s", err.msg);
        goto done;
    }
    if (!json && !mu_model_tokenizer(m)) {
        cli_fail("muser: the model has no tokenizer; use --json for token ids");
        goto done;
    }
    if (n_gen > 0) {
        mu_gen_req q = {.prompt = prompt, .n_prompt = n_prompt, .n_predict = (int)n_gen, .sp = sp,
                        .ignore_eos = ignore_eos, .no_text = json, .n_top = json ? (int)top : 0};
        if (q.n_top > I->n_vocab) q.n_top = I->n_vocab;
        if (mu_sched_submit(sched, &q, 1, &job, &err)) {
            cli_fail("muser run: %s", err.msg);
            goto done;
        }
    }
    mu_gen_event ev;
    while (job && mu_job_next(job, &ev, -1) == 1) {
        if (ev.kind == MU_EV_TOKEN && json) {
            printf("{\"id\": %d, \"top\": [", ev.tok.id);
            for (int k = 0; k < ev.tok.n_top; k++)
                printf("%s[%d, %.7g]", k ? ", " : "", ev.tok.top_ids[k], ev.tok.top_probs[k]);
            printf("]}\n");
            fflush(stdout);
        } else if (ev.kind == MU_EV_TEXT) {
            fwrite(ev.text, 1, ev.len, stdout);
            fflush(stdout);
        } else if (ev.kind == MU_EV_FINISH) {
            if (ev.finish == MU_FINISH_ERROR) {
                cli_fail("muser run: %s", ev.err);
                goto done;
            }
            break;
        }
    }
    if (!json) putchar('\n');
    rc = 0;
done:
    mu_job_free(job);
    mu_sched_free(sched);
    mu_engine_free(e);
    mu_model_close(m);
    free(prompt);
    return rc;
}
