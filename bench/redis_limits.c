/* bench/redis_limits.c - one action-limit check per FCALL of limits.lua against seed 001's DistributedRateLimiter, same Redis, same run.
 *
 * Usage: bench_redis_limits PORT [CHECKS] [DEPTH] [ROUNDS]  (a redis-server on 127.0.0.1:PORT;
 * limits.lua is loaded here; bench/redis_limits.sh provides a private server).
 *
 * The seed's limiter (seed 001, DistributedRateLimiter.check_limit) is one pipeline per
 * check: ZREMRANGEBYSCORE key 0 now-window, ZCARD key, ZADD key now now, EXPIRE key
 * window; allowed when the count before was below the limit. Its `self.redis.pipeline()`
 * is redis-py's default, transaction=True, which wraps the four in MULTI ... EXEC.
 * Written here with hiredis, one pipeline per round trip, as redis-py sends it; and the
 * same four without MULTI/EXEC (transaction=False), the cheapest form of the seed's
 * commands. (It adds the hit even when it denies, so a denied agent's window keeps
 * filling: not exact.) The ratio printed for each variant is to the first, the seed as
 * written.
 *
 * Each variant runs CHECKS checks over AGENTS agents (per-agent limit 100 per 60 s, the
 * seed's example): first with every check allowed (CHECKS/AGENTS <= 100), then a hot set
 * of 10 agents where most are denied. One connection: first one check per round trip,
 * then DEPTH (default 16) checks pipelined per round trip, as sluiced's one connection
 * carries the checks of many agents at once (the seed's 4 commands per check, limits.lua's
 * one FCALL). The second figure is the check's own cost more than the network's: one
 * read and one write per check cost this machine's Redis more than either check does.
 * Each figure is the median of ROUNDS (default 5) runs, the variants interleaved; the
 * ratio to the seed is the median of the per-round ratios (the seed ran in the same
 * round, so the machine's drift cancels). Figures per variant: checks/s (wall clock),
 * and Redis CPU per decision two ways: INFO commandstats (usec of the commands
 * themselves) and INFO cpu (used_cpu_user + used_cpu_sys of the whole server, network
 * handling included).
 *
 * Three floors, same arguments as a token_bucket check (its keys, time, mode, levels, limit
 * parameters, units), from a library loaded here: an FCALL that returns at once (the
 * call and its arguments), and one that does only what any check keeping its state in
 * Redis under Redis's clock must: TIME, GET the record, SET it back (KEEPTTL); and that
 * one replying the 4 integers an answer needs at least (allowed, remaining, retry_after,
 * reset_after). No exact check can cost less than the third: it reads and writes its
 * state under one clock and answers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis.h>

#include "bench_clock.h"
#include "limits/limits_json.h"
#include "limits_fcall.h"

static redisContext *conn;

static redisReply *must(redisReply *r, const char *what)
{
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "bench_redis_limits: %s: %s\n", what, r ? r->str : conn->errstr);
        exit(1);
    }
    return r;
}

/* Server CPU seconds (user + sys) so far. */
static double server_cpu_s(void)
{
    redisReply *r = must(redisCommand(conn, "INFO cpu"), "INFO cpu");
    double user = 0, sys = 0;
    const char *u = strstr(r->str, "used_cpu_user:"), *s = strstr(r->str, "used_cpu_sys:");
    if (u) user = strtod(u + 14, NULL);
    if (s) sys = strtod(s + 13, NULL);
    freeReplyObject(r);
    return user + sys;
}

/* Total usec of the commands named in `cmds` (INFO commandstats). */
static double commands_usec(const char *const *cmds)
{
    redisReply *r = must(redisCommand(conn, "INFO commandstats"), "INFO commandstats");
    double usec = 0;
    for (size_t i = 0; cmds[i]; i++) {
        char key[64];
        snprintf(key, sizeof key, "cmdstat_%s:", cmds[i]);
        const char *at = strstr(r->str, key);
        const char *u = at ? strstr(at, "usec=") : NULL;
        if (u) usec += strtod(u + 5, NULL);
    }
    freeReplyObject(r);
    return usec;
}

#define MAX_DEPTH 64


typedef struct variant {
    const char *name;
    const char *const *cmds; /* what commandstats counts for it */
    void (*send)(void *ud, int c, int agent); /* appends check c of a round trip */
    int (*recv)(void *ud, int c);             /* the answer to check c: 1 allowed, 0 denied */
    void *ud;
} variant_t;

