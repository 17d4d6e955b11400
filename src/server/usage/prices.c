/* prices.c - what a model's tokens cost: the configuration's `prices:`, else the built-in
 * list prices (prices.def), else the pool's budget prices. */
#include "usage.h"

#include <fnmatch.h>

static const struct builtin_price {
    const char *pattern;
    sl_price_t price;
} builtin[] = {
#define SL_PRICE(pattern, in, out, cache_read, cache_write) {pattern, {in, out, cache_read, cache_write}},
#include "prices.def"
#undef SL_PRICE
};

sl_price_t sl__usage_price(const sl_server_t *srv, const char *model, const char *pool)
{
    if (model && *model) {
        size_t i;
        json_t *row;
        json_array_foreach(SL_USAGE_PRICES(&srv->config), i, row)
        {
            const char *pattern = json_string_value(json_object_get(row, "pattern"));
            if (!pattern || fnmatch(pattern, model, 0) != 0) continue;
            return (sl_price_t){json_number_value(json_object_get(row, "input")),
                                json_number_value(json_object_get(row, "output")),
                                json_number_value(json_object_get(row, "cache_read")),
                                json_number_value(json_object_get(row, "cache_write"))};
        }
        for (i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
            if (fnmatch(builtin[i].pattern, model, 0) == 0) {
                return builtin[i].price;
            }
    }
    const sl_pool_config_t *pc = pool ? sl_config_pool(&srv->config, pool) : NULL;
    double in = pc ? pc->price_input_per_mtok : 0, out = pc ? pc->price_output_per_mtok : 0;
    return (sl_price_t){in, out, in, in};
}

double sl__usage_cost(const sl_price_t *p, const sl_usage_counts_t *c)
{
    return ((double)c->input_tokens * p->input + (double)c->output_tokens * p->output +
            (double)c->cache_read_tokens * p->cache_read +
            (double)c->cache_write_tokens * p->cache_write) /
           1e6;
}
