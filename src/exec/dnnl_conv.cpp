// The convolution primitives of the backend (dnnl_backend.hpp): one oneDNN
// convolution in any direction, its weight gradient left in the layout the
// primitive writes, and a reorder between two layouts, each a DnnlOp.
#include <fmt/format.h>

#include "exec/dnnl_op.hpp"
#include "exec/dnnl_teams.hpp"

namespace ws::exec {

int64_t conv_flops(const Conv2dGeom& g) {
  return 2 * g.n * g.out_image() * (g.c / g.groups) * g.kd * g.kh * g.kw;
}

namespace {

using ir::Op;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

struct ConvDescs {
  dnnl::memory::desc x, w, y;              // our layouts
  dnnl::memory::desc x_any, w_any, y_any;  // the primitive's choice
  dims stride, dilation, pad_l, pad_r;
};

// PyTorch floors the output size: the right padding is what that leaves.
int64_t right_pad(int64_t out, int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil) {
  return (out - 1) * s + dil * (k - 1) + 1 - in - p;
}

// x_channels, y_channels: the channels of the images x and y are slices of
// (0: g.c and g.o), for a convolution over a slice of their channels.
ConvDescs conv_descs(const Conv2dGeom& g, int64_t x_channels = 0, int64_t y_channels = 0) {
  ConvDescs c;
  const bool v = g.volume, grouped = g.groups > 1;
  const dims x = v ? dims{g.n, g.c, g.d, g.h, g.w} : dims{g.n, g.c, g.h, g.w};
  const dims y = v ? dims{g.n, g.o, g.od, g.oh, g.ow} : dims{g.n, g.o, g.oh, g.ow};
  dims w{g.o, g.c / g.groups};
  if (grouped) w = {g.groups, g.o / g.groups, g.c / g.groups};
  if (v) w.push_back(g.kd);
  w.insert(w.end(), {g.kh, g.kw});
  // The images as the convolution's layout stores them (geometry.hpp).
  const tag plain = v                                      ? tag::ncdhw
                    : g.layout == ir::ImageLayout::nhwc    ? tag::nhwc
                    : g.layout == ir::ImageLayout::nChw8c  ? tag::aBcd8b
                    : g.layout == ir::ImageLayout::nChw16c ? tag::aBcd16b
                                                           : tag::nchw;
  c.x = {x, dt::f32, plain};
  c.y = {y, dt::f32, plain};
  WS_CHECK((x_channels <= g.c && y_channels <= g.o) || g.layout == ir::ImageLayout::nchw ||
           g.layout == ir::ImageLayout::nhwc)
      << "a slice of the channels of images stored " << ir::layout_name(g.layout);
  // A slice of each image's channels: the image's stride is the whole's
  // (NCHW), or each pixel's (NHWC).
  auto sliced = [&](const dims& d, int64_t channels) {
    dims st(d.size(), 1);
    if (g.layout == ir::ImageLayout::nhwc) {  // [n, c, h, w] at strides [hwC, 1, wC, C]
      st = {d[2] * d[3] * channels, 1, d[3] * channels, channels};
      return dnnl::memory::desc(d, dt::f32, st);
    }
    for (size_t i = d.size() - 1; i-- > 0;) st[i] = st[i + 1] * d[i + 1];
    st[0] = st[1] * channels;
    return dnnl::memory::desc(d, dt::f32, st);
  };
  if (x_channels > g.c) c.x = sliced(x, x_channels);
  if (y_channels > g.o) c.y = sliced(y, y_channels);
  c.w = {w, dt::f32, v ? (grouped ? tag::goidhw : tag::oidhw) : (grouped ? tag::goihw : tag::oihw)};
  c.x_any = {x, dt::f32, tag::any};
  c.y_any = {y, dt::f32, tag::any};
  c.w_any = {w, dt::f32, tag::any};
  c.stride = {g.sh, g.sw};
  c.dilation = {g.dh - 1, g.dw - 1};  // oneDNN counts dilation from 0
  c.pad_l = {g.ph, g.pw};
  c.pad_r = {right_pad(g.oh, g.h, g.kh, g.sh, g.ph, g.dh),
             right_pad(g.ow, g.w, g.kw, g.sw, g.pw, g.dw)};
  if (v) {
    c.stride.insert(c.stride.begin(), g.sd);
    c.dilation.insert(c.dilation.begin(), g.dd - 1);
    c.pad_l.insert(c.pad_l.begin(), g.pd);
    c.pad_r.insert(c.pad_r.begin(), right_pad(g.od, g.d, g.kd, g.sd, g.pd, g.dd));
  }
  return c;
}

}  // namespace

namespace {

// The primitive over descriptors c (see make_conv_op).
std::shared_ptr<DnnlOp> make_conv_primitive(Op op, const Conv2dGeom& g, const ConvDescs& c,
                                            dnnl::memory::desc* blocked, bool native) {
  auto k = std::make_shared<DnnlOp>();
  auto ours = [&](const dnnl::memory::desc& plain, const dnnl::memory::desc& want) {
    return native ? want : plain;
  };
  const int64_t flops = conv_flops(g);
  const auto alg = dnnl::algorithm::convolution_direct;
  // The backward primitives take the forward one as a hint.
  dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, c.x_any, c.w_any,
                                      c.y_any, c.stride, c.dilation, c.pad_l, c.pad_r),
      user_scratchpad(), dnnl_engine());
  if (op == Op::conv2d) {
    k->add_operand(DNNL_ARG_SRC, 0, ours(c.x, fwd.src_desc()), fwd.src_desc());
    k->add_operand(DNNL_ARG_WEIGHTS, 1, ours(c.w, fwd.weights_desc()), fwd.weights_desc());
    k->add_operand(DNNL_ARG_DST, 2, ours(c.y, fwd.dst_desc()), fwd.dst_desc());
    k->set_main<dnnl::convolution_forward>(fwd, flops);
  } else if (op == Op::conv2d_input_grad) {  // (dy, w) -> dx
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(alg, c.x_any, c.w_any, c.y_any, c.stride, c.dilation,
                                              c.pad_l, c.pad_r),
        user_scratchpad(), dnnl_engine(), fwd);
    k->add_operand(DNNL_ARG_DIFF_DST, 0, ours(c.y, pd.diff_dst_desc()), pd.diff_dst_desc());
    k->add_operand(DNNL_ARG_WEIGHTS, 1, ours(c.w, pd.weights_desc()), pd.weights_desc());
    k->add_operand(DNNL_ARG_DIFF_SRC, 2, ours(c.x, pd.diff_src_desc()), pd.diff_src_desc());
    k->set_main<dnnl::convolution_backward_data>(pd, flops);
  } else {  // conv2d_weight_grad: (x, dy) -> dw
    dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(alg, c.x_any, c.w_any, c.y_any, c.stride,
                                                 c.dilation, c.pad_l, c.pad_r),
        user_scratchpad(), dnnl_engine(), fwd);
    k->add_operand(DNNL_ARG_SRC, 0, ours(c.x, pd.src_desc()), pd.src_desc());
    k->add_operand(DNNL_ARG_DIFF_DST, 1, ours(c.y, pd.diff_dst_desc()), pd.diff_dst_desc());
    if (blocked) *blocked = pd.diff_weights_desc();
    k->add_operand(DNNL_ARG_DIFF_WEIGHTS, 2,
                   blocked ? pd.diff_weights_desc() : ours(c.w, pd.diff_weights_desc()),
                   pd.diff_weights_desc());
    k->set_main<dnnl::convolution_backward_weights>(pd, flops);
  }
  if (g.volume)
    k->finish(fmt::format(
        "{} x [{},{},{},{},{}] w [{},{},{},{},{}] stride {}x{}x{} padding {}x{}x{} groups {}",
        ir::op_name(op), g.n, g.c, g.d, g.h, g.w, g.o, g.c / g.groups, g.kd, g.kh, g.kw, g.sd, g.sh,
        g.sw, g.pd, g.ph, g.pw, g.groups));
  else
    k->finish(fmt::format("{} x [{},{},{},{}] w [{},{},{},{}] stride {}x{} padding {}x{} groups {}",
                          ir::op_name(op), g.n, g.c, g.h, g.w, g.o, g.c / g.groups, g.kh, g.kw,
                          g.sh, g.sw, g.ph, g.pw, g.groups));
  return k;
}

