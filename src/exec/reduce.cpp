// The reductions of reduce.hpp. A walk (merged operand shape, result strides)
// splits into kept dims (one result per index) and reduced dims (the
// sequence of each result, row-major). Two loops cover every walk:
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
#include "exec/reduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>

#include "exec/parallel.hpp"
#include "exec/reference.hpp"
#include "exec/strided_walk.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

constexpr int64_t L = kSumLanes, B = kSumBlock;
static_assert(B % L == 0 && (L & (L - 1)) == 0, "lanes: a power of two dividing the block");
constexpr int kMaxDepth = 48;       // carry-tree entries: at most one per bit of the block count
constexpr int64_t kTile = 64;       // results a column walk carries in lockstep
constexpr int64_t kMaxGroups = 64;  // aligned runs a split sequence is cut into

// ---------------------------------------------------------------------------
// Walks.

// A reduction walk: kept dims (size, operand stride, result stride) and
// reduced dims (size, operand stride), outer to inner, size-1 dims dropped.
struct Walk {
  int nk = 0, nr = 0;
  int64_t ksize[kMaxRank], kin[kMaxRank], kout[kMaxRank];
  int64_t rsize[kMaxRank], rin[kMaxRank];
  int64_t results = 1, length = 1;  // results, and elements reduced into each
  bool inner_kept = false;          // the innermost dim is kept (stride 1 in both)
};

Walk analyze(const Shape& shape, const std::vector<int64_t>& strides) {
  const int r = int(shape.size());
  WS_CHECK(r <= kMaxRank) << "rank " << r << " is above the supported " << kMaxRank;
  WS_CHECK(strides.size() == shape.size()) << strides.size() << " strides for rank " << r;
  int64_t in_stride[kMaxRank], s = 1;
  for (int d = r - 1; d >= 0; --d) in_stride[d] = s, s *= shape[size_t(d)];
  Walk w;
  for (int d = 0; d < r; ++d) {
    const int64_t n = shape[size_t(d)];
    if (n == 1) continue;
    w.inner_kept = strides[size_t(d)] != 0;
    if (w.inner_kept) {
      w.ksize[w.nk] = n, w.kin[w.nk] = in_stride[d], w.kout[w.nk] = strides[size_t(d)];
      ++w.nk;
      w.results *= n;
    } else {
      w.rsize[w.nr] = n, w.rin[w.nr] = in_stride[d];
      ++w.nr;
      w.length *= n;
    }
  }
  return w;
}

// ---------------------------------------------------------------------------
// Sums.

// The lane tree of a block: lane j += lane j+w for w = L/2, ..., 1. Lanes at
// or above `count` were never written and stand for +0, which they would
// add exactly (a lane is never -0: it starts at +0, and x + y is -0 only
// when both are), so their steps are skipped.
template <class T, int64_t N>
T* lane_tree(T (*lanes)[N], int64_t count, int64_t width) {
  count = std::min(count, L);
  for (int64_t w = L / 2; w >= 1; w /= 2) {
    for (int64_t j = 0; j < w && j + w < count; ++j)
      for (int64_t c = 0; c < width; ++c) lanes[j][c] += lanes[j + w][c];
    count = std::min(count, w);
  }
  return lanes[0];
}

// A carry tree for N sequences advancing in lockstep (a column tile; N = 1
// for one sequence). Entries cover `size` blocks.
template <class T, int64_t N>
struct Carry {
  T v[kMaxDepth][N];
  int64_t size[kMaxDepth];
  int depth = 0;

  // Pushes the sums in `x` (width values, overwritten) covering `s` blocks.
  void push(T* x, int64_t s, int64_t width) {
    while (depth > 0 && size[depth - 1] == s) {
      --depth;
      for (int64_t c = 0; c < width; ++c) x[c] = v[depth][c] + x[c];
      s *= 2;
    }
    std::copy_n(x, width, v[depth]);
    size[depth++] = s;
  }
  void fold(T* out, int64_t width) const {
    if (depth == 0) {
      std::fill_n(out, width, T(0));
      return;
    }
    T t[N];
    std::copy_n(v[depth - 1], width, t);
    for (int d = depth - 2; d >= 0; --d)
      for (int64_t c = 0; c < width; ++c) t[c] = v[d][c] + t[c];
    std::copy_n(t, width, out);
  }
};

// a[j] = f(a[j], a[j + W]) for W, W/2, ..., 1: lane_tree's steps on lanes
// that were all written, with trip counts the compiler sees (so every step
// is a few vector instructions).
template <int64_t W, class T, class F>
inline T halve(T* a, F f) {
  for (int64_t j = 0; j < W; ++j) a[j] = f(a[j], a[j + W]);
  if constexpr (W > 1) return halve<W / 2>(a, f);
  return a[0];
}

