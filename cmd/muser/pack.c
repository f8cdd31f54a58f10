/* pack.c: `muser pack`: KV packs (kvpack v1, docs/kvpack.md).
 *   muser pack save -m MODEL (--prompt-ids 1,2,3 | -p TEXT | -f FILE) -o DIR
 *                   [--key-file F] [--codec raw|lossless] [--plain] [--ctx N]
 *                   [--threads N] [--kern NAME] [--backend auto|cpu|cuda] [--gpu N]
 *   muser pack verify [-m MODEL] DIR [--key-file F] [--ctx N] [--kern NAME]
 *                     [--backend auto|cpu|cuda] [--gpu N]
 *   muser pack inspect DIR [--json] [--key-file F]
 *   muser pack ls [STORE] [--json] [--key-file F]
 *   muser pack gc [STORE] [--max-bytes N[K|M|G]] [--dry-run]
 * save prefills the prompt and writes the session's KV state as a pack
 * directory, atomically. verify prints `ok` (exit 0) or one line
 * `muser pack verify: CATEGORY: reason` (exit 1), CATEGORY being the
 * kvpack verdict category, `identity` for a pack of another model, engine
 * or context (with -m), or `io`. The root key is <muser home>/kvpack.key
 * (created on first use) unless --key-file names one. The backend defaults
 * to run's (auto): the kernel class that computed the rows is part of a
 * pack's identity, so save and run --pack must compute on the same one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../../include/muser_kv.h"
#include "cli.h"
#include "prompt.h"

static int usage(void) {
    fprintf(stderr,
            "usage: muser pack save -m MODEL (--prompt-ids 1,2,3 | -p TEXT | -f FILE) -o DIR [--key-file F]\n"
            "                       [--codec raw|lossless] [--plain] [--ctx N] [--threads N] [--kern NAME]\n"
            "                       " CLI_BACKEND_USAGE "\n"
            "       muser pack verify [-m MODEL] DIR [--key-file F] [--ctx N] [--kern NAME] " CLI_BACKEND_USAGE "\n"
            "       muser pack inspect DIR [--json] [--key-file F]\n"
            "       muser pack ls [STORE] [--json] [--key-file F]\n"
            "       muser pack gc [STORE] [--max-bytes N[K|M|G]] [--dry-run]\n"
            "STORE: a directory of pack directories (default <muser home>/packs).\n");
    return 1;
}

typedef struct {
    const char *model, *ids, *text, *file, *out, *key_file, *kern, *dir;
    long long ctx, threads;
    int codec;
    bool plain, json, dry_run, has_max;
    size_t max_bytes;
    cli_backend backend;
} opts;

static int parse(const char *cmd, int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = CLI_BACKEND_DEFAULT;
    for (int i = 1; i < argc; i++) {
        int bo = cli_backend_opt(cmd, argc, argv, &i, &o->backend);
        if (bo < 0) return -1;
        if (bo) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                   \
    do {                                                                         \
        if (!v) return cli_fail("%s: option %s needs a value", cmd, a), -1;     \
        i++;                                                                     \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 1;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); o->model = v; }
        else if (!strcmp(a, "--prompt-ids")) { NEED(); o->ids = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEED(); o->text = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { NEED(); o->file = v; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { NEED(); o->out = v; }
        else if (!strcmp(a, "--key-file")) { NEED(); o->key_file = v; }
        else if (!strcmp(a, "--kern")) { NEED(); o->kern = v; }
        else if (!strcmp(a, "--plain")) o->plain = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--dry-run")) o->dry_run = true;
        else if (!strcmp(a, "--max-bytes")) {
            NEED();
            if (!cli_bytes(v, &o->max_bytes)) return cli_fail("%s: --max-bytes must be a byte count (K, M, G): %s", cmd, v), -1;
            o->has_max = true;
        }
        else if (!strcmp(a, "--codec")) {
            NEED();
            if (!strcmp(v, "raw")) o->codec = MU_KV_CODEC_RAW;
            else if (!strcmp(v, "lossless")) o->codec = MU_KV_CODEC_LOSSLESS;
            else return cli_fail("%s: --codec must be raw or lossless: %s", cmd, v), -1;
        } else if (!strcmp(a, "--ctx")) {
            NEED();
            if (!cli_int(v, 1, 1 << 24, &o->ctx)) return cli_fail("%s: --ctx must be a positive integer: %s", cmd, v), -1;
        } else if (!strcmp(a, "--threads")) {
            NEED();
            if (!cli_int(v, 1, 512, &o->threads)) return cli_fail("%s: --threads must be 1..512: %s", cmd, v), -1;
        } else if (a[0] == '-' && a[1]) return cli_fail("%s: unknown option '%s' (see muser pack --help)", cmd, a), -1;
        else if (!o->dir) o->dir = a;
        else return cli_fail("%s: unexpected argument '%s'", cmd, a), -1;
#undef NEED
    }
    return 0;
}

/* The key: --key-file, else the muser home's (created on first use). */
static int load_key(const char *cmd, const opts *o, uint8_t key[32]) {
    mu_err err = {0};
    if (mu_kv_root_key(o->key_file, key, &err)) return cli_fail("%s: %s", cmd, err.msg);
    return 0;
}

