/* persist_read.c - the state file's reader: verifies a whole file (format 2, or format 1
 * once) and reads its records into what sl__persist_restore_*() give back.
 *
 * The rule it serves (docs/server.md "All or nothing"): a file is taken only when every
 * byte up to its end verifies; the first fault found is named with its byte offset, and
 * the caller then restores nothing. Reading never trusts a length before checking it
 * against what is left, and copies every string it keeps. */
#include "persist_format.h"
#include "../common/grow.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A reader over one record's body. */
typedef struct rd {
    const unsigned char *p;
    size_t n, off;
    bool bad;
} rd_t;

static void get(rd_t *r, void *v, size_t n)
{
    if (r->bad || r->n - r->off < n) {
        r->bad = true;
        memset(v, 0, n);
        return;
    }
    memcpy(v, r->p + r->off, n);
    r->off += n;
}

/* Defines `static T get_NAME(rd_t *r)`: the next field as a T, 0 past the end (r->bad set). */
#define RD_GETTER(T, NAME)                                                                         \
    static T get_##NAME(rd_t *r)                                                                   \
    {                                                                                              \
        T v;                                                                                       \
        get(r, &v, sizeof v);                                                                      \
        return v;                                                                                  \
    }
RD_GETTER(uint8_t, u8)
RD_GETTER(uint32_t, u32)
RD_GETTER(uint64_t, u64)
RD_GETTER(int64_t, i64)
RD_GETTER(double, f64)
/* Does the record hold more fields (appended by a later record version)? */
static bool has_more(const rd_t *r)
{
    return !r->bad && r->off < r->n;
}
/* A copy of the string (NULL for the null string, or on error with r->bad set). */
static char *get_str(rd_t *r)
{
    uint16_t len;
    get(r, &len, sizeof len);
    if (r->bad || len == STR_NULL) return NULL;
    if (r->n - r->off < len) {
        r->bad = true;
        return NULL;
    }
    char *s = malloc((size_t)len + 1);
    if (!s) {
        r->bad = true;
        return NULL;
    }
    memcpy(s, r->p + r->off, len);
    s[len] = '\0';
    r->off += len;
    return s;
}

static void note_time(sl_persist_t *p, double t)
{
    if (isfinite(t) && t > p->latest_s) p->latest_s = t;
}

static void lease_state_free(sl_lease_state_t *l)
{
    free((char *)l->pool);
    free((char *)l->agent);
    free((char *)l->cache_key);
    free((char *)l->model);
}

void sl__persist_loaded_free(sl_persist_t *p)
{
    for (size_t i = 0; i < p->n_pools; i++)
        free(p->pools[i].name);
    free(p->pools);
    p->pools = NULL;
    p->n_pools = 0;
    for (size_t i = 0; i < p->n_leases; i++)
        lease_state_free(&p->leases[i].st);
    free(p->leases);
    p->leases = NULL;
    p->n_leases = p->cap_leases = 0;
    free(p->ended);
    p->ended = NULL;
    p->n_ended = p->cap_ended = 0;
    for (size_t i = 0; i < p->n_calibs; i++) {
        free(p->calibs[i].pool);
        free((char *)p->calibs[i].st.model);
    }
    free(p->calibs);
    p->calibs = NULL;
    p->n_calibs = 0;
    sl__suspended_clear(&p->susp_loaded);
    sl__batchq_clear(&p->batchq_loaded);
}

static int load_pool(sl_persist_t *p, rd_t *r)
{
    char *name = get_str(r);
    sl_pool_state_t st;
    memset(&st, 0, sizeof st);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        st.level[b] = get_f64(r);
    st.at = get_f64(r);
    st.margin = get_f64(r);
    st.clean_since = get_f64(r);
    st.floor_since = get_f64(r);
    st.blocked_until = get_f64(r);
    st.cold_until = get_f64(r);
    st.cold_raised = get_u32(r);
    if (has_more(r)) { /* record version 2 */
        st.lease_mean_s = get_f64(r);
        st.lease_samples = get_i64(r);
    }
    if (r->bad || !name) {
        free(name);
        return -1;
    }
    note_time(p, st.at);
    for (size_t i = 0; i < p->n_pools; i++) {
        if (strcmp(p->pools[i].name, name) == 0) {
            free(name);
            p->pools[i].st = st;
            return 0;
        }
    }
    loaded_pool_t *pools = realloc(p->pools, (p->n_pools + 1) * sizeof *pools);
    if (!pools) {
        free(name);
        return -1;
    }
    p->pools = pools;
    p->pools[p->n_pools].name = name;
    p->pools[p->n_pools].st = st;
    p->n_pools++;
    return 0;
}

