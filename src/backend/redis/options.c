/* options.c - the redis backend's options: defaults and the redis:// URL. */
#include "redis_internal.h"

void sl_redis_options_init(sl_redis_options_t *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->host, sizeof o->host, "127.0.0.1");
    o->port = 6379;
    o->fail = SL_REDIS_FAIL_CLOSED;
    o->timeout_s = 0.5;
    o->tick_s = 1.0;
}

int sl_redis_options_parse_url(sl_redis_options_t *o, const char *url, char *err, size_t errlen)
{
    const char *p;
    if (strncmp(url, "redis://", 8) == 0) {
        p = url + 8;
    } else {
        snprintf(err, errlen, "backend \"%s\": expected redis://[:password@]host[:port][/db]%s",
                 url, strncmp(url, "rediss://", 9) == 0 ? " (TLS needs hiredis >= 1.0)" : "");
        return -1;
    }
    char buf[768];
    snprintf(buf, sizeof buf, "%s", p);
    char *query = strchr(buf, '?');
    if (query) *query++ = '\0';
    char *hostpart = buf;
    char *at = strrchr(buf, '@');
    if (at) {
        *at = '\0';
        char *pw = strchr(buf, ':') ? strchr(buf, ':') + 1 : buf;
        snprintf(o->password, sizeof o->password, "%.255s", pw);
        hostpart = at + 1;
    }
    char *slash = strchr(hostpart, '/');
    if (slash) {
        *slash = '\0';
        char *end;
        long db = strtol(slash + 1, &end, 10);
        if (slash[1] && (*end || db < 0 || db > 15)) {
            snprintf(err, errlen, "backend \"%s\": database \"%s\" must be 0-15", url, slash + 1);
            return -1;
        }
        o->db = (int)db;
    }
    char *colon = strrchr(hostpart, ':');
    if (colon) {
        *colon = '\0';
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port < 1 || port > 65535) {
            snprintf(err, errlen, "backend \"%s\": port \"%s\" must be 1-65535", url, colon + 1);
            return -1;
        }
        o->port = (int)port;
    }
    if (*hostpart) snprintf(o->host, sizeof o->host, "%.255s", hostpart);
    for (char *kv = query ? strtok(query, "&") : NULL; kv; kv = strtok(NULL, "&")) {
        if (strcmp(kv, "fail=open") == 0) o->fail = SL_REDIS_FAIL_OPEN;
        else if (strcmp(kv, "fail=closed") == 0) o->fail = SL_REDIS_FAIL_CLOSED;
        else if (strncmp(kv, "timeout_ms=", 11) == 0 && atof(kv + 11) > 0) o->timeout_s = atof(kv + 11) / 1000;
        else if (strncmp(kv, "tick_ms=", 8) == 0 && atof(kv + 8) > 0) o->tick_s = atof(kv + 8) / 1000;
        else if (strcmp(kv, "replace=1") == 0) o->replace_library = true;
        else if (strcmp(kv, "cold_start=empty") == 0) o->cold_start_full = false;
        else if (strcmp(kv, "cold_start=full") == 0) o->cold_start_full = true;
        else if (strncmp(kv, "replica=", 8) == 0) snprintf(o->replica_id, sizeof o->replica_id, "%s", kv + 8);
        else {
            snprintf(err, errlen, "backend \"%s\": unknown option \"%s\"", url, kv);
            return -1;
        }
    }
    return 0;
}
