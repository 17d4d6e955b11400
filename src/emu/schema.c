/* schema.c - a JSON value that satisfies a JSON Schema: tool inputs and structured outputs.
 *
 * The emulated model answers a forced tool call, a json_schema response format or an
 * Anthropic output format with a value generated from the schema, so a client that
 * validates (zod, pydantic, the SDKs' parse helpers) accepts it. The value is the
 * smallest plausible one: objects get their required properties (every property
 * when `required` is absent but `additionalProperties` is false, as strict mode
 * asks), arrays max(minItems, 1) items (none when maxItems is 0), strings "filler"
 * stretched or cut to minLength / maxLength (a date, date-time, email, uri or uuid
 * for those formats), integers the lowest allowed value at or above 1 (numbers 1.5)
 * (within maximum; a multipleOf respected), the first of an enum, const as given,
 * the first branch of anyOf / oneOf, allOf merged, local $ref (#/$defs/..,
 * #/definitions/..) followed. Unknown keywords are ignored; nesting deeper than
 * MAX_DEPTH gives null. */
#include "emu.h"

#include <math.h>
#include <string.h>

#define MAX_DEPTH 16

static json_t *value_for(json_t *schema, json_t *root, int depth);

/* Follows a local reference "#/a/b" inside root; NULL when it does not resolve. */
static json_t *resolve_ref(json_t *root, const char *ref)
{
    if (strncmp(ref, "#", 1) != 0) return NULL;
    json_t *at = root;
    const char *p = ref + 1;
    while (*p == '/' && at) {
        p++;
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char key[256];
        if (n >= sizeof key) return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        at = json_object_get(at, key);
        p += n;
    }
    return at;
}

static json_t *string_for(json_t *schema)
{
    const char *format = json_string_value(json_object_get(schema, "format"));
    if (format) {
        static const struct {
            const char *format, *value;
        } examples[] = {
            {"date-time", "2026-01-01T00:00:00Z"},
            {"date", "2026-01-01"},
            {"time", "00:00:00Z"},
            {"email", "filler@example.com"},
            {"uri", "https://example.com/filler"},
            {"url", "https://example.com/filler"},
            {"uuid", "00000000-0000-4000-8000-000000000000"},
            {"hostname", "example.com"},
            {"ipv4", "192.0.2.1"},
            {"ipv6", "2001:db8::1"},
        };
        for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++)
            if (!strcmp(format, examples[i].format)) return json_string(examples[i].value);
    }
    json_t *minl = json_object_get(schema, "minLength"),
           *maxl = json_object_get(schema, "maxLength");
    size_t len = 6;
    if (json_is_integer(minl) && json_integer_value(minl) > (json_int_t)len)
        len = (size_t)json_integer_value(minl);
    if (json_is_integer(maxl) && json_integer_value(maxl) >= 0 &&
        json_integer_value(maxl) < (json_int_t)len)
        len = (size_t)json_integer_value(maxl);
    if (len > 4096) len = 4096;
    char buf[4097];
    for (size_t i = 0; i < len; i++)
        buf[i] = "filler"[i % 6];
    return json_stringn(buf, len);
}

/* The lowest number at or above 1 (or `minimum`) the schema allows. */
static double number_for(json_t *schema, bool integer)
{
    double x = integer ? 1 : 1.5;
    json_t *min = json_object_get(schema, "minimum"),
           *xmin = json_object_get(schema, "exclusiveMinimum");
    json_t *max = json_object_get(schema, "maximum"),
           *xmax = json_object_get(schema, "exclusiveMaximum");
    json_t *mult = json_object_get(schema, "multipleOf");
    if (json_is_number(min)) x = json_number_value(min);
    if (json_is_number(xmin)) x = json_number_value(xmin) + (integer ? 1 : 0.5);
    if (json_is_number(max) && x > json_number_value(max)) x = json_number_value(max);
    if (json_is_number(xmax) && x >= json_number_value(xmax))
        x = json_number_value(xmax) - (integer ? 1 : 0.5);
    if (json_is_number(mult) && json_number_value(mult) > 0) {
        double m = json_number_value(mult);
        x = ceil(x / m) * m;
    }
    return integer ? ceil(x) : x;
}

static json_t *object_for(json_t *schema, json_t *root, int depth)
{
    json_t *obj = json_object();
    json_t *props = json_object_get(schema, "properties");
    json_t *req = json_object_get(schema, "required");
    if (!obj) return NULL;
    if (json_is_array(req)) {
        size_t i;
        json_t *name;
        json_array_foreach(req, i, name)
        {
            const char *k = json_string_value(name);
            if (k)
                json_object_set_new(obj, k, value_for(json_object_get(props, k), root, depth + 1));
        }
    } else if (json_is_false(json_object_get(schema, "additionalProperties"))) {
        const char *k;
        json_t *sub;
        json_object_foreach(props, k, sub)
            json_object_set_new(obj, k, value_for(sub, root, depth + 1));
    }
    return obj;
}

