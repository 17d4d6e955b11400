/* config_secret.c - the secrets a configuration names but never holds: a provider's key
 * (`pools.NAME.api_key_env`/`api_key_file`) and an admin key (`provider_limits.*`), read
 * from a variable or a file when the file loads. A message names the variable or the file,
 * never the secret; the buffer that held it is wiped. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sl__config_secret_ok(const char *k)
{
    if (!*k || strlen(k) > 4096) return false;
    for (const char *c = k; *c; c++)
        if ((unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e) return false;
    return true;
}

int sl__config_secret(const char *env, const char *file, const char *env_key,
                      const char *file_key, char **out, char *what, size_t whatlen)
{
    char buf[4100];
    if (env) {
        const char *k = getenv(env);
        if (!k || !*k) {
            snprintf(what, whatlen, "the environment variable %s (%s) is not set", env, env_key);
            return -1;
        }
        snprintf(buf, sizeof(buf), "%s", k);
    } else {
        FILE *f = fopen(file, "rb");
        if (!f) {
            snprintf(what, whatlen, "%s: cannot read %.200s: %s", file_key, file,
                     strerror(errno));
            return -1;
        }
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
            buf[--n] = '\0';
    }
    int rc = 0;
    if (!sl__config_secret_ok(buf)) {
        snprintf(what, whatlen,
                 "the key in %s %.200s must be one line of printable characters without spaces "
                 "(at most 4096)",
                 env ? "variable" : "file", env ? env : file);
        rc = -1;
    } else if (!(*out = strdup(buf))) {
        snprintf(what, whatlen, "out of memory");
        rc = -1;
    }
    memset(buf, 0, sizeof(buf));
    return rc;
}
