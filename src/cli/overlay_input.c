/* overlay_input.c - sluice overlay's readers: event logs (JSON lines or SSE), CSV timestamps. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "overlay.h"
#include "../common/grow.h"

int sl_overlay_series_push(sl_overlay_series_t *s, double t_s, const char *agent)
{
    sl_overlay_point_t *p = sl_grow(s->p, s->n, &s->cap, sizeof *p, 256);
    if (!p) return -1;
    s->p = p;
    sl_overlay_point_t *pt = &s->p[s->n++];
    pt->t_s = t_s;
    snprintf(pt->agent, sizeof pt->agent, "%s", agent ? agent : "");
    return 0;
}

void sl_overlay_series_free(sl_overlay_series_t *s)
{
    free(s->p);
    s->p = NULL;
    s->n = s->cap = 0;
}

/* ---- timestamps -------------------------------------------------------------------- */

/* Days from 1970-01-01 to the proleptic Gregorian date y-m-d. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Reads exactly `n` digits at *s into *out and advances. */
static int digits(const char **s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if ((*s)[i] < '0' || (*s)[i] > '9') return -1;
        v = v * 10 + ((*s)[i] - '0');
    }
    *s += n;
    *out = v;
    return 0;
}

static int parse_iso8601(const char *s, double *out_s)
{
    int y, mo, d, h, mi, sec = 0;
    if (digits(&s, 4, &y) || *s++ != '-' || digits(&s, 2, &mo) || *s++ != '-' ||
        digits(&s, 2, &d) || (*s != 'T' && *s != 't' && *s != ' '))
        return -1;
    s++;
    if (digits(&s, 2, &h) || *s++ != ':' || digits(&s, 2, &mi)) return -1;
    double frac = 0;
    if (*s == ':') {
        s++;
        if (digits(&s, 2, &sec)) return -1;
        if (*s == '.' || *s == ',') {
            double scale = 0.1;
            s++;
            if (*s < '0' || *s > '9') return -1;
            for (; *s >= '0' && *s <= '9'; s++, scale /= 10) frac += (*s - '0') * scale;
        }
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return -1;
    int offset_s = 0;
    if (*s == 'Z' || *s == 'z') {
        s++;
    } else if (*s == '+' || *s == '-') {
        int sign = *s++ == '-' ? -1 : 1, oh, om = 0;
        if (digits(&s, 2, &oh)) return -1;
        if (*s == ':') s++;
        if (*s && digits(&s, 2, &om)) return -1;
        if (oh > 23 || om > 59) return -1;
        offset_s = sign * (oh * 3600 + om * 60);
    }
    if (*s) return -1;
    int64_t days = days_from_civil(y, mo, d);
    *out_s = (double)(days * 86400 + h * 3600 + mi * 60 + sec - offset_s) + frac;
    return 0;
}

int sl_overlay_parse_time(const char *s, double *out_s)
{
    if (!*s) return -1;
    if (strlen(s) >= 10 && s[4] == '-') return parse_iso8601(s, out_s);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < 0) return -1;
    *out_s = v;
    return 0;
}

/* ---- event logs -------------------------------------------------------------------- */

typedef enum { REC_429, REC_UPSTREAM_429, REC_TURN, REC_GRANT, REC_RETRY } rec_kind_t;

typedef struct rec {
    double t_s;
    size_t seq;
    rec_kind_t kind;
    char agent[SL_OVERLAY_AGENT_MAX];
} rec_t;

typedef struct log_reader {
    const char *path;
    const sl_overlay_log_options_t *opt;
    rec_t *recs;
    size_t n, cap;
    size_t have[5];
    char *err;
    size_t errlen;
} log_reader_t;

static int add_rec(log_reader_t *r, rec_kind_t kind, double t_s, const char *agent)
{
    rec_t *p = sl_grow(r->recs, r->n, &r->cap, sizeof *p, 1024);
    if (!p) return -1;
    r->recs = p;
    rec_t *x = &r->recs[r->n];
    x->t_s = t_s;
    x->seq = r->n++;
    x->kind = kind;
    snprintf(x->agent, sizeof x->agent, "%s", agent ? agent : "");
    r->have[kind]++;
    return 0;
}

