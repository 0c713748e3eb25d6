// Convolutions on small maps as matrix products over the unfolded input
// (dnnl_teams.hpp): every direction reads the weight where it lies, in the
// layout the user's parameter has.
//
// On small maps (the last stages of regnets, resnets and resnexts at small
// inputs) a step's convolutions are bound by their weights: oneDNN's
// convolution reorders the weight into its blocked layout at every call
// (reading and writing it whole before reading it again) and the
// activations around it, while the arithmetic is a few products a weight.
// A product reads the weight once. With S = OH*OW output positions, N*S
// rows and CKK = C*KH*KW:
//  - cols[N*S, CKK]: the unfolded input, row n*S + p holding the taps of
//    output position p of image n (zeros where a tap reads padding);
//  - conv2d: yt[O, N*S] = w @ colst (colst the unfolded input transposed,
//    w the product's A, read in place), a product a group, then
//    y[n, o, p] = yt[o, n*S + p];
//  - conv2d_input_grad: dyt[N*S, O] (dy's transpose), dcols = dyt @ w, a
//    product a group, then dx = the sum of dcols' taps onto the input
//    positions they read (col2im), each input plane summed by one thread in
//    a fixed order;
//  - conv2d_weight_grad: dw = dy^T @ cols, a product a group.
// Each group's product is split into fixed parts of the weight's rows or
// columns (at least kProductParts in all), each a primitive made for one
// thread that sums over its whole K: the same bits on any team. Images
// stored NHWC (g.layout) are read and written there; the matrices, and so
// the bits, are the same.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/dnnl_op.hpp"
#include "exec/dnnl_teams.hpp"
#include "exec/parallel.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

constexpr int64_t kProductParts = 4;

// A one-thread product c[m, n] = a[m, k] @ b[k, n], each operand read at
// its element strides (row, column).
std::shared_ptr<const BackendOp> part_product(int64_t m, int64_t k, int64_t n, dims a_strides,
                                              dims b_strides, dims c_strides,
                                              const std::string& what) {
  TeamScope one(1);
  const dnnl::memory::desc a(dims{m, k}, dt::f32, a_strides), b(dims{k, n}, dt::f32, b_strides),
      c(dims{m, n}, dt::f32, c_strides);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), user_scratchpad(), dnnl_engine());
  auto op = std::make_shared<DnnlOp>();
  op->add_operand(DNNL_ARG_SRC, 0, a, pd.src_desc());
  op->add_operand(DNNL_ARG_WEIGHTS, 1, b, pd.weights_desc());
  op->add_operand(DNNL_ARG_DST, 2, c, pd.dst_desc());
  op->set_main<dnnl::matmul>(pd, 2 * m * k * n);
  op->finish(fmt::format("{} matmul [{}x{}x{}]", what, m, k, n));
  return op;
}

// Where element (n, c, y, x) of an image batch of `channels` channels and
// h x w maps lies: NCHW, or NHWC.
struct ImageAt {
  bool nhwc;
  int64_t channels, h, w;
  int64_t operator()(int64_t n, int64_t c, int64_t y, int64_t x) const {
    return nhwc ? ((n * h + y) * w + x) * channels + c : ((n * channels + c) * h + y) * w + x;
  }
};

ImageAt input_at(const Conv2dGeom& g) { return {g.layout == ir::ImageLayout::nhwc, g.c, g.h, g.w}; }

// unfold of NHWC images: each row's taps read a pixel's channels apart.
void unfold_nhwc(const Conv2dGeom& g, const float* x, float* cols) {
  const int64_t s = g.oh * g.ow, ckk = g.c * g.kh * g.kw, kk = g.kh * g.kw;
  const ImageAt at = input_at(g);
  parallel_for(
      g.n * s, grain_for(ckk),
      [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const int64_t n = r / s, oy = r % s / g.ow, ox = r % g.ow;
          float* row = cols + r * ckk;
          for (int64_t ky = 0; ky < g.kh; ++ky) {
            const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              const int64_t ix = ox * g.sw - g.pw + kx * g.dw, t = ky * g.kw + kx;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
                for (int64_t c = 0; c < g.c; ++c) row[c * kk + t] = 0.0f;
                continue;
              }
              const float* px = x + at(n, 0, iy, ix);
              for (int64_t c = 0; c < g.c; ++c) row[c * kk + t] = px[c];
            }
          }
        }
      },
      1);
}

