/* main.c: the muser program: dispatches to one subcommand per file in this
 * directory. A subcommand is `int cmd_<name>(int argc, char **argv)` returning
 * the exit code; argv[0] is the subcommand name. Subcommands not linked into
 * this build are reported as such. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define SUB(n) extern int cmd_##n(int argc, char **argv) __attribute__((weak));
SUB(run) SUB(info) SUB(gen) SUB(tokenize) SUB(chat) SUB(serve) SUB(bench) SUB(up)
#undef SUB

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} subcommand;

static int usage(FILE *f);

static const subcommand *table(void) {
    static subcommand t[16];
    static int done;
    if (!done) {
        int i = 0;
#define ADD(n, h) t[i++] = (subcommand){#n, cmd_##n, h};
        ADD(run, "generate from a prompt (text or --prompt-ids)")
        ADD(chat, "interactive terminal chat")
        ADD(serve, "HTTP server: OpenAI, llama.cpp and Ollama APIs")
        ADD(bench, "prefill and decode speed at fixed depths")
        ADD(tokenize, "print the token ids of a text")
        ADD(info, "model geometry, tensor types and sizes")
        ADD(gen, "write a Muse Glimmer GGUF with seeded random weights")
        ADD(up, "serve the default model and open the dashboard")
#undef ADD
        t[i] = (subcommand){0};
        done = 1;
    }
    return t;
}

static int usage(FILE *f) {
    fprintf(f, "usage: muser <command> [options]\n\ncommands:\n");
    for (const subcommand *s = table(); s->name; s++)
        if (s->fn) fprintf(f, "  %-9s %s\n", s->name, s->help);
    fprintf(f, "\n`muser <command> --help` describes each command's options.\n");
    return f == stderr ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) return usage(stdout);
    if (!strcmp(argv[1], "--version")) {
        printf("muser %s\n", MU_COMMIT);
        return 0;
    }
    for (const subcommand *s = table(); s->name; s++) {
        if (strcmp(s->name, argv[1])) continue;
        if (!s->fn) return cli_fail("muser: command '%s' is not part of this build", argv[1]);
        return s->fn(argc - 1, argv + 1);
    }
    return cli_fail("muser: unknown command '%s' (try muser --help)", argv[1]);
}