/* One event object. Returns 0, -1 (error in r->err), or 1 (not JSON: maybe cut off). */
static int take_event(log_reader_t *r, const char *text, size_t line)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) return 1;
    int rc = -1;
    json_t *ts = json_object_get(j, "ts"), *ev = json_object_get(j, "event");
    json_t *agent = json_object_get(j, "agent");
    if (!json_is_object(j)) {
        snprintf(r->err, r->errlen, "%s:%zu: not a JSON object", r->path, line);
    } else if (!json_is_number(ts) || !isfinite(json_number_value(ts)) ||
               json_number_value(ts) < 0) {
        char *v = ts ? json_dumps(ts, JSON_ENCODE_ANY) : NULL;
        snprintf(r->err, r->errlen, "%s:%zu: \"ts\": %s is not a timestamp in seconds", r->path,
                 line, v ? v : "missing");
        free(v);
    } else if (!json_is_string(ev)) {
        snprintf(r->err, r->errlen, "%s:%zu: \"event\": missing or not a string", r->path, line);
    } else {
        const char *name = json_string_value(ev), *who = json_string_value(agent);
        double t = json_number_value(ts);
        const sl_overlay_log_options_t *o = r->opt;
        rc = 0;
        if (o->event_429 ? !strcmp(name, o->event_429) : !strcmp(name, "http_429"))
            rc = add_rec(r, REC_429, t, who);
        else if (!o->event_429 && !strcmp(name, "upstream_429"))
            rc = add_rec(r, REC_UPSTREAM_429, t, who);
        if (rc == 0 && (o->event_turn ? !strcmp(name, o->event_turn) : !strcmp(name, "turn")))
            rc = add_rec(r, REC_TURN, t, who);
        else if (rc == 0 && !strcmp(name, "granted"))
            rc = add_rec(r, REC_GRANT, t, who);
        else if (rc == 0 && !strcmp(name, "retry"))
            rc = add_rec(r, REC_RETRY, t, who);
        if (rc != 0) snprintf(r->err, r->errlen, "%s: out of memory", r->path);
    }
    json_decref(j);
    return rc;
}

/* Each line is an event object, an SSE field (data:, event:, id:, retry:), an SSE
 * comment (":") or blank; an SSE message's data lines are joined with newlines. */
static int read_lines(log_reader_t *r, char *text, int *skipped_tail)
{
    char *data = NULL;
    size_t data_n = 0, data_line = 0, line = 0;
    int rc = 0;
    for (char *s = text; *s && rc == 0;) {
        char *nl = strchr(s, '\n');
        bool last = !nl || !nl[1];
        if (nl) *nl = '\0';
        line++;
        size_t len = strlen(s);
        if (len && s[len - 1] == '\r') s[--len] = '\0';
        const char *what = NULL;
        if (!strncmp(s, "data:", 5)) {
            const char *v = s[5] == ' ' ? s + 6 : s + 5;
            size_t vn = strlen(v);
            char *grown = realloc(data, data_n + vn + 2);
            if (!grown) {
                snprintf(r->err, r->errlen, "%s: out of memory", r->path);
                rc = -1;
                break;
            }
            data = grown;
            if (data_n) data[data_n++] = '\n';
            memcpy(data + data_n, v, vn + 1);
            data_n += vn;
            if (!data_line) data_line = line;
        } else if (!len && data_n) {
            what = data;
        } else if (s[0] == '{') {
            what = s;
            data_line = line;
        } else if (len && s[0] != ':' && strncmp(s, "event:", 6) && strncmp(s, "id:", 3) &&
                   strncmp(s, "retry:", 6)) {
            snprintf(r->err, r->errlen,
                     "%s:%zu: \"%.60s\" is neither a JSON event nor an SSE line", r->path, line, s);
            rc = -1;
        }
        if (!what && last && data_n) what = data; /* a capture that ends without a blank line */
        if (what) {
            int t = take_event(r, what, data_line);
            if (t == 1 && last && !nl) {
                ++*skipped_tail; /* the capture was cut off mid-object */
            } else if (t == 1) {
                snprintf(r->err, r->errlen, "%s:%zu: \"%.60s\" is not valid JSON", r->path,
                         data_line, what);
                rc = -1;
            } else {
                rc = t;
            }
            data_n = 0;
            data_line = 0;
        }
        s = nl ? nl + 1 : s + len;
    }
    free(data);
    return rc;
}

