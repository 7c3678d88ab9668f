// rng.h — the rank's random numbers: a splitmix64 stream (counter-based, so a stream
// can be derived from (seed, purpose, index) without touching any other state).
#ifndef TB_CORE_RNG_H
#define TB_CORE_RNG_H

#include <stdint.h>

typedef struct tb_rng {
    uint64_t state;
} tb_rng;

static inline uint64_t tb_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Mixes several values into one seed (e.g. tb_seed_mix(seed, "params", tensor index)).
static inline uint64_t tb_seed_mix(uint64_t a, uint64_t b) {
    uint64_t s = a ^ (b * 0xd1b54a32d192ed03ull);
    return tb_splitmix64(&s);
}

static inline void tb_rng_init(tb_rng *r, uint64_t seed) { r->state = seed; }
static inline uint64_t tb_rng_u64(tb_rng *r) { return tb_splitmix64(&r->state); }
// Uniform in [0, 1) with 24 random bits.
static inline float tb_rng_uniform(tb_rng *r) { return (float)(tb_rng_u64(r) >> 40) * 0x1p-24f; }
// Standard normal (Box–Muller; one draw per call, the pair's second value discarded).
float tb_rng_normal(tb_rng *r);

#endif
