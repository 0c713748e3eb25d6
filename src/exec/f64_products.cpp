#include "exec/f64_products.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "exec/nn_kernels.hpp"
#include "exec/parallel.hpp"

namespace ws::exec {
namespace {

// The inner kernel computes a kMr x kNr block of C from a kMr-row panel of A
// and a kNr-column panel of B, both packed k-major; C is tiled in kMc x kNc
// blocks (one thread's unit of work), k in kKc slices (the packed panels of
// a slice stay in cache: 120 x 256 of A, 256 x 256 of B).
constexpr int64_t kMr = 6, kNr = 8, kMc = 120, kNc = 256, kKc = 256;
// Multiply-adds worth a thread of their own (a parallel region costs a
// microsecond or two; this is several of them at a few GFLOP/s).
constexpr int64_t kTileWork = 1 << 16;

// One block: c (kMr x kNr, row stride ldc) = ap' bp over kc (one fma chain
// from zero an element), added to c when `load`.
void block(int64_t kc, const double* ap, const double* bp, double* c, int64_t ldc, bool load) {
#if defined(__AVX2__) && defined(__FMA__)
  __m256d acc[kMr][2];
#pragma GCC unroll 6
  for (int64_t i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_pd();
  for (int64_t q = 0; q < kc; ++q, ap += kMr, bp += kNr) {
    const __m256d b0 = _mm256_loadu_pd(bp), b1 = _mm256_loadu_pd(bp + 4);
#pragma GCC unroll 6
    for (int64_t i = 0; i < kMr; ++i) {
      const __m256d a = _mm256_broadcast_sd(ap + i);
      acc[i][0] = _mm256_fmadd_pd(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_pd(a, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int64_t i = 0; i < kMr; ++i) {
    if (load) {
      acc[i][0] = _mm256_add_pd(_mm256_loadu_pd(c + i * ldc), acc[i][0]);
      acc[i][1] = _mm256_add_pd(_mm256_loadu_pd(c + i * ldc + 4), acc[i][1]);
    }
    _mm256_storeu_pd(c + i * ldc, acc[i][0]);
    _mm256_storeu_pd(c + i * ldc + 4, acc[i][1]);
  }
#else
  double acc[kMr][kNr] = {};
  for (int64_t q = 0; q < kc; ++q, ap += kMr, bp += kNr)
    for (int64_t i = 0; i < kMr; ++i)
      for (int64_t j = 0; j < kNr; ++j) acc[i][j] = std::fma(ap[i], bp[j], acc[i][j]);
  for (int64_t i = 0; i < kMr; ++i)
    for (int64_t j = 0; j < kNr; ++j)
      c[i * ldc + j] = load ? c[i * ldc + j] + acc[i][j] : acc[i][j];
#endif
}

// A block at the edge of C (mr < kMr or nr < kNr): computed whole in a
// scratch block, of which the part inside C is read and written.
void edge_block(int64_t kc, const double* ap, const double* bp, double* c, int64_t ldc, int64_t mr,
                int64_t nr, bool load) {
  double t[kMr * kNr] = {};
  if (load)
    for (int64_t i = 0; i < mr; ++i) std::copy_n(c + i * ldc, nr, t + i * kNr);
  block(kc, ap, bp, t, kNr, load);
  for (int64_t i = 0; i < mr; ++i) std::copy_n(t + i * kNr, nr, c + i * ldc);
}

// Rows [r0, r0 + rows) x columns [q0, q0 + kc) of `a`, in panels of kMr rows,
// each k-major (the panel's kMr values of column q together); rows past the
// end are zeros.
void pack_a(MatF64 a, int64_t r0, int64_t rows, int64_t q0, int64_t kc, double* out) {
  for (int64_t ir = 0; ir < rows; ir += kMr)
    for (int64_t q = 0; q < kc; ++q)
      for (int64_t i = 0; i < kMr; ++i)
        *out++ = ir + i < rows ? a.p[(r0 + ir + i) * a.rs + (q0 + q) * a.cs] : 0.0;
}

// Rows [q0, q0 + kc) x columns [c0, c0 + cols) of `b`, in panels of kNr
// columns, each k-major; columns past the end are zeros.
void pack_b(MatF64 b, int64_t q0, int64_t kc, int64_t c0, int64_t cols, double* out) {
  for (int64_t jr = 0; jr < cols; jr += kNr)
    for (int64_t q = 0; q < kc; ++q) {
      const double* row = b.p + (q0 + q) * b.rs + c0 * b.cs;
      for (int64_t j = 0; j < kNr; ++j) *out++ = jr + j < cols ? row[(jr + j) * b.cs] : 0.0;
    }
}

// Grows a thread's scratch vector to n elements and returns its data (the
// packed panels: thread-local, so threads never share one).
double* scratch(std::vector<double>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// The kMc x kNc tile of C at (ic, jc), over all of k.
void tile(int64_t m, int64_t n, int64_t k, MatF64 a, MatF64 b, double* c, int64_t ldc,
          bool accumulate, int64_t ic, int64_t jc) {
  thread_local std::vector<double> a_panels, b_panels;
  const int64_t mc = std::min(kMc, m - ic), nc = std::min(kNc, n - jc);
  double* ap = scratch(a_panels, (mc + kMr - 1) / kMr * kMr * kKc);
  double* bp = scratch(b_panels, (nc + kNr - 1) / kNr * kNr * kKc);
  for (int64_t pc = 0; pc < k; pc += kKc) {
    const int64_t kc = std::min(kKc, k - pc);
    pack_b(b, pc, kc, jc, nc, bp);
    pack_a(a, ic, mc, pc, kc, ap);
    const bool load = accumulate || pc > 0;  // later slices add to each element
    for (int64_t jr = 0; jr < nc; jr += kNr)
      for (int64_t ir = 0; ir < mc; ir += kMr) {
        double* cb = c + (ic + ir) * ldc + jc + jr;
        const int64_t mr = std::min(kMr, mc - ir), nr = std::min(kNr, nc - jr);
        if (mr == kMr && nr == kNr)
          block(kc, ap + ir * kc, bp + jr * kc, cb, ldc, load);
        else
          edge_block(kc, ap + ir * kc, bp + jr * kc, cb, ldc, mr, nr, load);
      }
  }
}

// ---------------------------------------------------------------------------
// Convolutions as products. The output positions of all images, in order
// (image, then depth, row, column), are the columns of the products: a
// chunk of them at a time (so the column matrix and the output's stay within
// kColBudget doubles each), within one group of channels at a time.

constexpr int64_t kColBudget = int64_t(1) << 21;  // 16 MB of columns

struct ConvDims {
  int64_t cg, og, taps, k, p, positions, chunk;  // k = cg * taps rows of columns
};

ConvDims conv_dims(const ir::Conv2dGeom& g) {
  ConvDims d{};
  d.cg = g.c / g.groups, d.og = g.o / g.groups, d.taps = g.kd * g.kh * g.kw;
  d.k = d.cg * d.taps, d.p = g.od * g.oh * g.ow, d.positions = g.n * d.p;
  d.chunk = std::clamp<int64_t>(kColBudget / std::max({d.k, d.og, int64_t(1)}), 1,
                                std::max<int64_t>(d.positions, 1));
  return d;
}

// Calls f(image, first position in it, first column, count) for the runs of
// columns [q0, q0 + len) within one image each.
template <class F>
void for_each_image_run(const ConvDims& d, int64_t q0, int64_t len, F&& f) {
  for (int64_t q = q0; q < q0 + len;) {
    const int64_t img = q / d.p, pos = q % d.p, cnt = std::min(d.p - pos, q0 + len - q);
    f(img, pos, q - q0, cnt);
    q += cnt;
  }
}

// Calls f(tap row r, column t, input element index or -1 for padding) for
// every column [q0, q0 + len) of the rows [r0, r1) of group grp's column
// matrix, row by row, columns in order.
template <class F>
void for_each_column(const ir::Conv2dGeom& g, const ConvDims& d, int64_t grp, int64_t r0,
                     int64_t r1, int64_t q0, int64_t len, F&& f) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ch = grp * d.cg + r / d.taps, tap = r % d.taps;
    const int64_t kz = tap / (g.kh * g.kw), ky = tap / g.kw % g.kh, kx = tap % g.kw;
    for_each_image_run(d, q0, len, [&](int64_t img, int64_t pos, int64_t t0, int64_t cnt) {
      const int64_t plane = (img * g.c + ch) * g.d;
      int64_t oz = pos / (g.oh * g.ow), oy = pos / g.ow % g.oh, ox = pos % g.ow;
      for (int64_t t = t0; t < t0 + cnt; ++t) {
        const int64_t iz = in_pos(oz, kz, g.sd, g.pd, g.dd), iy = in_pos(oy, ky, g.sh, g.ph, g.dh),
                      ix = in_pos(ox, kx, g.sw, g.pw, g.dw);
        const bool inside = iz >= 0 && iz < g.d && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
        f(r, t, inside ? ((plane + iz) * g.h + iy) * g.w + ix : int64_t(-1));
        if (++ox == g.ow) {
          ox = 0;
          if (++oy == g.oh) oy = 0, ++oz;
        }
      }
    });
  }
}

// Rows of a column matrix worth a thread: about kCheapGrain elements.
int64_t row_grain(int64_t len) {
  return std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(len, 1));
}

// col [k, len] = the inputs each tap of group grp reads at columns [q0, q0 + len).
void im2col(const ir::Conv2dGeom& g, const ConvDims& d, const double* x, int64_t grp, int64_t q0,
            int64_t len, double* col) {
  parallel_for(
      d.k, row_grain(len),
      [&](int64_t r0, int64_t r1) {
        for_each_column(g, d, grp, r0, r1, q0, len, [&](int64_t r, int64_t t, int64_t xi) {
          col[r * len + t] = xi < 0 ? 0.0 : x[xi];
        });
      },
      1);
}

// dx += col [k, len] at the inputs each tap reads: one channel per thread,
// its taps and columns in order.
void col2im(const ir::Conv2dGeom& g, const ConvDims& d, const double* col, int64_t grp, int64_t q0,
            int64_t len, double* dx) {
  parallel_for(
      d.cg, row_grain(len * d.taps),
      [&](int64_t c0, int64_t c1) {
        for_each_column(g, d, grp, c0 * d.taps, c1 * d.taps, q0, len,
                        [&](int64_t r, int64_t t, int64_t xi) {
                          if (xi >= 0) dx[xi] += col[r * len + t];
                        });
      },
      1);
}

// m [og, len] <- the channels of group grp of an output-shaped y [n, o, p]
// at columns [q0, q0 + len), or (scatter) back.
template <bool kScatter>
void move_out(const ir::Conv2dGeom& g, const ConvDims& d, int64_t grp, int64_t q0, int64_t len,
              const double* from, double* to) {
  for_each_image_run(d, q0, len, [&](int64_t img, int64_t pos, int64_t t0, int64_t cnt) {
    for (int64_t o = 0; o < d.og; ++o) {
      const int64_t yi = (img * g.o + grp * d.og + o) * d.p + pos, mi = o * len + t0;
      if constexpr (kScatter)
        std::copy_n(from + mi, cnt, to + yi);
      else
        std::copy_n(from + yi, cnt, to + mi);
    }
  });
}

// Calls f(group, first column, columns, column matrix, output matrix) for
// each chunk of columns of each group, in order; the matrices ([k, chunk]
// and [og, chunk]) live for the call.
template <class F>
void for_each_chunk(const ConvDims& d, int64_t groups, F&& f) {
  std::vector<double> cols(size_t(d.k * d.chunk)), outs(size_t(d.og * d.chunk));
  double *col = cols.data(), *out = outs.data();
  for (int64_t grp = 0; grp < groups; ++grp)
    for (int64_t q0 = 0; q0 < d.positions; q0 += d.chunk)
      f(grp, q0, std::min(d.chunk, d.positions - q0), col, out);
}

}  // namespace

void matmul_f64(int64_t batch, int64_t m, int64_t n, int64_t k, const double* a, bool ta,
                const double* b, bool tb, double* c) {
  // Products too small to split go side by side (gemm_f64 runs on the one
  // thread inside a parallel region).
  parallel_for(
      batch, std::max<int64_t>(1, kTileWork / std::max<int64_t>(1, m * n * k)),
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          gemm_f64(m, n, k, {a + i * m * k, ta ? 1 : k, ta ? m : 1},
                   {b + i * k * n, tb ? 1 : n, tb ? k : 1}, c + i * m * n, n, false);
      },
      1);
}

void conv2d_f64(const ir::Conv2dGeom& g, const double* x, const double* w, double* y) {
  const ConvDims d = conv_dims(g);
  for_each_chunk(d, g.groups, [&](int64_t grp, int64_t q0, int64_t len, double* col, double* m) {
    im2col(g, d, x, grp, q0, len, col);
    gemm_f64(d.og, len, d.k, {w + grp * d.og * d.k, d.k, 1}, {col, len, 1}, m, len, false);
    move_out<true>(g, d, grp, q0, len, m, y);
  });
}

void conv2d_input_grad_f64(const ir::Conv2dGeom& g, const double* dy, const double* w, double* dx) {
  const ConvDims d = conv_dims(g);
  std::fill_n(dx, g.n * g.in_image(), 0.0);
  for_each_chunk(d, g.groups, [&](int64_t grp, int64_t q0, int64_t len, double* col, double* m) {
    move_out<false>(g, d, grp, q0, len, dy, m);
    // The columns' gradient: w' dy, w [og, k] read transposed.
    gemm_f64(d.k, len, d.og, {w + grp * d.og * d.k, 1, d.k}, {m, len, 1}, col, len, false);
    col2im(g, d, col, grp, q0, len, dx);
  });
}

void conv2d_weight_grad_f64(const ir::Conv2dGeom& g, const double* x, const double* dy,
                            double* dw) {
  const ConvDims d = conv_dims(g);
  std::fill_n(dw, g.weight_numel(), 0.0);
  for_each_chunk(d, g.groups, [&](int64_t grp, int64_t q0, int64_t len, double* col, double* m) {
    im2col(g, d, x, grp, q0, len, col);
    move_out<false>(g, d, grp, q0, len, dy, m);
    // dw += dy col', the columns read transposed: each chain goes on over
    // the chunks in order.
    gemm_f64(d.og, d.k, len, {m, len, 1}, {col, 1, len}, dw + grp * d.og * d.k, d.k, true);
  });
}

void gemm_f64(int64_t m, int64_t n, int64_t k, MatF64 a, MatF64 b, double* c, int64_t ldc,
              bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0);
    return;
  }
  const int64_t tn = (n + kNc - 1) / kNc, tiles = (m + kMc - 1) / kMc * tn;
  const int64_t work = std::min(m, kMc) * std::min(n, kNc) * k;
  parallel_for(
      tiles, std::max<int64_t>(1, kTileWork / work),
      [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          tile(m, n, k, a, b, c, ldc, accumulate, t / tn * kMc, t % tn * kNc);
      },
      1);
}

}  // namespace ws::exec