// The sum of one block x[0, n), n <= B, in registers.
template <class T>
T block_sum(const T* __restrict x, int64_t n) {
  alignas(64) T a[L] = {};
  int64_t k = 0;
  for (; k + L <= n; k += L)
    for (int64_t j = 0; j < L; ++j) a[j] += x[k + j];
  for (int64_t j = 0; k + j < n; ++j) a[j] += x[k + j];
  return halve<L / 2>(a, [](T u, T v) { return u + v; });
}

// The carry-tree value of blocks [b0, b1) of the n-element sequence x.
template <class T>
T blocks_sum(const T* x, int64_t n, int64_t b0, int64_t b1) {
  Carry<T, 1> carry;
  for (int64_t b = b0; b < b1; ++b) {
    T s = block_sum(x + b * B, std::min(B, n - b * B));
    carry.push(&s, 1, 1);
  }
  T out;
  carry.fold(&out, 1);
  return out;
}

// Blocks per aligned group when `blocks` are split for threads: a power of
// two, so each group is one subtree of the carry tree, and at most
// kMaxGroups groups.
int64_t group_blocks(int64_t blocks) {
  int64_t g = 1;
  while (blocks > g * kMaxGroups) g *= 2;
  return g;
}

// Sequences shorter than this are never split (they are worth less than a
// parallel region).
constexpr int64_t kSplitLength = 4 * kCheapGrain;

template <class T>
T sum_contiguous(const T* x, int64_t n, bool split) {
  if (n <= B) return block_sum(x, n);  // one block: the carry tree returns it
  const int64_t blocks = (n + B - 1) / B;
  if (!split || n < kSplitLength || team() < 2) return blocks_sum(x, n, 0, blocks);
  const int64_t g = group_blocks(blocks), groups = (blocks + g - 1) / g;
  T part[kMaxGroups];
  parallel_for(
      groups, 1,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          part[i] = blocks_sum(x, n, i * g, std::min(blocks, (i + 1) * g));
      },
      1);
  Carry<T, 1> carry;
  for (int64_t i = 0; i < groups; ++i)
    carry.push(&part[i], std::min(blocks, (i + 1) * g) - i * g, 1);
  T out;
  carry.fold(&out, 1);
  return out;
}

// One sequence arriving in runs: the lanes of the current block continue
// across runs.
template <class T>
struct Stream {
  alignas(64) T lanes[L][1] = {};
  int64_t pos = 0;  // elements in the current block
  Carry<T, 1> carry;

  void add(const T* x, int64_t n) {
    while (n > 0) {
      if (pos == 0 && n >= B) {  // a whole block: in registers
        T s = block_sum(x, B);
        carry.push(&s, 1, 1);
        x += B, n -= B;
        continue;
      }
      const int64_t take = std::min(n, B - pos);
      int64_t k = 0, lane = pos % L;
      if (lane != 0) {
        k = std::min(take, L - lane);
        for (int64_t j = 0; j < k; ++j) lanes[lane + j][0] += x[j];
      }
      for (; k + L <= take; k += L)
        for (int64_t j = 0; j < L; ++j) lanes[j][0] += x[k + j];
      for (int64_t j = 0; k + j < take; ++j) lanes[j][0] += x[k + j];
      pos += take, x += take, n -= take;
      if (pos == B) flush();
    }
  }
  void flush() {
    carry.push(lane_tree<T, 1>(lanes, pos, 1), 1, 1);
    for (auto& l : lanes) l[0] = T(0);
    pos = 0;
  }
  T finish() {
    if (pos > 0) flush();
    T out;
    carry.fold(&out, 1);
    return out;
  }
};

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

template <class T>
void sum_rows(const Walk& w, const T* x, T* y) {
  const int64_t run = w.rsize[w.nr - 1];
  if (w.nr == 1 && w.results < team()) {  // few long rows: split each
    Odometer<2> k(w.nk, w.ksize, {w.kin, w.kout}, 0);
    for (int64_t o = 0; o < w.results; ++o, k.next())
      y[k.off[1]] = sum_contiguous(x + k.off[0], run, true);
    return;
  }
  each_row_result<Stream<T>>(w, x, y,
                             [](const T* p, int64_t n) { return sum_contiguous(p, n, false); });
}

