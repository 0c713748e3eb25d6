#include "ir/geometry.hpp"

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ir/attr.hpp"
#include "ir/op_error.hpp"

namespace ws::ir {
namespace {

// A per-dim attribute (stride, padding, ...): `dims` entries >= min, or
// one used for every dim.
std::vector<int64_t> per_dim(Op op, const std::vector<int64_t>& v, std::string_view name,
                             int64_t min, size_t dims, const SourceLoc& loc) {
  bool fits = v.size() == 1 || v.size() == dims;
  for (int64_t e : v) fits = fits && e >= min;
  if (!fits)
    fail_op(op,
            fmt::format("{} must be one or {} integers >= {}, got {}", name,
                        dims == 2 ? "two" : "three", min, shape_str(v)),
            loc);
  return v.size() == dims ? v : std::vector<int64_t>(dims, v[0]);
}

// A pooling's pair attribute.
std::pair<int64_t, int64_t> pair_of(Op op, const std::vector<int64_t>& v, std::string_view name,
                                    int64_t min, const SourceLoc& loc) {
  const std::vector<int64_t> p = per_dim(op, v, name, min, 2, loc);
  return {p[0], p[1]};
}

// Output size of a window sliding over `in` (padded by `pad` each side).
int64_t window_out(Op op, int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil,
                   const std::string& what, const SourceLoc& loc) {
  if (k < 1)
    fail_op(op, fmt::format("the {} window must be at least 1 wide, got {}", what, k), loc);
  const std::string geometry = "the " + what + " geometry";
  const int64_t span =
      add_checked(op, mul_checked(op, dil, k - 1, geometry, loc), 1, geometry, loc);
  const int64_t padded = add_checked(op, in, mul_checked(op, 2, pad, geometry, loc), geometry, loc);
  if (padded < span)
    fail_op(op,
            fmt::format("the {} window ({} with dilation {}) is larger than the padded input "
                        "({} + 2*{})",
                        what, k, dil, in, pad),
            loc);
  return (padded - span) / stride + 1;
}

}  // namespace

const char* layout_name(ImageLayout l) {
  switch (l) {
    case ImageLayout::nchw: return "nchw";
    case ImageLayout::nhwc: return "nhwc";
    case ImageLayout::nChw8c: return "nChw8c";
    case ImageLayout::nChw16c: return "nChw16c";
  }
  return "?";
}

int64_t channel_block(ImageLayout l) {
  return l == ImageLayout::nChw8c ? 8 : l == ImageLayout::nChw16c ? 16 : 1;
}

Shape stored_image(ImageLayout l, int64_t n, int64_t c, int64_t h, int64_t w) {
  switch (l) {
    case ImageLayout::nchw: return {n, c, h, w};
    case ImageLayout::nhwc: return {n, h, w, c};
    case ImageLayout::nChw8c:
    case ImageLayout::nChw16c: return {n, c / channel_block(l), h, w, channel_block(l)};
  }
  return {};
}

namespace {

ImageLayout conv_layout(Op op, const Attrs& attrs, const SourceLoc& loc) {
  const std::string* name = attr<kConvOps, "layout">(attrs);
  if (!name) return ImageLayout::nchw;
  for (ImageLayout l :
       {ImageLayout::nchw, ImageLayout::nhwc, ImageLayout::nChw8c, ImageLayout::nChw16c})
    if (*name == layout_name(l)) return l;
  fail_op(op, fmt::format("unknown layout \"{}\": expected nchw, nhwc, nChw8c or nChw16c", *name),
          loc);
}

}  // namespace

Conv2dGeom conv2d_geom(Op op, const Attrs& attrs, const Type& x, const Type& w,
                       const SourceLoc& loc) {
  WS_CHECK(kConvOps.contains(op) && (w.rank() == 4 || w.rank() == 5))
      << op_name(op) << " of " << x.str() << " and " << w.str();
  Conv2dGeom g;
  g.layout = conv_layout(op, attrs, loc);
  g.volume = w.rank() == 5;
  const size_t s = g.volume ? 1 : 0;  // the first of H, W in the shapes
  const int64_t block = channel_block(g.layout);
  if (g.layout != ImageLayout::nchw && g.volume)
    fail_op(op,
            fmt::format("layout {} is for 2-d convolutions; a 3-d one is stored NCDHW",
                        layout_name(g.layout)),
            loc);
  const int64_t rank = block > 1 ? 5 : 4 + int64_t(s);
  if (x.rank() != rank || (block > 1 && x.shape[4] != block))
    fail_op(op,
            fmt::format("in layout {} the images are {}, got {}", layout_name(g.layout),
                        g.layout == ImageLayout::nhwc ? "[N, H, W, C]"
                        : block > 1                   ? fmt::format("[N, C/{0}, H, W, {0}]", block)
                        : g.volume                    ? "[N, C, D, H, W]"
                                                      : "[N, C, H, W]",
                        x.str()),
            loc);
  g.n = x.shape[0];
  if (g.layout == ImageLayout::nhwc) {
    g.c = x.shape[3], g.h = x.shape[1], g.w = x.shape[2];
  } else {
    g.c = mul_checked(op, x.shape[1], block, "the channels", loc);
    g.h = x.shape[2 + s], g.w = x.shape[3 + s];
  }
  g.o = w.shape[0], g.kh = w.shape[2 + s], g.kw = w.shape[3 + s];
  if (g.volume) g.d = x.shape[2], g.kd = w.shape[2];
  if (g.o % block != 0)
    fail_op(op,
            fmt::format("layout {} stores channels in blocks of {}, which do not divide the {} "
                        "output channels",
                        layout_name(g.layout), block, g.o),
            loc);
  g.groups = attr<kConvOps, "groups">(attrs);
  if (g.groups < 1 || g.c % g.groups != 0 || g.o % g.groups != 0)
    fail_op(op,
            fmt::format("groups {} must divide the input channels {} and output channels {}",
                        g.groups, g.c, g.o),
            loc);
  if (w.shape[1] != g.c / g.groups)  // groups divides c: no product to overflow
    fail_op(op,
            fmt::format("the input {} has {} channels, but the weight {} expects {} per group x "
                        "{} groups",
                        x.str(), g.c, w.str(), w.shape[1], g.groups),
            loc);
  const size_t dims = g.volume ? 3 : 2;
  const std::vector<int64_t> st = per_dim(op, attr<kConvOps, "stride">(attrs), "stride", 1, dims,
                                          loc),
                             pa = per_dim(op, attr<kConvOps, "padding">(attrs), "padding", 0, dims,
                                          loc),
                             di = per_dim(op, attr<kConvOps, "dilation">(attrs), "dilation", 1,
                                          dims, loc);
  g.sh = st[s], g.sw = st[s + 1], g.ph = pa[s], g.pw = pa[s + 1], g.dh = di[s], g.dw = di[s + 1];
  g.oh = window_out(op, g.h, g.kh, g.sh, g.ph, g.dh, "kernel", loc);
  g.ow = window_out(op, g.w, g.kw, g.sw, g.pw, g.dw, "kernel", loc);
  if (g.volume) {
    g.sd = st[0], g.pd = pa[0], g.dd = di[0];
    g.od = window_out(op, g.d, g.kd, g.sd, g.pd, g.dd, "kernel", loc);
  }
  return g;
}

Conv2dGeom conv2d_node_geom(Op op, const Attrs& attrs, std::span<const Type> in, const Type& out) {
  if (op == Op::conv2d) return conv2d_geom(op, attrs, in[0], in[1]);
  if (op == Op::conv2d_input_grad) return conv2d_geom(op, attrs, out, in[1]);
  WS_CHECK(op == Op::conv2d_weight_grad) << "not a convolution: " << op_name(op);
  return conv2d_geom(op, attrs, in[0], out);
}

Pool2dGeom pool2d_geom(Op op, const Attrs& attrs, const Shape& x, const SourceLoc& loc) {
  WS_CHECK(kPoolOps.contains(op) && x.size() == 4) << op_name(op) << " of " << shape_str(x);
  Pool2dGeom g;
  if (op == Op::max_pool2d || op == Op::max_pool2d_grad) {
    if (const std::string* l = attr<OpSet{Op::max_pool2d, Op::max_pool2d_grad}, "layout">(attrs)) {
      if (*l == "nhwc")
        g.layout = ImageLayout::nhwc;
      else if (*l != "nchw")
        fail_op(op, fmt::format("unknown layout \"{}\": expected nchw or nhwc", *l), loc);
    }
  }
  if (g.layout == ImageLayout::nhwc)
    g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  else
    g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  std::tie(g.kh, g.kw) = pair_of(op, attr<kPoolOps, "kernel">(attrs), "kernel", 1, loc);
  g.sh = g.kh, g.sw = g.kw;
  if (const std::vector<int64_t>* stride = attr<kPoolOps, "stride">(attrs))
    std::tie(g.sh, g.sw) = pair_of(op, *stride, "stride", 1, loc);
  std::tie(g.ph, g.pw) = pair_of(op, attr<kPoolOps, "padding">(attrs), "padding", 0, loc);
  if (g.ph > g.kh / 2 || g.pw > g.kw / 2)  // 2·p > k, without the product
    fail_op(op,
            fmt::format("padding ({}, {}) must be at most half the kernel ({}, {})", g.ph, g.pw,
                        g.kh, g.kw),
            loc);
  if (op == Op::avg_pool2d || op == Op::avg_pool2d_grad)
    g.count_include_pad =
        attr<OpSet{Op::avg_pool2d, Op::avg_pool2d_grad}, "count_include_pad">(attrs) != 0;
  g.oh = window_out(op, g.h, g.kh, g.sh, g.ph, 1, "pooling", loc);
  g.ow = window_out(op, g.w, g.kw, g.sw, g.pw, 1, "pooling", loc);
  return g;
}

Pool2dGeom pool2d_node_geom(Op op, const Attrs& attrs, std::span<const Type> in, const Type& out) {
  const bool grad = op == Op::max_pool2d_grad || op == Op::avg_pool2d_grad;
  return pool2d_geom(op, attrs, grad ? out.shape : in[0].shape);
}

}  // namespace ws::ir
