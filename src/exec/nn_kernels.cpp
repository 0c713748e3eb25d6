#include "exec/nn_kernels.hpp"

#include <vector>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace ws::exec {
namespace {

// ---------------------------------------------------------------------------
// Convolution helpers.

// Input position of output position `o` and kernel tap `k` along one dim.
inline int64_t in_pos(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return o * stride - pad + k * dil;
}

// The output positions o in [0, count) whose input position o*stride + off
// lies in [0, size): a contiguous range [lo, hi), possibly empty (lo == hi).
inline void valid_range(int64_t off, int64_t stride, int64_t size, int64_t count, int64_t& lo,
                        int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  hi = size - off <= 0 ? 0 : std::min(count, (size - off - 1) / stride + 1);
  lo = std::min(lo, count);
  hi = std::max(hi, lo);
}

// A 1x1 kernel with stride 1 and no padding: the column matrix of an image
// and group is the input itself ([c/groups, h*w] with oh*ow == h*w).
inline bool is_pointwise(const Conv2dGeom& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

// Column matrix [cg*kh*kw, oh*ow] of one image and group: row (c, ky, kx),
// column (oy, ox) holds x[c, iy, ix] or 0 where (iy, ix) is in the padding.
void im2col(const Conv2dGeom& g, int64_t cg, const float* x, float* col) {
  const int64_t P = g.oh * g.ow;
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        float* row = col + ((c * g.kh + ky) * g.kw + kx) * P;
        const int64_t xoff = kx * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(xoff, g.sw, g.w, g.ow, lo, hi);
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          float* r = row + oy * g.ow;
          const int64_t iy = in_pos(oy, ky, g.sh, g.ph, g.dh);
          if (iy < 0 || iy >= g.h) {
            std::fill_n(r, g.ow, 0.0f);
            continue;
          }
          const float* xr = x + (c * g.h + iy) * g.w + xoff;  // xr[ox*sw] for ox in [lo, hi)
          std::fill_n(r, lo, 0.0f);
          if (g.sw == 1) {
            std::memcpy(r + lo, xr + lo, size_t(hi - lo) * sizeof(float));
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) r[ox] = xr[ox * g.sw];
          }
          std::fill(r + hi, r + g.ow, 0.0f);
        }
      }
}

// The adjoint of im2col: adds every column entry back into dx (padding
// entries are dropped). dx is not cleared.
void col2im_add(const Conv2dGeom& g, int64_t cg, const float* col, float* dx) {
  const int64_t P = g.oh * g.ow;
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const float* row = col + ((c * g.kh + ky) * g.kw + kx) * P;
        const int64_t xoff = kx * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(xoff, g.sw, g.w, g.ow, lo, hi);
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = in_pos(oy, ky, g.sh, g.ph, g.dh);
          if (iy < 0 || iy >= g.h) continue;
          const float* r = row + oy * g.ow;
          float* xr = dx + (c * g.h + iy) * g.w + xoff;
          for (int64_t ox = lo; ox < hi; ++ox) xr[ox * g.sw] += r[ox];
        }
      }
}

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

void check_indices(const int64_t* idx, int64_t n, int64_t rows, const SourceLoc& loc) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= rows)
      throw Error(fmt::format("embedding index {} at position {} is out of range [0, {}){}", idx[i],
                              i, rows, at(loc)));
}

// ---------------------------------------------------------------------------
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11; constants as in Random123).

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
  const uint64_t p0 = uint64_t(kPhiloxM0) * c[0], p1 = uint64_t(kPhiloxM1) * c[2];
  const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
  const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  const uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
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
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t yi = ((b * g.o + oc) * g.oh + oy) * g.ow + ox;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t ky = 0; ky < g.kh; ++ky) {
              const int64_t iy = in_pos(oy, ky, g.sh, g.ph, g.dh);
              if (iy < 0 || iy >= g.h) continue;
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t ix = in_pos(ox, kx, g.sw, g.pw, g.dw);
                if (ix < 0 || ix >= g.w) continue;
                f(yi, ((b * g.c + c0 + ic) * g.h + iy) * g.w + ix,
                  ((oc * cg + ic) * g.kh + ky) * g.kw + kx);
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
  accumulate_taps(g, g.n * g.o * g.oh * g.ow, y,
                  [&](double* a, int64_t yi, int64_t xi, int64_t wi) {
                    a[yi] += double(x[xi]) * double(w[wi]);
                  });
}

// The transposed convolution: every tap adds dy * w into dx.
template <class T>
void conv2d_input_grad_ref(const Conv2dGeom& g, const T* dy, const T* w, T* dx) {
  accumulate_taps(g, g.n * g.c * g.h * g.w, dx, [&](double* a, int64_t yi, int64_t xi, int64_t wi) {
    a[xi] += double(dy[yi]) * double(w[wi]);
  });
}

// dw = sum over images and output positions of dy * x.
template <class T>
void conv2d_weight_grad_ref(const Conv2dGeom& g, const T* x, const T* dy, T* dw) {
  accumulate_taps(g, g.o * (g.c / g.groups) * g.kh * g.kw, dw,
                  [&](double* a, int64_t yi, int64_t xi, int64_t wi) {
                    a[wi] += double(dy[yi]) * double(x[xi]);
                  });
}

// ---------------------------------------------------------------------------
// f32 convolution. Per image b and group gi, with K = cg*kh*kw, P = oh*ow:
//   forward       y_g [og, P] = W_g [og, K] * col [K, P]
//   input grad    col [K, P]  = W_g^T * dy_g [og, P], then col2im into dx
//   weight grad   dW_g [og, K] += dy_g [og, P] * col^T
// where col = im2col(x_g), or x_g itself for a pointwise convolution.