static int by_agent_then_seq(const void *x, const void *y)
{
    const rec_t *a = x, *b = y;
    int c = strcmp(a->agent, b->agent);
    if (c) return c;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

int sl_overlay_read_log(const char *path, const sl_overlay_log_options_t *opt,
                        sl_overlay_series_t *errs, sl_overlay_series_t *turns,
                        sl_overlay_series_t *retries, const char **used_429, const char **used_turn, int *skipped_tail,
                        char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    if (sl_cli_read_input(path, &text, &len, err, errlen) != 0) return -1;
    log_reader_t r = {.path = path, .opt = opt, .err = err, .errlen = errlen};
    int rc = read_lines(&r, text, skipped_tail);
    free(text);
    if (rc != 0) goto done;
    /* The simulator logs both http_429 (the provider's refusal, when it happens) and,
     * under the sluice strategies, upstream_429 (the settle reporting it): one 429. */
    rec_kind_t k429 = opt->event_429 || r.have[REC_429] ? REC_429 : REC_UPSTREAM_429;
    bool explicit_turns = opt->event_turn ? strcmp(opt->event_turn, "granted") != 0
                                          : r.have[REC_TURN] > 0;
    *used_429 = opt->event_429 ? opt->event_429 : k429 == REC_429 ? "http_429" : "upstream_429";
    *used_turn = explicit_turns ? (opt->event_turn ? opt->event_turn : "turn")
                                : "granted (not after the agent's 429)";
    /* Per agent in log order: the retry of a 429'd call is the `retry` event after it when
     * the log has them (the simulator's), else the agent's next grant. */
    bool explicit_retries = r.have[REC_RETRY] > 0;
    /* Per agent in log order: a grant after the agent's 429 is the retry of that call. */
    if (r.n) qsort(r.recs, r.n, sizeof *r.recs, by_agent_then_seq);
    bool after_429 = false;
    for (size_t i = 0; i < r.n && rc == 0; i++) {
        const rec_t *x = &r.recs[i];
        if (i == 0 || strcmp(x->agent, r.recs[i - 1].agent)) after_429 = false;
        if (x->kind == k429) {
            after_429 = true;
            rc = sl_overlay_series_push(errs, x->t_s, x->agent);
        } else if (x->kind == (explicit_retries ? REC_RETRY : REC_GRANT) && after_429) {
            after_429 = false;
            if (retries) rc = sl_overlay_series_push(retries, x->t_s, x->agent);
        } else if (x->kind == REC_RETRY || (x->kind == REC_GRANT && after_429)) {
            continue; /* a retry (of a log that says them) is no turn */
        } else if (explicit_turns ? x->kind == REC_TURN
                                  : (x->kind == REC_GRANT || x->kind == REC_TURN)) {
            rc = sl_overlay_series_push(turns, x->t_s, x->agent);
        }
        if (rc != 0) snprintf(err, errlen, "%s: out of memory", path);
    }
done:
    free(r.recs);
    return rc;
}

/* ---- CSV ------------------------------------------------------------------------------ */

/* Splits `line` in place at commas into at most `max` fields, trimming blanks and
 * surrounding double quotes. Returns the number of fields. */
static size_t split_csv(char *line, char **fields, size_t max)
{
    size_t n = 0;
    for (char *s = line;;) {
        char *comma = strchr(s, ',');
        if (comma) *comma = '\0';
        while (*s == ' ' || *s == '\t') s++;
        size_t l = strlen(s);
        while (l && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\r')) s[--l] = '\0';
        if (l >= 2 && s[0] == '"' && s[l - 1] == '"') {
            s[l - 1] = '\0';
            s++;
        }
        if (n < max) fields[n++] = s;
        if (!comma) break;
        s = comma + 1;
    }
    return n;
}

static int find_column(char **fields, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fields[i], name)) return (int)i;
    return -1;
}

int sl_overlay_read_csv(const char *path, const char *time_column, const char *agent_column,
                        sl_overlay_series_t *out, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    if (sl_cli_read_input(path, &text, &len, err, errlen) != 0) return -1;
    enum { MAX_FIELDS = 64 };
    char *f[MAX_FIELDS];
    int tcol = 0, acol = -1, rc = 0;
    bool header_seen = false, need_header = time_column || agent_column;
    size_t line = 0;
    for (char *s = text; *s && rc == 0;) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = '\0';
        char *next = nl ? nl + 1 : s + strlen(s);
        line++;
        char *p = s;
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        s = next;
        if (!*p || *p == '#') continue;
        size_t nf = split_csv(p, f, MAX_FIELDS);
        double t;
        if (!header_seen && (need_header || sl_overlay_parse_time(f[0], &t) != 0)) {
            header_seen = true;
            if (time_column && (tcol = find_column(f, nf, time_column)) < 0) {
                snprintf(err, errlen, "%s:%zu: --time-column: no column \"%s\" in the header",
                         path, line, time_column);
                rc = -1;
            } else if (agent_column && (acol = find_column(f, nf, agent_column)) < 0) {
                snprintf(err, errlen, "%s:%zu: --agent-column: no column \"%s\" in the header",
                         path, line, agent_column);
                rc = -1;
            }
            continue;
        }
        header_seen = true;
        if ((size_t)tcol >= nf || (acol >= 0 && (size_t)acol >= nf)) {
            snprintf(err, errlen, "%s:%zu: %zu fields, the header has more", path, line, nf);
            rc = -1;
        } else if (sl_overlay_parse_time(f[tcol], &t) != 0) {
            snprintf(err, errlen,
                     "%s:%zu: \"%.60s\" is not a timestamp (Unix seconds or ISO-8601)", path, line,
                     f[tcol]);
            rc = -1;
        } else if (sl_overlay_series_push(out, t, acol >= 0 ? f[acol] : "") != 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -1;
        }
    }
    free(text);
    return rc;
}
