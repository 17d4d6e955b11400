/* limits_harness.h - what the action-limit unit tests share: sets from JSON, checks at a time in seconds. */
#ifndef SLUICE_LIMITS_HARNESS_H
#define SLUICE_LIMITS_HARNESS_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "limits/limits.h"
#include "limits/limits_json.h"

/* A Unix time that every window used here (1 s .. 1 h) is aligned to. */
#define T0_US 1800000000000000LL
#define US(s) ((int64_t)llround((s) * 1e6))
#define AT(s) (T0_US + US(s))

/* A linked set from a JSON object of limits; fails the test with errmsg on an error. */
static inline sl_limits_t *harness_set(const char *json)
{
    json_error_t jerr;
    json_t *j = json_loads(json, 0, &jerr);
    if (!j) fail_msg("bad JSON in test: %s: %s", jerr.text, json);
    sl_limits_t *ls = sl_limits_new();
    assert_non_null(ls);
    int rc = sl_limits_add_all_json(ls, j);
    json_decref(j);
    if (rc) fail_msg("set refused: %s", sl_limits_errmsg(ls));
    return ls;
}

/* The error message a set from `json` is refused with (the return code in *rc). */
static inline const char *harness_refusal(const char *json, int *rc, char *buf, size_t n)
{
    json_t *j = json_loads(json, 0, NULL);
    if (!j) fail_msg("bad JSON in test: %s", json);
    sl_limits_t *ls = sl_limits_new();
    *rc = sl_limits_add_all_json(ls, j);
    snprintf(buf, n, "%s", sl_limits_errmsg(ls));
    json_decref(j);
    sl_limits_free(ls);
    return buf;
}

static inline sl_limit_request_t harness_req(const char *agent, int64_t hits)
{
    sl_limit_request_t r = {.agent = agent, .team = "t", .key = agent, .action = NULL, .hits = hits};
    return r;
}

/* One check of `hits` by `agent` at T0 + t_s seconds; asserts it returned 0. */
static inline sl_limit_result_t harness_check(sl_limits_t *ls, const char *name, const char *agent,
                                              int64_t hits, double t_s)
{
    sl_limit_result_t r;
    sl_limit_request_t req = harness_req(agent, hits);
    int rc = sl_limits_check(ls, name, &req, AT(t_s), &r);
    if (rc) fail_msg("check %s failed: %s", name, sl_limits_errmsg(ls));
    return r;
}

#endif /* SLUICE_LIMITS_HARNESS_H */
