// Host random numbers, for everything the library draws outside a graph
// (initial weights, text windows, random batches, sampled text). Graphs draw
// from the Philox stream instead (exec/philox.hpp), which kernels compute.
//
// splitmix64 (Steele, Lea and Flood 2014; the seeding generator of xoshiro)
// is a fully specified stream, so the same seed gives the same numbers on
// every platform and standard library.
#pragma once

#include <cstdint>

namespace ws::base {

// A uniform double in [0, 1) from the top 53 bits of a 64-bit draw: the
// same value for the same bits on every standard library (unlike
// std::uniform_real_distribution).
inline double unit_double(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

// splitmix64's output function: a bijection on 64-bit values.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }

  // A uniform integer in [0, n) without bias: draws below 2^64 mod n are
  // rejected, leaving a range that is a multiple of n.
  uint64_t below(uint64_t n) {
    uint64_t reject_below = (0 - n) % n;  // 2^64 mod n
    uint64_t x = next();
    while (x < reject_below) x = next();
    return x % n;
  }
  double uniform() { return unit_double(next()); }

 private:
  uint64_t state_;
};

}  // namespace ws::base