static int pack_save(int argc, char **argv) {
    static const char *cmd = "muser pack save";
    opts o;
    int p = parse(cmd, argc, argv, &o);
    if (p) return p < 0 ? 1 : 0;
    if (o.dir) return cli_fail("%s: unexpected argument '%s' (the pack directory is -o DIR)", cmd, o.dir);
    if (!!o.ids + !!o.text + !!o.file != 1) return cli_fail("%s: give exactly one of --prompt-ids, -p, -f", cmd);
    if (!o.out) return cli_fail("%s: -o DIR is required", cmd);
    if (!o.model && !(o.model = cli_default_model())) return 1;
    uint8_t key[32];
    if (load_key(cmd, &o, key)) return 1;
    mu_err err = {0};
    mu_model *m;
    if (mu_model_open(o.model, &m, &err)) return cli_fail("%s: %s", cmd, err.msg);
    int rc = 1;
    int32_t *ids = NULL;
    int n = 0;
    mu_engine *e = NULL;
    mu_session *s = NULL;
    mu_kv_ident *id = NULL;
    const mu_model_info *I = mu_model_get_info(m);
    if (o.ids) {
        if (!cli_ids(o.ids, &ids, &n)) {
            cli_fail("%s: --prompt-ids must be a comma-separated list of token ids", cmd);
            goto done;
        }
        for (int i = 0; i < n; i++)
            if (ids[i] >= I->n_vocab) {
                cli_fail("%s: prompt token id %d is outside the vocabulary (%d)", cmd, ids[i], I->n_vocab);
                goto done;
            }
    } else if (cli_prompt_tokens(m, o.text, o.file, &ids, &n)) {
        goto done;
    }
    if (n == 0) {
        cli_fail("%s: the prompt is empty", cmd);
        goto done;
    }
    int n_ctx = o.ctx ? (int)o.ctx : mu_kv_default_ctx(m);
    if (n > n_ctx) {
        cli_fail("%s: the prompt (%d tokens) exceeds the context (%d)", cmd, n, n_ctx);
        goto done;
    }
    mu_engine_opts eo = cli_engine_opts(&o.backend, (int)o.threads, o.kern);
    if (mu_engine_new(m, &eo, &e, &err) || mu_session_new(e, n_ctx, &s, &err) ||
        mu_kv_ident_new(e, o.model, &id, &err)) {
        cli_fail("%s: %s", cmd, err.msg);
        goto done;
    }
    mu_batch_item it = {.s = s, .tokens = ids, .n_tokens = n};
    if (mu_forward(e, &it, 1, &err)) {
        cli_fail("%s: %s", cmd, err.msg);
        goto done;
    }
    mu_kv_save_opts so = {.codec = o.codec, .plain = o.plain};
    if (mu_kv_pack_save(s, id, ids, n, key, &so, o.out, &err)) {
        cli_fail("%s: %s", cmd, err.msg);
        goto done;
    }
    printf("saved %d tokens to %s\n", n, o.out);
    rc = 0;
done:
    mu_kv_key_wipe(key);
    mu_kv_ident_free(id);
    mu_session_free(s);
    mu_engine_free(e);
    mu_model_close(m);
    free(ids);
    return rc;
}

