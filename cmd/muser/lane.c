/* lane.c: the prefill lane's commands (docs/lane.md):
 *   muser tls init [--dir D]
 *   muser tls issue --name N --san HOST_OR_IP [--dir D]
 *   muser tls fingerprint FILE
 *   muser producer [-m MODEL] [--listen HOST:PORT] [--workers N] [--queue N] [--max-ctx N]
 *                  [--enroll [--enroll-ttl S]] [--timeout S] [--threads N] [--backend cpu|cuda]
 *   muser node add NAME HOST:PORT --token T [-m MODEL] [--qualify-tokens N] [--threads N]
 *   muser node add NAME USER@HOST [ssh and remote options] [-m MODEL] ...   (node_ssh.c)
 *   muser node qualify NAME [-m MODEL] [--qualify-tokens N]
 *   muser node status [--json] [--no-probe]
 *   muser node remove NAME
 * Owns: options and output. Everything else is in src/gen/lane.c. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../../include/muser_lane.h"
#include "cli.h"
#include "node_ssh.h"

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

/* ---- tls ------------------------------------------------------------------- */

int cmd_tls(int argc, char **argv) {
    const char *usage = "usage: muser tls init [--dir D] | muser tls issue --name N --san HOST_OR_IP [--dir D] | "
                        "muser tls fingerprint FILE";
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout, "%s\n(D defaults to <muser home>/tls)\n", usage);
        return argc < 2;
    }
    const char *sub = argv[1], *dir = NULL, *name = NULL, *san = NULL;
    mu_err err = {0};
    if (!strcmp(sub, "fingerprint")) {
        if (argc != 3) return cli_fail("%s", usage);
        char fp[65];
        if (mu_tls_fingerprint(argv[2], fp, &err)) return cli_fail("muser tls: %s", err.msg);
        printf("%s\n", fp);
        return 0;
    }
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return cli_fail("muser tls: option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--dir")) dir = v;
        else if (!strcmp(argv[i], "--name")) name = v;
        else if (!strcmp(argv[i], "--san")) san = v;
        else return cli_fail("muser tls: unknown option '%s'", argv[i]);
        i++;
    }
    char home[4096];
    if (!dir) {
        if (mu_tls_dir(home, sizeof home, &err)) return cli_fail("muser tls: %s", err.msg);
        dir = home;
    }
    if (!strcmp(sub, "init")) {
        if (name || san) return cli_fail("muser tls init: takes only --dir");
        if (mu_tls_init(dir, &err)) return cli_fail("muser tls init: %s", err.msg);
        printf("CA created: %s/ca.pem (key %s/ca.key, mode 0600)\n", dir, dir);
        return 0;
    }
    if (!strcmp(sub, "issue")) {
        if (!name || !san) return cli_fail("muser tls issue: needs --name and --san");
        if (mu_tls_issue(dir, name, san, &err)) return cli_fail("muser tls issue: %s", err.msg);
        char cert[4200], fp[65];
        snprintf(cert, sizeof cert, "%s/%s.pem", dir, name);
        if (mu_tls_fingerprint(cert, fp, &err)) return cli_fail("muser tls issue: %s", err.msg);
        printf("%s (key %s/%s.key, mode 0600), SHA-256 %s\n", cert, dir, name, fp);
        return 0;
    }
    return cli_fail("muser tls: unknown subcommand '%s' (%s)", sub, usage);
}

/* ---- producer ----------------------------------------------------------------- */

/* One stderr line per handoff (bench/lane reads it). */
static void on_handoff(void *user, const mu_handoff_report *r) {
    (void)user;
    char delta[64] = "";
    if (r->n_have) snprintf(delta, sizeof delta, ", a delta: %d held by the decoder", r->n_have);
    fprintf(stderr,
            "muser producer: handoff %s: %d positions, %llu bytes, compute %.1f ms, transfer %.1f ms, exposed %.1f ms "
            "(%.1f%% of the transfer hidden under compute)%s\n",
            r->ok ? "ok" : "failed", r->n_ship - r->n_have, (unsigned long long)r->bytes, r->compute_s * 1e3,
            r->send_s * 1e3, r->exposed_s * 1e3, r->send_s > 0 ? 100.0 * (1 - r->exposed_s / r->send_s) : 100.0, delta);
}

