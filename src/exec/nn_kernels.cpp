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
// Pooling helpers.

// A pooling window clipped to the image: rows [y0, y1), cols [x0, x1).
struct Window {
  int64_t y0, y1, x0, x1;
};

inline Window window(const Pool2dGeom& g, int64_t oy, int64_t ox) {
  const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  return {std::max<int64_t>(y0, 0), std::min(y0 + g.kh, g.h), std::max<int64_t>(x0, 0),
          std::min(x0 + g.kw, g.w)};
}

// Offset (within the [h, w] plane) of the window's maximum, PyTorch's rule:
// row-major scan, a strictly greater value or a NaN takes over, so ties go
// to the first maximum. -1 when the window holds no image element.
template <class T>
int64_t argmax(const Pool2dGeom& g, const T* plane, const Window& win) {
  int64_t best = -1;
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t y = win.y0; y < win.y1; ++y)
    for (int64_t x = win.x0; x < win.x1; ++x) {
      const T v = plane[y * g.w + x];
      if (best < 0 || v > m || std::isnan(v)) {
        m = v;
        best = y * g.w + x;
      }
    }
  return best;
}

// The divisor of an average window (PyTorch's avg_pool2d, no ceil_mode):
// with count_include_pad the window clipped to the padded extent
// [-p, size + p), else the number of image elements in it.
inline int64_t avg_divisor(const Pool2dGeom& g, int64_t oy, int64_t ox, const Window& win) {
  if (!g.count_include_pad) return (win.y1 - win.y0) * (win.x1 - win.x0);
  const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  const int64_t y1 = std::min(y0 + g.kh, g.h + g.ph), x1 = std::min(x0 + g.kw, g.w + g.pw);
  return (y1 - y0) * (x1 - x0);
}

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
// Pooling (PyTorch's semantics without ceil_mode).

template <class T>
void max_pool2d_ref(const Pool2dGeom& g, const T* x, T* y) {
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T* plane = x + p * g.h * g.w;
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t i = argmax(g, plane, window(g, oy, ox));
        y[(p * g.oh + oy) * g.ow + ox] = i < 0 ? -std::numeric_limits<T>::infinity() : plane[i];
      }
  }
}

template <class T>
void max_pool2d_grad_ref(const Pool2dGeom& g, const T* x, const T* dy, T* dx) {
  std::fill_n(dx, g.n * g.c * g.h * g.w, T(0));
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T* plane = x + p * g.h * g.w;
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t i = argmax(g, plane, window(g, oy, ox));
        if (i >= 0) dx[p * g.h * g.w + i] += dy[(p * g.oh + oy) * g.ow + ox];
      }
  }
}

// The fast max pooling: the reference's scan, reorganized. For each output
// row, windows lying wholly inside the image columns advance together, one
// tap (row, column) at a time in the reference's row-major order, so the
// loop over them vectorizes; the few clipped at the left and right edges run
// the reference's argmax. A window's fold starts from its first tap and then
// visits every tap, the first again: that visit changes nothing (a value is
// not greater than itself; a NaN retakes its own index). The geometry never
// leaves a window without an image element (padding is at most half the
// kernel), so every output has an index.

namespace {

// Plane offsets; f32 planes stay below 2^31 elements (checked by the caller),
// so indices fit the lanes of the values.
template <class T>
using PoolIndex = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;

// Outputs of one row handled at a time (stack buffers).
constexpr int64_t kPoolChunk = 256;

// Argmax offsets mi[j - a] for the windows of output row oy, columns [a, b);
// [ia, ib) are the columns whose windows are inside the image. kSw: the
// column stride when fixed at compile time (1, 2), else 0.
template <class T, int kSw>
void row_argmax(const Pool2dGeom& g, const T* plane, int64_t oy, int64_t a, int64_t b, int64_t ia,
                int64_t ib, PoolIndex<T>* mi) {
  using I = PoolIndex<T>;
  const I sw = kSw ? I(kSw) : I(g.sw);
  const int64_t lo = std::clamp(ia, a, b), hi = std::clamp(ib, lo, b);
  for (int64_t ox = a; ox < lo; ++ox) mi[ox - a] = I(argmax(g, plane, window(g, oy, ox)));
  for (int64_t ox = hi; ox < b; ++ox) mi[ox - a] = I(argmax(g, plane, window(g, oy, ox)));
  if (lo == hi) return;
  const Window win = window(g, oy, lo);
  T m[kPoolChunk];
  I* idx = mi + (lo - a);
  const I n = I(hi - lo), first = I(win.y0 * g.w) + I(lo) * sw - I(g.pw);
  for (I j = 0; j < n; ++j) {
    idx[j] = first + j * sw;
    m[j] = plane[idx[j]];
  }
  for (int64_t y = win.y0; y < win.y1; ++y)
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const I base = I(y * g.w) + I(lo) * sw - I(g.pw) + I(kx);
      for (I j = 0; j < n; ++j) {
        const I c = base + j * sw;
        const T v = plane[c];
        const bool take = (v > m[j]) | (v != v);
        m[j] = take ? v : m[j];
        idx[j] = take ? c : idx[j];
      }
    }
}

