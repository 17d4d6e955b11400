/* client_fleet: N client threads leasing in a loop, printing grants and mode switches.
 *
 * usage: client_fleet URL THREADS SECONDS FLEET_SIZE INPUT_TOKENS
 * Each thread owns one sl_client_t (the documented threading model) and loops
 * acquire -> 20 ms "call" -> settle until SECONDS pass. Every grant and every mode
 * switch is one JSON line on standard output with a Unix timestamp, so the test
 * can check when the clients went local, what they took locally, and when they
 * came back.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/client.h"

static const char *url;
static double seconds;
static int fleet_size;
static long input_tokens;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void emit(const char *line)
{
    pthread_mutex_lock(&out_lock);
    fputs(line, stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
}

static void on_alert(void *ud, const char *line)
{
    char buf[800];
    snprintf(buf, sizeof(buf), "{\"t\":%.3f,\"client\":%d,\"event\":\"alert\",\"to\":\"%s\"}\n",
             now_unix(), *(int *)ud, strstr(line, "fail-open") ? "local" : "coordinated");
    emit(buf);
}

static void *run(void *arg)
{
    int id = (int)(long)arg;
    char agent[32], buf[512];
    snprintf(agent, sizeof(agent), "fleet-%d", id);
    sl_client_options_t o;
    sl_client_options_init(&o);
    o.url = url;
    o.agent = agent;
    o.fleet_size = fleet_size;
    o.log = on_alert;
    o.log_userdata = &id;
    sl_client_t *c;
    if (sl_client_new(&o, &c, buf, sizeof(buf)) < 0) {
        fprintf(stderr, "client_fleet: %s\n", buf);
        return NULL;
    }
    sl_client_mode_t mode = SL_MODE_COORDINATED;
    double end = now_unix() + seconds;
    while (now_unix() < end) {
        sl_acquire_req_t req;
        sl_acquire_req_init(&req);
        req.input_tokens = input_tokens;
        req.output_tokens = 10;
        req.max_wait_s = end - now_unix() > 0 ? end - now_unix() : 0;
        sl_lease_t lease;
        int rc = sl_acquire(c, &req, &lease);
        if (sl_client_mode(c) != mode) {
            mode = sl_client_mode(c);
            snprintf(buf, sizeof(buf),
                     "{\"t\":%.3f,\"client\":%d,\"event\":\"mode\",\"mode\":\"%s\"}\n", now_unix(),
                     id, mode == SL_MODE_LOCAL ? "local" : "coordinated");
            emit(buf);
        }
        if (rc < 0) {
            if (rc != SL_EMAXWAIT && rc != SL_EREJECTED) {
                snprintf(buf, sizeof(buf),
                         "{\"t\":%.3f,\"client\":%d,\"event\":\"error\",\"rc\":%d}\n", now_unix(),
                         id, rc);
                emit(buf);
                struct timespec ts = {0, 50000000};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        snprintf(buf, sizeof(buf),
                 "{\"t\":%.3f,\"client\":%d,\"event\":\"grant\",\"local\":%d,\"input\":%lld}\n",
                 now_unix(), id, lease.local, (long long)lease.charged_input_tokens);
        emit(buf);
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
        sl_client_usage_t u;
        sl_client_usage_init(&u);
        u.input_tokens = input_tokens;
        u.output_tokens = 10;
        sl_settle(c, &lease, &u, NULL);
    }
    sl_client_free(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: client_fleet URL THREADS SECONDS FLEET_SIZE INPUT_TOKENS\n");
        return 2;
    }
    url = argv[1];
    int n = atoi(argv[2]);
    seconds = atof(argv[3]);
    fleet_size = atoi(argv[4]);
    input_tokens = atol(argv[5]);
    if (n < 1 || n > 64 || seconds <= 0 || fleet_size < 1 || input_tokens < 0) {
        fprintf(stderr, "client_fleet: bad arguments\n");
        return 2;
    }
    pthread_t threads[64];
    for (int i = 0; i < n; i++)
        if (pthread_create(&threads[i], NULL, run, (void *)(long)i) != 0) return 1;
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    return 0;
}
