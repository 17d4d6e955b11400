/* The tokenizer: loads claude.json and counts tokens (UTF-8 repair, NFKC, special
 * tokens, pre-tokenisation, BPE), with a cache of word -> token count. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenizer_internal.h"

/* Word cache: pieces that needed merging (so are not one token), by their bytes.
 * Natural text repeats a small set of words, so a bounded table cleared when full
 * keeps the hit rate high without growing with the input. */
#define CACHE_SLOTS (1u << 15)
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_KEY_MAX_BYTES 48
#define CACHE_ARENA_BYTES (CACHE_MAX_ENTRIES * 24)

typedef struct {
    uint64_t hash;
    uint32_t off;   /* into the arena */
    uint32_t len;   /* 0: empty */
    int64_t tokens;
} cache_slot_t;

typedef struct {
    char *text;
    size_t len;
} special_t;

struct sl_tokenizer {
    sl__vocab_t vocab;
    sl__pretok_t *pretok;
    special_t *specials;
    size_t n_specials;
    unsigned char special_first[256]; /* 1 when some special token starts with the byte */
    int single_first; /* the one byte every special token starts with, or -1 */
    int64_t explicit_n_vocab;
    sl__buf_t repaired;   /* input after UTF-8 repair, when it needed any */
    sl__buf_t normalized; /* input after NFKC, when it had non-ASCII */
    cache_slot_t *cache;
    unsigned char *cache_arena;
    size_t cache_arena_used;
    size_t cache_entries;
};

static void set_err(char *err, size_t err_size, const char *fmt, const char *a, const char *b)
{
    if (err && err_size)
        snprintf(err, err_size, fmt, a, b);
}

static int load_specials(sl_tokenizer_t *tok, json_t *obj, const char *path, char *err,
                         size_t err_size)
{
    size_t n = json_object_size(obj);
    tok->specials = calloc(n ? n : 1, sizeof(*tok->specials));
    if (!tok->specials)
        return SL_TOK_ENOMEM;
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        if (!json_is_integer(val)) {
            set_err(err, err_size, "%s: special_tokens.%s: not an integer", path, key);
            return SL_TOK_EFORMAT;
        }
        size_t len = strlen(key);
        if (len == 0) {
            set_err(err, err_size, "%s: special_tokens: empty token string%s", path, "");
            return SL_TOK_EFORMAT;
        }
        special_t *s = &tok->specials[tok->n_specials++];
        s->text = strdup(key);
        if (!s->text)
            return SL_TOK_ENOMEM;
        s->len = len;
        tok->special_first[(unsigned char)key[0]] = 1;
    }
    return 0;
}

static int load_json(sl_tokenizer_t *tok, json_t *root, const char *path, char *err,
                     size_t err_size)
{
    json_t *ranks = json_object_get(root, "bpe_ranks");
    json_t *pat = json_object_get(root, "pat_str");
    json_t *specials = json_object_get(root, "special_tokens");
    json_t *nvocab = json_object_get(root, "explicit_n_vocab");
    if (!json_is_string(ranks)) {
        set_err(err, err_size, "%s: bpe_ranks: missing or not a string%s", path, "");
        return SL_TOK_EFORMAT;
    }
    if (!json_is_string(pat)) {
        set_err(err, err_size, "%s: pat_str: missing or not a string%s", path, "");
        return SL_TOK_EFORMAT;
    }
    if (specials && !json_is_object(specials)) {
        set_err(err, err_size, "%s: special_tokens: not an object%s", path, "");
        return SL_TOK_EFORMAT;
    }
    if (nvocab && !json_is_integer(nvocab)) {
        set_err(err, err_size, "%s: explicit_n_vocab: not an integer%s", path, "");
        return SL_TOK_EFORMAT;
    }
    /* explicit_n_vocab is informational: tiktoken does not use it (in 0.0.4 it is
     * 64739 while the ranks run to 64999), so it is kept but not enforced. */
    tok->explicit_n_vocab = nvocab ? (int64_t)json_integer_value(nvocab) : 0;

    char msg[200] = "";
    int rc = sl__vocab_parse(&tok->vocab, json_string_value(ranks), json_string_length(ranks),
                             msg, sizeof(msg));
    if (rc != 0) {
        set_err(err, err_size, "%s: %s", path, rc == SL_TOK_ENOMEM ? "out of memory" : msg);
        return rc;
    }
    tok->pretok = sl__pretok_new(json_string_value(pat), msg, sizeof(msg));
    if (!tok->pretok) {
        set_err(err, err_size, "%s: %s", path, msg);
        return SL_TOK_EFORMAT;
    }
    rc = specials ? load_specials(tok, specials, path, err, err_size) : 0;
    tok->single_first = -1;
    for (int b = 0; b < 256; b++) {
        if (!tok->special_first[b])
            continue;
        tok->single_first = tok->single_first == -1 ? b : -2;
    }
    if (tok->single_first == -2)
        tok->single_first = -1;
    return rc;
}

