/* libFuzzer target: token counting of arbitrary bytes, and agreement of the two merges. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sluice/tokenizer.h"
#include "tokenizer_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sl_tokenizer_t *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[512];
    if (sl_tokenizer_load(NULL, &tok, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        exit(77);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t first, second;
    if (sl_tokenizer_count(tok, (const char *)data, size, &first) != 0)
        abort();
    /* The word cache must not change a count. */
    if (sl_tokenizer_count(tok, (const char *)data, size, &second) != 0 || first != second)
        abort();
    if (first < 0 || (size > 0) != (first > 0))
        abort();
    /* Both merge strategies must agree on the raw bytes taken as one piece. */
    if (size > 0 && size <= 256) {
        const sl__vocab_t *v = sl__tokenizer_vocab(tok);
        if (sl__bpe_count_scan(v, data, size) != sl__bpe_count_heap(v, data, size))
            abort();
    }
    return 0;
}
