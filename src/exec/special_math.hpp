// The special functions of probability densities (the gamma family, the
// inverse error function), in double: each op's f64 definition, and its f32
// definition rounded once from it. Not vectorized: models call them on
// parameters and small tensors (a Gamma or Beta log-density, a Dirichlet
// divergence), not on activations.
//
//   lgamma    log |Γ(x)|: glibc's lgamma_r (the reentrant form: lgamma writes
//             the global signgam, a race between threads); +inf at 0 and at
//             the negative integers.
//   digamma   ψ(x) = Γ'(x)/Γ(x): x < 0 by reflection, ψ(1-x) - π/tan(πr), r
//             x less its nearest integer (exact: accurate beside the poles);
//             then ψ(x) = ψ(x+n) - Σ 1/(x+k) up to x+n >= 10, and there the
//             asymptotic series ln x - 1/(2x) - Σ B_2k / (2k x^2k) to k = 8
//             (its first omitted term is below 1e-18 of the sum). ψ(±0) =
//             ∓inf, NaN at the negative integers and at -inf, as torch.
//   trigamma  ψ'(x): x < 0 by reflection, π²/sin²(πx) - ψ'(1-x); then
//             ψ'(x) = ψ'(x+n) + Σ 1/(x+k)² up to x+n >= 10, and there
//             1/x + 1/(2x²) + Σ B_2k / x^(2k+1) to k = 8. +inf at the poles
//             (0 and the negative integers), NaN at -inf.
//   erfinv    y with erf(y) = x for x in (-1, 1): a rational first guess
//             (Giles' single-precision approximation), then four Newton
//             steps (on log erfc(y) above 1/2); ±inf at ±1, NaN outside.
#pragma once

#include <cstdint>

namespace ws::exec {

// y[i] = f(x[i]) computed in double, rounded once to float (special_math.cpp
// and vec_math.cpp: the functions without a float kernel of their own).
template <class F>
void through_double(const float* x, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(f(double(x[i])));
}

double lgamma_f64(double x);
double digamma_f64(double x);
double trigamma_f64(double x);
double erfinv_f64(double x);

// y[i] = f(double(x[i])) rounded once to f32. x == y (in place) is allowed.
void lgamma_f32(const float* x, float* y, int64_t n);
void digamma_f32(const float* x, float* y, int64_t n);
void trigamma_f32(const float* x, float* y, int64_t n);
void erfinv_f32(const float* x, float* y, int64_t n);

}  // namespace ws::exec
