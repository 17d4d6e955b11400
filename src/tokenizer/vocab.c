/* The vocabulary: tiktoken's ranks string parsed into a byte-string -> rank hash table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

static int vocab_insert(sl__vocab_t *v, const unsigned char *tok, size_t len, uint32_t rank)
{
    uint64_t h = sl__hash_bytes(tok, len);
    size_t i = (size_t)h & v->mask;
    for (;;) {
        sl__vocab_slot_t *s = &v->slots[i];
        if (s->len == 0)
            break;
        if (s->hash == (uint32_t)h && s->len == len && memcmp(v->bytes + s->off, tok, len) == 0) {
            s->rank = rank; /* tiktoken's HashMap::insert: the last listing wins */
            return 0;
        }
        i = (i + 1) & v->mask;
    }
    v->slots[i].off = (uint32_t)(tok - v->bytes);
    v->slots[i].len = (uint32_t)len;
    v->slots[i].rank = rank;
    v->slots[i].hash = (uint32_t)h;
    v->n_tokens++;
    if (len > v->max_token_len_bytes)
        v->max_token_len_bytes = (uint32_t)len;
    return 0;
}

uint32_t sl__vocab_rank(const sl__vocab_t *v, const unsigned char *p, size_t n)
{
    if (n == 0 || n > v->max_token_len_bytes)
        return SL__RANK_NONE;
    uint64_t h = sl__hash_bytes(p, n);
    size_t i = (size_t)h & v->mask;
    for (;;) {
        const sl__vocab_slot_t *s = &v->slots[i];
        if (s->len == 0)
            return SL__RANK_NONE;
        if (s->hash == (uint32_t)h && s->len == n && memcmp(v->bytes + s->off, p, n) == 0)
            return s->rank;
        i = (i + 1) & v->mask;
    }
}

/* One whitespace-separated field of the ranks string. */
typedef struct {
    const char *p;
    size_t n;
} field_t;

static int next_field(const char **cur, const char *end, field_t *f, int *line_end)
{
    const char *s = *cur;
    while (s < end && (*s == ' ' || *s == '\r'))
        s++;
    if (s >= end || *s == '\n') {
        *cur = s < end ? s + 1 : s;
        *line_end = 1;
        return 0;
    }
    const char *e = s;
    while (e < end && *e != ' ' && *e != '\n' && *e != '\r')
        e++;
    f->p = s;
    f->n = (size_t)(e - s);
    *cur = (e < end && *e == '\r') ? e + 1 : e;
    *line_end = 0;
    return 1;
}

static int parse_uint(field_t f, uint32_t *out)
{
    if (f.n == 0 || f.n > 9)
        return -1;
    uint32_t v = 0;
    for (size_t i = 0; i < f.n; i++) {
        if (f.p[i] < '0' || f.p[i] > '9')
            return -1;
        v = v * 10 + (uint32_t)(f.p[i] - '0');
    }
    *out = v;
    return 0;
}

static int add_token(sl__vocab_t *v, field_t f, uint32_t rank, char *err, size_t err_size)
{
    unsigned char *dst = v->bytes + v->bytes_len;
    long n = sl__base64_decode(f.p, f.n, dst, f.n);
    if (n <= 0) {
        if (err)
            snprintf(err, err_size, "bpe_ranks: token of rank %u: invalid base64 \"%.*s\"",
                     (unsigned)rank, (int)(f.n > 40 ? 40 : f.n), f.p);
        return SL_TOK_EFORMAT;
    }
    v->bytes_len += (size_t)n;
    return vocab_insert(v, dst, (size_t)n, rank);
}

int sl__vocab_parse(sl__vocab_t *v, const char *ranks, size_t ranks_len, char *err,
                    size_t err_size)
{
    memset(v, 0, sizeof(*v));
    /* Each token is a field; fields are separated by spaces or newlines. A table at
     * most half full keeps probes short while staying small enough to sit in cache. */
    size_t max_tokens = 1;
    for (size_t i = 0; i < ranks_len; i++)
        max_tokens += ranks[i] == ' ' || ranks[i] == '\n';
    size_t cap = 1024;
    while (cap < max_tokens * 2)
        cap *= 2;
    v->bytes = malloc(ranks_len + 1);
    v->slots = calloc(cap, sizeof(*v->slots));
    if (!v->bytes || !v->slots) {
        sl__vocab_free(v);
        return SL_TOK_ENOMEM;
    }
    v->mask = cap - 1;

    const char *cur = ranks, *end = ranks + ranks_len;
    int compact = ranks_len > 0 && ranks[0] == '!';
    int rc = 0;
    while (cur < end && rc == 0) {
        field_t f1, f2;
        int eol = 0;
        if (!next_field(&cur, end, &f1, &eol))
            continue; /* blank line */
        if (compact) {
            uint32_t offset;
            if (!next_field(&cur, end, &f2, &eol) || parse_uint(f2, &offset) != 0) {
                if (err)
                    snprintf(err, err_size, "bpe_ranks: line without a numeric rank offset");
                rc = SL_TOK_EFORMAT;
                break;
            }
            uint32_t pos = 0;
            field_t tokf;
            while (rc == 0 && next_field(&cur, end, &tokf, &eol))
                rc = add_token(v, tokf, offset + pos++, err, err_size);
        } else {
            uint32_t rank;
            field_t extra;
            if (!next_field(&cur, end, &f2, &eol) || parse_uint(f2, &rank) != 0) {
                if (err)
                    snprintf(err, err_size, "bpe_ranks: line \"%.*s\" has no numeric rank",
                             (int)(f1.n > 40 ? 40 : f1.n), f1.p);
                rc = SL_TOK_EFORMAT;
                break;
            }
            rc = add_token(v, f1, rank, err, err_size);
            while (rc == 0 && next_field(&cur, end, &extra, &eol))
                ;
        }
    }
    if (rc == 0 && v->n_tokens == 0) {
        if (err)
            snprintf(err, err_size, "bpe_ranks: no tokens");
        rc = SL_TOK_EFORMAT;
    }
    /* Every byte must be a token, or the merge could leave bytes without a token. */
    for (int b = 0; rc == 0 && b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if (sl__vocab_rank(v, &c, 1) == SL__RANK_NONE) {
            if (err)
                snprintf(err, err_size, "bpe_ranks: byte 0x%02x is not a token", b);
            rc = SL_TOK_EFORMAT;
        }
    }
    if (rc != 0)
        sl__vocab_free(v);
    return rc;
}

void sl__vocab_free(sl__vocab_t *v)
{
    free(v->bytes);
    free(v->slots);
    memset(v, 0, sizeof(*v));
}