/* ---- the seed's pipeline ---- */

/* The seed calls `self.redis.pipeline()`: redis-py's default is transaction=True, so its
 * four commands go inside MULTI ... EXEC (their answers come back in EXEC's array).
 * `ud` non-NULL: the same four without the transaction (pipeline(transaction=False)). */
static void seed_send(void *ud, int c, int agent)
{
    (void)c;
    char key[64];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    snprintf(key, sizeof key, "agent_limits:agent:%d", agent);
    if (!ud) redisAppendCommand(conn, "MULTI");
    redisAppendCommand(conn, "ZREMRANGEBYSCORE %s 0 %.6f", key, now - 60);
    redisAppendCommand(conn, "ZCARD %s", key);
    redisAppendCommand(conn, "ZADD %s %.6f %.6f", key, now, now);
    redisAppendCommand(conn, "EXPIRE %s 60", key);
    if (!ud) redisAppendCommand(conn, "EXEC");
}

static int seed_recv(void *ud, int c)
{
    (void)c;
    long long count = -1;
    int replies = ud ? 4 : 6; /* MULTI's OK, four QUEUED, EXEC's array */
    for (int i = 0; i < replies; i++) {
        redisReply *r = NULL;
        if (redisGetReply(conn, (void **)&r) != REDIS_OK) must(NULL, "seed pipeline");
        must(r, "seed pipeline");
        if (ud && i == 1) count = r->integer;
        if (!ud && i == 5 && r->type == REDIS_REPLY_ARRAY && r->elements == 4)
            count = r->element[1]->integer;
        freeReplyObject(r);
    }
    if (count < 0) must(NULL, "seed pipeline: no ZCARD answer");
    return count < 100;
}

/* ---- limits.lua: one FCALL ---- */

/* Three floors, called with a check's arguments: no limit logic. */
static const char FLOOR_LUA[] =
    "#!lua name=sluice_bench_floor\n"
    "redis.register_function('sluice_floor_empty', function(keys, argv) return 0 end)\n"
    "redis.register_function('sluice_floor_record', function(keys, argv)\n"
    "  local t = redis.call('TIME')\n"
    "  local raw = redis.call('GET', keys[1])\n"
    "  if raw then redis.call('SET', keys[1], raw, 'KEEPTTL')\n"
    "  else redis.call('SET', keys[1], string.rep('r', 96), 'PX', 122000) end\n"
    "  return 0\n"
    "end)\n"
    "local ANSWER = {}\n"
    "redis.register_function('sluice_floor_answer', function(keys, argv)\n"
    "  local t = redis.call('TIME')\n"
    "  local raw = redis.call('GET', keys[1])\n"
    "  if raw then redis.call('SET', keys[1], raw, 'KEEPTTL')\n"
    "  else redis.call('SET', keys[1], string.rep('r', 96), 'PX', 122000) end\n"
    "  ANSWER[1], ANSWER[2], ANSWER[3], ANSWER[4] = 1, 57, 0, 60000000\n"
    "  return ANSWER\n"
    "end)\n";

typedef struct lua_ud {
    sl_limits_t *set;
    const char *limit;
    const char *floor; /* NULL: limits.lua's check; else this floor function instead */
    sl_limit_plan_t plan[MAX_DEPTH]; /* the checks of one round trip */
} lua_ud_t;

static void lua_send(void *ud, int c, int agent)
{
    lua_ud_t *l = ud;
    char name[32];
    snprintf(name, sizeof name, "agent:%d", agent);
    sl_limit_request_t req = {.agent = name, .team = "team", .hits = 1};
    if (sl_limits_plan(l->set, l->limit, &req, SL_LIMIT_PLAN_CHECK, 0, 0, &l->plan[c]) != SL_OK) {
        fprintf(stderr, "bench_redis_limits: %s\n", sl_limits_errmsg(l->set));
        exit(1);
    }
    sl__rcmd_t cmd;
    sl__rlimits_check_cmd(&cmd, &l->plan[c], SL__RLIMITS_CHECK, -1);
    if (l->floor) {
        free(cmd.argv[1]);
        cmd.argv[1] = strdup(l->floor);
        cmd.len[1] = strlen(l->floor);
    }
    redisAppendCommandArgv(conn, cmd.argc, (const char **)cmd.argv, cmd.len);
    sl__rcmd_free(&cmd);
}

