// Pooling kernels: the references, max pooling over NCHW planes by an
// argmax walk, over NHWC images by windows of channels (nn_kernels.hpp).
#include "exec/nn_kernels.hpp"
#include "exec/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace

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
// Instantiations.

#define WS_POOL_KERNELS(T)                                                          \
  template void max_pool2d_ref<T>(const Pool2dGeom&, const T*, T*);                 \
  template void max_pool2d_grad_ref<T>(const Pool2dGeom&, const T*, const T*, T*);  \
  template void max_pool2d<T>(const Pool2dGeom&, const T*, T*);                     \
  template void max_pool2d_grad<T>(const Pool2dGeom&, const T*, const T*, T*);      \
  template void max_pool2d_nhwc<T>(const Pool2dGeom&, const T*, T*);                \
  template void max_pool2d_grad_nhwc<T>(const Pool2dGeom&, const T*, const T*, T*); \
  template void avg_pool2d_ref<T>(const Pool2dGeom&, const T*, T*);                 \
  template void avg_pool2d_grad_ref<T>(const Pool2dGeom&, const T*, T*);

WS_POOL_KERNELS(float)
WS_POOL_KERNELS(double)
#undef WS_POOL_KERNELS

}  // namespace ws::exec