int cmd_producer(int argc, char **argv) {
    const char *model = NULL, *listen = "127.0.0.1:4950", *kern = NULL;
    long long workers = 1, queue = 4, max_ctx = 0, ttl = 600, timeout = 30, threads = 0;
    bool enroll = false;
    cli_backend backend = CLI_BACKEND_DEFAULT;
    backend.backend = "cpu";
    for (int i = 1; i < argc; i++) {
        int bo = cli_backend_opt("muser producer", argc, argv, &i, &backend);
        if (bo < 0) return 1;
        if (bo) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                 \
    do {                                                                       \
        if (!v) return cli_fail("muser producer: option %s needs a value", a); \
        i++;                                                                   \
    } while (0)
#define INT(var, lo, hi)                                                                                   \
    do {                                                                                                   \
        NEED();                                                                                            \
        if (!cli_int(v, lo, hi, &var)) return cli_fail("muser producer: %s must be %d..%d: %s", a, lo, hi, v); \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: muser producer [-m MODEL] [--listen HOST:PORT] [--workers N] [--queue N] [--max-ctx N]\n"
                   "                      [--enroll [--enroll-ttl S]] [--timeout S] [--threads N] [--kern K]\n"
                   "                      " CLI_BACKEND_USAGE "\n"
                   "Prefills prompts for enrolled decoders and streams their KV over mutual TLS 1.3\n"
                   "(default 127.0.0.1:4950, backend cpu). --enroll prints one line\n"
                   "'muser-enroll-token: TOKEN' on stdout once listening (single use; muser node add).\n");
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model = v; }
        else if (!strcmp(a, "--listen")) { NEED(); listen = v; }
        else if (!strcmp(a, "--kern")) { NEED(); kern = v; }
        else if (!strcmp(a, "--workers")) INT(workers, 1, 16);
        else if (!strcmp(a, "--queue")) INT(queue, 1, 64);
        else if (!strcmp(a, "--max-ctx")) INT(max_ctx, 16, 1 << 24);
        else if (!strcmp(a, "--enroll-ttl")) INT(ttl, 1, 86400);
        else if (!strcmp(a, "--timeout")) INT(timeout, 1, 3600);
        else if (!strcmp(a, "--threads")) INT(threads, 1, 512);
        else if (!strcmp(a, "--enroll")) enroll = true;
        else return cli_fail("muser producer: unknown option '%s' (see muser producer --help)", a);
#undef INT
#undef NEED
    }
    char host[256];
    int port;
    mu_err err = {0};
    {
        /* HOST:PORT, split here so a bad address fails before the model loads */
        const char *c = strrchr(listen, ':');
        if (!c || c == listen || (size_t)(c - listen) >= sizeof host || !cli_int(c + 1, 0, 65535, &(long long){0}))
            return cli_fail("muser producer: --listen must be HOST:PORT: %s", listen);
        snprintf(host, sizeof host, "%.*s", (int)(c - listen), listen);
        port = atoi(c + 1);
    }
    if (!model && !(model = cli_default_model())) return 1;
    mu_model *m = NULL;
    mu_engine *e = NULL;
    mu_producer *p = NULL;
    int rc = 1;
    if (mu_model_open(model, &m, &err)) {
        cli_fail("muser producer: %s", err.msg);
        goto done;
    }
    mu_engine_opts eo = cli_engine_opts(&backend, (int)threads, kern);
    if (mu_engine_new(m, &eo, &e, &err)) {
        cli_fail("muser producer: %s", err.msg);
        goto done;
    }
    mu_producer_opts po = {.host = host, .port = port, .model_path = model, .n_workers = (int)workers,
                           .queue_max = (int)queue, .max_ctx = (int)max_ctx, .enroll = enroll,
                           .enroll_ttl_s = (int)ttl, .timeout_ms = (int)timeout * 1000, .on_handoff = on_handoff};
    if (mu_producer_start(e, &po, &p, &err)) {
        cli_fail("muser producer: %s", err.msg);
        goto done;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "muser producer: %s on %s:%d (backend %s, kernels %s, kernel class %s, %lld worker%s, queue %lld)\n",
            model, host, mu_producer_port(p), mu_engine_backend(e), mu_engine_kern_name(e), mu_producer_kclass(p), workers,
            workers > 1 ? "s" : "", queue);
    if (enroll) {
        printf("muser-enroll-token: %s\n", mu_producer_token(p));
        fflush(stdout);
    }
    while (!stop_flag) pause();
    fprintf(stderr, "muser producer: shutting down\n");
    rc = 0;
