// The sums of reduce.hpp, in the order it defines: lanes within a block,
// blocks in a carry tree.
#include <algorithm>
#include <new>
#include <type_traits>

#include "exec/reduce.hpp"
#include "exec/reduce_walk.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

using namespace reduce_detail;

constexpr int kMaxDepth = 48;  // carry-tree entries: at most one per bit of the block count

// The lane tree of a block: lane j += lane j+w for w = L/2, ..., 1. Lanes at
// or above `count` were never written and stand for +0, which they would
// add exactly (a lane is never -0: it starts at +0, and x + y is -0 only
// when both are), so their steps are skipped. Lane j's values are at
// lanes + j * stride.
template <class T>
T* lane_tree(T* lanes, int64_t stride, int64_t count, int64_t width) {
  count = std::min(count, L);
  for (int64_t w = L / 2; w >= 1; w /= 2) {
    for (int64_t j = 0; j < w && j + w < count; ++j) {
      T* __restrict a = lanes + j * stride;
      const T* __restrict b = lanes + (j + w) * stride;
      for (int64_t c = 0; c < width; ++c) a[c] += b[c];
    }
    count = std::min(count, w);
  }
  return lanes;
}
template <class T, int64_t N>
T* lane_tree(T (*lanes)[N], int64_t count, int64_t width) {
  return lane_tree(&lanes[0][0], N, count, width);
}

// The carry tree's push and fold over entries v[d * stride, + width) of
// `size[d]` blocks each.
template <class T>
void carry_push(T* v, int64_t stride, int64_t* size, int& depth, T* x, int64_t s, int64_t width) {
  while (depth > 0 && size[depth - 1] == s) {
    --depth;
    const T* e = v + depth * stride;
    for (int64_t c = 0; c < width; ++c) x[c] = e[c] + x[c];
    s *= 2;
  }
  std::copy_n(x, width, v + depth * stride);
  size[depth++] = s;
}
template <class T>
void carry_fold(const T* v, int64_t stride, int depth, T* out, int64_t width) {
  if (depth == 0) {
    std::fill_n(out, width, T(0));
    return;
  }
  std::copy_n(v + (depth - 1) * stride, width, out);
  for (int d = depth - 2; d >= 0; --d)
    for (int64_t c = 0; c < width; ++c) out[c] = v[d * stride + c] + out[c];
}

// A carry tree for N sequences advancing in lockstep (a column tile; N = 1
// for one sequence). Entries cover `size` blocks.
template <class T, int64_t N>
struct Carry {
  T v[kMaxDepth][N];
  int64_t size[kMaxDepth];
  int depth = 0;

  // Pushes the sums in `x` (width values, overwritten) covering `s` blocks.
  void push(T* x, int64_t s, int64_t width) { carry_push(&v[0][0], N, size, depth, x, s, width); }
  void fold(T* out, int64_t width) const {
    T t[N];
    carry_fold(&v[0][0], N, depth, t, width);
    std::copy_n(t, width, out);
  }
};

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

// How a column walk reads element i of its operand: stored (Plain), or
// computed from stored arrays as it is read (column_sums' operands), each
// element the value the op's kernel would have stored.
template <class T>
struct Plain {
  const T* x;
  T operator()(int64_t i) const { return x[i]; }
};
template <class S, class T>
struct Widened {
  const S* x;
  T operator()(int64_t i) const { return T(x[i]); }
};
template <class T>
struct Square {
  const T* x;
  T operator()(int64_t i) const { return x[i] * x[i]; }
};
template <class T>
struct Product {
  const T* x;
  const T* y;
  T operator()(int64_t i) const { return x[i] * y[i]; }
};

// Steps [s0, s1) of the sequences of `width` neighbouring results whose
// first operand element is `at`, (s0 a multiple of B), folded into
// out[0, width).
template <class T, int64_t W, class Load>
void column_tile(const Walk& w, Load load, int64_t at, int64_t width, int64_t s0, int64_t s1,
                 T* out) {
  const int64_t cw = W ? W : width;
  alignas(64) T lanes[L][kTile];
  Carry<T, kTile> carry;
  if (w.nr == 1) {
    // Rows at one stride (most column walks: their reduced dims merge): a
    // block at a time, its first L rows starting the lanes, the rest
    // adding to them; the additions of the general walk below, in its
    // order, without its per-row bookkeeping.
    const int64_t rs = w.rin[0];
    int64_t row = at + s0 * rs;
    for (int64_t i = s0; i < s1;) {
      const int64_t n = std::min(B, s1 - i), first = std::min(n, L);
      for (int64_t p = 0; p < first; ++p, row += rs) {
        T* __restrict l = lanes[p];
        for (int64_t c = 0; c < cw; ++c) l[c] = T(0) + load(row + c);
      }
      for (int64_t p = first; p < n; ++p, row += rs) {
        T* __restrict l = lanes[p & (L - 1)];
        for (int64_t c = 0; c < cw; ++c) l[c] += load(row + c);
      }
      carry.push(lane_tree<T, kTile>(lanes, n, cw), 1, cw);
      i += n;
    }
    carry.fold(out, cw);
    return;
  }
  Odometer<1> r(w.nr, w.rsize, {w.rin}, s0);
  int64_t pos = 0;
  for (int64_t i = s0; i < s1; ++i, r.next()) {
    const int64_t row = at + r.off[0];
    T* l = lanes[pos & (L - 1)];
    if (pos < L) {  // the lane's first element: +0 + x, as from zeroed lanes
      for (int64_t c = 0; c < cw; ++c) l[c] = T(0) + load(row + c);
    } else {
      for (int64_t c = 0; c < cw; ++c) l[c] += load(row + c);
    }
    if (++pos == B) {
      carry.push(lane_tree<T, kTile>(lanes, pos, cw), 1, cw);
      pos = 0;
    }
  }
  if (pos > 0) carry.push(lane_tree<T, kTile>(lanes, pos, cw), 1, cw);
  carry.fold(out, cw);
}