static json_t *array_for(json_t *schema, json_t *root, int depth)
{
    json_t *arr = json_array();
    json_t *minn = json_object_get(schema, "minItems"), *maxn = json_object_get(schema, "maxItems");
    json_int_t n = 1;
    if (json_is_integer(minn) && json_integer_value(minn) > n) n = json_integer_value(minn);
    if (json_is_integer(maxn) && json_integer_value(maxn) < n) n = json_integer_value(maxn);
    if (n > 64) n = 64;
    json_t *items = json_object_get(schema, "items");
    json_t *prefix = json_object_get(schema, "prefixItems");
    for (json_int_t i = 0; arr && i < n; i++) {
        json_t *s = json_is_array(prefix) && (size_t)i < json_array_size(prefix)
                        ? json_array_get(prefix, (size_t)i)
                        : items;
        json_array_append_new(arr, s ? value_for(s, root, depth + 1) : json_string("filler"));
    }
    return arr;
}

/* allOf: the branches' keywords merged into one schema (later ones win; properties
 * and required lists are united). */
static json_t *merge_all_of(json_t *schema, json_t *all)
{
    json_t *m = json_deep_copy(schema);
    if (!m) return NULL;
    json_object_del(m, "allOf");
    json_t *props = json_object(), *req = json_array();
    json_object_update(props, json_object_get(schema, "properties"));
    json_array_extend(req, json_object_get(schema, "required"));
    size_t i;
    json_t *b;
    json_array_foreach(all, i, b)
    {
        if (!json_is_object(b)) continue;
        json_object_update(m, b);
        json_object_update(props, json_object_get(b, "properties"));
        json_array_extend(req, json_object_get(b, "required"));
    }
    json_object_set_new(m, "properties", props);
    json_object_set_new(m, "required", req);
    return m;
}

static json_t *value_for(json_t *schema, json_t *root, int depth)
{
    if (json_is_true(schema)) return json_string("filler");
    if (!json_is_object(schema) || depth > MAX_DEPTH) return json_null();
    const char *ref = json_string_value(json_object_get(schema, "$ref"));
    if (ref) {
        json_t *target = resolve_ref(root, ref);
        return target ? value_for(target, root, depth + 1) : json_null();
    }
    json_t *c = json_object_get(schema, "const");
    if (c) return json_deep_copy(c);
    json_t *en = json_object_get(schema, "enum");
    if (json_is_array(en) && json_array_size(en) > 0) return json_deep_copy(json_array_get(en, 0));
    const char *alts[] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        json_t *alt = json_object_get(schema, alts[k]);
        if (json_is_array(alt) && json_array_size(alt) > 0) {
            /* A nullable field is anyOf [X, null]: answer X. */
            json_t *pick = json_array_get(alt, 0);
            const char *t0 = json_string_value(json_object_get(pick, "type"));
            if (t0 && !strcmp(t0, "null") && json_array_size(alt) > 1)
                pick = json_array_get(alt, 1);
            return value_for(pick, root, depth + 1);
        }
    }
    json_t *all = json_object_get(schema, "allOf");
    if (json_is_array(all) && json_array_size(all) > 0) {
        json_t *m = merge_all_of(schema, all);
        json_t *v = m ? value_for(m, root, depth + 1) : json_null();
        json_decref(m);
        return v;
    }
    json_t *type = json_object_get(schema, "type");
    if (json_is_array(type)) {
        /* ["string", "null"]: the first type that is not null. */
        size_t i;
        json_t *t, *first = json_array_get(type, 0);
        json_array_foreach(type, i, t)
        {
            if (json_is_string(t) && strcmp(json_string_value(t), "null")) {
                first = t;
                break;
            }
        }
        type = first;
    }
    const char *t = json_string_value(type);
    if (!t)
        t = json_object_get(schema, "properties")
                ? "object"
                : (json_object_get(schema, "items") ? "array" : "string");
    if (!strcmp(t, "object")) return object_for(schema, root, depth);
    if (!strcmp(t, "array")) return array_for(schema, root, depth);
    if (!strcmp(t, "integer")) return json_integer((json_int_t)number_for(schema, true));
    if (!strcmp(t, "number")) return json_real(number_for(schema, false));
    if (!strcmp(t, "boolean")) return json_true();
    if (!strcmp(t, "null")) return json_null();
    return string_for(schema);
}

json_t *sl__schema_value(json_t *schema)
{
    return value_for(schema, schema, 0);
}

json_t *sl__schema_object(json_t *schema)
{
    json_t *v = value_for(schema, schema, 0);
    if (!json_is_object(v)) {
        json_decref(v);
        return json_object();
    }
    return v;
}
