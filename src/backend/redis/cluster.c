/* cluster.c - Redis Cluster mode: the slot map, one connection per master, routing by slot, MOVED/ASK.
 *
 * hiredis 0.14 (Debian 12) has no Cluster client, so this is the part of one the backend
 * needs. The seed (the URL's host:port, rb->ac) answers INFO and CLUSTER SLOTS only; every
 * other command goes to the master serving the slot of its first key (the library's keys
 * carry one hash tag per call: `{pool}`, `{registry}`, `{graph}`, `{agents}`,
 * `{L<tree>}`, so a call never spans slots). A command of no key - the version checks
 * and FUNCTION LOAD - runs on every master, since each holds its own Functions. Replies
 * of different masters come back out of order, so a timeout starts with the answer
 * before it on the same master (conn.c asks sl__rcl_next_on_node), and the pending call
 * due first is looked up by walking the pending list (a backlog of thousands costs
 * microseconds per answer; the single-node path keeps its O(1) head).
 *
 * MOVED: the slot's new master is used at once, the map is read again, the command
 * resent. ASK: ASKING then the command on the node named, the map unchanged. At most 5
 * redirects per command, after which the error is the answer. A master that closes or
 * misses a deadline takes the backend down exactly as the single node does: every
 * connection is dropped and the next tick starts over from the seed (docs/redis.md).
 * Replicas of the masters are never read from; Sentinel is not spoken.
 */
#include "redis_internal.h"

#include <strings.h>

#define SLOTS 16384
#define MAX_NODES 64
#define MAX_REDIRECTS 5

typedef struct rnode {
    char host[256];
    int port;
    redisAsyncContext *ac;
} rnode_t;

struct sl__rcluster {
    rnode_t nodes[MAX_NODES];
    int n_nodes;
    int16_t slot_node[SLOTS]; /* index in nodes; -1 unknown */
    bool ready;               /* the map was read since connecting */
    bool refreshing;          /* a CLUSTER SLOTS is in flight */
    int force_node;           /* >= 0: the next submit goes there (broadcast members) */
};

/* ---- slots ---- */

static uint16_t crc16_xmodem(const unsigned char *p, size_t n)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++) crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned sl__rcl_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        if (close && close > key + from) {
            key += from;
            len = (size_t)(close - key);
        }
    }
    return crc16_xmodem((const unsigned char *)key, len) % SLOTS;
}

/* ---- nodes ---- */

static void on_node_connect(const redisAsyncContext *ac, int status)
{
    rb_t *rb = ac->data;
    if (!rb || !rb->cl || status == REDIS_OK) return;
    /* hiredis frees a context that failed to connect: forget it, the backend goes down. */
    for (int i = 0; i < rb->cl->n_nodes; i++)
        if (rb->cl->nodes[i].ac == ac) rb->cl->nodes[i].ac = NULL;
    if (!rb->freeing) sl__rb_connect_failed(rb, "connecting to a master", "refused");
}

/* The connection to node i, opened (with AUTH) when there is none. NULL when it cannot be. */
static redisAsyncContext *node_ac(rb_t *rb, int i)
{
    rnode_t *n = &rb->cl->nodes[i];
    if (n->ac) return n->ac;
    redisAsyncContext *ac = redisAsyncConnect(n->host, n->port);
    if (!ac || ac->err) {
        if (ac) redisAsyncFree(ac);
        return NULL;
    }
    ac->data = rb;
    redisLibeventAttach(ac, rb->evbase);
    redisAsyncSetConnectCallback(ac, on_node_connect);
    redisAsyncSetDisconnectCallback(ac, sl__rb_on_disconnect);
    if (rb->opt.password[0]) {
        const char *argv[] = {"AUTH", rb->opt.password};
        redisAsyncCommandArgv(ac, NULL, NULL, 2, argv, NULL);
    }
    n->ac = ac;
    return ac;
}

