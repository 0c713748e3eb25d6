#include "exec/nn_kernels.hpp"
#include "exec/parallel.hpp"

#include <vector>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include <fmt/format.h>

namespace ws::exec {
namespace {

// ---------------------------------------------------------------------------
// Gather / scatter.

// Destination rows below which scatter_add_rows runs serially (measured: 64
// and 256 rows of 128 floats from 512 indices gain nothing from 2 threads,
// 1000 rows from 4096 indices run 1.8x faster).
constexpr int64_t kScatterMinRows = 512;

void check_indices(const int64_t* idx, int64_t n, int64_t rows, const SourceLoc& loc) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= rows)
      throw Error(fmt::format(
          "index {} at position {} is out of range [0, {}) (an embedding's ids, or a gather's "
          "indices: -1 where an index was out of its dim's range){}",
          idx[i], i, rows, at(loc)));
}

}  // namespace

// ---------------------------------------------------------------------------
// Reference convolution: the direct definition. Every (output element, tap)
// pair that reads the input is visited once; the three kernels differ only in
// what they accumulate, always in double (the oracle).

namespace {

// Calls f(y_index, x_index, w_index) for every output element and kernel tap
// that lands inside the input (padding reads nothing).
template <class F>
void for_each_tap(const Conv2dGeom& g, F&& f) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oc = 0; oc < g.o; ++oc) {
      const int64_t c0 = (oc / og) * cg;  // first input channel of oc's group
      for (int64_t oz = 0; oz < g.od; ++oz)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t yi = (((b * g.o + oc) * g.od + oz) * g.oh + oy) * g.ow + ox;
            for (int64_t ic = 0; ic < cg; ++ic)
              for (int64_t kz = 0; kz < g.kd; ++kz) {
                const int64_t iz = in_pos(oz, kz, g.sd, g.pd, g.dd);
                if (iz < 0 || iz >= g.d) continue;
                for (int64_t ky = 0; ky < g.kh; ++ky) {
                  const int64_t iy = in_pos(oy, ky, g.sh, g.ph, g.dh);
                  if (iy < 0 || iy >= g.h) continue;
                  for (int64_t kx = 0; kx < g.kw; ++kx) {
                    const int64_t ix = in_pos(ox, kx, g.sw, g.pw, g.dw);
                    if (ix < 0 || ix >= g.w) continue;
                    f(yi, (((b * g.c + c0 + ic) * g.d + iz) * g.h + iy) * g.w + ix,
                      (((oc * cg + ic) * g.kd + kz) * g.kh + ky) * g.kw + kx);
                  }
                }
              }
          }
    }
}

// Runs term(acc, y, x, w) for every tap into a zeroed double accumulator of n
// elements, then rounds it into `out`.
template <class T, class F>
void accumulate_taps(const Conv2dGeom& g, int64_t n, T* out, F&& term) {
  std::vector<double> acc(static_cast<size_t>(n), 0.0);
  for_each_tap(g, [&](int64_t yi, int64_t xi, int64_t wi) { term(acc.data(), yi, xi, wi); });
  for (int64_t i = 0; i < n; ++i) out[i] = T(acc[size_t(i)]);
}

}  // namespace

template <class T>
void conv2d_ref(const Conv2dGeom& g, const T* x, const T* w, T* y) {
  accumulate_taps(g, g.n * g.out_image(), y, [&](double* a, int64_t yi, int64_t xi, int64_t wi) {
    a[yi] += double(x[xi]) * double(w[wi]);
  });
}

// The transposed convolution: every tap adds dy * w into dx.
template <class T>
void conv2d_input_grad_ref(const Conv2dGeom& g, const T* dy, const T* w, T* dx) {
  accumulate_taps(g, g.n * g.in_image(), dx, [&](double* a, int64_t yi, int64_t xi, int64_t wi) {
    a[xi] += double(dy[yi]) * double(w[wi]);
  });
}

// dw = sum over images and output positions of dy * x.
template <class T>
void conv2d_weight_grad_ref(const Conv2dGeom& g, const T* x, const T* dy, T* dw) {
  accumulate_taps(g, g.weight_numel(), dw, [&](double* a, int64_t yi, int64_t xi, int64_t wi) {
    a[wi] += double(dy[yi]) * double(x[xi]);
  });
}