// Steps [s0, s1) of the sequences of `width` neighbouring results starting
// at x (s0 a multiple of B), folded into out[0, width).
template <class T, int64_t W>
void column_tile(const Walk& w, const T* x, int64_t width, int64_t s0, int64_t s1, T* out) {
  const int64_t cw = W ? W : width;
  alignas(64) T lanes[L][kTile];
  Carry<T, kTile> carry;
  Odometer<1> r(w.nr, w.rsize, {w.rin}, s0);
  int64_t pos = 0;
  for (int64_t i = s0; i < s1; ++i, r.next()) {
    const T* row = x + r.off[0];
    T* l = lanes[pos & (L - 1)];
    if (pos < L) {  // the lane's first element: +0 + x, as from zeroed lanes
      for (int64_t c = 0; c < cw; ++c) l[c] = T(0) + row[c];
    } else {
      for (int64_t c = 0; c < cw; ++c) l[c] += row[c];
    }
    if (++pos == B) {
      carry.push(lane_tree<T, kTile>(lanes, pos, cw), 1, cw);
      pos = 0;
    }
  }
  if (pos > 0) carry.push(lane_tree<T, kTile>(lanes, pos, cw), 1, cw);
  carry.fold(out, cw);
}

template <class T>
void column_range(const Walk& w, const T* x, int64_t width, int64_t s0, int64_t s1, T* out) {
  if (width == kTile) return column_tile<T, kTile>(w, x, width, s0, s1, out);
  column_tile<T, 0>(w, x, width, s0, s1, out);
}

template <class T>
void sum_columns(const Walk& w, const T* x, T* y) {
  const int64_t cols = w.ksize[w.nk - 1], tiles = (cols + kTile - 1) / kTile;
  const int64_t items = w.results / cols * tiles, m = w.length;
  // The result at tile `i`: its first operand and result offsets and width.
  auto tile = [&](int64_t i, int64_t& in, int64_t& res, int64_t& width) {
    const int64_t c0 = i % tiles * kTile;
    Odometer<2> k(w.nk - 1, w.ksize, {w.kin, w.kout}, i / tiles);
    in = k.off[0] + c0, res = k.off[1] + c0, width = std::min(kTile, cols - c0);
  };
  if (items < team() && m >= 2 * B && m * std::min(cols, kTile) >= kSplitLength) {
    // Few tiles of long columns: split each tile's sequences.
    const int64_t blocks = (m + B - 1) / B, g = group_blocks(blocks), groups = (blocks + g - 1) / g;
    for (int64_t i = 0; i < items; ++i) {
      int64_t in, res, width;
      tile(i, in, res, width);
      T part[kMaxGroups][kTile];
      parallel_for(
          groups, 1,
          [&](int64_t b, int64_t e) {
            for (int64_t j = b; j < e; ++j)
              column_range(w, x + in, width, j * g * B, std::min(m, (j + 1) * g * B), part[j]);
          },
          1);
      Carry<T, kTile> carry;
      for (int64_t j = 0; j < groups; ++j)
        carry.push(part[j], std::min(blocks, (j + 1) * g) - j * g, width);
      carry.fold(y + res, width);
    }
    return;
  }
  parallel_for(
      items, grain_for(m * std::min(cols, kTile)),
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          int64_t in, res, width;
          tile(i, in, res, width);
          column_range(w, x + in, width, 0, m, y + res);
        }
      },
      1);
}

// ---------------------------------------------------------------------------
// Maxima. pick() keeps the first of equal values and lets a NaN take over
// for good; normalize() then removes what the order could still decide.

template <class T>
inline T pick(T m, T v) {
  return (v > m || v != v) ? v : m;
}

template <class T>
inline T normalize(T m) {
  return m != m ? std::numeric_limits<T>::quiet_NaN() : T(m + T(0));  // -0 + 0 = +0
}

template <class T>
T max_run(const T* __restrict x, int64_t n, T m) {
  int64_t k = 0;
  if (n >= L) {
    alignas(64) T a[L];
    for (int64_t j = 0; j < L; ++j) a[j] = x[j];
    for (k = L; k + L <= n; k += L)
      for (int64_t j = 0; j < L; ++j) a[j] = pick(a[j], x[k + j]);
    m = pick(m, halve<L / 2>(a, pick<T>));
  }
  for (; k < n; ++k) m = pick(m, x[k]);
  return m;
}