static int load_lease(sl_persist_t *p, rd_t *r, size_t seq)
{
    sl_lease_state_t l;
    memset(&l, 0, sizeof l);
    l.id = get_u64(r);
    l.ticket = get_u64(r);
    l.pool = get_str(r);
    l.agent = get_str(r);
    l.cache_key = get_str(r);
    l.model = get_str(r);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        l.need[b] = get_i64(r);
    l.cached_tokens = get_i64(r);
    l.est_prompt_tokens = get_i64(r);
    l.weight = get_f64(r);
    l.granted_at = get_f64(r);
    l.waited_s = get_f64(r);
    l.ttl_s = get_f64(r);
    l.expires_at = get_f64(r);
    l.cache_penalty = get_u8(r) != 0;
    l.claimed = get_u8(r) != 0;
    if (has_more(r)) l.cache_ttl_s = get_f64(r); /* record version 3 */
    if (r->bad || !l.pool || !l.agent || l.id == 0) {
        lease_state_free(&l);
        return -1;
    }
    loaded_lease_t *v = sl_grow(p->leases, p->n_leases, &p->cap_leases, sizeof *v, 64);
    if (!v) {
        lease_state_free(&l);
        return -1;
    }
    p->leases = v;
    note_time(p, l.granted_at);
    if (l.id > p->id_floor) p->id_floor = l.id;
    p->leases[p->n_leases].st = l;
    p->leases[p->n_leases].seq = seq;
    p->n_leases++;
    return 0;
}

static int load_ended(sl_persist_t *p, rd_t *r)
{
    uint64_t id = get_u64(r);
    if (r->bad) return -1;
    uint64_t *v = sl_grow(p->ended, p->n_ended, &p->cap_ended, sizeof *v, 64);
    if (!v) return -1;
    p->ended = v;
    p->ended[p->n_ended++] = id;
    return 0;
}

static int load_calib(sl_persist_t *p, rd_t *r)
{
    char *pool = get_str(r);
    sl_calibration_state_t c;
    memset(&c, 0, sizeof c);
    c.model = get_str(r);
    for (int i = 0; i < SL_CALIBRATION_WINDOW; i++)
        c.sample[i] = get_f64(r);
    c.n = (int)get_u32(r);
    c.pos = (int)get_u32(r);
    c.total = get_i64(r);
    if (has_more(r)) { /* record version 2 */
        for (int i = 0; i < SL_CALIBRATION_WINDOW; i++)
            c.out_sample[i] = get_i64(r);
        c.out_n = (int)get_u32(r);
        c.out_pos = (int)get_u32(r);
    }
    if (r->bad || !pool || !c.model) {
        free(pool);
        free((char *)c.model);
        return -1;
    }
    for (size_t i = 0; i < p->n_calibs; i++) {
        if (!strcmp(p->calibs[i].pool, pool) && !strcmp(p->calibs[i].st.model, c.model)) {
            free(pool);
            free((char *)p->calibs[i].st.model);
            p->calibs[i].st = c;
            return 0;
        }
    }
    loaded_calib_t *v = realloc(p->calibs, (p->n_calibs + 1) * sizeof *v);
    if (!v) {
        free(pool);
        free((char *)c.model);
        return -1;
    }
    p->calibs = v;
    p->calibs[p->n_calibs].pool = pool;
    p->calibs[p->n_calibs].st = c;
    p->n_calibs++;
    return 0;
}

/* 'U' and 'V': the journal replays suspensions and releases in their order. */
static int load_suspended(sl_persist_t *p, rd_t *r)
{
    sl_suspension_t s = {0};
    char *agent = get_str(r), *role = get_str(r), *reason = get_str(r), *metric = get_str(r);
    s.agent = agent, s.role = role, s.reason = reason, s.metric = metric;
    s.z = get_f64(r);
    s.count = get_i64(r);
    s.at_s = get_f64(r);
    int rc = r->bad || !agent ? -1 : sl__suspended_put(&p->susp_loaded, &s) < 0 ? -1 : 0;
    free(agent), free(role), free(reason), free(metric);
    return rc;
}

static int load_released(sl_persist_t *p, rd_t *r)
{
    char *agent = get_str(r);
    if (r->bad || !agent) {
        free(agent);
        return -1;
    }
    sl__suspended_del(&p->susp_loaded, agent);
    free(agent);
    return 0;
}

