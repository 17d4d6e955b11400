/* bench/redis_queue.c - the Redis CPU one decision of sluice.lua costs as the queue grows.
 *
 * Usage: bench_redis_queue PORT [DEPTH...]  (a redis-server on 127.0.0.1:PORT with the
 * library loaded, as bench/redis.sh provides; depths default to 0 1000 10000).
 * For each depth: a pool whose bucket is spent, DEPTH requests queued by as many agents
 * arriving together (equal finish tags: the synchronised burst), then CALLS more
 * requests (each queued), CALLS polls of queued tickets, CALLS cancels, and one settle
 * reporting a 429 (a margin cut), each timed by Redis itself (INFO commandstats:
 * usec_per_call of FCALL). Then the grant path (a granted request and its settle) without
 * caps and with every cap configured (caps in sluice.lua): 100 agents in 10 teams, each
 * agent under "*"'s caps and its team's (share, rpm, max_concurrent, both budgets).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#include "redis/redis_proto.h"

#define CALLS 300
#define PIPELINE 200

extern const char sl__redis_lua_source[];

static redisContext *conn;

static redisReply *command_argv(sl__rcmd_t *cmd)
{
    redisReply *r = redisCommandArgv(conn, cmd->argc, (const char **)cmd->argv, cmd->len);
    sl__rcmd_free(cmd);
    if (!r) {
        fprintf(stderr, "bench_redis_queue: %s\n", conn->errstr);
        exit(1);
    }
    return r;
}

static void expect_ok(redisReply *r, const char *what)
{
    sl__rreply_t rep;
    if (sl__rreply_parse(r, &rep) != SL_OK) {
        fprintf(stderr, "bench_redis_queue: %s: %s\n", what, rep.msg);
        exit(1);
    }
}

/* Configures `pool` starting full, with the caps and members lists of sluice_configure. */
static void configure_with(const char *pool, const sl_pool_config_t *cfg, int pool_no,
                           const char *caps, const char *members)
{
    sl__rcmd_t cmd;
    sl__rcmd_configure(&cmd, pool, cfg, NULL, "planner=3,reviewer=2,worker=1",
                       "high=4,normal=1,low=0.25", pool_no, NAN, "");
    sl__rcmd_str(&cmd, "cold_start", "full");
    sl__rcmd_str(&cmd, "caps", caps);
    sl__rcmd_str(&cmd, "members", members);
    redisReply *r = command_argv(&cmd);
    expect_ok(r, "configure");
    freeReplyObject(r);
}

static void configure(const char *pool)
{
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = 60000; /* capacity 51,000 */
    cfg.output_tpm = 0;
    cfg.max_queue_wait_s = 1e8;
    cfg.ticket_idle_s = 1e8;
    configure_with(pool, &cfg, 1, "", "");
}

static void request_cmd(sl__rcmd_t *cmd, const char *pool, const char *agent, int64_t tokens)
{
    sl_request_t req = {.agent = agent, .pool = pool, .input_tokens = tokens};
    sl__rcmd_request(cmd, &req, false, SL__RGRAPH_NONE, NAN, "");
}

/* Queues n requests of distinct agents, pipelined; returns nothing, exits on error. */
static void fill(const char *pool, const char *prefix, int n, uint64_t *tickets)
{
    for (int done = 0; done < n;) {
        int batch = n - done < PIPELINE ? n - done : PIPELINE;
        for (int i = 0; i < batch; i++) {
            char agent[64];
            snprintf(agent, sizeof agent, "%s%d", prefix, done + i);
            sl__rcmd_t cmd;
            request_cmd(&cmd, pool, agent, 1000);
            redisAppendCommandArgv(conn, cmd.argc, (const char **)cmd.argv, cmd.len);
            sl__rcmd_free(&cmd);
        }
        for (int i = 0; i < batch; i++) {
            redisReply *r;
            if (redisGetReply(conn, (void **)&r) != REDIS_OK) exit(1);
            sl__rreply_t rep;
            expect_ok(r, "request");
            sl__rreply_parse(r, &rep);
            if (tickets) {
                sl_decision_t d;
                sl__rreply_decision(&rep, &d);
                tickets[done + i] = d.ticket;
            }
            freeReplyObject(r);
        }
        done += batch;
    }
}

