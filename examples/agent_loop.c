/* agent_loop: an agent's turn loop on libsluice-client, checkpointing before every wait.
 *
 * usage: agent_loop [--server URL] [--agent NAME] [--turns N] [--checkpoint FILE] [FILE...]
 *
 * Each turn "reads" the FILEs (hashing them into the checkpoint), sizes its prompt,
 * leases capacity from sluiced, makes the model call (simulated here: a short sleep
 * and a usage figure), and settles. Before waiting on a queued or rejected lease the
 * client saves the checkpoint; when the program starts and finds one, it resumes: it
 * re-reads only the files that changed and re-sends the call it had ready, with the
 * same request_id so sluiced never charges it twice. Run it against `make run`:
 *   ./build/examples/agent_loop --agent demo-1 --turns 3 examples/sluice.yaml
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "sluice/client.h"

static int on_wait(void *userdata, const sl_wait_t *w)
{
    static const char *kinds[] = {"queued", "rejected", "backing off", "local share"};
    (void)userdata;
    printf("  waiting (%s%s%s): eta %.1f s, position %" PRId64 ", waited %.1f s\n", kinds[w->kind],
           w->reason ? ": " : "", w->reason ? w->reason : "", w->eta_s, w->position, w->waited_s);
    return 0; /* keep waiting: the checkpoint is already on disk */
}

static int64_t file_tokens(const char *path)
{
    struct stat st;
    /* Roughly 4 bytes a token; a real agent counts with `sluice estimate` or an API. */
    return stat(path, &st) == 0 ? (int64_t)st.st_size / 4 + 1 : 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    const char *server = NULL, *agent = "agent-loop-c", *cp_path = NULL;
    int turns = 3, n_files = 0;
    const char *files[64];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--server") == 0 && i + 1 < argc)
            server = argv[++i];
        else if (strcmp(argv[i], "--agent") == 0 && i + 1 < argc)
            agent = argv[++i];
        else if (strcmp(argv[i], "--turns") == 0 && i + 1 < argc)
            turns = atoi(argv[++i]);
        else if (strcmp(argv[i], "--checkpoint") == 0 && i + 1 < argc)
            cp_path = argv[++i];
        else if (argv[i][0] != '-' && n_files < 64)
            files[n_files++] = argv[i];
        else {
            fprintf(stderr, "usage: agent_loop [--server URL] [--agent NAME] [--turns N] "
                            "[--checkpoint FILE] [FILE...]\n");
            return 2;
        }
    }
    char default_cp[300];
    if (!cp_path) {
        snprintf(default_cp, sizeof(default_cp), "/tmp/agent_loop-%s.checkpoint", agent);
        cp_path = default_cp;
    }

    sl_client_options_t opts;
    sl_client_options_init(&opts);
    opts.url = server;
    opts.agent = agent;
    opts.fleet_size = 20; /* fail-open share: 1/20 of the pool */
    sl_client_t *client;
    char err[512];
    if (sl_client_new(&opts, &client, err, sizeof(err)) < 0) {
        fprintf(stderr, "agent_loop: %s\n", err);
        return 1;
    }

    /* Resume a turn that was waiting when the agent stopped, if there is one. */
    sl_checkpoint_t *cp = NULL;
    size_t changed = 0;
    char *resume_rid = NULL;
    if (sl_checkpoint_resume(cp_path, &cp, &changed, NULL, 0) == 0) {
        printf("resuming \"%s\" at step \"%s\": %zu of %zu files changed\n", sl_checkpoint_goal(cp),
               sl_checkpoint_step(cp) ? sl_checkpoint_step(cp) : "-", changed,
               sl_checkpoint_file_count(cp));
        for (size_t i = 0; i < sl_checkpoint_file_count(cp); i++)
            if (sl_checkpoint_file_state(cp, i) != SL_FILE_SAME)
                printf("  re-read %s\n", sl_checkpoint_file_path(cp, i));
        if (sl_checkpoint_request_id(cp)) resume_rid = strdup(sl_checkpoint_request_id(cp));
    } else {
        cp = sl_checkpoint_new("demonstrate a leased agent loop");
    }
    if (!cp) {
        fprintf(stderr, "agent_loop: out of memory\n");
        sl_client_free(client);
        return 1;
    }

    int rc = 0;
    for (int turn = 1; turn <= turns && rc == 0; turn++) {
        char step[64];
        snprintf(step, sizeof(step), "turn %d of %d: call the model", turn, turns);
        sl_checkpoint_set_step(cp, step);
        int64_t prompt_tokens = 2000; /* system prompt and plan */
        for (int i = 0; i < n_files; i++) {
            if (sl_checkpoint_add_file(cp, files[i]) == 0) prompt_tokens += file_tokens(files[i]);
        }
        char next_call[256];
        snprintf(next_call, sizeof(next_call),
                 "{\"model\":\"claude\",\"max_tokens\":1024,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"turn %d\"}],\"tools\":{\"cwd\":\".\"}}",
                 turn);
        sl_checkpoint_set_next_call(cp, next_call);

        sl_acquire_req_t req;
        sl_acquire_req_init(&req);
        req.input_tokens = prompt_tokens / 4; /* the part after the cache breakpoint */
        req.cached_tokens = prompt_tokens - req.input_tokens;
        req.output_tokens = 1024;
        req.on_wait = on_wait;
        req.checkpoint = cp;
        req.checkpoint_path = cp_path;
        req.request_id = resume_rid; /* NULL after the first turn: a fresh random id */
        sl_lease_t lease;
        rc = sl_acquire(client, &req, &lease);
        free(resume_rid);
        resume_rid = NULL;
        if (rc < 0) {
            fprintf(stderr, "agent_loop: acquire: %s\n", sl_client_errmsg(client));
            break;
        }
        printf("turn %d: lease %s (%s mode), charged %" PRId64 " input tokens%s, waited %.1f s\n",
               turn, lease.id, lease.local ? "local" : "coordinated", lease.charged_input_tokens,
               lease.cache_penalty ? " (cold cache)" : "", lease.waited_s);

        sleep_ms(200); /* the model call would go here */
        sl_client_usage_t usage;
        sl_client_usage_init(&usage);
        usage.input_tokens = req.input_tokens * 9 / 10;
        /* A cold cache is written by this call; a warm one is read. */
        if (lease.cache_penalty)
            usage.cache_creation_input_tokens = req.cached_tokens;
        else
            usage.cache_read_input_tokens = req.cached_tokens;
        usage.output_tokens = 300;
        sl_client_settle_result_t res;
        rc = sl_settle(client, &lease, &usage, &res);
        if (rc < 0) {
            fprintf(stderr, "agent_loop: settle: %s\n", sl_client_errmsg(client));
            break;
        }
        printf("turn %d: settled, refund %" PRId64 " input / %" PRId64 " output tokens\n", turn,
               res.adjust_input_tokens, res.adjust_output_tokens);
        char decision[64];
        snprintf(decision, sizeof(decision), "turn %d applied its edit", turn);
        sl_checkpoint_add_decision(cp, decision, "the tests passed after it");
        sl_checkpoint_set_request_id(cp, NULL);
    }
    if (rc == 0) remove(cp_path); /* the goal is done: nothing to resume */
    sl_checkpoint_free(cp);
    sl_client_free(client);
    return rc == 0 ? 0 : 1;
}