// With `blocked`, a weight gradient is written in the layout its primitive
// picks, described there, rather than reordered to ours. With `native`,
// every operand is read and written in the layout the primitive picks,
// images too unless `stored_images`. Images stored NHWC or in blocks are
// read and written where they lie when oneDNN has a jit kernel for that
// layout (no reorder around the convolution); else (its gemm or reference
// kernels: a depthwise weight gradient over NHWC images, say) the
// primitive takes the layout it picks and the images are reordered to it
// and back.
std::shared_ptr<DnnlOp> make_conv_op(Op op, const Conv2dGeom& g,
                                     dnnl::memory::desc* blocked = nullptr, int64_t x_channels = 0,
                                     int64_t y_channels = 0, bool native = false,
                                     bool stored_images = true) {
  const ConvDescs c = conv_descs(g, x_channels, y_channels);
  if (stored_images && !g.volume && g.layout != ir::ImageLayout::nchw && x_channels == 0 &&
      y_channels == 0) {
    ConvDescs stored = c;
    stored.x_any = c.x;
    stored.y_any = c.y;
    try {
      dnnl::memory::desc weights;
      auto k = make_conv_primitive(op, g, stored, blocked ? &weights : nullptr, native);
      if (k->impl().rfind("jit", 0) == 0 || k->impl().rfind("brg", 0) == 0) {
        if (blocked) *blocked = weights;
        return k;
      }
    } catch (const dnnl::error&) {  // no implementation reads the layout: the picked one
    }
  }
  return make_conv_primitive(op, g, c, blocked, native);
}

}  // namespace