done:
    mu_producer_stop(p);
    mu_engine_free(e);
    mu_model_close(m);
    return rc;
}

/* ---- node ------------------------------------------------------------------------ */

static int node_engine(const char *cmd, const char *model, const cli_backend *b, int threads, mu_model **m, mu_engine **e) {
    mu_err err = {0};
    if (mu_model_open(model, m, &err)) return cli_fail("%s: %s", cmd, err.msg);
    mu_engine_opts eo = cli_engine_opts(b, threads, NULL);
    if (mu_engine_new(*m, &eo, e, &err)) return cli_fail("%s: %s", cmd, err.msg);
    return 0;
}

/* The qualification's lines; returns whether it compared under the
 * tie-aware rule (a node of another kernel class). */
/* Whether the registry has a node of this name. */
static bool registered(const char *name) {
    char *js = NULL;
    mu_err err = {0};
    bool found = false;
    if (!mu_node_status(false, &js, &err)) {
        json_t *arr = json_loads(js, 0, NULL), *x;
        size_t i;
        json_array_foreach(arr, i, x) found |= !strcmp(json_string_value(json_object_get(x, "name")) ?: "", name);
        json_decref(arr);
    }
    free(js);
    return found;
}

static bool print_report(const char *name, const char *report) {
    json_t *j = report ? json_loads(report, 0, NULL) : NULL;
    json_t *runs = json_object_get(j, "runs"), *r;
    bool tie = !strcmp(json_string_value(json_object_get(j, "rule")) ?: "", "tie-aware");
    const char *nc = json_string_value(json_object_get(j, "node_class")) ?: "?";
    size_t i;
    json_array_foreach(runs, i, r) {
        char verdict[200];
        long long at = json_integer_value(json_object_get(r, "near_tie_at"));
        if (!tie)
            snprintf(verdict, sizeof verdict, "rows and logits bit-identical");
        else
            snprintf(verdict, sizeof verdict, "node class %s: rows %s, %lld greedy ids equal under the tie-aware rule%s "
                     "(max |dp| %.1e)", nc, json_is_true(json_object_get(r, "rows_equal")) ? "bit-identical" : "differ",
                     (long long)json_integer_value(json_object_get(r, "greedy_steps")), at >= 0 ? ", a near-tie at the last" : "",
                     json_real_value(json_object_get(r, "max_prob_diff")));
        printf("qualify %s: run %zu: %lld tokens (%lld shipped, %lld bytes): node %.1f ms, local prefill %.1f ms, %s\n",
               name, i + 1, (long long)json_integer_value(json_object_get(r, "tokens")),
               (long long)json_integer_value(json_object_get(r, "shipped")),
               (long long)json_integer_value(json_object_get(r, "bytes")),
               json_real_value(json_object_get(r, "remote_ms")), json_real_value(json_object_get(r, "local_ms")), verdict);
    }
    json_decref(j);
    return tie;
}