/* 'Q' and 'q': the journal replays the batch queues' changes in their order. */
static int load_batch(sl_persist_t *p, rd_t *r, bool put)
{
    char *pool = get_str(r), *id = get_str(r);
    int64_t requests = put ? get_i64(r) : 0;
    double expires_at = put ? get_f64(r) : 0;
    int rc = r->bad || !pool || !id || requests < 0 ? -1 : 0;
    if (rc == 0 && put)
        rc = sl__batchq_put(&p->batchq_loaded, pool, id, requests, expires_at) < 0 ? -1 : 0;
    else if (rc == 0)
        sl__batchq_del(&p->batchq_loaded, pool, id);
    free(pool), free(id);
    return rc;
}

/* Reads one verified record's body (its type byte first) into p. Returns 0, or -1 when
 * it cannot be read (an unknown type, fields cut short, out of memory). */
static int load_record(sl_persist_t *p, const unsigned char *body, size_t body_len)
{
    rd_t r = {.p = body + 1, .n = body_len - 1};
    switch (body[0]) {
    case 'I': {
        uint64_t reserved = get_u64(&r);
        if (r.bad) return -1;
        if (reserved > p->id_floor) p->id_floor = reserved;
        return 0;
    }
    case 'P':
        return load_pool(p, &r);
    case 'L':
        return load_lease(p, &r, p->n_records++);
    case 'E':
        return load_ended(p, &r);
    case 'C':
        return load_calib(p, &r);
    case 'U':
        return load_suspended(p, &r);
    case 'V':
        return load_released(p, &r);
    case 'Q':
    case 'q':
        return load_batch(p, &r, body[0] == 'Q');
    case 'S':
        return 0;
    default:
        return -1;
    }
}

int sl__persist_slurp(const char *path, unsigned char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int saved = fstat(fd, &sb) != 0 ? errno : EISDIR; /* not a regular file */
        close(fd);
        errno = saved;
        return -1;
    }
    size_t cap = (size_t)sb.st_size + 1;
    unsigned char *p = malloc(cap);
    if (!p) {
        close(fd);
        errno = ENOMEM;
        return -1;
    }
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            unsigned char *q = realloc(p, cap * 2);
            if (!q) {
                free(p);
                close(fd);
                errno = ENOMEM;
                return -1;
            }
            p = q;
            cap *= 2;
        }
        ssize_t got = read(fd, p + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int saved = errno;
            free(p);
            close(fd);
            errno = saved;
            return -1;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    *data = p;
    *len = n;
    return 0;
}

