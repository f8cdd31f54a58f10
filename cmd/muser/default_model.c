/* default_model.c: the model used when -m is omitted: the bundled
 * models/muser-default.gguf next to the binary, or $MUSER_MODEL. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char *cli_default_model(void) {
    static char path[PATH_MAX];
    const char *env = getenv("MUSER_MODEL");
    if (env && *env) return env;
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *rel[] = {"models/muser-default.gguf", "../models/muser-default.gguf", "../../models/muser-default.gguf"};
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            snprintf(path, sizeof path, "%s/%s", exe, rel[i]);
            if (access(path, R_OK) == 0) return path;
        }
    }
    cli_fail("muser: no model given (-m) and no bundled models/muser-default.gguf found; set MUSER_MODEL or pass -m");
    return NULL;
}