/* "CATEGORY: reason" of a failed pack call */
static int verdict_line(const char *cmd, const mu_err *err) {
    const char *v = mu_kv_verdict(err), *msg = err->msg;
    if (!strncmp(msg, "kvpack: ", 8)) msg += 8;
    if (v && !strncmp(msg, v, strlen(v)) && msg[strlen(v)] == ':') return cli_fail("%s: %s", cmd, msg);
    return cli_fail("%s: %s: %s", cmd, v ? v : err->code == MU_E_IO ? "io" : mu_status_name(err->code), msg);
}

static int pack_verify(int argc, char **argv) {
    static const char *cmd = "muser pack verify";
    opts o;
    int p = parse(cmd, argc, argv, &o);
    if (p) return p < 0 ? 1 : 0;
    if (!o.dir) return cli_fail("%s: which pack directory?", cmd);
    uint8_t key[32];
    if (load_key(cmd, &o, key)) return 1;
    mu_err err = {0};
    mu_model *m = NULL;
    mu_engine *e = NULL;
    mu_kv_ident *id = NULL;
    int rc = 1;
    if (o.model) {
        mu_engine_opts eo = cli_engine_opts(&o.backend, 1, o.kern);
        if (mu_model_open(o.model, &m, &err) || mu_engine_new(m, &eo, &e, &err) ||
            mu_kv_ident_new(e, o.model, &id, &err)) {
            cli_fail("%s: %s", cmd, err.msg);
            goto done;
        }
    }
    if (mu_kv_pack_verify(o.dir, key, id, (int)o.ctx, &err)) {
        verdict_line(cmd, &err);
        goto done;
    }
    printf("ok\n");
    rc = 0;
done:
    mu_kv_key_wipe(key);
    mu_kv_ident_free(id);
    mu_engine_free(e);
    mu_model_close(m);
    return rc;
}

static int pack_inspect(int argc, char **argv) {
    static const char *cmd = "muser pack inspect";
    opts o;
    int p = parse(cmd, argc, argv, &o);
    if (p) return p < 0 ? 1 : 0;
    if (!o.dir) return cli_fail("%s: which pack directory?", cmd);
    uint8_t key[32];
    mu_err err = {0};
    /* the key is optional here: without one only the envelope is shown */
    bool have_key = false;
    if (o.key_file) {
        if (load_key(cmd, &o, key)) return 1;
        have_key = true;
    } else {
        char home[4096], path[4200];
        if (!mu_kv_home(home, sizeof home, false, &err)) {
            snprintf(path, sizeof path, "%s/kvpack.key", home);
            FILE *f = fopen(path, "rb");
            if (f) {
                fclose(f);
                have_key = !mu_kv_root_key(path, key, &err);
            }
        }
    }
    char *json = NULL;
    int rc = mu_kv_pack_inspect(o.dir, have_key ? key : NULL, &json, &err);
    if (have_key) mu_kv_key_wipe(key);
    if (rc) return verdict_line(cmd, &err);
    if (o.json) {
        printf("%s\n", json);
    } else {
        json_t *j = json_loads(json, 0, NULL);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            if (json_is_object(v)) {
                const char *k2;
                json_t *v2;
                json_object_foreach(v, k2, v2) printf("%s.%s: %s\n", k, k2, json_string_value(v2));
            } else if (json_is_string(v)) printf("%s: %s\n", k, json_string_value(v));
            else if (json_is_boolean(v)) printf("%s: %s\n", k, json_is_true(v) ? "true" : "false");
            else printf("%s: %lld\n", k, (long long)json_integer_value(v));
        }
        json_decref(j);
    }
    free(json);
    return 0;
}

