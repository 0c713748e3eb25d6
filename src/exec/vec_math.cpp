// The functions of vec_math.hpp, written once against the SIMD layer
// (simd.hpp), which turns contraction off for this file.
#include "exec/simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "exec/special_math.hpp"
#include "exec/vec_math.hpp"

namespace ws::exec {
namespace {

using namespace simd;

// ---------------------------------------------------------------------------
// Shared pieces.

constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();

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
  r = select(eq(x, set(0.0f)), set(-kInfF), r);
  r = select(eq(x, set(kInfF)), set(kInfF), r);
  r = select(lt(x, set(0.0f)), set(kNaNF), r);
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

// ---------------------------------------------------------------------------
// sin and cos, in f64 lanes of GCC vector types: plain IEEE double
// arithmetic (no multiply-add, contraction off), so the same bits on every
// target.

constexpr int kTrigLanes = 8;
using Fv = float __attribute__((vector_size(kTrigLanes * sizeof(float))));
using Dv = double __attribute__((vector_size(kTrigLanes * sizeof(double))));
using Lv = int64_t __attribute__((vector_size(kTrigLanes * sizeof(int64_t))));

// The reduction by π/2 in f64 is exact enough below this; the lanes above
// are reduced exactly (reduce_large).
constexpr double kTrigMedium = 1048576.0;  // 2^20
constexpr double kInvPio2 = 6.36619772367581382433e-01;
constexpr double kPio2Hi = 1.57079631090164184570e+00;  // π/2's first 25 bits
constexpr double kPio2Lo = 1.58932547735281966916e-08;  // π/2 - kPio2Hi
constexpr double kToInt = 6755399441055744.0;           // 1.5·2^52: rounds to an integer

// 2/π's first 320 bits, bit i (from 1) of the fraction worth 2^-i.
constexpr uint32_t kTwoOverPi[] = {0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599,
                                   0x3c439041, 0xfe5163ab, 0xdebbc561, 0xb7246e3a, 0x424dd2e0};

// Bits p .. p + 31 of 2/π (0 before bit 1).
uint32_t two_over_pi_bits(int p) {
  uint32_t out = 0;
  for (int b = 0; b < 32; ++b) {
    const int i = p + b - 1;  // index from 0
    const uint32_t bit = i < 0 ? 0 : (kTwoOverPi[i / 32] >> (31 - i % 32)) & 1;
    out = (out << 1) | bit;
  }
  return out;
}

// x = k·π/2 + r exactly, for finite |x| >= 2^20: r in [-π/4, π/4] and
// k mod 4. x = m·2^e, m < 2^24 an integer; bits of 2/π worth 2^-i for
// i < e - 1 add multiples of 4 to x·2/π, so 96 bits from e - 1 on give
// x·2/π mod 4 as m·W / 2^94, its error below 2^-70.
void reduce_large(float x, double* r, int64_t* k) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const int e = int((bits >> 23) & 0xff) - 150;
  const uint64_t m = (bits & 0x7fffff) | 0x800000;
  const int p = e - 1;
  const unsigned __int128 w = (unsigned __int128)two_over_pi_bits(p) << 64 |
                              (unsigned __int128)two_over_pi_bits(p + 32) << 32 |
                              two_over_pi_bits(p + 64);
  const unsigned __int128 prod = m * w;  // < 2^120
  const int64_t quarter = int64_t(prod >> 94) & 3;
  // The fraction's first 64 bits; as signed, a fraction >= 1/2 is f - 1
  // and k rounds up.
  const int64_t f = int64_t(uint64_t(prod >> 30));
  int64_t q = quarter + (f < 0 ? 1 : 0);
  double v = double(f) * (1.57079632679489661923 / 18446744073709551616.0);  // f·2^-64·π/2
  if (bits >> 31) v = -v, q = -q;
  *r = v;
  *k = q & 3;
}

// sin and cos of |r| <= π/4 (musl's __sindf and __cosdf).
inline Dv sin_poly(Dv r) {
  const Dv z = r * r, w = z * z, s = z * r;
  const Dv tail = -1.98393348360966317347e-04 + z * 2.71831149398982190640e-06;
  return (r + s * (-1.66666666416265235595e-01 + z * 8.33332938588946317560e-03)) + s * w * tail;
}
inline Dv cos_poly(Dv r) {
  const Dv z = r * r, w = z * z;
  const Dv tail = -1.38867637746099294692e-03 + z * 2.43904487962774090654e-05;
  return ((1.0 + z * -4.99999997251031003120e-01) + w * 4.16666233237390631894e-02) +
         (w * z) * tail;
}

// y = sin(x) (or cos) for n <= kTrigLanes elements; the lanes past n are 0.
void trig_block(const float* x, float* y, int n, bool cosine) {
  float xs[kTrigLanes] = {};
  std::memcpy(xs, x, size_t(n) * sizeof(float));
  Fv xf;
  std::memcpy(&xf, xs, sizeof xf);
  const Dv xd = __builtin_convertvector(xf, Dv);
  const Dv ad = xd < 0.0 ? -xd : xd;
  const Dv xm = ad < kTrigMedium ? xd : Dv{};  // the other lanes are set below
  const Dv fn = (xm * kInvPio2 + kToInt) - kToInt;
  Dv r = (xm - fn * kPio2Hi) - fn * kPio2Lo;
  Lv k = __builtin_convertvector(fn, Lv);
  for (int i = 0; i < kTrigLanes; ++i)
    if (!(std::fabs(xs[i]) < float(kTrigMedium))) {
      if (std::isfinite(xs[i])) {
        double ri;
        int64_t ki;
        reduce_large(xs[i], &ri, &ki);
        r[i] = ri, k[i] = ki;
      } else {
        r[i] = double(kNaNF), k[i] = 0;
      }
    }
  if (cosine) k += 1;  // cos x = sin(x + π/2)
  const Dv s = sin_poly(r), c = cos_poly(r);
  Dv v = (k & 1) != 0 ? c : s;
  v = (k & 2) != 0 ? -v : v;
  Fv out = __builtin_convertvector(v, Fv);
  // sin x rounds to x below 2^-12 (and keeps the sign of a zero).
  if (!cosine) {
    const Fv axf = xf < 0.0f ? -xf : xf;
    out = axf < 0x1p-12f ? xf : out;
  }
  std::memcpy(xs, &out, sizeof out);
  std::memcpy(y, xs, size_t(n) * sizeof(float));
}

void trig_f32(const float* x, float* y, int64_t n, bool cosine) {
  for (int64_t i = 0; i < n; i += kTrigLanes)
    trig_block(x + i, y + i, int(std::min<int64_t>(kTrigLanes, n - i)), cosine);
}

// ---------------------------------------------------------------------------
// expm1 and log1p, in the same f64 lanes: each result is computed to within
// 2^-50 of itself in double and rounded once to f32, so it is the correctly
// rounded f32 but where the exact value lies within 2^-50 of a tie (std::
// functions in double, rounded once, have the same limit). Four registers
// at a time, their series side by side: one register's is a chain of
// dependent operations.

constexpr double kLn2HiD = 6.93147180369123816490e-01;  // ln2's first 33 bits
constexpr double kLn2LoD = 1.90821492927058770002e-10;  // ln2 - kLn2HiD
constexpr double kLog2eD = 1.44269504088896338700e+00;

// c[0] + c[1]·x + ... + c[N-1]·x^(N-1) by Estrin's scheme (pairs of terms,
// then pairs of pairs): a chain of about 2·log2(N) operations, not
// Horner's 2N, so that a register's lanes do not wait on one another.
template <size_t N>
inline Dv estrin(const Dv& x, const double (&c)[N]) {
  Dv t[N];
  for (size_t i = 0; i < N; ++i) t[i] = Dv{} + c[i];
  Dv p = x;
  for (size_t n = N; n > 1; n = (n + 1) / 2, p = p * p) {
    for (size_t i = 0; i < n / 2; ++i) t[i] = t[2 * i] + t[2 * i + 1] * p;
    if (n % 2) t[n / 2] = t[n - 1];
  }
  return t[0];
}

// 2^k for integer-valued lanes k in [-1022, 1023].
inline Dv pow2_lanes(const Dv& k) {
  const Lv bits = (__builtin_convertvector(k, Lv) + 1023) << 52;
  Dv out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// e^x - 1: x = k·ln2 + r, |r| <= ln2/2 (k·kLn2HiD exact), e^r - 1 by its
// Taylor series to r^12/12! (remainder below 2^-51 of it), then 2^k·(e^r -
// 1) + (2^k - 1): the product exact, 2^k - 1 exact, one rounding where the
// terms have one sign; k = 0 gives e^r - 1 itself (the caller keeps ±0). x is
// clamped to [-110, 100] first: beyond, the f32 result is -1 or inf alike.
// NaN lanes stay NaN.
inline Dv expm1_lanes(const Dv& x) {
  const Dv xc = x < -110.0 ? Dv{} - 110.0 : (x > 100.0 ? Dv{} + 100.0 : x);
  Dv k = (xc * kLog2eD + kToInt) - kToInt;
  k = k == k ? k : Dv{};  // NaN lanes: k = 0, r NaN
  const Dv r = (xc - k * kLn2HiD) - k * kLn2LoD;
  // e^r - 1 = r + r²·(1/2! + r/3! + ... + r^10/12!)
  constexpr double kC[] = {1.0 / 2,       1.0 / 6,        1.0 / 24,       1.0 / 120,
                           1.0 / 720,     1.0 / 5040,     1.0 / 40320,    1.0 / 362880,
                           1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600};
  const Dv em = r + (r * r) * estrin(r, kC);
  const Dv t = pow2_lanes(k);
  return k == 0.0 ? em : t * em + (t - 1.0);
}

// log(1 + x) for x > -1: 1 + x is exact in double for |x| >= 2^-29 (below,
// the f32 result is x itself); 1 + x = 2^e·m, m in [√½, √2), log m =
// 2·atanh(s) = 2s + 2s³/3 + ... + 2s^19/19, s = (m - 1)/(m + 1), |s| <= 0.172
// (remainder below 2^-55 of it), plus e·ln2 (e·kLn2HiD exact). Lanes
// outside the domain are set by the caller.
inline Dv log1p_lanes(const Dv& x) {
  const Dv u = 1.0 + x;
  Lv bits;
  std::memcpy(&bits, &u, sizeof bits);
  Lv e = ((bits >> 52) & 0x7ff) - 1023;
  const Lv mant = (bits & ((int64_t(1) << 52) - 1)) | (int64_t(1023) << 52);
  Dv m;
  std::memcpy(&m, &mant, sizeof m);  // in [1, 2)
  const auto high = m > 1.41421356237309504880;
  m = high ? m * 0.5 : m;
  e = high ? e + 1 : e;
  const Dv s = (m - 1.0) / (m + 1.0), z = s * s;
  constexpr double kC[] = {2.0,      2.0 / 3,  2.0 / 5,  2.0 / 7,  2.0 / 9,
                           2.0 / 11, 2.0 / 13, 2.0 / 15, 2.0 / 17, 2.0 / 19};
  const Dv p = estrin(z, kC);
  const Dv ed = __builtin_convertvector(e, Dv);
  return ed * kLn2HiD + (ed * kLn2LoD + p * s);
}

// y = f(x) through f64 lanes, the last elements in lanes padded with 0;
// `fix(x, y)` then sets the special values on the f32 lanes.
template <class F, class Fix>
inline Fv f64_lanes(const Fv& xf, F f, Fix fix) {
  return fix(xf, __builtin_convertvector(f(__builtin_convertvector(xf, Dv)), Fv));
}

template <class F, class Fix>
void f64_map(const float* x, float* y, int64_t n, F f, Fix fix) {
  constexpr int64_t L = kTrigLanes;
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    Fv a, b, c, d;
    std::memcpy(&a, x + i, sizeof a);
    std::memcpy(&b, x + i + L, sizeof b);
    std::memcpy(&c, x + i + 2 * L, sizeof c);
    std::memcpy(&d, x + i + 3 * L, sizeof d);
    a = f64_lanes(a, f, fix), b = f64_lanes(b, f, fix);
    c = f64_lanes(c, f, fix), d = f64_lanes(d, f, fix);
    std::memcpy(y + i, &a, sizeof a);
    std::memcpy(y + i + L, &b, sizeof b);
    std::memcpy(y + i + 2 * L, &c, sizeof c);
    std::memcpy(y + i + 3 * L, &d, sizeof d);
  }
  for (; i < n; i += L) {
    const int64_t m = std::min(L, n - i);
    float xs[L] = {};
    std::memcpy(xs, x + i, size_t(m) * sizeof(float));
    Fv xf;
    std::memcpy(&xf, xs, sizeof xf);
    const Fv out = f64_lanes(xf, f, fix);
    std::memcpy(xs, &out, sizeof out);
    std::memcpy(y + i, xs, size_t(m) * sizeof(float));
  }
}

}  // namespace

