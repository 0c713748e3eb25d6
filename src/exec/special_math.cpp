#include "exec/special_math.hpp"

#include <math.h>  // lgamma_r

#include <cmath>
#include <limits>
#include <numbers>

namespace ws::exec {

namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Where the recurrences hand over to the asymptotic series: there the
// series' first omitted term is below 1e-17 of the value.
constexpr double kAsymptotic = 10;

// Σ_k c[k] z^k by Horner's rule, c[0] the constant term.
template <size_t N>
double poly(const double (&c)[N], double z) {
  double p = c[N - 1];
  for (size_t i = N - 1; i-- > 0;) p = p * z + c[i];
  return p;
}

// B_2k / (2k), k = 1..8 (B the Bernoulli numbers): ψ's series.
constexpr double kDigammaSeries[] = {1.0 / 12,  -1.0 / 120,     1.0 / 252, -1.0 / 240,
                                     1.0 / 132, -691.0 / 32760, 1.0 / 12,  -3617.0 / 8160};
// B_2k, k = 1..8: ψ''s series.
constexpr double kTrigammaSeries[] = {1.0 / 6,  -1.0 / 30,     1.0 / 42, -1.0 / 30,
                                      5.0 / 66, -691.0 / 2730, 7.0 / 6,  -3617.0 / 510};

}  // namespace

double lgamma_f64(double x) {
  int sign = 0;
  return ::lgamma_r(x, &sign);
}

double digamma_f64(double x) {
  if (std::isnan(x)) return x;
  if (x == 0) return std::signbit(x) ? kInf : -kInf;
  if (x < 0) {
    if (x == std::trunc(x)) return kNaN;  // a pole (and -inf)
    // tan(πx) = tan(πr), r = x less its nearest integer, exact and within
    // 1/2: πr's rounding stays small beside its distance from the pole
    const double r = x - std::nearbyint(x);
    return digamma_f64(1 - x) - kPi / std::tan(kPi * r);
  }
  double sum = 0;
  for (; x < kAsymptotic; x += 1) sum -= 1 / x;
  if (std::isinf(x)) return x;
  const double z = 1 / (x * x);
  return sum + std::log(x) - 0.5 / x - z * poly(kDigammaSeries, z);
}

double trigamma_f64(double x) {
  if (std::isnan(x)) return x;
  if (x <= 0) {  // (the recurrence serves every positive x: no cancellation there)
    if (std::isinf(x)) return kNaN;
    if (x == std::trunc(x)) return kInf;                       // a pole from both sides
    const double s = std::sin(kPi * (x - std::nearbyint(x)));  // sin²(πx), the shift exact
    return kPi * kPi / (s * s) - trigamma_f64(1 - x);
  }
  double sum = 0;
  for (; x < kAsymptotic; x += 1) sum += 1 / (x * x);
  if (std::isinf(x)) return sum;
  const double z = 1 / (x * x);
  return sum + (1 + 0.5 / x + z * poly(kTrigammaSeries, z)) / x;
}

double erfinv_f64(double x) {
  const double a = std::fabs(x);
  if (!(a <= 1)) return kNaN;
  if (a == 1) return std::copysign(kInf, x);
  if (a == 0) return x;
  // Giles' single-precision approximation, good to about 1e-7 ...
  double w = -std::log((1 - a) * (1 + a));
  double y;
  if (w < 5) {
    w -= 2.5;
    y = poly({1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087,
              -4.39150654e-06, -3.5233877e-06, 3.43273939e-07, 2.81022636e-08},
             w);
  } else {
    w = std::sqrt(w) - 3;
    y = poly({2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844,
              0.00134934322, 0.000100950558, -0.000200214257},
             w);
  }
  y *= a;
  // ... then four Newton steps, each doubling the digits: on erf(y) - a up
  // to 1/2; above, on log erfc(y) - log(1 - a), nearly a quadratic in the
  // tail, where Newton's steps on erfc(y) itself, an exponential, crawl
  // (2e-2 off at 1 - 1e-15 after four).
  const double slope = 2 / std::sqrt(kPi);
  for (int step = 0; step < 4; ++step) {
    const double d = slope * std::exp(-y * y);  // erf'(y)
    if (a > 0.5) {
      const double e = std::erfc(y);
      y += (std::log(e) - std::log1p(-a)) * e / d;
    } else {
      y -= (std::erf(y) - a) / d;
    }
  }
  return std::copysign(y, x);
}

void lgamma_f32(const float* x, float* y, int64_t n) { through_double(x, y, n, lgamma_f64); }
void digamma_f32(const float* x, float* y, int64_t n) { through_double(x, y, n, digamma_f64); }
void trigamma_f32(const float* x, float* y, int64_t n) { through_double(x, y, n, trigamma_f64); }
void erfinv_f32(const float* x, float* y, int64_t n) { through_double(x, y, n, erfinv_f64); }

}  // namespace ws::exec
