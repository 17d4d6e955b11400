/* timefmt.c - parses the time formats providers put in rate-limit headers. */

/* Two formats matter. Anthropic's `anthropic-ratelimit-*-reset` headers carry an
 * RFC 3339 date-time ("2026-11-30T03:39:42Z"); OpenAI's `x-ratelimit-reset-*`
 * headers carry a Go time.Duration ("6m0s", "12ms"), and `retry-after` a bare
 * number of seconds. Both parsers read the digits by hand instead of calling
 * strtod, sscanf, timegm or mktime: those depend on the locale or the TZ
 * environment, and timegm is not standard. What is left is pure arithmetic, so
 * the parsers are thread-safe and give the same answer everywhere.
 *
 * Both are strict: no surrounding white space (the header layer trims), no leading sign,
 * no trailing bytes. A header we misread would let the engine grant capacity the
 * provider has not restored, so anything odd is SL_EINVAL and the caller falls
 * back to its own estimate. */

#include "sluice/engine.h"

/* The longest duration accepted: ten Julian years. A provider never asks for more,
 * and the bound keeps every intermediate value well inside an int64 of ns. */
#define DURATION_MAX_S  315576000 /* 10 * 365.25 * 86400 */
#define DURATION_MAX_NS ((uint64_t)DURATION_MAX_S * 1000000000)

/* Fraction digits beyond this many are checked but add nothing: 10^18 still fits
 * an uint64, and 10^-18 is below any resolution a double or a unit can carry. */
#define FRACTION_MAX_DIGITS 18

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Reads exactly `n` decimal digits at `*p` into `*out` and advances `*p`.
 * Returns 0, or -1 (nothing advanced) when fewer than `n` digits are there. */
static int read_fixed_digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit((*p)[i])) return -1;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

/* Reads "c" when it is the next byte (either case of a letter when `alt` differs). */
static int read_char(const char **p, char c, char alt)
{
    if (**p != c && **p != alt) return -1;
    (*p)++;
    return 0;
}

static int is_leap_year(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap_year(y) ? 29 : days[m - 1];
}

/* Days from 1970-01-01 to the proleptic Gregorian date y-m-d (Howard Hinnant's
 * days_from_civil): years are shifted to start in March so the leap day is last. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Reads ".digits" if present into seconds in [0, 1); `*frac_s` is 0 without one.
 * A dot must be followed by at least one digit. */
static int read_fraction(const char **p, double *frac_s)
{
    *frac_s = 0.0;
    if (**p != '.') return 0;
    const char *q = *p + 1;
    uint64_t num = 0, scale = 1;
    int digits = 0;
    for (; is_digit(*q); q++, digits++) {
        if (digits < FRACTION_MAX_DIGITS) {
            num = num * 10 + (uint64_t)(*q - '0');
            scale *= 10;
        }
    }
    if (digits == 0) return -1;
    *p = q;
    *frac_s = (double)num / (double)scale;
    return 0;
}

/* Reads "Z", "z" or "+HH:MM" / "-HH:MM" into the offset east of UTC, in seconds. */
static int read_offset(const char **p, int64_t *offset_s)
{
    if (read_char(p, 'Z', 'z') == 0) {
        *offset_s = 0;
        return 0;
    }
    const char sign = **p;
    if (sign != '+' && sign != '-') return -1;
    const char *q = *p + 1;
    int hh, mm;
    if (read_fixed_digits(&q, 2, &hh) || read_char(&q, ':', ':') || read_fixed_digits(&q, 2, &mm) ||
        hh > 23 || mm > 59)
        return -1;
    *p = q;
    *offset_s = (sign == '-' ? -1 : 1) * (int64_t)(hh * 3600 + mm * 60);
    return 0;
}

/* Accepts RFC 3339 `date-time` exactly: "YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)",
 * with "t" and "z" in either case (RFC 3339 §5.6) but not the space some writers
 * use for "T". Years 0000-9999 are proleptic Gregorian. "-00:00" reads as UTC.
 *
 * A leap second (SS = 60) is accepted in any minute and counts as the first
 * second of the next minute, as POSIX time does: 2016-12-31T23:59:60Z gives the
 * same value as 2017-01-01T00:00:00Z. For a reset time that errs late by at most
 * one second, which is the safe side.
 *
 * On success writes Unix seconds (negative before 1970) to `*unix_s` and returns
 * SL_OK; otherwise returns SL_EINVAL and leaves `*unix_s` untouched. */
