/* up.c: `muser up`: one command from a model name to a running server with
 * its dashboard.
 *   muser up [NAME|PATH|URL] [--host H] [--port P] [--no-open] [--sha256 HEX]
 *            [--tls-cert F --tls-key F] [--api-key-file F]
 *            [--exit-after-start] [-- SERVE-OPTIONS...]
 * Owns: resolving the argument (none: the bundled default; a local GGUF; a
 * name from the catalog, models/catalog.tsv; a URL), the muser home where
 * downloads go, printing and opening the dashboard URL.
 * Does not own: downloading and verifying (fetch.c), the catalog format
 * (catalog.c), serving (serve.c, whose code path `up` runs unchanged).
 * Design: every model a download produced is verified by SHA-256 before its
 * first use; docs/up.md says what each case does. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "catalog.h"
#include "cli.h"
#include "fetch.h"
#include "../../include/muser_serve.h"

int cmd_serve(int argc, char **argv);
extern char **environ;

static int usage(void) {
    fprintf(stderr,
            "usage: muser up [NAME|PATH|URL] [--host H] [--port P] [--no-open] [--sha256 HEX]\n"
            "                [--tls-cert F --tls-key F] [--api-key-file F] [--mmproj P.gguf]\n"
            "                [--exit-after-start] [-- SERVE-OPTIONS...]\n"
            "Resolves the model (none: the bundled default; a GGUF file; a name from models/catalog.tsv;\n"
            "a URL, which needs --sha256), downloads it into the muser home ($MUSER_HOME, else\n"
            "$XDG_DATA_HOME/muser, else ~/.local/share/muser) with resume and SHA-256 verification,\n"
            "serves it (options after -- go to muser serve) and prints the dashboard URL, which it\n"
            "opens with xdg-open on a desktop unless --no-open. --mmproj: a vision projector (a local\n"
            "file) for images in requests.\n");
    return 1;
}

/* ---- where things are -------------------------------------------------- */

/* The muser home: $MUSER_HOME, $XDG_DATA_HOME/muser, ~/.local/share/muser. */
static int home_dir(char *out, size_t cap) {
    const char *h = getenv("MUSER_HOME"), *x = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    int n;
    if (h && *h) n = snprintf(out, cap, "%s", h);
    else if (x && *x == '/') n = snprintf(out, cap, "%s/muser", x);
    else if (home && *home) n = snprintf(out, cap, "%s/.local/share/muser", home);
    else return cli_fail("muser up: no home directory: set MUSER_HOME or HOME");
    if (n < 0 || (size_t)n >= cap) return cli_fail("muser up: the muser home path is too long");
    return 0;
}

/* The repository the binary runs from: the nearest of its folder and the
 * two above (./muser, build/muser, build/asan/muser) that holds
 * models/catalog.tsv. */
static bool repo_dir(char *out, size_t cap) {
    char dir[PATH_MAX], probe[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) return false;
    dir[n] = 0;
    for (int up = 0; up < 3; up++) {
        char *s = strrchr(dir, '/');
        if (!s || s == dir) return false;
        *s = 0;
        snprintf(probe, sizeof probe, "%s/models/catalog.tsv", dir);
        if (access(probe, R_OK) == 0) return snprintf(out, cap, "%s", dir) < (int)cap;
    }
    return false;
}

/* Reads the catalog ($MUSER_CATALOG, else models/catalog.tsv of the
 * repository) into a malloc'ed buffer; NULL with *path set when absent. */
static char *catalog_read(char *path, size_t cap, size_t *n) {
    const char *env = getenv("MUSER_CATALOG");
    char repo[PATH_MAX];
    snprintf(path, cap, "models/catalog.tsv");
    if (env && *env) snprintf(path, cap, "%s", env);
    else if (!repo_dir(repo, sizeof repo) || snprintf(path, cap, "%s/models/catalog.tsv", repo) >= (int)cap)
        return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    bool big = buf && fgetc(f) != EOF;
    fclose(f);
    if (big) {
        free(buf);
        cli_fail("muser up: the catalog is larger than 1 MiB: %s", path);
        return NULL;
    }
    return buf;
}

/* ---- the dashboard ----------------------------------------------------- */

static bool no_open, exit_after_start;

/* xdg-open, detached: a shell backgrounds it and exits at once (the server's
 * threads are running, so posix_spawn rather than fork + exec). */
static void open_url(const char *url) {
    const char *d = getenv("DISPLAY"), *w = getenv("WAYLAND_DISPLAY");
    if (no_open || !((d && *d) || (w && *w))) return;
    char *argv[] = {"sh", "-c", "xdg-open \"$1\" </dev/null >/dev/null 2>&1 &", "sh", (char *)url, NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "sh", NULL, NULL, argv, environ) == 0) waitpid(pid, NULL, 0);
}

