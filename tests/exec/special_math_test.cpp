// The gamma family and erfinv against values known in closed form, their
// recurrences and reflections, and their special points (the float64
// sweeps against 50-digit values are tests/python/test_reach.py's).
#include "exec/special_math.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include <gtest/gtest.h>

namespace ws::exec {
namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kEulerGamma = 0.57721566490153286061;
constexpr double kInf64 = std::numeric_limits<double>::infinity();

// |got - want| within `ulps` ulps of `scale` (want's magnitude unless given:
// the size of the terms a value cancels, near digamma's root)
void expect_ulps(double got, double want, double ulps, double scale = 0) {
  EXPECT_LE(std::fabs(got - want), ulps * 0x1p-52 * std::max(std::fabs(want), scale))
      << got << " vs " << want;
}

TEST(SpecialMath, ClosedFormValues) {
  expect_ulps(digamma_f64(1), -kEulerGamma, 2, 2.3);  // the recurrence's terms
  expect_ulps(digamma_f64(0.5), -kEulerGamma - 2 * std::numbers::ln2, 2, 2.3);
  expect_ulps(trigamma_f64(1), kPi * kPi / 6, 2);
  expect_ulps(trigamma_f64(0.5), kPi * kPi / 2, 2);
  expect_ulps(lgamma_f64(0.5), std::log(std::sqrt(kPi)), 2);
  expect_ulps(lgamma_f64(-0.5), std::log(2 * std::sqrt(kPi)), 2);
}

TEST(SpecialMath, RecurrencesHoldAcrossTheHandOverToTheSeries) {
  for (double x = 0.3; x < 30; x += 0.37) {
    expect_ulps(digamma_f64(x + 1), digamma_f64(x) + 1 / x, 8, 2.3);
    expect_ulps(trigamma_f64(x + 1), trigamma_f64(x) - 1 / (x * x), 8);
  }
}

TEST(SpecialMath, ReflectionsHoldForNegativeArguments) {
  for (double x : {-0.3, -1.7, -4.25, -12.6}) {
    expect_ulps(digamma_f64(x), digamma_f64(1 - x) - kPi / std::tan(kPi * x), 64);
    const double s = std::sin(kPi * x);
    expect_ulps(trigamma_f64(x), kPi * kPi / (s * s) - trigamma_f64(1 - x), 64);
  }
}

TEST(SpecialMath, ErfinvInvertsErfUpToItsEnds) {
  for (double y = -5.5; y <= 5.5; y += 0.173) {
    const double x = std::erf(y);
    if (std::fabs(x) == 1) continue;
    // erf's own rounding of x moves y by about ulp(x) / erf'(y)
    const double slack = 0x1p-52 * std::fabs(x) / (2 / std::sqrt(kPi) * std::exp(-y * y));
    EXPECT_NEAR(erfinv_f64(x), y, 4 * 0x1p-52 * std::fabs(y) + 2 * slack) << x;
  }
}

TEST(SpecialMath, PolesEndsAndSignedZerosAreTorchs) {
  EXPECT_EQ(digamma_f64(0.0), -kInf64);
  EXPECT_EQ(digamma_f64(-0.0), kInf64);
  EXPECT_TRUE(std::isnan(digamma_f64(-3)));
  EXPECT_TRUE(std::isnan(digamma_f64(-kInf64)));
  EXPECT_EQ(digamma_f64(kInf64), kInf64);
  EXPECT_EQ(trigamma_f64(0), kInf64);
  EXPECT_EQ(trigamma_f64(-2), kInf64);
  EXPECT_EQ(trigamma_f64(kInf64), 0);
  EXPECT_EQ(lgamma_f64(0), kInf64);
  EXPECT_EQ(lgamma_f64(-4), kInf64);
  EXPECT_EQ(erfinv_f64(1), kInf64);
  EXPECT_EQ(erfinv_f64(-1), -kInf64);
  EXPECT_TRUE(std::isnan(erfinv_f64(1.5)));
  EXPECT_TRUE(std::signbit(erfinv_f64(-0.0)));
  expect_ulps(erfinv_f64(0x1p-1000), 0x1p-1000 * std::sqrt(kPi) / 2, 2);
}

TEST(SpecialMath, FloatArraysAreTheDoubleValuesRoundedOnce) {
  const float x[] = {0.25f, 1.5f, 3.75f, -2.5f, 9.0f};
  float y[5];
  digamma_f32(x, y, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(y[i], float(digamma_f64(double(x[i]))));
  lgamma_f32(x, y, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(y[i], float(lgamma_f64(double(x[i]))));
}

}  // namespace
}  // namespace ws::exec