std::shared_ptr<const BackendOp> make_conv(Op op, const Conv2dGeom& g) {
  return make_conv_op(op, g);
}

std::shared_ptr<const BackendOp> make_weight_grad_of_slice(const Conv2dGeom& g, int64_t x_channels,
                                                           int64_t y_channels) {
  return make_conv_op(Op::conv2d_weight_grad, g, nullptr, x_channels, y_channels);
}

std::shared_ptr<const DnnlOp> make_native_conv(Op op, const Conv2dGeom& g, bool stored_images) {
  return make_conv_op(op, g, nullptr, 0, 0, true, stored_images);
}

BlockedWeightGrad make_weight_grad_blocked(const Conv2dGeom& g) {
  BlockedWeightGrad r;
  r.op = make_conv_op(Op::conv2d_weight_grad, g, &r.blocked);
  r.plain = conv_descs(g).w;
  return r;
}

std::shared_ptr<const BackendOp> make_reorder(const dnnl::memory::desc& from,
                                              const dnnl::memory::desc& to,
                                              const std::string& what) {
  auto k = std::make_shared<DnnlOp>();
  const dnnl::memory src(from, dnnl_engine(), DNNL_MEMORY_NONE),
      dst(to, dnnl_engine(), DNNL_MEMORY_NONE);
  const dnnl::reorder::primitive_desc pd(src, dst, user_scratchpad());
  k->add_operand(DNNL_ARG_FROM, 0, from, from);
  k->add_operand(DNNL_ARG_TO, 2, to, to);
  k->set_main<dnnl::reorder>(pd, 0);
  k->finish(what);
  return k;
}

}  // namespace ws::exec