static bool on_ready(bool tls, const char *hosts, int port) {
    char url[512], host[256];
    snprintf(host, sizeof host, "%.*s", (int)strcspn(hosts, ","), hosts); /* a --host list: its first address */
    bool v6 = strchr(host, ':') != NULL;
    const char *h = !strcmp(host, "0.0.0.0") ? "127.0.0.1" : !strcmp(host, "::") ? "::1" : host;
    snprintf(url, sizeof url, "%s://%s%s%s:%d/", tls ? "https" : "http", v6 ? "[" : "", h, v6 ? "]" : "", port);
    printf("dashboard: %s\n", url);
    fflush(stdout);
    open_url(url);
    return exit_after_start;
}

/* ---- the command ------------------------------------------------------- */

static bool is_url(const char *s) { return !strncmp(s, "http://", 7) || !strncmp(s, "https://", 8); }

/* The file name a URL is stored under: its last path segment, when that is a
 * plain name; else "download.gguf". */
static void url_file_name(const char *url, char *out, size_t cap) {
    const char *p = strstr(url, "://") + 3;
    size_t end = strcspn(p, "?#");
    const char *last = p;
    for (size_t i = 0; i < end; i++)
        if (p[i] == '/') last = p + i + 1;
    size_t n = (size_t)(p + end - last);
    bool ok = n > 0 && n < 200 && last[0] != '.';
    for (size_t i = 0; ok && i < n; i++) {
        char c = last[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
             c == '-';
    }
    if (ok) snprintf(out, cap, "%.*s", (int)n, last);
    else snprintf(out, cap, "download.gguf");
}

int cmd_up(int argc, char **argv) {
    const char *what = NULL, *host = "127.0.0.1", *sha_arg = NULL, *cert = NULL, *tls_key = NULL, *key_file = NULL,
               *mmproj = NULL;
    long long port = 4949;
    int pass = argc; /* index of the first option for serve */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            pass = i + 1;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "--host")) { if (!v) return cli_fail("muser up: option --host needs a value"); host = v; i++; }
        else if (!strcmp(a, "--port")) {
            if (!v) return cli_fail("muser up: option --port needs a value");
            if (!cli_int(v, 0, 65535, &port)) return cli_fail("muser up: --port must be 0..65535: %s", v);
            i++;
        }
        else if (!strcmp(a, "--sha256")) { if (!v) return cli_fail("muser up: option --sha256 needs a value"); sha_arg = v; i++; }
        else if (!strcmp(a, "--tls-cert")) { if (!v) return cli_fail("muser up: option --tls-cert needs a value"); cert = v; i++; }
        else if (!strcmp(a, "--tls-key")) { if (!v) return cli_fail("muser up: option --tls-key needs a value"); tls_key = v; i++; }
        else if (!strcmp(a, "--api-key-file")) { if (!v) return cli_fail("muser up: option --api-key-file needs a value"); key_file = v; i++; }
        else if (!strcmp(a, "--mmproj")) { if (!v) return cli_fail("muser up: option --mmproj needs a value"); mmproj = v; i++; }
        else if (!strcmp(a, "--no-open")) no_open = true;
        else if (!strcmp(a, "--exit-after-start")) exit_after_start = true;
        else if (a[0] == '-' && a[1]) return cli_fail("muser up: unknown option '%s' (see muser up --help)", a);
        else if (what) return cli_fail("muser up: more than one model given: '%s' and '%s'", what, a);
        else what = a;
    }
    /* the bind policy before anything is downloaded (serve checks it again,
     * with what comes after --) */
    if (!!cert != !!tls_key) return cli_fail("muser up: --tls-cert and --tls-key go together");
    bool has_tls = cert != NULL, has_key = key_file != NULL;
    for (int i = pass; i < argc; i++) {
        has_tls |= !strcmp(argv[i], "--tls-cert");
        has_key |= !strcmp(argv[i], "--api-key-file");
    }
    mu_err berr = {0};
    if (mu_serve_bind_check(host, has_tls, has_key, &berr)) return cli_fail("muser up: %s", berr.msg);
    char sha[65] = "";
    if (sha_arg && !catalog_sha_ok(sha_arg, sha)) return cli_fail("muser up: --sha256 must be 64 hex digits: %s", sha_arg);

    char home[PATH_MAX - 256], models[PATH_MAX - 128], model[PATH_MAX];
    if (home_dir(home, sizeof home)) return 1;
    snprintf(models, sizeof models, "%s/models", home);

    const char *env = getenv("MUSER_MODEL");
    if (!what && env && *env) what = env; /* the user's default, used as a path */
    struct stat st;
    if (what && is_url(what)) {
        if (!*sha) return cli_fail("muser up: a URL needs --sha256 HEX: the file is verified before first use");
        char name[256];
        url_file_name(what, name, sizeof name);
        if (snprintf(model, sizeof model, "%s/%s", models, name) >= (int)sizeof model)
            return cli_fail("muser up: the muser home path is too long");
        if (fetch_mkdirs(models)) return 1;
        const char *urls[1] = {what};
        fetch_req r = {.what = name, .urls = urls, .n_urls = 1, .dest = model, .sha256 = sha};
        if (fetch_model(&r)) return 1;
    } else if (what && (stat(what, &st) == 0 || strchr(what, '/') || strstr(what, ".gguf"))) {
        if (stat(what, &st)) return cli_fail("muser up: cannot open %s: %s", what, strerror(errno));
        if (!S_ISREG(st.st_mode)) return cli_fail("muser up: not a regular file: %s", what);
        snprintf(model, sizeof model, "%s", what);
        if (*sha) {
            char got[65];
            if (fetch_sha256_file(model, model, got)) return 1;
            if (strcmp(got, sha)) return cli_fail("muser up: %s: wrong SHA-256: expected %s, got %s", model, sha, got);
        }
    } else {
        const char *name = what ? what : "muser-default";
        char cpath[PATH_MAX], repo[PATH_MAX];
        size_t n = 0;
        char *text = catalog_read(cpath, sizeof cpath, &n);
        if (!text) {
            if (what) return cli_fail("muser up: no catalog to look '%s' up in (%s): give a path or a URL", what, cpath);
            const char *def = cli_default_model(); /* a binary without its repository */
            if (!def) return 1;
            snprintf(model, sizeof model, "%s", def);
        } else {
            catalog_entry e;
            mu_err err = {0};
            int found = catalog_find(text, n, name, &e, &err);
            if (found < 0) {
                free(text);
                return cli_fail("muser up: %s: %s", cpath, err.msg);
            }
            if (!found) {
                char names[512];
                catalog_names(text, n, names, sizeof names);
                free(text);
                return cli_fail("muser up: unknown model '%s' (the catalog has: %s; or give a path or a URL)", name,
                                names);
            }
            free(text);
            if (*sha && strcmp(sha, e.sha256))
                return cli_fail("muser up: --sha256 differs from the catalog's hash of %s", e.name);
            fprintf(stderr, "muser up: %s: %llu bytes, license: %s\n", e.name, (unsigned long long)e.bytes, e.license);
            if (e.bundled) {
                if (!repo_dir(repo, sizeof repo)) return cli_fail("muser up: cannot locate the muser binary's repository");
                if (snprintf(model, sizeof model, "%s/%s", repo, e.path) >= (int)sizeof model)
                    return cli_fail("muser up: %s: the bundled path is too long", e.name);
                if (stat(model, &st)) return cli_fail("muser up: %s: the bundled file is missing: %s", e.name, model);
                if ((uint64_t)st.st_size != e.bytes)
                    return cli_fail("muser up: %s: the bundled file has %llu bytes, the catalog says %llu: %s", e.name,
                                    (unsigned long long)st.st_size, (unsigned long long)e.bytes, model);
                char got[65];
                if (fetch_sha256_file(model, e.name, got)) return 1;
                if (strcmp(got, e.sha256))
                    return cli_fail("muser up: %s: wrong SHA-256 in %s: expected %s, got %s", e.name, model, e.sha256,
                                    got);
            } else {
                snprintf(model, sizeof model, "%s/%s.gguf", models, e.name);
                if (fetch_mkdirs(models)) return 1;
                const char *urls[CATALOG_MAX_URLS];
                for (int i = 0; i < e.n_urls; i++) urls[i] = e.urls[i];
                fetch_req r = {.what = e.name, .urls = urls, .n_urls = e.n_urls, .dest = model, .bytes = e.bytes,
                               .sha256 = e.sha256};
                if (fetch_model(&r)) return 1;
            }
        }
    }

    char port_s[16];
    snprintf(port_s, sizeof port_s, "%lld", port);
    int n_pass = argc - pass;
    char **sargv = calloc((size_t)n_pass + 16, sizeof *sargv);
    if (!sargv) return cli_fail("muser up: out of memory");
    int k = 0;
    sargv[k++] = "serve";
    sargv[k++] = "-m";
    sargv[k++] = model;
    sargv[k++] = "--host";
    sargv[k++] = (char *)host;
    sargv[k++] = "--port";
    sargv[k++] = port_s;
    if (cert) {
        sargv[k++] = "--tls-cert";
        sargv[k++] = (char *)cert;
        sargv[k++] = "--tls-key";
        sargv[k++] = (char *)tls_key;
    }
    if (key_file) {
        sargv[k++] = "--api-key-file";
        sargv[k++] = (char *)key_file;
    }
    if (mmproj) {
        sargv[k++] = "--mmproj";
        sargv[k++] = (char *)mmproj;
    }
    for (int i = pass; i < argc; i++) sargv[k++] = argv[i];
    sargv[k] = NULL;
    cli_serve_ready = on_ready;
    int rc = cmd_serve(k, sargv);
    cli_serve_ready = NULL;
    free(sargv);
    return rc;
}
