/* tokenizer_init.h - the tokenizer the tokenizer and estimate fuzz targets share: loaded
 * once, by LLVMFuzzerInitialize in tokenizer_init.c, before any input. */
#ifndef SL_FUZZ_TOKENIZER_INIT_H
#define SL_FUZZ_TOKENIZER_INIT_H

#include "sluice/tokenizer.h"

/* The bundled vocabulary, loaded; never NULL once an input runs (a target whose
 * vocabulary does not load exits 77 before the first input, saying why on stderr). */
extern sl_tokenizer_t *fuzz_tok;

#endif
