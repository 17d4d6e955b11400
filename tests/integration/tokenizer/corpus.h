/* A deterministic test corpus for the tokenizer: natural text of several kinds plus
 * adversarial inputs, generated (never stored) so the tests and the benchmark agree. */
#ifndef SL_TEST_CORPUS_H
#define SL_TEST_CORPUS_H

#include <stddef.h>

/* Number of corpus parts, and part i's file name. */
size_t corpus_part_count(void);
const char *corpus_part_name(size_t i);

/* 1 when part i is natural text (the benchmark corpus), 0 when adversarial. */
int corpus_part_is_text(size_t i);

/* Generates part i; returns a malloc'd buffer (caller frees) and its length. The same
 * i always gives the same bytes. Returns NULL when out of memory. */
char *corpus_part(size_t i, size_t *len);

#endif
