/* Standard base64 decoding (RFC 4648 alphabet), used for vocabulary tokens and images. */
#include "tokenizer_internal.h"

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long sl__base64_decode(const char *in, size_t in_len, unsigned char *out, size_t max_out)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    for (size_t i = 0; i < in_len && n < max_out; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == '=')
            break;
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        int v = b64_value(c);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (long)n;
}
