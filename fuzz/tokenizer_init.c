/* tokenizer_init.c - loads the bundled tokenizer once for the fuzz targets that need it
 * (tokenizer_init.h). */
#include <stdio.h>
#include <stdlib.h>

#include "tokenizer_init.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

sl_tokenizer_t *fuzz_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    char err[512];
    if (sl_tokenizer_load(NULL, &fuzz_tok, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", (*argv)[0], err);
        exit(77);
    }
    return 0;
}
