// Philox-4x32-10: the scalar block, the definition, and the same blocks many
// at once, which philox_uniform runs (bit for bit the scalar block's
// numbers). Both read the constants below.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics self-initialize an "undefined" register and
// trip this warning wherever they are inlined (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "exec/philox.hpp"

#if defined(__SSE2__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace ws::exec {
namespace {

// The round's multipliers, the key schedule's Weyl increments, the rounds.
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
  const uint64_t p0 = uint64_t(kPhiloxM0) * c[0], p1 = uint64_t(kPhiloxM1) * c[2];
  const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
  const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  const uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
}

}  // namespace

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < kPhiloxRounds; ++r) {
    if (r > 0) k[0] += kPhiloxW0, k[1] += kPhiloxW1;  // the key schedule: a Weyl sequence
    philox_round(c, k);
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}

// ---------------------------------------------------------------------------
// Many blocks at once. Each block's four words sit in the low halves of
// 64-bit lanes: the 32x32->64 multiply (pmuludq) reads only those, so the
// high halves may hold anything, and hi(product) is a 64-bit shift.

namespace {

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
inline void philox_lanes(uint64_t c0, const Q (&k0)[kPhiloxRounds], const Q (&k1)[kPhiloxRounds],
                         T* out) {
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
  for (int r = 1; r < kPhiloxRounds; ++r) {
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
  Q k0[kPhiloxRounds], k1[kPhiloxRounds];
  for (int r = 0; r < kPhiloxRounds; ++r) {  // the key schedule, a Weyl sequence
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

// The definition is philox4x32_10 per element; the SIMD version computes
// 8-32 blocks at once and equals it bit for bit.
template <class T>
void philox_uniform(uint64_t seed, uint64_t offset, T* out, int64_t n) {
  philox_run(seed, offset, out, n);
}

template void philox_uniform<float>(uint64_t, uint64_t, float*, int64_t);
template void philox_uniform<double>(uint64_t, uint64_t, double*, int64_t);

}  // namespace ws::exec
