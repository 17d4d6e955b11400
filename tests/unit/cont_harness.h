/* cont_harness.h - shared helpers of the capped-and-continued answer tests
 * (test_proxy_output.c, test_proxy_continue_openai.c): a continuation from a client body,
 * a part fed in, the next part's body and the joined answer as JSON, a stream fed through. */
#ifndef SL_TEST_CONT_HARNESS_H
#define SL_TEST_CONT_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "proxy.h"

/* The continuation of the client's `body` (JSON text) in dialect `api`, capping `field`,
 * whose own limit is `max`. Never NULL. */
static inline sl_cont_t *harness_cont(sl_upstream_api_t api, bool responses, const char *body,
                                      const char *field, int64_t max)
{
    json_t *j = json_loads(body, 0, NULL);
    assert_non_null(j);
    sl_cont_t *c = sl__cont_new(api, responses, j, field, max);
    json_decref(j);
    assert_non_null(c);
    return c;
}

/* Opens a round capped at `cap_tokens` and feeds it the whole answer `part`; returns what
 * sl__cont_absorb does (1: go on, 0: the answer is done). */
static inline int harness_cont_part(sl_cont_t *c, int64_t cap_tokens, const char *part)
{
    sl__cont_round(c, cap_tokens);
    return sl__cont_absorb(c, part, strlen(part));
}

/* The next part's body as JSON (the caller decrefs); *left_tokens as sl__cont_next_body. */
static inline json_t *harness_cont_next(sl_cont_t *c, int64_t *left_tokens)
{
    char *next = sl__cont_next_body(c, left_tokens);
    assert_non_null(next);
    json_t *j = json_loads(next, 0, NULL);
    free(next);
    assert_non_null(j);
    return j;
}

/* The joined answer as JSON (the caller decrefs). */
static inline json_t *harness_cont_answer(sl_cont_t *c)
{
    char *joined = sl__cont_answer(c);
    assert_non_null(joined);
    json_t *j = json_loads(joined, 0, NULL);
    free(joined);
    assert_non_null(j);
    return j;
}

/* Feeds `n` SSE events to `c` and returns what the client got (the caller frees). A Chat
 * Completions usage chunk ("choices":[]) goes to the client only when `to_client_usage`
 * (the client asked for it). */
static inline char *harness_cont_feed(sl_cont_t *c, const char *const *events, size_t n,
                                      bool to_client_usage)
{
    struct evbuffer *out = evbuffer_new();
    for (size_t i = 0; i < n; i++) {
        bool usage_chunk = strstr(events[i], "\"choices\":[]") != NULL;
        sl__cont_event(c, events[i], strlen(events[i]), !usage_chunk || to_client_usage, out);
    }
    size_t len = evbuffer_get_length(out);
    char *s = malloc(len + 1);
    assert_non_null(s);
    evbuffer_remove(out, s, len);
    s[len] = '\0';
    evbuffer_free(out);
    return s;
}

#endif
