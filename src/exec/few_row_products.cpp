// Products of few rows (few_row_products.hpp): each thread computes whole
// columns of C, streaming its part of B once.
#include "exec/few_row_products.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "exec/parallel.hpp"
#include "exec/simd.hpp"  // contraction off from here: every fma() is explicit
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

using simd::F;

// B as it lies: a tile of kPlainVectors vectors of a row of B is multiplied
// into kPlainRows rows of C at once (the registers: 8 accumulators with
// AVX2, 16 with AVX-512), over kPlainDepth rows of B before the next tile:
// that many streams along B's rows.
constexpr int kPlainRows = simd::W >= 16 ? 8 : 4;
constexpr int kPlainVectors = 2;
constexpr int64_t kPlainCols = kPlainVectors * simd::W;
constexpr int64_t kPlainDepth = 16;
// B transposed: kTbCols rows of B against kTbRows rows of A at once.
constexpr int kTbRows = 4;
constexpr int kTbCols = 2;
// How far ahead along its row each stream of B is fetched (floats): the
// hardware's prefetchers alone kept too few lines in flight.
constexpr int64_t kTbPrefetch = 1024, kPlainPrefetch = 128;

inline void prefetch(const float* p) {
#if defined(__SSE2__) || defined(_M_X64)
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
#else
  (void)p;
#endif
}

// Holds x in a register: the compiler would otherwise fold its load into
// each multiply-add that reads it, loading it again for each.
inline void in_register(F& x) {
#if defined(__GNUC__) && (defined(__SSE2__) || defined(_M_X64))
  __asm__("" : "+x"(x));
#else
  (void)x;
#endif
}

