// Products over a short contraction (short_products.hpp).
#include "exec/short_products.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "exec/parallel.hpp"
#include "exec/simd.hpp"  // contraction off from here: the chain's fma() is explicit
#include "ir/attr.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

using simd::F;

// Rows of C a register block holds: each vector of B is loaded once for
// them all.
constexpr int kBlockRows = int(kShortBlockRows);
// Vectors of columns a register block holds.
constexpr int kBlockVectors = 2;
constexpr int64_t kBlockCols = kBlockVectors * simd::W;

// The sums of one register block: R rows of A (row r's A(r, q) at
// av[r][q]) times kBlockCols columns of B (B(q, j) at b[q * ldb + j]).
// Every element is the same chain of fused multiply-adds from 0, q = 0
// first.
template <int R>
[[gnu::always_inline]] inline void block_sums(const float (*av)[kShortK], const float* b,
                                              int64_t ldb, int64_t k, F (&acc)[R][kBlockVectors]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kBlockVectors; ++v) acc[r][v] = simd::set(0.0f);
  for (int64_t q = 0; q < k; ++q) {
    F bv[kBlockVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kBlockVectors; ++v) bv[v] = simd::loadu(b + q * ldb + v * simd::W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const F a = simd::set(av[r][q]);
#pragma GCC unroll 4
      for (int v = 0; v < kBlockVectors; ++v) acc[r][v] = simd::fma(a, bv[v], acc[r][v]);
    }
  }
}

// What a product adds to its sums as it stores them: a bias per column
// (matmul_bias: (a @ b) + bias), then the result's old value
// (matmul_bias_add: c + ((a @ b) + bias)), each one rounding.
struct Epilogue {
  const float* bias = nullptr;  // at the block's first column
  bool residual = false;
};

// R rows of C over columns [0, cols), B read at b (row stride ldb, whole
// blocks readable past cols): the last block, if partial, is computed whole
// and finished element by element. With Stream, whole blocks go past the
// caches.
template <int R, bool Stream>
void row_block(const float (*av)[kShortK], const float* b, int64_t ldb, int64_t k, int64_t cols,
               float* c, int64_t ldc, Epilogue ep) {
  int64_t j = 0;
  for (; j + kBlockCols <= cols; j += kBlockCols) {
    F acc[R][kBlockVectors];
    block_sums<R>(av, b + j, ldb, k, acc);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kBlockVectors; ++v) {
        float* y = c + r * ldc + j + v * simd::W;
        F x = acc[r][v];
        if (ep.bias) x = simd::add(x, simd::loadu(ep.bias + j + v * simd::W));
        if (ep.residual) x = simd::add(simd::loadu(y), x);
        if constexpr (Stream)
          simd::stream(y, x);
        else
          simd::storeu(y, x);
      }
  }
  if (j == cols) return;
  F acc[R][kBlockVectors];
  block_sums<R>(av, b + j, ldb, k, acc);
  alignas(64) float last[kBlockCols];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < kBlockVectors; ++v) simd::storeu(last + v * simd::W, acc[r][v]);
    float* y = c + r * ldc + j;
    for (int64_t i = 0; i < cols - j; ++i) {  // a few elements: no call to a copy
      float x = last[i];
      if (ep.bias) x = x + ep.bias[j + i];
      if (ep.residual) x = y[i] + x;
      y[i] = x;
    }
  }
}

}  // namespace

int64_t ShortProduct::staged_row() const {
  int64_t row = (n + kBlockCols - 1) / kBlockCols * kBlockCols;
  if (row % 512 == 0) row += kBlockCols;  // rows 2 KiB apart share L1 sets
  return row;
}

ShortProduct short_product_of(const MatmulDims& d, const std::vector<int64_t>& sa,
                              const std::vector<int64_t>& sb) {
  const size_t r = sa.size();
  ShortProduct p;
  p.m = d.m, p.n = d.n, p.k = d.k;
  // A's rows along its dim r - 2 ([m, k]) or, transposed, r - 1 ([k, m]);
  // B's likewise.
  p.a_m = sa[r - 2 + d.ta], p.a_k = sa[r - 1 - d.ta];
  p.b_k = sb[r - 2 + d.tb], p.b_n = sb[r - 1 - d.tb];
  return p;
}

