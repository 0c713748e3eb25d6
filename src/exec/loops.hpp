// Loops shared by the single-op kernels (kernels.cpp) and the fused loop
// kernels (fused_loop.cpp): one definition, so a value computed alone or in
// a fused group gets the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/elementwise.hpp"
#include "exec/reference.hpp"
#include "exec/strided_walk.hpp"

namespace ws::exec {

// The loops of the elementwise kernels over [lo, hi) are functions of their
// own, taking the pointers by value: captured by reference in a lambda, the
// pointers could be aliased by a byte store (a comparison's result), which
// keeps the compiler from vectorizing.
template <class T, ir::Op op, class R>
void binary_range(const T* a, const T* b, R* y, bool va, bool vb, int64_t lo, int64_t hi) {
  if (va && vb) {
    for (int64_t i = lo; i < hi; ++i) y[i] = binary_value<op>(a[i], b[i]);
  } else if (va) {
    const T bv = *b;
    for (int64_t i = lo; i < hi; ++i) y[i] = binary_value<op>(a[i], bv);
  } else if (vb) {
    const T av = *a;
    for (int64_t i = lo; i < hi; ++i) y[i] = binary_value<op>(av, b[i]);
  } else {
    std::fill(y + lo, y + hi, binary_value<op>(*a, *b));
  }
}

// Both operands are read whatever the condition, so the loops compile to
// vector blends rather than branches.
template <class T>
void select_range(const uint8_t* c, const T* a, const T* b, T* y, int64_t sc, int64_t sa,
                  int64_t sb, int64_t lo, int64_t hi) {
  if (sc && sa && sb) {
    for (int64_t i = lo; i < hi; ++i) {
      const T u = a[i], v = b[i];
      y[i] = c[i] ? u : v;
    }
  } else if (sc && sa) {
    const T v = *b;
    for (int64_t i = lo; i < hi; ++i) {
      const T u = a[i];
      y[i] = c[i] ? u : v;
    }
  } else if (sc && sb) {
    const T u = *a;
    for (int64_t i = lo; i < hi; ++i) {
      const T v = b[i];
      y[i] = c[i] ? u : v;
    }
  } else if (sc) {
    const T u = *a, v = *b;
    for (int64_t i = lo; i < hi; ++i) y[i] = c[i] ? u : v;
  } else {
    for (int64_t i = lo; i < hi; ++i) y[i] = c[i * sc] ? a[i * sa] : b[i * sb];
  }
}

// y[j] = x[j * st] for j < len (pointers by value, as binary_range).
template <class T>
void strided_row(const T* x, T* y, int64_t len, int64_t st) {
  if (st == 1)
    std::memcpy(y, x, size_t(len) * sizeof(T));
  else if (st == 0)
    std::fill_n(y, len, *x);
  else
    for (int64_t j = 0; j < len; ++j) y[j] = x[j * st];
}

// y[i - begin] = x[offset of element i] for elements [begin, end) of the
// walk over `shape` with `strides`: a broadcast's or transpose's values.
//
// A run along the last dim that repeats over the dims just before it (their
// strides 0: a per-channel value over blocked images [N, C/8, H, W, 8], a
// per-image one over NHWC rows [N, H, W, C]) is one periodic stretch of y
// for each index of the dims before those: its first period copied, then
// doubled, where walking it a row at a time would carry the index every 8
// elements.
template <class T>
void strided_gather(const Shape& shape, const std::vector<int64_t>& strides, const T* x, T* y,
                    int64_t begin, int64_t end) {
  const size_t r = shape.size();
  if (r >= 2 && strides[r - 1] == 1 && strides[r - 2] == 0) {
    size_t k = r - 2;  // dims [k, r - 1) repeat the run
    while (k > 0 && strides[k - 1] == 0) --k;
    const int64_t period = shape[r - 1];
    int64_t span = period;
    for (size_t d = k; d + 1 < r; ++d) span *= shape[d];
    if (span == 0) return;
    Odometer<1> o(int(k), shape.data(), {strides.data()}, begin / span);
    for (int64_t i = begin, col = begin % span; i < end; col = 0, o.next()) {
      const int64_t take = std::min(span - col, end - i);
      const T* run = x + o.off[0];
      T* out = y + (i - begin);
      // out[j] = run[(col + j) % period]: the rest of the first period, then
      // whole periods from out[lead] on.
      const int64_t phase = col % period, lead = std::min(take, (period - phase) % period);
      std::copy_n(run + phase, lead, out);
      int64_t filled = std::min(take, lead + period);
      std::copy_n(run, filled - lead, out + lead);
      while (filled < take) {
        const int64_t n = std::min(filled - lead, take - filled);
        std::memcpy(out + filled, out + lead, size_t(n) * sizeof(T));
        filled += n;
      }
      i += take;
    }
    return;
  }
  const int64_t inner = r == 0 ? 0 : strides.back();
  walk_rows<1>(shape, {strides.data()}, begin, end,
               [x, y, begin, inner](int64_t i, const int64_t* off, int64_t len) {
                 strided_row(x + off[0], y + (i - begin), len, inner);
               });
}

}  // namespace ws::exec