int64_t conv2d_scratch_floats(const Conv2dGeom& g) {
  if (is_pointwise(g)) return 0;
  return g.c / g.groups * g.kh * g.kw * g.oh * g.ow;
}

void gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb, const float* a,
              const float* b, float* c) {
  const auto tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
  const int lda = ta ? int(m) : int(k), ldb = tb ? int(k) : int(n);
  for (int64_t i = 0; i < batch; ++i, a += m * k, b += k * n, c += m * n)
    cblas_sgemm(CblasRowMajor, tra, trb, int(m), int(n), int(k), 1.0f, a, lda, b, ldb, 0.0f, c,
                int(n));
}

namespace {
// The column matrix of one image's group: the input itself for a pointwise
// convolution, else im2col into the scratch.
const float* columns(const Conv2dGeom& g, int64_t cg, const float* xg, float* scratch) {
  if (is_pointwise(g)) return xg;
  im2col(g, cg, xg, scratch);
  return scratch;
}
}  // namespace

void conv2d_f32(const Conv2dGeom& g, const float* x, const float* w, float* y, float* scratch) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t K = cg * g.kh * g.kw, P = g.oh * g.ow;
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const float* xg = x + (b * g.c + gi * cg) * g.h * g.w;
      const float* col = columns(g, cg, xg, scratch);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(og), int(P), int(K), 1.0f,
                  w + gi * og * K, int(K), col, int(P), 0.0f, y + (b * g.o + gi * og) * P, int(P));
    }
}

void conv2d_input_grad_f32(const Conv2dGeom& g, const float* dy, const float* w, float* dx,
                           float* scratch) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t K = cg * g.kh * g.kw, P = g.oh * g.ow;
  const bool pointwise = is_pointwise(g);
  if (!pointwise) std::fill_n(dx, g.n * g.c * g.h * g.w, 0.0f);
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      float* dxg = dx + (b * g.c + gi * cg) * g.h * g.w;
      // Pointwise: the column matrix is dx_g itself, written whole (beta 0).
      float* col = pointwise ? dxg : scratch;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(K), int(P), int(og), 1.0f,
                  w + gi * og * K, int(K), dy + (b * g.o + gi * og) * P, int(P), 0.0f, col, int(P));
      if (!pointwise) col2im_add(g, cg, col, dxg);
    }
}

void conv2d_weight_grad_f32(const Conv2dGeom& g, const float* x, const float* dy, float* dw,
                            float* scratch) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t K = cg * g.kh * g.kw, P = g.oh * g.ow;
  if (g.n == 0) std::fill_n(dw, g.o * K, 0.0f);
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const float* xg = x + (b * g.c + gi * cg) * g.h * g.w;
      const float* col = columns(g, cg, xg, scratch);
      // The first image overwrites dW, the rest accumulate.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(og), int(K), int(P), 1.0f,
                  dy + (b * g.o + gi * og) * P, int(P), col, int(P), b == 0 ? 0.0f : 1.0f,
                  dw + gi * og * K, int(K));
    }
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
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * width, table + idx[i] * width, size_t(width) * sizeof(T));
}

template <class T>
void scatter_add_rows(const T* src, int64_t width, const int64_t* idx, int64_t n, int64_t rows,
                      T* out, const SourceLoc& loc) {
  check_indices(idx, n, rows, loc);
  std::fill_n(out, rows * width, T(0));
  for (int64_t i = 0; i < n; ++i) {
    T* o = out + idx[i] * width;
    const T* s = src + i * width;
    for (int64_t j = 0; j < width; ++j) o[j] += s[j];
  }
}

// ---------------------------------------------------------------------------
// Philox.

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k[0] += kPhiloxW0, k[1] += kPhiloxW1;  // the key schedule: a Weyl sequence
    philox_round(c, k);
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}

template <class T>
void philox_uniform(uint64_t seed, uint64_t offset, T* out, int64_t n) {
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  const T scale = T(1.0 / 16777216.0);  // 2^-24
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = offset + uint64_t(i);
    const uint32_t ctr[4] = {uint32_t(c), uint32_t(c >> 32), 0, 0};
    uint32_t r[4];
    philox4x32_10(ctr, key, r);
    out[i] = T(r[0] >> 8) * scale;
  }
}

// ---------------------------------------------------------------------------
// Instantiations.

#define WS_NN_KERNELS(T)                                                                     \
  template void conv2d_ref<T>(const Conv2dGeom&, const T*, const T*, T*);                    \
  template void conv2d_input_grad_ref<T>(const Conv2dGeom&, const T*, const T*, T*);         \
  template void conv2d_weight_grad_ref<T>(const Conv2dGeom&, const T*, const T*, T*);        \
  template void max_pool2d_ref<T>(const Pool2dGeom&, const T*, T*);                          \
  template void max_pool2d_grad_ref<T>(const Pool2dGeom&, const T*, const T*, T*);           \
  template void avg_pool2d_ref<T>(const Pool2dGeom&, const T*, T*);                          \
  template void avg_pool2d_grad_ref<T>(const Pool2dGeom&, const T*, T*);                     \
  template void gather_rows<T>(const T*, int64_t, int64_t, const int64_t*, int64_t, T*,      \
                               const SourceLoc&);                                            \
  template void scatter_add_rows<T>(const T*, int64_t, const int64_t*, int64_t, int64_t, T*, \
                                    const SourceLoc&);                                       \
  template void philox_uniform<T>(uint64_t, uint64_t, T*, int64_t);

WS_NN_KERNELS(float)
WS_NN_KERNELS(double)
#undef WS_NN_KERNELS

}  // namespace ws::exec