ShortProduct short_product_of(const ir::Type& a, const ir::Type& b, const ir::Attrs& attrs) {
  WS_CHECK(a.rank() == 2 && b.rank() == 2) << "short product of a batch";
  return short_product_of(matmul_dims(a.shape, b.shape, attrs), row_major_strides(a.shape),
                          row_major_strides(b.shape));
}

void stage_short_b(const ShortProduct& p, const float* b, int64_t q0, int64_t q1, float* staged) {
  WS_CHECK(p.k >= 1 && p.k <= kShortK) << "short product of K " << p.k;
  const int64_t row = p.staged_row();
  for (int64_t q = q0; q < q1; ++q) {
    const float* from = b + q * p.b_k;
    float* to = staged + q * row;
    if (p.b_n == 1)
      std::copy(from, from + p.n, to);
    else
      for (int64_t j = 0; j < p.n; ++j) to[j] = from[j * p.b_n];
    std::fill(to + p.n, to + row, 0.0f);
  }
}

namespace {

// short_product_rows, finishing each element with `ep`.
void short_rows(const ShortProduct& p, const float* a, const float* staged, int64_t i0,
                int64_t rows, int64_t j0, int64_t cols, float* c, int64_t ldc, bool stream,
                Epilogue ep) {
  const int64_t ldb = p.staged_row();
  float av[kBlockRows][kShortK];
  for (int64_t r = 0; r < rows; r += kBlockRows) {
    const int64_t nr = std::min<int64_t>(kBlockRows, rows - r);
    for (int64_t i = 0; i < nr; ++i)
      for (int64_t q = 0; q < p.k; ++q) av[i][q] = a[(i0 + r + i) * p.a_m + q * p.a_k];
    float* cr = c + r * ldc;
    auto block = [&]<bool S>() {
      switch (nr) {
        case 4: return row_block<4, S>(av, staged + j0, ldb, p.k, cols, cr, ldc, ep);
        case 3: return row_block<3, S>(av, staged + j0, ldb, p.k, cols, cr, ldc, ep);
        case 2: return row_block<2, S>(av, staged + j0, ldb, p.k, cols, cr, ldc, ep);
        default: return row_block<1, S>(av, staged + j0, ldb, p.k, cols, cr, ldc, ep);
      }
    };
    if (stream)
      block.template operator()<true>();
    else
      block.template operator()<false>();
  }
}

}  // namespace

void short_product_rows(const ShortProduct& p, const float* a, const float* staged, int64_t i0,
                        int64_t rows, int64_t j0, int64_t cols, float* c, int64_t ldc,
                        bool stream) {
  short_rows(p, a, staged, i0, rows, j0, cols, c, ldc, stream, {});
}

