/* NFKC normalisation (utf8proc), skipping the ASCII runs that normalisation cannot change.
 *
 * The npm package calls text.normalize("NFKC") before encoding. Normalising is
 * context-sensitive only around non-starters and composition pairs, and no ASCII
 * character decomposes, reorders, or is the second element of a composition. So the
 * text can be cut before any ASCII byte: the pieces normalise independently. We copy
 * ASCII runs as they are and hand utf8proc only each non-ASCII run together with the
 * ASCII character just before it (which may compose with it, as e + U+0301 does). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_internal.h"

static int nfkc_chunk(const unsigned char *p, size_t n, sl__buf_t *out)
{
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t len = utf8proc_map(p, (utf8proc_ssize_t)n, &dst,
                                        UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    if (len < 0) {
        /* Only UTF8PROC_ERROR_NOMEM is possible on well-formed input; anything else
         * would be a bug upstream of us, and copying keeps the count defined. */
        if (len == UTF8PROC_ERROR_NOMEM)
            return SL_TOK_ENOMEM;
        if (sl__buf_reserve(out, n) != 0)
            return SL_TOK_ENOMEM;
        memcpy(out->p + out->n, p, n);
        out->n += n;
        return 0;
    }
    int rc = sl__buf_reserve(out, (size_t)len);
    if (rc == 0) {
        memcpy(out->p + out->n, dst, (size_t)len);
        out->n += (size_t)len;
    }
    free(dst);
    return rc;
}

int sl__nfkc(const unsigned char *p, size_t n, sl__buf_t *out)
{
    if (sl__buf_reserve(out, n) != 0)
        return SL_TOK_ENOMEM;
    size_t i = 0;
    while (i < n) {
        size_t ascii_end = i;
        while (ascii_end < n && p[ascii_end] < 0x80)
            ascii_end++;
        /* Keep the last ASCII character for the chunk when non-ASCII follows. */
        size_t copy_end = (ascii_end < n && ascii_end > i) ? ascii_end - 1 : ascii_end;
        if (sl__buf_reserve(out, copy_end - i) != 0)
            return SL_TOK_ENOMEM;
        memcpy(out->p + out->n, p + i, copy_end - i);
        out->n += copy_end - i;
        if (ascii_end >= n)
            break;
        size_t chunk_end = ascii_end;
        while (chunk_end < n && p[chunk_end] >= 0x80)
            chunk_end++;
        int rc = nfkc_chunk(p + copy_end, chunk_end - copy_end, out);
        if (rc != 0)
            return rc;
        i = chunk_end;
    }
    return 0;
}
