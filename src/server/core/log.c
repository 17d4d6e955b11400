/* log.c - sluiced's one logger: every line has an RFC 3339 UTC time and a level.
 *
 * Text lines read as before with the time and level in front (`... warn sluiced: reload
 * refused ...`), so a person and grep find what they found before; `log_format: json`
 * writes one JSON object per line for a log shipper, with the same words in `msg`.
 * A line is assembled in a buffer and written with one fwrite on an unbuffered stream,
 * so lines from one process never interleave. Nothing here knows a secret: callers pass
 * what may be read (the provider keys and tokens are never handed to the logger).
 */
#include "log.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "server.h"

#define LINE_MAX_BYTES 8192

static sl_log_format_t log_format = SL_LOG_TEXT;

static const char *const level_names[] = {"info", "warn", "error"};

void sl__log_set_format(sl_log_format_t format)
{
    log_format = format;
}

sl_log_format_t sl__log_format(void)
{
    return log_format;
}

const char *const sl__log_format_names[] = {[SL_LOG_TEXT] = "text", [SL_LOG_JSON] = "json", NULL};

int sl__log_format_parse(const char *s, sl_log_format_t *out)
{
    for (int i = 0; sl__log_format_names[i]; i++)
        if (!strcmp(s, sl__log_format_names[i])) {
            *out = (sl_log_format_t)i;
            return 0;
        }
    return -1;
}

void sl__log_time(double unix_s, char out[32])
{
    time_t whole = (time_t)unix_s;
    int ms = (int)((unix_s - (double)whole) * 1000);
    if (ms < 0) ms = 0;
    if (ms > 999) ms = 999;
    struct tm tm;
    gmtime_r(&whole, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", ms);
}

typedef struct line {
    char buf[LINE_MAX_BYTES];
    size_t len;
} line_t;

static void put(line_t *l, const char *s, size_t n)
{
    if (n > sizeof(l->buf) - 2 - l->len) n = sizeof(l->buf) - 2 - l->len; /* room for "\n" */
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void puts_(line_t *l, const char *s)
{
    put(l, s, strlen(s));
}

/* `s` as the inside of a JSON string; bytes of invalid UTF-8 become '?'. */
static void put_json_string(line_t *l, const char *s)
{
    bool utf8 = sl__utf8_valid(s);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(l, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            put(l, esc, 6);
        } else if (c >= 0x80 && !utf8) {
            put(l, "?", 1);
        } else {
            put(l, s, 1);
        }
    }
}

/* A text field's value: as it is when it is one plain word, else quoted as JSON. */
static void put_text_value(line_t *l, const char *v)
{
    bool plain = *v != '\0';
    for (const char *p = v; *p && plain; p++)
        if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\' || *p == '=') plain = false;
    if (plain) {
        puts_(l, v);
        return;
    }
    put(l, "\"", 1);
    put_json_string(l, v);
    put(l, "\"", 1);
}

static double unix_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sl__log_line(FILE *f, sl_log_level_t level, const char *msg, const sl_log_field_t *fields,
                  size_t n)
{
    line_t *l = &(line_t){.len = 0};
    char when[32];
    sl__log_time(unix_now_s(), when);
    if (log_format == SL_LOG_JSON) {
        puts_(l, "{\"time\":\"");
        puts_(l, when);
        puts_(l, "\",\"level\":\"");
        puts_(l, level_names[level]);
        puts_(l, "\",\"msg\":\"");
        put_json_string(l, msg);
        puts_(l, "\",\"fields\":{");
        bool first = true;
        for (size_t i = 0; i < n; i++) {
            if (!fields[i].value) continue;
            puts_(l, first ? "\"" : ",\"");
            first = false;
            put_json_string(l, fields[i].key);
            puts_(l, "\":");
            if (fields[i].number) {
                puts_(l, fields[i].value);
            } else {
                put(l, "\"", 1);
                put_json_string(l, fields[i].value);
                put(l, "\"", 1);
            }
        }
        puts_(l, "}}");
    } else {
        puts_(l, when);
        put(l, " ", 1);
        puts_(l, level_names[level]);
        puts_(l, " sluiced: ");
        for (const char *p = msg; *p; p++) /* one event, one line */
            put(l, *p == '\n' || *p == '\r' ? " " : p, 1);
        for (size_t i = 0; i < n; i++) {
            if (!fields[i].value) continue;
            put(l, " ", 1);
            puts_(l, fields[i].key);
            put(l, "=", 1);
            put_text_value(l, fields[i].value);
        }
    }
    l->buf[l->len++] = '\n';
    fwrite(l->buf, 1, l->len, f);
    fflush(f);
}

static void vlog(FILE *f, sl_log_level_t level, const char *fmt, va_list ap)
{
    char msg[4096];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    sl__log_line(f, level, msg, NULL, 0);
}

void sl__log(sl_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, level, fmt, ap);
    va_end(ap);
}

_Static_assert((int)SL_BACKEND_LOG_INFO == (int)SL_LOG_INFO &&
                   (int)SL_BACKEND_LOG_WARN == (int)SL_LOG_WARN &&
                   (int)SL_BACKEND_LOG_ERROR == (int)SL_LOG_ERROR,
               "the backends' levels are the logger's");

void sl__log_backend(sl_backend_log_level_t level, const char *msg)
{
    sl__log_line(stderr, (sl_log_level_t)level, msg, NULL, 0);
}

void sl__log_stdout(sl_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(stdout, level, fmt, ap);
    va_end(ap);
}
