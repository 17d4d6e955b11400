/* fuzz_state_file.c - libFuzzer target for the memory backend's state-file reader
 * (src/backend/persist_read.c) and the engine's restore it feeds (persist.c, and
 * src/engine/snapshot.c behind it).
 *
 * The first byte picks the mode. Raw (low bit 0): the rest is a file as found on disk.
 * Framed (low bit 1): the rest is record bodies (u16 length, little-endian, then that
 * many bytes, the first the record's type; a length of 0 closes a batch), which the
 * target frames into a format-2 file with valid checksums and commit words
 * (docs/server.md "Format 2"), so the fuzzer reaches every record's fields and the
 * engine's restore, not only the checksums.
 *
 * Beyond memory errors the target checks the contract: a file found damaged restores
 * nothing (no pool, no lease, no calibration) and says why; a file read whole restores
 * into an engine whose invariants hold (sl_engine_check); and a framed file cut by one
 * byte, or with one bit flipped in what it committed, is never read as whole. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "persist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define T0       1796000000.0
#define FILE_MAX (1u << 17)

static const char *const pools[] = {"default", "p2"};

static sl_engine_t *engine(void)
{
    sl_engine_t *e = sl_engine_new(NULL);
    if (!e) abort();
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = 600000;
    cfg.concurrency = 4;
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++)
        if (sl_engine_configure_pool(e, pools[i], &cfg, T0) != SL_OK) abort();
    return e;
}

/* Reads data[0, len) as a state file and restores it; returns whether it was read whole. */
static bool read_and_restore(const uint8_t *data, size_t len)
{
    sl_persist_t *p = sl__persist_read_bytes(data, len);
    if (!p) return false;
    sl_engine_t *e = engine();
    uint64_t floor = sl__persist_id_floor(p);
    bool based = sl_engine_set_id_base(e, floor < SL_ID_BASE_MAX ? floor : SL_ID_BASE_MAX) == SL_OK;
    bool whole = sl__persist_found(p) == SL_PERSIST_LOADED;
    size_t restored = 0, dropped = 0, pools_back = 0;
    for (size_t i = 0; based && i < sizeof pools / sizeof pools[0]; i++)
        pools_back += sl__persist_restore_pool(p, e, pools[i], T0);
    sl__persist_restore_rest(p, e, T0 + 1, &restored, &dropped);
    if (!whole && (pools_back || restored || dropped || !*sl__persist_damage(p))) abort();
    if (sl_engine_check(e) != SL_OK) abort();
    sl__persist_free(p);
    sl_engine_free(e);
    return whole;
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

typedef struct file {
    uint8_t b[FILE_MAX];
    size_t n;
    size_t batch; /* offset of the open batch's commit word */
} file_t;

static void put(file_t *f, const void *v, size_t n)
{
    memcpy(f->b + f->n, v, n);
    f->n += n;
}

static void put_record(file_t *f, const uint8_t *body, size_t n)
{
    uint32_t len = (uint32_t)n;
    uint64_t sum = fnv1a(body, n);
    put(f, &len, sizeof len);
    put(f, &sum, sizeof sum);
    put(f, body, n);
}

static void batch_open(file_t *f)
{
    static const uint8_t zero[8];
    f->batch = f->n;
    put(f, zero, sizeof zero);
}

/* Writes the open batch's commit word and its padding (an empty batch is taken back). */
static void batch_close(file_t *f)
{
    uint32_t len = (uint32_t)(f->n - f->batch - 8);
    if (len == 0) {
        f->n = f->batch;
        return;
    }
    uint64_t word = (uint64_t)len | ((uint64_t)(uint32_t)~len << 32);
    memcpy(f->b + f->batch, &word, sizeof word);
    while (f->n % 8)
        f->b[f->n++] = 0;
}

/* Frames the chunks of in[0, n) into a format-2 file in f; returns the end of what was
 * committed (where the zero commit word is). */
static size_t frame(file_t *f, const uint8_t *in, size_t n)
{
    f->n = 24; /* the head, below */
    batch_open(f);
    uint8_t reserve[9] = {'I'};
    uint64_t ids = 1u << 20;
    memcpy(reserve + 1, &ids, sizeof ids);
    put_record(f, reserve, sizeof reserve);
    bool first = true;
    size_t i = 0;
    while (i < n) {
        size_t len = in[i++];
        if (i < n) len |= (size_t)in[i++] << 8;
        if (len > n - i) len = n - i;
        if (len == 0) { /* a batch ends */
            if (first) put_record(f, (const uint8_t *)"S", 1);
            first = false;
            batch_close(f);
            batch_open(f);
            continue;
        }
        put_record(f, in + i, len);
        i += len;
    }
    if (first) put_record(f, (const uint8_t *)"S", 1);
    batch_close(f);
    size_t end = f->n;
    static const uint8_t zeros[16];
    put(f, zeros, sizeof zeros); /* the zero commit word and a little room */
    uint64_t len64 = f->n;
    memcpy(f->b, "SLSTATE2", 8);
    memcpy(f->b + 8, &len64, sizeof len64);
    uint64_t sum = fnv1a(f->b, 16);
    memcpy(f->b + 16, &sum, sizeof sum);
    return end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!(data[0] & 1)) {
        read_and_restore(data + 1, size - 1);
        return 0;
    }
    if (size > 8192)
        return 0; /* the frame fits FILE_MAX: at most 4096 chunks, 20 bytes more each */
    static file_t f;
    size_t end = frame(&f, data + 1, size - 1);
    read_and_restore(f.b, f.n);
    if (read_and_restore(f.b, f.n - 1)) abort(); /* cut by one byte */
    size_t at = (size * 2654435761u + data[size - 1]) % end;
    f.b[at] ^= (uint8_t)(1u << (data[0] >> 5));
    if (read_and_restore(f.b, f.n)) abort(); /* one bit flipped in what was committed */
    return 0;
}