static int node_index(rb_t *rb, const char *host, int port)
{
    sl__rcluster_t *cl = rb->cl;
    if (!host[0]) host = rb->opt.host; /* a node that does not know its own address */
    for (int i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i].port == port && strcmp(cl->nodes[i].host, host) == 0) return i;
    if (cl->n_nodes == MAX_NODES) return -1;
    rnode_t *n = &cl->nodes[cl->n_nodes];
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    n->ac = NULL;
    return cl->n_nodes++;
}

/* ---- the slot map ---- */

/* "CLUSTER SLOTS": [[from, to, [host, port, id], replicas...], ...]; masters only. */
static bool read_slots(rb_t *rb, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0) return false;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            return false;
        long long from = e->element[0]->integer, to = e->element[1]->integer;
        int node = node_index(rb, e->element[2]->element[0]->str, (int)e->element[2]->element[1]->integer);
        if (from < 0 || to >= SLOTS || from > to || node < 0) return false;
        for (long long s = from; s <= to; s++) rb->cl->slot_node[s] = (int16_t)node;
    }
    return true;
}

static void on_refreshed(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    if (!rb->cl) return;
    rb->cl->refreshing = false;
    if (r && !read_slots(rb, r)) sl__backend_log(SL_BACKEND_LOG_WARN, "redis cluster: CLUSTER SLOTS unreadable");
}

static void refresh_map(rb_t *rb)
{
    if (rb->cl->refreshing) return;
    rb->cl->refreshing = true;
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "CLUSTER");
    sl__rcmd_raw(&cmd, "SLOTS");
    sl__rb_send_cmd(rb, &cmd, on_refreshed, NULL, 0, true);
}

static void on_first_map(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    if (!r || !rb->cl) return;
    if (!read_slots(rb, r)) {
        sl__rb_connect_failed(rb, "CLUSTER SLOTS", r->type == REDIS_REPLY_ERROR ? r->str : "no slots served");
        return;
    }
    for (int i = 0; i < rb->cl->n_nodes; i++) {
        if (!node_ac(rb, i)) {
            sl__rb_connect_failed(rb, "connecting to a master", rb->cl->nodes[i].host);
            return;
        }
    }
    rb->cl->ready = true;
    sl__rb_connect_steps(rb);
}

void sl__rcl_start(rb_t *rb)
{
    if (rb->opt.db != 0) {
        char why[160];
        snprintf(why, sizeof why, "db %d in the URL: a Redis Cluster has only db 0 (SELECT is refused)",
                 rb->opt.db);
        sl__rb_connect_failed(rb, "backend", why);
        return;
    }
    if (!rb->cl) {
        rb->cl = calloc(1, sizeof *rb->cl);
        if (!rb->cl) return;
        sl__backend_log(SL_BACKEND_LOG_INFO, "redis %s:%d is a Cluster: routing by slot", rb->opt.host, rb->opt.port);
    }
    memset(rb->cl->slot_node, 0xff, sizeof rb->cl->slot_node);
    rb->cl->ready = false;
    rb->cl->refreshing = false;
    rb->cl->force_node = -1;
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "CLUSTER");
    sl__rcmd_raw(&cmd, "SLOTS");
    sl__rb_send_cmd(rb, &cmd, on_first_map, NULL, 0, true);
}

void sl__rcl_free(rb_t *rb)
{
    if (!rb->cl) return;
    sl__rcl_drop(rb);
    free(rb->cl);
    rb->cl = NULL;
}

/* ---- routing ---- */

enum { TO_SEED = -1, TO_ALL = -2, TO_NONE = -3 };

static bool is(const sl__rcmd_t *cmd, int i, const char *word)
{
    return cmd->argc > i && strcasecmp(cmd->argv[i], word) == 0;
}

/* Where cmd goes: a master's index, TO_SEED, TO_ALL, or TO_NONE (slot not served). */
static int route(rb_t *rb, const sl__rcmd_t *cmd)
{
    if (cmd->argc < 1 || is(cmd, 0, "CLUSTER") || is(cmd, 0, "INFO") || is(cmd, 0, "AUTH") ||
        is(cmd, 0, "SELECT"))
        return TO_SEED;
    if (is(cmd, 0, "FUNCTION")) return TO_ALL;
    int key = 1;
    if (is(cmd, 0, "FCALL") || is(cmd, 0, "FCALL_RO")) {
        if (cmd->argc < 3 || atoi(cmd->argv[2]) <= 0) return TO_ALL;
        key = 3;
    }
    if (cmd->argc <= key) return TO_SEED;
    int node = rb->cl->slot_node[sl__rcl_key_slot(cmd->argv[key], cmd->len[key])];
    return node >= 0 ? node : TO_NONE;
}

