/* sluice count-tokens: the Claude token count of a text file or standard input. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sluice/tokenizer.h"
#include "tokenize_input.h"

static void count_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice count-tokens [FILE|-]\n\n"
            "Prints the number of tokens in FILE (default: standard input) as counted by\n"
            "the Claude tokenizer of @anthropic-ai/tokenizer: the bytes are read as UTF-8\n"
            "(invalid sequences count as U+FFFD), NFKC-normalised, special tokens allowed.\n\n"
            "The vocabulary is $SLUICE_VOCAB, else %s.\n\n"
            "exit codes: 0 ok, 1 input unreadable, 2 usage error, 3 vocabulary missing or "
            "invalid\n",
            sl_tokenizer_default_path());
}

/* Prints the token count of the input. */
static int print_count(sl_tokenizer_t *tok, const char *data, size_t len, void *ud, char *err,
                       size_t err_size)
{
    (void)ud;
    int64_t tokens;
    if (sl_tokenizer_count(tok, data, len, &tokens) != 0) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    printf("%" PRId64 "\n", tokens);
    return 0;
}

int sl_cli_count_tokens(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            count_usage(stdout);
            return SL_EXIT_OK;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "sluice count-tokens: unknown option \"%s\"\n", argv[i]);
            count_usage(stderr);
            return SL_EXIT_USAGE;
        }
        if (path) {
            fprintf(stderr, "sluice count-tokens: more than one FILE (\"%s\")\n", argv[i]);
            return SL_EXIT_USAGE;
        }
        path = argv[i];
    }
    return sl_cli_tokenize_input("sluice count-tokens", path, print_count, NULL);
}