static void reset_stats(void)
{
    freeReplyObject(redisCommand(conn, "CONFIG RESETSTAT"));
}

static double usec_per_fcall(void)
{
    redisReply *r = redisCommand(conn, "INFO commandstats");
    double us = -1;
    const char *p = r && r->str ? strstr(r->str, "cmdstat_fcall:") : NULL;
    if (p && (p = strstr(p, "usec_per_call="))) us = atof(p + 14);
    freeReplyObject(r);
    return us;
}

/* CALLS granted requests and their settles in a fresh pool; `caps` "" for none. Sets
 * the Redis CPU per request and per settle. */
static void grant_path(const char *pool, const char *caps, const char *members, double *req_us,
                       double *settle_us)
{
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = 100000000;
    cfg.output_tpm = 10000000;
    cfg.rpm = 1000000;
    cfg.price_input_per_mtok = 3;
    cfg.price_output_per_mtok = 15;
    configure_with(pool, &cfg, 2, caps, members);
    sl__rcmd_t cmd;
    redisReply *r;
    uint64_t leases[CALLS];
    reset_stats();
    for (int i = 0; i < CALLS; i++) {
        char agent[32];
        snprintf(agent, sizeof agent, "g%d", i % 100);
        sl_request_t req = {.agent = agent, .pool = pool, .input_tokens = 1000,
                            .output_tokens = 100};
        sl__rcmd_request(&cmd, &req, false, SL__RGRAPH_NONE, NAN, "");
        r = command_argv(&cmd);
        expect_ok(r, "request");
        sl__rreply_t rep;
        sl_decision_t d;
        sl__rreply_parse(r, &rep);
        sl__rreply_decision(&rep, &d);
        if (d.status != SL_GRANTED) {
            fprintf(stderr, "bench_redis_queue: %s: request %d not granted\n", pool, i);
            exit(1);
        }
        leases[i] = d.lease;
        freeReplyObject(r);
    }
    *req_us = usec_per_fcall();
    reset_stats();
    for (int i = 0; i < CALLS; i++) {
        sl_settle_t st = {.input_tokens = 900, .output_tokens = 50, .retry_after_s = -1};
        char err[256];
        if (sl__rcmd_settle(&cmd, pool, leases[i], &st, NAN, "", err, sizeof err) != SL_OK) {
            fprintf(stderr, "bench_redis_queue: %s\n", err);
            exit(1);
        }
        r = command_argv(&cmd);
        expect_ok(r, "settle");
        freeReplyObject(r);
    }
    *settle_us = usec_per_fcall();
}

#define GRANT_RUNS 5 /* the machine is shared: the fastest of 5 fresh pools is kept */

static void grant_row(int row, const char *label, const char *caps, const char *members)
{
    double req_min = INFINITY, settle_min = INFINITY;
    for (int k = 0; k < GRANT_RUNS; k++) {
        char pool[32];
        double req_us, settle_us;
        snprintf(pool, sizeof pool, "gbench%d-%d", row, k);
        grant_path(pool, caps, members, &req_us, &settle_us);
        if (req_us < req_min) req_min = req_us;
        if (settle_us < settle_min) settle_min = settle_us;
    }
    printf("%-28s %16.2f %16.2f\n", label, req_min, settle_min);
}