bool sl__rcl_is_broadcast(rb_t *rb, const sl__rcmd_t *cmd)
{
    return rb->cl && rb->cl->force_node < 0 && route(rb, cmd) == TO_ALL;
}

static sl__rcmd_t *copy_cmd(const sl__rcmd_t *cmd)
{
    sl__rcmd_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    for (int i = 0; i < cmd->argc; i++) {
        c->argv[i] = malloc(cmd->len[i] + 1);
        if (!c->argv[i]) {
            sl__rcmd_free(c);
            free(c);
            return NULL;
        }
        memcpy(c->argv[i], cmd->argv[i], cmd->len[i]);
        c->argv[i][cmd->len[i]] = '\0';
        c->len[i] = cmd->len[i];
        c->argc = i + 1;
    }
    return c;
}

static int send_on(rb_t *rb, rcall_t *c, int node, bool asking)
{
    redisAsyncContext *ac = node == TO_SEED ? rb->ac : node >= 0 ? node_ac(rb, node) : NULL;
    if (!ac) return REDIS_ERR;
    if (asking) {
        const char *argv[] = {"ASKING"};
        redisAsyncCommandArgv(ac, NULL, NULL, 1, argv, NULL);
    }
    c->node = node;
    return redisAsyncCommandArgv(ac, sl__rb_on_call_reply, c, c->cmd->argc,
                                 (const char **)c->cmd->argv, c->cmd->len);
}

int sl__rcl_submit(rb_t *rb, rcall_t *c, sl__rcmd_t *cmd)
{
    int node = rb->cl->force_node >= 0 ? rb->cl->force_node : route(rb, cmd);
    rb->cl->force_node = -1;
    c->cmd = copy_cmd(cmd);
    sl__rcmd_free(cmd);
    if (!c->cmd || node == TO_NONE || node == TO_ALL || (node >= 0 && !rb->cl->ready)) return REDIS_ERR;
    return send_on(rb, c, node, false);
}

void sl__rcl_call_done(rcall_t *c)
{
    if (!c->cmd) return;
    sl__rcmd_free(c->cmd);
    free(c->cmd);
    c->cmd = NULL;
}

/* ---- commands on every master ---- */

typedef struct group {
    rcall_fn fn;
    void *ctx;
    int idx;
    int left;
    bool failed;     /* a master did not answer */
    int type;        /* 0 none yet, else the REDIS_REPLY_* kept */
    char text[512];  /* the error, or the strings seen joined by '/' */
    char first[128]; /* the first string answered */
} group_t;

static void group_finish(rb_t *rb, group_t *g)
{
    rcall_t c = {.rb = rb, .ctx = g->ctx, .idx = g->idx, .node = TO_SEED};
    redisReply r = {.type = g->type, .str = g->text, .len = strlen(g->text)};
    g->fn(rb, &c, g->failed || !g->type ? NULL : &r);
    free(g);
}

static void on_member(rb_t *rb, rcall_t *c, redisReply *r)
{
    group_t *g = c->ctx;
    if (!r) g->failed = true;
    else if (r->type == REDIS_REPLY_ERROR && g->type != REDIS_REPLY_ERROR) {
        g->type = REDIS_REPLY_ERROR;
        snprintf(g->text, sizeof g->text, "%s", r->str);
    } else if (r->type != REDIS_REPLY_ERROR && g->type != REDIS_REPLY_ERROR) {
        const char *s = r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ? r->str : "?";
        if (!g->type) {
            g->type = REDIS_REPLY_STRING;
            snprintf(g->first, sizeof g->first, "%s", s);
            snprintf(g->text, sizeof g->text, "%s", s);
        } else if (strcmp(s, g->first) != 0 && strlen(g->text) + strlen(s) + 2 < sizeof g->text) {
            strcat(g->text, "/");
            strcat(g->text, s);
        }
    }
    if (--g->left == 0) group_finish(rb, g);
}

