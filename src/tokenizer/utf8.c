/* UTF-8 validation and repair: ill-formed input becomes U+FFFD exactly as node decodes it.
 *
 * node's Buffer#toString('utf8') follows the WHATWG Encoding Standard's decoder: each
 * maximal subpart of an ill-formed sequence becomes one U+FFFD, and the byte that broke
 * a sequence is examined again as the start of the next one. So C0 80 gives two
 * replacements (C0 can never start a sequence), E2 82 followed by 'A' gives one, and
 * a surrogate ED A0 80 gives three (A0 is outside ED's allowed 80..9F). Matching this
 * is what makes our counts equal node's on the same bytes. */
#include <string.h>

#include "tokenizer_internal.h"

/* Decoder state between bytes. */
typedef struct {
    int needed;            /* continuation bytes still expected */
    unsigned char lower;   /* allowed range of the next continuation byte */
    unsigned char upper;
} utf8_state_t;

static void state_reset(utf8_state_t *st)
{
    st->needed = 0;
    st->lower = 0x80;
    st->upper = 0xbf;
}

/* Starts a sequence at lead byte b. Returns 1 for ASCII, 0 when more bytes are
 * needed, -1 when b cannot start a sequence. */
static int state_start(utf8_state_t *st, unsigned char b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf) {
        st->needed = 1;
    } else if (b >= 0xe0 && b <= 0xef) {
        if (b == 0xe0)
            st->lower = 0xa0;
        if (b == 0xed)
            st->upper = 0x9f;
        st->needed = 2;
    } else if (b >= 0xf0 && b <= 0xf4) {
        if (b == 0xf0)
            st->lower = 0x90;
        if (b == 0xf4)
            st->upper = 0x8f;
        st->needed = 3;
    } else {
        return -1;
    }
    return 0;
}

static size_t ascii_run(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w & 0x8080808080808080ULL)
            break;
        i += 8;
    }
    while (i < n && p[i] < 0x80)
        i++;
    return i;
}

size_t sl__utf8_valid_prefix(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        i += ascii_run(p + i, n - i);
        if (i >= n)
            break;
        utf8_state_t st;
        state_reset(&st);
        if (state_start(&st, p[i]) < 0)
            return i;
        size_t len = 1 + (size_t)st.needed;
        if (len > n - i)
            return i;
        for (size_t k = 1; k < len; k++) {
            if (p[i + k] < st.lower || p[i + k] > st.upper)
                return i;
            st.lower = 0x80;
            st.upper = 0xbf;
        }
        i += len;
    }
    return n;
}

static const unsigned char replacement[3] = {0xef, 0xbf, 0xbd};

int sl__utf8_sanitize(const unsigned char *p, size_t n, sl__buf_t *out)
{
    /* Worst case: every byte becomes a 3-byte U+FFFD. */
    if (n > SIZE_MAX / 3 || sl__buf_reserve(out, n * 3) != 0)
        return SL_TOK_ENOMEM;
    unsigned char *o = out->p + out->n;
    utf8_state_t st;
    state_reset(&st);
    size_t seq_start = 0;
    size_t i = 0;
    while (i < n) {
        unsigned char b = p[i];
        if (st.needed == 0) {
            seq_start = i;
            int r = state_start(&st, b);
            if (r == 1) {
                *o++ = b;
            } else if (r < 0) {
                memcpy(o, replacement, 3);
                o += 3;
            }
            i++;
            continue;
        }
        if (b < st.lower || b > st.upper) {
            /* The broken sequence is one replacement; b is looked at again. */
            state_reset(&st);
            memcpy(o, replacement, 3);
            o += 3;
            continue;
        }
        st.lower = 0x80;
        st.upper = 0xbf;
        i++;
        if (--st.needed == 0) {
            memcpy(o, p + seq_start, i - seq_start);
            o += i - seq_start;
        }
    }
    if (st.needed != 0) {
        memcpy(o, replacement, 3);
        o += 3;
    }
    out->n = (size_t)(o - out->p);
    return 0;
}
