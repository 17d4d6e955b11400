/* sluice: the command-line front end; dispatches to subcommands listed in commands.def. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} command_t;

static const command_t commands[] = {
#define SL_CLI_COMMAND(fn, name, summary) {name, summary, fn},
#include "commands.def"
#undef SL_CLI_COMMAND
};

static void usage(FILE *out)
{
    fprintf(out, "usage: sluice COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'sluice COMMAND --help' describes a command.\n"
                 "exit codes: 0 ok, 1 invalid or unreadable input, 2 usage error,\n"
                 "            3 tokenizer vocabulary missing or invalid, 4 sluiced unreachable,\n"
                 "            5 not granted (queued or rejected), 6 sluiced answered an error,\n"
                 "            7 checkpoint: files changed since it was saved\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return SL_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return SL_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return SL_EXIT_USAGE;
}
