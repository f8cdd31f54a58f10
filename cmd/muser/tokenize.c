/* tokenize.c: `muser tokenize`: print the token ids of a text as one JSON
 * array on one line (no BOS), the way llama.cpp's tokenizer would produce
 * them. Owns only argument handling and output; the tokenizer is
 * src/tok/tokenizer.c behind mu_tok_open (include/muser.h), which reads the
 * tokenizer alone (no model binding, no engine), so it works on any GGUF
 * with a llama4 tokenizer. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser.h"
#include "cli.h"

static const char USAGE[] =
    "usage: muser tokenize [-m MODEL.gguf] [--special] (-f FILE | --json-in FILE | TEXT)\n"
    "  Prints the token ids of TEXT (or of FILE's bytes) as a JSON array on one\n"
    "  line, without BOS.\n"
    "  -m MODEL       GGUF file (default: the default model)\n"
    "  --special      parse special-token texts such as <|eot|> (control tokens);\n"
    "                 <|start|> and <|message|> are split out even without it\n"
    "  -f FILE        tokenize the bytes of FILE (- for stdin)\n"
    "  --json-in FILE FILE holds a JSON array of strings; prints one line per string\n";

static int read_file(const char *path, char **out, size_t *n) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return cli_fail("muser tokenize: cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb, cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    bool bad = !buf || ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        free(buf);
        return cli_fail("muser tokenize: cannot read %s", path);
    }
    *out = buf;
    *n = len;
    return 0;
}

static int print_ids(const mu_tok *t, const char *text, size_t len, bool special) {
    int32_t *ids;
    int n;
    mu_err err = {0};
    if (mu_tok_encode(t, text, len, special, &ids, &n, &err)) return cli_fail("muser tokenize: %s", err.msg);
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    puts("]");
    free(ids);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *json_in = NULL, *text = NULL;
    bool special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "-f") || !strcmp(a, "--json-in")) {
            if (i + 1 >= argc) return cli_fail("muser tokenize: %s needs a value", a);
            const char **dst = a[1] == 'm' ? &model : a[1] == 'f' ? &file : &json_in;
            *dst = argv[++i];
        } else if (!strcmp(a, "--")) {
            if (i + 1 < argc) text = argv[++i];
            if (i + 1 < argc) return cli_fail("muser tokenize: one TEXT argument expected");
        } else if (a[0] == '-' && a[1]) {
            return cli_fail("muser tokenize: unknown option %s (see --help)", a);
        } else {
            if (text) return cli_fail("muser tokenize: one TEXT argument expected (quote it)");
            text = a;
        }
    }
    if ((file != NULL) + (json_in != NULL) + (text != NULL) != 1)
        return cli_fail("muser tokenize: give exactly one of TEXT, -f FILE, --json-in FILE");
    if (!model && !(model = cli_default_model())) return 1;

    char *buf = NULL;
    size_t len = 0;
    json_t *arr = NULL;
    if (file && read_file(file, &buf, &len)) return 1;
    if (json_in) {
        json_error_t je;
        arr = json_load_file(json_in, JSON_ALLOW_NUL, &je);
        if (!arr || !json_is_array(arr)) {
            json_decref(arr);
            return cli_fail("muser tokenize: %s: expected a JSON array of strings (line %d: %s)", json_in,
                            je.line, arr ? "not an array" : je.text);
        }
        for (size_t i = 0; i < json_array_size(arr); i++)
            if (!json_is_string(json_array_get(arr, i))) {
                json_decref(arr);
                return cli_fail("muser tokenize: %s: element %zu is not a string", json_in, i);
            }
    }

    mu_err err = {0};
    mu_tok *t = NULL;
    int rc = 0;
    if (mu_tok_open(model, &t, &err)) {
        rc = cli_fail("muser tokenize: %s: %s", model, err.msg);
    } else if (text) {
        rc = print_ids(t, text, strlen(text), special);
    } else if (file) {
        rc = print_ids(t, buf, len, special);
    } else {
        for (size_t i = 0; i < json_array_size(arr) && !rc; i++) {
            json_t *s = json_array_get(arr, i);
            rc = print_ids(t, json_string_value(s), json_string_length(s), special);
        }
    }
    if (fflush(stdout)) rc = cli_fail("muser tokenize: cannot write output");
    mu_tok_free(t);
    free(buf);
    json_decref(arr);
    return rc;
}
