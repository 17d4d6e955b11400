/* test_netaddr.c - unit tests for src/server/core/netaddr.c: loopback is an address property,
 * not a spelling. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "server/core/netaddr.h"
#include "test_main.h"

static bool v4_is_loopback(const char *a)
{
    struct sockaddr_in in = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, a, &in.sin_addr), 1);
    return sl_net_addr_is_loopback((struct sockaddr *)&in);
}

static bool v6_is_loopback(const char *a)
{
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    assert_int_equal(inet_pton(AF_INET6, a, &in6.sin6_addr), 1);
    return sl_net_addr_is_loopback((struct sockaddr *)&in6);
}

static void test_loopback_addresses(void **state)
{
    (void)state;
    assert_true(v4_is_loopback("127.0.0.1"));
    assert_true(v4_is_loopback("127.255.0.9"));
    assert_true(v6_is_loopback("::1"));
    assert_true(v6_is_loopback("::ffff:127.0.0.1"));
    assert_true(v6_is_loopback("::ffff:127.3.2.1"));
}

static void test_wildcards_and_others_are_not_loopback(void **state)
{
    (void)state;
    assert_false(v4_is_loopback("0.0.0.0"));
    assert_false(v4_is_loopback("128.0.0.1"));
    assert_false(v4_is_loopback("10.127.0.1"));
    assert_false(v6_is_loopback("::"));
    assert_false(v6_is_loopback("::ffff:10.0.0.1"));
    assert_false(v6_is_loopback("::127.0.0.1")); /* IPv4-compatible, not mapped */
    assert_false(v6_is_loopback("fe80::1"));
}

static void test_names_are_resolved_not_read(void **state)
{
    (void)state;
    bool lo = true;
    char err[256];
    assert_int_equal(sl_net_host_is_loopback("127.0.0.1", &lo, err, sizeof(err)), 0);
    assert_true(lo);
    assert_int_equal(sl_net_host_is_loopback("::1", &lo, err, sizeof(err)), 0);
    assert_true(lo);
    assert_int_equal(sl_net_host_is_loopback("0.0.0.0", &lo, err, sizeof(err)), 0);
    assert_false(lo);
    assert_int_equal(sl_net_host_is_loopback("::", &lo, err, sizeof(err)), 0);
    assert_false(lo);
    /* .invalid never resolves (RFC 6761): not loopback, and the error names the host. */
    assert_int_equal(sl_net_host_is_loopback("127.x.invalid", &lo, err, sizeof(err)), -1);
    assert_false(lo);
    assert_non_null(strstr(err, "127.x.invalid"));
}

SL_TEST_MAIN(
    cmocka_unit_test(test_loopback_addresses),
    cmocka_unit_test(test_wildcards_and_others_are_not_loopback),
    cmocka_unit_test(test_names_are_resolved_not_read))
