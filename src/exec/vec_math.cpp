// The functions of vec_math.hpp, written once against the SIMD layer
// (simd.hpp), which turns contraction off for this file.
#include "exec/simd.hpp"

#include <cmath>
#include <limits>

#include "exec/vec_math.hpp"

namespace ws::exec {
namespace {

using namespace simd;

// ---------------------------------------------------------------------------
// Shared pieces.

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline F abs(F a) { return as_float(andi(as_int(a), seti(0x7fffffff))); }
inline F neg(F a) { return as_float(xori(as_int(a), seti(int32_t(0x80000000u)))); }
// |a| with the sign of s.
inline F with_sign_of(F a, F s) {
  return as_float(
      ori(andi(as_int(a), seti(0x7fffffff)), andi(as_int(s), seti(int32_t(0x80000000u)))));
}
// NaN lanes of x pass through (quieted), the others take r.
inline F keep_nan(F x, F r) { return select(isnan(x), add(x, x), r); }

// Horner: c[0]·t^(N-1) + ... + c[N-1].
template <size_t N>
inline F poly(F t, const float (&c)[N]) {
  F p = set(c[0]);
  for (size_t k = 1; k < N; ++k) p = fma(p, t, set(c[k]));
  return p;
}

// 2^n for integer lanes n in [-126, 127].
inline F pow2i(I n) { return as_float(slli<23>(addi(n, seti(127)))); }

// ln2 = kLn2Hi + kLn2Lo, kLn2Hi with 9 significant bits so k·kLn2Hi is exact.
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;

// e^r = 1 + r + r²·P(r) on |r| <= ln2/2 (Cephes expf).
constexpr float kExpP[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                           4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// e^x for x in [-104, 89] (kWide: the result may overflow to inf or be
// denormal or 0, rounded once) or x in [-87, 88] (!kWide, one scaling).
template <bool kWide>
inline F exp_reduced(F x) {
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: t's low bits are round(x·log2e)
  const F t = fma(x, set(1.44269504088896341f), set(kRound));
  const F k = sub(t, set(kRound));
  const I n = subi(as_int(t), as_int(set(kRound)));
  F r = fma(k, set(-kLn2Hi), x);
  r = fma(k, set(-kLn2Lo), r);
  const F y = add(fma(poly(r, kExpP), mul(r, r), r), set(1.0f));
  if constexpr (kWide) {
    // 2^n in two halves, each a normal number; only the last product rounds.
    const I n1 = srai<1>(n);
    return mul(mul(y, pow2i(n1)), pow2i(subi(n, n1)));
  } else {
    return mul(y, pow2i(n));
  }
}

// ---------------------------------------------------------------------------
// The functions on one register.

inline F exp_v(F x) {
  // Below -104 the result rounds to 0, above 89 to inf.
  const F r = exp_reduced<true>(min(max(x, set(-104.0f)), set(89.0f)));
  return keep_nan(x, r);
}

// log1p(f) = f - f²/2 + f³·P(f) on f in [√½ - 1, √2 - 1] (Cephes logf).
constexpr float kLogP[] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,
                           -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                           2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};

inline F log_v(F x) {
  // Denormals are scaled into the normal range first.
  const M tiny = lt(x, set(std::numeric_limits<float>::min()));
  const F xs = select(tiny, mul(x, set(8388608.0f)), x);  // 2^23
  const I bits = as_int(xs);
  F e = to_float(subi(srli<23>(bits), seti(127)));
  e = select(tiny, sub(e, set(23.0f)), e);
  F m = as_float(ori(andi(bits, seti(0x007fffff)), seti(0x3f800000)));  // [1, 2)
  const M big = gt(m, set(1.41421356f));
  m = select(big, mul(m, set(0.5f)), m);
  e = select(big, add(e, set(1.0f)), e);
  const F f = sub(m, set(1.0f));
  const F z = mul(f, f);
  F y = mul(mul(poly(f, kLogP), f), z);
  y = fma(e, set(kLn2Lo), y);
  y = fma(z, set(-0.5f), y);
  F r = add(f, y);
  r = fma(e, set(kLn2Hi), r);
  r = select(eq(x, set(0.0f)), set(-kInf), r);
  r = select(eq(x, set(kInf)), set(kInf), r);
  r = select(lt(x, set(0.0f)), set(kNaN), r);
  return keep_nan(x, r);
}

// tanh(x) = x + x³·Q(x²) on |x| < 1.
constexpr float kTanhQ[] = {1.4279318800e-04f,  -9.2350084635e-04f, 3.2068033868e-03f,
                            -8.6978475928e-03f, 2.1829548843e-02f,  -5.3963414754e-02f,
                            1.3333310656e-01f,  -3.3333333157e-01f};

inline F tanh_v(F x) {
  const F a = abs(x);
  const F u = mul(x, x);
  const F small = fma(mul(x, u), poly(u, kTanhQ), x);
  // From |x| = 9.5 on, 2/(e^2|x| + 1) < 2^-25 and 1 - it rounds to 1.
  const F e = exp_reduced<false>(mul(min(a, set(9.5f)), set(2.0f)));
  const F large = sub(set(1.0f), div(set(2.0f), add(e, set(1.0f))));
  // The sign from x also makes tanh(-0) = -0.
  return keep_nan(x, with_sign_of(select(lt(a, set(1.0f)), small, large), x));
}

inline F sigmoid_v(F x) {
  // t = e^-|x| <= 1 never overflows; for x < 0 the result t/(1 + t) keeps
  // the denormals that 1/(1 + e^-x) would lose to e^-x = inf.
  const F t = exp_reduced<true>(max(neg(abs(x)), set(-104.0f)));
  const F d = add(set(1.0f), t);
  const F d_err = add(sub(set(1.0f), d), t);  // 1 + t - d, exact (Fast2Sum)
  const M negative = lt(x, set(0.0f));
  const F q = div(select(negative, t, set(1.0f)), d);
  // num/(d + d_err) = q·(1 - d_err/d), and 1/d = q for x >= 0, 1 - q for x < 0.
  const F inv_d = select(negative, sub(set(1.0f), q), q);
  return keep_nan(x, fma(neg(mul(q, inv_d)), d_err, q));
}

// erf(x) = x·(c0 + x²·P(x²)) on |x| < 1, c0 = kErfC0Hi + kErfC0Lo.
constexpr float kErfP[] = {7.8758750627e-05f,  -8.0168642872e-04f, 5.1890874234e-03f,
                           -2.6854212011e-02f, 1.1283594715e-01f,  -3.7612626667e-01f};
constexpr float kErfC0Hi = 1.12837911f, kErfC0Lo = 5.92783935e-08f;
// erfc(x) = exp(-x² + R(x - 2.465)) on [1, 3.93].
constexpr float kErfcR[] = {1.6664476557e-06f,  -1.3750647715e-05f, 8.0496437109e-05f,
                            -4.3677774151e-04f, 2.2403988796e-03f,  -1.1166823927e-02f,
                            5.7262491491e-02f,  -3.5664841154e-01f, -1.5444022475e+00f};

inline F erf_v(F x) {
  const F a = abs(x);
  const F u = mul(x, x);
  const F small = fma(x, set(kErfC0Hi), mul(x, fma(poly(u, kErfP), u, set(kErfC0Lo))));
  // From 3.93 on, erfc < 2^-25 and 1 - erfc rounds to 1.
  const F ac = min(a, set(3.93f));
  const F e = exp_reduced<false>(fma(neg(ac), ac, poly(sub(ac, set(2.465f)), kErfcR)));
  const F large = sub(set(1.0f), e);
  return keep_nan(x, select(lt(a, set(1.0f)), small, with_sign_of(large, x)));
}

}  // namespace

void exp_f32(const float* x, float* y, int64_t n) { map(x, y, n, exp_v); }
void log_f32(const float* x, float* y, int64_t n) { map(x, y, n, log_v); }
void tanh_f32(const float* x, float* y, int64_t n) { map(x, y, n, tanh_v); }
void sigmoid_f32(const float* x, float* y, int64_t n) { map(x, y, n, sigmoid_v); }
void erf_f32(const float* x, float* y, int64_t n) { map(x, y, n, erf_v); }
void expm1_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(std::expm1(double(x[i])));
}
void log1p_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(std::log1p(double(x[i])));
}
void sqrt_f32(const float* x, float* y, int64_t n) {
  map(x, y, n, [](F v) { return sqrt(v); });
}
void rsqrt_f32(const float* x, float* y, int64_t n) { map(x, y, n, rsqrt_f64); }

const char* vec_math_isa() { return kIsa; }
int vec_math_lanes() { return W; }
bool vec_math_fma() {
#if defined(__FMA__) || defined(__AVX512F__)
  return W > 1;
#else
  return false;
#endif
}

}  // namespace ws::exec