void sl__rcl_broadcast(rb_t *rb, sl__rcmd_t *cmd, rcall_fn fn, void *ctx, int idx, bool internal)
{
    group_t *g = calloc(1, sizeof *g);
    sl__rcluster_t *cl = rb->cl;
    int n = cl->ready ? cl->n_nodes : 0;
    if (!g) {
        sl__rcmd_free(cmd);
        rcall_t c = {.rb = rb, .ctx = ctx, .idx = idx, .node = TO_SEED};
        fn(rb, &c, NULL);
        return;
    }
    *g = (group_t){.fn = fn, .ctx = ctx, .idx = idx, .left = n + 1, .failed = n == 0};
    for (int i = 0; i < n; i++) {
        sl__rcmd_t *member = copy_cmd(cmd);
        if (!member) {
            g->failed = true;
            g->left--;
            continue;
        }
        cl->force_node = i;
        sl__rb_send_cmd(rb, member, on_member, g, idx, internal);
        free(member);
        cl->force_node = -1;
    }
    sl__rcmd_free(cmd);
    if (--g->left == 0) group_finish(rb, g);
}

/* ---- redirects ---- */

bool sl__rcl_redirect(rb_t *rb, rcall_t *c, const redisReply *r)
{
    bool moved = strncmp(r->str, "MOVED ", 6) == 0, ask = strncmp(r->str, "ASK ", 4) == 0;
    if ((!moved && !ask) || !c->cmd || c->redirects >= MAX_REDIRECTS) return false;
    unsigned slot;
    char host[256];
    int port;
    const char *at = r->str + (moved ? 6 : 4);
    const char *colon = strrchr(at, ':');
    if (sscanf(at, "%u", &slot) != 1 || slot >= SLOTS || !colon) return false;
    const char *sp = strchr(at, ' ');
    if (!sp || sp > colon || (size_t)(colon - sp - 1) >= sizeof host) return false;
    memcpy(host, sp + 1, (size_t)(colon - sp - 1));
    host[colon - sp - 1] = '\0';
    port = atoi(colon + 1);
    int node = node_index(rb, host, port);
    if (node < 0) return false;
    if (moved) {
        rb->cl->slot_node[slot] = (int16_t)node;
        refresh_map(rb);
    }
    c->redirects++;
    c->deadline = sl__rb_now(&rb->base) + rb->opt.timeout_s;
    return send_on(rb, c, node, ask) == REDIS_OK;
}

/* ---- deadlines and connections ---- */

rcall_t *sl__rcl_first_due(rb_t *rb)
{
    rcall_t *first = rb->head;
    for (rcall_t *c = rb->head; c; c = c->next)
        if (c->deadline < first->deadline) first = c;
    return first;
}

rcall_t *sl__rcl_next_on_node(rb_t *rb, int node)
{
    for (rcall_t *c = rb->head; c; c = c->next)
        if (c->node == node) return c;
    return NULL;
}

void sl__rcl_read_all(rb_t *rb)
{
    for (int i = 0; rb->cl && i < rb->cl->n_nodes; i++)
        if (rb->cl->nodes[i].ac) redisAsyncHandleRead(rb->cl->nodes[i].ac);
}

bool sl__rcl_lost(rb_t *rb, const redisAsyncContext *ac)
{
    for (int i = 0; rb->cl && i < rb->cl->n_nodes; i++) {
        if (rb->cl->nodes[i].ac == ac) {
            rb->cl->nodes[i].ac = NULL;
            return true;
        }
    }
    return false;
}

void sl__rcl_drop(rb_t *rb)
{
    if (!rb->cl) return;
    rb->cl->ready = false;
    rb->cl->refreshing = false;
    for (int i = 0; i < rb->cl->n_nodes; i++) {
        redisAsyncContext *ac = rb->cl->nodes[i].ac;
        rb->cl->nodes[i].ac = NULL;
        if (ac) redisAsyncFree(ac);
    }
}
