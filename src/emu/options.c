/* options.c - sluice-emu's command line: flags, defaults, --help, errors that name the flag. */
#include "emu.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EMU_VERSION "0.1.0"

void sl__emu_usage(FILE *out)
{
    fputs(
        "usage: sluice-emu --listen ADDR:PORT --input-tpm N --output-tpm N --rpm N [options]\n"
        "\n"
        "A provider emulator: the Anthropic Messages API and the OpenAI Chat Completions and\n"
        "Responses APIs on one port, enforcing token-bucket rate limits like the real\n"
        "providers. Prints \"sluice-emu: listening on http(s)://ADDR:PORT\" once it accepts\n"
        "connections (with port 0 the kernel picks the port). Stops on SIGTERM or SIGINT.\n"
        "\n"
        "endpoints:\n"
        "  POST /v1/messages                Anthropic Messages (stream: true for SSE)\n"
        "  POST /v1/messages/count_tokens   Anthropic token counting (--count-tokens-rpm)\n"
        "  POST /v1/chat/completions        OpenAI Chat Completions (stream, include_usage)\n"
        "  POST /v1/responses               OpenAI Responses (stream: true for SSE)\n"
        "  GET  /v1/models[/ID]             models, Anthropic's shape with anthropic-version\n"
        "  GET  /stats                      counters (requests, 429s, billed tokens) as JSON\n"
        "  GET  /health                     {\"status\":\"ok\"}\n"
        "  POST /emu/spend-cap              {\"capped\": true|false}: switch spend-cap mode\n"
        "\n"
        "limits (per minute, refilled continuously; 0 = not limited):\n"
        "  --input-tpm N          uncached input tokens per minute (cache reads are free)\n"
        "  --output-tpm N         output tokens per minute (max_tokens charged at the start,\n"
        "                         corrected to the real output at the end)\n"
        "  --rpm N                requests per minute\n"
        "  --tokens-tpm N         combined input + max_tokens per minute (OpenAI style)\n"
        "  --count-tokens-rpm N   token counting requests per minute, a bucket of its own\n"
        "                         (default 0: not limited)\n"
        "\n"
        "behaviour:\n"
        "  --ttft-ms N            time to first token in ms (default 600)\n"
        "  --tokens-per-s X       output speed (default 60; > 0)\n"
        "  --prefill-tokens-per-s X  time to first token grows by uncached input / X\n"
        "                         (default 0: prefill is free)\n"
        "  --latency-spread X     latencies vary uniformly by +-X (0 <= X < 1, default 0.2)\n"
        "  --output-tokens N      output length when tool use does not fix it; clamped to\n"
        "                         max_tokens and varied by the latency spread (default 1000)\n"
        "  --drift X              provider token counts = sluice tokenizer counts x X\n"
        "                         (default 1.0; e.g. 1.1 for a newer model)\n"
        "  --outside-share X      share of every limit used by traffic from outside the\n"
        "                         caller, 0 <= X < 1 (default 0)\n"
        "  --outside-rpm X        requests per minute of that outside traffic (default:\n"
        "                         rpm x share)\n"
        "  --spend-cap            spend-cap mode from the start: every call is refused\n"
        "                         with the provider's spend-cap error (no retry-after)\n"
        "  --spend-cap-tokens N   enter spend-cap mode once N tokens were billed (0 = never)\n"
        "  --cache-ttl-s X        prompt cache lifetime after the last use (default 300)\n"
        "  --cache-min-tokens N   shorter cacheable prefixes are not cached (default 1024)\n"
        "  --cache-reads-count    cache reads count against input TPM (older models)\n"
        "  --cache-breakpoints N  cache_control breakpoints, counted back from the last, the\n"
        "                         cache reads and writes: a call reads the longest prefix\n"
        "                         cached at any of them (1..4, default 1: the last only)\n"
        "  --overload-rate P      share of calls refused as overloaded (Anthropic 529\n"
        "                         overloaded_error, OpenAI 503) before anything is counted\n"
        "                         (0 <= P <= 1, default 0)\n"
        "  --stream-error-rate P  share of Anthropic streams that break off mid-stream with\n"
        "                         an overloaded_error event (0 <= P <= 1, default 0)\n"
        "  --seed N               seeds latency spread, output length, outside traffic,\n"
        "                         overloads, broken streams, ids and filler text (default 1)\n"
        "  --ping-interval-ms N   streams: a ping event after N ms without one (default 5000)\n"
        "  --script FILE          scripted conversation (JSON): turn k of a conversation is\n"
        "                         answered with the file's turns[k] (docs/emu.md)\n"
        "\n",
        out);
    fputs("long context and cache lifetimes (docs/emu.md):\n"
        "  --long-context-threshold N  a call whose prompt is above N tokens draws from the\n"
        "                         long-context limits below instead of --input-tpm and\n"
        "                         --output-tpm (Anthropic: 200000; default 0: off)\n"
        "  --long-context-input-tpm N   long-context input tokens per minute\n"
        "  --long-context-output-tpm N  long-context output tokens per minute\n"
        "  --cache-ttl-1h-s X     lifetime of a write marked \"ttl\": \"1h\" (default 3600)\n"
        "\n",
          out);
    fputs(
        "rate-limit endpoints (the admin key: --admin-key):\n"
        "  GET  /v1/organizations/rate_limits  the limits as Anthropic's Admin API lists them\n"
        "  GET  /v1/organization/projects/ID/rate_limits  as OpenAI's project rate limits\n"
        "  POST /emu/limits       {\"input_tpm\": N, ...}: change the limits at once (no key)\n"
        "\n"
        "acceleration limit (off by default; docs/emu.md):\n"
        "  --accel-idle-s X       after X s with no call (and at start) a ramp begins: uncached\n"
        "                         input admitted in any 60 s may grow at most --accel-factor\n"
        "                         per minute from max(--accel-floor-tpm, the minute before);\n"
        "                         beyond it a 429 naming the acceleration limit (0 = off)\n"
        "  --accel-factor X       growth per minute (> 1, default 2)\n"
        "  --accel-floor-tpm N    the allowance a ramp starts from at least (default 10000)\n"
        "  --admin-key K          the key of the rate-limit endpoints (GET\n"
        "                         /v1/organizations/rate_limits, GET /v1/organization/projects/\n"
        "                         ID/rate_limits); default $SLUICE_EMU_ADMIN_KEY, else any\n"
        "\n",
        out);
    /* Two pieces: C11 compilers need only take string literals of 4095 bytes. */
    fputs(
        "server:\n"
        "  --listen ADDR:PORT     address to listen on (IPv6 as [ADDR]:PORT)\n"
        "  --api-key K            the only key accepted (x-api-key for Anthropic, Authorization:\n"
        "                         Bearer for OpenAI); default $SLUICE_EMU_API_KEY; when neither\n"
        "                         is set, any non-empty key is accepted\n"
        "  --tls-cert FILE        serve HTTPS with this certificate chain (PEM) ...\n"
        "  --tls-key FILE         ... and this private key (PEM); both or neither\n"
        "  --vocab FILE           tokenizer vocabulary (default $SLUICE_VOCAB or the build's\n"
        "                         data/claude.json)\n"
        "  --max-body-bytes N     largest request body accepted (default 33554432)\n"
        "  --help, --version\n"
        "\n"
        "Flags take their value as the next argument or after '=' (--rpm=50).\n",
        out);
    fputs("\n"
          "more endpoints (docs/emu.md \"Embeddings, moderations and batches\"):\n"
          "  POST /v1/embeddings, POST /v1/moderations          OpenAI\n"
          "  /v1/messages/batches[/ID[/results|/cancel]]        Anthropic Message Batches\n"
          "  /v1/files[/ID[/content]], /v1/batches[/ID[/cancel]]  OpenAI Files and Batch\n"
          "\n"
          "batches:\n"
          "  --batch-seconds X      a batch is processed this long after its create (default 2)\n"
          "  --batch-rpm N          Anthropic: requests per minute to the batch endpoints\n"
          "                         (default 50; 0 = not limited)\n"
          "  --batch-queue N        Anthropic: requests of unfinished batches the processing\n"
          "                         queue holds (default 100000; 0 = not limited)\n",
          out);
}

