/* prompt.c: CLI prompts: prompt text or file -> ids with the model's
 * tokenizer (BOS per tokenizer.ggml.add_bos_token, special tokens not parsed,
 * as llama.cpp's completion tools do). */
#include "prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define MAX_PROMPT_FILE (256u << 20)

int cli_read_file(const char *path, char **out, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail("muser: cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return cli_fail("muser: out of memory reading %s", path);
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        if (cap >= MAX_PROMPT_FILE) {
            free(buf);
            fclose(f);
            return cli_fail("muser: %s is larger than %u MiB", path, MAX_PROMPT_FILE >> 20);
        }
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb) free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return cli_fail("muser: cannot read %s", path);
    }
    *out = buf;
    *n = len;
    return 0;
}

int cli_prompt_tokens(const mu_model *m, const char *text, const char *file, int32_t **ids, int *n) {
    char *owned = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file && cli_read_file(file, &owned, &len)) return 1;
    mu_err err = {0};
    int rc = mu_tokenize(m, owned ? owned : text, len, mu_model_get_info(m)->add_bos, false, ids, n, &err);
    free(owned);
    if (rc) return cli_fail("muser: %s", err.msg);
    return 0;
}

int cli_media_prompt(const char *who, mu_engine *e, const mu_mmproj *p, const char *text, const char *file,
                     const char *const *images, int n_images, bool add_bos, mu_mprompt **out) {
    char *owned = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file && cli_read_file(file, &owned, &len)) return 1;
    const char *t = owned ? owned : text ? text : "";
    const size_t ml = strlen(MU_MEDIA_MARKER);
    bool has_marker = false;
    for (size_t i = 0; i + ml <= len && !has_marker; i++) has_marker = !memcmp(t + i, MU_MEDIA_MARKER, ml);
    char *full = NULL;
    if (!has_marker) { /* llama.cpp's mtmd-cli: one marker per image before the text */
        full = malloc(ml * (size_t)n_images + len + 1);
        if (!full) {
            free(owned);
            return cli_fail("%s: out of memory", who);
        }
        for (int k = 0; k < n_images; k++) memcpy(full + ml * (size_t)k, MU_MEDIA_MARKER, ml);
        memcpy(full + ml * (size_t)n_images, t, len);
        len += ml * (size_t)n_images;
        t = full;
    }
    mu_media media[16];
    char *bytes[16] = {0};
    int rc = 0;
    for (int k = 0; k < n_images && k < 16 && !rc; k++) {
        size_t n = 0;
        if (cli_read_file(images[k], &bytes[k], &n)) rc = 1;
        media[k] = (mu_media){bytes[k], n};
    }
    mu_err err = {0};
    struct timespec t0, t1, c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    if (!rc && mu_mprompt_new(e, p, t, len, add_bos, media, n_images, out, &err)) rc = cli_fail("%s: %s", who, err.msg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    if (!rc && getenv("MUSER_IMAGE_TIMING")) /* bench/vision */
        fprintf(stderr, "%s: %d image(s) encoded in %.3f s (process CPU %.3f s; %d prompt positions)\n", who,
                n_images, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
                (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9, mu_mprompt_n(*out));
    const char *dump = getenv("MUSER_IMAGE_DUMP"); /* bench/vision: the image rows, float32, in prompt order */
    if (!rc && dump) {
        FILE *f = fopen(dump, "wb");
        const int n_out = mu_mmproj_get_info(p)->n_out;
        for (int i = 0; f && i < mu_mprompt_n(*out); i++) {
            const float *row = mu_mprompt_embd(*out, i);
            if (row && fwrite(row, sizeof *row, (size_t)n_out, f) != (size_t)n_out) break;
        }
        if (!f || fclose(f)) rc = cli_fail("%s: cannot write %s", who, dump);
    }
    for (int k = 0; k < 16; k++) free(bytes[k]);
    free(full);
    free(owned);
    return rc;
}