void sin_f32(const float* x, float* y, int64_t n) { trig_f32(x, y, n, false); }
void cos_f32(const float* x, float* y, int64_t n) { trig_f32(x, y, n, true); }

void exp_f32(const float* x, float* y, int64_t n) { map(x, y, n, exp_v); }
void log_f32(const float* x, float* y, int64_t n) { map(x, y, n, log_v); }
void tanh_f32(const float* x, float* y, int64_t n) { map(x, y, n, tanh_v); }
void sigmoid_f32(const float* x, float* y, int64_t n) { map(x, y, n, sigmoid_v); }
void erf_f32(const float* x, float* y, int64_t n) { map(x, y, n, erf_v); }
void expm1_f32(const float* x, float* y, int64_t n) {
  f64_map(x, y, n, expm1_lanes, [](Fv xf, Fv v) { return xf == 0.0f ? xf : v; });  // ±0
}
void log1p_f32(const float* x, float* y, int64_t n) {
  f64_map(x, y, n, log1p_lanes, [](Fv xf, Fv v) {
    const Fv ax = xf < 0.0f ? -xf : xf;
    v = ax < 0x1p-29f ? xf : v;  // x - x²/2 rounds to x (and keeps -0)
    v = xf == -1.0f ? Fv{} - kInfF : v;
    v = xf < -1.0f ? Fv{} + kNaNF : v;
    return (xf == kInfF) | (xf != xf) ? xf : v;
  });
}
void tan_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::tan(v); });
}
void asin_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::asin(v); });
}
void acos_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::acos(v); });
}
void atan_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::atan(v); });
}
void sinh_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::sinh(v); });
}
void cosh_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::cosh(v); });
}
void asinh_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::asinh(v); });
}
void acosh_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::acosh(v); });
}
void atanh_f32(const float* x, float* y, int64_t n) {
  through_double(x, y, n, [](double v) { return std::atanh(v); });
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
