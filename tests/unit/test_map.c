/* test_map.c - unit tests for the common hash map (src/common/map.c): lookups after
 * growth and after backward-shift deletion, iteration that deletes, the bounded insert. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/map.h"
#include "test_main.h"

/* Every occupied slot is reachable from its home slot without crossing an empty one: the
 * invariant that backward-shift deletion keeps (a tombstone-free table). */
static void assert_u64_runs_intact(const sl_u64map_t *m)
{
    size_t live = 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        live++;
        uint64_t v;
        assert_true(sl_u64map_get(m, m->keys[i], &v));
        assert_int_equal(v, m->vals[i]);
    }
    assert_int_equal(live, m->len);
    assert_true(m->len * 2 <= m->cap || m->cap == 0);
}

static void test_a_u64_map_finds_every_key_after_growth(void **state)
{
    (void)state;
    sl_u64map_t m = {0};
    for (uint64_t k = 1; k <= 10000; k++)
        assert_int_equal(sl_u64map_put(&m, k, k * 7), 0);
    assert_int_equal(m.len, 10000);
    assert_true(m.cap >= 20000 && (m.cap & (m.cap - 1)) == 0);
    for (uint64_t k = 1; k <= 10000; k++) {
        uint64_t v = 0;
        assert_true(sl_u64map_get(&m, k, &v));
        assert_int_equal(v, k * 7);
    }
    assert_false(sl_u64map_get(&m, 10001, NULL));
    size_t cap = m.cap;
    assert_int_equal(sl_u64map_put(&m, 5, 1), 0); /* replacing never grows */
    assert_int_equal(m.cap, cap);
    assert_int_equal(m.len, 10000);
    assert_int_equal(sl_u64map_put(&m, 0, 1), -1); /* 0 is "empty", never a key */
    assert_u64_runs_intact(&m);
    sl_u64map_free(&m);
    assert_int_equal(m.cap, 0);
}

static void test_a_u64_map_deletion_shifts_the_probe_run_back(void **state)
{
    (void)state;
    sl_u64map_t m = {0};
    /* Many keys in a small table give long runs; deleting from their middles must keep
     * every later key reachable, with no tombstone left behind. */
    assert_int_equal(sl_u64map_reserve(&m, 2000), 0);
    size_t cap = m.cap;
    for (uint64_t k = 1; k <= 2000; k++)
        assert_int_equal(sl_u64map_put(&m, k * 0x9e3779b97f4a7c15ULL, k), 0);
    assert_int_equal(m.cap, cap); /* reserved room: no growth */
    for (uint64_t k = 1; k <= 2000; k += 2) {
        assert_true(sl_u64map_del(&m, k * 0x9e3779b97f4a7c15ULL));
        assert_false(sl_u64map_del(&m, k * 0x9e3779b97f4a7c15ULL));
    }
    assert_int_equal(m.len, 1000);
    assert_u64_runs_intact(&m);
    for (uint64_t k = 1; k <= 2000; k++)
        assert_int_equal(sl_u64map_get(&m, k * 0x9e3779b97f4a7c15ULL, NULL), k % 2 == 0);
    /* A table emptied by deletions is all empty slots again. */
    for (uint64_t k = 2; k <= 2000; k += 2)
        assert_true(sl_u64map_del(&m, k * 0x9e3779b97f4a7c15ULL));
    for (size_t i = 0; i < m.cap; i++)
        assert_int_equal(m.keys[i], 0);
    sl_u64map_free(&m);
}

static void delete_odd(uint64_t key, uint64_t val, void *ud)
{
    assert_int_equal(val, key + 1);
    if (key % 2) assert_true(sl_u64map_del(ud, key));
}

typedef struct visit_count {
    sl_u64map_t *m;
    unsigned char *seen;
} visit_count_t;

static void count_and_delete_odd(uint64_t key, uint64_t val, void *ud)
{
    visit_count_t *c = ud;
    assert_int_equal(val, key + 1);
    c->seen[key]++;
    if (key % 2) assert_true(sl_u64map_del(c->m, key));
}

static void test_a_u64_foreach_visits_each_entry_once_while_deleting_it(void **state)
{
    (void)state;
    enum { N = 3000 };
    sl_u64map_t m = {0};
    for (uint64_t k = 1; k <= N; k++)
        assert_int_equal(sl_u64map_put(&m, k, k + 1), 0);
    unsigned char *seen = calloc(N + 1, 1);
    assert_non_null(seen);
    visit_count_t c = {&m, seen};
    sl_u64map_foreach(&m, count_and_delete_odd, &c);
    for (uint64_t k = 1; k <= N; k++)
        assert_int_equal(seen[k], 1); /* a shifted-back entry is neither missed nor repeated */
    assert_int_equal(m.len, N / 2);
    assert_u64_runs_intact(&m);
    sl_u64map_foreach(&m, delete_odd, &m); /* only even keys left: nothing deleted */
    assert_int_equal(m.len, N / 2);
    free(seen);
    sl_u64map_free(&m);
}

