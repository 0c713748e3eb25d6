// Floating-point reductions, one definition for every mode: the reference
// kernels (interpreter, eager tensors) and the compiled kernels call these
// functions, so a sum rounds the same way everywhere. (Adam's normalized
// update turns last-bit differences of near-zero gradients into visible
// parameter differences, so "nearly the same" is not enough.)
//
// A sum's order is a function of its sequence alone: the elements reduced
// into one result, in row-major order of the operand. Neither the shape's
// factorization, nor the kernel, nor the thread count changes it:
//  - the sequence is cut into blocks of kSumBlock elements;
//  - in a block, lane j (j < kSumLanes) adds, left to right from +0, the
//    elements at block positions j, j + kSumLanes, j + 2*kSumLanes, ...; then
//    lane j += lane j+w for w = kSumLanes/2, ..., 2, 1, and lane 0 is the
//    block's sum. Contiguous data thus sums in vector registers;
//  - block sums combine in a carry tree: each block is pushed on a stack, and
//    while the two top entries cover equally many blocks they are replaced by
//    their sum (lower + upper); at the end the stack folds from the top,
//    t = entry + t. Any aligned run of 2^k blocks is one subtree, so threads
//    can sum disjoint aligned runs and combine them in the same tree.
// Each element passes through at most kSumBlock/kSumLanes + log2(kSumLanes)
// + 2*ceil(log2(blocks)) roundings (16 + 6 + 2*14 for 10^7 elements), so
// |error| <= that count * eps/2 * sum |x|, where a sequential f32 sum has
// n-1 roundings. An empty sum is +0.
//
// Maxima are exact: the order can only choose between -0 and +0, or between
// NaNs. Results are normalized (a zero maximum is +0, a NaN maximum is the
// default quiet NaN), so every order gives the same bits. An empty maximum is
// -inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "wholestep/dtype.hpp"

namespace ws::exec {

constexpr int64_t kSumLanes = 64;
constexpr int64_t kSumBlock = 1024;

// The sum of x[0, n) in the order above.
template <class T>
T sum(const T* x, int64_t n);

// Sums (maxima) of `x` over a reduction walk: `shape` is the operand's shape,
// best with dims merged (merge_dims), and `strides` the result's strides per
// operand dim, 0 on reduced dims (reduce_result_strides). `y` receives one
// value per kept index. Runs in parallel on the OpenMP pool when the work is
// large enough; the result does not depend on the thread count. Allocates
// nothing.
template <class T>
void reduce_sum(const Shape& shape, const std::vector<int64_t>& strides, const T* x, T* y);
template <class T>
void reduce_max(const Shape& shape, const std::vector<int64_t>& strides, const T* x, T* y);

// One sum fed in pieces: add() calls continue one sequence, and finish()
// returns what sum() and reduce_sum give for the whole sequence, bit for bit
// (a fused loop sums values it computes a chunk at a time). Allocates
// nothing; the state lives in the object.
template <class T>
class SumStream {
 public:
  SumStream();
  void add(const T* x, int64_t n);
  T finish();

 private:
  alignas(64) std::byte state_[1536];
};

// The sums of `width` columns fed rows at a time (a fused loop's sum of an
// [M, K] value over M), each column's sequence in the order above: add()
// continues the sequences, finish() gives what reduce_sum gives each
// column. Rows may be split between streams at multiples of kSumBlock: a
// stream given each part's sums in order (push_sums, with the blocks the
// part covers, before any add()) finishes with the whole columns' sums.
// The state lives in the caller's storage, storage_size(width) values.
template <class T>
class ColumnStream {
 public:
  static int64_t storage_size(int64_t width);
  ColumnStream(int64_t width, T* storage);
  // The next `rows` rows, row i's values at x + i * stride.
  void add(const T* x, int64_t rows, int64_t stride);
  // A whole block (`rows` of them, kSumBlock but at the end), at the start
  // of one, that the caller summed into lanes() as add() would have: lane j
  // (width values at lanes() + j * width) +0 + row j, + row j + kSumLanes,
  // ... (a compiled fused loop summing as it computes: fused_jit.cpp).
  T* lanes() { return lanes_; }
  void add_filled(int64_t rows);
  void push_sums(const T* sums, int64_t blocks);
  void finish(T* out);

 private:
  void flush();
  static constexpr int kDepth = 64;  // carry entries: one per bit of the block count
  int64_t width_;
  T* lanes_;         // kSumLanes rows of width_
  T* carry_;         // the carry tree's entries: rows of width_
  int64_t pos_ = 0;  // rows in the current block
  int depth_ = 0;
  int64_t size_[kDepth];  // blocks each entry covers
};

// reduce_sum over a column walk (`shape` and `strides` as reduce_sum's:
// the innermost dim kept, at least two elements summed into each result) of
// an operand that is not stored but computed elementwise from stored arrays
// of `shape` as it is read: T(x) (widened: f32 summed in f64), x * x
// (square) or x * y (product). Each result gets the bits reduce_sum gives it
// over the operand stored first (a fused loop's mean summed in double, a
// variance's sum of squares, a gradient's sum of products, read straight
// from the arrays instead of from a copy of the operand). Allocates nothing.
enum class ColumnOperand : uint8_t { widened, square, product };
template <class S, class T>
void column_sums(ColumnOperand op, const Shape& shape, const std::vector<int64_t>& strides,
                 const S* x, const S* y, T* out);

// The maximum of a sequence fed in pieces, as reduce_max gives it.
template <class T>
class MaxStream {
 public:
  void add(const T* x, int64_t n);
  T finish() const;

 private:
  T m_ = -std::numeric_limits<T>::infinity();
};

// How reduce_sum and reduce_max walk a reduction: "rows" when the operand's
// innermost dim is reduced (contiguous runs per result), "columns" when it is
// kept (vectorized across neighbouring results), "all" for one result over a
// contiguous operand, "none" when nothing is reduced. For kernel names.
const char* reduce_walk_name(const Shape& shape, const std::vector<int64_t>& strides);

}  // namespace ws::exec