// Calls f(p, oy, a, b, mi) for every plane p, output row oy and chunk [a, b)
// of its columns, in the reference's order within a plane, with mi holding
// the argmax offsets of those windows. Planes run in parallel.
template <class T, class F>
void for_each_argmax(const Pool2dGeom& g, const T* x, F&& f) {
  // Windows wholly inside the columns: ox * sw - pw >= 0, ox * sw - pw + kw <= w.
  const int64_t ia = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
  const int64_t ib = g.w - g.kw + g.pw >= 0 ? std::min(g.ow, (g.w - g.kw + g.pw) / g.sw + 1) : 0;
  auto planes = [&]<int kSw>(int64_t p0, int64_t p1) {
    PoolIndex<T> mi[kPoolChunk];
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t a = 0; a < g.ow; a += kPoolChunk) {
          const int64_t b = std::min(g.ow, a + kPoolChunk);
          row_argmax<T, kSw>(g, x + p * g.h * g.w, oy, a, b, ia, ib, mi);
          f(p, oy, a, b, mi);
        }
  };
  parallel_for(
      g.n * g.c, grain_for(g.oh * g.ow * g.kh * g.kw),
      [&](int64_t p0, int64_t p1) {
        if (g.sw == 1) return planes.template operator()<1>(p0, p1);
        if (g.sw == 2) return planes.template operator()<2>(p0, p1);
        planes.template operator()<0>(p0, p1);
      },
      1);
}

}  // namespace

template <class T>
void max_pool2d(const Pool2dGeom& g, const T* x, T* y) {
  for_each_argmax(g, x, [&](int64_t p, int64_t oy, int64_t a, int64_t b, const PoolIndex<T>* mi) {
    const T* plane = x + p * g.h * g.w;
    T* row = y + (p * g.oh + oy) * g.ow;
    for (int64_t ox = a; ox < b; ++ox) row[ox] = plane[mi[ox - a]];
  });
}

// Each plane's gradients are added in the reference's order (output rows,
// then columns), so overlapping windows sum to the same bits.
template <class T>
void max_pool2d_grad(const Pool2dGeom& g, const T* x, const T* dy, T* dx) {
  for_each_argmax(g, x, [&](int64_t p, int64_t oy, int64_t a, int64_t b, const PoolIndex<T>* mi) {
    T* plane = dx + p * g.h * g.w;
    if (oy == 0 && a == 0) std::fill_n(plane, g.h * g.w, T(0));
    const T* row = dy + (p * g.oh + oy) * g.ow;
    for (int64_t ox = a; ox < b; ++ox) plane[mi[ox - a]] += row[ox];
  });
}

namespace {

// Calls f(n, oy, ox, win) for every output pixel, images' output rows in
// parallel, each row's pixels in order.
template <class F>
void for_each_window_nhwc(const Pool2dGeom& g, int64_t work, F&& f) {
  parallel_for(
      g.n * g.oh, grain_for(work),
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t ox = 0; ox < g.ow; ++ox) f(r / g.oh, r % g.oh, ox, window(g, r % g.oh, ox));
      },
      1);  // rows, not elements: any row starts a range
}

// Channels of a pixel handled at a time (stack buffers).
constexpr int64_t kPoolChannels = 256;

// The maximum of a window of NHWC pixels over channels [c0, c0 + cn) into
// m, channel by channel, by argmax's rule (the first tap, then a strictly
// greater value or a NaN); with `at`, where it is (the pixel's offset in
// the image).
template <class T>
void window_max(const Pool2dGeom& g, const T* image, const Window& win, int64_t c0, int64_t cn,
                T* m, int64_t* at) {
  bool first = true;
  for (int64_t y = win.y0; y < win.y1; ++y)
    for (int64_t x = win.x0; x < win.x1; ++x) {
      const int64_t p = y * g.w + x;
      const T* v = image + p * g.c + c0;
      if (first) {
        std::copy_n(v, cn, m);
        if (at) std::fill_n(at, cn, p);
        first = false;
        continue;
      }
      for (int64_t c = 0; c < cn; ++c) {
        const bool take = (v[c] > m[c]) | (v[c] != v[c]);
        m[c] = take ? v[c] : m[c];
        if (at) at[c] = take ? p : at[c];
      }
    }
}

}  // namespace

