/* main.c - sluice-emu: parse flags, load the tokenizer, build the provider, serve until signalled.
 */
#include "emu.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    sl_emu_t *emu = arg;
    (void)sig;
    (void)what;
    event_base_loopbreak(emu->base);
}

static int run(sl_emu_t *emu)
{
    char err[1024] = "";
    int rc = 1;
    double now = sl__emu_now();
    emu->provider = sl_provider_new(&emu->opt.provider, now, err, sizeof err);
    if (!emu->provider) {
        fprintf(stderr, "sluice-emu: %s\n", err);
        return 2;
    }
    if (emu->opt.spend_capped) {
        emu->spend_capped = true;
        sl_provider_set_spend_capped(emu->provider, true);
    }
    sl_rng_seed(&emu->ids, emu->opt.provider.seed ^ 0x5bd1e9955bd1e995ULL);
    if (sl_tokenizer_load(emu->opt.vocab[0] ? emu->opt.vocab : NULL, &emu->tok, err, sizeof err) !=
            0 ||
        sl__filler_init(emu->tok, err, sizeof err) != 0) {
        fprintf(stderr, "sluice-emu: %s\n", err);
        goto done;
    }
    if (emu->opt.script[0] &&
        sl__script_load(emu->opt.script, &emu->script, err, sizeof err) != 0) {
        fprintf(stderr, "sluice-emu: %s\n", err);
        rc = 2;
        goto done;
    }
    /* Pacing runs on timers: libevent's default clock (CLOCK_MONOTONIC_COARSE, one tick per
     * jiffy, 4 ms here) would end a 1 ms answer up to 4 ms late. */
    struct event_config *ecfg = event_config_new();
    if (ecfg) event_config_set_flag(ecfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    emu->base = ecfg ? event_base_new_with_config(ecfg) : NULL;
    if (ecfg) event_config_free(ecfg);
    if (!emu->base) {
        fprintf(stderr, "sluice-emu: cannot create the event loop\n");
        goto done;
    }
    if (sl__emu_start(emu, err, sizeof err) < 0) {
        fprintf(stderr, "sluice-emu: %s\n", err);
        goto done;
    }
    emu->sig_term = evsignal_new(emu->base, SIGTERM, on_signal, emu);
    emu->sig_int = evsignal_new(emu->base, SIGINT, on_signal, emu);
    if (!emu->sig_term || !emu->sig_int || event_add(emu->sig_term, NULL) < 0 ||
        event_add(emu->sig_int, NULL) < 0) {
        fprintf(stderr, "sluice-emu: cannot set up signals\n");
        goto done;
    }
    signal(SIGPIPE, SIG_IGN);
    const char *host = emu->opt.listen_host;
    bool v6 = strchr(host, ':') != NULL;
    const sl_provider_config_t *c = &emu->opt.provider;
    printf("sluice-emu: listening on %s://%s%s%s:%d (input_tpm %lld, output_tpm %lld, rpm %lld, "
           "tokens_tpm %lld, seed %llu)\n",
           emu->ssl_ctx ? "https" : "http", v6 ? "[" : "", host, v6 ? "]" : "",
           sl__emu_bound_port(emu), (long long)c->input_tpm, (long long)c->output_tpm,
           (long long)c->rpm, (long long)c->tokens_tpm, (unsigned long long)c->seed);
    fflush(stdout);
    event_base_dispatch(emu->base);
    rc = 0;
done:
    sl__emu_stop(emu);
    if (emu->sig_term) event_free(emu->sig_term);
    if (emu->sig_int) event_free(emu->sig_int);
    if (emu->base) event_base_free(emu->base);
    sl_tokenizer_free(emu->tok);
    json_decref(emu->script);
    json_decref(emu->stored);
    json_decref(emu->stored_order);
    sl_provider_free(emu->provider);
    return rc;
}

int main(int argc, char **argv)
{
    static sl_emu_t emu;
    char err[1200];
    int rc = sl__emu_parse_options(argc, argv, &emu.opt, err, sizeof err);
    if (rc > 0) return 0;
    if (rc < 0) {
        fprintf(stderr, "sluice-emu: %s\n", err);
        return 2;
    }
    return run(&emu);
}
