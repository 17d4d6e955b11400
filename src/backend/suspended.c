/* suspended.c - a set of suspension records with owned strings (suspended.h). */
#include "suspended.h"
#include "../common/grow.h"

#include <stdlib.h>
#include <string.h>

static long find(const sl_suspended_set_t *set, const char *agent)
{
    for (size_t i = 0; i < set->n; i++)
        if (!strcmp(set->items[i].agent, agent)) return (long)i;
    return -1;
}

static void record_free(sl_suspension_t *s)
{
    free((char *)s->agent);
    free((char *)s->role);
    free((char *)s->reason);
    free((char *)s->metric);
}

static char *dup_str(const char *s)
{
    return strdup(s ? s : "");
}

int sl__suspended_put(sl_suspended_set_t *set, const sl_suspension_t *s)
{
    if (!s->agent || find(set, s->agent) >= 0) return 0;
    sl_suspension_t *v = sl_grow(set->items, set->n, &set->cap, sizeof *v, 8);
    if (!v) return -1;
    set->items = v;
    sl_suspension_t c = *s;
    c.agent = dup_str(s->agent);
    c.role = dup_str(s->role);
    c.reason = dup_str(s->reason);
    c.metric = dup_str(s->metric);
    if (!c.agent || !c.role || !c.reason || !c.metric) {
        record_free(&c);
        return -1;
    }
    set->items[set->n++] = c;
    return 1;
}

bool sl__suspended_del(sl_suspended_set_t *set, const char *agent)
{
    long i = find(set, agent);
    if (i < 0) return false;
    record_free(&set->items[i]);
    set->items[i] = set->items[--set->n];
    return true;
}

void sl__suspended_clear(sl_suspended_set_t *set)
{
    for (size_t i = 0; i < set->n; i++)
        record_free(&set->items[i]);
    free(set->items);
    set->items = NULL;
    set->n = set->cap = 0;
}