template <class T>
void max_pool2d_nhwc(const Pool2dGeom& g, const T* x, T* y) {
  for_each_window_nhwc(
      g, g.ow * g.kh * g.kw * g.c, [&](int64_t n, int64_t oy, int64_t ox, const Window& win) {
        T* out = y + ((n * g.oh + oy) * g.ow + ox) * g.c;
        for (int64_t c0 = 0; c0 < g.c; c0 += kPoolChannels)
          window_max(g, x + n * g.h * g.w * g.c, win, c0, std::min(kPoolChannels, g.c - c0),
                     out + c0, static_cast<int64_t*>(nullptr));
      });
}

// Each image's gradients are added in the reference's order (output rows,
// then columns), each channel on its own: the same bits. Images run in
// parallel (each writes only its own).
template <class T>
void max_pool2d_grad_nhwc(const Pool2dGeom& g, const T* x, const T* dy, T* dx) {
  // Images, not elements: any image starts a range (the default alignment
  // of 16 left a batch under 32 on one thread).
  parallel_for(
      g.n, grain_for(g.oh * g.ow * g.kh * g.kw * g.c),
      [&](int64_t n0, int64_t n1) {
        T m[kPoolChannels];
        int64_t at[kPoolChannels];
        for (int64_t n = n0; n < n1; ++n) {
          T* image = dx + n * g.h * g.w * g.c;
          std::fill_n(image, g.h * g.w * g.c, T(0));
          for (int64_t oy = 0; oy < g.oh; ++oy)
            for (int64_t ox = 0; ox < g.ow; ++ox) {
              const T* d = dy + ((n * g.oh + oy) * g.ow + ox) * g.c;
              for (int64_t c0 = 0; c0 < g.c; c0 += kPoolChannels) {
                const int64_t cn = std::min(kPoolChannels, g.c - c0);
                window_max(g, x + n * g.h * g.w * g.c, window(g, oy, ox), c0, cn, m, at);
                for (int64_t c = 0; c < cn; ++c) image[at[c] * g.c + c0 + c] += d[c0 + c];
              }
            }
        }
      },
      1);
}

// An average over a window with no image element is 0 (as in PyTorch).
template <class T>
void avg_pool2d_ref(const Pool2dGeom& g, const T* x, T* y) {
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T* plane = x + p * g.h * g.w;
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const Window win = window(g, oy, ox);
        T sum = 0;
        for (int64_t yy = win.y0; yy < win.y1; ++yy)
          for (int64_t xx = win.x0; xx < win.x1; ++xx) sum += plane[yy * g.w + xx];
        const int64_t d = avg_divisor(g, oy, ox, win);
        y[(p * g.oh + oy) * g.ow + ox] = d > 0 ? sum / T(d) : T(0);
      }
  }
}

template <class T>
void avg_pool2d_grad_ref(const Pool2dGeom& g, const T* dy, T* dx) {
  std::fill_n(dx, g.n * g.c * g.h * g.w, T(0));
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    T* plane = dx + p * g.h * g.w;
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const Window win = window(g, oy, ox);
        const int64_t d = avg_divisor(g, oy, ox, win);
        if (d <= 0) continue;
        const T share = dy[(p * g.oh + oy) * g.ow + ox] / T(d);
        for (int64_t yy = win.y0; yy < win.y1; ++yy)
          for (int64_t xx = win.x0; xx < win.x1; ++xx) plane[yy * g.w + xx] += share;
      }
  }
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
  template void max_pool2d_ref<T>(const Pool2dGeom&, const T*, T*);                          \
  template void max_pool2d_grad_ref<T>(const Pool2dGeom&, const T*, const T*, T*);           \
  template void max_pool2d<T>(const Pool2dGeom&, const T*, T*);                              \
  template void max_pool2d_grad<T>(const Pool2dGeom&, const T*, const T*, T*);               \
  template void max_pool2d_nhwc<T>(const Pool2dGeom&, const T*, T*);                         \
  template void max_pool2d_grad_nhwc<T>(const Pool2dGeom&, const T*, const T*, T*);          \
  template void avg_pool2d_ref<T>(const Pool2dGeom&, const T*, T*);                          \
  template void avg_pool2d_grad_ref<T>(const Pool2dGeom&, const T*, T*);                     \
  template void gather_rows<T>(const T*, int64_t, int64_t, const int64_t*, int64_t, T*,      \
                               const SourceLoc&);                                            \
  template void scatter_add_rows<T>(const T*, int64_t, const int64_t*, int64_t, int64_t, T*, \
                                    const SourceLoc&);                                       \
  template void argsort_rows<T>(const T*, int64_t, int64_t, int64_t, bool, int64_t*);

WS_NN_KERNELS(float)
WS_NN_KERNELS(double)
#undef WS_NN_KERNELS

}  // namespace ws::exec
