/* mix.h - a 64-bit finaliser (MurmurHash3's fmix64): spreads every input bit over every
 * output bit. The hash map's key mixer (map.c) and the emulator's deterministic filler. */
#ifndef SL_COMMON_MIX_H
#define SL_COMMON_MIX_H

#include <stdint.h>

static inline uint64_t sl_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

#endif /* SL_COMMON_MIX_H */
