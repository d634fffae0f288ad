/* A small deterministic RNG for data order and the generated corpus.
 * splitmix64: integer-only, so sequences are identical on every platform. */
#ifndef VRAM_TRAIN_RNG_H
#define VRAM_TRAIN_RNG_H

#include <stdint.h>

typedef struct vr_rng {
    uint64_t s;
} vr_rng;

#define VR_RNG_GAMMA 0x9E3779B97F4A7C15ull /* the state's step per draw */

static inline vr_rng vr_rng_seed(uint64_t seed) { return (vr_rng){seed ^ VR_RNG_GAMMA}; }

/* r after `draws` more draws (without making them). */
static inline vr_rng vr_rng_jump(vr_rng r, uint64_t draws) { return (vr_rng){r.s + draws * VR_RNG_GAMMA}; }

static inline uint64_t vr_rng_next(vr_rng *r)
{
    uint64_t z = (r->s += VR_RNG_GAMMA);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) for n >= 1 (modulo bias is below 2^-40 for n < 2^24). */
static inline uint64_t vr_rng_below(vr_rng *r, uint64_t n) { return vr_rng_next(r) % n; }

#endif