int sl_parse_rfc3339(const char *s, double *unix_s)
{
    if (s == NULL || unix_s == NULL) return SL_EINVAL;

    const char *p = s;
    int year, month, day, hour, minute, second;
    double frac_s;
    int64_t offset_s;
    if (read_fixed_digits(&p, 4, &year) || read_char(&p, '-', '-') ||
        read_fixed_digits(&p, 2, &month) || read_char(&p, '-', '-') ||
        read_fixed_digits(&p, 2, &day) || read_char(&p, 'T', 't') ||
        read_fixed_digits(&p, 2, &hour) || read_char(&p, ':', ':') ||
        read_fixed_digits(&p, 2, &minute) || read_char(&p, ':', ':') ||
        read_fixed_digits(&p, 2, &second) || read_fraction(&p, &frac_s) ||
        read_offset(&p, &offset_s) || *p != '\0')
        return SL_EINVAL;

    if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 ||
        minute > 59 || second > 60)
        return SL_EINVAL;

    const int64_t whole_s = days_from_civil(year, month, day) * 86400 + (int64_t)hour * 3600 +
                            (int64_t)minute * 60 + second - offset_s;
    *unix_s = (double)whole_s + frac_s;
    return SL_OK;
}

/* The nanoseconds in one `unit` of the `n` bytes at `u`, or 0 when unknown. Go's
 * spellings, case-sensitive: ns, us, µs (U+00B5), μs (U+03BC), ms, s, m, h. */
static uint64_t unit_ns(const char *u, size_t n)
{
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {
        {"ns", 1},
        {"us", 1000},
        {"\xc2\xb5s", 1000},
        {"\xce\xbcs", 1000},
        {"ms", 1000000},
        {"s", 1000000000},
        {"m", (uint64_t)60 * 1000000000},
        {"h", (uint64_t)3600 * 1000000000},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        const char *name = units[i].name;
        size_t k = 0;
        while (k < n && name[k] != '\0' && name[k] == u[k])
            k++;
        if (k == n && name[k] == '\0') return units[i].ns;
    }
    return 0;
}

/* Reads one "digits[.digits]" number and its unit, adding its value to
 * `*total_ns`. With `whole_string` set, a number that ends the string may have no
 * unit and means seconds. Returns 0, or -1 on a malformed component or when the
 * total would pass DURATION_MAX_NS. */
static int read_duration_component(const char **p, int whole_string, uint64_t *total_ns)
{
    const char *q = *p;
    uint64_t whole = 0;
    int digits = 0;
    for (; is_digit(*q); q++, digits++) {
        /* Past the bound in any unit (even ns); stop before whole can wrap. */
        if (whole > DURATION_MAX_NS) return -1;
        whole = whole * 10 + (uint64_t)(*q - '0');
    }
    uint64_t frac = 0, scale = 1;
    if (*q == '.') {
        q++;
        for (int frac_digits = 0; is_digit(*q); q++, digits++, frac_digits++) {
            if (frac_digits < FRACTION_MAX_DIGITS) {
                frac = frac * 10 + (uint64_t)(*q - '0');
                scale *= 10;
            }
        }
    }
    if (digits == 0) return -1;

    const char *unit = q;
    while (*q != '\0' && *q != '.' && !is_digit(*q))
        q++;
    uint64_t ns;
    if (unit == q)
        ns = whole_string && *q == '\0' ? unit_ns("s", 1) : 0;
    else
        ns = unit_ns(unit, (size_t)(q - unit));
    if (ns == 0 || whole > DURATION_MAX_NS / ns) return -1;
    /* The fraction's share is below ns <= 3.6e12 < 2^53, so the double carries it
     * to the nanosecond; the cast truncates, as Go does. */
    const uint64_t value_ns = whole * ns + (uint64_t)((double)frac * ((double)ns / (double)scale));
    if (value_ns > DURATION_MAX_NS - *total_ns) return -1;
    *total_ns += value_ns;
    *p = q;
    return 0;
}

/* Accepts a Go time.Duration without sign ("6m0s", "1h2m3.5s", "250us", "0") or
 * a bare non-negative decimal number of seconds ("20", "1.5", as in retry-after).
 * Each component is "digits[.digits]" (".5s" and "1.s" too, as in Go) followed
 * by a unit; only a string that is one number alone may omit it. No exponents,
 * signs, white space, "inf" or "nan". Sub-nanosecond fractions are truncated, as
 * Go does. Durations above ten Julian years (315576000 s) are rejected.
 *
 * On success writes the duration in seconds to `*seconds` and returns SL_OK;
 * otherwise returns SL_EINVAL and leaves `*seconds` untouched. */
int sl_parse_duration(const char *s, double *seconds)
{
    if (s == NULL || seconds == NULL || *s == '\0') return SL_EINVAL;

    const char *p = s;
    uint64_t total_ns = 0;
    while (*p != '\0') {
        if (read_duration_component(&p, p == s, &total_ns)) return SL_EINVAL;
    }
    *seconds = (double)total_ns / 1e9;
    return SL_OK;
}
