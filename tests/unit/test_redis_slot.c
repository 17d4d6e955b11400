/* test_redis_slot.c - unit tests for the Cluster key slot of src/backend/redis/cluster.c:
 * CRC16-XMODEM modulo 16384 and the hash-tag rule of the Redis Cluster specification. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "redis_internal.h"
#include "test_main.h"

static unsigned slot(const char *key)
{
    return sl__rcl_key_slot(key, strlen(key));
}

/* The specification's check value: CRC16("123456789") = 0x31C3. */
static void test_crc16_matches_the_specification_check_value(void **state)
{
    (void)state;
    assert_int_equal(slot("123456789"), 0x31C3 % 16384);
    assert_int_equal(slot("foo"), 12182); /* CLUSTER KEYSLOT foo */
    assert_int_equal(slot("bar"), 5061);
    assert_int_equal(slot(""), 0);
}

static void test_a_hash_tag_hashes_only_the_bytes_between_the_first_braces(void **state)
{
    (void)state;
    assert_int_equal(slot("sluice:{p1}:pool"), slot("p1"));
    assert_int_equal(slot("sluice:{p1}:L:7"), slot("sluice:{p1}:pool"));
    assert_int_equal(slot("foo{bar}{zap}"), slot("bar"));     /* the first tag only */
    assert_int_equal(slot("foo{{bar}}zap"), slot("{bar"));    /* up to the next '}' */
    assert_int_not_equal(slot("foo{}{bar}"), slot("bar")); /* an empty tag: the whole key */
    assert_int_not_equal(slot("foo{}{bar}"), slot(""));
    assert_int_not_equal(slot("{unclosed"), slot("unclosed")); /* no '}': the whole key */
}

static void test_a_key_with_bytes_past_a_nul_is_hashed_to_its_length(void **state)
{
    (void)state;
    assert_int_not_equal(sl__rcl_key_slot("a\0b", 3), sl__rcl_key_slot("a", 1));
}

SL_TEST_MAIN(
    cmocka_unit_test(test_crc16_matches_the_specification_check_value),
    cmocka_unit_test(test_a_hash_tag_hashes_only_the_bytes_between_the_first_braces),
    cmocka_unit_test(test_a_key_with_bytes_past_a_nul_is_hashed_to_its_length))
