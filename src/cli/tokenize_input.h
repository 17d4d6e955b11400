/* tokenize_input.h - what the tokenizer subcommands (count-tokens, estimate) share: the
 * bundled tokenizer and one input file, loaded, handed to the command, freed. */
#ifndef SL_CLI_TOKENIZE_INPUT_H
#define SL_CLI_TOKENIZE_INPUT_H

#include <stddef.h>

#include "sluice/tokenizer.h"

/* What a command does with the input: 0, or -1 after writing a message into err. */
typedef int (*sl_cli_tokenize_fn)(sl_tokenizer_t *tok, const char *data, size_t len, void *ud,
                                  char *err, size_t err_size);

/* Loads the tokenizer and reads `path` ("-" or NULL: standard input), then calls
 * use(tok, data, len, ud). Errors are printed as "CMD: message". Returns the exit code:
 * SL_EXIT_VOCAB when the vocabulary does not load, SL_EXIT_FAILURE when the input cannot
 * be read or use() fails, else SL_EXIT_OK. */
int sl_cli_tokenize_input(const char *cmd, const char *path, sl_cli_tokenize_fn use, void *ud);

#endif
