/* log.h - sluiced's one logger: a line per event with an RFC 3339 UTC time and a level,
 * as text or as one JSON object per line (`log_format`), and the access log's lines. */
#ifndef SL_LOG_H
#define SL_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum sl_log_level {
    SL_LOG_INFO = 0, /* something happened as it should (start, reload, drain) */
    SL_LOG_WARN,     /* something was refused or degraded and sluiced went on */
    SL_LOG_ERROR,    /* something failed: sluiced cannot start, or lost work */
} sl_log_level_t;

typedef enum sl_log_format {
    SL_LOG_TEXT = 0, /* `2026-12-07T09:11:02.123Z warn sluiced: MESSAGE key=value ...` */
    SL_LOG_JSON,     /* {"time":"...","level":"warn","msg":"MESSAGE","fields":{...}} */
} sl_log_format_t;

/* One field of a line: a string, or (`number`) text written as a JSON number. */
typedef struct sl_log_field {
    const char *key;
    const char *value; /* NULL: the field is left out */
    bool number;
} sl_log_field_t;

/* The format of every line from now on (text until the configuration says otherwise). */
void sl__log_set_format(sl_log_format_t format);
sl_log_format_t sl__log_format(void);
/* "text" or "json" into *out; -1 for anything else. */
int sl__log_format_parse(const char *s, sl_log_format_t *out);
/* The formats' names, by sl_log_format_t, NULL-terminated (the `log_format` key's choices). */
extern const char *const sl__log_format_names[];

/* Writes one line to stderr: the time, `level` and the formatted message. */
void sl__log(sl_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* As sl__log, to stdout (the "listening on" banner, which scripts read there). */
void sl__log_stdout(sl_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Writes one whole line to `f` with one write: the time, `level`, `msg` and the `n`
 * fields (text: `key=value`, quoted when the value has a blank, a quote or a control
 * byte; JSON: the `fields` object). Never longer than 8 KiB: longer values are cut. */
void sl__log_line(FILE *f, sl_log_level_t level, const char *msg, const sl_log_field_t *fields,
                  size_t n);
/* The UTC time `unix_s` as RFC 3339 with milliseconds (`2026-12-07T09:11:02.123Z`). */
void sl__log_time(double unix_s, char out[32]);

#endif /* SL_LOG_H */