template <class T, class Load>
void column_range(const Walk& w, Load load, int64_t at, int64_t width, int64_t s0, int64_t s1,
                  T* out) {
  if (width == kTile) return column_tile<T, kTile>(w, load, at, width, s0, s1, out);
  if (width == kTile / 2) return column_tile<T, kTile / 2>(w, load, at, width, s0, s1, out);
  if (width == kTile / 4) return column_tile<T, kTile / 4>(w, load, at, width, s0, s1, out);
  column_tile<T, 0>(w, load, at, width, s0, s1, out);
}

template <class T, class Load>
void sum_columns(const Walk& w, Load load, T* y) {
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
              column_range(w, load, in, width, j * g * B, std::min(m, (j + 1) * g * B), part[j]);
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
          column_range(w, load, in, width, 0, m, y + res);
        }
      },
      1);
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
  if (w.inner_kept) return sum_columns(w, Plain<T>{x}, y);
  sum_rows(w, x, y);
}

template <class T>
int64_t ColumnStream<T>::storage_size(int64_t width) {
  return (L + kDepth) * width;
}
template <class T>
ColumnStream<T>::ColumnStream(int64_t width, T* storage)
    : width_(width), lanes_(storage), carry_(storage + L * width) {}
template <class T>
void ColumnStream<T>::add(const T* x, int64_t rows, int64_t stride) {
  const int64_t width = width_;
  while (rows > 0) {  // the rows up to the end of the block
    const int64_t end = pos_ + std::min(rows, B - pos_);
    int64_t p = pos_;
    for (; p < std::min(end, L); ++p, x += stride) {  // a lane's first row: +0 + x
      T* __restrict l = lanes_ + p * width;
      for (int64_t c = 0; c < width; ++c) l[c] = T(0) + x[c];
    }
    for (; p < end; ++p, x += stride) {
      T* __restrict l = lanes_ + (p & (L - 1)) * width;
      for (int64_t c = 0; c < width; ++c) l[c] += x[c];
    }
    rows -= end - pos_;
    pos_ = end;
    if (pos_ == B) flush();
  }
}
template <class T>
void ColumnStream<T>::add_filled(int64_t rows) {
  WS_CHECK(pos_ == 0 && rows > 0 && rows <= B)
      << "ColumnStream: " << rows << " rows filled at " << pos_;
  pos_ = rows;
  flush();
}
template <class T>
void ColumnStream<T>::flush() {
  carry_push(carry_, width_, size_, depth_, lane_tree(lanes_, width_, pos_, width_), 1, width_);
  pos_ = 0;
}
template <class T>
void ColumnStream<T>::push_sums(const T* sums, int64_t blocks) {
  WS_CHECK(pos_ == 0) << "ColumnStream: sums pushed inside a block";
  std::copy_n(sums, width_, lanes_);
  carry_push(carry_, width_, size_, depth_, lanes_, blocks, width_);
}
template <class T>
void ColumnStream<T>::finish(T* out) {
  if (pos_ > 0) flush();
  carry_fold(carry_, width_, depth_, out, width_);
}

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

template <class S, class T>
void column_sums(ColumnOperand op, const Shape& shape, const std::vector<int64_t>& strides,
                 const S* x, const S* y, T* out) {
  const Walk w = analyze(shape, strides);
  WS_CHECK(w.inner_kept && w.length >= 2)
      << "column_sums: " << shape_str(shape) << " is not summed over its leading dims";
  if constexpr (std::is_same_v<S, T>) {
    WS_CHECK(op != ColumnOperand::widened) << "column_sums: widening to the same type";
    if (op == ColumnOperand::square) return sum_columns(w, Square<T>{x}, out);
    return sum_columns(w, Product<T>{x, y}, out);
  } else {
    WS_CHECK(op == ColumnOperand::widened) << "column_sums: only a widening changes the type";
    sum_columns(w, Widened<S, T>{x}, out);
  }
}

template float sum<float>(const float*, int64_t);
template double sum<double>(const double*, int64_t);
template void reduce_sum<float>(const Shape&, const std::vector<int64_t>&, const float*, float*);
template void reduce_sum<double>(const Shape&, const std::vector<int64_t>&, const double*, double*);
template class SumStream<float>;
template class SumStream<double>;
template class ColumnStream<float>;
template class ColumnStream<double>;
template void column_sums<float, double>(ColumnOperand, const Shape&, const std::vector<int64_t>&,
                                         const float*, const float*, double*);
template void column_sums<float, float>(ColumnOperand, const Shape&, const std::vector<int64_t>&,
                                        const float*, const float*, float*);
template void column_sums<double, double>(ColumnOperand, const Shape&, const std::vector<int64_t>&,
                                          const double*, const double*, double*);

}  // namespace ws::exec