int sl_tokenizer_load(const char *path, sl_tokenizer_t **out, char *err, size_t err_size)
{
    if (!out)
        return SL_TOK_EINVAL;
    *out = NULL;
    if (!path)
        path = sl_tokenizer_default_path();
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, err_size, "%s: %s (run scripts/fetch-vocab.sh, or set SLUICE_VOCAB)", path,
                strerror(errno));
        return SL_TOK_EIO;
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, 0, &jerr);
    fclose(f);
    if (!json_is_object(root)) {
        if (err && err_size)
            snprintf(err, err_size, "%s:%d:%d: %s", path, jerr.line, jerr.column,
                     root ? "not a JSON object" : jerr.text);
        json_decref(root);
        return SL_TOK_EFORMAT;
    }
    sl_tokenizer_t *tok = calloc(1, sizeof(*tok));
    int rc = SL_TOK_ENOMEM;
    if (tok) {
        tok->cache = calloc(CACHE_SLOTS, sizeof(*tok->cache));
        tok->cache_arena = malloc(CACHE_ARENA_BYTES);
        if (tok->cache && tok->cache_arena)
            rc = load_json(tok, root, path, err, err_size);
    }
    json_decref(root);
    if (rc != 0) {
        if (rc == SL_TOK_ENOMEM)
            set_err(err, err_size, "%s: out of memory%s", path, "");
        sl_tokenizer_free(tok);
        return rc;
    }
    *out = tok;
    return 0;
}

void sl_tokenizer_free(sl_tokenizer_t *tok)
{
    if (!tok)
        return;
    sl__vocab_free(&tok->vocab);
    sl__pretok_free(tok->pretok);
    for (size_t i = 0; i < tok->n_specials; i++)
        free(tok->specials[i].text);
    free(tok->specials);
    sl__buf_free(&tok->repaired);
    sl__buf_free(&tok->normalized);
    free(tok->cache);
    free(tok->cache_arena);
    free(tok);
}

const sl__vocab_t *sl__tokenizer_vocab(const sl_tokenizer_t *tok)
{
    return &tok->vocab;
}

size_t sl_tokenizer_special_count(const sl_tokenizer_t *tok)
{
    return tok ? tok->n_specials : 0;
}

const char *sl_tokenizer_special_at(const sl_tokenizer_t *tok, size_t i)
{
    return tok && i < tok->n_specials ? tok->specials[i].text : NULL;
}

static void cache_clear(sl_tokenizer_t *tok)
{
    memset(tok->cache, 0, CACHE_SLOTS * sizeof(*tok->cache));
    tok->cache_arena_used = 0;
    tok->cache_entries = 0;
}