// cols[n*S + p, (c*KH + ky)*KW + kx] = x at output position p's tap
// (ky, kx) of channel c, or 0 in the padding. Copies only. A window inside
// the image copies without bounds tests; a 1x1 window with no stride or
// padding is a transpose of each image.
void unfold(const Conv2dGeom& g, const float* x, float* cols) {
  const int64_t s = g.oh * g.ow, ckk = g.c * g.kh * g.kw, plane = g.h * g.w;
  if (g.layout == ir::ImageLayout::nhwc) return unfold_nhwc(g, x, cols);
  const bool pointwise =
      g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 && s == plane;
  parallel_for(
      g.n * s, grain_for(ckk),
      [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const int64_t n = r / s, oy = r % s / g.ow, ox = r % g.ow;
          float* row = cols + r * ckk;
          const float* xn = x + n * g.c * plane;
          if (pointwise) {
            for (int64_t c = 0; c < g.c; ++c) row[c] = xn[c * plane + r % s];
            continue;
          }
          const int64_t iy0 = oy * g.sh - g.ph, ix0 = ox * g.sw - g.pw;
          const bool inside = iy0 >= 0 && iy0 + (g.kh - 1) * g.dh < g.h && ix0 >= 0 &&
                              ix0 + (g.kw - 1) * g.dw < g.w;
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t ky = 0; ky < g.kh; ++ky) {
              const int64_t iy = iy0 + ky * g.dh;
              const float* xr = xn + (c * g.h + iy) * g.w + ix0;
              if (inside) {
                for (int64_t kx = 0; kx < g.kw; ++kx) *row++ = xr[kx * g.dw];
              } else if (iy < 0 || iy >= g.h) {
                for (int64_t kx = 0; kx < g.kw; ++kx) *row++ = 0.0f;
              } else {
                for (int64_t kx = 0; kx < g.kw; ++kx) {
                  const int64_t ix = ix0 + kx * g.dw;
                  *row++ = ix >= 0 && ix < g.w ? xr[kx * g.dw] : 0.0f;
                }
              }
            }
        }
      },
      1);
}

// colst[(c*KH + ky)*KW + kx, n*S + p]: unfold's transpose, a row per
// tap, each image's S positions side by side.
void unfold_transposed(const Conv2dGeom& g, const float* x, float* colst) {
  const int64_t s = g.oh * g.ow, ns = g.n * s, kk = g.kh * g.kw;
  const ImageAt at = input_at(g);
  parallel_for(
      g.c * kk, grain_for(ns),
      [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const int64_t c = r / kk, ky = r % kk / g.kw, kx = r % g.kw;
          float* row = colst + r * ns;
          for (int64_t n = 0; n < g.n; ++n)
            for (int64_t oy = 0; oy < g.oh; ++oy) {
              const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
              const bool in = iy >= 0 && iy < g.h;
              for (int64_t ox = 0; ox < g.ow; ++ox) {
                const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                *row++ = in && ix >= 0 && ix < g.w ? x[at(n, c, iy, ix)] : 0.0f;
              }
            }
        }
      },
      1);
}

// t[n*S + p, o] = v[n, o, p] for v [N, O, S] (NHWC: v as it is).
void transpose_images(const Conv2dGeom& g, const float* v, float* t) {
  const int64_t s = g.oh * g.ow;
  if (g.layout == ir::ImageLayout::nhwc) {
    std::memcpy(t, v, size_t(g.n * s * g.o) * 4);
    return;
  }
  parallel_for(
      g.n * g.o, grain_for(s),
      [&](int64_t lo, int64_t hi) {
        for (int64_t no = lo; no < hi; ++no) {
          const int64_t n = no / g.o, o = no % g.o;
          for (int64_t p = 0; p < s; ++p) t[(n * s + p) * g.o + o] = v[no * s + p];
        }
      },
      1);
}

// t[o, n*S + p] = v[n, o, p] for v [N, O, S], each image's run of S copied
// whole (with `back`, v from t).
void channel_major(const Conv2dGeom& g, const float* from, float* to, bool back) {
  const int64_t s = g.oh * g.ow, ns = g.n * s;
  if (g.layout == ir::ImageLayout::nhwc) {  // v [N*S, O]: t its transpose
    parallel_for(
        g.o, grain_for(ns),
        [&](int64_t lo, int64_t hi) {
          for (int64_t o = lo; o < hi; ++o)
            for (int64_t r = 0; r < ns; ++r) {
              if (back)
                to[r * g.o + o] = from[o * ns + r];
              else
                to[o * ns + r] = from[r * g.o + o];
            }
        },
        1);
    return;
  }
  parallel_for(
      g.n * g.o, grain_for(s),
      [&](int64_t lo, int64_t hi) {
        for (int64_t no = lo; no < hi; ++no) {
          const int64_t plain = no * s, major = no % g.o * ns + no / g.o * s;
          std::memcpy(to + (back ? plain : major), from + (back ? major : plain), size_t(s) * 4);
        }
      },
      1);
}

