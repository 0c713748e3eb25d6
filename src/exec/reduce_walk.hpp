// The walks of the reductions (reduce.hpp), shared by the sums
// (reduce_sum.cpp) and the maxima (reduce_max.cpp). A walk (merged operand
// shape, result strides) splits into kept dims (one result per index) and
// reduced dims (the sequence of each result, row-major). Two loops cover
// every walk:
//  - rows: the operand's innermost dim is reduced, so a result's sequence is
//    a series of contiguous runs; a single run (row sums, sums of all) sums
//    in vector registers, several (BatchNorm's [N, C, HW] over N and HW) go
//    through a streaming state whose lanes continue across runs;
//  - columns: the innermost dim is kept, so neighbouring results read
//    neighbouring elements (column sums of [rows, cols], bias gradients):
//    a tile of kTile results advances in lockstep, each with its own lanes
//    and carry tree, vectorized across the tile.
// Both parallelize over results; a result whose sequence is long while
// results are fewer than threads splits its sequence into aligned runs of
// 2^k blocks, subtrees of its carry tree, so the bits do not change.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/parallel.hpp"
#include "exec/reduce.hpp"
#include "exec/strided_walk.hpp"

namespace ws::exec::reduce_detail {

constexpr int64_t L = kSumLanes, B = kSumBlock;
static_assert(B % L == 0 && (L & (L - 1)) == 0, "lanes: a power of two dividing the block");
constexpr int64_t kTile = 64;       // results a column walk carries in lockstep
constexpr int64_t kMaxGroups = 64;  // aligned runs a split sequence is cut into
// Sequences shorter than this are never split (they are worth less than a
// parallel region).
constexpr int64_t kSplitLength = 4 * kCheapGrain;

// A reduction walk: kept dims (size, operand stride, result stride) and
// reduced dims (size, operand stride), outer to inner, size-1 dims dropped.
struct Walk {
  int nk = 0, nr = 0;
  int64_t ksize[kMaxRank], kin[kMaxRank], kout[kMaxRank];
  int64_t rsize[kMaxRank], rin[kMaxRank];
  int64_t results = 1, length = 1;  // results, and elements reduced into each
  bool inner_kept = false;          // the innermost dim is kept (stride 1 in both)
};

// The walk reducing `shape` into a result at `strides` (0 on reduced dims).
Walk analyze(const Shape& shape, const std::vector<int64_t>& strides);

// a[j] = f(a[j], a[j + W]) for W, W/2, ..., 1: lane_tree's steps on lanes
// that were all written, with trip counts the compiler sees (so every step
// is a few vector instructions).
template <int64_t W, class T, class F>
inline T halve(T* a, F f) {
  for (int64_t j = 0; j < W; ++j) a[j] = f(a[j], a[j + W]);
  if constexpr (W > 1) return halve<W / 2>(a, f);
  return a[0];
}

// Every result of a rows walk, in parallel over results: a result of one
// run takes one_run(x, n); a result of several runs feeds them in order to
// an accumulator `Acc` (Stream or MaxStream: add(x, n), finish()).
template <class Acc, class T, class OneRun>
void each_row_result(const Walk& w, const T* x, T* y, OneRun one_run) {
  const int64_t run = w.rsize[w.nr - 1], runs = w.length / run;
  parallel_for(
      w.results, grain_for(w.length),
      [&](int64_t b, int64_t e) {
        Odometer<2> k(w.nk, w.ksize, {w.kin, w.kout}, b);
        for (int64_t o = b; o < e; ++o, k.next()) {
          if (w.nr == 1) {
            y[k.off[1]] = one_run(x + k.off[0], run);
            continue;
          }
          Acc acc;
          Odometer<1> r(w.nr - 1, w.rsize, {w.rin});
          for (int64_t i = 0; i < runs; ++i, r.next()) acc.add(x + k.off[0] + r.off[0], run);
          y[k.off[1]] = acc.finish();
        }
      },
      1);
}

// Results of empty sequences, or of a walk over a single element (`one`
// maps it to its result).
template <class T, class F>
bool trivial(const Walk& w, const T* x, T* y, T empty, F&& one) {
  if (w.results == 0) return true;
  if (w.length == 0) {
    Odometer<2> k(w.nk, w.ksize, {w.kin, w.kout}, 0);
    for (int64_t o = 0; o < w.results; ++o, k.next()) y[k.off[1]] = empty;
    return true;
  }
  if (w.nk == 0 && w.nr == 0) {  // one element
    y[0] = one(x[0]);
    return true;
  }
  return false;
}

}  // namespace ws::exec::reduce_detail