static int lua_recv(void *ud, int c)
{
    lua_ud_t *l = ud;
    redisReply *r = NULL;
    if (redisGetReply(conn, (void **)&r) != REDIS_OK) must(NULL, "FCALL");
    must(r, "FCALL");
    sl_limit_result_t res = {.allowed = true};
    if (!l->floor && sl__rlimits_parse_check(r, &l->plan[c], &res, NULL) != SL_OK)
        must(NULL, "limits.lua reply");
    freeReplyObject(r);
    return res.allowed;
}

typedef struct figures {
    double checks_per_s, commands_us, server_us; /* per decision */
    int allowed;
} figures_t;

/* CHECKS checks over `agents`, `depth` of them per round trip (pipelined). */
static figures_t run(const variant_t *v, int checks, int agents, int depth)
{
    freeReplyObject(must(redisCommand(conn, "FLUSHALL"), "FLUSHALL"));
    freeReplyObject(must(redisCommand(conn, "CONFIG RESETSTAT"), "CONFIG RESETSTAT"));
    double cpu0 = server_cpu_s(), t0 = wall_s();
    int allowed = 0;
    for (int i = 0; i < checks; i += depth) {
        int k = checks - i < depth ? checks - i : depth;
        for (int c = 0; c < k; c++) v->send(v->ud, c, (i + c) % agents);
        for (int c = 0; c < k; c++) allowed += v->recv(v->ud, c);
    }
    double wall = wall_s() - t0, cpu = server_cpu_s() - cpu0;
    return (figures_t){checks / wall, commands_usec(v->cmds) / checks, cpu * 1e6 / checks, allowed};
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

#define MAX_ROUNDS 15
#define MAX_VARIANTS 10

/* Every variant `rounds` times, interleaved (round r starts at variant r, so none always
 * runs first); prints per variant the medians, the server-CPU range, and the median of
 * its server CPU over the seed's (variant 0) in the same round. */
static void compare(const variant_t *v, size_t nv, int rounds, int checks, int agents, int depth)
{
    static figures_t f[MAX_VARIANTS][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (size_t j = 0; j < nv; j++) {
            size_t i = (j + (size_t)r) % nv;
            f[i][r] = run(&v[i], checks, agents, depth);
        }
    for (size_t i = 0; i < nv; i++) {
        double cps[MAX_ROUNDS], cmd[MAX_ROUNDS], srv[MAX_ROUNDS], ratio[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            cps[r] = f[i][r].checks_per_s, cmd[r] = f[i][r].commands_us, srv[r] = f[i][r].server_us;
            ratio[r] = f[i][r].server_us / f[0][r].server_us;
        }
        double m = median(srv, rounds); /* sorts srv */
        printf("  %-44s %7.0f checks/s  %5.1f us/decision (commands)  %5.1f us/decision (server CPU, "
               "%.1f-%.1f)  %.2fx seed  %d/%d allowed\n",
               v[i].name, median(cps, rounds), median(cmd, rounds), m, srv[0], srv[rounds - 1],
               median(ratio, rounds), f[i][0].allowed, checks);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_redis_limits PORT [CHECKS] [DEPTH] [ROUNDS]\n");
        return 2;
    }
    int checks = argc > 2 ? atoi(argv[2]) : 20000;
    int depth = argc > 3 ? atoi(argv[3]) : 16;
    int rounds = argc > 4 ? atoi(argv[4]) : 5;
    if (checks < 1 || depth < 1 || depth > MAX_DEPTH || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_redis_limits: CHECKS must be >= 1, DEPTH in 1..%d, ROUNDS in 1..%d\n",
                MAX_DEPTH, MAX_ROUNDS);
        return 2;
    }
    conn = redisConnect("127.0.0.1", atoi(argv[1]));
    if (!conn || conn->err) {
        fprintf(stderr, "bench_redis_limits: cannot connect to 127.0.0.1:%s\n", argv[1]);
        return 1;
    }
    freeReplyObject(must(redisCommand(conn, "FUNCTION LOAD REPLACE %s", sl__redis_limits_lua_source),
                         "FUNCTION LOAD"));
    freeReplyObject(must(redisCommand(conn, "FUNCTION LOAD REPLACE %s", FLOOR_LUA), "FUNCTION LOAD floor"));
    json_error_t jerr;
    json_t *cfg = json_loads(
        "{\"sw\": {\"algorithm\": \"sliding_window\", \"rate\": 100, \"period_s\": 60},"
        " \"gcra\": {\"algorithm\": \"gcra\", \"rate\": 100, \"period_s\": 60},"
        " \"tb\": {\"algorithm\": \"token_bucket\", \"rate\": 100, \"period_s\": 60},"
        " \"fw\": {\"algorithm\": \"fixed_window\", \"rate\": 100, \"period_s\": 60},"
        " \"tree\": {\"algorithm\": \"sliding_window\", \"rate\": 100, \"period_s\": 60,"
        "            \"parents\": [\"tree.team\"]},"
        " \"tree.team\": {\"algorithm\": \"token_bucket\", \"rate\": 100000, \"period_s\": 60,"
        "                 \"per\": \"team\", \"parents\": [\"tree.all\"]},"
        " \"tree.all\": {\"algorithm\": \"fixed_window\", \"rate\": 1000000, \"period_s\": 60,"
        "                \"per\": \"global\"}}",
        0, &jerr);
    sl_limits_t *set = sl_limits_new();
    if (!cfg || !set || sl_limits_add_all_json(set, cfg) != SL_OK) {
        fprintf(stderr, "bench_redis_limits: config: %s\n", set ? sl_limits_errmsg(set) : jerr.text);
        return 1;
    }
    /* EXEC's time includes the four it runs (counted again under their own names) */
    static const char *const SEED_TX_CMDS[] = {"multi", "exec", NULL};
    static const char *const SEED_CMDS[] = {"zremrangebyscore", "zcard", "zadd", "expire", NULL};
    static const char *const FCALL_CMDS[] = {"fcall", NULL};
    static lua_ud_t sw, gcra, tb, fw, tree, empty, record, answer; /* static: plans per round trip */
    lua_ud_t *uds[] = {&sw, &gcra, &tb, &fw, &tree, &empty, &record, &answer};
    const char *limit[] = {"sw", "gcra", "tb", "fw", "tree", "tb", "tb", "tb"};
    const char *floor[] = {NULL, NULL, NULL, NULL, NULL,
                           "sluice_floor_empty", "sluice_floor_record", "sluice_floor_answer"};
    for (size_t i = 0; i < sizeof uds / sizeof uds[0]; i++)
        uds[i]->set = set, uds[i]->limit = limit[i], uds[i]->floor = floor[i];
    variant_t v[] = {
        {"seed 001 DistributedRateLimiter (MULTI/EXEC)", SEED_TX_CMDS, seed_send, seed_recv, NULL},
        {"seed's 4 commands without MULTI/EXEC", SEED_CMDS, seed_send, seed_recv, (void *)1},
        {"limits.lua sliding_window (exact)", FCALL_CMDS, lua_send, lua_recv, &sw},
        {"limits.lua gcra", FCALL_CMDS, lua_send, lua_recv, &gcra},
        {"limits.lua token_bucket", FCALL_CMDS, lua_send, lua_recv, &tb},
        {"limits.lua fixed_window", FCALL_CMDS, lua_send, lua_recv, &fw},
        {"limits.lua 3 levels (sliding+token+fixed)", FCALL_CMDS, lua_send, lua_recv, &tree},
        {"floor: FCALL, same arguments, no work", FCALL_CMDS, lua_send, lua_recv, &empty},
        {"floor: FCALL of TIME, GET, SET KEEPTTL", FCALL_CMDS, lua_send, lua_recv, &record},
        {"floor: the same, replying 4 integers", FCALL_CMDS, lua_send, lua_recv, &answer},
    };
    size_t nv = sizeof v / sizeof v[0];
    int depths[] = {1, depth};
    for (int k = 0; k < (depth > 1 ? 2 : 1); k++) {
        printf("%d checks per variant, one connection, %d check(s) per round trip, 100 per 60 s per "
               "agent\n",
               checks, depths[k]);
        printf("1000 agents (every check allowed):\n");
        compare(v, nv, rounds, checks, 1000, depths[k]);
        printf("10 agents (most checks denied):\n");
        compare(v, nv, rounds, checks, 10, depths[k]);
    }
    sl_limits_free(set);
    json_decref(cfg);
    redisFree(conn);
    return 0;
}