static void grant_paths(void)
{
    static char caps[4096], members[4096];
    static const char every_cap[] = "0.5/1000000/1000/1000000/1000000";
    size_t n = (size_t)snprintf(caps, sizeof caps, "a:*=%s", every_cap);
    for (int t = 0; t < 10; t++)
        n += (size_t)snprintf(caps + n, sizeof caps - n, ",t:t%d=%s", t, every_cap);
    n = 0;
    for (int a = 0; a < 100; a++)
        n += (size_t)snprintf(members + n, sizeof members - n, "%sg%d=t%d", a ? "," : "", a,
                              a % 10);
    printf("\nRedis CPU per call of the grant path (request granted, then settled), %d calls each, "
           "fastest of %d pools:\n",
           CALLS, GRANT_RUNS);
    printf("%-28s %16s %16s\n", "caps", "request (us)", "settle (us)");
    grant_row(0, "none", "", members);
    grant_row(1, "agent (*): max_rpm", "a:*=0/1000000/0/0/0", members);
    grant_row(2, "agent (*) and team, all", caps, members);
}

static double time_calls(const char *pool, const char *fn, const uint64_t *ids)
{
    reset_stats();
    for (int i = 0; i < CALLS; i++) {
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, fn, pool, NAN, "");
        sl__rcmd_u64(&cmd, "ticket", ids[i]);
        redisReply *r = command_argv(&cmd);
        expect_ok(r, fn);
        freeReplyObject(r);
    }
    return usec_per_fcall();
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_redis_queue PORT [DEPTH...]\n");
        return 2;
    }
    conn = redisConnect("127.0.0.1", atoi(argv[1]));
    if (!conn || conn->err) {
        fprintf(stderr, "bench_redis_queue: cannot connect\n");
        return 1;
    }
    redisReply *v = redisCommand(conn, "FCALL sluice_version 0");
    if (!v || v->type != REDIS_REPLY_STRING || strcmp(v->str, SL__REDIS_LIB_VERSION) != 0)
        freeReplyObject(redisCommand(conn, "FUNCTION LOAD REPLACE %s", sl__redis_lua_source));
    if (v) freeReplyObject(v);
    static const int defaults[] = {0, 1000, 10000};
    int n = argc > 2 ? argc - 2 : 3;
    printf("Redis CPU per call of sluice.lua with DEPTH requests queued (synchronised: equal finish tags), %d calls each:\n",
           CALLS);
    printf("%8s %16s %16s %16s %16s\n", "depth", "request (us)", "ticket poll (us)", "cancel (us)",
           "429 settle (us)");
    uint64_t *tickets = malloc(sizeof(uint64_t) * CALLS);
    for (int k = 0; k < n; k++) {
        int depth = argc > 2 ? atoi(argv[k + 2]) : defaults[k];
        char pool[32];
        snprintf(pool, sizeof pool, "qbench%d", k);
        configure(pool);
        /* spend the bucket: everything after this waits */
        sl__rcmd_t cmd;
        request_cmd(&cmd, pool, "hog", 51000);
        redisReply *r = command_argv(&cmd);
        expect_ok(r, "hog");
        sl__rreply_t rep;
        sl_decision_t hog;
        sl__rreply_parse(r, &rep);
        sl__rreply_decision(&rep, &hog);
        freeReplyObject(r);
        fill(pool, "q", depth, NULL);
        reset_stats();
        char prefix[32];
        snprintf(prefix, sizeof prefix, "m%d-", k);
        fill(pool, prefix, CALLS, tickets);
        double req_us = usec_per_fcall();
        double poll_us = time_calls(pool, "sluice_ticket", tickets);
        double cancel_us = time_calls(pool, "sluice_ticket_cancel", tickets);
        /* a settle reporting a 429: the margin is cut, and the queue checked for what
         * no longer fits */
        reset_stats();
        sl_settle_t s429 = {.input_tokens = 51000, .got_429 = true, .retry_after_s = -1};
        char err[256];
        if (sl__rcmd_settle(&cmd, pool, hog.lease, &s429, NAN, "", err, sizeof err) != SL_OK) {
            fprintf(stderr, "bench_redis_queue: %s\n", err);
            return 1;
        }
        r = command_argv(&cmd);
        expect_ok(r, "settle");
        freeReplyObject(r);
        double cut_us = usec_per_fcall();
        printf("%8d %16.2f %16.2f %16.2f %16.2f\n", depth, req_us, poll_us, cancel_us, cut_us);
    }
    free(tickets);
    grant_paths();
    redisFree(conn);
    return 0;
}
