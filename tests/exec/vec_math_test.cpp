// The vectorized f32 functions (vec_math.hpp) and Philox stream (philox.hpp)
// through unary_array, the form every kernel calls: error in ulps against the f64
// definition over a dense sweep of all floats, special values, results that
// do not depend on how an array is split, and Philox bit for bit against the
// scalar Random123 block.
#include "exec/vec_math.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "exec/elementwise.hpp"
#include "exec/nn_kernels.hpp"

namespace ws::exec {
namespace {

using ir::Op;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kMinNormal = std::numeric_limits<float>::min();
constexpr float kMinDenormal = std::numeric_limits<float>::denorm_min();
constexpr float kMax = std::numeric_limits<float>::max();

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits(a) == bits(b); }

#define EXPECT_SAME(a, b) EXPECT_PRED2(same, a, b)

// The f64 definition of each function (the old f32 path and the oracle).
template <Op op>
double oracle(double x) {
  return unary_value_f64<op>(x);
}

template <Op op>
float f32(float x) {
  float y;
  unary_array<op>(&x, &y, 1);
  return y;
}

// |y - ref| in units of the last place of f32(ref); 0 when both are the same
// NaN-ness or the same infinity, a huge number for any other mismatch there.
double ulp_error(float y, double ref) {
  if (std::isnan(ref) || std::isnan(y)) return std::isnan(ref) && std::isnan(y) ? 0 : 1e30;
  const float rf = float(ref);
  if (std::isinf(rf) || std::isinf(y)) return y == rf ? 0 : 1e30;
  int e;
  std::frexp(rf == 0 ? ref : double(rf), &e);  // |rf| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 1, -126) - 23);
  return std::fabs(double(y) - ref) / ulp;
}

struct Sweep {
  double max_ulp = 0;
  float worst_x = 0;
  int64_t samples = 0;
};

// Every `stride`-th f32 bit pattern: all signs, binades, denormals, infinities
// and NaNs, ~2^32/stride samples, through the array form in large blocks.
template <Op op>
Sweep sweep_all_floats(uint32_t stride) {
  Sweep s;
  const int64_t block = 1 << 16;
  std::vector<float> x(block), y(block);
  for (uint64_t b = 0; b < (uint64_t(1) << 32);) {
    int64_t n = 0;
    for (; n < block && b < (uint64_t(1) << 32); ++n, b += stride) x[n] = from_bits(uint32_t(b));
    unary_array<op>(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double e = ulp_error(y[i], oracle<op>(double(x[i])));
      if (e > s.max_ulp) s.max_ulp = e, s.worst_x = x[i];
    }
    s.samples += n;
  }
  return s;
}

// Measured over all 2^32 floats, with FMA (AVX-512, AVX2) / without (SSE2):
// exp 1.010 / 0.990, log 0.827 / 0.829, tanh 1.131 / 1.322, sigmoid 1.967 /
// 1.967, erf 1.333 / 2.360 ulps; sqrt and rsqrt are the correctly rounded
// f64 definition. The bounds leave a little room.
template <Op op>
void expect_max_ulp(double with_fma, double without_fma) {
  const double bound = vec_math_fma() ? with_fma : without_fma;
  const Sweep s = sweep_all_floats<op>(251);
  EXPECT_GT(s.samples, int64_t(17000000));
  EXPECT_LE(s.max_ulp, bound) << "at x = " << s.worst_x << " (" << std::hexfloat << s.worst_x
                              << "), " << vec_math_isa();
}

TEST(VecMathUlp, ExpErrorWithinItsBound) { expect_max_ulp<Op::exp>(1.02, 1.0); }
TEST(VecMathUlp, LogErrorWithinItsBound) { expect_max_ulp<Op::log>(0.84, 0.84); }
TEST(VecMathUlp, TanhErrorWithinItsBound) { expect_max_ulp<Op::tanh>(1.14, 1.33); }
TEST(VecMathUlp, SigmoidErrorWithinItsBound) { expect_max_ulp<Op::sigmoid>(1.97, 1.97); }
TEST(VecMathUlp, ErfErrorWithinItsBound) { expect_max_ulp<Op::erf>(1.34, 2.37); }
// sin and cos compute in f64 lanes without multiply-adds: one bound.
TEST(VecMathUlp, SinErrorWithinItsBound) { expect_max_ulp<Op::sin>(0.51, 0.51); }
// expm1 and log1p round once from f64 lanes within 2^-50: correctly rounded
// against the f64 definition (the sweep has no input within 2^-50 of a tie).
TEST(VecMathUlp, Expm1IsCorrectlyRounded) { expect_max_ulp<Op::expm1>(0.5, 0.5); }
TEST(VecMathUlp, Log1pIsCorrectlyRounded) { expect_max_ulp<Op::log1p>(0.5, 0.5); }
TEST(VecMathUlp, CosErrorWithinItsBound) { expect_max_ulp<Op::cos>(0.51, 0.51); }

// sqrt and 1/sqrt round once from the exact value: bit for bit the f64
// definition, for every 31st float.
template <Op op>
void expect_equal_to_f64_definition() {
  const int64_t block = 1 << 16;
  std::vector<float> x(block), y(block);
  int64_t differ = 0;
  for (uint64_t b = 0; b < (uint64_t(1) << 32);) {
    int64_t n = 0;
    for (; n < block && b < (uint64_t(1) << 32); ++n, b += 31)
      x[size_t(n)] = from_bits(uint32_t(b));
    unary_array<op>(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      differ += !same(y[size_t(i)], float(oracle<op>(double(x[size_t(i)]))));
  }
  EXPECT_EQ(differ, 0);
}
TEST(VecMathUlp, SqrtEqualsTheF64Definition) { expect_equal_to_f64_definition<Op::sqrt>(); }
TEST(VecMathUlp, RsqrtEqualsTheF64Definition) { expect_equal_to_f64_definition<Op::rsqrt>(); }

TEST(VecMathUlp, DoubleStaysTheStdFunctions) {
  for (double x : {-3.5, -0.25, 0.0, 1e-300, 0.7, 2.0, 40.0}) {
    EXPECT_EQ(unary_value<Op::exp>(x), std::exp(x));
    EXPECT_EQ(unary_value<Op::tanh>(x), std::tanh(x));
    EXPECT_EQ(unary_value<Op::erf>(x), std::erf(x));
  }
  EXPECT_EQ(unary_value<Op::log>(0.3), std::log(0.3));
}

// ---------------------------------------------------------------------------
// Special values, as the std:: functions give them.

TEST(VecMathSpecial, NaNInGivesNaNOut) {
  const float nans[] = {kNaN, -kNaN, from_bits(0x7f800001u), from_bits(0xffc12345u)};
  for (float n : nans) {
    EXPECT_TRUE(std::isnan(f32<Op::exp>(n)));
    EXPECT_TRUE(std::isnan(f32<Op::log>(n)));
    EXPECT_TRUE(std::isnan(f32<Op::tanh>(n)));
    EXPECT_TRUE(std::isnan(f32<Op::sigmoid>(n)));
    EXPECT_TRUE(std::isnan(f32<Op::erf>(n)));
    EXPECT_TRUE(std::isnan(f32<Op::sqrt>(n)));
    EXPECT_TRUE(std::isnan(f32<Op::rsqrt>(n)));
    EXPECT_TRUE(std::isnan(f32<Op::neg>(n)));
  }
}

TEST(VecMathSpecial, ExpOverflowsToInfAndUnderflowsThroughDenormalsToZero) {
  EXPECT_SAME(f32<Op::exp>(kInf), kInf);
  EXPECT_SAME(f32<Op::exp>(-kInf), 0.0f);
  EXPECT_SAME(f32<Op::exp>(0.0f), 1.0f);
  EXPECT_SAME(f32<Op::exp>(-0.0f), 1.0f);
  EXPECT_SAME(f32<Op::exp>(kMinDenormal), 1.0f);
  EXPECT_TRUE(std::isfinite(f32<Op::exp>(88.72f)));  // near the largest finite result
  EXPECT_LE(ulp_error(f32<Op::exp>(88.72f), std::exp(double(88.72f))), 1.02);
  EXPECT_SAME(f32<Op::exp>(88.73f), kInf);
  EXPECT_SAME(f32<Op::exp>(1000.0f), kInf);
  EXPECT_SAME(f32<Op::exp>(kMax), kInf);
  // Denormal results, down to the smallest one, then 0.
  for (float x : {-87.5f, -90.0f, -95.0f, -100.0f, -103.0f, -103.9f, -103.97f}) {
    const float y = f32<Op::exp>(x);
    EXPECT_GT(y, 0.0f) << x;
    EXPECT_LT(y, kMinNormal) << x;
    EXPECT_LE(ulp_error(y, std::exp(double(x))), 1.02) << x;
  }
  EXPECT_SAME(f32<Op::exp>(-103.98f), 0.0f);
  EXPECT_SAME(f32<Op::exp>(-200.0f), 0.0f);
  EXPECT_SAME(f32<Op::exp>(-kMax), 0.0f);
}

TEST(VecMathSpecial, Expm1AndLog1pAtTheirEndsAndZerosAreStds) {
  for (float x : {0.0f,   -0.0f,    kMinDenormal,     -kMinDenormal, kMinNormal, 1e-30f,
                  -3e-9f, 0x1p-29f, -0x1.fffffep-30f, 0.3466f,       -0.3466f,   0.3467f,
                  1.0f,   -1.0f,    88.72f,           88.73f,        -17.0f,     -17.4f,
                  -87.0f, -104.0f,  -111.0f,          101.0f,        kMax,       -kMax,
                  kInf,   -kInf})
    EXPECT_SAME(f32<Op::expm1>(x), float(std::expm1(double(x)))) << std::hexfloat << x;
  for (float x : {0.0f,         -0.0f,
                  kMinDenormal, -kMinDenormal,
                  1e-30f,       -3e-9f,
                  0x1p-29f,     -0x1.fffffep-30f,
                  -0x1p-29f,    0.4142135f,
                  -0.2928932f,  1.0f,
                  -0.5f,        -0x1.fffffep-1f,
                  -1.0f,        -1.5f,
                  1e30f,        kMax,
                  kInf,         -kInf})
    EXPECT_SAME(f32<Op::log1p>(x), float(std::log1p(double(x)))) << std::hexfloat << x;
  const float nans[] = {kNaN, -kNaN, from_bits(0x7f800001u), from_bits(0xffc12345u)};
  for (float n : nans) {
    EXPECT_TRUE(std::isnan(f32<Op::expm1>(n)));
    EXPECT_TRUE(std::isnan(f32<Op::log1p>(n)));
  }
}

TEST(VecMathSpecial, LogOfZeroNegativeInfAndDenormals) {
  EXPECT_SAME(f32<Op::log>(0.0f), -kInf);
  EXPECT_SAME(f32<Op::log>(-0.0f), -kInf);
  EXPECT_SAME(f32<Op::log>(1.0f), 0.0f);
  EXPECT_SAME(f32<Op::log>(kInf), kInf);
  EXPECT_TRUE(std::isnan(f32<Op::log>(-1.0f)));
  EXPECT_TRUE(std::isnan(f32<Op::log>(-kMinDenormal)));
  EXPECT_TRUE(std::isnan(f32<Op::log>(-kInf)));
  EXPECT_SAME(f32<Op::log>(kMinDenormal), float(std::log(double(kMinDenormal))));
  EXPECT_SAME(f32<Op::log>(kMax), float(std::log(double(kMax))));
  for (float x : {kMinDenormal, 3 * kMinDenormal, 1e-40f, kMinNormal / 2, kMinNormal})
    EXPECT_LE(ulp_error(f32<Op::log>(x), std::log(double(x))), 0.85) << x;
}

TEST(VecMathSpecial, TanhKeepsSignedZeroAndSaturatesExactly) {
  EXPECT_SAME(f32<Op::tanh>(0.0f), 0.0f);
  EXPECT_SAME(f32<Op::tanh>(-0.0f), -0.0f);
  EXPECT_SAME(f32<Op::tanh>(kMinDenormal), kMinDenormal);
  EXPECT_SAME(f32<Op::tanh>(-1e-30f), -1e-30f);
  EXPECT_SAME(f32<Op::tanh>(kInf), 1.0f);
  EXPECT_SAME(f32<Op::tanh>(-kInf), -1.0f);
  // f32(tanh(x)) is 1 from x = 9.01 on; ours from 9.5 at the latest.
  for (float x = 9.5f; x < 1e6f; x *= 1.37f) {
    EXPECT_SAME(f32<Op::tanh>(x), 1.0f);
    EXPECT_SAME(f32<Op::tanh>(-x), -1.0f);
  }
  EXPECT_SAME(f32<Op::tanh>(kMax), 1.0f);
}

TEST(VecMathSpecial, SigmoidSaturatesExactlyAndKeepsDenormals) {
  EXPECT_SAME(f32<Op::sigmoid>(0.0f), 0.5f);
  EXPECT_SAME(f32<Op::sigmoid>(-0.0f), 0.5f);
  EXPECT_SAME(f32<Op::sigmoid>(kInf), 1.0f);
  EXPECT_SAME(f32<Op::sigmoid>(-kInf), 0.0f);
  EXPECT_SAME(f32<Op::sigmoid>(kMax), 1.0f);
  EXPECT_SAME(f32<Op::sigmoid>(-kMax), 0.0f);
  for (float x = 17.4f; x < 1e6f; x *= 1.37f) EXPECT_SAME(f32<Op::sigmoid>(x), 1.0f);
  // e^x underflows gradually: no early flush to 0 where 1/(1 + e^-x) would
  // give e^-x = inf.
  for (float x : {-88.0f, -90.0f, -95.0f, -100.0f, -103.9f}) {
    const float y = f32<Op::sigmoid>(x);
    EXPECT_GT(y, 0.0f) << x;
    EXPECT_LE(ulp_error(y, oracle<Op::sigmoid>(double(x))), 1.97) << x;
  }
  EXPECT_SAME(f32<Op::sigmoid>(-104.0f), 0.0f);
}

TEST(VecMathSpecial, ErfKeepsSignedZeroAndSaturatesExactly) {
  EXPECT_SAME(f32<Op::erf>(0.0f), 0.0f);
  EXPECT_SAME(f32<Op::erf>(-0.0f), -0.0f);
  EXPECT_SAME(f32<Op::erf>(kInf), 1.0f);
  EXPECT_SAME(f32<Op::erf>(-kInf), -1.0f);
  EXPECT_SAME(f32<Op::erf>(kMax), 1.0f);
  // f32(erf(x)) is 1 from x = 3.9193 on; ours from 3.93 at the latest.
  for (float x = 3.93f; x < 1e6f; x *= 1.37f) {
    EXPECT_SAME(f32<Op::erf>(x), 1.0f);
    EXPECT_SAME(f32<Op::erf>(-x), -1.0f);
  }
  // Tiny and denormal x: erf(x) = 2x/sqrt(pi), not flushed.
  for (float x : {kMinDenormal, 1e-40f, kMinNormal, 1e-30f, -1e-20f})
    EXPECT_LE(ulp_error(f32<Op::erf>(x), std::erf(double(x))), 1.0) << x;
}

TEST(VecMathSpecial, SqrtAndRsqrtOfZeroNegativeAndInf) {
  EXPECT_SAME(f32<Op::sqrt>(0.0f), 0.0f);
  EXPECT_SAME(f32<Op::sqrt>(-0.0f), -0.0f);
  EXPECT_SAME(f32<Op::sqrt>(kInf), kInf);
  EXPECT_TRUE(std::isnan(f32<Op::sqrt>(-1.0f)));
  EXPECT_SAME(f32<Op::rsqrt>(0.0f), kInf);
  EXPECT_SAME(f32<Op::rsqrt>(-0.0f), -kInf);
  EXPECT_SAME(f32<Op::rsqrt>(kInf), 0.0f);
  EXPECT_TRUE(std::isnan(f32<Op::rsqrt>(-1.0f)));
  EXPECT_SAME(f32<Op::rsqrt>(4.0f), 0.5f);
  EXPECT_SAME(f32<Op::neg>(0.0f), -0.0f);
}

TEST(VecMathSpecial, SinAndCosKeepSignedZeroAndReduceHugeArguments) {
  EXPECT_SAME(f32<Op::sin>(0.0f), 0.0f);
  EXPECT_SAME(f32<Op::sin>(-0.0f), -0.0f);
  EXPECT_SAME(f32<Op::sin>(-kMinDenormal), -kMinDenormal);
  EXPECT_SAME(f32<Op::cos>(-0.0f), 1.0f);
  for (float v : {kInf, -kInf, kNaN}) {
    EXPECT_TRUE(std::isnan(f32<Op::sin>(v))) << v;
    EXPECT_TRUE(std::isnan(f32<Op::cos>(v))) << v;
  }
  // Near multiples of π/2 (the f32 nearest π, 2^20, the largest floats) the
  // result is the small remainder, exact only with an exact reduction.
  for (float v : {3.14159274f, 1048576.0f, 1048575.9f, 1.0e22f, 6.0e30f, kMax, -kMax,
                  from_bits(0x5922aa58), from_bits(0x6c1b5c5c)}) {
    EXPECT_LE(ulp_error(f32<Op::sin>(v), std::sin(double(v))), 0.51) << std::hexfloat << v;
    EXPECT_LE(ulp_error(f32<Op::cos>(v), std::cos(double(v))), 0.51) << std::hexfloat << v;
  }
}

// ---------------------------------------------------------------------------
// Element i's result is a function of x[i] alone.

// Values from every range the functions treat differently, plus specials.
std::vector<float> mixed_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> small(-5.0f, 5.0f), wide(-120.0f, 120.0f);
  std::uniform_int_distribution<uint32_t> any_bits;
  const float specials[] = {0.0f,          -0.0f, kInf,  -kInf, kNaN, kMinDenormal,
                            -kMinDenormal, 1.0f,  -1.0f, 3.93f, 9.5f, -104.0f};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (rng() % 4) {
      case 0: x[size_t(i)] = small(rng); break;
      case 1: x[size_t(i)] = wide(rng); break;
      case 2: x[size_t(i)] = from_bits(any_bits(rng)); break;
      default: x[size_t(i)] = specials[rng() % std::size(specials)];
    }
  }
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <Op op>
void expect_split_independent() {
  const int64_t n = 4099;
  std::vector<float> x = mixed_values(n, 17);
  std::vector<float> whole(static_cast<size_t>(n));
  unary_array<op>(x.data(), whole.data(), n);

  // Random splits: chunks of any length starting anywhere (unaligned).
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> pieces(static_cast<size_t>(n));
    for (int64_t i = 0; i < n;) {
      const int64_t len = std::min<int64_t>(n - i, int64_t(rng() % 70));
      unary_array<op>(x.data() + i, pieces.data() + i, len);
      i += len;
    }
    ASSERT_TRUE(same_bits(pieces, whole)) << "split " << trial;
  }
  // One element at a time, and through unary_value.
  std::vector<float> ones(static_cast<size_t>(n)), values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    unary_array<op>(&x[size_t(i)], &ones[size_t(i)], 1);
    values[size_t(i)] = unary_value<op>(x[size_t(i)]);
  }
  EXPECT_TRUE(same_bits(ones, whole));
  EXPECT_TRUE(same_bits(values, whole));
  // Every length around the register width, at every start offset.
  const int64_t w = vec_math_lanes();
  for (int64_t start = 0; start < w; ++start)
    for (int64_t len = 0; len <= 3 * w + 1; ++len) {
      std::vector<float> y(static_cast<size_t>(len));
      unary_array<op>(x.data() + start, y.data(), len);
      ASSERT_TRUE(std::equal(y.begin(), y.end(), whole.begin() + start,
                             [](float a, float b) { return bits(a) == bits(b); }))
          << "start " << start << " length " << len;
    }
  // In place.
  std::vector<float> in_place = x;
  unary_array<op>(in_place.data(), in_place.data(), n);
  EXPECT_TRUE(same_bits(in_place, whole));
}