int cmd_node(int argc, char **argv) {
    const char *usage = "usage: muser node add NAME HOST:PORT --token T [-m MODEL] [--qualify-tokens N] [--threads N] [--backend B]\n"
                        "       muser node add NAME USER@HOST [-m MODEL] [--ssh-config F] [--ssh-port P] [--remote-muser PATH]\n"
                        "                      [--remote-model PATH] [--remote-listen HOST:PORT] [--remote-backend B]\n"
                        "                      [--remote-home DIR] [--remote-wait S] [--qualify-tokens N] [--threads N] [--backend B]\n"
                        "         (starts `muser producer --enroll` on the node over ssh, BatchMode, and enrolls it)\n"
                        "       muser node qualify NAME [-m MODEL] [--qualify-tokens N] [--threads N] [--backend B]\n"
                        "       (--backend: this decoder's engine for the qualification's local prefill, as serve's)\n"
                        "       muser node status [--json] [--no-probe]\n"
                        "       muser node remove NAME";
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout, "%s\n", usage);
        return argc < 2;
    }
    const char *sub = argv[1], *pos[2] = {NULL, NULL}, *token = NULL, *model = NULL;
    node_ssh_opts so = {.remote_muser = "muser", .remote_listen = "0.0.0.0:4950", .remote_backend = "auto", .wait_s = 600};
    const char *remote_model = NULL;
    long long qt = 0, threads = 0;
    bool json = false, no_probe = false;
    int npos = 0;
    cli_backend backend = CLI_BACKEND_DEFAULT;
    for (int i = 2; i < argc; i++) {
        int bo = cli_backend_opt("muser node", argc, argv, &i, &backend);
        if (bo < 0) return 1;
        if (bo) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **sv = !strcmp(a, "--ssh-config") ? &so.ssh_config : !strcmp(a, "--ssh-port") ? &so.ssh_port
                        : !strcmp(a, "--remote-muser") ? &so.remote_muser : !strcmp(a, "--remote-model") ? &remote_model
                        : !strcmp(a, "--remote-listen") ? &so.remote_listen : !strcmp(a, "--remote-backend") ? &so.remote_backend
                        : !strcmp(a, "--remote-home") ? &so.remote_home : NULL;
        if (sv) {
            if (!v) return cli_fail("muser node: option %s needs a value", a);
            *sv = v;
            i++;
            continue;
        }
        if (!strcmp(a, "--remote-wait")) {
            long long w;
            if (!v || !cli_int(v, 1, 3600, &w)) return cli_fail("muser node: --remote-wait must be 1..3600 seconds: %s", v ? v : "");
            so.wait_s = (int)w;
            i++;
            continue;
        }
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--no-probe")) no_probe = true;
        else if (!strcmp(a, "--token") || !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--qualify-tokens") ||
                 !strcmp(a, "--threads")) {
            if (!v) return cli_fail("muser node: option %s needs a value", a);
            i++;
            if (!strcmp(a, "--token")) token = v;
            else if (!strcmp(a, "--qualify-tokens")) {
                if (!cli_int(v, 2, 1 << 20, &qt)) return cli_fail("muser node: --qualify-tokens must be 2..1048576: %s", v);
            } else if (!strcmp(a, "--threads")) {
                if (!cli_int(v, 1, 512, &threads)) return cli_fail("muser node: --threads must be 1..512: %s", v);
            } else model = v;
        } else if (a[0] == '-') return cli_fail("muser node: unknown option '%s'", a);
        else if (npos < 2) pos[npos++] = a;
        else return cli_fail("muser node: unexpected argument '%s'", a);
    }
    mu_err err = {0};
    if (!strcmp(sub, "remove")) {
        if (npos != 1) return cli_fail("%s", usage);
        if (mu_node_remove(pos[0], &err)) return cli_fail("muser node remove: %s", err.msg);
        printf("node %s removed\n", pos[0]);
        return 0;
    }
    if (!strcmp(sub, "status")) {
        char *js = NULL;
        if (mu_node_status(!no_probe, &js, &err)) return cli_fail("muser node status: %s", err.msg);
        if (json) {
            printf("%s\n", js);
        } else {
            json_t *arr = json_loads(js, 0, NULL), *x;
            size_t i;
            if (!json_array_size(arr)) printf("no nodes registered (muser node add)\n");
            json_array_foreach(arr, i, x) {
                json_t *reg = json_object_get(x, "registry"), *pr = json_object_get(x, "probe");
                printf("%s: registry: %s at %s, model '%s', epoch %lld, state %s\n", json_string_value(json_object_get(x, "name")),
                       json_string_value(json_object_get(reg, "error")) ? json_string_value(json_object_get(reg, "error")) : "ok",
                       json_string_value(json_object_get(reg, "addr")) ? json_string_value(json_object_get(reg, "addr")) : "?",
                       json_string_value(json_object_get(reg, "model")) ? json_string_value(json_object_get(reg, "model")) : "?",
                       (long long)json_integer_value(json_object_get(reg, "epoch")),
                       json_string_value(json_object_get(reg, "state")) ? json_string_value(json_object_get(reg, "state")) : "?");
                if (pr) {
                    if (json_is_true(json_object_get(pr, "reachable")))
                        printf("  probe: reachable, %.1f ms, epoch %lld, identity %s\n", json_real_value(json_object_get(pr, "rtt_ms")),
                               (long long)json_integer_value(json_object_get(pr, "epoch")),
                               !strcmp(json_string_value(json_object_get(pr, "identity")) ?: "",
                                       json_string_value(json_object_get(reg, "identity")) ?: "-")
                                   ? "as enrolled"
                                   : "CHANGED");
                    else printf("  probe: unreachable: %s\n", json_string_value(json_object_get(pr, "error")));
                }
            }
            json_decref(arr);
        }
        free(js);
        return 0;
    }
    bool add = !strcmp(sub, "add");
    if (!add && strcmp(sub, "qualify")) return cli_fail("muser node: unknown subcommand '%s'\n%s", sub, usage);
    bool via_ssh = add && npos == 2 && node_ssh_is_target(pos[1]);
    if (add && (npos != 2 || (!token && !via_ssh))) return cli_fail("muser node add: needs NAME HOST:PORT --token T, or NAME USER@HOST");
    if (via_ssh && token) return cli_fail("muser node add: USER@HOST gets its token from the producer it starts: no --token");
    if (!add && npos != 1) return cli_fail("muser node qualify: needs NAME");
    if (!model && !(model = cli_default_model())) return 1;
    mu_model *m = NULL;
    mu_engine *e = NULL;
    char *report = NULL;
    int rc = node_engine(add ? "muser node add" : "muser node qualify", model, &backend, (int)threads, &m, &e);
    char addr[300], tok[200];
    long rpid = 0;
    if (!rc && via_ssh && registered(pos[0]))
        rc = cli_fail("muser node add: node: %s is registered already (muser node remove %s)", pos[0], pos[0]);
    if (!rc && via_ssh) {
        so.target = pos[1];
        so.name = pos[0];
        so.remote_model = remote_model ? remote_model : model;
        rc = node_ssh_start(&so, addr, sizeof addr, tok, sizeof tok, &rpid);
        if (!rc) {
            printf("node %s: producer started on %s (pid %ld there; its output: producer-%s.out and .err in the node's muser home), "
                   "enrolling at %s\n", pos[0], pos[1], rpid, pos[0], addr);
            fflush(stdout);
            pos[1] = addr;
            token = tok;
        }
    }
    if (!rc) {
        rc = add ? mu_node_add(e, model, pos[0], pos[1], token, (int)qt, &report, &err)
                 : mu_node_qualify(e, model, pos[0], (int)qt, &report, &err);
        if (rc && via_ssh && !registered(pos[0])) node_ssh_stop(&so, rpid); /* nothing registered uses it */
        bool tie = print_report(pos[0], report);
        if (rc) rc = cli_fail("muser node %s: %s", sub, err.msg);
        else if (tie) printf("node %s: healthy (another kernel class: three handoffs equal to local prefill under the tie-aware rule)\n", pos[0]);
        else printf("node %s: healthy (three handoffs bit-identical to local prefill)\n", pos[0]);
    }
    free(report);
    mu_engine_free(e);
    mu_model_close(m);
    return rc;
}
