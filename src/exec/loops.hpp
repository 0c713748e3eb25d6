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
  } else {
    for (int64_t i = lo; i < hi; ++i) y[i] = c[i * sc] ? a[i * sa] : b[i * sb];
  }
}

// strided_rows over elements [begin, end) of the walk only: rows cut by the
// range's ends are visited in part, so threads can split a walk anywhere.
template <class F>
void strided_range(const Shape& shape, const std::vector<int64_t>& strides, int64_t begin,
                   int64_t end, F&& f) {
  const int64_t r = int64_t(shape.size());
  if (begin >= end) return;
  if (r == 0) return f(int64_t(0), int64_t(0), int64_t(1), int64_t(0));
  const int64_t len = shape[size_t(r - 1)], inner = strides[size_t(r - 1)];
  int64_t idx[kMaxRank] = {};
  int64_t off = 0, col = begin % len;
  for (int64_t d = r - 2, row = begin / len; d >= 0; --d) {
    idx[d] = row % shape[size_t(d)];
    row /= shape[size_t(d)];
    off += idx[d] * strides[size_t(d)];
  }
  for (int64_t i = begin; i < end; col = 0) {
    const int64_t take = std::min(len - col, end - i);
    f(i, off + col * inner, take, inner);
    i += take;
    for (int64_t d = r - 2; d >= 0; --d) {
      off += strides[size_t(d)];
      if (++idx[d] < shape[size_t(d)]) break;
      off -= strides[size_t(d)] * shape[size_t(d)];
      idx[d] = 0;
    }
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

}  // namespace ws::exec
