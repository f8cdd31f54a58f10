/* serve.c: `muser serve`: the HTTP server (OpenAI, llama.cpp and Ollama
 * APIs) on one model.
 *   muser serve [-m MODEL] [--host H] [--port P] [--parallel 1..4] [--ctx N]
 *               [--queue N] [--threads N] [--api-key-file F]
 *               [--tls-cert C --tls-key K] [--max-conns N] [--max-conns-per-ip N]
 *               [--head-timeout S] [--body-timeout S] [--idle-timeout S]
 *               [--max-body-mb N] [--http-threads N] [--pooling P] [--alias NAME]...
 *               [--any-model] [--cors ORIGINS] [--prefill local|auto|remote] [--node NAME] [--breaker N:S]
 *               [--mmproj P.gguf]
 *               [--cache-bytes N] [--cache-block N] [--pack-dir DIR] [--pack-max-bytes N] [--key-file F]
 *               [--slot-save-path DIR] [--seed N] [--temp T] [--n-predict N]
 *               [--no-slots] [--no-ui] [--no-metrics] [--tags LIST] [--batch-size N] [--cache-prompt]
 *               [--context-shift]
 * Owns: options, reading the key and TLS files, wiring model -> engine ->
 * scheduler -> server, and running until SIGINT/SIGTERM. Everything else is
 * in src/http. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../include/muser_kv.h"
#include "../../include/muser_lane.h"
#include "../../include/muser_serve.h"
#include "cli.h"

static volatile sig_atomic_t stop_flag;
bool (*cli_serve_ready)(bool tls, const char *host, int port);
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static int usage(void) {
    fprintf(stderr,
            "usage: muser serve [-m MODEL] [--host H] [--port P] [--parallel 1..4] [--ctx N] [--queue N]\n"
            "                   " CLI_BACKEND_USAGE "\n"
            "                   [--threads N] [--api-key-file F] [--tls-cert C --tls-key K] [--check-tensors]\n"
            "                   [--max-conns N] [--max-conns-per-ip N] [--head-timeout S] [--body-timeout S]\n"
            "                   [--idle-timeout S] [--max-body-mb N] [--http-threads N]\n"
            "                   [--pooling none|mean|cls|last] [--alias NAME]... [--any-model] [--cors ORIGINS]\n"
            "                   [--mmproj P.gguf]   a vision projector: images in requests\n"
            "                   [--spec none|ngram|dflash] [--draft D.gguf] [--draft-max N] [--draft-min N]\n"
            "                   " CLI_LANE_USAGE "\n"
            "                   [--cache-bytes N[K|M|G]] [--cache-block N] [--pack-dir DIR] [--pack-max-bytes N[K|M|G]] [--key-file F]\n"
            "                   [--slot-save-path DIR]\n"
            "                   [--seed N] [--temp T] [--n-predict N] [--no-slots] [--no-ui] [--no-metrics]\n"
            "                   [--tags LIST] [--batch-size N] [--cache-prompt] [--context-shift]\n"
            "Serves the OpenAI, llama.cpp server and Ollama APIs (default 127.0.0.1:4949).\n"
            "A non-loopback --host needs --tls-cert, --tls-key and --api-key-file (mode 0600).\n");
    return 1;
}

static char *read_file(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    fclose(f);
    if (!buf || n > max) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

static void cache_log(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "muser serve: %s\n", line);
}

/* The id the server answers to (as src/http derives it), for the banner. */
static const char *model_id(const mu_model *m, const char *path) {
    const char *name = mu_model_get_info(m)->name;
    if (name && *name) return name;
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* --prefill auto|remote: the lane fetches before the request is submitted */
static int serve_prefill(void *user, mu_gen_req *q, mu_err *err) {
    bool remote;
    /* a node's failure is a 502-class answer, never a busy 429 (MU_E_STATE) */
    return mu_lane_prepare(user, q, &remote, err) ? MU_E_IO : 0;
}
static int serve_metrics(void *user, char *buf, size_t cap) { return mu_lane_metrics(user, buf, cap); }
static void serve_lane_stats(void *user, mu_lane_stats *st) { mu_lane_get_stats(user, st); }

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *key_file = NULL, *cert = NULL, *keyp = NULL;
    long long port = 4949, parallel = 1, ctx = 0, queue = 64, threads = 0;
    const char *aliases[MU_SERVE_MAX_ALIASES], *cors = NULL;
    int n_aliases = 0;
    bool any_model = false, no_slots = false, no_ui = false, no_metrics = false;
    long long seed = -1, n_predict = -1, batch = 0;
    bool cache_prompt = false, ctx_shift = false;
    double temp = -1;
    const char *tags = NULL;
    mu_embd_pooling pooling = MU_EMBD_OFF;
    long long max_conns = 4096, per_ip = -1, head_to = 10, body_to = 30, idle_to = 60, body_mb = 8, http_threads = 4;
    bool check = false;
    cli_backend backend = CLI_BACKEND_DEFAULT;
    cli_spec spec = {0};
    cli_lane lane = {0};
    size_t cache_bytes = MU_KV_CACHE_DEFAULT_BYTES;
    long long cache_block = MU_KV_CACHE_DEFAULT_BLOCK;
    const char *pack_dir = NULL, *kv_key_file = NULL, *slot_dir = NULL, *mmproj_path = NULL;
    size_t pack_max = 0;
    mu_mmproj *mmproj = NULL;
    for (int i = 1; i < argc; i++) {
        int lo = cli_lane_opt("muser serve", argc, argv, &i, &lane);
        if (lo < 0) return 1;
        if (lo) continue;
        int bo = cli_backend_opt("muser serve", argc, argv, &i, &backend);
        if (bo < 0) return 1;
        if (bo) continue;
        int so = cli_spec_opt("muser serve", argc, argv, &i, &spec);
        if (so < 0) return 1;
        if (so) continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                              \
    do {                                                                    \
        if (!v) return cli_fail("muser serve: option %s needs a value", a); \
        i++;                                                                \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model = v; }
        else if (!strcmp(a, "--host")) { NEED(); host = v; }
        else if (!strcmp(a, "--port")) { NEED(); if (!cli_int(v, 0, 65535, &port)) return cli_fail("muser serve: --port must be 0..65535: %s", v); }
        else if (!strcmp(a, "--parallel")) { NEED(); if (!cli_int(v, 1, 4, &parallel)) return cli_fail("muser serve: --parallel must be 1..4: %s", v); }
        else if (!strcmp(a, "--ctx")) { NEED(); if (!cli_int(v, 16, 1 << 24, &ctx)) return cli_fail("muser serve: --ctx must be 16..16777216: %s", v); }
        else if (!strcmp(a, "--queue")) { NEED(); if (!cli_int(v, 0, 1024, &queue)) return cli_fail("muser serve: --queue must be 0..1024: %s", v); }
        else if (!strcmp(a, "--threads")) { NEED(); if (!cli_int(v, 1, 512, &threads)) return cli_fail("muser serve: --threads must be 1..512: %s", v); }
        else if (!strcmp(a, "--max-conns")) { NEED(); if (!cli_int(v, 1, 1 << 20, &max_conns)) return cli_fail("muser serve: --max-conns must be 1..1048576: %s", v); }
        else if (!strcmp(a, "--max-conns-per-ip")) { NEED(); if (!cli_int(v, 0, 1 << 20, &per_ip)) return cli_fail("muser serve: --max-conns-per-ip must be 0..1048576 (0 = off): %s", v); }
        else if (!strcmp(a, "--head-timeout")) { NEED(); if (!cli_int(v, 1, 86400, &head_to)) return cli_fail("muser serve: --head-timeout must be 1..86400 seconds: %s", v); }
        else if (!strcmp(a, "--body-timeout")) { NEED(); if (!cli_int(v, 1, 86400, &body_to)) return cli_fail("muser serve: --body-timeout must be 1..86400 seconds: %s", v); }
        else if (!strcmp(a, "--idle-timeout")) { NEED(); if (!cli_int(v, 1, 86400, &idle_to)) return cli_fail("muser serve: --idle-timeout must be 1..86400 seconds: %s", v); }
        else if (!strcmp(a, "--max-body-mb")) { NEED(); if (!cli_int(v, 1, 4096, &body_mb)) return cli_fail("muser serve: --max-body-mb must be 1..4096: %s", v); }
        else if (!strcmp(a, "--http-threads")) { NEED(); if (!cli_int(v, 1, 64, &http_threads)) return cli_fail("muser serve: --http-threads must be 1..64: %s", v); }
        else if (!strcmp(a, "--api-key-file")) { NEED(); key_file = v; }
        else if (!strcmp(a, "--tls-cert")) { NEED(); cert = v; }
        else if (!strcmp(a, "--tls-key")) { NEED(); keyp = v; }
        else if (!strcmp(a, "--check-tensors")) check = true;
        else if (!strcmp(a, "--any-model")) any_model = true;
        else if (!strcmp(a, "--cors")) { NEED(); cors = v; }
        else if (!strcmp(a, "--mmproj")) { NEED(); mmproj_path = v; }
        else if (!strcmp(a, "--cache-bytes")) { NEED(); if (!cli_bytes(v, &cache_bytes)) return cli_fail("muser serve: --cache-bytes must be a byte count (K, M, G suffixes; 0 = off): %s", v); }
        else if (!strcmp(a, "--cache-block")) { NEED(); if (!cli_int(v, 1, 4096, &cache_block)) return cli_fail("muser serve: --cache-block must be 1..4096 tokens: %s", v); }
        else if (!strcmp(a, "--pack-dir")) { NEED(); pack_dir = v; }
        else if (!strcmp(a, "--pack-max-bytes")) { NEED(); if (!cli_bytes(v, &pack_max) || !pack_max) return cli_fail("muser serve: --pack-max-bytes must be a byte count above 0 (K, M, G suffixes): %s", v); }
        else if (!strcmp(a, "--key-file")) { NEED(); kv_key_file = v; }
        else if (!strcmp(a, "--slot-save-path")) { NEED(); slot_dir = v; }
        else if (!strcmp(a, "--seed")) { NEED(); if (!cli_int(v, -1, 4294967295LL, &seed)) return cli_fail("muser serve: --seed must be -1 (random) .. 4294967295: %s", v); }
        else if (!strcmp(a, "--temp")) { NEED(); if (!cli_float(v, 0, 100, &temp)) return cli_fail("muser serve: --temp must be 0..100: %s", v); }
        else if (!strcmp(a, "--n-predict")) { NEED(); if (!cli_int(v, -1, 1048576, &n_predict)) return cli_fail("muser serve: --n-predict must be -1 (no limit) .. 1048576: %s", v); }
        else if (!strcmp(a, "--no-slots")) no_slots = true;
        else if (!strcmp(a, "--cache-prompt")) cache_prompt = true;
        else if (!strcmp(a, "--no-cache-prompt")) cache_prompt = false;
        /* llama.cpp's: off by default; a full slot shifts its context and goes on (docs/api.md) */
        else if (!strcmp(a, "--context-shift")) ctx_shift = true;
        else if (!strcmp(a, "--no-context-shift")) ctx_shift = false;
        else if (!strcmp(a, "--slots")) no_slots = false;
        else if (!strcmp(a, "--no-ui")) no_ui = true;
        else if (!strcmp(a, "--batch-size")) { NEED(); if (!cli_int(v, 1, 65536, &batch)) return cli_fail("muser serve: --batch-size must be 1..65536: %s", v); }
        else if (!strcmp(a, "--no-metrics")) no_metrics = true;
        else if (!strcmp(a, "--tags")) { NEED(); if (strlen(v) > 1024) return cli_fail("muser serve: --tags must be at most 1024 bytes"); tags = v; }
        else if (!strcmp(a, "--alias")) {
            NEED();
            if (!*v || strlen(v) > 256) return cli_fail("muser serve: --alias must be 1..256 bytes: %s", v);
            if (n_aliases == MU_SERVE_MAX_ALIASES) return cli_fail("muser serve: at most %d --alias options", MU_SERVE_MAX_ALIASES);
            aliases[n_aliases++] = v;
        }
        else if (!strcmp(a, "--pooling")) {
            NEED();
            static const char *const names[] = {"none", "mean", "cls", "last"};
            pooling = MU_EMBD_OFF;
            for (int k = 0; k < 4; k++)
                if (!strcmp(v, names[k])) pooling = (mu_embd_pooling)(MU_EMBD_NONE + k);
            if (pooling == MU_EMBD_OFF) return cli_fail("muser serve: --pooling must be none, mean, cls or last: %s", v);
        }
        else return cli_fail("muser serve: unknown option '%s' (see muser serve --help)", a);
#undef NEED
    }
    if (!!cert != !!keyp) return cli_fail("muser serve: --tls-cert and --tls-key go together");
    mu_err err = {0};
    /* refuse a public bind before loading anything */
    if (mu_serve_bind_check(host, cert != NULL, key_file != NULL, &err)) return cli_fail("muser serve: %s", err.msg);
    char api_key[256];
    if (key_file && mu_serve_read_key_file(key_file, api_key, sizeof api_key, &err))
        return cli_fail("muser serve: %s", err.msg);
    char *cert_pem = NULL, *key_pem = NULL;
    if (cert) {
        cert_pem = read_file(cert, 1 << 20);
        key_pem = read_file(keyp, 1 << 20);
        if (!cert_pem || !key_pem) {
            free(cert_pem);
            free(key_pem);
            return cli_fail("muser serve: cannot read the TLS certificate or key (%s, %s)", cert, keyp);
        }
    }
    if (!model && !(model = cli_default_model())) return 1;

    int rc = 1;
    mu_model *m = NULL;
    mu_engine *e = NULL;
    mu_sched *sched = NULL;
    mu_server *srv = NULL;
    mu_lane *ln = NULL;
    mu_kv_ident *kid = NULL;
    mu_kv_cache *cache = NULL;
    uint8_t root[32] = {0};
    if (mu_model_open(model, &m, &err)) {
        cli_fail("muser serve: %s", err.msg);
        goto done;
    }
    if (check && cli_check_model("muser serve", m, (int)threads, false)) goto done;
    const mu_model_info *I = mu_model_get_info(m);
    int n_ctx = ctx ? (int)ctx : (I->n_ctx_train < 4096 ? I->n_ctx_train : 4096);
    if (n_ctx > I->n_ctx_train) {
        cli_fail("muser serve: --ctx %d exceeds the model's context (%d)", n_ctx, I->n_ctx_train);
        goto done;
    }
    mu_engine_opts eo = cli_engine_opts(&backend, (int)threads, NULL);
    if (mu_engine_new(m, &eo, &e, &err)) {
        cli_fail("muser serve: %s", err.msg);
        goto done;
    }
    if (ctx_shift && strcmp(mu_engine_backend(e), "cpu")) {
        cli_fail("muser serve: --context-shift needs the CPU backend (the CUDA engine keeps position p in cell p)");
        goto done;
    }
    if (cli_spec_open("muser serve", &spec, e, model)) goto done;
    if (mmproj_path && mu_mmproj_open(mmproj_path, m, &mmproj, &err)) {
        cli_fail("muser serve: %s", err.msg);
        goto done;
    }
    /* test hooks, so tests need no timing: MUSER_TEST_HOLD=N, the scheduler
     * starts no job until N are queued; MUSER_TEST_STALL_AFTER=N, a job
     * generates N tokens and then waits for its cancel */
    /* the prefix cache over the pack store (docs/kvpack.md "The server's prefix cache") */
    if (pack_max && !pack_dir) {
        cli_fail("muser serve: --pack-max-bytes needs --pack-dir");
        goto done;
    }
    if (pack_dir || slot_dir) {
        struct stat st;
        if (pack_dir && (stat(pack_dir, &st) || !S_ISDIR(st.st_mode))) {
            cli_fail("muser serve: --pack-dir is not a directory: %s", pack_dir);
            goto done;
        }
        if (slot_dir && (stat(slot_dir, &st) || !S_ISDIR(st.st_mode))) {
            cli_fail("muser serve: --slot-save-path is not a directory: %s", slot_dir);
            goto done;
        }
        if (mu_kv_root_key(kv_key_file, root, &err) || mu_kv_ident_new(e, model, &kid, &err)) {
            cli_fail("muser serve: %s", err.msg);
            goto done;
        }
        if (mmproj) mu_kv_ident_set_mmproj(kid, mmproj);
    }
    if (cache_bytes || pack_dir) {
        mu_kv_cache_opts co = {.max_bytes = cache_bytes ? cache_bytes : 1, .block = (int)cache_block,
                               .pack_dir = pack_dir, .key = pack_dir ? root : NULL, .id = kid,
                               .log = cache_log};
        if (mu_kv_cache_new(e, &co, &cache, &err)) {
            cli_fail("muser serve: %s", err.msg);
            goto done;
        }
    }
    const char *hold = getenv("MUSER_TEST_HOLD"), *stall = getenv("MUSER_TEST_STALL_AFTER");
    mu_sched_opts so = {.n_slots = (int)parallel, .n_ctx = n_ctx, .queue_max = (int)queue,
                        .prefill_chunk = (int)batch,
                        .hold_until = hold ? atoi(hold) : 0, .stall_after = stall ? atoi(stall) : 0,
                        .spec = (mu_spec)spec.spec, .draft_max = spec.draft_max, .draft_min = spec.draft_min,
                        .cache = cache,
                        .drafter = spec.drafter,
                        .ctx_shift = ctx_shift && !mmproj_path}; /* llama.cpp turns it off with a projector */
    if (mu_sched_new(e, &so, &sched, &err)) {
        cli_fail("muser serve: %s", err.msg);
        goto done;
    }
    mu_lane_opts lo = {.mode = (mu_prefill_mode)lane.mode, .node = lane.node, .n_ctx = n_ctx,
                       .breaker_failures = lane.breaker_n, .breaker_s = lane.breaker_s,
                       .step = (int)batch, .cache = cache, .sched = sched}; /* delta handoffs: a live slot, the prefix cache */
    if (mu_lane_new(e, model, &lo, &ln, &err)) {
        cli_fail("muser serve: %s", err.msg);
        goto done;
    }
    mu_serve_opts ho = {.host = host,
                        .port = (int)port,
                        .tls_cert_pem = cert_pem,
                        .tls_key_pem = key_pem,
                        .api_key = key_file ? api_key : NULL,
                        .model_path = model,
                        .max_connections = (int)max_conns,
                        .max_conns_per_ip = per_ip < 0 ? 0 : per_ip == 0 ? -1 : (int)per_ip,
                        .head_timeout_s = (int)head_to,
                        .body_timeout_s = (int)body_to,
                        .idle_timeout_s = (int)idle_to,
                        .max_body_bytes = (size_t)body_mb << 20,
                        .http_threads = (int)http_threads,
                        .pooling = pooling,
                        .aliases = aliases,
                        .n_aliases = n_aliases,
                        .any_model = any_model,
                        .cors_origins = cors,
                        .prefill = ln ? serve_prefill : NULL,
                        .prefill_user = ln,
                        .metrics = ln ? serve_metrics : NULL,
                        .prefill_stats = ln ? serve_lane_stats : NULL,
                        .metrics_user = ln,
                        .has_seed = seed >= 0,
                        .seed = seed >= 0 ? (uint32_t)seed : 0,
                        .has_temp = temp >= 0,
                        .temp = (float)temp,
                        .n_predict = (int)n_predict,
                        .cache_prompt = cache_prompt,
                        .no_slots = no_slots,
                        .no_ui = no_ui,
                        .no_metrics = no_metrics,
                        .tags = tags,

                        .backend = mu_engine_backend(e),
                        .kernels = mu_engine_kern_name(e),
                        .cache = cache,
                        .slot_save_path = slot_dir,
                        .pack_dir = pack_dir,
                        .pack_max_bytes = pack_max,
                        .kv_id = kid,
                        .kv_key = root,
                        .mmproj = mmproj};
    /* connections need descriptors: raise the soft open-file limit to the
     * hard one (the server lowers its connection limit to what fits) */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) && want > (1u << 20)) {
            rl.rlim_cur = 1u << 20; /* an unlimited hard limit may exceed fs.nr_open */
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    if (mu_serve_start(sched, m, &ho, &srv, &err)) {
        cli_fail("muser serve: %s", err.msg);
        goto done;
    }
    int requested = 0, eff = mu_serve_max_connections(srv, &requested);
    if (eff < requested)
        fprintf(stderr, "muser serve: --max-conns lowered from %d to %d: the open-file limit is %llu\n", requested,
                eff, getrlimit(RLIMIT_NOFILE, &rl) ? 0ULL : (unsigned long long)rl.rlim_cur);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "muser serve: %s on %s://%s:%d (model '%s', %d slot%s, context %d, backend %s, kernels %s)\n", model,
            cert ? "https" : "http", host, mu_serve_port(srv), model_id(m, model), (int)parallel,
            parallel > 1 ? "s" : "", n_ctx, mu_engine_backend(e), mu_engine_kern_name(e));
    if (cli_serve_ready && cli_serve_ready(cert != NULL, host, mu_serve_port(srv))) stop_flag = 1;
    while (!stop_flag) pause();
    fprintf(stderr, "muser serve: shutting down\n");
    rc = 0;
done:
    mu_serve_stop(srv);
    mu_sched_free(sched);
    mu_lane_free(ln);
    mu_kv_cache_free(cache);
    mu_kv_ident_free(kid);
    mu_kv_key_wipe(root);
    mu_drafter_free(spec.drafter);
    mu_engine_free(e);
    mu_mmproj_free(mmproj);
    mu_model_close(m);
    free(cert_pem);
    free(key_pem);
    memset(api_key, 0, sizeof api_key);
    return rc;
}
