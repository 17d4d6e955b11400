/* overlay.h - sluice overlay: 429 timestamps against turn timestamps (the incident's one test: do the 429s follow the work or the retries?). */
#ifndef SL_CLI_OVERLAY_H
#define SL_CLI_OVERLAY_H

#include <stdbool.h>
#include <stddef.h>

#define SL_OVERLAY_AGENT_MAX 128

/* One timestamp, with the agent it belongs to ("" when the source does not say). */
typedef struct sl_overlay_point {
    double t_s;
    char agent[SL_OVERLAY_AGENT_MAX];
} sl_overlay_point_t;

/* A growable list of points; zero-initialise, free with sl_overlay_series_free(). */
typedef struct sl_overlay_series {
    sl_overlay_point_t *p;
    size_t n, cap;
} sl_overlay_series_t;

/* Appends a point. Returns 0, or -1 when out of memory (the series is unchanged). */
int sl_overlay_series_push(sl_overlay_series_t *s, double t_s, const char *agent);
void sl_overlay_series_free(sl_overlay_series_t *s);

/* Which events of an event log are 429s and which are turn starts. NULL = automatic:
 * 429s are `http_429` events when the log has any (the simulator's), else
 * `upstream_429` (sluiced's: a settle that reported the provider's 429); turns are
 * `turn` events when the log has any (the simulator's), else `granted` leases that do
 * not follow the same agent's 429 (a grant right after a 429 is the retry). */
typedef struct sl_overlay_log_options {
    const char *event_429;
    const char *event_turn;
} sl_overlay_log_options_t;

/* Reads an event log: sluiced's JSON lines (`event_log`), the SSE text of
 * GET /v1/events as captured by `curl -N` (`event:`/`data:` lines), or a simulator's
 * events-STRATEGY.jsonl. Appends to `errs` and `turns`, and to `retries` (may be NULL) the
 * calls made again after their agent's 429: `retry` events when the log has any (the
 * simulator's), else the grant that follows the agent's 429; names which events were used
 * in `used_429` / `used_turn` (static strings or the options'). Returns 0, or -1 with
 * "FILE:LINE: what and the value" in `err` (a last line cut off mid-object, as an
 * interrupted capture leaves it, is skipped and counted in *skipped_tail). */
int sl_overlay_read_log(const char *path, const sl_overlay_log_options_t *opt,
                        sl_overlay_series_t *errs, sl_overlay_series_t *turns,
                        sl_overlay_series_t *retries, const char **used_429, const char **used_turn, int *skipped_tail,
                        char *err, size_t errlen);

/* Reads timestamps from a CSV (or plain) file: one a line, or the column named
 * `time_column` of a header line (NULL: the first column; a first line whose field is
 * not a timestamp is taken as the header). `agent_column` (may be NULL) names a column
 * of agent names. Timestamps are Unix seconds (decimals allowed) or ISO-8601
 * (2026-12-01T20:16:18.5Z, an offset +02:00, no zone = UTC). Empty lines and lines
 * starting with # are skipped. Returns 0, or -1 with "FILE:LINE: ..." in `err`. */
int sl_overlay_read_csv(const char *path, const char *time_column, const char *agent_column,
                        sl_overlay_series_t *out, char *err, size_t errlen);

/* Parses one timestamp (see above) into Unix seconds. Returns 0 or -1. */
int sl_overlay_parse_time(const char *s, double *out_s);

typedef enum {
    SL_OVERLAY_NO_PATTERN = 0,
    SL_OVERLAY_WORK,    /* most 429s come right after turn starts */
    SL_OVERLAY_RETRIES  /* most 429s come right after an earlier 429 */
} sl_overlay_verdict_t;

typedef struct sl_overlay_options {
    double window_s;       /* "right after": within this many seconds (5) */
    double bin_s;          /* the period's bin width (5) */
    int min_429s;          /* fewer 429s than this: no verdict (10) */
    bool fleet;            /* ignore agent names even when every point has one */
} sl_overlay_options_t;

/* Fills the defaults above. */
void sl_overlay_options_init(sl_overlay_options_t *o);

typedef struct sl_overlay_result {
    size_t n_429, n_turns;
    bool per_agent;              /* matched within each agent (every point named one) */
    double start_s, end_s;       /* the span both series cover */
    size_t after_turn;           /* 429s matched to a turn start within the window */
    size_t n_retries;            /* retries given (calls made right after their agent's 429) */
    size_t after_retry;          /* the others matched to a retry within the window */
    size_t after_429;            /* the others within the window after an earlier 429 */
    size_t neither;
    double share_turn, share_429; /* after_turn, and after_retry + after_429, over n_429 */
    double chance_turn, chance_429; /* the shares random times would get: the share
                                       of the span the windows cover */
    double period_429_s, peak_429; /* dominant period of the binned 429s; < 0 = none */
    double period_turn_s, peak_turn;
    double min_lag_s, max_lag_s;  /* the lags the period search covered */
    sl_overlay_verdict_t verdict;
} sl_overlay_result_t;

/* Sets the 429s against the turns and the retries (NULL: none known): sorts the series,
 * then takes the 429s in time order; a 429 is "after a turn" when a turn start no other
 * 429 claimed lies within window_s before it (the same agent's when per agent; one turn
 * is one call, so it explains one 429), else "after a retry" when a retry no other 429
 * claimed does, else "after a 429" when an earlier 429 lies within window_s before it,
 * else neither. The retries' share counts both "after a retry" and "after a 429". The verdict is WORK when the turn share is at least 0.5,
 * at least 1.5 times its chance level and above the 429 share; RETRIES the same way
 * round; else NO_PATTERN (also with fewer than min_429s 429s). Returns 0, or -1 when
 * out of memory. */
int sl_overlay_analyse(sl_overlay_series_t *errs, sl_overlay_series_t *turns,
                       sl_overlay_series_t *retries, const sl_overlay_options_t *opt,
                       sl_overlay_result_t *out);

/* Draws both series per bin_s on one time axis into the PNG `path` with gnuplot
 * (429s as red bars, turn starts as a blue line). Returns 0, or -1 with a message. */
int sl_overlay_plot(const char *path, const sl_overlay_series_t *errs,
                    const sl_overlay_series_t *turns, const sl_overlay_result_t *res,
                    double bin_s, char *err, size_t errlen);

#endif
