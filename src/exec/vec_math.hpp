// Vectorized f32 math. (The vectorized Philox stream is in philox.hpp.)
//
// Design: each function is written once, as straight-line code on a SIMD
// register type chosen at compile time from the target macros (simd.hpp;
// AVX-512F: 16 lanes; AVX2 with FMA: 8; otherwise SSE2: 4; other targets: 1
// lane, plain float). Arrays are processed a full register at a time and the
// last n % W elements go through the same code on a zero-padded register (a
// masked load on AVX-512), so element i's result is a pure function of x[i]:
// it does not depend on n, on the start pointer or on how callers split an
// array into chunks. The functions are defined out of line in vec_math.cpp, which is
// compiled with the library's flags, so every caller (reference kernels,
// compiled kernels, tests, benchmarks) runs the same instructions whatever
// flags its own translation unit has; with contraction off there, the bits
// are the same on every FMA target (AVX-512, AVX2) and on every other one
// (SSE2, scalar), checked over all 2^32 inputs.
// Own intrinsics rather than Eigen 3.4's packet math, which is faster for
// erf (3.6x), tanh (2.3x), exp (1.5x) and sigmoid (1.25x), slower for log
// (benchmarks/math_bench.cpp), but unfit as the definition: it computes the
// tail that does not fill a packet with the scalar std:: functions (other
// bits for the same x), and over all floats it is less accurate (tanh 4.8
// ulps, erf 7.4, logistic 8449, exp 4.5 near overflow), does not saturate erf
// to exactly ±1, and gets overflow and denormals wrong (exp(88.4) = inf, log and
// rsqrt of denormals). Ours, over all floats with FMA: exp 1.01 ulps, log
// 0.83, tanh 1.13, sigmoid 1.97, erf 1.33 (bounds in vec_math_test.cpp).
//
// Methods (r: reduced argument; polynomials in Horner form, Cephes' where
// noted, else Chebyshev fits, near-minimax):
//   exp     x = k·ln2 + r, |r| <= ln2/2 (Cody-Waite split), e^r = 1 + r + r²·P5(r) (Cephes),
//           2^k applied in two halves so results reach the denormals exactly.
//   log     x = 2^e·m, m in [√½, √2), log1p(m-1) = f - f²/2 + f³·P8(f) (Cephes).
//   tanh    |x| < 1: x + x³·P7(x²); else 1 - 2/(e^{2|x|} + 1), exactly ±1 from 9.5.
//   sigmoid 1/(1 + e^-x) for x >= 0, e^x/(1 + e^x) for x < 0 (no overflow, denormals
//           kept), corrected for the rounding of the denominator.
//   erf     |x| < 1: x·P6(x²); else 1 - exp(-x² + R8(x)), exactly ±1 from 3.93.
//   sqrt    the correctly rounded instruction (equals f32(sqrt(f64(x)))).
//   rsqrt   in f64 lanes, 1/sqrt(f64(x)) rounded once to f32: the f64 definition.
//   expm1   in f64 lanes: x = k·ln2 + r, e^r - 1 by its Taylor series to r^12 (Estrin's
//           scheme), 2^k·(e^r - 1) + (2^k - 1); rounded once to f32.
//   log1p   in f64 lanes: 1 + x (exact) = 2^e·m, log m = 2·atanh((m-1)/(m+1)) to s^19,
//           plus e·ln2; rounded once. Over all 2^32 floats expm1 equals std::expm1
//           rounded to f32 and log1p differs from std::log1p at two inputs near a tie
//           (at one of them std::log1p's is the misrounded one).
//   sin, cos  in f64 lanes (8 at a time, GCC vector types, no multiply-add:
//           the same bits on every target): x = k·π/2 + r, |r| <= π/4, by
//           x - k·P1 - k·P2 (P1 π/2's first 25 bits, so k·P1 is exact) for
//           |x| < 2^20; beyond, the lane is reduced exactly (Payne-Hanek):
//           x's 24-bit significand times a 96-bit window of 2/π's bits, in
//           integers, gives k mod 4 and r to 64 bits. Then sin r and cos r
//           are musl's f64 polynomials (errors 2^-37.5 and 2^-34.1), chosen
//           and signed by k mod 4, and rounded once to f32.
#pragma once

#include <cstdint>

namespace ws::exec {

// y[i] = f(x[i]) for i < n (f32). x == y (in place) is allowed.
void exp_f32(const float* x, float* y, int64_t n);
void log_f32(const float* x, float* y, int64_t n);
void tanh_f32(const float* x, float* y, int64_t n);
void sigmoid_f32(const float* x, float* y, int64_t n);
void erf_f32(const float* x, float* y, int64_t n);
// expm1 and log1p: in f64 lanes to within 2^-50, rounded once (correctly
// rounded but within 2^-50 of a tie).
void expm1_f32(const float* x, float* y, int64_t n);
void log1p_f32(const float* x, float* y, int64_t n);
// sin and cos of radians, every finite x reduced exactly (sin(±0) = ±0;
// inf and NaN give NaN).
void sin_f32(const float* x, float* y, int64_t n);
void cos_f32(const float* x, float* y, int64_t n);
// tan, the inverse trigonometric and the hyperbolic functions: std:: in
// double, rounded once (not vectorized: models use them rarely).
void tan_f32(const float* x, float* y, int64_t n);
void asin_f32(const float* x, float* y, int64_t n);
void acos_f32(const float* x, float* y, int64_t n);
void atan_f32(const float* x, float* y, int64_t n);
void sinh_f32(const float* x, float* y, int64_t n);
void cosh_f32(const float* x, float* y, int64_t n);
void asinh_f32(const float* x, float* y, int64_t n);
void acosh_f32(const float* x, float* y, int64_t n);
void atanh_f32(const float* x, float* y, int64_t n);
void sqrt_f32(const float* x, float* y, int64_t n);
void rsqrt_f32(const float* x, float* y, int64_t n);

// The register type the functions above were compiled for: "avx512",
// "avx2", "sse2" or "scalar"; its width in f32 lanes; whether multiply-adds
// round once (FMA), which makes exp-based results up to ~1 ulp tighter.
const char* vec_math_isa();
int vec_math_lanes();
bool vec_math_fma();

}  // namespace ws::exec
