/* filler.c - deterministic output text whose token count is known.
 *
 * The emulated model writes prose-like filler: words from a fixed list, a full stop
 * now and then. Every word (with its leading space, and without it as the first
 * word of a text) and the full stop are single tokens in the Claude vocabulary, and the
 * vocabulary's pattern splits before each leading space and around punctuation, so a text of n
 * filler tokens counts as exactly n tokens with sluice's tokenizer. The words are checked against
 * the loaded vocabulary at start-up rather than trusted.
 *
 * Token i of a text depends only on (seed, i), so a stream can emit any range of it
 * in any chunking and the concatenation is the same text. */
#include "emu.h"
#include "../common/mix.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

static const char *const candidates[] = {
    " the",   " of",    " and",   " to",     " in",    " a",      " is",    " that",
    " for",   " it",    " as",    " with",   " was",   " on",     " be",    " at",
    " by",    " this",  " from",  " or",     " an",    " are",    " which", " not",
    " but",   " all",   " can",   " one",    " has",   " more",   " time",  " will",
    " new",   " water", " river", " flow",   " gate",  " stream", " level", " rain",
    " year",  " way",   " work",  " system", " part",  " place",  " long",  " small",
    " large", " high",  " low",   " open",   " close", " power",  " field", " line",
    " city",  " land",  " light", " world",  " state", " order",  " value", " point",
};

#define MAX_WORDS (sizeof candidates / sizeof candidates[0])
#define MIN_WORDS 16

static const char *words[MAX_WORDS];
static size_t word_len[MAX_WORDS];
static size_t n_words;

int sl__filler_init(sl_tokenizer_t *tok, char *err, size_t errlen)
{
    n_words = 0;
    int64_t dot = 0;
    if (sl_tokenizer_count(tok, ".", 1, &dot) != 0 || dot != 1) {
        snprintf(err, errlen, "filler: \".\" is not one token in this vocabulary");
        return -1;
    }
    for (size_t i = 0; i < MAX_WORDS; i++) {
        int64_t n = 0;
        size_t len = strlen(candidates[i]);
        int64_t bare = 0; /* the first word of a text goes without its space */
        if (sl_tokenizer_count(tok, candidates[i], len, &n) == 0 && n == 1 &&
            sl_tokenizer_count(tok, candidates[i] + 1, len - 1, &bare) == 0 && bare == 1) {
            words[n_words] = candidates[i];
            word_len[n_words] = len;
            n_words++;
        }
    }
    if (n_words < MIN_WORDS) {
        snprintf(err, errlen, "filler: only %zu of %zu words are single tokens in this vocabulary",
                 n_words, MAX_WORDS);
        return -1;
    }
    return 0;
}

/* Token i of the text `seed`: a full stop after roughly every twelfth word (never
 * first, never twice in a row), a word otherwise. */
static void token_at(uint64_t seed, int64_t i, const char **s, size_t *len)
{
    uint64_t h = sl_mix64(seed ^ sl_mix64((uint64_t)i + 0x632be59bd9b4e019ULL));
    uint64_t prev =
        i > 0 ? sl_mix64(seed ^ sl_mix64((uint64_t)(i - 1) + 0x632be59bd9b4e019ULL)) : 1;
    bool stop = i > 0 && h % 12 == 0 && prev % 12 != 0;
    if (stop) {
        *s = ".";
        *len = 1;
        return;
    }
    size_t w = (size_t)((h >> 8) % n_words);
    *s = words[w] + (i == 0);
    *len = word_len[w] - (i == 0);
}

void sl__filler_append(uint64_t seed, int64_t from, int64_t to, struct evbuffer *out)
{
    for (int64_t i = from; i < to; i++) {
        const char *s;
        size_t len;
        token_at(seed, i, &s, &len);
        evbuffer_add(out, s, len);
    }
}

char *sl__filler_text(uint64_t seed, int64_t n)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) return NULL;
    sl__filler_append(seed, 0, n, b);
    size_t len = evbuffer_get_length(b);
    char *s = malloc(len + 1);
    if (s) {
        evbuffer_copyout(b, s, len);
        s[len] = '\0';
    }
    evbuffer_free(b);
    return s;
}
