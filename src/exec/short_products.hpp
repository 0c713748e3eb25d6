// Matrix products over a short contraction (K of at most kShortK: a weight
// gradient over a batch of a few rows, dY^T X), computed by our own loops
// rather than oneDNN's. Every f32 product of such a K, in every mode (the
// interpreter, a program's product, and a product computed inside the loop
// of its one reader, fused_loop.hpp's product loops), is
//
//   C(i, j) = fma(A(i, K-1), B(K-1, j), ... fma(A(i, 1), B(1, j), fma(A(i, 0), B(0, j), 0)))
//
// one rounding per term, q = 0 first, whatever part of C a thread computes
// and whatever the team. That is what lets a product be computed a tile at
// a time where its one reader, an optimizer's update, walks the weight: the
// gradient never exists as an array, and each tile's bits are the whole
// product's. oneDNN's kernels sum in an order of their own (gemm:jit's is
// this one for most shapes, not all), which a tile could not promise.
//
// B is first copied whole into the caller's scratch (stage_short_b), its
// rows zero-padded to whole register blocks at a stride that keeps them out
// of each other's L1 sets: B's own rows often lie a multiple of 4 KiB apart
// (a weight of 512 or 4096 columns), which made a tile 1.5-2.7x slower.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/dnnl_backend.hpp"
#include "exec/reference.hpp"

namespace ws::exec {

// The products these loops compute: a contraction of at most kShortK, rows
// of at least kShortMinColumns, and at least kShortMinOutputs results. The
// loops run along rows of C: over narrower rows they spent their time
// gathering A and finishing partial blocks, and over products that stay in
// the caches oneDNN's kernels are faster ([4096 x 8] x [8 x 64] 0.72x,
// [2048 x 16] x [16 x 64] 0.58x, [1024 x 8] x [8 x 1024] 1.0x, [4096 x 8]
// x [8 x 25088] 1.05-1.3x; AMD EPYC Zen 3, 2 threads). Smaller products
// stay oneDNN's, and no loop takes them in.
constexpr int64_t kShortK = 16, kShortMinColumns = 16, kShortMinOutputs = int64_t(1) << 20;

inline bool short_contraction(const MatmulDims& d) {
  return d.k >= 1 && d.k <= kShortK && d.n >= kShortMinColumns &&
         d.batch * d.m * d.n >= kShortMinOutputs;
}

// One [m, k] x [k, n] matrix product: A(i, q) at element i * a_m + q * a_k
// of its operand, B(q, j) at q * b_k + j * b_n.
struct ShortProduct {
  int64_t m = 0, n = 0, k = 0;
  int64_t a_m = 0, a_k = 0, b_k = 0, b_n = 0;
  // Floats between rows of the staged B, and the bytes it takes.
  int64_t staged_row() const;
  int64_t staged_bytes() const { return k * staged_row() * 4; }
};

// One matrix of the product d of operands read at element strides sa and sb
// over their shapes (the last two dims are the matrix).
ShortProduct short_product_of(const MatmulDims& d, const std::vector<int64_t>& sa,
                              const std::vector<int64_t>& sb);
// The product of row-major operands of types a and b (attrs: transpose_a,
// transpose_b), one matrix (no batch dims).
ShortProduct short_product_of(const ir::Type& a, const ir::Type& b, const ir::Attrs& attrs);

// B's rows [q0, q1) into `staged` (staged_bytes(), 64-byte aligned).
void stage_short_b(const ShortProduct& p, const float* b, int64_t q0, int64_t q1, float* staged);

// Rows [i0, i0 + rows) of C over columns [j0, j0 + cols), from the staged
// B, into c: row r at c + r * ldc, its columns at unit stride. With
// `stream`, whole register blocks are stored past the caches (c and ldc
// aligned to 64 bytes and whole blocks; the caller then fences, simd.hpp's
// stream_fence).
void short_product_rows(const ShortProduct& p, const float* a, const float* staged, int64_t i0,
                        int64_t rows, int64_t j0, int64_t cols, float* c, int64_t ldc,
                        bool stream = false);

// Rows of C a register block holds: rows the kernel computes at once.
constexpr int64_t kShortBlockRows = 4;

// The backend op of such a product: batch offsets of each matrix in a, b
// and out (elements), and out's row and column strides; with `bias` it
// adds a bias per column (matmul_bias, run's `extra`), with `residual` then
// adds that to out's old value (matmul_bias_add), each one rounding.
std::shared_ptr<const BackendOp> make_short_product(
    const ShortProduct& p, std::vector<int64_t> a_offsets, std::vector<int64_t> b_offsets,
    std::vector<int64_t> out_offsets, int64_t out_row, int64_t out_col, bool bias, bool residual);

}  // namespace ws::exec