/* Token count of one piece: a vocabulary hit, a cache hit, or a merge. */
static int64_t piece_tokens(sl_tokenizer_t *tok, const unsigned char *p, size_t n)
{
    if (n == 1 || sl__vocab_rank(&tok->vocab, p, n) != SL__RANK_NONE)
        return 1;
    if (n > CACHE_KEY_MAX_BYTES)
        return sl__bpe_count(&tok->vocab, p, n);
    uint64_t h = sl__hash_bytes(p, n);
    size_t i = (size_t)h & (CACHE_SLOTS - 1);
    for (;;) {
        cache_slot_t *s = &tok->cache[i];
        if (s->len == 0)
            break;
        if (s->hash == h && s->len == n && memcmp(tok->cache_arena + s->off, p, n) == 0)
            return s->tokens;
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
    int64_t tokens = sl__bpe_count(&tok->vocab, p, n);
    if (tokens < 0)
        return tokens;
    if (tok->cache_entries >= CACHE_MAX_ENTRIES || tok->cache_arena_used + n > CACHE_ARENA_BYTES) {
        cache_clear(tok);
        i = (size_t)h & (CACHE_SLOTS - 1);
    }
    cache_slot_t *s = &tok->cache[i];
    memcpy(tok->cache_arena + tok->cache_arena_used, p, n);
    s->hash = h;
    s->off = (uint32_t)tok->cache_arena_used;
    s->len = (uint32_t)n;
    s->tokens = tokens;
    tok->cache_arena_used += n;
    tok->cache_entries++;
    return tokens;
}

typedef struct {
    sl_tokenizer_t *tok;
    int64_t tokens;
} count_ctx_t;

static int count_piece_cb(void *vctx, const unsigned char *piece, size_t piece_len)
{
    count_ctx_t *ctx = vctx;
    int64_t t = piece_tokens(ctx->tok, piece, piece_len);
    if (t < 0)
        return SL_TOK_ENOMEM;
    ctx->tokens += t;
    return 0;
}

/* Length of the special token at p (the longest when several match), or 0. */
static size_t special_at(const sl_tokenizer_t *tok, const unsigned char *p, size_t n)
{
    size_t best = 0;
    for (size_t k = 0; k < tok->n_specials; k++) {
        const special_t *s = &tok->specials[k];
        if (s->len <= n && s->len > best && memcmp(p, s->text, s->len) == 0)
            best = s->len;
    }
    return best;
}

static int has_non_ascii(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] & 0x80)
            return 1;
    return 0;
}

int sl_tokenizer_count(sl_tokenizer_t *tok, const char *text, size_t text_len,
                       int64_t *tokens_out)
{
    if (!tok || !tokens_out || (!text && text_len))
        return SL_TOK_EINVAL;
    const unsigned char *p = (const unsigned char *)text;
    size_t n = text_len;
    if (n && sl__utf8_valid_prefix(p, n) < n) {
        tok->repaired.n = 0;
        if (sl__utf8_sanitize(p, n, &tok->repaired) != 0)
            return SL_TOK_ENOMEM;
        p = tok->repaired.p;
        n = tok->repaired.n;
    }
    if (has_non_ascii(p, n)) {
        tok->normalized.n = 0;
        if (sl__nfkc(p, n, &tok->normalized) != 0)
            return SL_TOK_ENOMEM;
        p = tok->normalized.p;
        n = tok->normalized.n;
    }
    /* Special tokens first, then the pattern on the text between them: the pattern's
     * look-ahead must not see across a special token, as in tiktoken. */
    count_ctx_t ctx = {tok, 0};
    size_t seg = 0, i = 0;
    int rc = 0;
    while (i < n && rc == 0) {
        if (tok->single_first >= 0) {
            const unsigned char *hit = memchr(p + i, tok->single_first, n - i);
            if (!hit)
                break;
            i = (size_t)(hit - p);
        }
        size_t sl = tok->special_first[p[i]] ? special_at(tok, p + i, n - i) : 0;
        if (sl == 0) {
            i++;
            continue;
        }
        if (i > seg)
            rc = sl__pretok_each(tok->pretok, p + seg, i - seg, count_piece_cb, &ctx);
        ctx.tokens++;
        i += sl;
        seg = i;
    }
    if (rc == 0 && n > seg)
        rc = sl__pretok_each(tok->pretok, p + seg, n - seg, count_piece_cb, &ctx);
    /* Do not keep a huge input's copies alive between calls. */
    if (tok->repaired.cap > (64u << 20))
        sl__buf_free(&tok->repaired);
    if (tok->normalized.cap > (64u << 20))
        sl__buf_free(&tok->normalized);
    if (rc != 0)
        return rc < 0 ? rc : SL_TOK_ENOMEM;
    *tokens_out = ctx.tokens;
    return 0;
}