// One part of a product: its primitive, its scratch, and where it reads and
// writes (element offsets into its operands).
struct Part {
  std::shared_ptr<const BackendOp> op;
  int64_t scratch_offset = 0;
  int64_t a = 0, b = 0, out = 0;
};

class ProductsConvOp : public BackendOp {
 public:
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }
  Reorders reorders() const override {
    Reorders r;
    for (const Part& p : parts_) r += p.op->reorders();
    return r;
  }

 protected:
  explicit ProductsConvOp(const Conv2dGeom& g) : g_(g) {}
  int64_t reserve(int64_t bytes) {
    const int64_t at = scratch_bytes_;
    scratch_bytes_ += align64(bytes);
    return at;
  }
  void add(Part p) {
    p.scratch_offset = reserve(p.op->scratch_bytes());
    flops_ += p.op->flops();
    parts_.push_back(std::move(p));
  }
  void describe(const char* how) {
    impl_ = fmt::format("{} + {} parts{}, each {}", how, parts_.size(),
                        g_.groups > 1 ? fmt::format(" of {} groups", g_.groups) : "",
                        parts_[0].op->impl());
  }
  // Each part's product, in parallel.
  void run_parts(const float* a, const float* b, float* out, std::byte* scratch) const {
    parallel_for(
        int64_t(parts_.size()), 1,
        [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const Part& p = parts_[size_t(i)];
            p.op->run(a + p.a, b + p.b, out + p.out, scratch + p.scratch_offset);
          }
        },
        1);
  }
  // The parts of each group's `extent` (rows or columns of the weight):
  // calls f(group, first, count) for every part, at least kProductParts in
  // all when the extent allows.
  template <class F>
  void split(int64_t extent, F&& f) const {
    const int64_t per_group = std::min(extent, (kProductParts + g_.groups - 1) / g_.groups);
    for (int64_t group = 0; group < g_.groups; ++group)
      for (int64_t i = 0; i < per_group; ++i) {
        const int64_t first = extent * i / per_group;
        f(group, first, extent * (i + 1) / per_group - first);
      }
  }

  Conv2dGeom g_;
  std::vector<Part> parts_;
  int64_t scratch_bytes_ = 0, flops_ = 0;
  std::string impl_;
};

// conv2d: yt[O, N*S] = w @ colst a group (parts of the group's rows of w,
// read where they lie), then y[n, o, p] = yt[o, n*S + p].
class ColsConvOp final : public ProductsConvOp {
 public:
  explicit ColsConvOp(const Conv2dGeom& g) : ProductsConvOp(g) {
    const int64_t ns = g.n * g.oh * g.ow, ckk = g.c * g.kh * g.kw;
    const int64_t og = g.o / g.groups, gk = ckk / g.groups;
    cols_ = reserve(ns * ckk * 4);
    yt_ = reserve(ns * g.o * 4);
    split(og, [&](int64_t group, int64_t first, int64_t count) {
      const int64_t o0 = group * og + first;
      add({part_product(count, gk, ns, {gk, 1}, {ns, 1}, {ns, 1}, "conv2d"), 0, o0 * gk,
           group * gk * ns, o0 * ns});
    });
    describe("im2col");
  }
  void run(const void* x, const void* w, void* y, void* scratch, const void*,
           const void*) const override {
    const Conv2dGeom& g = g_;
    auto* base = static_cast<std::byte*>(scratch);
    auto* cols = reinterpret_cast<float*>(base + cols_);
    auto* yt = reinterpret_cast<float*>(base + yt_);
    unfold_transposed(g, static_cast<const float*>(x), cols);
    run_parts(static_cast<const float*>(w), cols, yt, base);
    channel_major(g, yt, static_cast<float*>(y), true);
  }

 private:
  int64_t cols_ = 0, yt_ = 0;
};

