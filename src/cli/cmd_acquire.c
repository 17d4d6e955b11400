/* sluice acquire: take a lease for a shell script, waiting while queued or rejected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_cli.h"

static void acquire_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice acquire --agent NAME --input N --output N [options]\n\n"
            "Asks sluiced for a lease and waits while it is queued or rejected (up to\n"
            "--wait seconds). Prints the lease id (or, with --json, sluiced's grant plus\n"
            "request_id) on standard output. Settle it with 'sluice settle'.\n\n"
            "  --agent NAME      the agent (default $SLUICE_AGENT)\n"
            "  --input N         uncached prompt tokens\n"
            "  --cached N        cached prompt prefix (charged when the cache went cold)\n"
            "  --output N        max_tokens of the call\n"
            "  --pool NAME       pool (default \"default\")\n"
            "  --role ROLE       planner, reviewer, worker (default) or a configured role\n"
            "  --task ID         task in the task graph\n"
            "  --unblocks N      tasks waiting on this one\n"
            "  --priority P      high, normal (default) or low\n"
            "  --ttl S           lease lifetime (default: the pool's)\n"
            "  --wait S          longest wait for a grant (default 300; 0: do not wait)\n"
            "  --request-id ID   idempotency key (default: random, or the checkpoint's)\n"
            "  --checkpoint FILE a checkpoint (sluice checkpoint save) to save before\n"
            "                    waiting, and whose request_id resumes a wait; with\n"
            "                    one, sluiced holds the request queued (up to --wait,\n"
            "                    at most 540 s) rather than rejecting it past the\n"
            "                    pool's max_queue_wait_s\n" SL_CLI_CONN_HELP
            "\n" SL_CLI_EXIT_HELP
            "A CLI process holds no local share: when sluiced is unreachable it exits 4.\n");
}

static json_t *lease_json(const sl_lease_t *l)
{
    if (l->status == SL_LEASE_GRANTED)
        return json_pack("{s:s, s:s, s:s, s:f, s:f, s:f, s:{s:I, s:I}, s:b, s:f}", "status",
                         "granted", "lease", l->id, "request_id", l->request_id, "expires_at",
                         l->expires_at, "ttl", l->ttl_s, "weight", l->weight, "charged",
                         "input_tokens", (json_int_t)l->charged_input_tokens, "output_tokens",
                         (json_int_t)l->charged_output_tokens, "cache_penalty", l->cache_penalty,
                         "waited", l->waited_s);
    if (l->status == SL_LEASE_QUEUED)
        return json_pack("{s:s, s:s, s:s, s:f, s:f}", "status", "queued", "ticket", l->ticket,
                         "request_id", l->request_id, "eta", l->eta_s, "waited", l->waited_s);
    return json_pack("{s:s, s:s, s:s, s:f, s:f, s:f}", "status", "rejected", "reason", l->reason,
                     "request_id", l->request_id, "retry_after", l->retry_after_s, "retry_at",
                     l->retry_at, "waited", l->waited_s);
}

static int parse_args(int argc, char **argv, sl_cli_conn_t *conn, sl_acquire_req_t *req,
                      const char **role, const char **checkpoint, int *have)
{
    const char *cmd = conn->cmd;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            acquire_usage(stdout);
            return -2;
        }
        int r = sl_cli_conn_option(conn, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        if (strncmp(a, "--", 2) != 0 || !(v = sl_cli_value(cmd, argc, argv, &i))) {
            if (strncmp(a, "--", 2) != 0)
                fprintf(stderr, "%s: unexpected argument \"%s\"\n", cmd, a);
            return -1;
        }
        int bad = 0;
        if (strcmp(a, "--input") == 0) {
            bad = sl_cli_parse_count(cmd, a, v, &req->input_tokens);
            *have |= 1;
        } else if (strcmp(a, "--output") == 0) {
            bad = sl_cli_parse_count(cmd, a, v, &req->output_tokens);
            *have |= 2;
        } else if (strcmp(a, "--cached") == 0) {
            bad = sl_cli_parse_count(cmd, a, v, &req->cached_tokens);
        } else if (strcmp(a, "--unblocks") == 0) {
            bad = sl_cli_parse_count(cmd, a, v, &req->unblocks);
        } else if (strcmp(a, "--ttl") == 0) {
            bad = sl_cli_parse_seconds(cmd, a, v, &req->ttl_s);
        } else if (strcmp(a, "--wait") == 0) {
            bad = sl_cli_parse_seconds(cmd, a, v, &req->max_wait_s);
        } else if (strcmp(a, "--role") == 0) {
            *role = v;
        } else if (strcmp(a, "--task") == 0) {
            req->task = v;
        } else if (strcmp(a, "--priority") == 0) {
            req->priority = v;
        } else if (strcmp(a, "--request-id") == 0) {
            req->request_id = v;
        } else if (strcmp(a, "--checkpoint") == 0) {
            *checkpoint = v;
        } else {
            fprintf(stderr, "%s: unknown option \"%s\"\n", cmd, a);
            return -1;
        }
        if (bad) return -1;
    }
    return 0;
}

int sl_cli_acquire(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice acquire");
    sl_acquire_req_t req;
    sl_acquire_req_init(&req);
    req.max_wait_s = 300;
    const char *role = NULL, *checkpoint_path = NULL;
    int have = 0;
    int r = parse_args(argc, argv, &conn, &req, &role, &checkpoint_path, &have);
    if (r == -2) return SL_EXIT_OK;
    if (r < 0 || have != 3) {
        if (r == 0) fprintf(stderr, "sluice acquire: --input and --output are required\n");
        acquire_usage(stderr);
        return SL_EXIT_USAGE;
    }
    if (!conn.agent && !getenv("SLUICE_AGENT")) {
        fprintf(stderr, "sluice acquire: --agent (or $SLUICE_AGENT) is required\n");
        return SL_EXIT_USAGE;
    }
    sl_checkpoint_t *cp = NULL;
    if (checkpoint_path) {
        char err[600];
        if (sl_checkpoint_load(checkpoint_path, &cp, err, sizeof(err)) < 0) {
            fprintf(stderr, "sluice acquire: %s\n", err);
            return SL_EXIT_FAILURE;
        }
        if (!req.request_id) req.request_id = sl_checkpoint_request_id(cp);
        req.checkpoint = cp;
        req.checkpoint_path = checkpoint_path;
    }
    conn.role = role;
    sl_client_t *c;
    int code = sl_cli_client(&conn, &c);
    if (code != SL_EXIT_OK) {
        sl_checkpoint_free(cp);
        return code;
    }
    sl_lease_t lease;
    int rc = sl_acquire(c, &req, &lease);
    if (rc == 0 || rc == SL_EMAXWAIT || rc == SL_EREJECTED) {
        if (conn.json) {
            json_t *j = lease_json(&lease);
            sl_cli_print_json(j);
            json_decref(j);
        } else if (rc == 0) {
            printf("%s\n", lease.id);
        }
        if (rc != 0) fprintf(stderr, "sluice acquire: %s\n", sl_client_errmsg(c));
        code = rc == 0 ? SL_EXIT_OK : SL_EXIT_NOT_GRANTED;
    } else {
        code = sl_cli_report(&conn, c, rc);
    }
    sl_client_free(c);
    sl_checkpoint_free(cp);
    return code;
}