static void test_a_string_map_borrows_keys_and_survives_deletions(void **state)
{
    (void)state;
    enum { N = 4000 };
    char(*names)[16] = calloc(N, sizeof *names);
    assert_non_null(names);
    sl_strmap_t m = {0};
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "pool-%d", i);
        assert_int_equal(sl_strmap_put(&m, names[i], names[i]), 0);
    }
    assert_int_equal(m.len, N);
    for (int i = 0; i < N; i += 2)
        assert_ptr_equal(sl_strmap_del(&m, names[i]), names[i]);
    assert_int_equal(m.len, N / 2);
    char probe[16];
    for (int i = 0; i < N; i++) {
        snprintf(probe, sizeof probe, "pool-%d", i); /* another copy of the same key */
        if (i % 2)
            assert_ptr_equal(sl_strmap_get(&m, probe), names[i]);
        else
            assert_null(sl_strmap_get(&m, probe));
    }
    /* A sweep over the slots with del_at looks at the same slot again after a removal. */
    size_t removed = 0;
    for (size_t i = 0; i < m.cap;) {
        if (m.slots[i].hash && ((const char *)m.slots[i].val)[5] == '1') {
            sl_strmap_del_at(&m, i);
            removed++;
            continue;
        }
        i++;
    }
    for (int i = 1; i < N; i += 2) {
        int starts_with_1 = names[i][5] == '1';
        assert_int_equal(sl_strmap_get(&m, names[i]) == NULL, starts_with_1);
    }
    assert_int_equal(m.len, N / 2 - removed);
    sl_strmap_free(&m);
    free(names);
}

static void test_a_string_map_with_copied_keys_owns_them(void **state)
{
    (void)state;
    sl_strmap_t m = {0};
    char name[32];
    static int vals[3];
    snprintf(name, sizeof name, "agent-a");
    const char *stored = sl_strmap_put_copy(&m, name, &vals[0]);
    assert_non_null(stored);
    assert_ptr_not_equal(stored, name);
    name[6] = 'z'; /* the caller's buffer changes: the map's copy does not */
    assert_ptr_equal(sl_strmap_get(&m, "agent-a"), &vals[0]);
    assert_ptr_equal(sl_strmap_put_copy(&m, "agent-a", &vals[1]), stored); /* replaces */
    assert_ptr_equal(sl_strmap_get(&m, "agent-a"), &vals[1]);
    assert_int_equal(m.count, 1);
    assert_ptr_equal(sl_strmap_del_copy(&m, "agent-a"), &vals[1]);
    assert_null(sl_strmap_del_copy(&m, "agent-a"));
    assert_non_null(sl_strmap_put_copy(&m, "agent-b", &vals[2]));
    sl_strmap_free_keys(&m); /* frees the copy of agent-b (checked under ASan/valgrind) */
    assert_int_equal(m.cap, 0);
}

static void test_the_bounded_insert_stops_at_its_bound(void **state)
{
    (void)state;
    sl_strmap_t m = {0};
    char name[32];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "task-%d", i);
        const char *stored = NULL;
        int *v = sl_strmap_obtain(&m, name, sizeof(int), 3, &stored);
        assert_non_null(v);
        assert_int_equal(*v, 0); /* a zeroed value */
        assert_string_equal(stored, name);
        *v = i + 10;
    }
    /* Full: an absent key gets nothing and the map is unchanged... */
    assert_null(sl_strmap_obtain(&m, "task-3", sizeof(int), 3, NULL));
    assert_int_equal(m.count, 3);
    assert_null(sl_strmap_get(&m, "task-3"));
    /* ...while a present key is still found, full or not. */
    int *v1 = sl_strmap_obtain(&m, "task-1", sizeof(int), 3, NULL);
    assert_non_null(v1);
    assert_int_equal(*v1, 11);
    /* Room again after a deletion. */
    free(sl_strmap_del_copy(&m, "task-0"));
    int *v3 = sl_strmap_obtain(&m, "task-3", sizeof(int), 3, NULL);
    assert_non_null(v3);
    assert_int_equal(m.count, 3);
    for (size_t i = 0; i < m.cap; i++)
        if (m.slots[i].hash) free(m.slots[i].val);
    sl_strmap_free_keys(&m);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_a_u64_map_finds_every_key_after_growth),
    cmocka_unit_test(test_a_u64_map_deletion_shifts_the_probe_run_back),
    cmocka_unit_test(test_a_u64_foreach_visits_each_entry_once_while_deleting_it),
    cmocka_unit_test(test_a_string_map_borrows_keys_and_survives_deletions),
    cmocka_unit_test(test_a_string_map_with_copied_keys_owns_them),
    cmocka_unit_test(test_the_bounded_insert_stops_at_its_bound))