// conv2d_input_grad: dcols[N*S, CKK] = dyt @ w a group (parts of the
// group's columns of w), then each input plane sums its taps.
class ColsInputGradOp final : public ProductsConvOp {
 public:
  explicit ColsInputGradOp(const Conv2dGeom& g) : ProductsConvOp(g) {
    const int64_t ns = g.n * g.oh * g.ow, ckk = g.c * g.kh * g.kw;
    const int64_t og = g.o / g.groups, gk = ckk / g.groups;
    dyt_ = reserve(ns * g.o * 4);
    dcols_ = reserve(ns * ckk * 4);
    split(gk, [&](int64_t group, int64_t first, int64_t count) {
      add({part_product(ns, og, count, {g.o, 1}, {gk, 1}, {ckk, 1}, "conv2d_input_grad"), 0,
           group * og, group * og * gk + first, group * gk + first});
    });
    describe("col2im");
  }
  void run(const void* dy, const void* w, void* dx, void* scratch, const void*,
           const void*) const override {
    const Conv2dGeom& g = g_;
    auto* base = static_cast<std::byte*>(scratch);
    auto* dyt = reinterpret_cast<float*>(base + dyt_);
    auto* dcols = reinterpret_cast<float*>(base + dcols_);
    transpose_images(g, static_cast<const float*>(dy), dyt);
    run_parts(dyt, static_cast<const float*>(w), dcols, base);
    const int64_t plane = g.h * g.w, kk = g.kh * g.kw, ckk = g.c * kk;
    const bool nhwc = g.layout == ir::ImageLayout::nhwc;
    parallel_for(
        g.n * g.c, grain_for(g.oh * g.ow * kk),
        [&](int64_t lo, int64_t hi) {
          for (int64_t nc = lo; nc < hi; ++nc) {
            const int64_t n = nc / g.c, c = nc % g.c;
            // Element (iy, ix) of the plane at d[(iy * w + ix) * step].
            const int64_t step = nhwc ? g.c : 1;
            float* d = static_cast<float*>(dx) + (nhwc ? n * plane * g.c + c : nc * plane);
            for (int64_t i = 0; i < plane; ++i) d[i * step] = 0.0f;
            for (int64_t oy = 0; oy < g.oh; ++oy)
              for (int64_t ox = 0; ox < g.ow; ++ox) {
                const float* taps = dcols + ((n * g.oh + oy) * g.ow + ox) * ckk + c * kk;
                for (int64_t ky = 0; ky < g.kh; ++ky) {
                  const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
                  if (iy < 0 || iy >= g.h) continue;
                  for (int64_t kx = 0; kx < g.kw; ++kx) {
                    const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                    if (ix >= 0 && ix < g.w) d[(iy * g.w + ix) * step] += taps[ky * g.kw + kx];
                  }
                }
              }
          }
        },
        1);
  }

 private:
  int64_t dyt_ = 0, dcols_ = 0;
};

// conv2d_weight_grad: dw[O/G, CKK/G] of a group = dy^T[its rows, N*S] @
// cols[N*S, its columns] (parts of the group's rows of dw). Each element
// is one primitive's sum over N*S, where oneDNN's convolution would also
// add whole weight copies of batch parts (BatchPartsOp).
class ColsWeightGradOp final : public ProductsConvOp {
 public:
  explicit ColsWeightGradOp(const Conv2dGeom& g) : ProductsConvOp(g) {
    const int64_t ns = g.n * g.oh * g.ow, ckk = g.c * g.kh * g.kw;
    const int64_t og = g.o / g.groups, gk = ckk / g.groups;
    dyt_ = reserve(g.o * ns * 4);
    cols_ = reserve(ns * ckk * 4);
    split(og, [&](int64_t group, int64_t first, int64_t count) {
      const int64_t o0 = group * og + first;
      add({part_product(count, ns, gk, {ns, 1}, {ckk, 1}, {gk, 1}, "conv2d_weight_grad"), 0,
           o0 * ns, group * gk, o0 * gk});
    });
    describe("im2col");
  }
  void run(const void* x, const void* dy, void* dw, void* scratch, const void*,
           const void*) const override {
    const Conv2dGeom& g = g_;
    auto* base = static_cast<std::byte*>(scratch);
    auto* dyt = reinterpret_cast<float*>(base + dyt_);
    auto* cols = reinterpret_cast<float*>(base + cols_);
    channel_major(g, static_cast<const float*>(dy), dyt, false);
    unfold(g, static_cast<const float*>(x), cols);
    run_parts(dyt, cols, static_cast<float*>(dw), base);
  }

 private:
  int64_t dyt_ = 0, cols_ = 0;
};

}  // namespace

std::shared_ptr<const BackendOp> make_conv_products(ir::Op op, const Conv2dGeom& g) {
  WS_CHECK(!g.volume) << "a 3-d convolution as products";
  if (op == ir::Op::conv2d) return std::make_shared<ColsConvOp>(g);
  if (op == ir::Op::conv2d_input_grad) return std::make_shared<ColsInputGradOp>(g);
  return std::make_shared<ColsWeightGradOp>(g);
}

}  // namespace ws::exec
