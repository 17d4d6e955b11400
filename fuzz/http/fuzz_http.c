/* fuzz_http.c - libFuzzer target for sluiced's HTTP/1.1 parser (src/server/http_parse.c).
 *
 * The first byte picks the limits; the rest is what a client sent. Beyond memory errors
 * the target checks the contract: a parsed head lies inside the input and its fields
 * inside the head; the parse is incremental (any prefix shorter than the head is not
 * complete, the head itself is); a chunked body that scans decodes to exactly the size
 * the scan reported, within its limit; percent-decoding never grows nor yields a NUL. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static sl_http_field_t fields_a[64], fields_b[64];

static void check_head(const char *buf, size_t len, const sl_http_head_t *h)
{
    if (h->head_len == 0 || h->head_len > len) abort();
    if (h->target < buf || h->target + h->target_len > buf + h->head_len) abort();
    if (h->n_fields > h->max_fields) abort();
    for (size_t i = 0; i < h->n_fields; i++) {
        const sl_http_field_t *f = &h->fields[i];
        if (f->name_len == 0 || f->name < buf || f->value < buf ||
            f->name + f->name_len > buf + h->head_len || f->value + f->value_len > buf + h->head_len)
            abort();
        if (memchr(f->value, '\r', f->value_len) || memchr(f->value, '\n', f->value_len) ||
            memchr(f->value, '\0', f->value_len))
            abort();
    }
    if (h->chunked && h->content_length >= 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t max_head = 64 + (size_t)(data[0] & 0x0f) * 64;
    size_t max_body = (size_t)(data[0] >> 4) * 37;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    char msg[256];

    sl_http_head_t h = {.fields = fields_a, .max_fields = 64};
    int rc = sl_http_parse_head(buf, len, max_head, &h, msg, sizeof(msg));
    if (rc < SL_HTTP_VERSION || rc > SL_HTTP_DONE) abort();
    if (rc == SL_HTTP_DONE) {
        check_head(buf, len, &h);
        sl_http_head_t p = {.fields = fields_b, .max_fields = 64};
        if (sl_http_parse_head(buf, h.head_len, max_head, &p, msg, sizeof(msg)) != SL_HTTP_DONE ||
            p.head_len != h.head_len || p.n_fields != h.n_fields)
            abort();
        if (sl_http_parse_head(buf, h.head_len - 1, max_head, &p, msg, sizeof(msg)) == SL_HTTP_DONE)
            abort();
        if (h.chunked) {
            size_t wire = 0, body = 0;
            const char *b = buf + h.head_len;
            size_t blen = len - h.head_len;
            int c = sl_http_scan_chunked(b, blen, max_body, &wire, &body, msg, sizeof(msg));
            if (c == SL_HTTP_DONE) {
                if (wire > blen || body > max_body || body > wire) abort();
                char *out = malloc(body + 1);
                if (!out) abort();
                sl_http_decode_chunked(b, wire, out);
                free(out);
            }
        }
    }
    char *dec = malloc(len + 1);
    if (!dec) abort();
    ssize_t n = sl_http_pct_decode(buf, len, dec);
    if (n > (ssize_t)len || (n >= 0 && strlen(dec) != (size_t)n)) abort();
    free(dec);
    return 0;
}
