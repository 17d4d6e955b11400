/* tokenizer_harness.h - what the tokenizer's unit tests share: base64, for writing
 * vocabularies (claude.json holds its tokens base64-encoded) and image payloads. */
#ifndef SL_TEST_TOKENIZER_HARNESS_H
#define SL_TEST_TOKENIZER_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Writes the n bytes at p, base64-encoded (padded), and a NUL into out, which holds
 * at least 4 * ((n + 2) / 3) + 1 bytes. */
static inline void b64(const unsigned char *p, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        out[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? a[v & 63] : '=';
    }
    out[o] = '\0';
}

#endif
