// What the tests of our own product loops share: random operands, and a
// check of every bit of a result against what a definition gives.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "exec/dnnl_backend.hpp"

namespace ws::exec::product_checks {

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Runs the op with its scratch followed by a guard it must not touch.
inline std::vector<float> run(const BackendOp& op, const std::vector<float>& a,
                              const std::vector<float>& b, const std::vector<float>& bias,
                              std::vector<float> y, const std::string& what) {
  constexpr size_t kGuard = 256;
  const size_t bytes = size_t(op.scratch_bytes());
  auto* raw = static_cast<std::byte*>(std::aligned_alloc(64, (bytes + kGuard + 63) / 64 * 64));
  std::memset(raw, 0x5a, bytes + kGuard);
  op.run(a.data(), b.data(), y.data(), raw, bias.data());
  for (size_t i = 0; i < kGuard; ++i)
    if (raw[bytes + i] != std::byte{0x5a}) {
      ADD_FAILURE() << what << ": scratch overrun at byte " << bytes + i;
      break;
    }
  std::free(raw);
  return y;
}

inline void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (bits_of(got[i]) != bits_of(want[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the definition gives "
                    << want[i];
      return;
    }
}

}  // namespace ws::exec::product_checks
