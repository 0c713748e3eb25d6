// The maxima of reduce.hpp. pick() keeps the first of equal values and lets
// a NaN take over for good; normalize() then removes what the order could
// still decide.
#include <algorithm>
#include <limits>

#include "exec/reduce.hpp"
#include "exec/reduce_walk.hpp"

namespace ws::exec {
namespace {

using namespace reduce_detail;

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

}  // namespace

template <class T>
void reduce_max(const Shape& shape, const std::vector<int64_t>& strides, const T* x, T* y) {
  const Walk w = analyze(shape, strides);
  if (trivial(w, x, y, -std::numeric_limits<T>::infinity(), normalize<T>)) return;
  if (w.inner_kept) return max_columns(w, x, y);
  max_rows(w, x, y);
}

template <class T>
void MaxStream<T>::add(const T* x, int64_t n) {
  m_ = max_run(x, n, m_);
}
template <class T>
T MaxStream<T>::finish() const {
  return normalize(m_);
}

template void reduce_max<float>(const Shape&, const std::vector<int64_t>&, const float*, float*);
template void reduce_max<double>(const Shape&, const std::vector<int64_t>&, const double*, double*);
template class MaxStream<float>;
template class MaxStream<double>;

}  // namespace ws::exec