// ---------------------------------------------------------------------------
// Gather / scatter of rows. All indices are checked before anything is
// written, so a bad index leaves `out` untouched.

template <class T>
void gather_rows(const T* table, int64_t rows, int64_t width, const int64_t* idx, int64_t n, T* out,
                 const SourceLoc& loc) {
  check_indices(idx, n, rows, loc);
  parallel_for(
      n, grain_for(width),
      [=](int64_t b, int64_t e) {
        if (width == 1) {  // elements (grid_sample over few channels): no call each
          for (int64_t i = b; i < e; ++i) out[i] = table[idx[i]];
          return;
        }
        const size_t bytes = size_t(width) * sizeof(T);
        for (int64_t i = b; i < e; ++i) std::memcpy(out + i * width, table + idx[i] * width, bytes);
      },
      1);
}

// Threads split the destination rows, never the indices: every element of
// `out` receives its contributions in index order, as serially, and no two
// threads write one row. (Splitting the columns instead is several times
// slower than serial: threads writing neighbouring lines of the same rows
// contend through the prefetchers.) Each thread scans all indices, so this
// pays only with many rows.
template <class T>
void scatter_add_rows(const T* src, int64_t width, const int64_t* idx, int64_t n, int64_t rows,
                      T* out, const SourceLoc& loc) {
  check_indices(idx, n, rows, loc);
  auto add_rows = [&](int64_t r0, int64_t r1) {
    std::fill(out + r0 * width, out + r1 * width, T(0));
    for (int64_t i = 0; i < n; ++i) {
      if (idx[i] < r0 || idx[i] >= r1) continue;
      T* o = out + idx[i] * width;
      const T* s = src + i * width;
      for (int64_t j = 0; j < width; ++j) o[j] += s[j];
    }
  };
  if (rows < kScatterMinRows || n * width < 8 * kCheapGrain) return add_rows(0, rows);
  parallel_for(rows, 1, add_rows, 1);
}

// ---------------------------------------------------------------------------
// Sorting. Rows are independent: any split gives the same positions.

template <class T>
void argsort_rows(const T* x, int64_t outer, int64_t n, int64_t inner, bool descending,
                  int64_t* out) {
  auto sort_rows = [=](int64_t b, int64_t e) {
    // Kept by each thread: a step allocates only when it first sorts rows
    // this long.
    thread_local std::vector<int64_t> pos;
    pos.resize(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      const T* row = x + (r / inner) * n * inner + r % inner;
      auto at = [&](int64_t i) { return row[i * inner]; };
      // a before b: NaN above every number, so last ascending, first descending
      auto below = [&](int64_t i, int64_t j) {
        const T u = at(i), v = at(j);
        if (std::isnan(v)) return !std::isnan(u);
        return u < v;
      };
      std::iota(pos.begin(), pos.end(), int64_t(0));
      if (descending)
        std::stable_sort(pos.begin(), pos.end(), [&](int64_t i, int64_t j) { return below(j, i); });
      else
        std::stable_sort(pos.begin(), pos.end(), below);
      int64_t* o = out + (r / inner) * n * inner + r % inner;
      for (int64_t i = 0; i < n; ++i) o[i * inner] = pos[size_t(i)];
    }
  };
  parallel_for(outer * inner, std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(n * 8, 1)),
               sort_rows, 1);
}

// ---------------------------------------------------------------------------
// Instantiations.

#define WS_NN_KERNELS(T)                                                                     \
  template void conv2d_ref<T>(const Conv2dGeom&, const T*, const T*, T*);                    \
  template void conv2d_input_grad_ref<T>(const Conv2dGeom&, const T*, const T*, T*);         \
  template void conv2d_weight_grad_ref<T>(const Conv2dGeom&, const T*, const T*, T*);        \
  template void gather_rows<T>(const T*, int64_t, int64_t, const int64_t*, int64_t, T*,      \
                               const SourceLoc&);                                            \
  template void scatter_add_rows<T>(const T*, int64_t, const int64_t*, int64_t, int64_t, T*, \
                                    const SourceLoc&);                                       \
  template void argsort_rows<T>(const T*, int64_t, int64_t, int64_t, bool, int64_t*);

WS_NN_KERNELS(float)
WS_NN_KERNELS(double)
#undef WS_NN_KERNELS

}  // namespace ws::exec