TEST(VecMathSplit, ExpResultsDoNotDependOnTheSplit) { expect_split_independent<Op::exp>(); }
TEST(VecMathSplit, LogResultsDoNotDependOnTheSplit) { expect_split_independent<Op::log>(); }
TEST(VecMathSplit, TanhResultsDoNotDependOnTheSplit) { expect_split_independent<Op::tanh>(); }
TEST(VecMathSplit, SigmoidResultsDoNotDependOnTheSplit) { expect_split_independent<Op::sigmoid>(); }
TEST(VecMathSplit, ErfResultsDoNotDependOnTheSplit) { expect_split_independent<Op::erf>(); }
TEST(VecMathSplit, SqrtResultsDoNotDependOnTheSplit) { expect_split_independent<Op::sqrt>(); }
TEST(VecMathSplit, RsqrtResultsDoNotDependOnTheSplit) { expect_split_independent<Op::rsqrt>(); }
TEST(VecMathSplit, SinResultsDoNotDependOnTheSplit) { expect_split_independent<Op::sin>(); }
TEST(VecMathSplit, CosResultsDoNotDependOnTheSplit) { expect_split_independent<Op::cos>(); }
TEST(VecMathSplit, Expm1ResultsDoNotDependOnTheSplit) { expect_split_independent<Op::expm1>(); }
TEST(VecMathSplit, Log1pResultsDoNotDependOnTheSplit) { expect_split_independent<Op::log1p>(); }
TEST(VecMathSplit, NegResultsDoNotDependOnTheSplit) { expect_split_independent<Op::neg>(); }

