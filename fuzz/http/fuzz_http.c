/* fuzz_http.c - libFuzzer target for sluiced's request reader (src/server/core/http_parse.c,
 * on http-parser).
 *
 * The first byte picks the limits and a cut point; the rest is what a client sent. The
 * bytes go in whole to one reader and in two pieces (cut there) to another, each request
 * taken with _next as the transport does. Beyond memory errors the target checks the
 * contract: both readers see the same requests (same targets, fields and bodies) and
 * both end well or both in an error; a request stays within its limits; fields and values hold no CR, LF or
 * NUL; a body is never over its limit. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_REQUESTS 16

typedef struct seen {
    int rc;
    size_t n;
    uint64_t sums[MAX_REQUESTS]; /* a digest of each request */
} seen_t;

static uint64_t mix(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t digest(const sl_http_request_t *q, const sl_http_limits_t *lim)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)q->method ^ ((uint64_t)q->keep_alive << 8);
    if (q->n_fields > lim->max_fields || q->body_len > lim->max_body_bytes) abort();
    if (strlen(q->target) != q->target_len) abort();
    h = mix(h, q->target, q->target_len);
    for (size_t i = 0; i < q->n_fields; i++) {
        const char *nm = q->fields[i].name, *v = q->fields[i].value;
        if (strpbrk(nm, "\r\n") || strpbrk(v, "\r\n")) abort();
        h = mix(mix(h, nm, strlen(nm) + 1), v, strlen(v) + 1);
    }
    return mix(h, q->body, q->body_len);
}

/* Feeds the pieces in order, taking every request. */
static void run(const sl_http_limits_t *lim, const char *const *piece, const size_t *len,
                size_t n_pieces, seen_t *out)
{
    sl_http_reader_t *r = sl_http_reader_new(lim);
    if (!r) abort();
    char msg[256];
    out->rc = SL_HTTP_MORE;
    out->n = 0;
    for (size_t k = 0; k < n_pieces; k++) {
        size_t off = 0;
        while (off < len[k] || out->rc == SL_HTTP_DONE) {
            size_t used = sl_http_reader_feed(r, piece[k] + off, len[k] - off, &out->rc, msg,
                                              sizeof(msg));
            if (used > len[k] - off) abort();
            off += used;
            if (out->rc == SL_HTTP_DONE) {
                if (out->n < MAX_REQUESTS)
                    out->sums[out->n] = digest(sl_http_reader_request(r), lim);
                out->n++;
                sl_http_reader_next(r);
                out->rc = SL_HTTP_MORE;
                continue;
            }
            if (out->rc != SL_HTTP_MORE) goto done;
            if (off != len[k]) abort(); /* 'more' uses everything */
        }
    }
done:
    sl_http_reader_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    sl_http_limits_t lim = {.max_head_bytes = 64 + (size_t)(data[0] & 0x07) * 64,
                            .max_fields = 1 + (data[0] & 0x07),
                            .max_body_bytes = (size_t)(data[0] >> 3) * 11};
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    size_t cut = len ? (size_t)data[0] * 7 % (len + 1) : 0;

    const char *whole[] = {buf};
    size_t whole_len[] = {len};
    seen_t a, b;
    run(&lim, whole, whole_len, 1, &a);
    const char *two[] = {buf, buf + cut};
    size_t two_len[] = {cut, len - cut};
    run(&lim, two, two_len, 2, &b);
    /* Which error is found first may depend on the cut (limits are checked as pieces
     * arrive); whether there is one, and everything before it, may not. */
    if ((a.rc < 0) != (b.rc < 0) || (a.rc >= 0 && a.rc != b.rc) || a.n != b.n) abort();
    for (size_t i = 0; i < a.n && i < MAX_REQUESTS; i++)
        if (a.sums[i] != b.sums[i]) abort();
    return 0;
}