int sl__persist_damaged(sl_persist_t *p, const char *fmt, ...)
{
    if (p->damage[0]) return -1; /* the first fault found is the one named */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->damage, sizeof p->damage, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t word_at(const unsigned char *data, size_t off)
{
    uint64_t w;
    memcpy(&w, data + off, sizeof w);
    return w;
}

/* The batch length a commit word announces, or -1 when the word is not a commit (its
 * high half must be the complement of its low half: no single flipped bit passes). */
static int64_t commit_len(uint64_t word)
{
    uint32_t len = (uint32_t)word, check = (uint32_t)(word >> 32);
    return len != 0 && check == (uint32_t)~len ? (int64_t)len : -1;
}

/* Walks the records of data[off, off + len): each must fit, verify and (when `load`)
 * be read into p. `first`: the snapshot's batch, which begins with 'I' and ends with
 * 'S' (the only 'S'). Returns 0, or -1 with p->damage set (when `load`). */
static int read_records(sl_persist_t *p, const unsigned char *data, size_t off, size_t len,
                        bool first, bool load)
{
    size_t end = off + len;
    bool first_record = true;
    while (off < end) {
        uint32_t body_len;
        uint64_t sum;
        if (end - off < HEAD_LEN)
            return load ? sl__persist_damaged(p, "a record cut short at byte %zu", off) : -1;
        memcpy(&body_len, data + off, sizeof body_len);
        memcpy(&sum, data + off + sizeof body_len, sizeof sum);
        const unsigned char *body = data + off + HEAD_LEN;
        if (body_len == 0 || body_len > RECORD_MAX || end - off - HEAD_LEN < body_len ||
            fnv1a(body, body_len) != sum)
            return load ? sl__persist_damaged(p, "the record at byte %zu fails its checksum", off)
                        : -1;
        bool last = off + HEAD_LEN + body_len == end;
        if (load && ((first && first_record && body[0] != 'I') ||
                     (body[0] == 'S' && !(first && last)) || (first && last && body[0] != 'S')))
            return sl__persist_damaged(p, "the record at byte %zu ('%c') is out of place", off,
                                       body[0] >= 0x20 && body[0] < 0x7f ? body[0] : '?');
        if (load && load_record(p, body, body_len) < 0)
            return sl__persist_damaged(p, "the record at byte %zu ('%c') cannot be read", off,
                                       body[0] >= 0x20 && body[0] < 0x7f ? body[0] : '?');
        first_record = false;
        off += HEAD_LEN + body_len;
    }
    return 0;
}

/* Reads format 2 (the head above): every committed batch must verify, the file must be
 * as long as its head says, and no committed batch may follow the first zero commit word
 * (a hole). Returns 0 or -1 with p->damage set. */
static int parse_v2(sl_persist_t *p, const unsigned char *data, size_t len)
{
    if (len < FILE_HEAD_LEN)
        return sl__persist_damaged(p, "%zu bytes: shorter than the file's head", len);
    uint64_t declared = word_at(data, MAGIC_LEN);
    if (fnv1a(data, MAGIC_LEN + 8) != word_at(data, MAGIC_LEN + 8))
        return sl__persist_damaged(p, "the file's head fails its checksum");
    if (declared != len)
        return sl__persist_damaged(p,
                                   "%zu bytes where the file's head says %llu (cut short or grown)",
                                   len, (unsigned long long)declared);
    size_t off = FILE_HEAD_LEN;
    bool first = true;
    for (;;) {
        if (len - off < COMMIT_LEN)
            return sl__persist_damaged(p, "the journal runs to the end of the file");
        uint64_t w = word_at(data, off);
        if (w == 0) break; /* the end of what was committed */
        int64_t blen = commit_len(w);
        if (blen < 0)
            return sl__persist_damaged(p, "the commit word at byte %zu is not valid", off);
        size_t room = len - off - COMMIT_LEN;
        if ((size_t)blen > room || align8((size_t)blen) + COMMIT_LEN > room)
            return sl__persist_damaged(p, "the batch at byte %zu runs past the end of the file",
                                       off);
        if (read_records(p, data, off + COMMIT_LEN, (size_t)blen, first, true) < 0) return -1;
        for (size_t i = off + COMMIT_LEN + (size_t)blen;
             i < off + COMMIT_LEN + align8((size_t)blen); i++)
            if (data[i]) return sl__persist_damaged(p, "the padding at byte %zu is not zero", i);
        off += COMMIT_LEN + align8((size_t)blen);
        first = false;
    }
    if (first) return sl__persist_damaged(p, "no snapshot");
    /* After the end only a batch that was never committed may have left bytes (a kill
     * between its copy and its commit word): a committed batch there means a hole. */
    for (size_t q = off + COMMIT_LEN; len - q >= COMMIT_LEN; q += COMMIT_LEN) {
        uint64_t w = word_at(data, q);
        int64_t blen = w ? commit_len(w) : -1;
        if (blen > 0 && (size_t)blen <= len - q - COMMIT_LEN &&
            read_records(p, data, q + COMMIT_LEN, (size_t)blen, false, false) == 0)
            return sl__persist_damaged(
                p,
                "a committed batch at byte %zu follows the end of the journal at "
                "byte %zu (a hole)",
                q, off);
    }
    return 0;
}

/* Reads format 1 (records from byte 8 to the first zero length, no commit words) once,
 * strictly: every record must verify and every byte after the last be zero, since that
 * format cannot tell a torn last write from damage. Returns 0 or -1 with p->damage set. */
static int parse_v1(sl_persist_t *p, const unsigned char *data, size_t len)
{
    size_t off = MAGIC_LEN;
    while (len - off >= HEAD_LEN) {
        uint32_t body_len;
        memcpy(&body_len, data + off, sizeof body_len);
        if (body_len == 0 || body_len > RECORD_MAX || len - off - HEAD_LEN < body_len) break;
        off += HEAD_LEN + body_len;
    }
    if (read_records(p, data, MAGIC_LEN, off - MAGIC_LEN, true, true) < 0) return -1;
    for (size_t i = off; i < len; i++)
        if (data[i])
            return sl__persist_damaged(p, "format 1: byte %zu after the last record is not zero",
                                       i);
    return 0;
}

int sl__persist_parse(sl_persist_t *p, const unsigned char *data, size_t len)
{
    if (len >= MAGIC_LEN && memcmp(data, MAGIC, MAGIC_LEN) == 0) return parse_v2(p, data, len);
    if (len >= MAGIC_LEN && memcmp(data, MAGIC_V1, MAGIC_LEN) == 0) {
        p->was_v1 = true;
        return parse_v1(p, data, len);
    }
    return sl__persist_damaged(p, "not a sluice state file (no SLSTATE2 or SLSTATE1 at its start)");
}
