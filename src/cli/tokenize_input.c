/* tokenize_input.c - the tokenizer and one input for count-tokens and estimate
 * (tokenize_input.h). */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "tokenize_input.h"

int sl_cli_tokenize_input(const char *cmd, const char *path, sl_cli_tokenize_fn use, void *ud)
{
    char err[512];
    sl_tokenizer_t *tok;
    if (sl_tokenizer_load(NULL, &tok, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return SL_EXIT_VOCAB;
    }
    char *data;
    size_t len;
    int code = SL_EXIT_OK;
    if (sl_cli_read_input(path, &data, &len, err, sizeof(err)) != 0) {
        code = SL_EXIT_FAILURE;
    } else {
        if (use(tok, data, len, ud, err, sizeof(err)) != 0) code = SL_EXIT_FAILURE;
        free(data);
    }
    if (code != SL_EXIT_OK) fprintf(stderr, "%s: %s\n", cmd, err);
    sl_tokenizer_free(tok);
    return code;
}
