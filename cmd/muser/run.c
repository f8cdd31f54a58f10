/* run.c: `muser run`: one-shot generation.
 *   muser run [-m MODEL] (--prompt-ids 1,2,3 | -p TEXT | -f FILE) [-n N]
 *             [SAMPLING...] (cli_sample_usage: --temp --top-k ... --logit-bias)
 *             [--json] [--top K] [--ignore-eos] [--ctx N] [--threads N] [--kern NAME]
 *             [--context-shift [--keep N] [--discard N]]
 *             [--check-tensors] [--pack DIR [--key-file F]] [--spec none|ngram|dflash] [--draft D.gguf] [--draft-max N] [--draft-min N]
 *             [--prefill local|auto|remote] [--node NAME] [--breaker N:S]
 *             [--mmproj P --image FILE ...] [--grammar GBNF | --grammar-file F]
 * With --image (repeatable; needs --mmproj), each image goes where the text
 * holds the media marker <__media__> (in order), or before the text when it
 * has none; the text is then tokenized as llama.cpp's mtmd does (each piece
 * alone, special tokens parsed) and each image's rows are wrapped in
 * <|image_start|> ... <|image_end|>.
 * --grammar / --grammar-file (llama.cpp's CLI names): a GBNF grammar over the
 * whole output, applied as on the server (docs/api.md, "Grammars"); with
 * --json the reported probabilities stay the model's, unmasked.
 * With --context-shift, a generation that fills the context shifts it as
 * llama.cpp's server does (--keep / --discard: the request's n_keep /
 * n_discard; mu_session_shift) and goes on, -n tokens in all.
 * With --pack, the KV state of a pack directory (muser pack save) is
 * restored first and the prompt is what follows it (docs/kvpack.md).
 * With --prefill auto|remote, the prompt's whole steps before its last token
 * are prefilled by a node (docs/lane.md); auto falls back to local prefill.
 * With --json, one line per generated token: {"id": ID, "top": [[id, prob], ...]}
 * (prob = softmax of the final logits, after logit scale and softcap); with
 * any --spec option also a last line {"timings": {...}} with the draft counts
 * (llama.cpp's draft_n, draft_n_accepted; draft_on_device with a DFlash
 * drafter: it ran on the GPU; draft_pos_n / draft_pos_accepted: per
 * draft position, how often it was checked and accepted; predicted_cpu_ms: the
 * process's CPU time from the first token to the last, what a benchmark on a
 * loaded machine compares). Without --json the totals go to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "../../include/muser_gen.h"
#include "../../include/muser_kv.h"
#include "../../include/muser_lane.h"
#include "cli.h"
#include "prompt.h"

static double process_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int usage(void) {
    fprintf(stderr,
            "usage: muser run [-m MODEL] (--prompt-ids 1,2,3 | -p TEXT | -f FILE) [-n N] [SAMPLING...]\n"
            "                 [--json] [--top K] [--ignore-eos] [--ctx N] [--threads N]\n"
            "                 [--context-shift [--keep N] [--discard N]]  go on past the context as llama.cpp's server\n"
            "                 [--kern ref|avx2|avx512|amx|neon] " CLI_BACKEND_USAGE " [--check-tensors]\n"
            "                 [--pack DIR [--key-file F]] [--spec none|ngram|dflash] [--draft D.gguf] [--draft-max N] [--draft-min N]\n"
            "                 " CLI_LANE_USAGE "\n"
            "                 [--mmproj P.gguf --image FILE ...]   images at the <__media__> markers (else first)\n"
            "                 [--grammar GBNF | --grammar-file F]  constrain the output (llama.cpp's GBNF)\n%s",
            cli_sample_usage());
    return 1;
}

/* --pack: the scheduler's install hook restores the pack into the slot */
typedef struct {
    const mu_kv_ident *id;
    const char *dir;
    uint8_t key[32];
} pack_src;

static int install_pack(void *user, mu_session *s, mu_err *err) {
    pack_src *p = user;
    return mu_kv_pack_restore(s, p->id, p->dir, p->key, NULL, err);
}

