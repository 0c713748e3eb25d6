// Convolution test cases shared by the reference-kernel and backend tests:
// geometries, an independent convolution, random data and closeness.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "exec/nn_kernels.hpp"

namespace ws::exec {

using Vec = std::vector<double>;

// A convolution geometry with the output size filled in.
inline Conv2dGeom conv_geom(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh,
                            int64_t kw, int64_t sh = 1, int64_t sw = 1, int64_t ph = 0,
                            int64_t pw = 0, int64_t dh = 1, int64_t dw = 1, int64_t groups = 1) {
  Conv2dGeom g{.n = n, .c = c, .h = h, .w = w, .o = o, .kh = kh, .kw = kw};
  g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh, g.dw = dw, g.groups = groups;
  g.oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  g.ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  return g;
}

// A 3-d convolution: `g` (2-d, its sizes filled in) given a depth `d`,
// kernel depth `kd`, stride, padding and dilation in depth.
inline Conv2dGeom in_depth(Conv2dGeom g, int64_t d, int64_t kd, int64_t sd = 1, int64_t pd = 0,
                           int64_t dd = 1) {
  g.volume = true;
  g.d = d, g.kd = kd, g.sd = sd, g.pd = pd, g.dd = dd;
  g.od = (d + 2 * pd - dd * (kd - 1) - 1) / sd + 1;
  return g;
}

inline int64_t x_size(const Conv2dGeom& g) { return g.n * g.in_image(); }
inline int64_t w_size(const Conv2dGeom& g) { return g.weight_numel(); }
inline int64_t y_size(const Conv2dGeom& g) { return g.n * g.out_image(); }

inline std::string describe(const Conv2dGeom& g) {
  std::string s =
      fmt::format("n={} c={} h={} w={} o={} k={}x{} s={},{} p={},{} d={},{} groups={}", g.n, g.c,
                  g.h, g.w, g.o, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups);
  if (g.volume) s += fmt::format(" depth={} kd={} sd={} pd={} dd={}", g.d, g.kd, g.sd, g.pd, g.dd);
  return s;
}

// 3-d geometries: video models' stems and blocks (a 3x7x7 stem with stride
// 1x2x2, 3x3x3 blocks, r2plus1d's 1x3x3 and 3x1x1 halves), depth strides,
// padding and dilation, groups.
inline std::vector<Conv2dGeom> conv3d_geometries() {
  return {
      in_depth(conv_geom(2, 3, 9, 9, 4, 7, 7, 2, 2, 3, 3), 5, 3, 1, 1),
      in_depth(conv_geom(2, 4, 6, 5, 6, 3, 3, 1, 1, 1, 1), 4, 3, 1, 1),
      in_depth(conv_geom(2, 4, 6, 6, 4, 3, 3, 2, 2, 1, 1), 6, 3, 2, 1),
      in_depth(conv_geom(1, 3, 5, 5, 5, 3, 3, 1, 1, 1, 1), 4, 1),                    // 1x3x3
      in_depth(conv_geom(2, 5, 4, 4, 3, 1, 1), 6, 3, 1, 1),                          // 3x1x1
      in_depth(conv_geom(1, 4, 5, 6, 6, 2, 3, 1, 1, 0, 1, 1, 1, 2), 7, 2, 2, 1, 2),  // grouped
  };
}

inline Vec random_vec(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Vec v(size_t(n), 0.0);
  for (double& x : v) x = u(rng);
  return v;
}

inline std::vector<float> to_f32(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Geometries covering stride, padding, dilation, groups, non-square shapes,
// batches and pointwise kernels.
inline std::vector<Conv2dGeom> conv_geometries() {
  return {
      conv_geom(1, 1, 5, 5, 1, 3, 3),
      conv_geom(2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1),
      conv_geom(2, 3, 8, 9, 5, 3, 3, 2, 2, 1, 1),
      conv_geom(3, 2, 9, 7, 3, 3, 2, 2, 1, 2, 0),
      conv_geom(2, 4, 9, 10, 6, 3, 3, 1, 2, 2, 1, 2, 2),
      conv_geom(2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      conv_geom(2, 8, 7, 9, 8, 3, 2, 2, 1, 1, 2, 2, 1, 4),
      conv_geom(1, 4, 6, 6, 4, 5, 5, 1, 1, 2, 2, 1, 1, 4),  // depthwise
      conv_geom(3, 6, 5, 7, 4, 1, 1),                       // pointwise: no im2col
      conv_geom(2, 4, 5, 7, 6, 1, 1, 1, 1, 0, 0, 1, 1, 2),  // pointwise, grouped
      conv_geom(2, 3, 9, 8, 2, 1, 1, 2, 2),                 // 1x1 with stride
      conv_geom(2, 2, 5, 6, 3, 1, 1, 1, 1, 1, 1),           // 1x1 with padding
      conv_geom(2, 2, 4, 4, 3, 4, 4, 1, 1, 0, 0),           // kernel covers the image
  };
}

// An independent convolution: zero-pad the input explicitly, then add each
// kernel tap's shifted, strided plane into the output.
inline Vec conv_by_padding(const Conv2dGeom& g, const Vec& x, const Vec& w) {
  const int64_t hp = g.h + 2 * g.ph, wp = g.w + 2 * g.pw, cg = g.c / g.groups;
  const int64_t og = g.o / g.groups;
  Vec xp(size_t(g.n * g.c * hp * wp), 0.0);
  for (int64_t bc = 0; bc < g.n * g.c; ++bc)
    for (int64_t i = 0; i < g.h; ++i)
      for (int64_t j = 0; j < g.w; ++j)
        xp[size_t((bc * hp + i + g.ph) * wp + j + g.pw)] = x[size_t((bc * g.h + i) * g.w + j)];
  Vec y(size_t(y_size(g)), 0.0);
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oc = 0; oc < g.o; ++oc)
      for (int64_t ic = 0; ic < cg; ++ic)
        for (int64_t ky = 0; ky < g.kh; ++ky)
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const double wv = w[size_t(((oc * cg + ic) * g.kh + ky) * g.kw + kx)];
            const int64_t plane = b * g.c + (oc / og) * cg + ic;
            for (int64_t i = 0; i < g.oh; ++i)
              for (int64_t j = 0; j < g.ow; ++j)
                y[size_t(((b * g.o + oc) * g.oh + i) * g.ow + j)] +=
                    wv *
                    xp[size_t((plane * hp + i * g.sh + ky * g.dh) * wp + j * g.sw + kx * g.dw)];
          }
  return y;
}

// Relative closeness of an f32 result to the double reference.
inline void expect_close(const std::vector<float>& got, const Vec& want, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-6;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rtol * scale) << what << " at element " << i;
}

}  // namespace ws::exec
