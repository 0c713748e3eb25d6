// Counter-based uniform numbers: Philox-4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11; constants as in Random123).
#pragma once

#include <cstdint>

namespace ws::exec {

// Counter-based uniform numbers in [0, 1): element i is a pure function of
// (seed, offset + i) through Philox-4x32-10 (key = seed, counter = offset + i
// as a 64-bit value in the low two words), first output word, top 24 bits
// scaled by 2^-24. The same (seed, offset) gives the same numbers in any
// kernel, any mode, any thread split.
template <class T>
void philox_uniform(uint64_t seed, uint64_t offset, T* out, int64_t n);
// One Philox-4x32-10 block: the four output words for a counter and key
// (Random123's philox4x32_R(10, ...)); philox_uniform is built on it.
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

}  // namespace ws::exec
