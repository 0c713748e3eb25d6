// The SIMD layer of the vectorized math (vec_math.cpp): one register type
// per build, chosen from the target macros (AVX-512F: 16 f32 lanes; AVX2: 8;
// SSE2: 4; any other target: 1 lane, plain float), and the operations the
// functions are written in, so each function is written once.
//
// Every multiply-add in code written against this layer is written out: an
// explicit fma() where one rounding is wanted, a mul and an add where two
// are. Contraction by the compiler is off from here to the end of the
// including file, so that it cannot fuse some instances of the same code and
// not others (the main loop and the tail must round identically), and so
// that AVX2 and AVX-512 builds compute the same bits. Include it only from
// the files that define such functions.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 intrinsics self-initialize an "undefined" register and
// trip this warning wherever they are inlined (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace ws::exec::simd {

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
// A store to memory past the caches, p aligned to the vector (stream_fence
// below): for results far larger than the caches, which a store through
// them would read first.
inline void stream(float* p, F a) { _mm512_stream_ps(p, a); }
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
inline void stream(float* p, F a) { _mm256_stream_ps(p, a); }
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
inline void stream(float* p, F a) { _mm_stream_ps(p, a); }
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
inline void stream(float* p, F a) { *p = a; }
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

// Orders a thread's stream() stores before its later stores, so that what
// it wrote is there for any thread that sees those.
inline void stream_fence() {
#if defined(__SSE2__) || defined(_M_X64)
  _mm_sfence();
#endif
}

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

}  // namespace ws::exec::simd
