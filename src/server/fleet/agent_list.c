/* agent_list.c - GET /v1/agents: the agents a token may see, in name order, a page at a time.
 *
 * `limit` (1-10000, default 1000) agents whose names sort after `cursor` (default: from
 * the first); `next_cursor` is the last name of a full page (pass it back for the next
 * one), null on the last. Pages are by name, so an agent forgotten or made between two
 * pages shifts nothing: each name is listed once, in order, if it exists when its page is
 * read. The suspended agents this replica's engine does not know are listed among the
 * others by name.
 */
#include "server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#define PAGE_DEFAULT 1000
#define PAGE_MAX     10000
#define NAME_MAX_LEN 128

typedef struct page {
    sl_call_t *call;
    long limit;
    char cursor[NAME_MAX_LEN + 1]; /* "" = from the first */
} page_t;

/* One listed agent: from the backend (info) or a suspension only (j). */
typedef struct entry {
    const char *name;
    const sl_agent_info_t *info;
    json_t *j;
} entry_t;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const entry_t *)a)->name, ((const entry_t *)b)->name);
}

static bool listed(const char *agent, void *ud)
{
    const entry_t *all = ((const entry_t **)ud)[0];
    size_t n = (size_t)(uintptr_t)((const entry_t **)ud)[1];
    entry_t key = {agent, NULL, NULL};
    return bsearch(&key, all, n, sizeof(key), by_name) != NULL;
}

json_t *sl__agent_json(sl_server_t *srv, const sl_agent_info_t *a)
{
    json_t *j = json_pack("{s:s,s:s,s:f,s:I,s:f,s:b,s:I,s:I,s:I,s:I,s:I,s:s}", "name", a->name,
                          "role", a->role ? a->role : "", "weight", a->weight, "repeats",
                          (json_int_t)a->repeats, "estimate_error", a->estimate_error,
                          "estimate_error_alert", a->alert_estimate_error, "leases",
                          (json_int_t)a->leases, "queued", (json_int_t)a->queued, "tokens_in",
                          (json_int_t)a->tokens_in, "tokens_out", (json_int_t)a->tokens_out,
                          "got_429", (json_int_t)a->got_429, "state", a->state ? a->state : "");
    if (!j) return NULL;
    if (a->team) json_object_set_new(j, "team", json_string(a->team));
    sl__anomaly_annotate(srv, a->name, j);
    return j;
}

static void on_agents(int rc, const sl_agent_info_t *a, size_t n, void *ud)
{
    page_t *pg = ud;
    sl_call_t *call = pg->call;
    if (rc != SL_OK) {
        free(pg);
        sl__reply_engine_error(call, rc, "agents: out of memory");
        return;
    }
    entry_t *all = malloc((n ? n : 1) * sizeof(*all));
    json_t *extra = json_array();
    if (!all || !extra) {
        free(all);
        json_decref(extra);
        free(pg);
        sl__reply_error(call, 503, "out_of_memory", "agents: out of memory");
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (call->admin || sl__token_may_act_as(call, a[i].name))
            all[k++] = (entry_t){a[i].name, &a[i], NULL};
    qsort(all, k, sizeof(*all), by_name);
    const void *lookup[2] = {all, (void *)(uintptr_t)k};
    sl__suspend_add_unlisted(call, extra, listed, (void *)lookup);
    /* The page: entries after the cursor, both sources merged by name. */
    size_t n_extra = json_array_size(extra);
    entry_t *page = malloc((k + n_extra + 1) * sizeof(*page));
    size_t m = 0;
    for (size_t i = 0; page && i < k; i++)
        if (strcmp(all[i].name, pg->cursor) > 0) page[m++] = all[i];
    for (size_t i = 0; page && i < n_extra; i++) {
        json_t *j = json_array_get(extra, i);
        const char *name = json_string_value(json_object_get(j, "name"));
        if (name && strcmp(name, pg->cursor) > 0) page[m++] = (entry_t){name, NULL, j};
    }
    if (page && n_extra) qsort(page, m, sizeof(*page), by_name);
    json_t *arr = json_array();
    size_t shown = m < (size_t)pg->limit ? m : (size_t)pg->limit;
    for (size_t i = 0; page && i < shown; i++)
        json_array_append_new(arr, page[i].info ? sl__agent_json(call->srv, page[i].info)
                                                : json_incref(page[i].j));
    json_t *next = page && m > shown ? json_string(page[shown - 1].name) : json_null();
    free(page);
    free(all);
    json_decref(extra);
    free(pg);
    sl__reply_json(call, 200, json_pack("{s:o,s:o}", "agents", arr, "next_cursor", next));
}

void sl__handle_agents(sl_call_t *call, const char *query)
{
    page_t *pg = calloc(1, sizeof(*pg));
    if (!pg) {
        sl__reply_error(call, 503, "out_of_memory", "agents: out of memory");
        return;
    }
    pg->call = call;
    pg->limit = PAGE_DEFAULT;
    struct evkeyvalq q = {0};
    if (query && *query && evhttp_parse_query_str(query, &q) < 0) {
        free(pg);
        sl__reply_error(call, 400, "invalid_request", "query: '%.64s' cannot be parsed", query);
        return;
    }
    const char *limit = query ? evhttp_find_header(&q, "limit") : NULL;
    const char *cursor = query ? evhttp_find_header(&q, "cursor") : NULL;
    char *end = NULL;
    errno = 0;
    long v = limit ? strtol(limit, &end, 10) : PAGE_DEFAULT;
    const char *bad = NULL;
    if (limit && (!*limit || *end || errno || v < 1 || v > PAGE_MAX))
        bad = "limit";
    else if (cursor && strlen(cursor) > NAME_MAX_LEN)
        bad = "cursor";
    char shown[72] = "";
    if (bad) {
        snprintf(shown, sizeof(shown), "%.64s", bad[0] == 'l' ? limit : cursor);
        sl__utf8_scrub(shown);
    } else {
        pg->limit = v;
        if (cursor) snprintf(pg->cursor, sizeof(pg->cursor), "%s", cursor);
    }
    /* The query's strings live in the request, which a reply frees: done with them first. */
    evhttp_clear_headers(&q);
    if (bad) {
        free(pg);
        sl__reply_error(call, 400, "invalid_request",
                        bad[0] == 'l' ? "limit: '%s' is not an integer between 1 and 10000"
                                      : "cursor: '%s...' is longer than an agent name (128)",
                        shown);
        return;
    }
    sl_backend_agents(call->srv->backend, on_agents, pg);
}