template <class T>
void max_rows(const Walk& w, const T* x, T* y) {
  const int64_t run = w.rsize[w.nr - 1];
  constexpr T lowest = -std::numeric_limits<T>::infinity();
  if (w.nr == 1 && w.results < team() && run >= kSplitLength) {
    Odometer<2> k(w.nk, w.ksize, {w.kin, w.kout}, 0);
    const int64_t part_len = (run + kMaxGroups - 1) / kMaxGroups;
    for (int64_t o = 0; o < w.results; ++o, k.next()) {
      T part[kMaxGroups];
      std::fill_n(part, kMaxGroups, lowest);
      parallel_for(
          kMaxGroups, 1,
          [&](int64_t b, int64_t e) {
            for (int64_t j = b; j < e; ++j) {
              const int64_t s = std::min(run, j * part_len), t = std::min(run, s + part_len);
              part[j] = max_run(x + k.off[0] + s, t - s, lowest);
            }
          },
          1);
      T m = lowest;
      for (T p : part) m = pick(m, p);
      y[k.off[1]] = normalize(m);
    }
    return;
  }
  each_row_result<MaxStream<T>>(
      w, x, y, [](const T* p, int64_t n) { return normalize(max_run(p, n, lowest)); });
}

// The maxima of `width` neighbouring results starting at x into out.
template <class T, int64_t W>
void max_tile(const Walk& w, const T* x, int64_t width, T* out) {
  const int64_t cw = W ? W : width;
  alignas(64) T acc[kTile];
  std::fill_n(acc, cw, -std::numeric_limits<T>::infinity());
  Odometer<1> r(w.nr, w.rsize, {w.rin});
  for (int64_t s = 0; s < w.length; ++s, r.next()) {
    const T* row = x + r.off[0];
    for (int64_t c = 0; c < cw; ++c) acc[c] = pick(acc[c], row[c]);
  }
  for (int64_t c = 0; c < cw; ++c) out[c] = normalize(acc[c]);
}

template <class T>
void max_columns(const Walk& w, const T* x, T* y) {
  const int64_t cols = w.ksize[w.nk - 1], tiles = (cols + kTile - 1) / kTile;
  const int64_t items = w.results / cols * tiles;
  parallel_for(
      items, grain_for(w.length * std::min(cols, kTile)),
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const int64_t c0 = i % tiles * kTile, width = std::min(kTile, cols - c0);
          Odometer<2> k(w.nk - 1, w.ksize, {w.kin, w.kout}, i / tiles);
          if (width == kTile)
            max_tile<T, kTile>(w, x + k.off[0] + c0, width, y + k.off[1] + c0);
          else
            max_tile<T, 0>(w, x + k.off[0] + c0, width, y + k.off[1] + c0);
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

}  // namespace

template <class T>
T sum(const T* x, int64_t n) {
  return sum_contiguous(x, n, true);
}

template <class T>
void reduce_sum(const Shape& shape, const std::vector<int64_t>& strides, const T* x, T* y) {
  const Walk w = analyze(shape, strides);
  if (trivial(w, x, y, T(0), [](T v) { return T(T(0) + v); })) return;
  if (w.inner_kept) return sum_columns(w, x, y);
  sum_rows(w, x, y);
}

template <class T>
void reduce_max(const Shape& shape, const std::vector<int64_t>& strides, const T* x, T* y) {
  const Walk w = analyze(shape, strides);
  if (trivial(w, x, y, -std::numeric_limits<T>::infinity(), normalize<T>)) return;
  if (w.inner_kept) return max_columns(w, x, y);
  max_rows(w, x, y);
}

const char* reduce_walk_name(const Shape& shape, const std::vector<int64_t>& strides) {
  const Walk w = analyze(shape, strides);
  if (w.nr == 0) return "none";
  if (w.inner_kept) return "columns";
  return w.nk == 0 && w.nr == 1 ? "all" : "rows";
}

template float sum<float>(const float*, int64_t);
template double sum<double>(const double*, int64_t);
template void reduce_sum<float>(const Shape&, const std::vector<int64_t>&, const float*, float*);
template void reduce_sum<double>(const Shape&, const std::vector<int64_t>&, const double*, double*);
template <class T>
SumStream<T>::SumStream() {
  static_assert(sizeof(Stream<T>) <= sizeof(state_) && alignof(Stream<T>) <= 64);
  new (state_) Stream<T>;
}
template <class T>
void SumStream<T>::add(const T* x, int64_t n) {
  std::launder(reinterpret_cast<Stream<T>*>(state_))->add(x, n);
}
template <class T>
T SumStream<T>::finish() {
  return std::launder(reinterpret_cast<Stream<T>*>(state_))->finish();
}
template <class T>
void MaxStream<T>::add(const T* x, int64_t n) {
  m_ = max_run(x, n, m_);
}
template <class T>
T MaxStream<T>::finish() const {
  return normalize(m_);
}
template class SumStream<float>;
template class SumStream<double>;
template class MaxStream<float>;
template class MaxStream<double>;

template void reduce_max<float>(const Shape&, const std::vector<int64_t>&, const float*, float*);
template void reduce_max<double>(const Shape&, const std::vector<int64_t>&, const double*, double*);

}  // namespace ws::exec
