/* libFuzzer target: token counting of arbitrary bytes, and agreement of the two merges. */
#include <stdint.h>
#include <stdlib.h>

#include "sluice/tokenizer.h"
#include "../tokenizer_init.h"
#include "tokenizer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t first, second;
    if (sl_tokenizer_count(fuzz_tok, (const char *)data, size, &first) != 0) abort();
    /* The word cache must not change a count. */
    if (sl_tokenizer_count(fuzz_tok, (const char *)data, size, &second) != 0 || first != second)
        abort();
    if (first < 0 || (size > 0) != (first > 0)) abort();
    /* Both merge strategies must agree on the raw bytes taken as one piece. */
    if (size > 0 && size <= 256) {
        const sl__vocab_t *v = sl__tokenizer_vocab(fuzz_tok);
        if (sl__bpe_count_scan(v, data, size) != sl__bpe_count_heap(v, data, size)) abort();
    }
    return 0;
}
