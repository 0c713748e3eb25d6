// The row-major walk over a shape whose operands each have their own
// strides, written once for every kernel that walks one: broadcasts and
// transposes, kernels reading broadcast operands, reductions, fused loops,
// the reference kernels. A walk goes a row (the last dim) at a time: the
// caller's loop along a row stays a plain loop the compiler vectorizes, and
// the index carries into the outer dims once per row.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "wholestep/dtype.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {

// The highest rank a walk takes: the index lives on the stack (kernels walk
// every step and allocate nothing).
constexpr int64_t kMaxRank = 8;

// A row-major index over `rank` dims of sizes size[0, rank), and for each of
// N operands its offset off[i] = sum(idx[d] * stride[i][d]). next() counts
// the last dim up and carries into the outer ones; after the last index it
// wraps around to zero.
template <int N>
struct Odometer {
  int rank;
  const int64_t* size;
  std::array<const int64_t*, N> stride;
  int64_t idx[kMaxRank] = {};
  int64_t off[N] = {};

  // At index `start`, counted row-major over the dims.
  Odometer(int rank_, const int64_t* size_, std::array<const int64_t*, N> stride_,
           int64_t start = 0)
      : rank(rank_), size(size_), stride(stride_) {
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = start % size[d];
      start /= size[d];
      for (int i = 0; i < N; ++i) off[i] += idx[d] * stride[i][d];
    }
  }

  // Always inlined: it runs once a row, and where a file instantiates many
  // walks (broadcast_kernels.cpp) GCC would otherwise call it.
  [[gnu::always_inline]] void next() {
    for (int d = rank - 1; d >= 0; --d) {
      for (int i = 0; i < N; ++i) off[i] += stride[i][d];
      if (++idx[d] < size[d]) return;
      for (int i = 0; i < N; ++i) off[i] -= stride[i][d] * size[d];
      idx[d] = 0;
    }
  }
};

// Elements [begin, end) of the row-major walk over `shape` (rank at most
// kMaxRank), operand i read at strides stride[i] (one per dim of shape),
// visited a row at a time: f(i, off, len) for each piece of a row, where i
// is the piece's first element, off[k] operand k's offset of it and len its
// length; along the piece operand k moves by its last stride. Rows cut by
// the range's ends are visited in part, so threads can split a walk
// anywhere. A rank-0 shape is one row of one element.
template <int N, class F>
void walk_rows(const Shape& shape, std::array<const int64_t*, N> stride, int64_t begin, int64_t end,
               F&& f) {
  if (begin >= end) return;
  const int r = int(shape.size());
  // A rank-0 shape walks as [1], so f has one call site, where it inlines.
  const int64_t len = r == 0 ? 1 : shape[size_t(r - 1)];
  int64_t inner[N], at[N];
  for (int k = 0; k < N; ++k) inner[k] = r == 0 ? 0 : stride[k][r - 1];
  Odometer<N> o(std::max(r - 1, 0), shape.data(), stride, begin / len);
  for (int64_t i = begin, col = begin % len; i < end; col = 0, o.next()) {
    const int64_t take = std::min(len - col, end - i);
    for (int k = 0; k < N; ++k) at[k] = o.off[k] + col * inner[k];
    f(i, static_cast<const int64_t*>(at), take);
    i += take;
  }
}

// Visits every element of `shape` in row-major order, calling f(flat, offset)
// where offset = sum(index[d] * strides[d]).
template <class F>
void strided_walk(const Shape& shape, const std::vector<int64_t>& strides, F&& f) {
  const int64_t r = int64_t(shape.size());
  const int64_t n = numel(shape);
  if (n == 0) return;
  WS_CHECK(r <= kMaxRank) << "rank " << r << " is above the supported " << kMaxRank;
  const int64_t inner = r == 0 ? 0 : strides[size_t(r - 1)];
  walk_rows<1>(shape, {strides.data()}, 0, n, [&](int64_t i, const int64_t* off, int64_t len) {
    for (int64_t j = 0; j < len; ++j) f(i + j, off[0] + j * inner);
  });
}

}  // namespace ws::exec