/* Parses a whole decimal integer in [min, max]. */
static int parse_int(const char *flag, const char *v, int64_t min, int64_t max, int64_t *out,
                     char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < min || x > max) {
        snprintf(err, errlen, "%s: \"%s\" is not an integer in [%lld, %lld]", flag, v,
                 (long long)min, (long long)max);
        return -1;
    }
    *out = x;
    return 0;
}

/* Parses a finite decimal number in [min, max] (max_open: strictly below max). */
static int parse_num(const char *flag, const char *v, double min, double max, bool max_open,
                     double *out, char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x) || x < min || x > max || (max_open && x >= max)) {
        snprintf(err, errlen, "%s: \"%s\" is not a number in [%g, %g%s", flag, v, min, max,
                 max_open ? ")" : "]");
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_listen(const char *v, sl_emu_options_t *o, char *err, size_t errlen)
{
    const char *colon;
    const char *host = v;
    size_t host_len;
    if (v[0] == '[') {
        const char *close = strchr(v, ']');
        if (!close || close[1] != ':') goto bad;
        host = v + 1;
        host_len = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = strrchr(v, ':');
        if (!colon) goto bad;
        host_len = (size_t)(colon - v);
    }
    if (host_len == 0 || host_len >= sizeof o->listen_host) goto bad;
    int64_t port;
    if (parse_int("--listen", colon + 1, 0, 65535, &port, err, errlen) < 0) return -1;
    memcpy(o->listen_host, host, host_len);
    o->listen_host[host_len] = '\0';
    o->listen_port = (int)port;
    return 0;
bad:
    snprintf(err, errlen, "--listen: \"%s\" is not ADDR:PORT (IPv6: [ADDR]:PORT)", v);
    return -1;
}

static int copy_str(const char *flag, const char *v, char *dst, size_t cap, char *err,
                    size_t errlen)
{
    size_t n = strlen(v);
    if (n == 0 || n >= cap) {
        snprintf(err, errlen, "%s: value must be 1 to %zu bytes long", flag, cap - 1);
        return -1;
    }
    memcpy(dst, v, n + 1);
    return 0;
}

static void set_defaults(sl_emu_options_t *o)
{
    memset(o, 0, sizeof *o);
    sl_provider_config_init(&o->provider);
    o->listen_port = -1;
    o->ping_interval_s = 5.0;
    o->max_body_bytes = 32 * 1024 * 1024;
    o->cache_breakpoints = 1;
    o->batch_s = 2.0;
    o->batch_rpm = 50;                /* Anthropic's batch endpoints */
    o->batch_queue_requests = 100000; /* Anthropic's processing queue */
    const char *key = getenv("SLUICE_EMU_API_KEY");
    if (key && *key && strlen(key) < sizeof o->api_key)
        snprintf(o->api_key, sizeof o->api_key, "%s", key);
    const char *admin = getenv("SLUICE_EMU_ADMIN_KEY");
    if (admin && *admin && strlen(admin) < sizeof o->admin_key)
        snprintf(o->admin_key, sizeof o->admin_key, "%s", admin);
}

int sl__emu_parse_options(int argc, char **argv, sl_emu_options_t *o, char *err, size_t errlen)
{
    set_defaults(o);
    sl_provider_config_t *pc = &o->provider;
    bool have_in = false, have_out = false, have_rpm = false;
    const int64_t big = INT64_C(1) << 50;
    for (int i = 1; i < argc; i++) {
        char flag[64];
        const char *arg = argv[i];
        const char *eq = strchr(arg, '=');
        const char *val = NULL;
        size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (strncmp(arg, "--", 2) != 0 || flen >= sizeof flag) {
            snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", arg);
            return -1;
        }
        memcpy(flag, arg, flen);
        flag[flen] = '\0';

        if (!strcmp(flag, "--help") || !strcmp(flag, "--version") || !strcmp(flag, "--spend-cap") ||
            !strcmp(flag, "--cache-reads-count")) {
            if (eq) {
                snprintf(err, errlen, "%s takes no value (got \"%s\")", flag, eq + 1);
                return -1;
            }
            if (!strcmp(flag, "--help")) {
                sl__emu_usage(stdout);
                return 1;
            }
            if (!strcmp(flag, "--version")) {
                printf("sluice-emu %s\n", EMU_VERSION);
                return 1;
            }
            if (!strcmp(flag, "--spend-cap"))
                o->spend_capped = true;
            else
                pc->cache_reads_count = true;
            continue;
        }
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            snprintf(err, errlen, "%s needs a value (see --help)", flag);
            return -1;
        }

        int64_t n = 0;
        int rc = 0;
        if (!strcmp(flag, "--listen")) {
            rc = parse_listen(val, o, err, errlen);
        } else if (!strcmp(flag, "--input-tpm")) {
            rc = parse_int(flag, val, 0, big, &pc->input_tpm, err, errlen);
            have_in = true;
        } else if (!strcmp(flag, "--output-tpm")) {
            rc = parse_int(flag, val, 0, big, &pc->output_tpm, err, errlen);
            have_out = true;
        } else if (!strcmp(flag, "--rpm")) {
            rc = parse_int(flag, val, 0, big, &pc->rpm, err, errlen);
            have_rpm = true;
        } else if (!strcmp(flag, "--tokens-tpm")) {
            rc = parse_int(flag, val, 0, big, &pc->tokens_tpm, err, errlen);
        } else if (!strcmp(flag, "--seed")) {
            rc = parse_int(flag, val, 0, INT64_MAX, &n, err, errlen);
            pc->seed = (uint64_t)n;
        } else if (!strcmp(flag, "--ttft-ms")) {
            rc = parse_int(flag, val, 0, 3600 * 1000, &n, err, errlen);
            pc->ttft_s = (double)n / 1000.0;
        } else if (!strcmp(flag, "--tokens-per-s")) {
            rc = parse_num(flag, val, 1e-3, 1e9, false, &pc->output_tokens_per_s, err, errlen);
        } else if (!strcmp(flag, "--prefill-tokens-per-s")) {
            rc = parse_num(flag, val, 0, 1e12, false, &pc->prefill_tokens_per_s, err, errlen);
        } else if (!strcmp(flag, "--latency-spread")) {
            rc = parse_num(flag, val, 0, 1, true, &pc->latency_spread, err, errlen);
        } else if (!strcmp(flag, "--output-tokens")) {
            rc = parse_int(flag, val, 1, big, &pc->default_output_tokens, err, errlen);
        } else if (!strcmp(flag, "--drift")) {
            rc = parse_num(flag, val, 0.01, 100, false, &pc->drift, err, errlen);
        } else if (!strcmp(flag, "--outside-share")) {
            rc = parse_num(flag, val, 0, 1, true, &pc->outside_share, err, errlen);
        } else if (!strcmp(flag, "--outside-rpm")) {
            rc = parse_num(flag, val, 0, 1e9, false, &pc->outside_rpm, err, errlen);
        } else if (!strcmp(flag, "--spend-cap-tokens")) {
            rc = parse_int(flag, val, 0, big, &pc->spend_cap_tokens, err, errlen);
        } else if (!strcmp(flag, "--cache-ttl-s")) {
            rc = parse_num(flag, val, 0, 86400 * 365, false, &pc->cache_ttl_s, err, errlen);
        } else if (!strcmp(flag, "--cache-ttl-1h-s")) {
            rc = parse_num(flag, val, 0, 86400 * 365, false, &pc->cache_ttl_1h_s, err, errlen);
        } else if (!strcmp(flag, "--long-context-threshold")) {
            rc = parse_int(flag, val, 0, big, &pc->long_context_threshold_tokens, err, errlen);
        } else if (!strcmp(flag, "--long-context-input-tpm")) {
            rc = parse_int(flag, val, 0, big, &pc->long_context_input_tpm, err, errlen);
        } else if (!strcmp(flag, "--long-context-output-tpm")) {
            rc = parse_int(flag, val, 0, big, &pc->long_context_output_tpm, err, errlen);
        } else if (!strcmp(flag, "--cache-min-tokens")) {
            rc = parse_int(flag, val, 0, big, &pc->cache_min_tokens, err, errlen);
        } else if (!strcmp(flag, "--count-tokens-rpm")) {
            rc = parse_int(flag, val, 0, big, &pc->count_tokens_rpm, err, errlen);
        } else if (!strcmp(flag, "--overload-rate")) {
            rc = parse_num(flag, val, 0, 1, false, &pc->overload_rate, err, errlen);
        } else if (!strcmp(flag, "--stream-error-rate")) {
            rc = parse_num(flag, val, 0, 1, false, &pc->stream_error_rate, err, errlen);
        } else if (!strcmp(flag, "--cache-breakpoints")) {
            rc = parse_int(flag, val, 1, SL_PROVIDER_MAX_BREAKPOINTS, &n, err, errlen);
            o->cache_breakpoints = (int)n;
        } else if (!strcmp(flag, "--ping-interval-ms")) {
            rc = parse_int(flag, val, 1, 3600 * 1000, &n, err, errlen);
            o->ping_interval_s = (double)n / 1000.0;
        } else if (!strcmp(flag, "--max-body-bytes")) {
            rc = parse_int(flag, val, 1024, INT64_C(1) << 32, &o->max_body_bytes, err, errlen);
        } else if (!strcmp(flag, "--accel-idle-s")) {
            rc = parse_num(flag, val, 0, 86400, false, &pc->accel_idle_s, err, errlen);
        } else if (!strcmp(flag, "--accel-factor")) {
            rc = parse_num(flag, val, 1.0001, 1000, false, &pc->accel_factor, err, errlen);
        } else if (!strcmp(flag, "--accel-floor-tpm")) {
            rc = parse_int(flag, val, 1, big, &pc->accel_floor_tpm, err, errlen);
        } else if (!strcmp(flag, "--admin-key")) {
            rc = copy_str(flag, val, o->admin_key, sizeof o->admin_key, err, errlen);
        } else if (!strcmp(flag, "--batch-seconds")) {
            rc = parse_num(flag, val, 0, 86400, false, &o->batch_s, err, errlen);
        } else if (!strcmp(flag, "--batch-rpm")) {
            rc = parse_int(flag, val, 0, big, &o->batch_rpm, err, errlen);
        } else if (!strcmp(flag, "--batch-queue")) {
            rc = parse_int(flag, val, 0, big, &o->batch_queue_requests, err, errlen);
        } else if (!strcmp(flag, "--api-key")) {
            rc = copy_str(flag, val, o->api_key, sizeof o->api_key, err, errlen);
        } else if (!strcmp(flag, "--tls-cert")) {
            rc = copy_str(flag, val, o->tls_cert, sizeof o->tls_cert, err, errlen);
        } else if (!strcmp(flag, "--tls-key")) {
            rc = copy_str(flag, val, o->tls_key, sizeof o->tls_key, err, errlen);
        } else if (!strcmp(flag, "--script")) {
            rc = copy_str(flag, val, o->script, sizeof o->script, err, errlen);
        } else if (!strcmp(flag, "--vocab")) {
            rc = copy_str(flag, val, o->vocab, sizeof o->vocab, err, errlen);
        } else {
            snprintf(err, errlen, "unknown flag \"%s\" (see --help)", flag);
            return -1;
        }
        if (rc < 0) return -1;
    }
    const char *missing = o->listen_port < 0 ? "--listen"
                          : !have_in         ? "--input-tpm"
                          : !have_out        ? "--output-tpm"
                          : !have_rpm        ? "--rpm"
                                             : NULL;
    if (missing) {
        snprintf(err, errlen, "%s is required%s (see --help)", missing,
                 strcmp(missing, "--listen") ? " (0 means not limited)" : "");
        return -1;
    }
    if (!o->tls_cert[0] != !o->tls_key[0]) {
        snprintf(err, errlen, "%s is given without %s: TLS needs both",
                 o->tls_cert[0] ? "--tls-cert" : "--tls-key",
                 o->tls_cert[0] ? "--tls-key" : "--tls-cert");
        return -1;
    }
    return 0;
}