// Rows [q0, q1) of B as it lies multiplied into R rows of the accumulator
// at columns [j, j + kPlainCols): the fma chain of each element continued
// from acc (from 0 when `first`).
template <int R>
void plain_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t q0, int64_t q1,
                float* acc, int64_t ldacc, int64_t j, bool first) {
  F s[R][kPlainVectors];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kPlainVectors; ++v)
      s[r][v] = first ? simd::set(0.0f) : simd::loadu(acc + r * ldacc + j + v * simd::W);
  for (int64_t q = q0; q < q1; ++q) {
    const float* bq = b + q * ldb + j;
    prefetch(bq + kPlainPrefetch);
    F bv[kPlainVectors];
    for (int v = 0; v < kPlainVectors; ++v) {
      bv[v] = simd::loadu(bq + v * simd::W);
      in_register(bv[v]);
    }
    for (int r = 0; r < R; ++r) {
      F av = simd::set(a[r * lda + q]);
      in_register(av);
      for (int v = 0; v < kPlainVectors; ++v) s[r][v] = simd::fma(av, bv[v], s[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kPlainVectors; ++v)
      simd::storeu(acc + r * ldacc + j + v * simd::W, s[r][v]);
}

// The same for one column of `rows` rows, in scalars: the same roundings.
void plain_column(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t q0, int64_t q1,
                  float* acc, int64_t ldacc, int64_t j, int64_t rows, bool first) {
  for (int64_t r = 0; r < rows; ++r) {
    float s = first ? 0.0f : acc[r * ldacc + j];
    for (int64_t q = q0; q < q1; ++q) s = std::fma(a[r * lda + q], b[q * ldb + j], s);
    acc[r * ldacc + j] = s;
  }
}

// fn.template operator()<R>() for R = rows, 1 <= rows <= Max: the
// register blocks instantiated only up to the block's rows.
template <int Max, class Fn>
void with_rows(int64_t rows, Fn&& fn) {
  if constexpr (Max > 1)
    if (rows < Max) return with_rows<Max - 1>(rows, fn);
  fn.template operator()<Max>();
}

void plain_columns(const FewRowProduct& p, const float* a, int64_t lda, const float* b, float* acc,
                   int64_t ldacc, int64_t j0, int64_t j1) {
  const int64_t tiles_end = j0 + (j1 - j0) / kPlainCols * kPlainCols;
  for (int64_t q0 = 0; q0 < p.k; q0 += kPlainDepth) {
    const int64_t q1 = std::min(p.k, q0 + kPlainDepth);
    for (int64_t j = j0; j < tiles_end; j += kPlainCols)
      for (int64_t g = 0; g < p.m; g += kPlainRows)
        with_rows<kPlainRows>(std::min<int64_t>(kPlainRows, p.m - g), [&]<int R>() {
          plain_tile<R>(a + g * lda, lda, b, p.ldb, q0, q1, acc + g * ldacc, ldacc, j, q0 == 0);
        });
    for (int64_t j = tiles_end; j < j1; ++j)
      plain_column(a, lda, b, p.ldb, q0, q1, acc, ldacc, j, p.m, q0 == 0);
  }
}

// The sum of a vector's lanes in the fixed tree: lane l + W/2 onto lane l,
// then + W/4, ..., + 1.
inline float lane_sum(F x) {
#if defined(__AVX512F__)
  const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(x),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
#elif defined(__AVX2__)
  const __m256 t = x;
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
#else
  float l[simd::W];
  simd::storeu(l, x);
  for (int w = simd::W / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) l[i] = l[i] + l[i + w];
  return l[0];
#endif
}

// Vector steps [0, steps) of R rows of A (lda apart) against J rows of a
// transposed B (ldb apart), continuing the partial sums s.
template <int R, int J>
inline void tb_step(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t q,
                    F (&s)[R][J]) {
  F bv[J];
  for (int c = 0; c < J; ++c) {
    bv[c] = simd::loadu(b + c * ldb + q);
    in_register(bv[c]);
  }
  for (int r = 0; r < R; ++r) {
    F av = simd::loadu(a + r * lda + q);
    in_register(av);
    for (int c = 0; c < J; ++c) s[r][c] = simd::fma(av, bv[c], s[r][c]);
  }
}

// Lines of 16 floats (whole vector steps) [0, lines): each prefetches the
// line kPrefetch floats ahead in each row of B.
constexpr int kLineSteps = simd::W >= 16 ? 1 : 16 / simd::W;
template <int R, int J>
inline void tb_lines(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t lines,
                     F (&s)[R][J]) {
  for (int64_t q = 0; q < lines * kLineSteps * simd::W; q += kLineSteps * simd::W) {
    for (int c = 0; c < J; ++c) prefetch(b + c * ldb + q + kTbPrefetch);
    for (int u = 0; u < kLineSteps; ++u) tb_step<R, J>(a, lda, b, ldb, q + u * simd::W, s);
  }
}

// The sums of R rows of A (from a chunk's start, lda apart) with J rows of a
// transposed B (from the chunk's start, ldb apart) over the chunk's `len`
// elements: sums[r * J + c].
template <int R, int J>
void tb_dot(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t len, float* sums) {
  F s[R][J];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < J; ++c) s[r][c] = simd::set(0.0f);
  const int64_t lines = len / (kLineSteps * simd::W);
  tb_lines<R, J>(a, lda, b, ldb, lines, s);
  int64_t done = lines * kLineSteps * simd::W;
  for (; done + simd::W <= len; done += simd::W) tb_step<R, J>(a, lda, b, ldb, done, s);
  if (done < len) {  // the last step's lanes past K read zeros
    float at[R][simd::W] = {}, bt[J][simd::W] = {};
    for (int c = 0; c < J; ++c) std::copy(b + c * ldb + done, b + c * ldb + len, bt[c]);
    for (int r = 0; r < R; ++r) std::copy(a + r * lda + done, a + r * lda + len, at[r]);
    tb_step<R, J>(&at[0][0], simd::W, &bt[0][0], simd::W, 0, s);
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < J; ++c) sums[r * J + c] = lane_sum(s[r][c]);
}

void tb_columns(const FewRowProduct& p, const float* a, int64_t lda, const float* b, float* acc,
                int64_t ldacc, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; j += kTbCols) {
    const int64_t cols = std::min<int64_t>(kTbCols, j1 - j);
    for (int64_t c0 = 0; c0 < p.k; c0 += kFewRowsChunk) {
      const int64_t len = std::min(kFewRowsChunk, p.k - c0);
      const float* bj = b + j * p.ldb + c0;
      for (int64_t g = 0; g < p.m; g += kTbRows) {
        float sums[kTbRows * kTbCols];
        const int64_t rows = std::min<int64_t>(kTbRows, p.m - g);
        const float* ag = a + g * lda + c0;
        with_rows<kTbRows>(rows, [&]<int R>() {
          if (cols == 2)
            tb_dot<R, 2>(ag, lda, bj, p.ldb, len, sums);
          else
            tb_dot<R, 1>(ag, lda, bj, p.ldb, len, sums);
        });
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            float& x = acc[(g + r) * ldacc + j + c];
            x = c0 == 0 ? sums[r * cols + c] : x + sums[r * cols + c];
          }
      }
    }
  }
}

