/* Image dimensions from PNG, JPEG, GIF and WebP headers, for image token estimates. */
#include <string.h>

#include "tokenizer_internal.h"

static uint32_t be16(const unsigned char *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t le16(const unsigned char *p)
{
    return (uint32_t)p[1] << 8 | p[0];
}

static uint32_t le24(const unsigned char *p)
{
    return (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static int png_size(const unsigned char *p, size_t n, uint32_t *w, uint32_t *h)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    if (n < 24 || memcmp(p, sig, 8) != 0 || memcmp(p + 12, "IHDR", 4) != 0)
        return -1;
    *w = be32(p + 16);
    *h = be32(p + 20);
    return 0;
}

static int gif_size(const unsigned char *p, size_t n, uint32_t *w, uint32_t *h)
{
    if (n < 10 || (memcmp(p, "GIF87a", 6) != 0 && memcmp(p, "GIF89a", 6) != 0))
        return -1;
    *w = le16(p + 6);
    *h = le16(p + 8);
    return 0;
}

static int webp_size(const unsigned char *p, size_t n, uint32_t *w, uint32_t *h)
{
    if (n < 30 || memcmp(p, "RIFF", 4) != 0 || memcmp(p + 8, "WEBP", 4) != 0)
        return -1;
    if (memcmp(p + 12, "VP8 ", 4) == 0) { /* lossy: frame tag, start code, 14-bit sizes */
        if (p[23] != 0x9d || p[24] != 0x01 || p[25] != 0x2a)
            return -1;
        *w = le16(p + 26) & 0x3fff;
        *h = le16(p + 28) & 0x3fff;
        return 0;
    }
    if (memcmp(p + 12, "VP8L", 4) == 0) { /* lossless: 14-bit width-1, height-1 */
        if (p[20] != 0x2f)
            return -1;
        uint32_t bits = (uint32_t)p[21] | (uint32_t)p[22] << 8 | (uint32_t)p[23] << 16 |
                        (uint32_t)p[24] << 24;
        *w = (bits & 0x3fff) + 1;
        *h = ((bits >> 14) & 0x3fff) + 1;
        return 0;
    }
    if (memcmp(p + 12, "VP8X", 4) == 0) { /* extended: 24-bit canvas width-1, height-1 */
        *w = le24(p + 24) + 1;
        *h = le24(p + 27) + 1;
        return 0;
    }
    return -1;
}

/* Walks JPEG segments to the first start-of-frame marker, which holds the size. */
static int jpeg_size(const unsigned char *p, size_t n, uint32_t *w, uint32_t *h)
{
    if (n < 4 || p[0] != 0xff || p[1] != 0xd8)
        return -1;
    size_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xff)
            return -1;
        unsigned char m = p[i + 1];
        if (m == 0xff) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0x01 || (m >= 0xd0 && m <= 0xd7)) { /* markers without a length */
            i += 2;
            continue;
        }
        uint32_t len = be16(p + i + 2);
        if (len < 2)
            return -1;
        int sof = m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc;
        if (sof) {
            if (i + 9 > n)
                return -1;
            *h = be16(p + i + 5);
            *w = be16(p + i + 7);
            return 0;
        }
        if (m == 0xd9 || m == 0xda) /* end of image, start of scan: no frame header seen */
            return -1;
        i += 2 + len;
    }
    return -1;
}

int sl__image_size(const unsigned char *p, size_t n, uint32_t *width_px, uint32_t *height_px)
{
    uint32_t w = 0, h = 0;
    if (png_size(p, n, &w, &h) != 0 && gif_size(p, n, &w, &h) != 0 &&
        webp_size(p, n, &w, &h) != 0 && jpeg_size(p, n, &w, &h) != 0)
        return -1;
    if (w == 0 || h == 0)
        return -1;
    *width_px = w;
    *height_px = h;
    return 0;
}