/* The pack's token count (authenticated with key), or -1 after the error line. */
static int pack_tokens(const char *dir, const uint8_t key[32]) {
    mu_err err = {0};
    char *js = NULL;
    if (mu_kv_pack_inspect(dir, key, &js, &err)) return cli_fail("muser run: %s", err.msg), -1;
    json_t *j = json_loads(js, 0, NULL);
    free(js);
    json_t *n = json_object_get(j, "tokens"), *v = json_object_get(j, "verdict");
    int r = json_is_integer(n) ? (int)json_integer_value(n) : -1;
    if (r < 0) cli_fail("muser run: %s: kvpack: %s: the manifest does not authenticate with this key", dir,
                        json_is_string(v) ? json_string_value(v) : "error");
    json_decref(j);
    return r;
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *ids_arg = NULL, *text = NULL, *file = NULL, *kern = NULL, *pack = NULL,
               *key_file = NULL, *grammar_text = NULL, *grammar_file = NULL;
    long long n_gen = 64, top = 0, threads = 0, ctx = 0, keep = 0, discard = 0;
    mu_sample_params sp = mu_sample_defaults();
    cli_backend backend = CLI_BACKEND_DEFAULT;
    bool json = false, ignore_eos = false, check = false, shift = false;
    cli_spec spec = {0};
    bool spec_given = false; /* any --spec option: report the draft counts */
    cli_lane lane = {0};
    const char *mmproj = NULL;
    const char *images[16];
    int n_images = 0;
    for (int i = 1; i < argc; i++) {
        int lo = cli_lane_opt("muser run", argc, argv, &i, &lane);
        if (lo < 0) return 1;
        if (lo) continue;
        int so = cli_sample_opt("muser run", argc, argv, &i, &sp);
        if (so == 0 && (so = cli_spec_opt("muser run", argc, argv, &i, &spec)) > 0) spec_given = true;
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
        else if (!strcmp(a, "--pack")) { NEED(); pack = v; }
        else if (!strcmp(a, "--key-file")) { NEED(); key_file = v; }
        else if (!strcmp(a, "--mmproj")) { NEED(); mmproj = v; }
        else if (!strcmp(a, "--grammar")) { NEED(); grammar_text = v; }
        else if (!strcmp(a, "--grammar-file")) { NEED(); grammar_file = v; }
        else if (!strcmp(a, "--image")) {
            NEED();
            if (n_images == 16) return cli_fail("muser run: at most 16 --image");
            images[n_images++] = v;
        }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--context-shift")) shift = true;
        else if (!strcmp(a, "--keep")) { NEED(); if (!cli_int(v, -1, 1 << 24, &keep)) return cli_fail("muser run: --keep must be -1 or more: %s", v); }
        else if (!strcmp(a, "--discard")) { NEED(); if (!cli_int(v, 0, 1 << 24, &discard)) return cli_fail("muser run: --discard must be 0 or more: %s", v); }
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = true;
        else if (!strcmp(a, "--check-tensors")) check = true;
        else return cli_fail("muser run: unknown option '%s' (see muser run --help)", a);
#undef NEED
    }
    if (!!ids_arg + !!text + !!file != 1) return cli_fail("muser run: give exactly one of --prompt-ids, -p, -f");
    if (!model && !(model = cli_default_model())) return 1;
    if (key_file && !pack) return cli_fail("muser run: --key-file goes with --pack");
    if (n_images && !mmproj) return cli_fail("muser run: --image needs a vision projector (--mmproj)");
    if (n_images && (ids_arg || pack || lane.mode != MU_PREFILL_LOCAL))
        return cli_fail("muser run: --image goes with -p or -f, not with --prompt-ids, --pack or --prefill");
    if (pack && lane.mode != MU_PREFILL_LOCAL) return cli_fail("muser run: --pack and --prefill auto|remote do not go together");
    if (grammar_text && grammar_file) return cli_fail("muser run: give one of --grammar, --grammar-file");
    pack_src src = {.dir = pack};
    mu_kv_ident *kid = NULL;
    int n_packed = 0;
    if (pack) {
        mu_err kerr = {0};
        if (mu_kv_root_key(key_file, src.key, &kerr)) return cli_fail("muser run: %s", kerr.msg);
        if ((n_packed = pack_tokens(pack, src.key)) < 0) return 1;
    }

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
    mu_lane *ln = NULL;
    mu_mmproj *proj = NULL;
    mu_mprompt *mp = NULL;
    mu_grammar *grammar = NULL;
    char *gfile = NULL;
    if (grammar_file) {
        size_t gn;
        if (cli_read_file(grammar_file, &gfile, &gn)) goto done;
        char *z = realloc(gfile, gn + 1); /* the grammar is a C string, as llama.cpp reads it */
        if (!z) {
            cli_fail("muser run: out of memory");
            goto done;
        }
        gfile = z;
        gfile[gn] = 0;
        grammar_text = gfile;
    }
    if (grammar_text) {
        if (!mu_model_tokenizer(m)) {
            cli_fail("muser run: --grammar needs a model with a tokenizer");
            goto done;
        }
        if (mu_grammar_new(grammar_text, mu_model_tokenizer(m), &grammar, &err)) {
            cli_fail("muser run: %s", err.msg);
            goto done;
        }
    }
    if (mmproj && mu_mmproj_open(mmproj, m, &proj, &err)) {
        cli_fail("muser run: %s", err.msg);
        goto done;
    }
    if (n_images) {
        /* tokenized with the images below, once the engine exists */
    } else if (ids_arg) {
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
    if (n_prompt == 0 && !n_images) {
        cli_fail("muser run: the prompt is empty");
        goto done;
    }
    if (pack && !ids_arg && I->add_bos && n_prompt > 0 && prompt[0] == I->bos) {
        /* the text continues the pack's prompt: no second BOS */
        memmove(prompt, prompt + 1, (size_t)--n_prompt * sizeof *prompt);
        if (n_prompt == 0) {
            cli_fail("muser run: the prompt is empty");
            goto done;
        }
    }
    if (pack) {
        /* the restored positions stand first; their ids are not in the pack */
        int32_t *all = calloc((size_t)n_packed + (size_t)n_prompt, sizeof *all);
        if (!all) {
            cli_fail("muser run: out of memory");
            goto done;
        }
        memcpy(all + n_packed, prompt, (size_t)n_prompt * sizeof *all);
        free(prompt);
        prompt = all;
        n_prompt += n_packed;
    }
    /* with a pack, the context that fixes the ring size of its identity */
    int n_ctx = ctx ? (int)ctx : pack ? mu_kv_default_ctx(m) : n_prompt + (int)n_gen;
    if (n_ctx > I->n_ctx_train) n_ctx = I->n_ctx_train;
    if (n_prompt + (int)n_gen > n_ctx && !(shift && n_prompt < n_ctx)) {
        cli_fail("muser run: prompt (%d) + generation (%lld) exceed the context (%d)", n_prompt, n_gen, n_ctx);
        goto done;
    }
    mu_engine_opts eo = cli_engine_opts(&backend, (int)threads, kern);
    mu_sched_opts so = {.n_slots = 1, .n_ctx = n_ctx, .ctx_shift = shift};
    if (mu_engine_new(m, &eo, &e, &err) || (pack && mu_kv_ident_new(e, model, &kid, &err))) {
        cli_fail("muser run: %s", err.msg);
        goto done;
    }
    if (shift && strcmp(mu_engine_backend(e), "cpu")) {
        cli_fail("muser run: --context-shift needs the CPU backend (the CUDA engine keeps position p in cell p)");
        goto done;
    }
    if (n_images) {
        if (cli_media_prompt("muser run", e, proj, text, file, images, n_images, I->add_bos, &mp)) goto done;
        n_prompt = mu_mprompt_n(mp);
        if (!ctx) n_ctx = n_prompt + (int)n_gen;
        if (n_ctx > I->n_ctx_train) n_ctx = I->n_ctx_train;
        if (n_prompt + (int)n_gen > n_ctx) {
            cli_fail("muser run: prompt (%d) + generation (%lld) exceed the context (%d)", n_prompt, n_gen, n_ctx);
            goto done;
        }
        so.n_ctx = n_ctx;
    }
    if (cli_spec_open("muser run", &spec, e, model)) goto done;
    so.drafter = spec.drafter;
    if (n_gen > 0 && mu_sched_new(e, &so, &sched, &err)) {
        cli_fail("muser run: %s", err.msg);
        goto done;
    }
    mu_lane_opts lo = {.mode = (mu_prefill_mode)lane.mode, .node = lane.node, .n_ctx = n_ctx,
                       .breaker_failures = lane.breaker_n, .breaker_s = lane.breaker_s};
    if (n_gen > 0 && mu_lane_new(e, model, &lo, &ln, &err)) {
        cli_fail("muser run: %s", err.msg);
        goto done;
    }
    if (!json && !mu_model_tokenizer(m)) {
        cli_fail("muser: the model has no tokenizer; use --json for token ids");
        goto done;
    }
    if (n_gen > 0) {
        mu_gen_req q = {.prompt = prompt, .n_prompt = n_prompt, .n_predict = (int)n_gen, .sp = sp,
                        .ignore_eos = ignore_eos, .no_text = json, .n_top = json ? (int)top : 0,
                        .spec = (mu_spec)spec.spec, .draft_max = spec.draft_max, .draft_min = spec.draft_min,
                        .progress = cli_prefill_wanted(), .media = mp, .grammar = grammar,
                        .n_keep = (int)keep, .n_discard = (int)discard};
        if (pack) {
            src.id = kid;
            q.install = install_pack;
            q.install_user = &src;
            q.n_installed = n_packed;
        }
        if (q.n_top > I->n_vocab) q.n_top = I->n_vocab;
        bool remote = false;
        if (mu_lane_prepare(ln, &q, &remote, &err)) {
            cli_fail("muser run: remote prefill failed: %s", err.msg);
            goto done;
        }
        if (ln) {
            mu_lane_stats ls;
            mu_lane_get_stats(ln, &ls);
            if (remote && q.install_class)
                fprintf(stderr, "muser run: %d prompt tokens prefilled by the node (kernel class %s: the answer equals "
                        "local prefill's under the tie-aware rule)\n", q.n_installed, q.install_class);
            else if (remote) fprintf(stderr, "muser run: %d prompt tokens prefilled by the node\n", q.n_installed);
            else if (ls.n_fallback) fprintf(stderr, "muser run: remote prefill failed, prefilling locally: %s\n", ls.last_error);
        }
        if (mu_sched_submit(sched, &q, 1, &job, &err)) {
            if (q.install_free) q.install_free(q.install_user);
            cli_fail("muser run: %s", err.msg);
            goto done;
        }
    }
    mu_gen_event ev;
    cli_prefill pf = {0};
    double cpu_first = -1; /* process CPU time at the first token (ms) */
    while (job && mu_job_next(job, &ev, -1) == 1) {
        if (ev.kind == MU_EV_TOKEN && cpu_first < 0) cpu_first = process_cpu_ms();
        if (ev.kind == MU_EV_PROGRESS) {
            cli_prefill_event(&pf, ev.n_done, ev.n_total);
        } else if (ev.kind == MU_EV_TOKEN && json) {
            printf("{\"id\": %d, \"top\": [", ev.tok.id);
            for (int k = 0; k < ev.tok.n_top; k++)
                printf("%s[%d, %.7g]", k ? ", " : "", ev.tok.top_ids[k], ev.tok.top_probs[k]);
            printf("]}\n");
            fflush(stdout);
        } else if (ev.kind == MU_EV_TEXT) {
            fwrite(ev.text, 1, ev.len, stdout);
            fflush(stdout);
        } else if (ev.kind == MU_EV_FINISH) {
            cli_prefill_end(&pf);
            if (ev.finish == MU_FINISH_ERROR) {
                cli_fail("muser run: %s", ev.err);
                goto done;
            }
            const mu_gen_stats *st = &ev.stats;
            const bool drafter_dev = spec.drafter && mu_drafter_get_info(spec.drafter)->on_device;
            if (spec_given && json) {
                printf("{\"timings\": {\"predicted_n\": %d, \"predicted_ms\": %.3f, \"predicted_cpu_ms\": %.3f, "
                       "\"draft_n\": %d, \"draft_n_accepted\": %d, \"spec_steps\": %d",
                       st->n_gen, st->gen_ms, cpu_first < 0 ? 0.0 : process_cpu_ms() - cpu_first, st->n_draft,
                       st->n_draft_accepted, st->n_spec_steps);
                int np = MU_SPEC_DRAFT_MAX;
                while (np > 0 && !st->n_draft_pos[np - 1]) np--;
                for (int w = 0; w < 2; w++) {
                    printf(w ? ", \"draft_pos_accepted\": [" : ", \"draft_pos_n\": [");
                    for (int k = 0; k < np; k++) printf(k ? ",%d" : "%d", w ? st->n_accept_pos[k] : st->n_draft_pos[k]);
                    printf("]");
                }
                if (spec.drafter) printf(", \"draft_on_device\": %s", drafter_dev ? "true" : "false");
                if (st->n_draft_ngram)
                    printf(", \"draft_n_ngram\": %d, \"draft_n_ngram_accepted\": %d", st->n_draft_ngram,
                           st->n_draft_ngram_accepted);
                printf("}}\n");
            } else if (spec_given) {
                fprintf(stderr, "\nspec %s%s: drafted %d, accepted %d (%.1f%%) in %d verification steps (%.2f per step)\n",
                        mu_spec_name((mu_spec)spec.spec), drafter_dev ? " (the drafter on the GPU)" : "", st->n_draft,
                        st->n_draft_accepted,
                        st->n_draft ? 100.0 * st->n_draft_accepted / st->n_draft : 0.0, st->n_spec_steps,
                        st->n_spec_steps ? (double)st->n_draft_accepted / st->n_spec_steps : 0.0);
                if (st->n_draft_ngram)
                    fprintf(stderr, "  of which n-gram lookups: drafted %d, accepted %d\n", st->n_draft_ngram,
                            st->n_draft_ngram_accepted);
            }
            break;
        }
    }
    if (!json) putchar('\n');
    rc = 0;
done:
    mu_job_free(job);
    mu_sched_free(sched);
    mu_lane_free(ln);
    mu_drafter_free(spec.drafter);
    mu_kv_ident_free(kid);
    mu_kv_key_wipe(src.key);
    mu_mprompt_free(mp);
    mu_grammar_unref(grammar);
    free(gfile);
    mu_engine_free(e);
    mu_mmproj_free(proj);
    mu_model_close(m);
    free(prompt);
    return rc;
}
