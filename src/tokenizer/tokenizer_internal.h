/* Internal interfaces shared by the tokenizer's files (not part of the public API). */
#ifndef SL_TOKENIZER_INTERNAL_H
#define SL_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/tokenizer.h"

#define SL__RANK_NONE UINT32_MAX

/* A growable byte buffer. */
typedef struct {
    unsigned char *p;
    size_t n;
    size_t cap;
} sl__buf_t;

/* Makes room for `extra` more bytes. Returns 0 or SL_TOK_ENOMEM. */
int sl__buf_reserve(sl__buf_t *b, size_t extra);
void sl__buf_free(sl__buf_t *b);

/* 64-bit hash of a byte string; good spread for short keys, not cryptographic. */
uint64_t sl__hash_bytes(const unsigned char *p, size_t n);

/* ---- vocab.c: the byte-string -> rank table ---- */

typedef struct {
    uint32_t off;  /* into bytes */
    uint32_t len;  /* 0: empty slot */
    uint32_t rank;
    uint32_t hash; /* low 32 bits of the hash, to skip most memcmp calls */
} sl__vocab_slot_t;

typedef struct {
    unsigned char *bytes;    /* every token's bytes, concatenated */
    size_t bytes_len;
    sl__vocab_slot_t *slots; /* open addressing, power-of-two capacity */
    size_t mask;
    size_t n_tokens;
    uint32_t max_token_len_bytes;
} sl__vocab_t;

/* Parses a tiktoken ranks string: either the compact form ("! OFFSET B64 B64 ...",
 * rank = OFFSET + position) or "B64 RANK" lines. A token listed twice keeps its last
 * rank, as tiktoken does. Returns 0, SL_TOK_EFORMAT (message in err) or SL_TOK_ENOMEM. */
int sl__vocab_parse(sl__vocab_t *v, const char *ranks, size_t ranks_len, char *err,
                    size_t err_size);
void sl__vocab_free(sl__vocab_t *v);

/* The rank of the token with exactly these bytes, or SL__RANK_NONE. */
uint32_t sl__vocab_rank(const sl__vocab_t *v, const unsigned char *p, size_t n);

/* ---- utf8.c ---- */

/* Length of the longest prefix of p[0..n) that is well-formed UTF-8. */
size_t sl__utf8_valid_prefix(const unsigned char *p, size_t n);

/* Appends p[0..n) to out with every maximal ill-formed subpart replaced by U+FFFD
 * (WHATWG "UTF-8 decode", which node's Buffer#toString('utf8') implements).
 * Returns 0 or SL_TOK_ENOMEM. */
int sl__utf8_sanitize(const unsigned char *p, size_t n, sl__buf_t *out);

/* ---- normalize.c ---- */

/* Appends the NFKC form of the well-formed UTF-8 p[0..n) to out, as JavaScript's
 * String.prototype.normalize("NFKC") would produce it (modulo Unicode version).
 * Returns 0 or SL_TOK_ENOMEM. */
int sl__nfkc(const unsigned char *p, size_t n, sl__buf_t *out);

/* ---- pretokenize.c: the vocabulary's split pattern ---- */

typedef struct sl__pretok sl__pretok_t;

/* Compiles pat_str (PCRE2, UTF + UCP, JIT when available). Returns NULL with a
 * message in err when the pattern does not compile or memory runs out. */
sl__pretok_t *sl__pretok_new(const char *pat_str, char *err, size_t err_size);
void sl__pretok_free(sl__pretok_t *pt);

/* Calls piece_cb for each successive match of the pattern in the well-formed UTF-8
 * segment p[0..n) (look-arounds do not see past n), skipping unmatched text as
 * tiktoken's find_iter does. Stops early and returns the callback's value when it is
 * non-zero; returns SL_TOK_ENOMEM on a regex resource error, 0 otherwise. */
typedef int (*sl__piece_cb)(void *ctx, const unsigned char *piece, size_t piece_len);
int sl__pretok_each(sl__pretok_t *pt, const unsigned char *p, size_t n, sl__piece_cb piece_cb,
                    void *ctx);

/* ---- bpe.c ---- */

/* Number of tokens tiktoken's byte-pair merge produces for one piece (n >= 1):
 * repeatedly merge the adjacent pair whose concatenation has the lowest rank,
 * leftmost first, until no adjacent pair is a token. A piece that is itself a token
 * is one token. Returns the count, or -1 when out of memory (long pieces only). */
int64_t sl__bpe_count(const sl__vocab_t *v, const unsigned char *p, size_t n);

/* The two merge strategies sl__bpe_count chooses between, exposed so tests and the
 * fuzzer can check they agree: the array scan (n <= 256 only) and the heap. */
int64_t sl__bpe_count_scan(const sl__vocab_t *v, const unsigned char *p, size_t n);
int64_t sl__bpe_count_heap(const sl__vocab_t *v, const unsigned char *p, size_t n);

/* The tokenizer's vocabulary (tokenizer.c). */
const sl__vocab_t *sl__tokenizer_vocab(const sl_tokenizer_t *tok);

/* ---- image.c ---- */

/* Width and height in pixels from the first bytes of a PNG, JPEG, GIF or WebP file.
 * Returns 0 on success, -1 when the format is not recognised or the header is cut. */
int sl__image_size(const unsigned char *p, size_t n, uint32_t *width_px, uint32_t *height_px);

/* Decodes standard base64 (padding optional, whitespace skipped) into out, stopping
 * after max_out bytes. Returns the number of bytes written, or -1 on a bad character. */
long sl__base64_decode(const char *in, size_t in_len, unsigned char *out, size_t max_out);

#endif
