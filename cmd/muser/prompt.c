/* prompt.c: CLI text handling: prompt text or file -> ids with the model's
 * tokenizer (BOS per tokenizer.ggml.add_bos_token, special tokens not parsed,
 * as llama.cpp's completion tools do), and streaming UTF-8-safe output. */
#include "prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/tok/tokenizer.h"
#include "cli.h"

#define MAX_PROMPT_FILE (256u << 20)

struct cli_text {
    mu_detok *d;
};

static int read_file(const char *path, char **out, size_t *n) {
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
    if (file && read_file(file, &owned, &len)) return 1;
    mu_err err = {0};
    int rc = mu_tokenize(m, owned ? owned : text, len, mu_model_get_info(m)->add_bos, false, ids, n, &err);
    free(owned);
    if (rc) return cli_fail("muser: %s", err.msg);
    return 0;
}

cli_text *cli_text_new(const mu_model *m) {
    const mu_tok *tok = mu_model_tokenizer(m);
    if (!tok) {
        cli_fail("muser: the model has no tokenizer; use --json for token ids");
        return NULL;
    }
    cli_text *t = calloc(1, sizeof *t);
    mu_err err = {0};
    if (!t || mu_detok_new(tok, 0, &t->d, &err)) {
        cli_fail("muser: %s", t ? err.msg : "out of memory");
        free(t);
        return NULL;
    }
    return t;
}

void cli_text_put(cli_text *t, int32_t id) {
    const char *out;
    size_t n;
    if (mu_detok_push(t->d, id, &out, &n, NULL) == 0 && n) fwrite(out, 1, n, stdout);
}

void cli_text_end(cli_text *t) {
    const char *out;
    size_t n;
    mu_detok_flush(t->d, &out, &n);
    if (n) fwrite(out, 1, n, stdout);
    putchar('\n');
}

void cli_text_free(cli_text *t) {
    if (!t) return;
    mu_detok_free(t->d);
    free(t);
}
