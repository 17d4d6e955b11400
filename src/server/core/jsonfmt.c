/* jsonfmt.c - the hot answers' JSON written straight into a buffer (no printf): integers,
 * seconds to the microsecond, and other numbers as %.15g (see server.h: sl_jbuf_t). */
#include "server.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SECONDS_FAST_MAX 9.0e12 /* |v| * 1e6 stays within int64 */

static void put(sl_jbuf_t *b, const char *s, size_t n)
{
    if (b->overflow || n > sizeof(b->buf) - b->len) {
        b->overflow = true;
        return;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

void sl__jb_lit(sl_jbuf_t *b, const char *s)
{
    put(b, s, strlen(s));
}

void sl__jb_mem(sl_jbuf_t *b, const char *s, size_t n)
{
    put(b, s, n);
}

void sl__jb_u64(sl_jbuf_t *b, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[sizeof(tmp) - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(b, tmp + sizeof(tmp) - n, n);
}

void sl__jb_i64(sl_jbuf_t *b, int64_t v)
{
    if (v < 0) {
        put(b, "-", 1);
        sl__jb_u64(b, (uint64_t)0 - (uint64_t)v);
        return;
    }
    sl__jb_u64(b, (uint64_t)v);
}

void sl__jb_num(sl_jbuf_t *b, double v)
{
    if (!isfinite(v)) v = 0; /* JSON has no NaN or infinity */
    if (v == floor(v) && fabs(v) < 1e15) {
        sl__jb_i64(b, (int64_t)v);
        return;
    }
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%.15g", v);
    put(b, tmp, (size_t)n);
}

void sl__jb_seconds(sl_jbuf_t *b, double v)
{
    if (!isfinite(v) || fabs(v) >= SECONDS_FAST_MAX) {
        sl__jb_num(b, v);
        return;
    }
    int64_t us = llround(v * 1e6);
    if (us < 0) {
        put(b, "-", 1);
        us = -us;
    }
    sl__jb_u64(b, (uint64_t)(us / 1000000));
    int64_t frac = us % 1000000;
    if (frac == 0) return;
    char digits[7] = ".000000";
    int last = 6;
    for (int i = 6; i >= 1; i--) {
        digits[i] = (char)('0' + frac % 10);
        frac /= 10;
    }
    while (digits[last] == '0')
        last--;
    put(b, digits, (size_t)last + 1);
}

void sl__jb_key_i64(sl_jbuf_t *b, const char *key, int64_t v)
{
    sl__jb_lit(b, key);
    sl__jb_i64(b, v);
}

void sl__jb_key_num(sl_jbuf_t *b, const char *key, double v)
{
    sl__jb_lit(b, key);
    sl__jb_num(b, v);
}

void sl__jb_key_seconds(sl_jbuf_t *b, const char *key, double v)
{
    sl__jb_lit(b, key);
    sl__jb_seconds(b, v);
}
