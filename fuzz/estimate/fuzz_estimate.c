/* libFuzzer target: request estimation of arbitrary bodies never crashes, and either
 * succeeds with non-negative counts or fails with a message. */
#include <stdint.h>
#include <stdlib.h>

#include "sluice/tokenizer.h"
#include "../tokenizer_init.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const sl_api_t apis[] = {SL_API_AUTO, SL_API_ANTHROPIC, SL_API_OPENAI};
    for (size_t i = 0; i < 3; i++) {
        sl_estimate_t est;
        char err[256] = "";
        int rc = sl_estimate_request(fuzz_tok, apis[i], (const char *)data, size, &est, err,
                                     sizeof(err));
        if (rc == 0) {
            if (est.input_tokens < 0 || est.cached_tokens < 0 || est.output_tokens < 0) abort();
        } else if (rc != SL_TOK_EREQUEST || err[0] == '\0') {
            abort();
        }
    }
    return 0;
}