/* The store: the positional directory, else <muser home>/packs. */
static int store_dir(const char *cmd, const opts *o, char *out, size_t cap) {
    mu_err err = {0};
    if (o->dir) {
        snprintf(out, cap, "%s", o->dir);
        return 0;
    }
    if (mu_kv_store_default(out, cap, false, &err)) return cli_fail("%s: %s", cmd, err.msg);
    return 0;
}

static int pack_ls(int argc, char **argv) {
    static const char *cmd = "muser pack ls";
    opts o;
    int p = parse(cmd, argc, argv, &o);
    if (p) return p < 0 ? 1 : 0;
    char dir[4096];
    if (store_dir(cmd, &o, dir, sizeof dir)) return 1;
    uint8_t key[32];
    bool have_key = !mu_kv_root_key(o.key_file, key, NULL);
    if (o.key_file && !have_key) return load_key(cmd, &o, key);
    mu_kv_store_entry *v = NULL;
    int n = 0;
    mu_err err = {0};
    int rc = mu_kv_store_list(dir, have_key ? key : NULL, &v, &n, &err);
    if (have_key) mu_kv_key_wipe(key);
    if (rc) return cli_fail("%s: %s", cmd, err.msg);
    uint64_t total = 0;
    json_t *arr = o.json ? json_array() : NULL;
    for (int i = 0; i < n; i++) {
        total += v[i].bytes;
        if (arr) {
            json_array_append_new(arr, json_pack("{s:s,s:I,s:I,s:I,s:b}", "name", v[i].name, "tokens",
                                                 (json_int_t)v[i].tokens, "bytes", (json_int_t)v[i].bytes, "mtime",
                                                 (json_int_t)v[i].mtime, "token_ids", v[i].has_tokens));
        } else {
            char t[32];
            if (v[i].tokens >= 0) snprintf(t, sizeof t, "%lld", (long long)v[i].tokens);
            else snprintf(t, sizeof t, "?");
            printf("%-32s %8s tokens %12llu bytes%s\n", v[i].name, t, (unsigned long long)v[i].bytes,
                   v[i].has_tokens ? "  ids" : "");
        }
    }
    if (arr) {
        char *s = json_dumps(arr, JSON_COMPACT);
        printf("%s\n", s ? s : "[]");
        free(s);
        json_decref(arr);
    } else {
        printf("%d pack%s, %llu bytes\n", n, n == 1 ? "" : "s", (unsigned long long)total);
    }
    free(v);
    return 0;
}

static int pack_gc(int argc, char **argv) {
    static const char *cmd = "muser pack gc";
    opts o;
    int p = parse(cmd, argc, argv, &o);
    if (p) return p < 0 ? 1 : 0;
    char dir[4096];
    if (store_dir(cmd, &o, dir, sizeof dir)) return 1;
    mu_kv_gc_report r;
    mu_err err = {0};
    if (mu_kv_store_gc(dir, o.has_max ? (uint64_t)o.max_bytes : UINT64_MAX, o.dry_run, &r, &err))
        return cli_fail("%s: %s", cmd, err.msg);
    printf("%s%d of %d packs (%llu of %llu bytes), %d partial director%s of dead writers\n",
           o.dry_run ? "would remove " : "removed ", r.n_removed, r.n_packs, (unsigned long long)r.bytes_removed,
           (unsigned long long)r.bytes, r.n_partials, r.n_partials == 1 ? "y" : "ies");
    return 0;
}

int cmd_pack(int argc, char **argv) {
    if (argc < 2) return usage();
    if (!strcmp(argv[1], "save")) return pack_save(argc - 1, argv + 1);
    if (!strcmp(argv[1], "verify")) return pack_verify(argc - 1, argv + 1);
    if (!strcmp(argv[1], "inspect")) return pack_inspect(argc - 1, argv + 1);
    if (!strcmp(argv[1], "ls")) return pack_ls(argc - 1, argv + 1);
    if (!strcmp(argv[1], "gc")) return pack_gc(argc - 1, argv + 1);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) return usage(), 0;
    return cli_fail("muser pack: unknown subcommand '%s' (save, verify, inspect, ls, gc)", argv[1]);
}
