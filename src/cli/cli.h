/* Shared declarations of the sluice command: subcommands, exit codes, input helpers. */
#ifndef SL_CLI_H
#define SL_CLI_H

#include <stdbool.h>
#include <stddef.h>

/* Exit codes shared by every subcommand. */
enum {
    SL_EXIT_OK = 0,
    SL_EXIT_FAILURE = 1, /* the input is invalid or cannot be read */
    SL_EXIT_USAGE = 2,   /* unknown command or option, wrong arguments */
    SL_EXIT_VOCAB = 3    /* the tokenizer vocabulary is missing or invalid */
};

/* A subcommand gets argv with argv[0] = its name and returns an exit code. */
#define SL_CLI_COMMAND(fn, name, summary) int fn(int argc, char **argv);
#include "commands.def"
#undef SL_CLI_COMMAND

/* Reads all of `path` ("-" or NULL: standard input) into a NUL-terminated buffer the
 * caller frees. Returns 0, or -1 with a message naming the file in err. */
int sl_cli_read_input(const char *path, char **data, size_t *len, char *err, size_t err_size);

/* An option whose value is kept as given (a path, a name): the option table of a
 * subcommand's plain text values. */
typedef struct sl_cli_text_option {
    const char *flag;   /* "--out" */
    const char **value; /* where its value goes */
} sl_cli_text_option_t;

/* When argv[*i] is one of the `n` options and a value follows it, stores that value and
 * steps *i over it: true. Else false (another argument, or the value is missing). */
bool sl_cli_text_option(const sl_cli_text_option_t *options, size_t n, int argc, char **argv,
                        int *i);

#endif
