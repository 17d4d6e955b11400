/* weight.c - role and priority classes, and a request's dominant-share cost.
 *
 * w = role_base x (1 + 0.5 x unblocks) x 0.5^repeats x priority x bump, floored at
 * 0.1 (lease.c puts it together). The cost a request adds to its agent's finish tag
 * is its dominant share of the pool: the largest fraction of any limited bucket's
 * per-minute limit it needs. Unlimited buckets do not count. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const sl__class_t *class_find(const sl__class_t *c, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(c[i].name, name) == 0) return &c[i];
    return NULL;
}

const sl__class_t *sl__role_find(const sl_engine_t *e, const char *name)
{
    return class_find(e->roles, e->n_roles, name);
}

const sl__class_t *sl__prio_find(const sl_engine_t *e, const char *name)
{
    return class_find(e->prios, e->n_prios, name);
}

static int class_set(sl_engine_t *e, sl__class_t *c, size_t *n, const char *what, const char *name,
                     double value)
{
    if (!name || !name[0] || strlen(name) >= SL__CLASS_MAX)
        return sl__fail(e, SL_EINVAL, "%s name must be 1-%d bytes", what, SL__CLASS_MAX - 1);
    if (!isfinite(value) || value <= 0)
        return sl__fail(e, SL_EINVAL, "%s \"%s\": weight %g must be a finite number > 0", what,
                        name, value);
    for (size_t i = 0; i < *n; i++) {
        if (strcmp(c[i].name, name) == 0) {
            c[i].value = value;
            return SL_OK;
        }
    }
    if (*n == SL__MAX_CLASSES)
        return sl__fail(e, SL_EINVAL, "%s \"%s\": at most %d classes", what, name, SL__MAX_CLASSES);
    snprintf(c[*n].name, sizeof c[*n].name, "%s", name);
    c[*n].value = value;
    (*n)++;
    return SL_OK;
}

int sl_engine_set_role(sl_engine_t *e, const char *role, double base_weight)
{
    return class_set(e, e->roles, &e->n_roles, "role", role, base_weight);
}

int sl_engine_set_priority(sl_engine_t *e, const char *priority, double factor)
{
    return class_set(e, e->prios, &e->n_prios, "priority", priority, factor);
}

double sl__cost(const sl__pool_t *p, const sl__need_t *need)
{
    double cost = 0;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(p, (sl_bucket_t)b)) continue;
        double share = (double)need->n[b] / (double)p->limit[b];
        if (share > cost) cost = share;
    }
    return cost;
}
