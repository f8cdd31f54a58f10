/* default_model.c: the model used when -m is omitted: $MUSER_MODEL, else
 * the bundled models/muser-default.gguf next to the binary, else a small
 * random-weight model that `muser gen` writes once into build/ (so a fresh
 * clone runs without any download). Also where the bundled model is, for
 * its drafter (cli_spec_open). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int cmd_gen(int argc, char **argv);

static bool exe_dir(char *out, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) return false;
    out[n] = 0;
    char *slash = strrchr(out, '/');
    if (!slash) return false;
    *slash = 0;
    return true;
}

/* The bundled model's path into path (PATH_MAX) when it is there. */
static bool bundled(const char *dir, char *path) {
    /* the binary sits at the repository root (./muser) or in build/ */
    const char *rel[] = {"models/muser-default.gguf", "../models/muser-default.gguf"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        snprintf(path, PATH_MAX, "%s/%s", dir, rel[i]);
        if (access(path, R_OK) == 0) return true;
    }
    return false;
}

const char *cli_bundled_model(void) {
    static char path[PATH_MAX];
    char dir[PATH_MAX - 64];
    return exe_dir(dir, sizeof dir) && bundled(dir, path) ? path : NULL;
}

const char *cli_default_model(void) {
    static char path[PATH_MAX];
    const char *env = getenv("MUSER_MODEL");
    if (env && *env) return env;
    char dir[PATH_MAX - 64];
    if (!exe_dir(dir, sizeof dir)) {
        cli_fail("muser: cannot locate the muser binary to find the bundled model; pass -m");
        return NULL;
    }
    if (bundled(dir, path)) return path;
    snprintf(path, sizeof path, "%s/build/default-tiny.gguf", dir);
    if (access(path, R_OK) == 0) return path;
    char build[PATH_MAX];
    snprintf(build, sizeof build, "%s/build", dir);
    mkdir(build, 0755);
    fprintf(stderr, "muser: no bundled model found; writing a small random-weight model to %s (first use only)\n",
            path);
    char *argv[] = {"gen", "--preset", "tiny", "--type", "q8_0", "--seed", "1", "--name", "muser-tiny-random",
                    "-o", path, NULL};
    if (cmd_gen(11, argv) != 0) return NULL;
    return path;
}
