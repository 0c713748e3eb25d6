// The SIMD layer (one register type per build, chosen from the target macros)
// and the functions of vec_math.hpp written once against it.

// Every multiply-add below is written out: an explicit fma() where one
// rounding is wanted, a mul and an add where two are. Contraction by the
// compiler is off so that it cannot fuse some instances of the same code
// and not others (the main loop and the tail must round identically), and
// so that AVX2 and AVX-512 builds compute the same bits.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 intrinsics self-initialize an "undefined" register and
// trip this warning wherever they are inlined (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "exec/vec_math.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "exec/nn_kernels.hpp"

#if defined(__SSE2__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace ws::exec {
namespace {

// ---------------------------------------------------------------------------
// The register type F (f32 lanes), its integer view I (i32 lanes), a lane
// mask M, and the operations the functions use. fma(a, b, c) = a·b + c,
// rounded once where the target has FMA. min/max return the second operand
// when either is NaN (the x86 rule); callers fix NaN lanes at the end.

#if defined(__AVX512F__)

constexpr const char* kIsa = "avx512";
constexpr int W = 16;
using F = __m512;
using I = __m512i;
using M = __mmask16;
inline F set(float a) { return _mm512_set1_ps(a); }
inline I seti(int32_t a) { return _mm512_set1_epi32(a); }
inline F loadu(const float* p) { return _mm512_loadu_ps(p); }
inline void storeu(float* p, F a) { _mm512_storeu_ps(p, a); }
inline F add(F a, F b) { return _mm512_add_ps(a, b); }
inline F sub(F a, F b) { return _mm512_sub_ps(a, b); }
inline F mul(F a, F b) { return _mm512_mul_ps(a, b); }
inline F div(F a, F b) { return _mm512_div_ps(a, b); }
inline F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
inline F min(F a, F b) { return _mm512_min_ps(a, b); }
inline F max(F a, F b) { return _mm512_max_ps(a, b); }
inline F sqrt(F a) { return _mm512_sqrt_ps(a); }
inline M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline M eq(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline M isnan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
inline F select(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
inline I as_int(F a) { return _mm512_castps_si512(a); }
inline F as_float(I a) { return _mm512_castsi512_ps(a); }
inline I addi(I a, I b) { return _mm512_add_epi32(a, b); }
inline I subi(I a, I b) { return _mm512_sub_epi32(a, b); }
inline I andi(I a, I b) { return _mm512_and_si512(a, b); }
inline I ori(I a, I b) { return _mm512_or_si512(a, b); }
inline I xori(I a, I b) { return _mm512_xor_si512(a, b); }
template <int s>
inline I srai(I a) {
  return _mm512_srai_epi32(a, s);
}
template <int s>
inline I srli(I a) {
  return _mm512_srli_epi32(a, s);
}
template <int s>
inline I slli(I a) {
  return _mm512_slli_epi32(a, s);
}
inline F to_float(I a) { return _mm512_cvtepi32_ps(a); }

// 1/sqrt in f64 lanes, rounded once to f32.
inline F rsqrt_f64(F x) {
  const __m512d one = _mm512_set1_pd(1.0);
  const __m256 xh = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
  const __m512d lo = _mm512_div_pd(one, _mm512_sqrt_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x))));
  const __m512d hi = _mm512_div_pd(one, _mm512_sqrt_pd(_mm512_cvtps_pd(xh)));
  const __m512d l = _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)));
  return _mm512_castpd_ps(_mm512_insertf64x4(l, _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
}

// y[i] = f(x[i]); the tail is a masked full register.
template <class Fn>
inline void map(const float* x, float* y, int64_t n, Fn f) {
  int64_t i = 0;
  for (; i + W <= n; i += W) storeu(y + i, f(loadu(x + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

#elif defined(__AVX2__)

constexpr const char* kIsa = "avx2";
constexpr int W = 8;
using F = __m256;
using I = __m256i;
using M = __m256;
inline F set(float a) { return _mm256_set1_ps(a); }
inline I seti(int32_t a) { return _mm256_set1_epi32(a); }
inline F loadu(const float* p) { return _mm256_loadu_ps(p); }
inline void storeu(float* p, F a) { _mm256_storeu_ps(p, a); }
inline F add(F a, F b) { return _mm256_add_ps(a, b); }
inline F sub(F a, F b) { return _mm256_sub_ps(a, b); }
inline F mul(F a, F b) { return _mm256_mul_ps(a, b); }
inline F div(F a, F b) { return _mm256_div_ps(a, b); }
#if defined(__FMA__)
inline F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
#else
inline F fma(F a, F b, F c) { return add(mul(a, b), c); }
#endif
inline F min(F a, F b) { return _mm256_min_ps(a, b); }
inline F max(F a, F b) { return _mm256_max_ps(a, b); }
inline F sqrt(F a) { return _mm256_sqrt_ps(a); }
inline M lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline M gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
inline M eq(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
inline M isnan(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
inline F select(M m, F a, F b) { return _mm256_blendv_ps(b, a, m); }
inline I as_int(F a) { return _mm256_castps_si256(a); }
inline F as_float(I a) { return _mm256_castsi256_ps(a); }
inline I addi(I a, I b) { return _mm256_add_epi32(a, b); }
inline I subi(I a, I b) { return _mm256_sub_epi32(a, b); }
inline I andi(I a, I b) { return _mm256_and_si256(a, b); }
inline I ori(I a, I b) { return _mm256_or_si256(a, b); }
inline I xori(I a, I b) { return _mm256_xor_si256(a, b); }
template <int s>
inline I srai(I a) {
  return _mm256_srai_epi32(a, s);
}
template <int s>
inline I srli(I a) {
  return _mm256_srli_epi32(a, s);
}
template <int s>
inline I slli(I a) {
  return _mm256_slli_epi32(a, s);
}
inline F to_float(I a) { return _mm256_cvtepi32_ps(a); }

inline F rsqrt_f64(F x) {
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d lo = _mm256_div_pd(one, _mm256_sqrt_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
  const __m256d hi =
      _mm256_div_pd(one, _mm256_sqrt_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
  return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}

#elif defined(__SSE2__) || defined(_M_X64)

constexpr const char* kIsa = "sse2";
constexpr int W = 4;
using F = __m128;
using I = __m128i;
using M = __m128;
inline F set(float a) { return _mm_set1_ps(a); }
inline I seti(int32_t a) { return _mm_set1_epi32(a); }
inline F loadu(const float* p) { return _mm_loadu_ps(p); }
inline void storeu(float* p, F a) { _mm_storeu_ps(p, a); }
inline F add(F a, F b) { return _mm_add_ps(a, b); }
inline F sub(F a, F b) { return _mm_sub_ps(a, b); }
inline F mul(F a, F b) { return _mm_mul_ps(a, b); }
inline F div(F a, F b) { return _mm_div_ps(a, b); }
#if defined(__FMA__)
inline F fma(F a, F b, F c) { return _mm_fmadd_ps(a, b, c); }
#else
inline F fma(F a, F b, F c) { return add(mul(a, b), c); }
#endif
inline F min(F a, F b) { return _mm_min_ps(a, b); }
inline F max(F a, F b) { return _mm_max_ps(a, b); }
inline F sqrt(F a) { return _mm_sqrt_ps(a); }
inline M lt(F a, F b) { return _mm_cmplt_ps(a, b); }
inline M gt(F a, F b) { return _mm_cmpgt_ps(a, b); }
inline M eq(F a, F b) { return _mm_cmpeq_ps(a, b); }
inline M isnan(F a) { return _mm_cmpunord_ps(a, a); }
inline F select(M m, F a, F b) { return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b)); }
inline I as_int(F a) { return _mm_castps_si128(a); }
inline F as_float(I a) { return _mm_castsi128_ps(a); }
inline I addi(I a, I b) { return _mm_add_epi32(a, b); }
inline I subi(I a, I b) { return _mm_sub_epi32(a, b); }
inline I andi(I a, I b) { return _mm_and_si128(a, b); }
inline I ori(I a, I b) { return _mm_or_si128(a, b); }
inline I xori(I a, I b) { return _mm_xor_si128(a, b); }
template <int s>
inline I srai(I a) {
  return _mm_srai_epi32(a, s);
}
template <int s>
inline I srli(I a) {
  return _mm_srli_epi32(a, s);
}
template <int s>
inline I slli(I a) {
  return _mm_slli_epi32(a, s);
}
inline F to_float(I a) { return _mm_cvtepi32_ps(a); }

inline F rsqrt_f64(F x) {
  const __m128d one = _mm_set1_pd(1.0);
  const __m128d lo = _mm_div_pd(one, _mm_sqrt_pd(_mm_cvtps_pd(x)));
  const __m128d hi = _mm_div_pd(one, _mm_sqrt_pd(_mm_cvtps_pd(_mm_movehl_ps(x, x))));
  return _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
}

#else  // any other target: one lane, plain float

constexpr const char* kIsa = "scalar";
constexpr int W = 1;
using F = float;
using I = int32_t;
using M = bool;
inline F set(float a) { return a; }
inline I seti(int32_t a) { return a; }
inline F loadu(const float* p) { return *p; }
inline void storeu(float* p, F a) { *p = a; }
inline F add(F a, F b) { return a + b; }
inline F sub(F a, F b) { return a - b; }
inline F mul(F a, F b) { return a * b; }
inline F div(F a, F b) { return a / b; }
inline F fma(F a, F b, F c) { return a * b + c; }
inline F min(F a, F b) { return a < b ? a : b; }
inline F max(F a, F b) { return a > b ? a : b; }
inline F sqrt(F a) { return std::sqrt(a); }
inline M lt(F a, F b) { return a < b; }
inline M gt(F a, F b) { return a > b; }
inline M eq(F a, F b) { return a == b; }
inline M isnan(F a) { return a != a; }
inline F select(M m, F a, F b) { return m ? a : b; }
inline I as_int(F a) {
  I i;
  std::memcpy(&i, &a, 4);
  return i;
}
inline F as_float(I a) {
  F f;
  std::memcpy(&f, &a, 4);
  return f;
}
inline I addi(I a, I b) { return I(uint32_t(a) + uint32_t(b)); }
inline I subi(I a, I b) { return I(uint32_t(a) - uint32_t(b)); }
inline I andi(I a, I b) { return a & b; }
inline I ori(I a, I b) { return a | b; }
inline I xori(I a, I b) { return a ^ b; }
template <int s>
inline I srai(I a) {
  return a >> s;
}
template <int s>
inline I srli(I a) {
  return I(uint32_t(a) >> s);
}
template <int s>
inline I slli(I a) {
  return I(uint32_t(a) << s);
}
inline F to_float(I a) { return F(a); }
inline F rsqrt_f64(F x) { return F(1.0 / std::sqrt(double(x))); }

#endif

#if !defined(__AVX512F__)
// y[i] = f(x[i]); the tail goes through a zero-padded register.
template <class Fn>
inline void map(const float* x, float* y, int64_t n, Fn f) {
  int64_t i = 0;
  for (; i + W <= n; i += W) storeu(y + i, f(loadu(x + i)));
  if (i < n) {
    alignas(64) float buf[W] = {};
    std::memcpy(buf, x + i, size_t(n - i) * sizeof(float));
    storeu(buf, f(loadu(buf)));
    std::memcpy(y + i, buf, size_t(n - i) * sizeof(float));
  }
}
#endif

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

// ---------------------------------------------------------------------------
// Philox-4x32-10, many blocks at once. Each block's four words sit in the low
// halves of 64-bit lanes: the 32x32->64 multiply (pmuludq) reads only those,
// so the high halves may hold anything, and hi(product) is a 64-bit shift.

namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;  // as philox4x32_10
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// One element by the scalar block: the tail, and the definition.
template <class T>
inline void philox_uniform_one(const uint32_t (&key)[2], uint64_t c, T* out) {
  const uint32_t ctr[4] = {uint32_t(c), uint32_t(c >> 32), 0, 0};
  uint32_t r[4];
  philox4x32_10(ctr, key, r);
  *out = T(r[0] >> 8) * T(1.0 / 16777216.0);
}

#if defined(__AVX512F__)

using Q = __m512i;
constexpr int kQLanes = 8, kQUnroll = 4;
inline Q q_set(uint64_t a) { return _mm512_set1_epi64(int64_t(a)); }
inline Q q_iota() { return _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0); }
inline Q q_add(Q a, Q b) { return _mm512_add_epi64(a, b); }
inline Q q_mul(Q a, Q b) { return _mm512_mul_epu32(a, b); }
inline Q q_hi(Q a) { return _mm512_srli_epi64(a, 32); }
inline Q q_xor(Q a, Q b) { return _mm512_xor_si512(a, b); }
inline Q q_xor3(Q a, Q b, Q c) { return _mm512_ternarylogic_epi64(a, b, c, 0x96); }
// The words' top 24 bits, one per lane, as i32.
inline __m256i q_top24(Q a) { return _mm256_srli_epi32(_mm512_cvtepi64_epi32(a), 8); }
inline void q_store(float* out, Q a) {
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(q_top24(a)), _mm256_set1_ps(0x1p-24f)));
}
inline void q_store(double* out, Q a) {
  _mm512_storeu_pd(out, _mm512_mul_pd(_mm512_cvtepi32_pd(q_top24(a)), _mm512_set1_pd(0x1p-24)));
}

#elif defined(__AVX2__)

using Q = __m256i;
constexpr int kQLanes = 4, kQUnroll = 4;
inline Q q_set(uint64_t a) { return _mm256_set1_epi64x(int64_t(a)); }
inline Q q_iota() { return _mm256_set_epi64x(3, 2, 1, 0); }
inline Q q_add(Q a, Q b) { return _mm256_add_epi64(a, b); }
inline Q q_mul(Q a, Q b) { return _mm256_mul_epu32(a, b); }
inline Q q_hi(Q a) { return _mm256_srli_epi64(a, 32); }
inline Q q_xor(Q a, Q b) { return _mm256_xor_si256(a, b); }
inline Q q_xor3(Q a, Q b, Q c) { return q_xor(q_xor(a, b), c); }
inline __m128i q_top24(Q a) {
  const __m256i words = _mm256_permutevar8x32_epi32(a, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  return _mm_srli_epi32(_mm256_castsi256_si128(words), 8);
}
inline void q_store(float* out, Q a) {
  _mm_storeu_ps(out, _mm_mul_ps(_mm_cvtepi32_ps(q_top24(a)), _mm_set1_ps(0x1p-24f)));
}
inline void q_store(double* out, Q a) {
  _mm256_storeu_pd(out, _mm256_mul_pd(_mm256_cvtepi32_pd(q_top24(a)), _mm256_set1_pd(0x1p-24)));
}

#elif defined(__SSE2__) || defined(_M_X64)

using Q = __m128i;
constexpr int kQLanes = 2, kQUnroll = 4;
inline Q q_set(uint64_t a) { return _mm_set1_epi64x(int64_t(a)); }
inline Q q_iota() { return _mm_set_epi64x(1, 0); }
inline Q q_add(Q a, Q b) { return _mm_add_epi64(a, b); }
inline Q q_mul(Q a, Q b) { return _mm_mul_epu32(a, b); }
inline Q q_hi(Q a) { return _mm_srli_epi64(a, 32); }
inline Q q_xor(Q a, Q b) { return _mm_xor_si128(a, b); }
inline Q q_xor3(Q a, Q b, Q c) { return q_xor(q_xor(a, b), c); }
// Two words in the low 64 bits.
inline __m128i q_top24(Q a) {
  return _mm_srli_epi32(_mm_shuffle_epi32(a, _MM_SHUFFLE(3, 1, 2, 0)), 8);
}
inline void q_store(float* out, Q a) {
  const __m128 f = _mm_mul_ps(_mm_cvtepi32_ps(q_top24(a)), _mm_set1_ps(0x1p-24f));
  _mm_storel_pi(reinterpret_cast<__m64*>(out), f);
}
inline void q_store(double* out, Q a) {
  _mm_storeu_pd(out, _mm_mul_pd(_mm_cvtepi32_pd(q_top24(a)), _mm_set1_pd(0x1p-24)));
}

#endif

#if defined(__SSE2__) || defined(_M_X64)

// out[0, kQLanes·kQUnroll) for counters c0, c0 + 1, ...
template <class T>
inline void philox_lanes(uint64_t c0, const Q (&k0)[10], const Q (&k1)[10], T* out) {
  constexpr int U = kQUnroll;
  const Q m0 = q_set(kPhiloxM0), m1 = q_set(kPhiloxM1);
  Q x0[U], x1[U], x2[U], x3[U];
  for (int j = 0; j < U; ++j) {
    // Round 1 of the block {lo(c), hi(c), 0, 0}: the product of word 2 is 0.
    const Q c = q_add(q_set(c0 + uint64_t(j * kQLanes)), q_iota());
    const Q p0 = q_mul(c, m0);
    x0[j] = q_xor(q_hi(c), k0[0]);
    x1[j] = q_set(0);
    x2[j] = q_xor(q_hi(p0), k1[0]);
    x3[j] = p0;
  }
  for (int r = 1; r < 10; ++r) {
    for (int j = 0; j < U; ++j) {
      const Q p0 = q_mul(x0[j], m0), p1 = q_mul(x2[j], m1);
      x0[j] = q_xor3(q_hi(p1), x1[j], k0[r]);
      x1[j] = p1;
      x2[j] = q_xor3(q_hi(p0), x3[j], k1[r]);
      x3[j] = p0;
    }
  }
  for (int j = 0; j < U; ++j) q_store(out + j * kQLanes, x0[j]);
}

template <class T>
void philox_run(uint64_t seed, uint64_t offset, T* out, int64_t n) {
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  Q k0[10], k1[10];
  for (int r = 0; r < 10; ++r) {  // the key schedule, a Weyl sequence
    k0[r] = q_set(uint32_t(key[0] + uint32_t(r) * kPhiloxW0));
    k1[r] = q_set(uint32_t(key[1] + uint32_t(r) * kPhiloxW1));
  }
  constexpr int64_t L = kQLanes * kQUnroll;
  int64_t i = 0;
  for (; i + L <= n; i += L) philox_lanes(offset + uint64_t(i), k0, k1, out + i);
  for (; i < n; ++i) philox_uniform_one(key, offset + uint64_t(i), out + i);
}

#else

template <class T>
void philox_run(uint64_t seed, uint64_t offset, T* out, int64_t n) {
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  for (int64_t i = 0; i < n; ++i) philox_uniform_one(key, offset + uint64_t(i), out + i);
}

#endif

}  // namespace

void philox_uniform_simd(uint64_t seed, uint64_t offset, float* out, int64_t n) {
  philox_run(seed, offset, out, n);
}
void philox_uniform_simd(uint64_t seed, uint64_t offset, double* out, int64_t n) {
  philox_run(seed, offset, out, n);
}

}  // namespace ws::exec
