/* netaddr.h - what kind of address sluiced listens on, decided from the address itself
 * (resolved and parsed), never from how the configuration spelt it. */
#ifndef SL_NETADDR_H
#define SL_NETADDR_H

#include <stdbool.h>
#include <stddef.h>

struct sockaddr;

/* True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104 (IPv4 loopback mapped into IPv6).
 * The wildcard addresses (0.0.0.0, ::) and everything else are false. */
bool sl_net_addr_is_loopback(const struct sockaddr *sa);

/* Resolves `host` as the listener would (numeric, or a name looked up now) and sets
 * *loopback when every address it gives is a loopback one. Returns 0, or -1 with `err`
 * naming the host when it cannot be resolved (*loopback is then false). */
int sl_net_host_is_loopback(const char *host, bool *loopback, char *err, size_t errlen);

#endif /* SL_NETADDR_H */