// Floats between rows of a copy of `n` columns: whole cache lines, and not
// a multiple of 4 KiB, whose rows would share the L1's sets (and a load
// from one row would wait on a store to another, 4 KiB aliasing).
int64_t padded_row(int64_t n) {
  int64_t row = (n + 15) / 16 * 16;
  if (row % 1024 == 0) row += 16;
  return row;
}

void pack_a(const FewRowProduct& p, const float* a, float* packed) {
  const int64_t row = padded_row(p.k);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t q = 0; q < p.k; ++q) packed[i * row + q] = a[i * p.a_m + q * p.a_k];
}

// Columns [j0, j1) of C, every row: summed in `acc`, then finished into c.
void few_row_columns(const FewRowProduct& p, const float* packed_a, const float* b, float* acc,
                     float* c, int64_t j0, int64_t j1, const float* bias, bool residual) {
  const int64_t lda = padded_row(p.k), ldacc = padded_row(p.n);
  if (p.tb)
    tb_columns(p, packed_a, lda, b, acc, ldacc, j0, j1);
  else
    plain_columns(p, packed_a, lda, b, acc, ldacc, j0, j1);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      float x = acc[i * ldacc + j];
      if (bias) x = x + bias[j];
      float& y = c[i * p.c_m + j * p.c_n];
      y = residual ? y + x : x;
    }
}

class FewRowProductOp final : public BackendOp {
 public:
  FewRowProductOp(const FewRowProduct& p, bool bias, bool residual)
      : p_(p),
        bias_(bias),
        residual_(residual),
        impl_(fmt::format("few-row product [{}x{}x{}]{}{}", p.m, p.k, p.n, p.tb ? " tb" : "",
                          bias ? (residual ? " + bias, added" : " + bias") : "")) {}
  int64_t scratch_bytes() const override {
    return p_.m * (padded_row(p_.k) + padded_row(p_.n)) * 4;
  }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return 2 * p_.m * p_.n * p_.k; }
  void run(const void* a, const void* b, void* out, void* scratch, const void* extra,
           const void*) const override {
    const float* bias = bias_ ? static_cast<const float*>(extra) : nullptr;
    float* packed = static_cast<float*>(scratch);
    float* acc = packed + p_.m * padded_row(p_.k);
    pack_a(p_, static_cast<const float*>(a), packed);
    parallel_for(
        p_.n, grain_for(p_.m * p_.k),
        [&](int64_t j0, int64_t j1) {
          few_row_columns(p_, packed, static_cast<const float*>(b), acc, static_cast<float*>(out),
                          j0, j1, bias, residual_);
        },
        kPlainCols);
  }

 private:
  FewRowProduct p_;
  bool bias_, residual_;
  std::string impl_;
};

}  // namespace

bool few_row_product_of(const MatmulDims& d, const std::vector<int64_t>& sa,
                        const std::vector<int64_t>& sb, const std::vector<int64_t>& so,
                        FewRowProduct& p) {
  if (d.batch != 1 || d.m > kFewRows || d.k < 1 || d.n < 1 || d.k * d.n * 4 < kFewRowsMinB)
    return false;
  const size_t ra = sa.size(), rb = sb.size(), ro = so.size();
  // Each operand's strides along its matrix's rows and columns, whatever
  // made them (the attributes, or a transpose folded into the strides).
  const int64_t b_k = sb[rb - 2 + d.tb], b_n = sb[rb - 1 - d.tb];
  p = {.m = d.m,
       .n = d.n,
       .k = d.k,
       .a_m = sa[ra - 2 + d.ta],
       .a_k = sa[ra - 1 - d.ta],
       .ldb = b_n == 1 ? b_k : b_n,
       .c_m = so[ro - 2],
       .c_n = so[ro - 1],
       .tb = b_n != 1};
  // B along its rows, of N or of K; not a matrix-vector product over B's
  // rows of K (oneDNN's is faster).
  return (b_n == 1 || b_k == 1) && !(p.tb && d.m == 1);
}

int64_t few_row_lanes() { return simd::W; }

std::shared_ptr<const BackendOp> make_few_row_product(const FewRowProduct& p, bool bias,
                                                      bool residual) {
  WS_CHECK(p.m >= 1 && p.m <= kFewRows) << "few-row product of " << p.m << " rows";
  return std::make_shared<FewRowProductOp>(p, bias, residual);
}

}  // namespace ws::exec
