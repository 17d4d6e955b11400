/* bench/redis_queue.c - the Redis CPU one decision of sluice.lua costs as the queue grows.
 *
 * Usage: bench_redis_queue PORT [DEPTH...]  (a redis-server on 127.0.0.1:PORT with the
 * library loaded, as bench/redis.sh provides; depths default to 0 1000 10000).
 * For each depth: a pool whose bucket is spent, DEPTH requests queued by as many agents
 * arriving together (equal finish tags: the synchronised burst), then CALLS more
 * requests (each queued), CALLS polls of queued tickets, CALLS cancels, and one settle
 * reporting a 429 (a margin cut), each timed by Redis itself (INFO commandstats:
 * usec_per_call of FCALL).
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

static void configure(const char *pool)
{
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = 60000; /* capacity 51,000 */
    cfg.output_tpm = 0;
    cfg.max_queue_wait_s = 1e8;
    cfg.ticket_idle_s = 1e8;
    sl__rcmd_t cmd;
    sl__rcmd_configure(&cmd, pool, &cfg, NULL, "planner=3,reviewer=2,worker=1",
                       "high=4,normal=1,low=0.25", 1, NAN, "");
    sl__rcmd_str(&cmd, "cold_start", "full");
    redisReply *r = command_argv(&cmd);
    expect_ok(r, "configure");
    freeReplyObject(r);
}

static void request_cmd(sl__rcmd_t *cmd, const char *pool, const char *agent, int64_t tokens)
{
    sl_request_t req = {.agent = agent, .pool = pool, .input_tokens = tokens};
    sl__rcmd_request(cmd, &req, -1, NAN, "");
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
    redisFree(conn);
    return 0;
}
