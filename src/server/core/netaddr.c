/* netaddr.c - loopback or not, from the parsed address (netaddr.h).
 *
 * A string test ("starts with 127.") takes `127.evil.com` for loopback and misses
 * `::ffff:127.0.0.1`; the listener binds what getaddrinfo() gives, so that is what is
 * classified here.
 */
#include "netaddr.h"

#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

bool sl_net_addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        const uint8_t *b = in6->sin6_addr.s6_addr;
        static const uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
        return memcmp(b, mapped_prefix, sizeof(mapped_prefix)) == 0 && b[12] == 127;
    }
    return false;
}

int sl_net_host_is_loopback(const char *host, bool *loopback, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    *loopback = false;
    int gai = getaddrinfo(host, "0", &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -1;
    }
    bool all = ai != NULL;
    for (struct addrinfo *a = ai; a; a = a->ai_next)
        all = all && sl_net_addr_is_loopback(a->ai_addr);
    freeaddrinfo(ai);
    *loopback = all;
    return 0;
}
