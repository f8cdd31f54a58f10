/* main.c: the muser program: dispatches to one subcommand per file in this
 * directory. A subcommand is `int cmd_<name>(int argc, char **argv)` returning
 * the exit code; argv[0] is the subcommand name. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_up(int argc, char **argv);
int cmd_tls(int argc, char **argv);
int cmd_producer(int argc, char **argv);
int cmd_node(int argc, char **argv);

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} subcommand;

static const subcommand table[] = {
    {"run", cmd_run, "generate from a prompt (text or --prompt-ids)"},
    {"chat", cmd_chat, "interactive terminal chat"},
    {"up", cmd_up, "download (resumed, SHA-256 verified) and serve a model; prints the dashboard URL"},
    {"serve", cmd_serve, "HTTP server: OpenAI, llama.cpp and Ollama APIs"},
    {"bench", cmd_bench, "prefill and decode speed at fixed depths"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"info", cmd_info, "model geometry, tensor types and sizes"},
    {"gen", cmd_gen, "write a Muse Glimmer GGUF with seeded random weights"},
    {"pack", cmd_pack, "KV packs: save a prompt's KV state, verify, inspect"},
    {"producer", cmd_producer, "remote prefill node: prefill prompts for enrolled decoders over mutual TLS"},
    {"node", cmd_node, "remote prefill nodes: add (enroll, qualify), qualify, status, remove"},
    {"tls", cmd_tls, "local CA and certificates for the prefill lane"},
    {NULL, NULL, NULL},
};

static int usage(FILE *f) {
    fprintf(f, "usage: muser <command> [options]\n\ncommands:\n");
    for (const subcommand *s = table; s->name; s++) fprintf(f, "  %-9s %s\n", s->name, s->help);
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
    for (const subcommand *s = table; s->name; s++)
        if (!strcmp(s->name, argv[1])) return s->fn(argc - 1, argv + 1);
    return cli_fail("muser: unknown command '%s' (try muser --help)", argv[1]);
}