// ---------------------------------------------------------------------------
// Philox: the SIMD stream is the scalar block's, bit for bit.

// The definition (nn_kernels.hpp), one scalar block per element.
template <class T>
std::vector<T> philox_scalar(uint64_t seed, uint64_t offset, int64_t n) {
  std::vector<T> out(static_cast<size_t>(n));
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = offset + uint64_t(i);
    const uint32_t ctr[4] = {uint32_t(c), uint32_t(c >> 32), 0, 0};
    uint32_t r[4];
    philox4x32_10(ctr, key, r);
    out[size_t(i)] = T(r[0] >> 8) * T(1.0 / 16777216.0);
  }
  return out;
}

template <class T>
void expect_philox_matches_scalar(uint64_t seed, uint64_t offset, int64_t n) {
  std::vector<T> got(static_cast<size_t>(n));
  philox_uniform<T>(seed, offset, got.data(), n);
  const std::vector<T> want = philox_scalar<T>(seed, offset, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[size_t(i)], want[size_t(i)])
        << "seed " << seed << " offset " << offset << " n " << n << " element " << i;
}

TEST(VecMathPhilox, EqualsTheScalarBlockForManySeedsOffsetsAndLengths) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t seed = trial < 2 ? uint64_t(trial) : rng();
    const uint64_t offset = trial % 3 == 0 ? uint64_t(trial) : rng();
    const int64_t n = int64_t(rng() % 300);
    expect_philox_matches_scalar<float>(seed, offset, n);
    expect_philox_matches_scalar<double>(seed, offset, n);
  }
  expect_philox_matches_scalar<float>(42, 0, 100000);
  expect_philox_matches_scalar<double>(0xffffffffffffffffull, 7, 100000);
}

TEST(VecMathPhilox, CounterCarriesAcrossTwoToTheThirtyTwoAndWraps) {
  for (uint64_t near : {0xffffffffull, 0x1ffffffffull, 0xffffffffffffffffull}) {
    for (int64_t back = 0; back < 40; ++back) {
      expect_philox_matches_scalar<float>(3, near - uint64_t(back), 80);
      expect_philox_matches_scalar<double>(0x123456789abcdefull, near - uint64_t(back), 80);
    }
  }
}

TEST(VecMathPhilox, ResultsDoNotDependOnTheSplit) {
  const int64_t n = 2000;
  std::vector<float> whole(static_cast<size_t>(n)), pieces(static_cast<size_t>(n));
  philox_uniform<float>(99, 0xfffffff0ull, whole.data(), n);
  std::mt19937 rng(3);
  for (int64_t i = 0; i < n;) {
    const int64_t len = std::min<int64_t>(n - i, int64_t(rng() % 50));
    philox_uniform<float>(99, 0xfffffff0ull + uint64_t(i), pieces.data() + i, len);
    i += len;
  }
  EXPECT_TRUE(same_bits(pieces, whole));
}

}  // namespace
}  // namespace ws::exec