namespace {

// Rows of C a task of the backend op computes, each block of rows along
// whole rows: writing [4096, 25088] floats on 2 threads (AMD EPYC Zen 3),
// 4 rows at a time along whole rows took 18.7 ms, along 2 KiB pieces of
// them (a block of columns down every row, then the next) 37.3.
constexpr int64_t kTaskRows = 16;
// Columns a piece of a strided result is computed in, before it is stored.
constexpr int64_t kPieceCols = 512;
// A result of this many bytes or more is stored past the caches: it cannot
// stay in them, and a store through them reads each line first. Writing
// those floats as above, past the caches: 11.2 ms.
constexpr int64_t kStreamBytes = int64_t(64) << 20;

class ShortProductOp final : public BackendOp {
 public:
  ShortProductOp(const ShortProduct& p, std::vector<int64_t> oa, std::vector<int64_t> ob,
                 std::vector<int64_t> oo, int64_t out_row, int64_t out_col, bool bias,
                 bool residual)
      : p_(p),
        oa_(std::move(oa)),
        ob_(std::move(ob)),
        oo_(std::move(oo)),
        out_row_(out_row),
        out_col_(out_col),
        bias_(bias),
        residual_(residual),
        stream_(!residual && int64_t(oo_.size()) * p.m * p.n * 4 >= kStreamBytes && out_col == 1 &&
                out_row % kBlockCols == 0 &&
                std::all_of(oo_.begin(), oo_.end(), [](int64_t o) { return o % kBlockCols == 0; })),
        impl_(fmt::format("short product [{}x{}x{}] x{}{}{}", p.m, p.k, p.n, oo_.size(),
                          bias ? (residual ? " + bias, added" : " + bias") : "",
                          stream_ ? ", stored past the caches" : "")) {
    WS_CHECK(oa_.size() == oo_.size() && ob_.size() == oo_.size()) << "short product batches";
  }
  int64_t scratch_bytes() const override { return int64_t(oo_.size()) * p_.staged_bytes(); }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return 2 * int64_t(oo_.size()) * p_.m * p_.n * p_.k; }
  void run(const void* a, const void* b, void* out, void* scratch, const void* extra,
           const void*) const override {
    float* staged = static_cast<float*>(scratch);
    const int64_t batch = int64_t(oo_.size()), per = p_.k * p_.staged_row();
    parallel_for(batch * p_.k, grain_for(p_.n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t bt = r / p_.k, q = r % p_.k;
        stage_short_b(p_, static_cast<const float*>(b) + ob_[size_t(bt)], q, q + 1,
                      staged + bt * per);
      }
    });
    const int64_t row_tasks = (p_.m + kTaskRows - 1) / kTaskRows;
    const bool stream = stream_ && reinterpret_cast<uintptr_t>(out) % (kBlockCols * 4) == 0;
    const int64_t cost = kTaskRows * p_.n * std::max<int64_t>(1, p_.k / 4);
    parallel_for(batch * row_tasks, grain_for(cost), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t bt = t / row_tasks, i0 = t % row_tasks * kTaskRows;
        const int64_t rows = std::min(kTaskRows, p_.m - i0);
        const float* pa = static_cast<const float*>(a) + oa_[size_t(bt)];
        const float* sb = staged + bt * per;
        float* pc = static_cast<float*>(out) + oo_[size_t(bt)] + i0 * out_row_;
        const float* bias = bias_ ? static_cast<const float*>(extra) : nullptr;
        if (out_col_ == 1) {
          short_rows(p_, pa, sb, i0, rows, 0, p_.n, pc, out_row_, stream, {bias, residual_});
          continue;
        }
        alignas(64) float piece[kTaskRows * kPieceCols];
        for (int64_t j0 = 0; j0 < p_.n; j0 += kPieceCols) {
          const int64_t cols = std::min(kPieceCols, p_.n - j0);
          short_rows(p_, pa, sb, i0, rows, j0, cols, piece, kPieceCols, false,
                     {bias ? bias + j0 : nullptr, false});
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
              float& y = pc[i * out_row_ + (j0 + j) * out_col_];
              y = residual_ ? y + piece[i * kPieceCols + j] : piece[i * kPieceCols + j];
            }
        }
      }
      if (stream) simd::stream_fence();
    });
  }

 private:
  ShortProduct p_;
  std::vector<int64_t> oa_, ob_, oo_;
  int64_t out_row_, out_col_;
  bool bias_, residual_;  // matmul_bias's bias, matmul_bias_add's sum into out
  bool stream_;           // whole blocks stored past the caches, where the result is aligned
  std::string impl_;
};

}  // namespace

std::shared_ptr<const BackendOp> make_short_product(
    const ShortProduct& p, std::vector<int64_t> a_offsets, std::vector<int64_t> b_offsets,
    std::vector<int64_t> out_offsets, int64_t out_row, int64_t out_col, bool bias, bool residual) {
  return std::make_shared<ShortProductOp>(p, std::move(a_offsets), std::move(b_offsets),
                                          std::move(out_offsets), out_row, out_col, bias, residual);
}

}  // namespace ws::exec
